#!/usr/bin/env bash
# `rondo serve` under load (issue 16): 1,000 POST /ask from 100 concurrent clients on
# one-call runs against bench/langgraph/fake_llm.py at 100 ms.
#   bench/serve/run.sh [--quick] [--rounds N] [--requests N] [--clients N] [--port P] [--llm-port P]
# --quick (CI): one round of 200 asks from 20 clients (ideal 1 s).
# Builds rondo (release), starts the fake server and `rondo serve --concurrency 100`, runs
# load.py ROUNDS times (a fresh run directory each), and prints each round's JSON line
# plus the server's peak RSS (VmHWM) and its CPU time (user + system) per ask, which a
# loaded machine does not inflate the way it does wall time. Results: bench/serve/RESULTS.md. RONDO_BIN=path runs
# that binary instead of building one (two builds side by side).
set -euo pipefail
[ -x /usr/bin/time ] || bash "$(dirname "$0")/../../scripts/apt-install.sh" time
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/bench/serve"
FAKE="${FAKE_LLM:-$ROOT/bench/langgraph/fake_llm.py}"
ROUNDS=3 REQUESTS=1000 CLIENTS=100 LLM_PORT=8795 PORT=8796
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --quick) ROUNDS=1 REQUESTS=200 CLIENTS=20; shift ;;
    --port) PORT="$2"; shift 2 ;;
    --llm-port) LLM_PORT="$2"; shift 2 ;;
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
FAKE_PID=$!
# CPU time (user + system) of a process so far, in ms: fields 14 and 15 of /proc/PID/stat.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15) * 1000 / hz}' "/proc/$1/stat"; }
# The fake model must answer before the first ask: a round started earlier fails its
# first asks at `error` (connection refused), which is the bench's fault, not the server's.
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$LLM_PORT/health" >/dev/null && break; sleep 0.05; done
export FAKE_LLM_URL="http://127.0.0.1:$LLM_PORT/v1"
for round in $(seq "$ROUNDS"); do
  (cd "$TMP" && exec "$RONDO" serve "$HERE/one_call.rondo" --port "$PORT" \
     --concurrency 100 --run-dir "$TMP/runs-$round" 2>"$TMP/serve.log") &
  SERVER=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
  fake_before=$(cpu_ms "$FAKE_PID")
  line=$(/usr/bin/time -f "%U %S" -o "$TMP/load.time" python3 "$HERE/load.py" --port "$PORT" \
           --requests "$REQUESTS" --clients "$CLIENTS" --server-concurrency 100)
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$SERVER/status")
  # CPU per ask of the server, of the fake model and of the load client (all on the same
  # cores): what the machine must do per ask, which a loaded machine does not inflate.
  server=$(cpu_ms "$SERVER") fake=$(( $(cpu_ms "$FAKE_PID") - fake_before ))
  client=$(awk '{printf "%d", ($1 + $2) * 1000}' "$TMP/load.time")
  per() { awk -v ms="$1" -v n="$REQUESTS" 'BEGIN {printf "%.2f", ms / n}'; }
  echo "round $round: $line peak_rss_kb=$rss cpu_ms_per_ask: server=$(per "$server")" \
       "fake_llm=$(per "$fake") load_client=$(per "$client") load=$(cut -d' ' -f1 /proc/loadavg)"
  kill -TERM "$SERVER"; wait "$SERVER" || true
done
