//! What a tool run in a Docker environment can and cannot do, end to end: the real `rondo`
//! binary, the real engine and image (rondo-test-base:latest), tools that try their worst.
//! A tool cannot reach rondo's terminal, read a secret of the host or another process,
//! hold a capability, change the run's records or a host file outside its mounts, or keep
//! a process running once its step ended; a missing engine feature is a clear error.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{docker_ready, events, json, of_kind};

const IMAGE: &str = "rondo-test-base:latest";

/// Lists the processes of the container but the engine's init and the lister's own
/// ancestors (the command runner), one command line a line.
const PROCS_PY: &str = include_str!("../crates/rondo-env/tests/procs.py");

fn rondo_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.args(args).current_dir(cwd).env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A folder holding `w.rondo` (checked) and `project/` with the files; the runs use
/// `project` as their workspace, so the records are in `project/.rondo/runs/<id>`.
fn setup(workflow: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    for (name, text) in files {
        std::fs::write(project.join(name), text).unwrap();
    }
    let path = tmp.path().join("w.rondo");
    std::fs::write(&path, workflow).unwrap();
    let check = rondo_in(tmp.path(), &["check", "--offline", "w.rondo"], &[]);
    common::assert_success(&check);
    (tmp, project, path)
}

fn run_in(
    tmp: &Path,
    project: &Path,
    id: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Output, PathBuf) {
    let mut args = vec![
        "run",
        "-q",
        "w.rondo",
        "--workspace",
        project.to_str().unwrap(),
        "--run-id",
        id,
    ];
    args.extend_from_slice(extra);
    let out = rondo_in(tmp, &args, env);
    (out, project.join(".rondo/runs").join(id))
}

/// A run id no other test (or other checkout running the same tests) uses.
fn unique(name: &str) -> String {
    format!("hd-{name}-{}", std::process::id())
}

