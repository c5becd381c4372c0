"""The debugger's command line: starts a debug session in the background and talks to it.

rdb start SCRIPT [ARGS...] [--break FILE:LINE]... [--stop-at-entry] [--python PATH] [-- PROGRAM ARGS]
rdb break FILE:LINE | step | next | return | continue | locals | eval EXPR | where | status | quit
"""

import os
import socket
import subprocess
import sys
import time

from rdb.protocol import receive, send, socket_path

TIMEOUT = float(os.environ.get("RDB_TIMEOUT", "30"))


def request(session, command, args=(), wait=TIMEOUT, server=None):
    path = socket_path(session)
    deadline = time.monotonic() + wait
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            break
        except OSError:
            conn.close()
            if server is not None and server.poll() is not None:
                return {"error": f"the debug server exited with code {server.returncode}"}
            if time.monotonic() > deadline:
                return {"error": f"no debug session {session!r} is running (start one with `rdb start SCRIPT`)"}
            time.sleep(0.05)
    conn.settimeout(wait)
    try:
        send(conn, {"command": command, "args": list(args)})
        return receive(conn)
    except socket.timeout:
        return {"error": f"the program is still running after {wait:.0f}s (no breakpoint reached)"}
    except (ConnectionError, ValueError) as e:
        return {"error": str(e)}
    finally:
        conn.close()


def show(reply):
    lines = []
    if reply.get("output"):
        lines.append(reply["output"].rstrip("\n"))
    if "error" in reply:
        lines.append(f"error: {reply['error']}")
    at = reply.get("at")
    event = reply.get("event")
    if event in ("finished", "quit"):
        extra = ""
        if reply.get("exception"):
            extra = f" with {reply['exception']}"
        elif reply.get("exit_code") not in (None, 0):
            extra = f" with exit code {reply['exit_code']}"
        lines.append(f"program {event}{extra}")
    elif at:
        lines.append(f"{event or 'at'} {at['file']}:{at['line']} in {at['function']}()")
        lines.append(f"{at['line']:>5} | {at['source']}")
    for bp in reply.get("breakpoints", []):
        lines.append(f"breakpoint {bp}")
    for name, value in reply.get("locals", {}).items():
        lines.append(f"{name} = {value}")
    if "value" in reply:
        lines.append(reply["value"])
    for frame in reply.get("stack", []):
        lines.append(f"  {frame['file']}:{frame['line']} in {frame['function']}()")
    print("\n".join(lines))
    return 1 if "error" in reply else 0


def start(session, rest):
    breaks, stop_at_entry, python, program = [], False, sys.executable, []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            program.extend(rest[i + 1 :])
            break
        if a in ("--break", "-b", "--python") and i + 1 < len(rest):
            if a == "--python":
                python = rest[i + 1]
            else:
                breaks.append(rest[i + 1])
            i += 2
            continue
        if a == "--stop-at-entry":
            stop_at_entry = True
        else:
            program.append(a)
        i += 1
    if not program:
        print("error: rdb start needs a SCRIPT")
        return 2
    if os.path.exists(socket_path(session)):
        request(session, "quit", wait=2)
    output = os.path.join(os.environ.get("RDB_DIR", "/tmp"), f"rdb-{session}.out")
    options = [a for b in breaks for a in ("--break", b)]
    if stop_at_entry:
        options.append("--stop-at-entry")
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=package + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(output, "wb") as out:
        server = subprocess.Popen(
            [python, "-m", "rdb.server", session, output, *options, "--", *program],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    reply = request(session, "status", server=server)
    if "error" in reply and server.poll() is not None:
        with open(output, errors="replace") as f:
            reply["output"] = f.read()[-4000:]
    return show(reply)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    session = os.environ.get("RDB_SESSION", "default")
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    command, rest = argv[0], argv[1:]
    if command == "start":
        return start(session, rest)
    if command not in ("break", "step", "next", "return", "continue", "locals", "eval", "where", "status", "quit"):
        print(f"error: unknown command {command!r}\n{__doc__.strip()}")
        return 2
    return show(request(session, command, rest))


if __name__ == "__main__":
    sys.exit(main())
