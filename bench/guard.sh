#!/usr/bin/env bash
# Regression guard for the speed targets, in instructions rather than seconds: the machine
# is shared and noisy, callgrind's counts are not (the same binary and input give the same
# count within a fraction of a percent, whatever else runs).
#
#   bash bench/guard.sh            # measure, compare with bench/baseline/instructions.json
#   bash bench/guard.sh --bless    # measure and store the figures as the new baseline
#
# Fails when a workload takes more than 25% more instructions than its baseline (and says
# so for one that got more than 25% cheaper, so the baseline is lowered on purpose).
# Workloads (release build, one process each):
#   check_ds_star   `rondo check --offline workflows/ds_star.rondo`, the whole process
#   check_10k       `rondo check --offline` of a generated 10,000-role workflow
#   run_chain       examples/bench_engine: 200 builtin steps, in-process, no run folder
#   run_loop        the same: 3,000 builtin steps of a bounded loop
#   run_loop_llm    the same loop with scripted llm roles (prompt render, reply parse)
#   rondo_run_loop  `rondo run -q --no-checkpoint` of the loop, the whole process
# Installs valgrind with scripts/apt-install.sh when it is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
baseline=bench/baseline/instructions.json
threshold=25
bless=0
case "${1:-}" in
  --bless) bless=1 ;;
  "") ;;
  *)
    echo "usage: bash bench/guard.sh [--bless]" >&2
    exit 2
    ;;
esac

command -v valgrind >/dev/null 2>&1 || bash scripts/apt-install.sh valgrind
command -v python3 >/dev/null 2>&1 || bash scripts/apt-install.sh python3

target=${CARGO_TARGET_DIR:-$root/target}
echo "==> building rondo and examples/bench_engine (release)" >&2
cargo build --quiet --release --bin rondo --example bench_engine
rondo=$target/release/rondo
engine=$target/release/examples/bench_engine

scratch=$(mktemp -d "${TMPDIR:-/tmp}/rondo-guard.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
python3 bench/engine/gen.py "$scratch/workloads" >/dev/null
# Beside a copy of its prompts folder, as bench/check keeps it.
mkdir "$scratch/check"
cp -r bench/check/prompts "$scratch/check/"
python3 bench/check/gen.py --roles 10000 --out "$scratch/check/big_10k.rondo" >/dev/null

# Instructions of one command under callgrind (its children are not followed).
count() {
  local log=$scratch/callgrind.log
  if ! valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$log" "$@" \
    >/dev/null 2>"$scratch/stderr"; then
    echo "failed under callgrind: $*" >&2
    cat "$scratch/stderr" "$log" >&2
    exit 1
  fi
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log" | tail -1
}

declare -A measured
echo "==> measuring (callgrind; a minute or two)" >&2
measured[check_ds_star]=$(count "$rondo" check --offline workflows/ds_star.rondo)
measured[check_10k]=$(count "$rondo" check --offline "$scratch/check/big_10k.rondo")
for w in chain loop loop_llm; do
  measured[run_$w]=$(count "$engine" --workload "$w" --mode off --repeats 1 \
    --dir "$scratch/workloads" --tmp "$scratch/tmp")
done
measured[rondo_run_loop]=$(count "$rondo" run -q --no-checkpoint \
  "$scratch/workloads/loop/loop.rondo")

names=(check_ds_star check_10k run_chain run_loop run_loop_llm rondo_run_loop)
json=$(for n in "${names[@]}"; do printf '%s %s\n' "$n" "${measured[$n]}"; done |
  python3 -c 'import json,sys; print(json.dumps({k: int(v) for k, v in (l.split() for l in sys.stdin)}, indent=2))')

if ((bless)); then
  mkdir -p "$(dirname "$baseline")"
  printf '%s\n' "$json" >"$baseline"
  echo "baseline written to $baseline:" >&2
  cat "$baseline" >&2
  exit 0
fi

printf '%s\n' "$json" >"$scratch/measured.json"
python3 - "$scratch/measured.json" "$baseline" "$threshold" <<'EOF'
import json, sys
measured = json.load(open(sys.argv[1]))
baseline = json.load(open(sys.argv[2]))
threshold = float(sys.argv[3])
failed = False
print(f"{'workload':16} {'baseline':>14} {'now':>14} {'ratio':>7}")
for name, now in measured.items():
    base = baseline.get(name)
    if base is None:
        print(f"{name:16} {'(none)':>14} {now:14,} {'':>7}  no baseline: run with --bless")
        failed = True
        continue
    ratio = now / base
    note = ""
    if ratio > 1 + threshold / 100:
        note = f"  slower by more than {threshold:.0f}%"
        failed = True
    elif ratio < 1 - threshold / 100:
        note = "  faster: lower the baseline (--bless) to keep the gain"
    print(f"{name:16} {base:14,} {now:14,} {ratio:7.2f}{note}")
sys.exit(1 if failed else 0)
EOF
