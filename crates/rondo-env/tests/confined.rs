//! What a confined local command can reach beyond its files: other processes, its own
//! children after it ends, the number of its processes, capabilities, devices, signals
//! and abstract sockets. Real processes, real kernel features, as the user running the
//! tests (the unprivileged variants run through the `rondo` binary in
//! `tests/hostile_local.rs`).

mod common;

use std::num::NonZeroU32;
use std::path::Path;

use rondo_env::{Capability, Environment, ExecRequest, LocalConfig, LocalEnv};

async fn env(dir: &Path) -> LocalEnv {
    LocalEnv::start(LocalConfig::new(dir.join("run")))
        .await
        .unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a Python program as the command (not through a shell), with `args`.
fn python(program: &str, args: &[&str]) -> ExecRequest {
    let mut argv = vec!["python3", "-c", program];
    argv.extend_from_slice(args);
    ExecRequest::argv(argv)
}

/// The processes of the machine whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) && common::process_alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Kills what a failed assertion would otherwise leave running, then fails.
fn assert_none_left(marker: &str) {
    let left = processes_with(marker);
    for &pid in &left {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "processes outlived their call: {left:?}");
}

/// Looks through every process it can see for this test process's environment (a
/// `KEY=value` of it that no tool gets): its environment, its memory, its descriptors.
const SNOOP: &str = r#"
import os, sys
needle = open(sys.argv[1], 'rb').read()
me = os.getpid()
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print('visible', *pids)
for pid in pids:
    if pid == me:
        continue
    try:
        if needle in open(f'/proc/{pid}/environ', 'rb').read():
            print('FOUND environ', pid)
    except OSError as e:
        print('denied environ', pid, e.errno)
    try:
        with open(f'/proc/{pid}/mem', 'rb') as mem:
            for line in open(f'/proc/{pid}/maps'):
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split('-'))
                if 'r' not in perms or end - start > 64 << 20:
                    continue
                try:
                    mem.seek(start)
                    if needle in mem.read(end - start):
                        print('FOUND mem', pid)
                        break
                except OSError:
                    pass
    except OSError as e:
        print('denied mem', pid, e.errno)
    try:
        for fd in os.listdir(f'/proc/{pid}/fd'):
            try:
                with open(f'/proc/{pid}/fd/{fd}', 'rb') as f:
                    if needle in f.read(1 << 20):
                        print('FOUND fd', pid, fd)
            except OSError:
                pass
    except OSError as e:
        print('denied fd', pid, e.errno)
"#;

/// A command sees only the processes of its own call, and none of them is `rondo`'s (here
/// the test's) copy: no environment, no memory, no descriptor of the caller's.
#[tokio::test]
async fn a_call_sees_no_process_but_its_own_and_no_secret_of_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let (key, value) = std::env::vars()
        .find(|(k, v)| k.starts_with("CARGO_") && v.len() >= 8)
        .expect("cargo runs the tests with its CARGO_* variables");
    std::fs::write(env.run_dir().join("needle"), format!("{key}={value}")).unwrap();
    let out = env.exec(python(SNOOP, &["needle"])).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert!(!out.stdout.contains("FOUND"), "{}", out.stdout);
    let visible: Vec<i32> = out
        .stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("visible "))
        .unwrap()
        .split(' ')
        .map(|p| p.parse().unwrap())
        .collect();
    // Its init and itself: not this test process, not the machine's.
    assert_eq!(visible, [1, 2], "{}", out.stdout);
    assert!(
        out.stdout.contains("denied environ 1"),
        "the init holds a copy of the caller's memory: {}",
        out.stdout
    );
}

