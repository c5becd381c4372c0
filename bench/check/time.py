#!/usr/bin/env python3
"""Whole-process medians of `rondo check` without hyperfine: runs a command N times
(after warm-up runs) and prints the median, min and max wall time, and the median CPU
time (user + system, which waiting on a loaded machine does not inflate), in ms.

    python3 bench/check/time.py [--runs 15] [--warmup 3] -- BIN check --offline FILE
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    for _ in range(args.warmup):
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    times, cpu = [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        times.append((time.perf_counter() - start) * 1000)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            sys.exit(f"{command}: exit status {child.returncode}")
        cpu.append((usage.ru_utime + usage.ru_stime) * 1000)
    print(
        f"wall median {statistics.median(times):.2f} ms (min {min(times):.2f}, max {max(times):.2f}), "
        f"CPU median {statistics.median(cpu):.2f} ms, {len(times)} runs"
    )


if __name__ == "__main__":
    sys.exit(main())
