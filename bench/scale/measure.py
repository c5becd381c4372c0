#!/usr/bin/env python3
"""Runs a command and samples, through /proc, the `rondo` process it starts (the driver)
and that process's runner children (the process engine's sandboxes).

    measure.py OUT.json -- /usr/bin/time -v rondo eval ...

OUT.json gets: the driver's own CPU seconds (utime + stime, its children excluded), its
peak RSS (VmHWM) and RSS over time, the most runner processes alive at once and their
summed RSS then, the wall time and the command's exit code. Sampling every 20 ms: the
driver's CPU is read from its last sample (at most 20 ms of it is missed).

It also gives the CPU of everything the command started (`all_cpu_sec`): this process
is a child subreaper, so what outlives its parent (the process engine's zygote ends just
after the driver) lands here, is reaped here and counted.
"""
import ctypes
import json
import os
import resource
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def children(pid):
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return found


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def stat(pid):
    """(own cpu seconds, rss kB) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # Fields after the name: state is rest[0]; utime, stime are fields 14, 15 (rest[11], rest[12]).
    cpu = (int(rest[11]) + int(rest[12])) / TICK
    return cpu, int(rest[21]) * PAGE_KB


def hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def runners(driver):
    """The driver's runner processes: its python children, or the children of its
    zygote (`runner.py zygote`, which forks them)."""
    found = []
    for child in children(driver):
        if not comm(child).startswith("python"):
            continue
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                zygote = f.read().endswith(b"\0zygote\0")
        except OSError:
            zygote = False
        if zygote:
            found.extend(c for c in children(child) if comm(c).startswith("python"))
        else:
            found.append(child)
    return found


def pss(pid):
    """Proportional set size in kB: a forked runner's pages shared with the zygote (and
    its siblings) are counted once over all of them, not once each as in RSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def find_driver(root):
    todo = [root]
    while todo:
        pid = todo.pop()
        if comm(pid) == "rondo":
            return pid
        todo.extend(children(pid))
    return None


def main():
    out_path = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    start = time.monotonic()
    proc = subprocess.Popen(cmd)
    driver = None
    last_cpu, peak_hwm, peak_rss = 0.0, 0, 0
    peak_runners, runners_rss_at_peak = 0, 0
    first_runner, last_runner = None, None
    samples = []
    while proc.poll() is None:
        if driver is None:
            driver = find_driver(proc.pid)
        if driver is not None:
            s = stat(driver)
            if s is not None:
                last_cpu, rss = s
                peak_rss = max(peak_rss, rss)
                peak_hwm = max(peak_hwm, hwm(driver) or 0)
                alive = runners(driver)
                now = time.monotonic() - start
                if alive:
                    first_runner = first_runner if first_runner is not None else now
                    last_runner = now
                if len(alive) > peak_runners:
                    peak_runners = len(alive)
                    runners_rss_at_peak = sum(pss(c) for c in alive)
                samples.append([round(now, 3), rss, len(alive), round(last_cpu, 3)])
        time.sleep(0.02)
    wall = time.monotonic() - start
    # Orphans of the batch (reparented here) end once their input closes; reap them all.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.01)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {
        "exit_code": proc.returncode,
        "wall_sec": round(wall, 3),
        "driver_cpu_sec": round(last_cpu, 3),
        "all_cpu_sec": round(usage.ru_utime + usage.ru_stime, 3),
        "driver_peak_rss_kb": max(peak_hwm, peak_rss),
        "peak_runners": peak_runners,
        "runners_rss_kb_at_peak": runners_rss_at_peak,
        "sandboxes_alive_sec": round((last_runner or 0) - (first_runner or 0), 3),
        "samples": samples,
    }
    with open(out_path, "w") as f:
        json.dump(result, f)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
