//! Hostile local tools against the real `rondo` binary, as root and as an ordinary user
//! (uid 65534, when the tests run as root): reading other processes' secrets, signalling
//! `rondo` and its caller, changing the records' metadata, leaving processes behind,
//! flooding the process table, typing into and drawing on the user's terminal, and what
//! happens where the kernel cannot confine.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

use common::{events, json, of_kind, processes_with};

const NOBODY: u32 = 65534;
/// A step that never starts fails the test instead of blocking it.
const PATIENCE: Duration = Duration::from_secs(120);

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `None` (whoever runs the tests), and uid 65534 too when that is root.
fn users() -> Vec<Option<u32>> {
    if is_root() {
        vec![None, Some(NOBODY)]
    } else {
        vec![None]
    }
}

/// A folder for one user's run: owned by that user, its `HOME` too.
fn user_dir(tmp: &Path, user: Option<u32>) -> PathBuf {
    let dir = tmp.join(user.map_or("self".to_string(), |u| format!("u{u}")));
    std::fs::create_dir_all(dir.join("home")).unwrap();
    if let Some(uid) = user {
        for d in [tmp, &dir, &dir.join("home")] {
            std::os::unix::fs::chown(d, Some(uid), Some(uid)).unwrap();
        }
    }
    dir
}

/// Writes a file the user of `dir` owns.
fn write_owned(dir: &Path, name: &str, text: &str, user: Option<u32>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    if let Some(uid) = user {
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    }
    path
}

/// `program` with `args` in `dir`, as `user`, with a clean terminal-free environment.
fn command_as(program: &str, args: &[&str], dir: &Path, user: Option<u32>) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("HOME", dir.join("home"))
        .env_remove("RONDO_UNCONFINED_TOOLS");
    if let Some(uid) = user {
        cmd.uid(uid).gid(uid);
    }
    cmd
}