fn containers_of(run_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=rondo.run_id={run_id}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Removes the containers of a run kept with `--keep-env`, whatever the test's outcome.
struct Kept(String);

impl Drop for Kept {
    fn drop(&mut self) {
        for id in containers_of(&self.0) {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

/// The result of the (only) call of a tool role.
fn tool_result(run_dir: &Path, role: &str) -> serde_json::Value {
    of_kind(&events(run_dir), "tool_call")
        .into_iter()
        .find(|e| e["role"] == role)
        .unwrap_or_else(|| panic!("no call of {role} in {}", run_dir.display()))["result"]
        .clone()
}

fn stdout_of(run_dir: &Path, role: &str) -> String {
    tool_result(run_dir, role)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// 1. The terminal
// ---------------------------------------------------------------------------------------

/// Tries to reach the terminal every way a process can: its standard streams, `/dev/tty`,
/// TIOCSTI (pushing a command line into the terminal's input) on each, reading stdin;
/// then prints escape sequences (colour, window title, clear screen).
const TTY_PY: &str = r#"
import errno, fcntl, os, sys, termios
def attempt(name, action):
    try:
        action()
        print(f"{name}: allowed")
    except OSError as e:
        print(f"{name}: refused ({errno.errorcode.get(e.errno, e.errno)})")
for fd in (0, 1, 2):
    print(f"fd{fd}: {os.readlink(f'/proc/self/fd/{fd}').split(':')[0]} tty={os.isatty(fd)}")
# Spelled by code so the report itself never holds the word.
typed = "".join(map(chr, (101, 99, 104, 111, 32, 80, 87, 78, 69, 68, 10)))
def inject(fd):
    for ch in typed:
        fcntl.ioctl(fd, termios.TIOCSTI, ch.encode())
for fd in (0, 1, 2):
    attempt(f"TIOCSTI fd{fd}", lambda fd=fd: inject(fd))
def through_dev_tty():
    fd = os.open("/dev/tty", os.O_RDWR)
    inject(fd)
attempt("TIOCSTI /dev/tty", through_dev_tty)
print("stdin:", repr(sys.stdin.read(1)))
print("pts:", sorted(os.listdir("/dev/pts")))
sys.stdout.flush()
os.write(1, b"shout \x1b[31mRED\x1b[0m \x1b]0;owned\x07 \x1b[2J done\n")
"#;

const ROWS: u16 = 50;
const COLS: u16 = 160;
/// A hang fails the test instead of blocking CI.
const PROCESS_LIMIT: Duration = Duration::from_secs(300);

/// Runs `rondo` under a pseudo-terminal; returns the exit code, the screen's lines and
/// every byte written to the terminal.
fn run_in_pty(dir: &Path, args: &[&str]) -> (u32, Vec<String>, Vec<u8>) {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: ROWS,
            cols: COLS,
            pixel_width: 0,
            pixel_height: 0,
        })
        .expect("open a pty");
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.args(args);
    cmd.cwd(dir);
    cmd.env("TERM", "xterm-256color");
    cmd.env_remove("NO_COLOR");
    let mut child = pair.slave.spawn_command(cmd).expect("spawn rondo");
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().expect("reader");
    let all = Arc::new(Mutex::new(Vec::new()));
    let collected = all.clone();
    let feeder = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // The pty ends with EIO once the child and every copy of the slave are gone.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            collected.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > PROCESS_LIMIT {
            let _ = child.kill();
            panic!("rondo did not finish within {PROCESS_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(pair.master);
    let _ = feeder.join();
    let raw = all.lock().unwrap().clone();
    let size = |n: u16| std::num::NonZeroU16::new(n).expect("a screen size");
    let mut parser = vt100::Parser::new(size(ROWS), size(COLS), 0);
    parser.process(&raw);
    let lines = parser
        .screen()
        .contents()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect();
    (status.exit_code(), lines, raw)
}

/// A tool in Docker runs with no terminal: its streams are /dev/null and pipes, it has no
/// controlling terminal, TIOCSTI fails on every descriptor it has, stdin is empty, and the
/// escape sequences it prints reach rondo's terminal escaped.
#[test]
fn a_docker_tool_cannot_reach_the_terminal() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow terminal {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
}}
role probe: tool {{
  env = box
  timeout = 120s
  command = ["python3", "tty.py"]
}}
start -> probe
probe -> success
exit success
"#
        ),
        &[("tty.py", TTY_PY)],
    );
    let id = unique("tty");
    let workspace = project.to_str().unwrap().to_string();
    let (code, lines, raw) = run_in_pty(
        tmp.path(),
        &["run", "w.rondo", "--workspace", &workspace, "--run-id", &id],
    );
    let screen = lines.join("\n");
    assert_eq!(code, 0, "{screen}");
    let report = stdout_of(&project.join(".rondo/runs").join(&id), "probe");
    let expected = [
        "fd0: /dev/null tty=False",
        "fd1: pipe tty=False",
        "fd2: pipe tty=False",
        "TIOCSTI fd0: refused (ENOTTY)",
        "TIOCSTI fd1: refused (ENOTTY)",
        "TIOCSTI fd2: refused (ENOTTY)",
        // No controlling terminal at all.
        "TIOCSTI /dev/tty: refused (ENXIO)",
        "stdin: ''",
        // The container's own pseudo-terminal instance, with no terminal in it.
        "pts: ['ptmx']",
    ];
    let report_lines: Vec<&str> = report.lines().collect();
    assert_eq!(report_lines[..expected.len()], expected, "{report}");
    // Injected input would be echoed by the terminal: nothing was.
    let raw = String::from_utf8_lossy(&raw);
    assert!(!raw.contains("PWNED"), "{raw}");
    // The tool's escape sequences are shown, not obeyed.
    assert!(!raw.contains("\x1b]0;owned"), "{raw:?}");
    assert!(!raw.contains("\x1b[2J"), "{raw:?}");
    assert!(!raw.contains("\x1b[31mRED"), "{raw:?}");
    let shout = lines
        .iter()
        .find(|l| l.contains("shout"))
        .unwrap_or_else(|| panic!("no shout line:\n{screen}"));
    assert!(
        shout.ends_with("shout ^[[31mRED^[[0m ^[]0;owned^G ^[[2J done"),
        "{shout}"
    );
    // The screen was not cleared: the step's line is still there.
    assert!(screen.contains("probe (tool)"), "{screen}");
}

// ---------------------------------------------------------------------------------------
// 2. Other processes' secrets, capabilities
// ---------------------------------------------------------------------------------------

const SECRETS: [(&str, &str); 3] = [
    ("OPENAI_API_KEY", "sk-fake-openai-6f1d2c9a8b7e"),
    ("GITHUB_TOKEN", "ghp_fakeGithubToken0123456789abcdef"),
    (
        "AWS_SECRET_ACCESS_KEY",
        "fakeAwsSecret/9a8b7c6d5e4f3a2b1c0d",
    ),
];

