#!/usr/bin/env bash
# One driver for hundreds of runs: `rondo eval --engine process -c N` over N cases of
# scale.rondo (3 rounds of a tool step in the run's sandbox and an llm step against
# fake_llm.py at 100 ms), every run in flight at once. Measures the driver alone (its own
# CPU and peak RSS, from /proc), everything it started (driver + zygote + sandboxes, CPU
# of every process reaped by measure.py) and the fake LLM server's CPU, whose sum over the
# machine's cores is the batch's CPU floor: no wall time on this machine can be below it.
# RONDO_PROCESS_ZYGOTE=0 starts every runner directly (no zygote), to compare.
#   bench/scale/run.sh [--cases N] [--repeats K] [--port P] [--engine E]
#   bench/scale/run.sh --quick     # 50 cases, once; fails unless every case passed and
#                                  # no sandbox process is left (CI)
# RONDO_BIN=path/to/rondo skips the release build.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/bench/scale"
[ -x /usr/bin/time ] || bash "$ROOT/scripts/apt-install.sh" time
command -v python3 >/dev/null 2>&1 || bash "$ROOT/scripts/apt-install.sh" python3
command -v curl >/dev/null 2>&1 || bash "$ROOT/scripts/apt-install.sh" curl
CASES=500
REPEATS=3
PORT=8796
ENGINE=process
QUICK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) CASES="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --engine) ENGINE="$2"; shift 2 ;;
    --quick) QUICK=1; CASES=50; REPEATS=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN="${RONDO_BIN:-}"
if [ -z "$BIN" ]; then
  (cd "$ROOT" && cargo build -q --release --bin rondo)
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/rondo"
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rondo-scale.XXXXXX")"
# The protocol server on two processes: the asyncio one's CPU per request, on one core,
# added ~40 ms to each wave of 500 requests (see RESULTS.md).
python3 "$ROOT/bench/langgraph/fake_llm.py" --port "$PORT" --latency-ms 100 \
  --impl protocol --workers 2 >/dev/null 2>&1 &
S=$!
trap 'kill $S 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.05; done

python3 - "$CASES" >"$WORK/cases.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"id": f"s{i:04d}", "inputs": {"question": f"case {i}"}, "expect": {"contains": "ok"}}))
PY

# CPU seconds of the fake LLM server so far (it and its workers).
server_cpu() {
  python3 - "$S" <<'PY'
import os, sys
root, tick, total = sys.argv[1], os.sysconf("SC_CLK_TCK"), 0
pids = [root]
try:
    with open(f"/proc/{root}/task/{root}/children") as f:
        pids += f.read().split()
except OSError:
    pass
for pid in pids:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        total += int(rest[11]) + int(rest[12])
    except OSError:
        pass
print(total / tick)
PY
}

export FAKE_LLM_URL="http://127.0.0.1:$PORT/v1" FAKE_LLM_KEY=unused
for i in $(seq "$REPEATS"); do
  before=$(server_cpu)
  python3 "$HERE/measure.py" "$WORK/m$i.json" -- \
    /usr/bin/time -v -o "$WORK/time$i" "$BIN" eval "$HERE/scale.rondo" --engine "$ENGINE" \
    --dataset "$WORK/cases.jsonl" --out "$WORK/res$i" -c "$CASES" -q >"$WORK/table$i" || {
    # Some case failed: its line is in the table; the figures below say how many.
    echo "run $i: rondo eval exited non-zero:" >&2
    grep -v "^s[0-9]* *done" "$WORK/table$i" | head -20 >&2 || true
  }
  python3 -c "print(round($(server_cpu) - $before, 3))" >"$WORK/server$i"
done

python3 - "$WORK" "$REPEATS" "$CASES" "$QUICK" <<'PY'
import json, os, re, statistics, sys
work, repeats, cases, quick = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
ROUNDS, STEPS = 3, 6  # scale.rondo: 3 x (probe, reply)
ideal = ROUNDS * 0.1  # every run in flight at once: its llm calls, one after the other
cores = os.cpu_count()
rows = []
for i in range(1, repeats + 1):
    m = json.load(open(f"{work}/m{i}.json"))
    s = json.load(open(f"{work}/res{i}/summary.json"))
    t = open(f"{work}/time{i}").read()
    field = lambda name: re.search(re.escape(name) + r":\s*([\d.:]+)", t).group(1)
    server_cpu = float(open(f"{work}/server{i}").read())
    # Everything this batch cost, on every core: no wall time can be below it / cores.
    floor = (m["all_cpu_sec"] + server_cpu) / cores
    rows.append({
        "wall": m["wall_sec"],
        "x_ideal": m["wall_sec"] / ideal,
        "driver_cpu_ms_per_step": 1000 * m["driver_cpu_sec"] / (cases * STEPS),
        "driver_peak_mib": m["driver_peak_rss_kb"] / 1024,
        # -c N: every run is in flight from the start (most wait for their sandbox).
        "kib_per_active_run": m["driver_peak_rss_kb"] / cases,
        "peak_active": m["peak_runners"],
        "sandboxes_mib_at_peak": m["runners_rss_kb_at_peak"] / 1024,
        "total_cpu_sec": m["all_cpu_sec"],
        "server_cpu_sec": server_cpu,
        "floor": floor,
        "x_floor": m["wall_sec"] / max(floor, ideal),
        "driver_cpu_sec": m["driver_cpu_sec"],
        "time_v_peak_mib": int(field("Maximum resident set size (kbytes)")) / 1024,
        "success_rate": s["success_rate"],
        "n": s["n"],
    })
    r = rows[-1]
    print(f"run {i}: {cases} cases, {r['wall']:.2f} s wall ({r['x_ideal']:.1f}x ideal {ideal:.1f} s); "
          f"driver {r['driver_cpu_sec']:.2f} s CPU ({r['driver_cpu_ms_per_step']:.2f} ms/step), "
          f"peak RSS {r['driver_peak_mib']:.0f} MiB ({r['kib_per_active_run']:.0f} KiB per run in flight); "
          f"{r['peak_active']} sandboxes alive at most, {r['sandboxes_mib_at_peak']:.0f} MiB PSS at peak; "
          f"batch {r['total_cpu_sec']:.1f} s CPU + fake LLM {r['server_cpu_sec']:.2f} s: CPU floor "
          f"{r['floor']:.2f} s on {cores} cores ({r['x_floor']:.2f}x of max(floor, ideal)); "
          f"success_rate {r['success_rate']}, n {r['n']}")
if repeats > 1:
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median of {repeats}: {med['wall']:.2f} s wall ({med['x_ideal']:.1f}x ideal), "
          f"driver {med['driver_cpu_ms_per_step']:.2f} ms CPU/step, peak RSS {med['driver_peak_mib']:.0f} MiB "
          f"({med['kib_per_active_run']:.0f} KiB per run in flight), batch {med['total_cpu_sec']:.1f} s CPU, "
          f"fake LLM {med['server_cpu_sec']:.2f} s CPU, CPU floor {med['floor']:.2f} s "
          f"({med['floor'] / ideal:.1f}x ideal), wall {med['x_floor']:.2f}x the floor")
if quick and any(r["success_rate"] != 1.0 or r["n"] != cases for r in rows):
    sys.exit("bench/scale --quick: not every case passed")
PY
# Every sandbox ended with its run: no process works in the batch's folder any more.
left=$(for p in /proc/[0-9]*; do readlink "$p/cwd" 2>/dev/null; done | grep -c "^$WORK" || true)
if [ "$left" -gt 0 ]; then
  echo "bench/scale: $left processes of the batch outlived it" >&2
  exit 1
fi
