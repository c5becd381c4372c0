#!/usr/bin/env bash
# Docker environment benchmark: API exec vs `docker exec` CLI round trip, and start to
# first tool command with a cached tool image. Results go to bench/docker/RESULTS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/build-test-image.sh
PROFILE="${PROFILE:-dev}"   # PROFILE=release for optimised figures
cargo run -q -p rondo-env --profile "$PROFILE" --example exec_bench -- "${ITER:-100}" "${STARTS:-5}"
if command -v hyperfine >/dev/null; then
  id=$(docker run -d --network none rondo-test-base:latest sleep infinity)
  trap 'docker rm -f "$id" >/dev/null' EXIT
  hyperfine -N --warmup 5 --runs "${ITER:-100}" "docker exec $id true"
fi