/// Every process a command starts ends with it, however it detached (a new session, a
/// double fork); the command's own exit code is reported as before, and so are a death by
/// signal and a timeout.
#[tokio::test]
async fn every_process_of_a_call_ends_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let marker = common::unique("rondo-survivor");
    // Each child says it runs (through a FIFO) before the command exits.
    let line = format!(
        "mkfifo a b; \
         setsid python3 -c \"open('a','w').write('up\\n'); import time; time.sleep(600)\" {marker}-setsid >/dev/null 2>&1 < /dev/null & \
         ( python3 -c \"open('b','w').write('up\\n'); import time; time.sleep(600)\" {marker}-double >/dev/null 2>&1 < /dev/null & ) ; \
         read x < a; read y < b; echo $x $y; exit 7"
    );
    let out = env.exec(ExecRequest::shell(line)).await.unwrap();
    assert_eq!(out.stdout, "up up\n", "{out:?}");
    assert_eq!(out.exit_code, Some(7));
    assert_none_left(&marker);

    let out = env.exec(ExecRequest::shell("kill -KILL $$")).await.unwrap();
    assert_eq!(out.exit_code, Some(128 + 9));
    let out = env
        .exec(
            ExecRequest::shell("echo started; sleep 60")
                .timeout(std::time::Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(out.timed_out && !out.success(), "{out:?}");
    assert_eq!(out.stdout, "started\n");
    assert_eq!(out.exit_code, Some(128 + 15));
}

/// Forks children until the kernel refuses (or 300 of them), says how many it got.
const FLOOD: &str = r#"
import os
r, w = os.pipe()
count, refused = 0, False
while count < 300:
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

/// A call has at most `max_processes` processes at once, itself included; past that a
/// fork fails (`EAGAIN`) and the command goes on.
#[tokio::test]
async fn a_call_has_a_bounded_number_of_processes() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let out = env
        .exec(python(FLOOD, &[]).max_processes(NonZeroU32::new(16).unwrap()))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    let (count, how) = out.stdout.trim().split_once(' ').unwrap();
    assert_eq!(how, "refused", "{}", out.stdout);
    assert!(count.parse::<u32>().unwrap() <= 15, "{}", out.stdout);
}

/// The capability sets of `/proc/self/status`, as (name, mask).
fn capabilities(status: &str) -> Vec<(String, u64)> {
    status
        .lines()
        .filter_map(|l| l.strip_prefix("Cap"))
        .map(|l| {
            let (name, hex) = l.split_once(':').unwrap();
            (
                name.to_string(),
                u64::from_str_radix(hex.trim(), 16).unwrap(),
            )
        })
        .collect()
}

/// A command started by root has no capability in any set (bounding and ambient
/// included), unless the request keeps some.
#[tokio::test]
async fn a_root_call_has_no_capability_unless_it_keeps_one() {
    if !is_root() {
        eprintln!("skipped: only root starts commands with capabilities");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let out = env
        .exec(ExecRequest::argv(["cat", "/proc/self/status"]))
        .await
        .unwrap();
    let caps = capabilities(&out.stdout);
    assert_eq!(caps.len(), 5, "{}", out.stdout);
    assert!(caps.iter().all(|(_, m)| *m == 0), "{caps:?}");

    let net_raw = Capability::parse("CAP_NET_RAW").unwrap();
    let out = env
        .exec(ExecRequest::argv(["cat", "/proc/self/status"]).capabilities([net_raw]))
        .await
        .unwrap();
    let kept: Vec<(String, u64)> = capabilities(&out.stdout);
    for (name, mask) in kept {
        let want = if name == "Amb" { 0 } else { 1 << 13 };
        assert_eq!(mask, want, "Cap{name}");
    }
}

/// What a command can do to the terminal and other processes' sockets: it has no
/// controlling terminal and no `/dev/tty`, its `/dev` holds only the harmless devices,
/// it cannot `ioctl` a device it opens (Landlock ABI 5), signal its namespace's init
/// (ABI 6), or connect to an abstract Unix socket of the caller (ABI 6).
#[tokio::test]
async fn a_call_has_no_terminal_no_device_ioctl_and_no_signal_or_socket_out() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let protections = env.protections().clone();
    assert!(
        protections.new_session && protections.pid_namespace,
        "{protections:?}"
    );
    let name = common::unique("rondo-abstract");
    let address =
        <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    let probe = r#"
import fcntl, os, socket, struct, sys
def attempt(what, f):
    try:
        f()
        print(what, 'allowed')
    except OSError as e:
        print(what, 'refused')
attempt('tty', lambda: os.open('/dev/tty', os.O_RDWR))
print('sid', os.getsid(0) == os.getpid(), 'pgrp', os.getpgrp())
print('dev', *sorted(os.listdir('/dev')))
fd = os.open('/dev/urandom', os.O_RDONLY)
attempt('ioctl', lambda: fcntl.ioctl(fd, 0x80045200, struct.pack('i', 0)))
attempt('signal', lambda: os.kill(1, 0))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
attempt('socket', lambda: s.connect('\0' + sys.argv[1]))
"#;
    let out = env.exec(python(probe, &[&name])).await.unwrap();
    drop(listener);
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "tty refused", "{}", out.stdout);
    assert_eq!(
        lines[2],
        "dev fd full null random shm stderr stdin stdout urandom zero"
    );
    let want = |abi: u32| {
        if protections.landlock_abi >= abi {
            "refused"
        } else {
            "allowed"
        }
    };
    assert_eq!(lines[3], format!("ioctl {}", want(5)), "{protections:?}");
    assert_eq!(lines[4], format!("signal {}", want(6)), "{protections:?}");
    assert_eq!(lines[5], format!("socket {}", want(6)), "{protections:?}");
    assert_eq!(protections.ioctl_dev, protections.landlock_abi >= 5);
    assert_eq!(protections.scopes, protections.landlock_abi >= 6);
}

