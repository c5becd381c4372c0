#!/usr/bin/env bash
# `rondo eval` throughput: 1,000 cases of a one-call workflow (ask.rondo) against
# fake_llm.py at 100 ms, concurrency 50. The ideal is 1,000 x 0.1 s / 50 = 2 s.
#   bench/eval/run.sh [--quick] [--cases N] [--concurrency C] [--port P]
# --quick (CI): 200 cases at concurrency 10 (ideal 2 s). Prints the process's CPU time
# (user + system) per case too, which a loaded machine does not inflate as it does wall time.
set -euo pipefail
[ -x /usr/bin/time ] || bash "$(dirname "$0")/../../scripts/apt-install.sh" time
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LG="${LG_DIR:-$ROOT/bench/langgraph}"
CASES=1000
CONC=50
PORT=8795
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) CASES="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --quick) CASES=200 CONC=10; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN="${RONDO_BIN:-}"
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build -q --release --bin rondo)
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/rondo"
fi
WORK="$(mktemp -d)"
python3 "$LG/fake_llm.py" --port "$PORT" --latency-ms 100 >/dev/null 2>&1 & S=$!
trap 'kill $S 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.05; done

python3 - "$CASES" > "$WORK/cases.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"id": f"q{i:04d}", "inputs": {"question": f"What is {i}+1?"}, "expect": {"contains": "ok"}}))
PY

export FAKE_LLM_URL="http://127.0.0.1:$PORT/v1" FAKE_LLM_KEY=unused
/usr/bin/time -f "%e %M %U %S" -o "$WORK/time" "$BIN" eval "$ROOT/bench/eval/ask.rondo" \
  --dataset "$WORK/cases.jsonl" --out "$WORK/res" -c "$CONC" -q > "$WORK/table"
read -r WALL RSS_KB USER_S SYS_S < "$WORK/time"
IDEAL=$(python3 -c "print($CASES * 0.1 / $CONC)")
python3 - "$WORK/res/summary.json" "$WALL" "$IDEAL" "$RSS_KB" "$CASES" "$CONC" "$USER_S" "$SYS_S" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall, ideal, rss, n, c = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
user, system = float(sys.argv[7]), float(sys.argv[8])
load = open("/proc/loadavg").read().split()[0]
print(f"cases {n}, concurrency {c}: {wall:.2f} s wall (ideal {ideal:.2f} s, {wall / ideal:.2f}x), "
      f"peak RSS {rss / 1024:.0f} MiB, success_rate {s['success_rate']}, n {s['n']}, "
      f"avg_latency_sec {s['avg_latency_sec']:.3f}, cpu {(user + system) * 1000 / int(n):.2f} ms/case "
      f"(user {user:.2f} s, sys {system:.2f} s), load {load}")
PY
