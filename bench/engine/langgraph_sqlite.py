#!/usr/bin/env python3
"""LangGraph's `loop` workload (planner -> coder -> verifier, 3000 node executions) with a
durable checkpointer: `SqliteSaver` on a file in --tmp, `durability="sync"` (each step's
checkpoint is committed before the next step runs, as Rondo's journal is). Same method as
bench_langgraph.py: a fresh process, one untimed warm-up, --repeats timed runs; one JSON
line. The graph is bench_langgraph.py's `build_loop`, compiled with the checkpointer.

  langgraph_sqlite.py --lg-dir bench/langgraph --tmp /tmp/x [--repeats 3]
      [--durability sync|async|exit]
"""
import argparse
import json
import os
import resource
import sqlite3
import statistics
import sys
import time

N = 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lg-dir", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--durability", default="sync")
    a = ap.parse_args()
    sys.path.insert(0, a.lg_dir)
    import langgraph
    from importlib.metadata import version
    from langgraph.checkpoint.sqlite import SqliteSaver
    import bench_langgraph as b

    os.makedirs(a.tmp, exist_ok=True)
    runs = []
    for i in range(a.repeats + 1):
        db = os.path.join(a.tmp, f"lg-sqlite-{os.getpid()}-{i}.db")
        conn = sqlite3.connect(db, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        # build_loop compiles without a checkpointer: compile its graph again with one.
        app = b.build_loop(N).builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": f"t{i}"}, "recursion_limit": 3 * N + 10}
        t = time.perf_counter()
        out = app.invoke({"counter": 0, "plan": "", "code": ""}, config,
                         durability=a.durability)
        dt = time.perf_counter() - t
        assert out["counter"] == N, out
        conn.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(db + suffix)
            except FileNotFoundError:
                pass
        if i > 0:
            runs.append(dt)
    med = statistics.median(runs)
    steps = 3 * N
    print(json.dumps({
        "workload": f"loop_sqlite_{a.durability}", "engine": "langgraph",
        "langgraph": version("langgraph"),
        "checkpoint_sqlite": version("langgraph-checkpoint-sqlite"),
        "sqlite": sqlite3.sqlite_version, "durability": a.durability,
        "steps": steps, "median_s": round(med, 6), "min_s": round(min(runs), 6),
        "runs_s": [round(r, 6) for r in runs],
        "per_step_us": round(med / steps * 1e6, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


if __name__ == "__main__":
    main()
