#!/usr/bin/env bash
# Side-by-side benchmark: rondo-provider vs LangGraph against the same fake_llm.py.
#   bench/providers/run.sh [--repeats N] [--port P]
# Starts fake_llm.py on P (100 ms) and P+1 (0 ms), runs the server floor (curl --parallel),
# LangGraph's fanout/llm_seq (their own script, --no-server) and ours, then prints a table.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LG="${LG_DIR:-$ROOT/bench/langgraph}"
VENV="${LG_VENV:-/tmp/lg-venv}"
PORT=8765
REPEATS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT_DIR:-/tmp/rondo-provider-bench}"
mkdir -p "$OUT"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setting up the LangGraph venv in $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$LG/results/pip-freeze.txt"
fi

(cd "$ROOT" && cargo build -q --release -p rondo-provider --example bench_fanout)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/bench_fanout"

python3 "$LG/fake_llm.py" --port "$PORT" --latency-ms 100 >/dev/null 2>&1 & S1=$!
python3 "$LG/fake_llm.py" --port "$((PORT + 1))" --latency-ms 0 >/dev/null 2>&1 & S2=$!
trap 'kill $S1 $S2 2>/dev/null || true' EXIT
for p in "$PORT" "$((PORT + 1))"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/health" >/dev/null && break; sleep 0.05; done
done

# Each of ours in its own process, so peak RSS is that workload's.
"$BIN" --port "$PORT" --workloads fanout --repeats "$REPEATS" > "$OUT/rondo.jsonl"
"$BIN" --port "$PORT" --workloads llm_seq --repeats "$REPEATS" >> "$OUT/rondo.jsonl"
(cd "$LG" && "$VENV/bin/python" bench_langgraph.py --no-server --port "$PORT" --repeats "$REPEATS" \
  --workloads fanout_floor_curl,fanout,llm_seq --out "$OUT/langgraph.jsonl" >/dev/null)

python3 "$ROOT/bench/providers/summarize.py" "$OUT/rondo.jsonl" "$OUT/langgraph.jsonl"
