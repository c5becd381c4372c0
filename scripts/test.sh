#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (Debian packages,
# the locally built Docker test image), then runs every test. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
# The viewer tests (tests/viewer.rs) run the page in a headless Chromium.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# Iter's demo runs its default build command, `go build ./... && go test ./...`.
command -v go >/dev/null 2>&1 || need+=(golang-go)
# Local tool installs run pip offline against Debian's wheelhouse; setuptools < 70
# needs the `wheel` wheel there to build a tool.
compgen -G "/usr/share/python-wheels/wheel-*.whl" >/dev/null || need+=(python3-wheel-whl)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}"
fi

# The Docker tests need the local base image (no registry is reachable).
bash scripts/build-test-image.sh

export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo build --workspace --quiet
cargo test --workspace
# The `test` blocks inside the five reference workflows.
./target/debug/rondo test workflows/*.rondo
