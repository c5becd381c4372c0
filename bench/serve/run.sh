#!/usr/bin/env bash
# `rondo serve` under load (issue 16): 1,000 POST /ask from 100 concurrent clients on
# one-call runs against bench/langgraph/fake_llm.py at 100 ms.
#   bench/serve/run.sh [--rounds N] [--requests N] [--clients N]
# Builds rondo (release), starts the fake server and `rondo serve --concurrency 100`, runs
# load.py ROUNDS times (a fresh run directory each), and prints each round's JSON line
# plus the server's peak RSS (VmHWM). Results: bench/serve/RESULTS.md. RONDO_BIN=path runs
# that binary instead of building one (two builds side by side).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/bench/serve"
FAKE="${FAKE_LLM:-$ROOT/bench/langgraph/fake_llm.py}"
ROUNDS=3 REQUESTS=1000 CLIENTS=100 LLM_PORT=8795 PORT=8796
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
RONDO="${RONDO_BIN:-}"
if [ -z "$RONDO" ]; then
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
  RONDO="${CARGO_TARGET_DIR:-$ROOT/target}/release/rondo"
fi
TMP="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
python3 "$FAKE" --port "$LLM_PORT" --latency-ms 100 >/dev/null 2>&1 &
# The fake model must answer before the first ask: a round started earlier fails its
# first asks at `error` (connection refused), which is the bench's fault, not the server's.
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$LLM_PORT/health" >/dev/null && break; sleep 0.05; done
export FAKE_LLM_URL="http://127.0.0.1:$LLM_PORT/v1"
for round in $(seq "$ROUNDS"); do
  (cd "$TMP" && exec "$RONDO" serve "$HERE/one_call.rondo" --port "$PORT" \
     --concurrency 100 --run-dir "$TMP/runs-$round" 2>"$TMP/serve.log") &
  SERVER=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
  line=$(python3 "$HERE/load.py" --port "$PORT" --requests "$REQUESTS" --clients "$CLIENTS" \
           --server-concurrency 100)
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$SERVER/status")
  echo "round $round: $line peak_rss_kb=$rss"
  kill -TERM "$SERVER"; wait "$SERVER" || true
done