fn rondo_as(dir: &Path, args: &[&str], user: Option<u32>) -> Output {
    command_as(env!("CARGO_BIN_EXE_rondo"), args, dir, user)
        .output()
        .unwrap()
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The stdout of the first call of `role` in a run.
fn tool_stdout(run: &Path, role: &str) -> String {
    of_kind(&events(run), "tool_call")
        .into_iter()
        .find(|e| e["role"] == role)
        .unwrap_or_else(|| panic!("`{role}` never ran"))["result"]["stdout"]
        .as_str()
        .unwrap()
        .to_string()
}

fn write_workflow(dir: &Path, text: &str, user: Option<u32>) -> PathBuf {
    let path = write_owned(dir, "w.rondo", text, user);
    let check = rondo_as(dir, &["check", "--offline", "w.rondo"], user);
    assert_ok(&check, "check");
    path
}

/// Fails when a process holding `marker` runs, after killing it (so a failure leaves
/// nothing behind).
fn assert_none_left(marker: &str, when: &str) {
    let left = processes_with(marker);
    for &pid in &left {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "{when}: processes outlived their step: {left:?}"
    );
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Waits for a file a step writes (the step then blocks until the test lets it go).
fn wait_for(path: &Path) {
    let since = Instant::now();
    while !path.exists() {
        assert!(
            since.elapsed() < PATIENCE,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads the pids of `rondo` and of its caller, then everything of every process it
/// can see for the caller's secrets, then tries to kill both.
const SNOOP: &str = r#"
import os, signal, sys
pids = sys.argv[1]
rondo = int(open(pids + '.rondo').read())
caller = int(open(pids + '.caller').read())
needles = [n.encode() for n in open(pids + '.needles').read().split()]
me = os.getpid()
def leaks(data):
    return any(n in data for n in needles)
targets = {rondo, caller, os.getppid()} | {int(p) for p in os.listdir('/proc') if p.isdigit()}
for pid in sorted(targets - {me}):
    try:
        if leaks(open(f'/proc/{pid}/environ', 'rb').read()):
            print('FOUND environ', pid)
    except OSError:
        pass
    try:
        with open(f'/proc/{pid}/mem', 'rb') as mem:
            for line in open(f'/proc/{pid}/maps'):
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split('-'))
                if 'r' in perms and end - start <= 64 << 20:
                    try:
                        mem.seek(start)
                        if leaks(mem.read(end - start)):
                            print('FOUND mem', pid)
                            break
                    except OSError:
                        pass
    except OSError:
        pass
    try:
        for fd in os.listdir(f'/proc/{pid}/fd'):
            try:
                with open(f'/proc/{pid}/fd/{fd}', 'rb') as f:
                    if leaks(f.read(1 << 20)):
                        print('FOUND fd', pid, fd)
            except OSError:
                pass
    except OSError:
        pass
for name, pid in [('rondo', rondo), ('caller', caller)]:
    try:
        os.kill(pid, signal.SIGKILL)
        print('KILLED', name)
    except OSError:
        pass
print('snooped', len(targets))
"#;

/// The caller of `rondo`: records its pid and `rondo`'s, runs it, says it survived.
const CALLER: &str = r#"#!/bin/sh
echo $$ > "$1.caller"
sh -c 'echo $$ > "$0.rondo"; exec "$@"' "$@"
echo "rondo ended with $?; the caller is still here"
"#;

/// A tool reads `/proc/<pid>/environ`, `mem` and `fd` of `rondo`, of its caller, of its
/// own parent and of every process it sees, and kills `rondo` and its caller: it finds no
/// secret of theirs (an API key, a variable of the caller's), kills nothing, and the run
/// reaches its exit; as root and as an ordinary user.
#[test]
fn a_tool_reads_no_secret_of_rondo_or_its_caller_and_kills_neither() {
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        let key = format!("sk-fake-{}", unique("key"));
        let secret = unique("caller-secret");
        let script = write_owned(&dir, "snoop.py", SNOOP, user);
        let caller = write_owned(&dir, "caller.sh", CALLER, user);
        let pids = dir.join("pids");
        write_owned(&dir, "pids.needles", &format!("{key}\n{secret}\n"), user);
        write_workflow(
            &dir,
            r#"
workflow snoop {
  input script: string
  input pids: string
}
role snoop: tool { command = ["python3", "{{ input.script }}", "{{ input.pids }}"] }
role last: tool { command = ["sh", "-c", "echo still running"] }
start -> snoop
snoop -> last
last -> success
exit success
"#,
            user,
        );
        let mut cmd = command_as("sh", &[], &dir, user);
        cmd.arg(&caller)
            .arg(&pids)
            .arg(env!("CARGO_BIN_EXE_rondo"))
            .args(["run", "-q", "w.rondo", "--run-dir", "runs", "--run-id", "r"])
            .arg("--input")
            .arg(format!("script={}", script.display()))
            .arg("--input")
            .arg(format!("pids={}", pids.display()))
            .env("OPENAI_API_KEY", &key)
            .env("RONDO_CALLER_SECRET", &secret);
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("rondo ended with 0; the caller is still here"),
            "as {user:?}: {said}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = dir.join("runs/r");
        let report = tool_stdout(&run, "snoop");
        assert!(report.contains("snooped"), "as {user:?}: {report}");
        assert!(!report.contains("FOUND"), "as {user:?}: {report}");
        assert!(!report.contains("KILLED"), "as {user:?}: {report}");
        assert_eq!(json(run.join("run.json"))["exit"], "success", "as {user:?}");
        assert_eq!(tool_stdout(&run, "last"), "still running\n");
        // The run says what the kernel gave its tools.
        let confinement = of_kind(&events(&run), "tool_confinement");
        assert_eq!(confinement.len(), 1, "as {user:?}");
        let given = &confinement[0]["protections"];
        for protection in [
            "write_rules",
            "new_session",
            "pid_namespace",
            "read_only_mounts",
        ] {
            assert_eq!(given[protection], true, "as {user:?}: {protection}");
        }
        assert_eq!(
            given["no_capabilities"],
            user.is_none() && is_root(),
            "as {user:?}"
        );
    }
}

/// Changes every kind of metadata of what it is given; reports each that got through.
const META: &str = r#"
import os, sys
home, sys_area = sys.argv[1], sys.argv[2]
targets = [os.path.join(sys_area, f) for f in ('run.json', 'events.jsonl', 'state.json', '')]
targets += [os.path.join(home, 'precious.txt'), home]
uid, gid = os.getuid(), os.getgid()
ops = [
    ('chmod', lambda t: os.chmod(t, 0)),
    ('chown', lambda t: os.chown(t, uid, gid)),
    ('utime', lambda t: os.utime(t, (0, 0))),
    ('setxattr', lambda t: os.setxattr(t, 'user.rondo', b'x')),
]
for t in targets:
    for name, op in ops:
        try:
            op(t)
            print('CHANGED', name, t)
        except OSError:
            pass
open('mine.txt', 'w').write('mine\n')
os.chmod('mine.txt', 0o600)
os.utime('mine.txt', (0, 0))
print('own file changed')
"#;

const METADATA: &str = r#"
workflow meta {
  input script: string
  input home: string
  input sys: string
  input hold: string = "0"
}
role attack: tool { command = ["python3", "{{ input.script }}", "{{ input.home }}", "{{ input.sys }}"] }
role hold: tool { command = ["sh", "-c", "[ -e held ] || { touch held; echo > hold.ready; sleep $0; }", "{{ input.hold }}"] }
role last: tool { command = ["sh", "-c", "cat mine.txt"] }
start -> attack
attack -> hold
hold -> last
last -> success
exit success
"#;

/// The mode, owner and modification time of a file, and whether it has the xattr.
fn metadata_of(path: &Path) -> (u32, u32, i64, bool) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    let mut buf = [0u8; 8];
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of the size passed.
    let xattr = unsafe {
        libc::getxattr(
            name.as_ptr(),
            c"user.rondo".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    } >= 0;
    (m.mode(), m.uid(), m.mtime(), xattr)
}

/// `chmod`, `chown`, `utime` and `setxattr` (which Landlock does not cover) on the run's
/// records (beside the workspace, and inside a `--workspace` folder) and on a file and
/// the home folder of the user: all refused, nothing changed, the run ends normally, and
/// a run killed after the attack resumes and replays; the tool's own files change freely.
#[test]
fn a_tool_changes_no_metadata_of_the_records_or_outside_its_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        let home = dir.join("home");
        let precious = write_owned(&home, "precious.txt", "precious\n", user);
        let script = write_owned(&dir, "meta.py", META, user);
        write_workflow(&dir, METADATA, user);
        let before = (metadata_of(&precious), metadata_of(&home));
        let args = |sys: &str, hold: &str| {
            vec![
                format!("script={}", script.display()),
                format!("home={}", home.display()),
                format!("sys={sys}"),
                format!("hold={hold}"),
            ]
        };

        // Beside the workspace: the run is killed while it holds, then resumed.
        let mut cmd = command_as(
            env!("CARGO_BIN_EXE_rondo"),
            &["run", "-q", "w.rondo", "--run-dir", "runs", "--run-id", "r"],
            &dir,
            user,
        );
        for a in args("..", "600") {
            cmd.arg("--input").arg(a);
        }
        let mut child = cmd.spawn().unwrap();
        let run = dir.join("runs/r");
        wait_for(&run.join("workspace/hold.ready"));
        child.kill().unwrap();
        child.wait().unwrap();
        let resumed = rondo_as(&dir, &["resume", "-q", "runs/r"], user);
        assert_ok(&resumed, "resume");
        assert_ok(&rondo_as(&dir, &["replay", "runs/r"], user), "replay");

        // Inside a `--workspace` folder: the records are under `.rondo/`.
        let project = dir.join("project");
        std::fs::create_dir_all(&project).unwrap();
        if let Some(uid) = user {
            std::os::unix::fs::chown(&project, Some(uid), Some(uid)).unwrap();
        }
        let mut cmd = command_as(
            env!("CARGO_BIN_EXE_rondo"),
            &[
                "run",
                "-q",
                "w.rondo",
                "--run-id",
                "w",
                "--workspace",
                "project",
            ],
            &dir,
            user,
        );
        for a in args(".rondo/runs/w", "0") {
            cmd.arg("--input").arg(a);
        }
        assert_ok(&cmd.output().unwrap(), "run in a workspace folder");
        let in_workspace = project.join(".rondo/runs/w");
        assert_ok(
            &rondo_as(&dir, &["replay", in_workspace.to_str().unwrap()], user),
            "replay",
        );

        for (system, workspace) in [
            (&run, run.join("workspace")),
            (&in_workspace, project.clone()),
        ] {
            let report = tool_stdout(system, "attack");
            assert_eq!(report, "own file changed\n", "as {user:?}");
            assert_eq!(json(system.join("run.json"))["exit"], "success");
            assert_eq!(tool_stdout(system, "last"), "mine\n");
            for record in ["run.json", "events.jsonl", "state.json", ""] {
                if record == "state.json" && !system.join(record).exists() {
                    continue; // a run this short takes no snapshot
                }
                let (mode, _, _, xattr) = metadata_of(&system.join(record));
                assert_ne!(mode & 0o777, 0, "{record} as {user:?}");
                assert!(!xattr, "{record} as {user:?}");
            }
            assert_eq!(metadata_of(&workspace.join("mine.txt")).0 & 0o777, 0o600);
        }
        assert_eq!(
            (metadata_of(&precious), metadata_of(&home)),
            before,
            "as {user:?}"
        );
    }
}

/// Starts two children that outlive it unless killed: one in a session of its own, one
/// orphaned by a double fork, both named by the marker in the file `marker` (`rondo`'s
/// own command line must not hold it); each says it runs (through a FIFO) before the
/// tool exits.
const DAEMONS: &str = r#"
m=$(cat marker)
mkfifo a b
setsid python3 -c "open('a','w').write('up\n'); import time; time.sleep(600)" "$m-setsid" >/dev/null 2>&1 </dev/null &
( python3 -c "open('b','w').write('up\n'); import time; time.sleep(600)" "$m-double" >/dev/null 2>&1 </dev/null & )
read x < a; read y < b; echo "$x $y"
"#;

/// Forks children until the kernel refuses (or 600 of them, more than the default bound
/// of 512), says how many it got; they end when it does.
const FLOOD: &str = r#"
import os
r, w = os.pipe()
count, refused = 0, False
while count < 600:
    try:
        pid = os.fork()
    except BlockingIOError:
        refused = True
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    count += 1
print(count, 'refused' if refused else 'unbounded')
"#;

const PROCESSES: &str = r#"
workflow processes {
  input daemons: string
  input flood: string
}
role spawn: tool { command = ["sh", "-c", "{{ input.daemons }}"] }
role hold: tool { command = ["sh", "-c", "echo > hold.ready; read line < go; echo $line"] }
role flood: tool { command = ["python3", "-c", "{{ input.flood }}"] }
role last: tool { command = ["sh", "-c", "echo still running"] }
start -> spawn
spawn -> hold
hold -> flood
flood -> last
last -> success
exit success
"#;

/// A tool's daemons (a `setsid` child, a double-forked one) end with its step, not with
/// the run or never; a tool flooding the process table is refused past its bound, its
/// step ends and the run goes on to its exit; as root and as an ordinary user.
#[test]
fn a_tools_processes_end_with_its_step_and_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        write_workflow(&dir, PROCESSES, user);
        let project = dir.join("project");
        std::fs::create_dir_all(&project).unwrap();
        let go = project.join("go");
        let path = std::ffi::CString::new(go.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        if let Some(uid) = user {
            for p in [&project, &go] {
                std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
            }
        }
        let marker = unique("rondo-daemon");
        write_owned(&project, "marker", &marker, user);
        let mut cmd = command_as(
            env!("CARGO_BIN_EXE_rondo"),
            &[
                "run",
                "-q",
                "w.rondo",
                "--run-id",
                "p",
                "--workspace",
                "project",
            ],
            &dir,
            user,
        );
        for (k, v) in [("daemons", DAEMONS), ("flood", FLOOD)] {
            cmd.arg("--input").arg(format!("{k}={v}"));
        }
        let mut child = cmd.spawn().unwrap();
        wait_for(&project.join("hold.ready"));
        // The step that started them is over; the run is not.
        assert_none_left(&marker, "after the step");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&go)
            .unwrap()
            .write_all(b"go\n")
            .unwrap();
        let status = child.wait().unwrap();
        assert_none_left(&marker, "after the run");
        assert!(status.success(), "as {user:?}: {status:?}");
        let run = project.join(".rondo/runs/p");
        assert_eq!(tool_stdout(&run, "spawn"), "up up\n", "as {user:?}");
        let flood = tool_stdout(&run, "flood");
        let (count, how) = flood.trim().split_once(' ').unwrap();
        assert_eq!(how, "refused", "as {user:?}: {flood}");
        assert!(count.parse::<u32>().unwrap() < 512, "as {user:?}: {flood}");
        assert_eq!(json(run.join("run.json"))["exit"], "success");
        assert_eq!(tool_stdout(&run, "last"), "still running\n");
    }
}