/// Reads the environment of every process it can see into `out/<name>.environ`, and prints
/// its user, capability sets, the processes and the pid namespace it sees.
const SNOOP_PY: &str = r#"
import glob, os, subprocess, sys
name = sys.argv[1]
dumps, readable = [], 0
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        with open(path, "rb") as f:
            dumps.append(f.read())
        readable += 1
    except OSError:
        pass
with open(f"out/{name}.environ", "wb") as f:
    f.write(b"\n".join(dumps))
print("uid", os.getuid(), "environs", "many" if readable > 2 else readable)
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("Cap"):
            print(line.strip())
with open("/proc/1/cmdline", "rb") as f:
    print("pid 1:", f.read().replace(b"\0", b" ").decode().strip())
print("pidns", os.readlink("/proc/self/ns/pid"))
print(subprocess.run(["python3", "procs.py"], capture_output=True, text=True).stdout, end="")
"#;

/// Neither the container's configuration nor any process in it holds a secret of rondo's
/// environment; the tool sees only the container's processes (its own pid namespace), and
/// holds no capability, as root in the container and as another user.
#[test]
fn a_docker_tool_sees_no_secret_and_holds_no_capability() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow secrets {{}}
environment rooted {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
}}
environment nobody {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
  user = "65534:65534"
}}
role as_root: tool {{
  env = rooted
  command = ["python3", "snoop.py", "root"]
}}
role as_nobody: tool {{
  env = nobody
  command = ["python3", "snoop.py", "nobody"]
}}
start -> as_root
as_root -> as_nobody
as_nobody -> success
exit success
"#
        ),
        &[("snoop.py", SNOOP_PY), ("procs.py", PROCS_PY)],
    );
    let out_dir = project.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    // The other user must be able to write its findings.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let id = unique("secrets");
    let _kept = Kept(id.clone());
    let (out, run_dir) = run_in(tmp.path(), &project, &id, &["--keep-env"], &SECRETS);
    common::assert_success(&out);

    let containers = containers_of(&id);
    assert_eq!(containers.len(), 2, "one container per environment");
    for container in &containers {
        let inspect = Command::new("docker")
            .args(["inspect", container])
            .output()
            .unwrap();
        let info: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
        let config_env = info[0]["Config"]["Env"].to_string();
        assert!(config_env.contains("PATH="), "{config_env}");
        for (name, value) in SECRETS {
            assert!(!config_env.contains(name), "{name} in {config_env}");
            assert!(
                !config_env.contains(value),
                "{name}'s value in {config_env}"
            );
        }
    }
    let host_pidns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    for who in ["root", "nobody"] {
        let environ = std::fs::read(out_dir.join(format!("{who}.environ"))).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        // It did read environments (its own at least), and none holds a secret.
        assert!(environ.contains("RONDO_EXEC_ID="), "{who}: {environ}");
        for (name, value) in SECRETS {
            assert!(!environ.contains(name), "{who} read {name}");
            assert!(!environ.contains(value), "{who} read {name}'s value");
        }
        let role = if who == "root" {
            "as_root"
        } else {
            "as_nobody"
        };
        let report = stdout_of(&run_dir, role);
        let uid = if who == "root" { "uid 0" } else { "uid 65534" };
        assert!(report.starts_with(uid), "{report}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                report.contains(&format!("{set}:\t0000000000000000\n")),
                "{who}: {set}: {report}"
            );
        }
        // Its own pid namespace: the engine's init is pid 1, and besides the command
        // runner (the lister's ancestor) only the container's `sleep infinity`.
        assert!(
            report.contains("pid 1: /sbin/docker-init -- sleep infinity\n"),
            "{report}"
        );
        let pidns = report
            .lines()
            .find_map(|l| l.strip_prefix("pidns "))
            .unwrap();
        assert_ne!(pidns, host_pidns.to_string_lossy(), "{report}");
        assert!(report.ends_with("]\nsleep infinity\n"), "{report}");
    }
    // The secrets did not reach the records either.
    for entry in walk(&run_dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        for (name, value) in SECRETS {
            assert!(
                !text.contains(value),
                "{name}'s value in {}",
                entry.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

// ---------------------------------------------------------------------------------------
// 3. Metadata of the records and of host files
// ---------------------------------------------------------------------------------------

/// Every way root in the container might change the `.rondo` system area mounted with the
/// workspace, or a file of the host: each line says whether it was refused.
const TAMPER_SH: &str = r#"
try() { if ( eval "$2" ) >/dev/null 2>&1; then echo "$1: allowed"; else echo "$1: refused"; fi; }
echo "entries: $(ls -A /work/.rondo | wc -l)"
try umount 'umount /work/.rondo'
try lazy-umount 'umount -l /work/.rondo'
try mount-over 'mount -t tmpfs none /work/.rondo'
try rename 'mv /work/.rondo /work/moved'
try remove 'rmdir /work/.rondo'
try create 'touch /work/.rondo/x'
try mkdir 'mkdir /work/.rondo/runs'
try chmod 'chmod 0777 /work/.rondo'
try chown 'chown 65534 /work/.rondo'
try utimes 'touch -d 2001-01-01 /work/.rondo'
try xattr 'python3 -c "import os; os.setxattr(\"/work/.rondo\", \"user.x\", b\"1\")"'
try mknod 'mknod /work/dev-sda b 8 0'
try find-host 'find / -xdev -name outside-secret.txt | grep -q .'
"#;

/// With `--workspace`, the workspace (and its `.rondo` system area) is mounted: the area is
/// an empty read-only tmpfs for the tool, which cannot lift, rename, fill or re-date it,
/// even as root; the records on the host stay whole and a host file outside the mounts
/// stays untouched.
#[test]
fn a_docker_tool_cannot_change_the_records_or_host_files() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow tamper {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
}}
role first: tool {{
  env = box
  command = ["sh", "-c", "echo one > one.txt"]
}}
role vandal: tool {{
  env = box
  command = ["sh", "tamper.sh"]
}}
role last: tool {{
  env = box
  command = ["cat", "one.txt"]
}}
start -> first
first -> vandal
vandal -> last
last -> success
exit success
"#
        ),
        &[("tamper.sh", TAMPER_SH)],
    );
    let outside = tmp.path().join("outside-secret.txt");
    std::fs::write(&outside, "kept").unwrap();
    let before = std::fs::metadata(&outside).unwrap();
    // A first run makes the system area; the second one is attacked with it in place.
    let (out, _) = run_in(tmp.path(), &project, &unique("tamper-a"), &[], &[]);
    common::assert_success(&out);
    let system = project.join(".rondo");
    let area_before = std::fs::metadata(&system).unwrap();
    let id = unique("tamper-b");
    let (out, run_dir) = run_in(tmp.path(), &project, &id, &[], &[]);
    common::assert_success(&out);
    let report = stdout_of(&run_dir, "vandal");
    assert!(report.starts_with("entries: 0\n"), "{report}");
    let allowed: Vec<&str> = report.lines().filter(|l| l.ends_with("allowed")).collect();
    assert!(allowed.is_empty(), "{report}");
    assert_eq!(report.lines().count(), 14, "{report}");
    // The records are whole: every step in order, and the run's exit.
    let all = events(&run_dir);
    let seqs: Vec<u64> = all.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(json(run_dir.join("run.json"))["exit"], "success");
    assert_eq!(common::state(&run_dir)["step"], 3);
    assert_eq!(stdout_of(&run_dir, "last"), "one\n");
    // The system area's metadata on the host is what rondo left.
    let area_after = std::fs::metadata(&system).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(area_after.mode(), area_before.mode());
    assert_eq!(area_after.uid(), area_before.uid());
    assert!(!system.join("x").exists() && !project.join("moved").exists());
    assert!(!project.join("dev-sda").exists());
    let after = std::fs::metadata(&outside).unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    assert_eq!(after.mode(), before.mode());
}

