#!/usr/bin/env bash
# Benchmarks of `rondo check` (release build): hyperfine on workflows/ds_star.rondo
# (target: median < 10 ms) and on a generated 10,000-role / 30,000-edge workflow
# (target: < 100 ms), then the criterion benchmark of parse + compile + check.
#
#   bench/check/run.sh            # hyperfine + criterion
#   bench/check/run.sh --quick    # hyperfine only
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD

if ! command -v hyperfine >/dev/null; then
  echo "hyperfine is missing: apt-get install hyperfine" >&2
  exit 2
fi

cargo build --release -p rondo --bin rondo
BIN=$ROOT/target/release/rondo

BIG=bench/check/big_10k.rondo
[ -f "$BIG" ] || python3 bench/check/gen.py --roles 10000 --out "$BIG" >/dev/null

# Both must check clean, or the timings mean nothing.
"$BIN" check --offline workflows/ds_star.rondo "$BIG"

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

hyperfine --warmup 5 --min-runs 50 -N \
  --export-json "$OUT/ds_star.json" \
  "$BIN check workflows/ds_star.rondo --offline"
hyperfine --warmup 2 --min-runs 10 -N \
  --export-json "$OUT/big.json" \
  "$BIN check $BIG --offline"

median_ms() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.2f" % (r["median"]*1000))' "$1"
}
DS=$(median_ms "$OUT/ds_star.json")
BG=$(median_ms "$OUT/big.json")
echo
echo "median rondo check --offline workflows/ds_star.rondo : $DS ms (target < 10 ms)"
echo "median rondo check --offline $BIG     : $BG ms (target < 100 ms)"

range_ms() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.1f–%.1f" % (r["min"]*1000, r["max"]*1000))' "$1"
}
{
  echo "# rondo check: measured"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end;"
  echo "hyperfine, whole process, \`--offline\` (no environment-variable tier)."
  echo
  echo "| workload | median | min–max | target |"
  echo "| --- | --- | --- | --- |"
  echo "| \`workflows/ds_star.rondo\` | $DS ms | $(range_ms "$OUT/ds_star.json") ms | < 10 ms |"
  echo "| generated 10,000 roles / 30,000 routes (\`gen.py\`) | $BG ms | $(range_ms "$OUT/big.json") ms | < 100 ms |"
} > bench/check/RESULTS.md
echo "wrote bench/check/RESULTS.md"

if [ "${1:-}" != "--quick" ]; then
  cargo bench -p rondo --bench check
fi