/// Waits until each process ends (a pidfd turns readable when it does), or fails.
fn wait_for_end(pids: &[i32]) {
    for &pid in pids {
        // SAFETY: plain system calls; the descriptor is closed below.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if fd < 0 {
            continue; // already gone
        }
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = PATIENCE.as_millis() as i32;
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        if ready != 1 {
            for &pid in pids {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("process {pid} outlived the rondo that started it");
        }
    }
}

/// Waits until no process holds `marker`, or fails. The kernel kills a namespace's
/// processes together but each ends in its own time, so every one found is waited for.
fn wait_until_none_left(marker: &str) {
    let since = Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        if since.elapsed() > PATIENCE {
            assert_none_left(marker, "after rondo was killed");
        }
        wait_for_end(&left);
    }
}

/// `rondo` killed in the middle of a step (a crash, `kill -9`): the tool and the daemon it
/// started end too, as root and as an ordinary user.
#[test]
fn a_tools_processes_end_when_rondo_is_killed() {
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        write_workflow(
            &dir,
            r#"
workflow crash {
  input daemons: string
}
role spawn: tool {
  command = ["sh", "-c", "sh -c \"$1\" && echo > spawned && exec python3 -c 'open(\"tool.up\", \"w\"); import time; time.sleep(600)' $(cat marker)-tool", "sh", "{{ input.daemons }}"]
}
start -> spawn
spawn -> success
exit success
"#,
            user,
        );
        let marker = unique("rondo-crash");
        let workspace = dir.join("project");
        std::fs::create_dir_all(&workspace).unwrap();
        if let Some(uid) = user {
            std::os::unix::fs::chown(&workspace, Some(uid), Some(uid)).unwrap();
        }
        write_owned(&workspace, "marker", &marker, user);
        let mut child = command_as(
            env!("CARGO_BIN_EXE_rondo"),
            &[
                "run",
                "-q",
                "w.rondo",
                "--run-id",
                "c",
                "--workspace",
                "project",
            ],
            &dir,
            user,
        )
        .arg("--input")
        .arg(format!("daemons={DAEMONS}"))
        .spawn()
        .unwrap();
        // Both daemons wrote their pipes before `spawned`; the tool itself writes `tool.up`.
        // Counting processes instead would count the transient shells of a `python3` shim.
        wait_for(&workspace.join("spawned"));
        wait_for(&workspace.join("tool.up"));
        child.kill().unwrap();
        child.wait().unwrap();
        wait_until_none_left(&marker);
    }
}