/// A `host:` mount of a folder holding the workspace must not show the `.rondo` system
/// area either: it is masked wherever it lies beneath a mount.
#[test]
fn a_host_mount_above_the_workspace_does_not_show_the_records() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (parent, project) = (tmp.path(), tmp.path().join("project"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        parent.join("w.rondo"),
        format!(
            r#"
workflow above {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = ["host:{}:/data:rw"]
}}
role look: tool {{
  env = box
  command = ["sh", "-c", "ls -A /data/project/.rondo | wc -l; touch /data/project/.rondo/x 2>/dev/null || echo masked"]
}}
start -> look
look -> success
exit success
"#,
            parent.display()
        ),
    )
    .unwrap();
    let id = unique("above");
    let (out, run_dir) = run_in(parent, &project, &id, &[], &[]);
    common::assert_success(&out);
    assert_eq!(stdout_of(&run_dir, "look"), "0\nmasked\n");
    assert!(!project.join(".rondo/x").exists());
}

// ---------------------------------------------------------------------------------------
// 4. Processes that outlive their step
// ---------------------------------------------------------------------------------------

/// Leaves processes behind every way a shell or a program can: a new session, `nohup`, a
/// double fork, a cleared environment, a daemon closing every descriptor.
const SPAWN_SH: &str = r#"
setsid sleep 1001 >/dev/null 2>&1 </dev/null &
nohup sleep 1002 >/dev/null 2>&1 &
( sleep 1003 >/dev/null 2>&1 & )
env -i /bin/sleep 1004 >/dev/null 2>&1 &
python3 -c '
import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    sys.exit(0)
os.closerange(0, 1024)
time.sleep(1005)
'
echo spawned
"#;

