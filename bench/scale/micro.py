#!/usr/bin/env python3
"""What a process sandbox costs in CPU, piece by piece (CPU of reaped children, so the
figures hold on a loaded machine better than wall times do):

- the command of scale.rondo alone (`sh` + `wc`, posix_spawn'ed);
- a runner started directly (an interpreter: `python3 -I -S -u -c runner.py`) and ended;
- a command through that runner (request, thread, shepherd, command, exit);
- a runner forked by the zygote (`runner.py zygote`), its probe (`true`) and its reaping.

    python3 bench/scale/micro.py [N]
"""
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = open(os.path.join(HERE, "../../crates/rondo-env/src/runner.py")).read()
RUNNER = ["python3", "-I", "-S", "-u", "-c", SCRIPT]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 50
WORK = tempfile.mkdtemp(prefix="rondo-micro.")
COMMAND = ["sh", "-c", "echo x >> rounds.txt; wc -l < rounds.txt", "probe"]
os.chdir(WORK)  # the commands write there


def reaped_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def request(i, argv):
    return (json.dumps({"id": i, "argv": argv, "cwd": WORK, "env": {}, "timeout": 10,
                        "grace": 1, "keep": False}) + "\n").encode()


def until_exit(out):
    while b'"exit"' not in out.readline():
        pass


def command_alone():
    c0 = reaped_cpu()
    for _ in range(N):
        pid = os.posix_spawnp(COMMAND[0], COMMAND, {"PATH": os.environ["PATH"]},
                              file_actions=[(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)])
        os.waitpid(pid, 0)
    return (reaped_cpu() - c0) / N


def direct(commands, n, argv=COMMAND):
    c0 = reaped_cpu()
    for _ in range(n):
        p = subprocess.Popen(RUNNER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=WORK)
        for i in range(commands):
            p.stdin.write(request(i, argv))
            p.stdin.flush()
            until_exit(p.stdout)
        p.stdin.close()
        p.wait()
    return (reaped_cpu() - c0) / n


def zygote_cpu(pid):
    """CPU of the zygote and of the runners it reaped."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in rest[11:15]) / os.sysconf("SC_CLK_TCK")


def forked():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    z = subprocess.Popen(RUNNER + ["zygote"], stdin=theirs, stdout=subprocess.DEVNULL,
                         cwd="/", env={}, start_new_session=True)
    theirs.close()
    first = None
    for round_ in range(2):  # the first round pays the zygote's own start
        c0 = zygote_cpu(z.pid)
        for _ in range(N):
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            err = os.open(os.devnull, os.O_WRONLY)
            start = {"start": {"cwd": WORK, "env": {"PATH": os.environ["PATH"]}}}
            socket.send_fds(ours, [json.dumps(start).encode()], [in_r, out_w, err])
            for fd in (in_r, out_w, err):
                os.close(fd)
            pid = json.loads(ours.recv(4096))["pid"]
            with os.fdopen(in_w, "wb", buffering=0) as w, os.fdopen(out_r, "rb") as r:
                w.write(request(0, ["true"]))
                until_exit(r)
                w.close()
                r.read()
            ours.send(json.dumps({"reap": pid, "kill": False}).encode())
            ours.recv(4096)
        cost = (zygote_cpu(z.pid) - c0) / N
        first = cost if first is None else first
    ours.close()
    z.wait()
    return cost


alone = command_alone()
start_end = direct(0, N)
probed = direct(1, N, ["true"])
with_commands = direct(10, max(5, N // 5))
through = (with_commands - start_end) / 10
print(f"command alone (sh + wc):              {alone * 1000:6.2f} ms CPU")
print(f"runner started directly, then ended:  {start_end * 1000:6.2f} ms CPU")
print(f"... with its probe (`true`):          {probed * 1000:6.2f} ms CPU")
print(f"a command through the runner:         {through * 1000:6.2f} ms CPU")
print(f"runner forked by the zygote + probe + reaped: {forked() * 1000:6.2f} ms CPU")
shutil.rmtree(WORK, ignore_errors=True)