/// Pushes a command into the input queue of every terminal it can find (`TIOCSTI` on
/// `/dev/tty`, on every `/dev/pts/N` by path, on every descriptor it has) and draws on
/// each with raw escape sequences (a title, a colour); reports what got through.
const TERMINAL: &str = r#"
import fcntl, glob, os, sys, termios
typed = b'echo INJ' + b'ECTED\n'
drawn = b'\x1b]0;TTY' + b'OWNED\x07\x1b[31mTTY' + b'RED\x1b[0m\n'
def attempt(what, f):
    try:
        f()
        print(what, 'allowed')
    except OSError:
        pass
def inject(fd):
    for c in typed:
        fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
for fd in range(256):
    attempt(f'tiocsti fd {fd}', lambda: inject(fd))
for path in ['/dev/tty', sys.argv[1]] + sorted(glob.glob('/dev/pts/*')):
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        continue
    print('opened', path)
    attempt('tiocsti ' + path, lambda: inject(fd))
    attempt('write ' + path, lambda: os.write(fd, drawn))
sys.stdout.buffer.write(drawn)
print('tried')
"#;

/// The user's shell after `rondo` exits: runs `rondo`, then reads its terminal until the
/// test types END, showing every other line it would have run.
const SHELL: &str = r#"
"$@"
echo "RONDO-EXITED $?"
while IFS= read -r line; do
  [ "$line" = END ] && break
  echo "SHELL-RAN:$line"