/// One branch: leaves a daemon behind and says which process it is.
const FAST_SH: &str = r#"
setsid sleep 2001 >/dev/null 2>&1 </dev/null &
echo $! > /tmp/fast.pid.tmp && mv /tmp/fast.pid.tmp /tmp/fast.pid
echo fast done
"#;

/// The other branch, at the same time in the same container: starts a child of its own,
/// waits until the first branch's daemon is gone (its step ended), then says whether its
/// own child and itself are still there.
const SLOW_SH: &str = r#"
sleep 3001 >/dev/null 2>&1 &
mine=$!
while [ ! -s /tmp/fast.pid ]; do sleep 0.05; done
theirs=$(cat /tmp/fast.pid)
while kill -0 "$theirs" 2>/dev/null; do sleep 0.05; done
if kill -0 "$mine" 2>/dev/null; then echo "their daemon gone, my child alive"; fi
kill "$mine"
"#;

/// Every process a step starts is gone when the step ends — whatever it did to escape —
/// and a step's end does not touch the processes of a step running at the same time in
/// the same container.
#[test]
fn a_docker_step_leaves_no_process_behind() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow leftovers {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
}}
role spawn: tool {{
  env = box
  timeout = 60s
  command = ["sh", "spawn.sh"]
}}
role after_spawn: tool {{
  env = box
  command = ["python3", "procs.py"]
}}
role fast: tool {{
  env = box
  timeout = 60s
  command = ["sh", "fast.sh"]
}}
role slow: tool {{
  env = box
  timeout = 60s
  command = ["sh", "slow.sh"]
}}
role after_branches: tool {{
  env = box
  command = ["python3", "procs.py"]
}}
start -> spawn
spawn -> after_spawn
after_spawn -> parallel [fast, slow] -> after_branches
after_branches -> success
exit success
"#
        ),
        &[
            ("spawn.sh", SPAWN_SH),
            ("fast.sh", FAST_SH),
            ("slow.sh", SLOW_SH),
            ("procs.py", PROCS_PY),
        ],
    );
    let id = unique("leftovers");
    let (out, run_dir) = run_in(tmp.path(), &project, &id, &[], &[]);
    common::assert_success(&out);
    let spawn = tool_result(&run_dir, "spawn");
    assert_eq!(spawn["stdout"], "spawned\n", "{spawn:#}");
    assert_eq!(spawn["timed_out"], false, "{spawn:#}");
    assert_eq!(stdout_of(&run_dir, "after_spawn"), "sleep infinity\n");
    let slow = tool_result(&run_dir, "slow");
    assert_eq!(
        slow["stdout"], "their daemon gone, my child alive\n",
        "{slow:#}"
    );
    assert_eq!(slow["ok"], true, "{slow:#}");
    assert_eq!(stdout_of(&run_dir, "after_branches"), "sleep infinity\n");
    assert!(containers_of(&id).is_empty());
}