/// A spec's `max_processes` and `capabilities`: read from YAML, and refused, with where
/// they are written, when there can be no such call (no process at all, a capability
/// that does not exist).
#[test]
fn a_spec_says_how_many_processes_and_which_capabilities() {
    let file = Path::new("config/tools/t.yaml");
    let root = Path::new(".");
    let spec = rondo_env::ToolSpec::from_yaml(
        "tool_name: t\nexecutable: t\nmax_processes: 8\ncapabilities: [net_raw, CAP_SYS_PTRACE]\n",
        file,
        root,
    )
    .unwrap();
    assert_eq!(spec.max_processes, NonZeroU32::new(8));
    let names: Vec<&str> = spec
        .capabilities
        .unwrap()
        .iter()
        .map(|c| c.name())
        .collect();
    assert_eq!(names, ["net_raw", "sys_ptrace"]);
    for (yaml, line, why) in [
        ("max_processes: 0", 3, "nonzero"),
        (
            "capabilities: [net_raw, nope]",
            3,
            "`nope` is not a capability",
        ),
    ] {
        let err = rondo_env::ToolSpec::from_yaml(
            &format!("tool_name: t\nexecutable: t\n{yaml}\n"),
            file,
            root,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(&format!("config/tools/t.yaml:{line}:")),
            "{err}"
        );
        assert!(err.contains(why), "{err}");
    }
}

/// Connects to each Unix socket path given, then binds and connects to one of its own in
/// the folder it runs in and in its `TMPDIR`; one line each.
const SOCKETS: &str = r#"
import os, socket, sys
def attempt(what, path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        print(what, 'connected')
    except OSError:
        print(what, 'refused')
for i, path in enumerate(sys.argv[1:]):
    attempt(f'outside{i}', path)
for name, folder in [('workspace', '.'), ('tmpdir', os.environ['TMPDIR'])]:
    path = os.path.join(folder, 'own.sock')
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own.bind(path)
    own.listen(1)
    attempt(name, path)
"#;

/// A daemon's Unix socket with a path (the Docker engine's, systemd's, an agent's: as
/// root, reaching one is reaching everything) is out of a command's reach, whether it
/// was bound before the environment started or after, and whatever its permissions; a
/// command still binds and uses sockets of its own in its workspace and `TMPDIR`.
#[tokio::test]
async fn a_call_cannot_connect_to_another_processs_unix_socket() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("daemon");
    std::fs::create_dir_all(&outside).unwrap();
    let before = outside.join("before.sock");
    let _early = std::os::unix::net::UnixListener::bind(&before).unwrap();
    let env = env(dir.path()).await;
    let after = outside.join("after.sock");
    let _late = std::os::unix::net::UnixListener::bind(&after).unwrap();
    for path in [&before, &after] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let (before, after) = (before.to_str().unwrap(), after.to_str().unwrap());
    let out = env.exec(python(SOCKETS, &[before, after])).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(
        out.stdout,
        "outside0 refused\noutside1 refused\nworkspace connected\ntmpdir connected\n"
    );
    // The sockets are still there for everyone else.
    std::os::unix::net::UnixStream::connect(before).unwrap();
    std::os::unix::net::UnixStream::connect(after).unwrap();
}

/// A command has a `/dev/shm` of its own: Python's `multiprocessing` (its locks are POSIX
/// semaphores there) works, the machine's shared memory is not visible, and what the
/// command leaves there does not reach the machine's.
#[tokio::test]
async fn a_call_has_shared_memory_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let host = Path::new("/dev/shm").join(common::unique("rondo-host-shm"));
    std::fs::write(&host, "the machine's").unwrap();
    let probe = r#"
import multiprocessing, os, sys
print(multiprocessing.Pool(2).map(abs, [-1, -2]))
print(os.path.exists(sys.argv[1]))
open('/dev/shm/left-by-the-tool-' + sys.argv[2], 'w').write('x')
"#;
    let mark = common::unique("mark");
    let out = env
        .exec(python(probe, &[host.to_str().unwrap(), &mark]))
        .await
        .unwrap();
    let _ = std::fs::remove_file(&host);
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "[1, 2]\nFalse\n");
    assert!(!Path::new(&format!("/dev/shm/left-by-the-tool-{mark}")).exists());
}