done
echo SHELL-DONE
"#;

/// Runs `args` (as `user`) under a fresh pseudo-terminal, behind [`SHELL`]; returns all
/// it wrote.
fn run_in_terminal(dir: &Path, args: &[String], user: Option<u32>) -> String {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 50,
            cols: 200,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let tty = pair.master.tty_name().expect("the terminal's name");
    if let Some(uid) = user {
        // The terminal is the user's own, as a login gives it.
        std::os::unix::fs::chown(&tty, Some(uid), Some(uid)).unwrap();
    }
    let mut cmd = CommandBuilder::new("setpriv");
    match user {
        Some(uid) => cmd.args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ]),
        None => cmd.arg("--reset-env"),
    }
    cmd.args(["sh", "-c", SHELL, "sh"]);
    cmd.arg(env!("CARGO_BIN_EXE_rondo"));
    cmd.args(args);
    cmd.arg("--input");
    cmd.arg(format!("tty={}", tty.display()));
    cmd.cwd(dir);
    cmd.env("TERM", "xterm-256color");
    cmd.env("HOME", dir.join("home"));
    cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd.env_remove("RONDO_UNCONFINED_TOOLS");
    let mut child = pair.slave.spawn_command(cmd).unwrap();
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let feeder = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut all = Vec::new();
    let since = Instant::now();
    while !String::from_utf8_lossy(&all).contains("RONDO-EXITED") {
        assert!(
            since.elapsed() < PATIENCE,
            "rondo never exited: {}",
            String::from_utf8_lossy(&all)
        );
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            all.extend(chunk);
        }
    }
    let mut writer = pair.master.take_writer().unwrap();
    writer.write_all(b"END\n").unwrap();
    writer.flush().unwrap();
    while !String::from_utf8_lossy(&all).contains("SHELL-DONE") {
        assert!(
            since.elapsed() < PATIENCE,
            "the shell never ended: {}",
            String::from_utf8_lossy(&all)
        );
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            all.extend(chunk);
        }
    }
    child.wait().unwrap();
    drop(writer);
    drop(pair.master);
    let _ = feeder.join();
    all.extend(rx.try_iter().flatten());
    String::from_utf8_lossy(&all).into_owned()
}

