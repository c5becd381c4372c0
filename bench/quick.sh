#!/usr/bin/env bash
# Every benchmark of bench/, once, in a quick mode: CI runs this so that no script rots
# (a benchmark that no longer builds, checks or runs fails here). The figures it prints are
# not comparable with the recorded ones: sizes and repeats are cut to a few seconds each.
# The speed targets themselves are guarded by bench/guard.sh (instruction counts).
#
#   bash bench/quick.sh            # all of them
#   bash bench/quick.sh serve eval # only these (names: the list below)
#
# Each script installs what it needs (Debian packages through scripts/apt-install.sh, the
# LangGraph venv from PyPI). One release build of rondo serves them all.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
all=(check check_scale engine providers serve eval output docker lsp scale before_after)
if (($#)); then chosen=("$@"); else chosen=("${all[@]}"); fi
for name in "${chosen[@]}"; do
  [[ " ${all[*]} " == *" $name "* ]] || {
    echo "unknown benchmark '$name' (one of: ${all[*]})" >&2
    exit 2
  }
done

command -v python3 >/dev/null 2>&1 || bash scripts/apt-install.sh python3
python3 -c 'import venv, ensurepip' 2>/dev/null || bash scripts/apt-install.sh python3-venv
command -v curl >/dev/null 2>&1 || bash scripts/apt-install.sh curl

target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
echo "==> building rondo and examples/bench_engine (release)" >&2
cargo build --quiet --release --bin rondo --example bench_engine
export RONDO_BIN=$target/release/rondo
scratch=$(mktemp -d "${TMPDIR:-/tmp}/rondo-bench-quick.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# The LangGraph venv (engine, providers) lives outside the repository, built once per machine.
export LG_VENV=${LG_VENV:-${TMPDIR:-/tmp}/lg-venv}

run() {
  local name=$1 start=$SECONDS
  shift
  printf '\n==> bench %s: %s\n' "$name" "$*" >&2
  if ! "$@"; then
    echo "bench $name failed: $*" >&2
    exit 1
  fi
  printf '==> bench %s: %ds\n' "$name" "$((SECONDS - start))" >&2
}

for name in "${chosen[@]}"; do
  case $name in
    check) run check bash bench/check/run.sh --quick ;;
    check_scale) run check_scale env N=2000 bash bench/check_scale.sh ;;
    engine)
      run engine env TMP_DIR="$scratch/engine" bash bench/engine/run.sh --repeats 1 \
        --hyperfine-runs 3
      ;;
    providers) run providers env OUT_DIR="$scratch/providers" bash bench/providers/run.sh --repeats 1 ;;
    serve) run serve bash bench/serve/run.sh --quick ;;
    eval) run eval bash bench/eval/run.sh --quick ;;
    output) run output env PROFILE=release SIZE=20M bash bench/output/run.sh ;;
    docker) run docker env PROFILE=release ITER=10 STARTS=1 bash bench/docker/run.sh ;;
    lsp)
      run lsp python3 bench/lsp/latency.py --bin "$RONDO_BIN" --edits 5 --big-edits 3 \
        --roles 2000
      ;;
    scale) run scale bash bench/scale/run.sh --quick ;;
    before_after)
      # The same build on both sides: the script's own plumbing, not a comparison.
      run before_after bash bench/before_after.sh "$target/release" "$target/release" --quick
      ;;
  esac
done
echo "==> every benchmark ran: ${chosen[*]}" >&2
