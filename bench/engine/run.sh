#!/usr/bin/env bash
# Engine overhead, side by side with LangGraph in one run (issue 3).
#   bench/engine/run.sh [--repeats N] [--port P] [--hyperfine-runs N]
# 1. sets up the LangGraph venv if missing (as bench/langgraph/README.md says),
# 2. regenerates and checks the Rondo workloads (gen.py, `rondo check`),
# 3. builds `rondo` and examples/bench_engine (release),
# 4. runs LangGraph's chain,loop (bench_langgraph.py, each workload in a fresh child),
#    then LangGraph's loop with SqliteSaver (langgraph_sqlite.py, durability sync and async),
#    then ours (bench_engine: chain, loop, loop_llm; checkpoints off, then on; and the
#    machine's append + fdatasync floor in the same folder),
#    then `rondo run` of the loop as a whole process (hyperfine, /usr/bin/time for RSS),
# 5. prints the side-by-side Markdown table (summarize.py).
# Outputs go to $OUT_DIR (default /tmp/rondo-bench-engine/out).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/bench/engine"
LG="${LG_DIR:-$ROOT/bench/langgraph}"
VENV="${LG_VENV:-/tmp/lg-venv}"
PORT=8791          # bench_langgraph.py starts its fake servers on PORT and PORT+1
REPEATS=3
HF_RUNS=20
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --hyperfine-runs) HF_RUNS="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
if ((${#need[@]})); then bash "$ROOT/scripts/apt-install.sh" "${need[@]}"; fi
TMP="${TMP_DIR:-/tmp/rondo-bench-engine}"
OUT="${OUT_DIR:-$TMP/out}"
mkdir -p "$OUT"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setting up the LangGraph venv in $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$LG/results/pip-freeze.txt"
fi
if ! "$VENV/bin/python" -c "import langgraph.checkpoint.sqlite" 2>/dev/null; then
  "$VENV/bin/pip" install -q langgraph-checkpoint-sqlite
fi

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
(cd "$ROOT" && cargo build -q --release --bin rondo --example bench_engine)
RONDO="$TARGET/release/rondo"
BIN="$TARGET/release/examples/bench_engine"

python3 "$HERE/gen.py" >/dev/null
for w in chain loop loop_llm; do
  "$RONDO" check "$HERE/workloads/$w/$w.rondo" >&2
done

{
  echo "## Machine"
  echo
  echo "- $(nproc) vCPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, Linux $(uname -r)"
  echo "- $(rustc --version), release profile; $("$VENV/bin/python" --version) for LangGraph"
  echo "- $(df -T "$TMP" | awk 'NR==2 {print "run directories on " $2 " (" $1 ")"}')"
  echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- $(date -u +%Y-%m-%dT%H:%MZ), repeats $REPEATS (1 warm-up + $REPEATS timed, min / median)"
} > "$OUT/machine.md"

echo "LangGraph (chain, loop)..." >&2
(cd "$LG" && "$VENV/bin/python" bench_langgraph.py --workloads chain,loop --repeats "$REPEATS" \
  --port "$PORT" --out "$OUT/langgraph.jsonl" >/dev/null)

echo "LangGraph + SqliteSaver (loop; durability sync, then async)..." >&2
: > "$OUT/langgraph-sqlite.jsonl"
for d in sync async; do
  "$VENV/bin/python" "$HERE/langgraph_sqlite.py" --lg-dir "$LG" --tmp "$TMP/lg-sqlite" \
    --repeats "$REPEATS" --durability "$d" >> "$OUT/langgraph-sqlite.jsonl"
done

echo "Rondo (chain, loop, loop_llm; checkpoints off and on; the fsync floor)..." >&2
"$BIN" --repeats "$REPEATS" --tmp "$TMP/runs" > "$OUT/rondo.jsonl"

echo "rondo run (whole process, hyperfine)..." >&2
LOOP="$HERE/workloads/loop/loop.rondo"
CMD="$RONDO run $LOOP --no-checkpoint -q --run-dir $TMP/cli-runs"
hyperfine -N --warmup 1 --runs "$HF_RUNS" --export-json "$OUT/hyperfine.json" "$CMD" >/dev/null 2>&1
RSS_KB=$( { /usr/bin/time -f '%M' $CMD 2>&1 >/dev/null; } | tail -1)
rm -rf "$TMP/cli-runs"

cat "$OUT/machine.md"
echo
python3 "$HERE/summarize.py" "$OUT/rondo.jsonl" "$OUT/langgraph.jsonl" "$OUT/hyperfine.json" "$RSS_KB" \
  "$OUT/langgraph-sqlite.jsonl"
