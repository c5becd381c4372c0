#!/usr/bin/env bash
# Benchmarks of `rondo check` (release build, whole process, hyperfine):
#   workflows/ds_star.rondo                          target: median < 5 ms
#   generated 10,000 roles / 31,000 routes (gen.py)  target: median < 300 ms
#   generated 75,000 roles / 232,500 routes         target: linear, at most 9x the
#                                                    10,000 figure (12x per 10x roles)
# 100,000 roles would be 21 MB, over the 16 MiB a `.rondo` file may have
# (MAX_SOURCE_BYTES in src/source.rs); 75,000 roles are 15.9 MB.
# then the criterion benchmark of parse + compile + check. Writes bench/check/RESULTS.md
# (medians, min-max, the load average: on a shared machine the spread says how far to
# trust a median).
#
#   bench/check/run.sh            # hyperfine + criterion
#   bench/check/run.sh --quick    # hyperfine only
#   RONDO_BIN=path bench/check/run.sh --quick   # that binary, no build
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD

command -v hyperfine >/dev/null || bash scripts/apt-install.sh hyperfine

if [ -z "${RONDO_BIN:-}" ]; then
  cargo build --release -p rondo --bin rondo
fi
BIN=${RONDO_BIN:-$ROOT/target/release/rondo}

BIG=bench/check/big_10k.rondo
HUGE=bench/check/big_75k.rondo
[ -f "$BIG" ] || python3 bench/check/gen.py --roles 10000 --out "$BIG" >/dev/null
[ -f "$HUGE" ] || python3 bench/check/gen.py --roles 75000 --out "$HUGE" >/dev/null

# All must check clean, or the timings mean nothing.
"$BIN" check --offline workflows/ds_star.rondo "$BIG" "$HUGE"

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

hyperfine --warmup 5 --min-runs 50 -N \
  --export-json "$OUT/ds_star.json" \
  "$BIN check workflows/ds_star.rondo --offline"
hyperfine --warmup 2 --min-runs 15 -N \
  --export-json "$OUT/big.json" \
  "$BIN check $BIG --offline"
hyperfine --warmup 1 --min-runs 5 -N \
  --export-json "$OUT/huge.json" \
  "$BIN check $HUGE --offline"

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

stat_ms() {
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print("%.2f %.1f %.1f" % (r["median"] * 1000, r["min"] * 1000, r["max"] * 1000))' "$1"
}
read -r DS DS_MIN DS_MAX <<<"$(stat_ms "$OUT/ds_star.json")"
read -r BG BG_MIN BG_MAX <<<"$(stat_ms "$OUT/big.json")"
read -r HG HG_MIN HG_MAX <<<"$(stat_ms "$OUT/huge.json")"
RATIO=$(python3 -c "print('%.1f' % ($HG / $BG))")

echo
echo "median ds_star      : $DS ms (target < 5 ms)"
echo "median 10,000 roles : $BG ms (target < 300 ms)"
echo "median 75,000 roles : $HG ms, ${RATIO}x the 10,000 figure (target <= 9x)"

# The hand-written `## Notes` of the last results stay below the new table.
NOTES=$(sed -n '/^## Notes/,$p' bench/check/RESULTS.md 2>/dev/null || true)
{
  echo "# rondo check: measured"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load average $LOAD_BEFORE before and"
  echo "$LOAD_AFTER after; hyperfine, whole process, release build, \`--offline\` (no"
  echo "environment-variable tier). Written by \`bench/check/run.sh\`."
  echo
  echo "| workload | median | min–max | target |"
  echo "| --- | --- | --- | --- |"
  echo "| \`workflows/ds_star.rondo\` | $DS ms | $DS_MIN–$DS_MAX ms | < 5 ms |"
  echo "| generated 10,000 roles / 31,000 routes (\`gen.py\`) | $BG ms | $BG_MIN–$BG_MAX ms | < 300 ms |"
  echo "| generated 75,000 roles / 232,500 routes | $HG ms | $HG_MIN–$HG_MAX ms | ≤ 9× the 10,000 figure (12× per 10×): ${RATIO}× |"
  if [ -n "$NOTES" ]; then
    echo
    echo "$NOTES"
  fi
} > bench/check/RESULTS.md
echo "wrote bench/check/RESULTS.md"

if [ "${1:-}" != "--quick" ]; then
  cargo bench -p rondo --bench check
fi
