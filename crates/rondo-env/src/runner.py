# Runs commands inside the container for DockerEnv: one JSON request per stdin line,
# JSON events on stdout. Starting a process here costs a fork; a `docker exec` costs the
# engine's runc exec (~80 ms), which is why this process stays alive for the run.
# Bytes travel as latin-1 text: every byte maps to one code point, so nothing is lost.
#
# Each command runs under a shepherd: a forked copy of this process made a child
# subreaper, so whatever the command starts (new sessions, double forks, daemons) stays
# in the shepherd's tree. When the command is over, the shepherd kills that whole tree;
# other commands, in other trees, are left alone. This process is a subreaper too: if a
# command kills its shepherd, its tree lands here and is killed at once.
# A command can still kill this process (same user): the commands running then die with
# it, and DockerEnv starts another runner for the next command.
import ctypes, gc, json, os, select, signal, sys, threading, time

lock = threading.Lock()
out = sys.stdout.buffer
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
# Request id -> write end of its shepherd's control pipe: b"T" terminates the tree,
# b"K" (or the pipe closing) kills it and ends the shepherd.
controls = {}
controls_lock = threading.Lock()
# Control pipes of the commands whose processes are kept (`keep`): never closed.
kept = []
# Live shepherds; held across each fork so a new shepherd is never taken for a stray.
shepherds = set()
shepherds_lock = threading.Lock()


def send(obj):
    data = memoryview((json.dumps(obj) + "\n").encode())
    with lock:
        # Unbuffered (-u), a write to the pipe may be cut short by a signal (SIGCHLD):
        # what it did not take is written again, or the line would be lost.
        while data:
            data = data[out.write(data) or 0:]
        out.flush()


def control(rid, byte):
    with controls_lock:
        fd = controls.get(rid)
        if fd is not None:
            try:
                os.write(fd, byte)
            except OSError:
                pass


