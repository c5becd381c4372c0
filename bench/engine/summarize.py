#!/usr/bin/env python3
"""Side-by-side Markdown table of bench/engine/run.sh's results.

  summarize.py RONDO.jsonl LANGGRAPH.jsonl [HYPERFINE.json] [TIME_RSS_KB] [LG_SQLITE.jsonl]

RONDO.jsonl comes from examples/bench_engine.rs, LANGGRAPH.jsonl from
bench/langgraph/bench_langgraph.py --workloads chain,loop, HYPERFINE.json from
`hyperfine --export-json` of `rondo run` (loop), TIME_RSS_KB is /usr/bin/time's %M of it.
"""
import json
import sys

TARGET_US = 5.0
TARGET_RATIO = 50.0
TARGET_RSS_MB = 30.0
TARGET_FLOOR = 1.3      # durable step / the machine's write + fdatasync
TARGET_SQLITE = 3.0     # LangGraph + SqliteSaver / durable step


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if rec.get("meta"):
                continue
            out[rec["workload"]] = rec
    return out


def us(rec):
    return rec["median_s"] / rec_steps(rec) * 1e6


def rec_steps(rec):
    return rec.get("steps") or rec.get("node_executions") or rec["n"]


def main():
    rondo = load(sys.argv[1])
    lg = load(sys.argv[2])
    hf = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
    time_rss_kb = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else None
    lg_sqlite = load(sys.argv[5]) if len(sys.argv) > 5 else {}

    print("| workload | steps | LangGraph min / median s | Rondo min / median s | LangGraph µs/step "
          "| Rondo µs/step (drive only) | ratio | LangGraph peak RSS MB | Rondo peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdict = []
    for w in ("chain", "loop"):
        r, l = rondo.get(w), lg.get(w)
        if not r or not l:
            continue
        ratio = us(l) / us(r)
        print(f"| **{w}** | {rec_steps(r)} | {l['min_s']:.4f} / {l['median_s']:.4f} "
              f"| {r['min_s']:.5f} / {r['median_s']:.5f} | {us(l):.0f} "
              f"| **{us(r):.2f}** ({r['drive_per_step_us']:.2f}) | **{ratio:.0f}×** "
              f"| {l['peak_rss_mb']:.1f} | {r['peak_rss_mb']:.1f} |")
        verdict.append((f"{w}: < {TARGET_US:g} µs/step", us(r) < TARGET_US, f"{us(r):.2f} µs"))
        verdict.append((f"{w}: ≥ {TARGET_RATIO:g}× LangGraph", ratio >= TARGET_RATIO, f"{ratio:.0f}×"))
        if w == "loop":
            verdict.append((f"loop: peak RSS < {TARGET_RSS_MB:g} MB", r["peak_rss_mb"] < TARGET_RSS_MB,
                            f"{r['peak_rss_mb']:.1f} MB (LangGraph {l['peak_rss_mb']:.1f} MB)"))

    print()
    print("Rondo only (same run):")
    print()
    print("| workload | checkpoints | steps | min / median s | µs/step | drive-only µs/step | peak RSS MB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for w in ("chain", "chain_ckpt", "loop", "loop_ckpt", "loop_llm", "loop_llm_ckpt"):
        r = rondo.get(w)
        if not r:
            continue
        print(f"| {w} | {'on (fsync)' if r['checkpoints'] else 'off'} | {r['steps']} "
              f"| {r['min_s']:.5f} / {r['median_s']:.5f} | {us(r):.2f} | {r['drive_per_step_us']:.2f} "
              f"| {r['peak_rss_mb']:.1f} |")
    if hf:
        res = hf["results"][0]
        times = sorted(res["times"])
        med = times[len(times) // 2] if len(times) % 2 else sum(times[len(times) // 2 - 1:len(times) // 2 + 1]) / 2
        rss = f", peak RSS {time_rss_kb / 1024:.1f} MB" if time_rss_kb else ""
        print()
        print(f"Whole process (hyperfine, {len(times)} runs after 1 warm-up): `{res['command']}`: "
              f"mean {res['mean']:.4f} s ± {res['stddev']:.4f}, min {res['min']:.4f}, median {med:.4f} s{rss}.")
    ck, floor = rondo.get("loop_ckpt"), rondo.get("fsync_floor")
    if ck and floor:
        print()
        print("Durable steps (loop, 3000 steps, same run):")
        print()
        print("| what | µs/step (median) | min s / median s | × the fsync floor |")
        print("|---|---:|---:|---:|")
        f_us = us(floor)
        print(f"| machine floor: append {floor['bytes_per_step']} B + `fdatasync` | {f_us:.0f} "
              f"| {floor['min_s']:.3f} / {floor['median_s']:.3f} | 1.00 |")
        print(f"| **Rondo**, checkpoints on ({ck.get('journal_bytes_per_step', '?')} B journal/step) "
              f"| **{us(ck):.0f}** | {ck['min_s']:.3f} / {ck['median_s']:.3f} | {us(ck) / f_us:.2f} |")
        for w in ("loop_sqlite_sync", "loop_sqlite_async"):
            l = lg_sqlite.get(w)
            if l:
                print(f"| LangGraph {l['langgraph']} + SqliteSaver ({l['checkpoint_sqlite']}), "
                      f"`durability=\"{l['durability']}\"` | {us(l):.0f} "
                      f"| {l['min_s']:.3f} / {l['median_s']:.3f} | {us(l) / f_us:.2f} |")
        paired = ck.get("paired_floor_ratio")
        if paired:
            print(f"| floor paired with each Rondo run (same child, right after it) "
                  f"| {ck['paired_floor_per_step_us']:.0f} | | Rondo / paired floor: **{paired:.2f}** |")
        ratio = paired or us(ck) / f_us
        verdict.append((f"durable step ≤ {TARGET_FLOOR:g}× the fsync floor (paired runs)", ratio <= TARGET_FLOOR,
                        f"{ratio:.2f}×"))
        l = lg_sqlite.get("loop_sqlite_sync")
        if l:
            verdict.append((f"durable step ≥ {TARGET_SQLITE:g}× faster than LangGraph + SqliteSaver (sync)",
                            us(l) / us(ck) >= TARGET_SQLITE, f"{us(l) / us(ck):.2f}×"))
    print()
    print("Targets:")
    print()
    for name, ok, got in verdict:
        print(f"- {name}: {'met' if ok else 'MISSED'} ({got})")


if __name__ == "__main__":
    main()