/// `rondo` killed in the middle of a Docker step (a crash, `kill -9`): the command and the
/// daemon it started end too, at once, not when a later run removes the container; only
/// the container's own init and `sleep infinity` stay.
#[test]
fn a_docker_tools_processes_end_when_rondo_is_killed() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow crash {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
}}
role hold: tool {{
  env = box
  timeout = 600s
  command = ["sh", "-c", "setsid sleep 1777 >/dev/null 2>&1 </dev/null & touch started; exec sleep 1778"]
}}
start -> hold
hold -> success
exit success
"#
        ),
        &[],
    );
    let id = unique("killed");
    let _kept = Kept(id.clone());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(["run", "-q", "w.rondo", "--workspace"])
        .arg(&project)
        .args(["--run-id", &id])
        .current_dir(tmp.path())
        .env("NO_COLOR", "1")
        .spawn()
        .unwrap();
    let since = Instant::now();
    while !project.join("started").exists() {
        assert!(since.elapsed() < PROCESS_LIMIT, "the step never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let containers = containers_of(&id);
    assert_eq!(containers.len(), 1);
    let top = || {
        let out = Command::new("docker")
            .args(["top", &containers[0], "-eo", "pid,args"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(top().contains("sleep 1777"), "{}", top());
    child.kill().unwrap();
    child.wait().unwrap();
    let since = Instant::now();
    while top().contains("sleep 177") {
        assert!(
            since.elapsed() < PROCESS_LIMIT,
            "outlived rondo:\n{}",
            top()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(top().contains("sleep infinity"), "{}", top());
}

/// A container user owning the workspace (`user` = the caller's uid) takes every
/// permission away from it (`chmod 000 /work`): the run's records, in the workspace's
/// `.rondo`, are reached through it. The run goes on to its exit and its records say so.
/// Run by an ordinary user of the engine's group (whom the mode stops; root is not
/// stopped): uid 65534 with the socket's group when the tests run as root.
#[test]
fn a_docker_tool_cannot_lock_the_run_out_of_its_workspace() {
    use std::os::unix::fs::MetadataExt;
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let user = if uid == 0 { 65534 } else { uid };
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow lock {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
  user = "{user}:{user}"
}}
role lock: tool {{
  env = box
  command = ["sh", "-c", "chmod 000 /work && echo locked"]
}}
role after: tool {{
  env = box
  command = ["sh", "-c", "echo after"]
}}
start -> lock
lock -> after
after -> success
exit success
"#
        ),
        &[],
    );
    let id = unique("lock");
    let mut cmd = if uid == 0 {
        let socket = std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
            .unwrap_or_else(|| "/var/run/docker.sock".into());
        let group = std::fs::metadata(&socket).unwrap().gid();
        for dir in [tmp.path(), project.as_path()] {
            std::os::unix::fs::chown(dir, Some(user), Some(user)).unwrap();
        }
        let mut cmd = Command::new("setpriv");
        cmd.args([
            format!("--reuid={user}"),
            format!("--regid={user}"),
            format!("--groups={group}"),
        ])
        .arg(env!("CARGO_BIN_EXE_rondo"))
        .env("HOME", tmp.path());
        cmd
    } else {
        Command::new(env!("CARGO_BIN_EXE_rondo"))
    };
    let out = cmd
        .args(["run", "-q", "w.rondo", "--workspace"])
        .arg(&project)
        .args(["--run-id", &id])
        .current_dir(tmp.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    common::assert_success(&out);
    let run_dir = project.join(".rondo/runs").join(&id);
    let info = json(run_dir.join("run.json"));
    assert_eq!(info["status"], "finished", "{info:#}");
    assert_eq!(info["exit"], "success");
    assert_eq!(stdout_of(&run_dir, "lock"), "locked\n");
    assert_eq!(stdout_of(&run_dir, "after"), "after\n");
}

/// A tool that signals everything it can — the container's init and `sleep infinity`,
/// every process of its user, the command runner — does not stop the container: its
/// step fails, the next step runs and the run reaches its declared exit.
#[test]
fn a_docker_tool_cannot_stop_its_container() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow vandal {{}}
environment box {{
  kind = "docker"
  image = "{IMAGE}"
}}
role vandal: tool {{
  env = box
  command = ["sh", "-c", "kill -TERM 1; kill -KILL 1; pkill -KILL -x sleep; pkill -KILL python3; kill -KILL -1; echo survived"]
}}
role next: tool {{
  env = box
  command = ["echo", "next"]
}}
start -> vandal
vandal -> next
next -> success
exit success
"#
        ),
        &[],
    );
    let id = unique("vandal");
    let (out, run_dir) = run_in(tmp.path(), &project, &id, &[], &[]);
    let info = json(run_dir.join("run.json"));
    assert_eq!(info["exit"], "success", "{info:#}\n{}", stderr(&out));
    assert_eq!(tool_result(&run_dir, "vandal")["ok"], false);
    assert_eq!(stdout_of(&run_dir, "next"), "next\n");
    assert!(containers_of(&id).is_empty());
}

/// Forks for ever, retrying when the container's process limit refuses; with an argument,
/// first leaves the step: a new session, no descriptor of the step's.
const BOMB_PY: &str = r#"
import os, sys, time
if len(sys.argv) > 1:
    print("launched", flush=True)
    if os.fork():
        sys.exit(0)
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"#;

/// A fork bomb ends its step (it is bounded by the environment's `pids`), leaves nothing,
/// and the run goes on to a declared exit; an environment without `pids` is bounded too
/// (512 processes).
#[test]
fn a_fork_bomb_in_docker_ends_its_step_and_the_run_goes_on() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(
        &format!(
            r#"
workflow bombs {{}}
environment capped {{
  kind = "docker"
  image = "{IMAGE}"
  mounts = [".:/work:rw"]
  pids = 64
}}
environment plain {{
  kind = "docker"
  image = "{IMAGE}"
}}
role limits: tool {{
  env = plain
  command = ["sh", "-c", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"]
}}
role capped_limit: tool {{
  env = capped
  command = ["sh", "-c", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max"]
}}
role bomb: tool {{
  env = capped
  timeout = 5s
  command = ["python3", "bomb.py"]
}}
role detached: tool {{
  env = capped
  command = ["python3", "bomb.py", "detached"]
}}
role look: tool {{
  env = capped
  command = ["python3", "procs.py"]
}}
start -> limits
limits -> capped_limit
capped_limit -> bomb
bomb -> detached
detached -> look
look -> contained when look.stdout == "sleep infinity\n"
look -> leaked otherwise
exit contained
exit leaked {{ code = 1 }}
"#
        ),
        &[("procs.py", PROCS_PY), ("bomb.py", BOMB_PY)],
    );
    let id = unique("bomb");
    let (out, run_dir) = run_in(tmp.path(), &project, &id, &[], &[]);
    let info = json(run_dir.join("run.json"));
    let calls = of_kind(&events(&run_dir), "tool_call");
    assert_eq!(info["exit"], "contained", "{info:#}\n{calls:#?}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_of(&run_dir, "limits"), "512\n");
    assert_eq!(stdout_of(&run_dir, "capped_limit"), "64\n");
    let bomb = tool_result(&run_dir, "bomb");
    assert_eq!(bomb["timed_out"], true, "{bomb:#}");
    assert_eq!(stdout_of(&run_dir, "detached"), "launched\n");
    assert!(containers_of(&id).is_empty());
}

// ---------------------------------------------------------------------------------------
// 5. Missing engine features
// ---------------------------------------------------------------------------------------

const ONE_DOCKER_STEP: &str = r#"
workflow engine {}
environment box {
  kind = "docker"
  image = "IMAGE"
}
role work: tool {
  env = box
  command = ["true"]
}
start -> work
work -> success
exit success
"#;

/// No engine, no image: the run ends at `error` before any step, saying what is missing.
#[test]
fn no_engine_or_no_image_is_a_clear_error() {
    let (tmp, project, _) = setup(&ONE_DOCKER_STEP.replace("IMAGE", IMAGE), &[]);
    let (out, run_dir) = run_in(
        tmp.path(),
        &project,
        &unique("noengine"),
        &[],
        &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let reason = json(run_dir.join("run.json"))["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("Docker unavailable at unix:///nonexistent/docker.sock"),
        "{reason}"
    );
    if !docker_ready() {
        return;
    }
    std::fs::write(
        tmp.path().join("w.rondo"),
        ONE_DOCKER_STEP.replace("IMAGE", "rondo-no-such-image:latest"),
    )
    .unwrap();
    let (out, run_dir) = run_in(tmp.path(), &project, &unique("noimage"), &[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let reason = json(run_dir.join("run.json"))["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("rondo-no-such-image:latest"), "{reason}");
    assert!(of_kind(&events(&run_dir), "tool_call").is_empty());
}

/// A container kept with `--keep-env` stays when a later run on the machine removes the
/// containers whose owner is gone (it removed them all, so a kept container vanished
/// under whoever was looking at it, this file's secrets test included).
#[test]
fn a_kept_container_stays_when_a_later_run_removes_stale_ones() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let (tmp, project, _) = setup(&ONE_DOCKER_STEP.replace("IMAGE", IMAGE), &[]);
    let kept = unique("kept");
    let _kept = Kept(kept.clone());
    let (out, _) = run_in(tmp.path(), &project, &kept, &["--keep-env"], &[]);
    common::assert_success(&out);
    assert_eq!(containers_of(&kept).len(), 1);
    let later = unique("later");
    let (out, _) = run_in(tmp.path(), &project, &later, &[], &[]);
    common::assert_success(&out);
    assert_eq!(
        containers_of(&kept).len(),
        1,
        "the kept container was removed"
    );
}

/// An engine answering just enough of the API to create a container, whose kernel lacks
/// the pids and memory cgroups: it creates the container with the limits discarded (as
/// dockerd does, with a warning), which a run must refuse instead of running unbounded.
struct LimitlessEngine {
    socket: PathBuf,
    requests: Arc<Mutex<Vec<String>>>,
}

fn limitless_engine(dir: &Path) -> LimitlessEngine {
    let socket = dir.join("docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let seen = seen.clone();
            std::thread::spawn(move || serve_limitless(stream, seen));
        }
    });
    LimitlessEngine { socket, requests }
}

fn serve_limitless(stream: std::os::unix::net::UnixStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        // The API version prefix (`/v1.41/...`) is not part of the route.
        let route = match path.strip_prefix("/v1.") {
            Some(rest) => rest.split_once('/').map_or("", |(_, r)| r),
            None => path.trim_start_matches('/'),
        };
        seen.lock().unwrap().push(format!("{method} /{route}"));
        let (status, reply) = match (method, route) {
            ("GET" | "HEAD", "_ping") => (200, "OK".to_string()),
            ("GET", "version") => (
                200,
                r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12","Version":"20.10.24","Os":"linux","Arch":"amd64"}"#.to_string(),
            ),
            ("GET", "containers/json") => (200, "[]".to_string()),
            ("GET", r) if r.starts_with("images/") => (
                200,
                r#"{"Id":"sha256:0000000000000000000000000000000000000000000000000000000000000000","Config":{}}"#.to_string(),
            ),
            ("POST", "containers/create") => (
                201,
                r#"{"Id":"limitless0000","Warnings":["Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded.","Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded."]}"#.to_string(),
            ),
            ("GET", "containers/limitless0000/json") => (
                200,
                r#"{"Id":"limitless0000","HostConfig":{"PidsLimit":null,"Memory":0,"NanoCpus":2000000000,"CapDrop":["ALL"]},"Config":{"Labels":{}}}"#.to_string(),
            ),
            ("DELETE", "containers/limitless0000") => (204, String::new()),
            _ => (
                500,
                r#"{"message":"this engine has no such feature"}"#.to_string(),
            ),
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\n\r\n",
            reply.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(reply.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// An engine that cannot bound the processes or the memory of a container: the run stops
/// at `error` before any step, naming the missing limit, and the container it created is
/// removed (it never started).
#[test]
fn an_engine_that_cannot_enforce_the_limits_is_refused() {
    let (tmp, project, _) = setup(&ONE_DOCKER_STEP.replace("IMAGE", IMAGE), &[]);
    let engine = limitless_engine(tmp.path());
    let host = format!("unix://{}", engine.socket.display());
    let (out, run_dir) = run_in(
        tmp.path(),
        &project,
        &unique("limitless"),
        &[],
        &[("DOCKER_HOST", &host)],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let reason = json(run_dir.join("run.json"))["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("cannot limit"), "{reason}");
    assert!(reason.contains("PIDs limit discarded"), "{reason}");
    let requests = engine.requests.lock().unwrap().clone();
    assert!(
        !requests.iter().any(|r| r.contains("/start")),
        "{requests:?}"
    );
    assert!(
        requests.contains(&"DELETE /containers/limitless0000".to_string()),
        "{requests:?}"
    );
    assert!(of_kind(&events(&run_dir), "tool_call").is_empty());
}