def processes():
    """pid -> (state, parent) of every process (a name may hold spaces and parentheses)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    rest = f.read().rsplit(b")", 1)[1].split()
                found[int(name)] = (rest[0], int(rest[1]))
            except (OSError, ValueError, IndexError):
                pass
    return found


# Whether the kernel lists each task's children (/proc/PID/task/TID/children): a tree is
# then walked from its root, instead of reading every process of the machine, which on a
# host with a thousand processes costs more than the command.
LISTS_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def children_of(pid, zombies=False):
    """The children of pid, read from the kernel's lists; zombies only when asked."""
    found = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    if zombies:
        return found
    live = []
    for child in found:
        try:
            with open(f"/proc/{child}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    live.append(child)
        except (OSError, IndexError):
            pass
    return live


def descendants(roots):
    if LISTS_CHILDREN:
        found, todo = [], list(roots)
        while todo:
            for child in children_of(todo.pop()):
                found.append(child)
                todo.append(child)
        return found
    children = {}
    for pid, (state, parent) in processes().items():
        if state != b"Z":
            children.setdefault(parent, []).append(pid)
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def freeze(roots):
    """Stops every process of the trees (a stopped process cannot fork), however fast
    they fork; returns them."""
    stopped = set()
    while True:
        fresh = [p for p in descendants(roots) if p not in stopped]
        if not fresh:
            return stopped
        signal_all(fresh, signal.SIGSTOP)
        stopped.update(fresh)


def exit_code(status):
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def spawn(argv, env, stdin, stdout, stderr):
    """Starts the command in a session of its own; its pid."""
    try:
        return os.posix_spawnp(argv[0], argv, env, setsid=True,
                               setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                               file_actions=[(os.POSIX_SPAWN_DUP2, stdin, 0),
                                             (os.POSIX_SPAWN_DUP2, stdout, 1),
                                             (os.POSIX_SPAWN_DUP2, stderr, 2)])
    except (AttributeError, NotImplementedError):
        # Python before 3.8, or a C library without POSIX_SPAWN_SETSID.
        import subprocess
        return subprocess.Popen(argv, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                                start_new_session=True).pid


def shepherd(req, env, out_w, err_w, status_w, control_r):
    """In the forked shepherd: runs the command, reaps its tree, kills it on request, and
    ends once the command exited and nothing of its tree is left; never returns."""
    # Python code in a forked copy is slow to run (each object it touches is a page
    # copied): no collection, and the command is started by posix_spawn (a vfork).
    gc.disable()
    signal.set_wakeup_fd(-1)
    null = os.open("/dev/null", os.O_RDWR)
    keep = {null, out_w, err_w, status_w, control_r}
    for fd in (0, 1, 2):
        os.dup2(null, fd, inheritable=False)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        if req.get("cwd"):
            os.chdir(req["cwd"])
        main = spawn(req["argv"], env, null, out_w, err_w)
    except Exception as e:
        os.write(err_w, f"{e}\n".encode(errors="replace"))
        os.write(status_w, b"127\n" if isinstance(e, FileNotFoundError) else b"126\n")
        os._exit(0)
    os.close(out_w)
    os.close(err_w)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    me = os.getpid()
    main_done = killing = False
    while True:
        # Reap every child that exited (orphans of the tree land here); report the
        # command's own exit. No child left after it: the tree is gone.
        while True:
            try:
                pid, status = os.waitpid(-1, 0 if killing else os.WNOHANG)
            except ChildProcessError:
                if main_done or killing:
                    os._exit(0)
                break
            if pid == 0:
                break
            if pid == main:
                os.write(status_w, b"%d\n" % exit_code(status))
                main_done = True
        if killing:
            continue
        ready, _, _ = select.select([control_r, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        if control_r not in ready:
            continue
        tree = freeze([me])
        if os.read(control_r, 1) == b"T":
            signal_all(tree, signal.SIGTERM)
            signal_all(tree, signal.SIGCONT)
            continue
        while tree:
            signal_all(tree, signal.SIGKILL)
            tree = descendants([me])
        killing = True


def run(req):
    rid = req["id"]
    env = dict(os.environ)
    env.update(req.get("env") or {})
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    control_r, control_w = os.pipe()
    with shepherds_lock:
        try:
            pid = os.fork()
        except OSError as e:
            pid = -1
            reason = e.strerror
        if pid == 0:
            try:
                shepherd(req, env, out_w, err_w, status_w, control_r)
            finally:
                os._exit(1)
        if pid > 0:
            shepherds.add(pid)
    for fd in (out_w, err_w, status_w, control_r):
        os.close(fd)
    if pid < 0:
        for fd in (out_r, err_r, status_r, control_w):
            os.close(fd)
        send({"id": rid, "e": f"cannot start the command: {reason}\n"})
        send({"id": rid, "exit": 126, "timed_out": False})
        return
    with controls_lock:
        controls[rid] = control_w
    streams = {out_r: "o", err_r: "e"}
    end = time.monotonic() + float(req.get("timeout") or 3600)
    grace = float(req.get("grace") or 2)
    status, timed_out, kill_at, give_up = b"", False, None, None
    # Done when the command exited and its output closed (background children too).
    while streams or b"\n" not in status:
        now = time.monotonic()
        if not timed_out and now >= end:
            timed_out = True
            control(rid, b"T")
            kill_at = now + grace
        if kill_at is not None and now >= kill_at:
            control(rid, b"K")
            kill_at, give_up = None, now + 5
        if give_up is not None and now >= give_up:
            break
        wake = give_up or kill_at or end
        watched = list(streams) + ([status_r] if b"\n" not in status else [])
        ready, _, _ = select.select(watched, [], [], max(0.0, wake - now))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if fd == status_r:
                # The shepherd died without a word (killed): its tree was killed too.
                status += chunk if chunk else b"137\n"
            elif chunk:
                send({"id": rid, streams[fd]: chunk.decode("latin-1")})
            else:
                del streams[fd]
    if req.get("keep") and not timed_out:
        # A tool that keeps a session (a debugger): its shepherd goes on reaping the tree,
        # whose control pipe stays open until this runner ends with the environment.
        with controls_lock:
            kept.append(controls.pop(rid))
    else:
        # Whatever the command left running goes with it.
        control(rid, b"K")
        with controls_lock:
            os.close(controls.pop(rid))
        os.waitpid(pid, 0)
        with shepherds_lock:
            shepherds.discard(pid)
    for fd in list(streams) + [status_r]:
        os.close(fd)
    code = int(status.split()[0]) if status.strip() else 137
    send({"id": rid, "exit": code, "timed_out": timed_out})


def serve(req):
    try:
        run(req)
    except Exception as e:
        send({"id": req.get("id"), "e": f"the command runner failed: {e}\n"})
        send({"id": req.get("id"), "exit": 126, "timed_out": False})


def kill_strays(wake_r):
    """Kills what lands here that is no shepherd: the tree of a killed shepherd."""
    me = os.getpid()
    while True:
        os.read(wake_r, 4096)
        while True:
            with shepherds_lock:
                if LISTS_CHILDREN:
                    mine = children_of(me, zombies=True)
                else:
                    mine = [p for p, (_, parent) in processes().items() if parent == me]
                strays = [p for p in mine if p not in shepherds]
            if not strays:
                break
            signal_all(freeze(strays) | set(strays), signal.SIGKILL)
            for pid in strays:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def serve_input():
    """The runner: serves the requests of its standard input until it closes, then ends
    every command's tree and itself."""
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Not dumpable: commands (same user) cannot open this process's input or read its
    # memory through /proc, nor trace it; shepherds inherit it, commands lose it when they
    # exec.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    stray_r, stray_w = os.pipe()
    os.set_blocking(stray_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(stray_w)
    threading.Thread(target=kill_strays, args=(stray_r,), daemon=True).start()

    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if "cancel" in request:
            control(request["cancel"], b"K")
            continue
        try:
            threading.Thread(target=serve, args=(request,), daemon=True).start()
        except RuntimeError as e:
            # The container's process limit bounds threads too.
            send({"id": request.get("id"), "e": f"cannot start the command: {e}\n"})
            send({"id": request.get("id"), "exit": 126, "timed_out": False})

    # The input closed: the environment ends. Every command's tree is killed, kept ones
    # too, and this process ends once its shepherds are gone: when it has, nothing of the
    # environment's commands is left.
    with controls_lock:
        for fd in list(controls.values()) + kept:
            try:
                os.write(fd, b"K")
            except OSError:
                pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    os._exit(0)


def start_runner(sock, message, fds):
    """In the zygote: forks a runner whose input, output and error are `fds`, with the
    folder and environment `message` gives; its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            sock.close()
            # A session and process group of its own, as a runner started directly has.
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            os.chdir(message["cwd"])
            os.environ.clear()
            os.environ.update(message["env"])
            gc.enable()
            serve_input()
        finally:
            os._exit(1)
    return pid


def reap(pid, kill):
    """In the zygote: reaps a runner the driver is done with. One still running a moment
    after its output closed (or asked to be killed) has its group killed first: not reaped
    yet, its pid and group id are still its own."""
    if not kill:
        for _ in range(1000):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                return
            time.sleep(0.001)
    try:
        os.kill(-pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def zygote():
    """`runner.py zygote`, for the process engine: started once, it forks each sandbox's
    runner from an interpreter that has already started (a fork costs a fraction of an
    interpreter's start). Its standard input is a datagram socket from the driver; each
    message is one JSON request, each gets one answer:
      {"start": {"cwd", "env"}} with three descriptors (the runner's input, output, error)
        -> {"pid": N} or {"error": text}
      {"reap": N, "kill": bool} -> {"reaped": N}
    Single-threaded, so that every fork copies a consistent process. It ends when the
    driver's end of the socket closes; its runners end when their input does."""
    import socket
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    sock = socket.socket(fileno=0)
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    # Forked pages are shared until written: no collection moves the objects about.
    gc.disable()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        except OSError:
            break
        if not data:
            break
        answer = {}
        try:
            message = json.loads(data)
            if "start" in message:
                if len(fds) != 3:
                    raise ValueError("a start needs three descriptors")
                answer = {"pid": start_runner(sock, message["start"], fds)}
            elif "reap" in message:
                reap(int(message["reap"]), bool(message.get("kill")))
                answer = {"reaped": message["reap"]}
            else:
                answer = {"error": "unknown request"}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            sock.send(json.dumps(answer).encode())
        except OSError:
            break
    os._exit(0)


if hasattr(gc, "freeze"):
    gc.freeze()
if sys.argv[1:] == ["zygote"]:
    zygote()
else:
    serve_input()