/// In a real terminal, a tool that tries `TIOCSTI` on `/dev/tty`, on `/dev/pts/N` opened
/// by path and on every descriptor it holds types nothing the shell runs after `rondo`
/// exits, and one that writes escape sequences to the terminal draws nothing: its output
/// reaches the screen only through `rondo`, escaped; as root and as an ordinary user.
#[test]
fn a_tool_cannot_type_into_or_draw_on_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        let script = write_owned(&dir, "terminal.py", TERMINAL, user);
        write_workflow(
            &dir,
            r#"
workflow terminal {
  input script: string
  input tty: string
}
role hostile: tool { command = ["python3", "{{ input.script }}", "{{ input.tty }}"] }
start -> hostile
hostile -> success
exit success
"#,
            user,
        );
        let args: Vec<String> = [
            "run",
            "w.rondo",
            "--run-dir",
            "runs",
            "--run-id",
            "t",
            "--input",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("script={}", script.display())])
        .collect();
        let screen = run_in_terminal(&dir, &args, user);
        assert!(screen.contains("RONDO-EXITED 0"), "as {user:?}: {screen}");
        assert!(!screen.contains("SHELL-RAN:"), "as {user:?}: {screen}");
        assert!(!screen.contains("INJECTED"), "as {user:?}: {screen}");
        assert!(
            !screen.contains("\x1b]0;TTYOWNED"),
            "as {user:?}: {screen:?}"
        );
        assert!(
            !screen.contains("\x1b[31mTTYRED"),
            "as {user:?}: {screen:?}"
        );
        // What the tool printed is shown, escaped.
        assert!(
            screen.contains("^[]0;TTYOWNED^G^[[31mTTYRED"),
            "as {user:?}: {screen}"
        );
        let report = tool_stdout(&dir.join("runs/t"), "hostile");
        assert!(report.ends_with("tried\n"), "as {user:?}: {report}");
        assert!(!report.contains("allowed"), "as {user:?}: {report}");
    }
}

