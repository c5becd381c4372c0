# Runs commands inside the container for DockerEnv: one JSON request per stdin line,
# JSON events on stdout. Starting a process here costs a fork; a `docker exec` costs the
# engine's runc exec (~80 ms), which is why this process stays alive for the run.
# Bytes travel as latin-1 text: every byte maps to one code point, so nothing is lost.
import json, os, signal, subprocess, sys, threading, time

lock = threading.Lock()
out = sys.stdout.buffer


def send(obj):
    data = (json.dumps(obj) + "\n").encode()
    with lock:
        out.write(data)
        out.flush()


def pump(pipe, key, rid):
    while True:
        chunk = os.read(pipe.fileno(), 65536)
        if not chunk:
            break
        send({"id": rid, key: chunk.decode("latin-1")})


def kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def run(req):
    rid = req["id"]
    env = dict(os.environ)
    env.update(req.get("env") or {})
    try:
        p = subprocess.Popen(req["argv"], cwd=req.get("cwd") or None, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError as e:
        send({"id": rid, "e": f"{e}\n"})
        send({"id": rid, "exit": 127, "timed_out": False})
        return
    except (PermissionError, OSError) as e:
        send({"id": rid, "e": f"{e}\n"})
        send({"id": rid, "exit": 126, "timed_out": False})
        return
    pumps = [threading.Thread(target=pump, args=(p.stdout, "o", rid), daemon=True),
             threading.Thread(target=pump, args=(p.stderr, "e", rid), daemon=True)]
    for t in pumps:
        t.start()
    end = time.monotonic() + float(req.get("timeout") or 3600)
    grace = float(req.get("grace") or 2)
    timed_out = False
    try:
        p.wait(timeout=max(0.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    # Done only when the process exited and its output closed (background children too).
    for t in pumps:
        t.join(timeout=max(0.0, end - time.monotonic()))
    if timed_out or any(t.is_alive() for t in pumps):
        timed_out = True
        kill_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for t in pumps:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        kill_group(p.pid, signal.SIGKILL)
        for t in pumps:
            t.join(timeout=5)
    code = p.wait()
    send({"id": rid, "exit": code if code >= 0 else 128 - code, "timed_out": timed_out})


for line in sys.stdin.buffer:
    try:
        request = json.loads(line)
    except ValueError:
        continue
    threading.Thread(target=run, args=(request,), daemon=True).start()
