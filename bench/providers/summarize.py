"""Side-by-side table of rondo-provider and LangGraph bench JSON lines, with the targets."""
import json
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                rows[row.get("workload")] = row
    return rows


ours, lg = load(sys.argv[1]), load(sys.argv[2])
floor = lg.get("fanout_floor_curl", {}).get("median_s")
fan, seq = ours.get("fanout", {}), ours.get("llm_seq", {})
lg_fan, lg_seq = lg.get("fanout", {}), lg.get("llm_seq", {})


def fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


print("| workload | rondo-provider min / median s | LangGraph min / median s | LangGraph ÷ rondo | server floor (curl) median s | rondo ÷ floor | rondo peak RSS MB | LangGraph peak RSS MB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name, a, b in (("fanout (200 × 100 ms)", fan, lg_fan), ("llm_seq (50 × 0 ms)", seq, lg_seq)):
    ratio = b.get("median_s") / a["median_s"] if a.get("median_s") and b.get("median_s") else None
    fl = floor if name.startswith("fanout") else None
    print(f"| {name} | {fmt(a.get('min_s'))} / {fmt(a.get('median_s'))} | {fmt(b.get('min_s'))} / {fmt(b.get('median_s'))} "
          f"| {fmt(ratio, '.1f')}× | {fmt(fl)} | {fmt(a['median_s'] / fl if fl and a.get('median_s') else None, '.2f')} "
          f"| {fmt(a.get('peak_rss_mb'), '.1f')} | {fmt(b.get('peak_rss_mb'), '.1f')} |")

print()
per_call_ms = seq.get("median_s", 0) / max(seq.get("steps", 50), 1) * 1000
checks = [
    ("fanout no slower than the server floor (curl)", floor is not None and fan.get("median_s", 9) <= floor,
     f"{fmt(fan.get('median_s'))} s vs {fmt(floor)} s"),
    ("fanout ≥ 7× faster than LangGraph", bool(lg_fan.get("median_s")) and lg_fan["median_s"] / fan.get("median_s", 9) >= 7,
     f"{fmt(lg_fan.get('median_s', 0) / fan.get('median_s', 1), '.1f')}×"),
    ("llm_seq client CPU per call < 0.3 ms", seq.get("client_cpu_ms_per_call", 9) < 0.3,
     f"{fmt(seq.get('client_cpu_ms_per_call'), '.3f')} ms CPU; {per_call_ms:.3f} ms wall per call incl. the Python server"),
    ("fanout peak RSS < 30 MB", fan.get("peak_rss_mb", 99) < 30, f"{fmt(fan.get('peak_rss_mb'), '.1f')} MB"),
]
for what, ok, detail in checks:
    print(f"- [{'x' if ok else ' '}] {what}: {detail}")