/// Runs `rondo` where the kernel refuses new namespaces (`unshare` fails with `EPERM`, as
/// under a policy without unprivileged user namespaces).
fn rondo_without_namespaces(cwd: &Path, args: &[&str]) -> Output {
    common::rondo_refusing(libc::SYS_unshare, libc::EPERM, cwd, args, &[])
}

/// Where a tool cannot get its own PID and mount namespace, no local tool runs (a clear
/// error naming `--unconfined-tools`) unless the user passes `--unconfined-tools`; then
/// it runs with all the user's permissions.
#[test]
fn without_namespaces_local_tools_are_refused_unless_the_user_opts_in() {
    let tmp = tempfile::tempdir().unwrap();
    write_workflow(
        tmp.path(),
        r#"
workflow plain {}
role touch: tool { command = ["sh", "-c", "echo ran > ran.txt; echo x > ../escaped.txt"] }
start -> touch
touch -> success
exit success
"#,
        None,
    );
    let run = ["run", "-q", "w.rondo", "--run-dir", "runs", "--run-id"];
    let refused = rondo_without_namespaces(tmp.path(), &[&run[..], &["no"]].concat());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("namespace"), "{err}");
    assert!(err.contains("--unconfined-tools"), "{err}");
    assert!(!tmp.path().join("runs/no/workspace/ran.txt").exists());

    let allowed = rondo_without_namespaces(
        tmp.path(),
        &[&run[..], &["yes", "--unconfined-tools"]].concat(),
    );
    assert_ok(&allowed, "--unconfined-tools");
    assert!(tmp.path().join("runs/yes/workspace/ran.txt").exists());
    assert!(tmp.path().join("runs/yes/escaped.txt").exists());
    // Loudly, even with `-q`, and in the records: what the tools ran without.
    let warned = String::from_utf8_lossy(&allowed.stderr);
    assert!(
        warned.contains("run UNCONFINED, with all your permissions"),
        "{warned}"
    );
    let confinement = of_kind(&events(&tmp.path().join("runs/yes")), "tool_confinement");
    assert_eq!(confinement.len(), 1);
    assert_eq!(confinement[0]["protections"]["write_rules"], false);
    assert_eq!(confinement[0]["protections"]["pid_namespace"], false);
    let missing = confinement[0]["missing"].to_string();
    for protection in ["write rules (Landlock)", "own PID namespace and /proc"] {
        assert!(missing.contains(protection), "{missing}");
    }
}

