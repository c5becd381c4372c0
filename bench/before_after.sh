#!/usr/bin/env bash
# Two release builds side by side in one invocation, for an issue's closing note:
#
#   bash bench/before_after.sh BEFORE_DIR AFTER_DIR [--rounds N] [--quick]
#
# Each DIR is a cargo `target/release` folder holding `rondo` and `examples/bench_engine`
# (build the old commit in its own target dir: `git archive OLD | tar -x -C /tmp/old &&
# CARGO_TARGET_DIR=/tmp/old-target cargo build --release --bin rondo --example bench_engine`).
# Prints one Markdown table: for each figure, before and after, measured alternately so
# that both builds see the same machine. Figures:
#   serve     bench/serve/run.sh, 1,000 asks from 100 clients: x the ideal (median of rounds)
#   eval      bench/eval/run.sh, 1,000 cases at -c 50: x the ideal (median of rounds)
#   durable   bench_engine loop, checkpoints on: run / paired write+fdatasync floor
#   check     `rondo check --offline` of ds_star and of 10,000 generated roles: CPU
#             median (bench/check/time.py) and instructions (callgrind)
#   steps     bench_engine chain and loop, no run folder: us a step and instructions
# BEFORE_TREE=DIR: the old commit's source tree; its own workflows/ds_star.rondo is what the
# old binary checks (the file's syntax has moved on since, so the new one may not parse).
# --quick: 100 asks / cases, one round, fewer repeats (CI, so the script cannot rot).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
usage() {
  echo "usage: bash bench/before_after.sh BEFORE_DIR AFTER_DIR [--rounds N] [--quick]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
# Absolute: the benchmarks run from other folders.
before=$(realpath "$1") after=$(realpath "$2")
shift 2
rounds=3 quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --quick) quick=1; rounds=1; shift ;;
    *) usage ;;
  esac
done
for d in "$before" "$after"; do
  for b in rondo examples/bench_engine; do
    [ -x "$d/$b" ] || { echo "no $d/$b" >&2; exit 2; }
  done
