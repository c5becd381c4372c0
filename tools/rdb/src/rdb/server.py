"""The debug server: runs a Python program under bdb and, each time it stops, answers the
client's commands on a Unix socket until one resumes it (step, next, continue, return, quit).

python -m rdb.server SESSION OUTPUT_FILE [--break FILE:LINE]... [--stop-at-entry] -- SCRIPT [ARGS...]
"""

import bdb
import os
import reprlib
import socket
import sys

from rdb.protocol import receive, send, socket_path

RESUME = {"step", "next", "continue", "return", "quit"}
SHORT = reprlib.Repr()
SHORT.maxstring = 200
SHORT.maxother = 200
SHORT.maxlist = SHORT.maxdict = 20
OUTPUT_TAIL = 4000


class Server(bdb.Bdb):
    def __init__(self, listener, script, output_file, stop_at_entry):
        super().__init__()
        self.listener = listener
        self.script = os.path.realpath(script)
        self.output_file = output_file
        self.output_seen = 0
        self.stop_at_entry = stop_at_entry
        self.entered = False
        self.pending = None

    def new_output(self):
        try:
            with open(self.output_file, "rb") as f:
                f.seek(self.output_seen)
                data = f.read()
        except OSError:
            return ""
        self.output_seen += len(data)
        text = data.decode(errors="replace")
        return text if len(text) <= OUTPUT_TAIL else "[...]\n" + text[-OUTPUT_TAIL:]

    def where(self, frame):
        code = frame.f_code
        line = frame.f_lineno
        import linecache

        return {
            "file": code.co_filename,
            "line": line,
            "function": code.co_name,
            "source": linecache.getline(code.co_filename, line).rstrip("\n"),
        }

    def answer(self, conn, obj):
        sys.stdout.flush()
        sys.stderr.flush()
        obj.setdefault("output", self.new_output())
        try:
            send(conn, obj)
        except OSError:
            pass
        conn.close()

    def user_line(self, frame):
        if not self.entered:
            if os.path.realpath(frame.f_code.co_filename) != self.script:
                return
            self.entered = True
            if not self.stop_at_entry:
                self.set_continue()
                return
        self.interact(frame, "stopped")

    def user_return(self, frame, value):
        if frame is self.botframe:
            return

    def interact(self, frame, event):
        here = self.where(frame)
        if self.pending is not None:
            self.answer(self.pending, {"event": event, "at": here})
            self.pending = None
        while True:
            conn, _ = self.listener.accept()
            try:
                request = receive(conn)
            except (ValueError, ConnectionError) as e:
                self.answer(conn, {"error": str(e)})
                continue
            command = request.get("command", "")
            args = request.get("args", [])
            if command in RESUME:
                if command == "step":
                    self.set_step()
                elif command == "next":
                    self.set_next(frame)
                elif command == "return":
                    self.set_return(frame)
                elif command == "continue":
                    self.set_continue()
                else:
                    self.answer(conn, {"event": "quit", "at": here})
                    self.set_quit()
                    return
                self.pending = conn
                return
            self.answer(conn, self.query(frame, command, args, here))

    def query(self, frame, command, args, here):
        if command == "status":
            return {"event": "stopped", "at": here}
        if command == "locals":
            return {"at": here, "locals": {k: SHORT.repr(v) for k, v in frame.f_locals.items() if not k.startswith("__")}}
        if command == "eval":
            expr = " ".join(args)
            try:
                return {"at": here, "value": SHORT.repr(eval(expr, frame.f_globals, frame.f_locals))}
            except Exception as e:  # the program's own error, reported to the client
                return {"at": here, "error": f"{type(e).__name__}: {e}"}
        if command == "where":
            stack, _ = self.get_stack(frame, None)
            frames = [self.where(f) for f, _ in stack if f.f_code.co_filename != "<string>" and not f.f_code.co_filename.startswith(os.path.dirname(bdb.__file__))]
            return {"at": here, "stack": frames}
        if command == "break":
            return self.add_break(args) | {"at": here}
        return {"at": here, "error": f"unknown command {command!r}"}

    def add_break(self, args):
        added = []
        for spec in args:
            file, _, line = spec.rpartition(":")
            if not file or not line.isdigit():
                return {"error": f"a breakpoint is FILE:LINE, not {spec!r}"}
            file = os.path.realpath(file)
            error = self.set_break(file, int(line))
            if error:
                return {"error": error}
            added.append(f"{file}:{line}")
        return {"breakpoints": added}


def main(argv):
    session, output_file = argv[0], argv[1]
    rest = argv[2:]
    split = rest.index("--")
    options, program = rest[:split], rest[split + 1 :]
    breaks = [options[i + 1] for i, o in enumerate(options) if o == "--break"]
    stop_at_entry = "--stop-at-entry" in options
    path = socket_path(session)
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    script = os.path.abspath(program[0])
    server = Server(listener, script, output_file, stop_at_entry or not breaks)
    result = server.add_break(breaks)
    sys.argv = program
    sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
    event = {"event": "finished"}
    if "error" in result:
        event = {"event": "error", "error": result["error"]}
    else:
        with open(script, "rb") as f:
            code = compile(f.read(), script, "exec")
        globals_ = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
        try:
            server.run(code, globals_)
        except bdb.BdbQuit:
            event = {"event": "quit"}
        except SystemExit as e:
            event = {"event": "finished", "exit_code": e.code}
        except BaseException as e:  # the program's own exception ends the session
            event = {"event": "finished", "exception": f"{type(e).__name__}: {e}"}
    if server.pending is None:
        listener.settimeout(10)
        try:
            server.pending, _ = listener.accept()
            receive(server.pending)
        except (OSError, ValueError, ConnectionError):
            server.pending = None
    if server.pending is not None:
        server.answer(server.pending, event)
    listener.close()
    os.unlink(path)


if __name__ == "__main__":
    main(sys.argv[1:])