/// Connects to each Unix socket of the space-separated list `argv[1]`.
const CONNECT: &str = r#"
import socket, sys
for path in sys.argv[1].split():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        print('CONNECTED', path)
    except OSError:
        print('refused', path)
"#;

/// A daemon's Unix socket (here one the test listens on, open to the tool's user, and the
/// Docker engine's when the machine has one) is out of a tool's reach: as root, the
/// engine or systemd would run anything it asks, outside every confinement.
#[test]
fn a_tool_cannot_connect_to_a_daemons_unix_socket() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        let script = write_owned(&dir, "connect.py", CONNECT, user);
        let daemon = dir.join("daemon.sock");
        let listener = std::os::unix::net::UnixListener::bind(&daemon).unwrap();
        std::fs::set_permissions(&daemon, std::fs::Permissions::from_mode(0o777)).unwrap();
        if let Some(uid) = user {
            std::os::unix::fs::chown(&daemon, Some(uid), Some(uid)).unwrap();
        }
        let mut sockets = vec![daemon.display().to_string()];
        for engine in ["/var/run/docker.sock", "/run/docker.sock"] {
            if Path::new(engine).exists() {
                sockets.push(engine.to_string());
            }
        }
        write_workflow(
            &dir,
            r#"
workflow sockets {
  input script: string
  input sockets: string
}
role connect: tool { command = ["python3", "{{ input.script }}", "{{ input.sockets }}"] }
start -> connect
connect -> success
exit success
"#,
            user,
        );
        let out = rondo_as(
            &dir,
            &[
                "run",
                "-q",
                "w.rondo",
                "--run-dir",
                "runs",
                "--run-id",
                "s",
                "--input",
                &format!("script={}", script.display()),
                "--input",
                &format!("sockets={}", sockets.join(" ")),
            ],
            user,
        );
        assert_ok(&out, "run");
        let report = tool_stdout(&dir.join("runs/s"), "connect");
        let expected: String = sockets.iter().map(|s| format!("refused {s}\n")).collect();
        assert_eq!(report, expected, "as {user:?}");
        // The daemon still serves everyone else.
        std::os::unix::net::UnixStream::connect(&daemon).unwrap();
        drop(listener);
    }
}

/// A tool takes every permission away from the folder it works in (`chmod 000 .`, which
/// Landlock does not cover, on a folder it may change): in a `--workspace` folder the
/// run's records are reached through it, and the next tools start in it. The run goes on
/// to its exit and its records say so, as root and as an ordinary user (whom the mode
/// stops: the records stayed `running`, the next tool could not start).
#[test]
fn a_tool_cannot_lock_the_run_out_of_its_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    for user in users() {
        let dir = user_dir(tmp.path(), user);
        write_workflow(
            &dir,
            r#"
workflow lock {}
role lock: tool { command = ["sh", "-c", "chmod 000 . && echo locked"] }
role after: tool { command = ["sh", "-c", "echo after"] }
start -> lock
lock -> after
after -> success
exit success
"#,
            user,
        );
        let project = dir.join("project");
        std::fs::create_dir_all(&project).unwrap();
        if let Some(uid) = user {
            std::os::unix::fs::chown(&project, Some(uid), Some(uid)).unwrap();
        }
        let out = rondo_as(
            &dir,
            &[
                "run",
                "-q",
                "w.rondo",
                "--run-id",
                "l",
                "--workspace",
                "project",
            ],
            user,
        );
        assert_ok(&out, "run");
        let run = project.join(".rondo/runs/l");
        let info = json(run.join("run.json"));
        assert_eq!(info["status"], "finished", "as {user:?}: {info:#}");
        assert_eq!(info["exit"], "success", "as {user:?}");
        assert_eq!(tool_stdout(&run, "lock"), "locked\n");
        assert_eq!(tool_stdout(&run, "after"), "after\n");
        assert_ok(
            &rondo_as(&dir, &["replay", run.to_str().unwrap()], user),
            "replay",
        );
    }
}