done
need=()
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
command -v curl >/dev/null 2>&1 || need+=(curl)
[ -x /usr/bin/time ] || need+=(time)
if ((${#need[@]})); then bash scripts/apt-install.sh "${need[@]}"; fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/rondo-before-after.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
python3 bench/engine/gen.py "$scratch/workloads" >/dev/null
mkdir "$scratch/check"
cp -r bench/check/prompts "$scratch/check/"
python3 bench/check/gen.py --roles 10000 --out "$scratch/check/big_10k.rondo" >/dev/null
requests=1000 cases=1000 repeats=5 cpu_runs=21 big_runs=5
if ((quick)); then requests=100 cases=100 repeats=1 cpu_runs=3 big_runs=1; fi

load() { cut -d' ' -f1 /proc/loadavg; }
declare -A got
add() { got[$1]="${got[$1]:+${got[$1]} }$2"; }
median() { tr ' ' '\n' <<<"$1" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
instructions() {
  local log=$scratch/callgrind.log
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --log-file="$log" "$@" >/dev/null 2>&1
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log" | tail -1
}
loads=()
for round in $(seq "$rounds"); do
  for side in before after; do
    dir=${!side}
    loads+=("$(load)")
    line=$(RONDO_BIN="$dir/rondo" bash bench/serve/run.sh --rounds 1 --requests "$requests" 2>/dev/null |
      sed -n 's/.*"ratio": \([0-9.]*\).*/\1/p' | head -1)
    add "$side.serve" "${line:-nan}"
    line=$(RONDO_BIN="$dir/rondo" bash bench/eval/run.sh --cases "$cases" 2>/dev/null |
      sed -n 's/.*ideal [0-9.]* s, \([0-9.]*\)x).*/\1/p' | head -1)
    add "$side.eval" "${line:-nan}"
    line=$("$dir/examples/bench_engine" --workload loop --mode on --repeats "$repeats" \
      --dir "$scratch/workloads" --tmp "$scratch/tmp" | python3 -c \
      'import json,sys; print(json.loads(sys.stdin.readline())["paired_floor_ratio"])')
    add "$side.durable" "$line"
    for w in chain loop; do
      line=$("$dir/examples/bench_engine" --workload "$w" --mode off --repeats "$repeats" \
        --dir "$scratch/workloads" --tmp "$scratch/tmp" | python3 -c \
        'import json,sys; print(json.loads(sys.stdin.readline())["drive_per_step_us"])')
      add "$side.$w" "$line"
    done
    ds_star=workflows/ds_star.rondo
    if [ "$side" = before ] && [ -n "${BEFORE_TREE:-}" ]; then ds_star=$BEFORE_TREE/$ds_star; fi
    timed=$(python3 bench/check/time.py --runs "$cpu_runs" --warmup 2 -- "$dir/rondo" check \
      --offline "$ds_star")
    add "$side.ds_star" "$(sed -n 's/.*CPU median \([0-9.]*\) ms.*/\1/p' <<<"$timed")"
    add "$side.ds_star_wall" "$(sed -n 's/.*wall median \([0-9.]*\) ms.*/\1/p' <<<"$timed")"
    line=$(python3 bench/check/time.py --runs "$big_runs" --warmup 1 -- "$dir/rondo" check \
      --offline "$scratch/check/big_10k.rondo" | sed -n 's/.*CPU median \([0-9.]*\) ms.*/\1/p')
    add "$side.big" "$line"
  done
done
for side in before after; do
  dir=${!side}
  ds_star=workflows/ds_star.rondo
  if [ "$side" = before ] && [ -n "${BEFORE_TREE:-}" ]; then ds_star=$BEFORE_TREE/$ds_star; fi
  got[$side.i_ds_star]=$(instructions "$dir/rondo" check --offline "$ds_star")
  got[$side.i_big]=$(instructions "$dir/rondo" check --offline "$scratch/check/big_10k.rondo")
  for w in chain loop; do
    got[$side.i_$w]=$(instructions "$dir/examples/bench_engine" --workload "$w" --mode off \
      --repeats 1 --dir "$scratch/workloads" --tmp "$scratch/tmp")
  done
done

m() { median "${got[$1]}"; }
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average at the start of each measurement: ${loads[*]}"
echo "Rounds: $rounds (before and after alternated); medians, all rounds in brackets."
echo
echo "| figure | target | before | after |"
echo "| --- | --- | --- | --- |"
echo "| serve: $requests asks / 100 clients, x ideal | <= 1.5 | $(m before.serve) (${got[before.serve]}) | $(m after.serve) (${got[after.serve]}) |"
echo "| eval: $cases cases at -c 50, x ideal | <= 1.3 | $(m before.eval) (${got[before.eval]}) | $(m after.eval) (${got[after.eval]}) |"
echo "| durable loop step / paired write+fdatasync | <= 1.3 | $(m before.durable) (${got[before.durable]}) | $(m after.durable) (${got[after.durable]}) |"
echo "| check ds_star, CPU ms (whole process) | < 5 | $(m before.ds_star) | $(m after.ds_star) |"
echo "| check ds_star, wall ms (whole process) | < 5 | $(m before.ds_star_wall) | $(m after.ds_star_wall) |"
echo "| check ds_star, instructions | | ${got[before.i_ds_star]} | ${got[after.i_ds_star]} |"
echo "| check 10,000 roles, CPU ms | < 300 | $(m before.big) | $(m after.big) |"
echo "| check 10,000 roles, instructions | | ${got[before.i_big]} | ${got[after.i_big]} |"
echo "| chain step (no I/O), us | < 0.6 | $(m before.chain) | $(m after.chain) |"
echo "| loop step (no I/O), us | < 0.2 | $(m before.loop) | $(m after.loop) |"
echo "| bench_engine chain, instructions (whole process) | | ${got[before.i_chain]} | ${got[after.i_chain]} |"
echo "| bench_engine loop, instructions (whole process) | | ${got[before.i_loop]} | ${got[after.i_loop]} |"
