//! A run folder is self-contained: moved, copied or left behind by a run that reused its id,
//! it resumes where it is now and touches nothing of another run; a run whose workspace is
//! an outside folder (`--workspace`) refuses to resume into another run's records. A
//! damaged or linked checkpoint is refused before anything is written; a checkpoint that
//! cannot be written ends the run at `error`. Real `rondo` processes, killed with SIGKILL
//! mid-step; every step waits at a FIFO the test opens.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{Value, json};

mod common;

use common::{json, stderr};

/// One tool step that waits at the gate of its attempt (`GATE/1`, then `GATE/2` when the
/// step runs again after a crash; the count is kept in the workspace, per gate), then
/// writes `out.txt`. An attempt whose gate is missing or says anything but `go` fails.
const GATED: &str = r#"
workflow gated {
  input gate: string
}
memory {
  notes: string = ""
}
role work: tool {
  command = ["sh", "-c", "c=attempts-$(basename $0); n=$(( $(cat $c 2>/dev/null || echo 0) + 1 )); echo $n > $c; read line < $0/$n || exit 3; [ $line = go ] || exit 3; echo $line > out.txt", "{{ input.gate }}"]
}
artifact "result.md" = "result of " + run_id
start -> work
work -> success when work.ok
work -> failed otherwise
exit success
exit failed { code = 1 }
"#;

fn rondo() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.env("NO_COLOR", "1");
    cmd
}

fn workflow(dir: &Path) -> PathBuf {
    let path = dir.join("w.rondo");
    std::fs::write(&path, GATED).unwrap();
    let check = rondo()
        .args(["check", "--offline", path.to_str().unwrap()])
        .output()
        .unwrap();
    common::assert_success(&check);
    path
}

/// `rondo run -q WORKFLOW --input gate=GATE ARGS...`, in `cwd`.
fn run_cmd(cwd: &Path, gate: &Gate, args: &[&str]) -> Command {
    let mut cmd = rondo();
    cmd.current_dir(cwd)
        .args(["run", "-q", "w.rondo", "--input"])
        .arg(format!("gate={}", gate.0.display()))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

fn resume(cwd: &Path, dir: &Path) -> Output {
    rondo()
        .current_dir(cwd)
        .args(["resume", "-q"])
        .arg(dir)
        .output()
        .unwrap()
}

/// A folder of FIFOs, one per attempt of the gated step.
struct Gate(PathBuf);

impl Gate {
    fn new(dir: &Path, name: &str, attempts: &[u32]) -> Gate {
        let gate = Gate(dir.join(name));
        std::fs::create_dir_all(&gate.0).unwrap();
        for n in attempts {
            let path = std::ffi::CString::new(gate.at(*n).to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o666) }, 0);
        }
        gate
    }

    fn at(&self, n: u32) -> PathBuf {
        self.0.join(n.to_string())
    }

    /// Removes the gate of attempt `n`: a step that comes back to it fails at once.
    fn shut(&self, n: u32) {
        std::fs::remove_file(self.at(n)).unwrap();
    }

    /// Says `go` to whoever opens gate `n` next (from a thread; [`Opened::close`] ends it).
    fn open(&self, n: u32) -> Opened {
        let path = self.at(n);
        let writer = path.clone();
        let thread = std::thread::spawn(move || {
            if let Ok(mut f) = OpenOptions::new().write(true).open(&writer) {
                let _ = f.write_all(b"go\n");
            }
        });
        Opened { path, thread }
    }
}

struct Opened {
    path: PathBuf,
    thread: std::thread::JoinHandle<()>,
}

impl Opened {
    /// Ends the opening whether or not a step came through (a reader of our own lets a
    /// writer still waiting go).
    fn close(self) {
        let _reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.path);
        self.thread.join().unwrap();
    }
}

/// Waits until the step of `child` waits at `gate` (opening it for writing returns when the
/// step opens it for reading), or until `child` ended without getting there. Returns the
/// writing end, and the watcher to join once `child` is reaped.
fn wait_at(child: &Child, gate: &Path) -> (File, std::thread::JoinHandle<()>) {
    let pid = child.id();
    let unblock = gate.to_path_buf();
    let watcher = std::thread::spawn(move || {
        // Polled from /proc rather than waited on: a blocking waitid that returned early (a
        // signal, a sandboxed kernel) would open the gate before the run reached it.
        let stat = format!("/proc/{pid}/stat");
        while std::fs::read_to_string(&stat)
            .ok()
            .and_then(|s| Some(s.rsplit_once(')')?.1.trim_start().starts_with('Z')))
            == Some(false)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&unblock);
    });
    let writer = OpenOptions::new().write(true).open(gate).unwrap();
    (writer, watcher)
}

/// Starts `cmd`, waits until its step waits at gate `n`, and kills it with SIGKILL. The
/// step left behind reads the end of its gate and exits; the gate is then shut.
fn kill_mid_step(mut cmd: Command, gate: &Gate, n: u32) {
    let mut child = cmd.spawn().unwrap();
    let (writer, watcher) = wait_at(&child, &gate.at(n));
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    watcher.join().unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "rondo ended before its step reached the gate:\n{}",
        stderr(&out)
    );
    drop(writer);
    gate.shut(n);
}

/// Every file, folder, link and FIFO beneath `dir`, with the files' bytes and the links'
/// targets (links are not followed).
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                format!("link -> {}", target.display()).into_bytes()
            } else if meta.is_dir() {
                stack.push(path);
                b"folder".to_vec()
            } else if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                b"special".to_vec()
            };
            out.insert(rel, content);
        }
    }
    out
}

/// Asserts `dir` holds what `before` says, naming the paths that differ.
fn assert_unchanged(dir: &Path, before: &BTreeMap<String, Vec<u8>>, what: &str) {
    let after = tree(dir);
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(
        changed.is_empty(),
        "{what}: {} changed: {changed:?}",
        dir.display()
    );
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `dir`'s resume while gate `n` says `go`.
fn resume_through(cwd: &Path, dir: &Path, gate: &Gate, n: u32) -> Output {
    let opened = gate.open(n);
    let out = resume(cwd, dir);
    opened.close();
    out
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
}

/// A run killed with SIGKILL in the middle of a step, its folder moved, then resumed: the
/// step runs again in the moved folder's workspace and every output lands there; the old
/// place stays empty. (`run.json` used to pin the workspace by absolute path: the resume
/// recreated the old folder and worked there.)
#[test]
fn a_moved_run_resumes_where_it_is_now() {
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let gate = Gate::new(tmp.path(), "gate", &[1, 2]);
    kill_mid_step(
        run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "r"]),
        &gate,
        1,
    );
    let old = tmp.path().join("runs/r");
    assert_eq!(json(old.join("run.json"))["workspace"], "workspace");
    let moved = tmp.path().join("moved/r");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&old, &moved).unwrap();

    let out = resume_through(tmp.path(), &moved, &gate, 2);
    assert_exit(&out, 0);
    assert!(!old.exists(), "the resume wrote into the old place");
    assert_eq!(read(moved.join("workspace/out.txt")), "go\n");
    assert_eq!(read(moved.join("workspace/result.md")), "result of r");
    let info = json(moved.join("run.json"));
    assert_eq!(info["exit"], "success");
    assert_eq!(info["workspace"], "workspace");
    let replay = rondo().args(["replay"]).arg(&moved).output().unwrap();
    assert_exit(&replay, 0);
    assert!(String::from_utf8_lossy(&replay.stdout).contains("resumed at step 0"));
}

/// A copy of a crashed run resumes on its own; the original folder is byte for byte what
/// it was, and still resumes itself afterwards.
#[test]
fn a_copied_run_resumes_without_touching_the_original() {
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let gate = Gate::new(tmp.path(), "gate", &[1, 2]);
    kill_mid_step(
        run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "r"]),
        &gate,
        1,
    );
    let original = tmp.path().join("runs/r");
    let copy = tmp.path().join("copies/r-copy");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&original)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let before = tree(&original);

    let out = resume_through(tmp.path(), &copy, &gate, 2);
    assert_exit(&out, 0);
    assert_unchanged(&original, &before, "resuming the copy");
    assert_eq!(read(copy.join("workspace/out.txt")), "go\n");
    assert_eq!(json(copy.join("run.json"))["exit"], "success");

    // The original's step has run once (attempt 1): its own resume is attempt 2 too.
    let out = resume_through(tmp.path(), &original, &gate, 2);
    assert_exit(&out, 0);
    assert_eq!(read(original.join("workspace/out.txt")), "go\n");
}

/// A crashed run moved away, and a new run started under its id in the old place: resuming
/// the moved run leaves the new run's folder byte for byte as it was.
#[test]
fn a_run_resumed_after_its_id_was_reused_leaves_the_new_run_alone() {
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let first = Gate::new(tmp.path(), "first", &[1, 2]);
    let second = Gate::new(tmp.path(), "second", &[1]);
    kill_mid_step(
        run_cmd(tmp.path(), &first, &["--run-dir", "runs", "--run-id", "r"]),
        &first,
        1,
    );
    let place = tmp.path().join("runs/r");
    let moved = tmp.path().join("moved/r");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&place, &moved).unwrap();

    let opened = second.open(1);
    let out = run_cmd(tmp.path(), &second, &["--run-dir", "runs", "--run-id", "r"])
        .output()
        .unwrap();
    opened.close();
    assert_exit(&out, 0);
    let newer = tree(&place);
    assert_ne!(
        json(place.join("run.json"))["run_uid"],
        json(moved.join("run.json"))["run_uid"]
    );

    let out = resume_through(tmp.path(), &moved, &first, 2);
    assert_exit(&out, 0);
    assert_unchanged(&place, &newer, "resuming the old run");
    assert_eq!(read(moved.join("workspace/out.txt")), "go\n");
    assert_eq!(read(moved.join("workspace/attempts-first")), "2\n");
}

/// A run whose workspace is an outside folder (`--workspace`) says so in `run.json` and
/// when resumed. Taken out of that folder, its records refuse to resume when the folder
/// holds another run under the same id, or the original of which they are a copy; nothing
/// is written, in either place. Where it belongs, the run resumes.
#[test]
fn an_outside_workspace_holding_another_runs_records_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let ws = ["--workspace", project.to_str().unwrap()];

    // Another run reused the id in the folder.
    let first = Gate::new(tmp.path(), "first", &[1]);
    let second = Gate::new(tmp.path(), "second", &[1]);
    kill_mid_step(
        run_cmd(tmp.path(), &first, &[&ws[..], &["--run-id", "x"]].concat()),
        &first,
        1,
    );
    let system = project.join(".rondo/runs/x");
    let info = json(system.join("run.json"));
    assert_eq!(info["outside_workspace"], true);
    assert_eq!(
        info["workspace"],
        std::fs::canonicalize(&project)
            .unwrap()
            .display()
            .to_string()
    );
    let elsewhere = tmp.path().join("elsewhere/x");
    std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
    std::fs::rename(&system, &elsewhere).unwrap();
    let opened = second.open(1);
    let out = run_cmd(tmp.path(), &second, &[&ws[..], &["--run-id", "x"]].concat())
        .output()
        .unwrap();
    opened.close();
    assert_exit(&out, 0);
    let (workspace_before, moved_before) = (tree(&project), tree(&elsewhere));
    let out = resume(tmp.path(), &elsewhere);
    assert_exit(&out, 2);
    let text = stderr(&out);
    assert!(text.contains("outside folder"), "{text}");
    assert!(text.contains("another run with the same id"), "{text}");
    assert_unchanged(&project, &workspace_before, "a refused resume");
    assert_unchanged(&elsewhere, &moved_before, "a refused resume");

    // A copy of the records of a run that is still in its folder.
    let third = Gate::new(tmp.path(), "third", &[1, 2]);
    kill_mid_step(
        run_cmd(tmp.path(), &third, &[&ws[..], &["--run-id", "y"]].concat()),
        &third,
        1,
    );
    let original = project.join(".rondo/runs/y");
    let copy = tmp.path().join("backup/y");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&original)
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    std::fs::remove_file(third.at(2)).unwrap();
    let (workspace_before, copy_before) = (tree(&project), tree(&copy));
    let out = resume(tmp.path(), &copy);
    assert_exit(&out, 2);
    let text = stderr(&out);
    assert!(text.contains("is a copy of run y"), "{text}");
    assert_unchanged(&project, &workspace_before, "a refused resume");
    assert_unchanged(&copy, &copy_before, "a refused resume");

    // The original resumes in its folder, and says where it works.
    let third = Gate::new(tmp.path(), "third", &[2]);
    let out = resume_through(tmp.path(), &original, &third, 2);
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains("works in the outside folder"),
        "{}",
        stderr(&out)
    );
    assert_eq!(read(project.join("out.txt")), "go\n");
    assert_eq!(json(original.join("run.json"))["exit"], "success");
}

/// `run.json` files written before relative paths recorded every workspace by absolute
/// path, and had no `run_uid` nor `outside_workspace`: they still resume. A run's own
/// workspace is found in the folder where it is now (it was moved here), a `--workspace`
/// run's in the folder its records lie in.
#[test]
fn an_old_run_json_with_an_absolute_workspace_still_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let gate = Gate::new(tmp.path(), "gate", &[1, 2]);
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let outside = Gate::new(tmp.path(), "outside", &[1, 2]);
    kill_mid_step(
        run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "r"]),
        &gate,
        1,
    );
    let ws = ["--workspace", project.to_str().unwrap(), "--run-id", "x"];
    kill_mid_step(run_cmd(tmp.path(), &outside, &ws), &outside, 1);
    let own = tmp.path().join("runs/r");
    let system = project.join(".rondo/runs/x");
    for (dir, workspace) in [
        (&own, std::fs::canonicalize(own.join("workspace")).unwrap()),
        (&system, std::fs::canonicalize(&project).unwrap()),
    ] {
        let mut info = json(dir.join("run.json"));
        let fields = info.as_object_mut().unwrap();
        fields.remove("run_uid");
        fields.remove("outside_workspace");
        fields.insert("workspace".into(), json!(workspace));
        std::fs::write(dir.join("run.json"), info.to_string()).unwrap();
    }
    let moved = tmp.path().join("moved/r");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&own, &moved).unwrap();

    let out = resume_through(tmp.path(), &moved, &gate, 2);
    assert_exit(&out, 0);
    assert!(!own.exists(), "the resume wrote into the old place");
    assert_eq!(read(moved.join("workspace/out.txt")), "go\n");
    let out = resume_through(tmp.path(), &system, &outside, 2);
    assert_exit(&out, 0);
    assert_eq!(read(project.join("out.txt")), "go\n");
    assert_eq!(json(system.join("run.json"))["exit"], "success");
}

/// A crashed run of the gated workflow, for tests that damage its records: `runs/r`, its
/// step run once, every later attempt failing at once (no gate).
fn crashed_run(tmp: &Path) -> PathBuf {
    workflow(tmp);
    let gate = Gate::new(tmp, "gate", &[1]);
    kill_mid_step(
        run_cmd(tmp, &gate, &["--run-dir", "runs", "--run-id", "r"]),
        &gate,
        1,
    );
    tmp.join("runs/r")
}

fn copy_of(dir: &Path, name: &str) -> PathBuf {
    let copy = dir.parent().unwrap().join(name);
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(dir)
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    copy
}

/// A run's start writes its first checkpoint into the journal, not a snapshot: a run
/// killed in its first step has `run.json`, `events.jsonl` and its workspace, no
/// `state.json`, and its checkpoint reads from the journal alone.
#[test]
fn a_started_run_keeps_its_first_checkpoint_in_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = crashed_run(tmp.path());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["events.jsonl", "run.json", "workspace"]);
    let state = rondo::run::rundir::read_checkpoint(&dir).unwrap();
    assert_eq!(state["run_id"], "r");
    assert_eq!(state["status"], "running");
    let journal = std::fs::metadata(dir.join("events.jsonl")).unwrap().len();
    assert!(state["file_lengths"]["events.jsonl"].as_u64().unwrap() <= journal);
}

/// A change to a checkpoint: edits it in place, or gives the whole new text.
type Edit = Box<dyn Fn(&mut Value) -> Option<String>>;

/// A hand-edited or damaged `state.json` is refused with a clear error (exit 2, no panic)
/// before anything is written: the journal, the checkpoint and the workspace are byte for
/// byte as they were. (Wrong indices and huge counts used to panic after the journal had
/// been cut and appended to; a value of the wrong type or edited inputs resumed.)
#[test]
fn a_damaged_checkpoint_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = crashed_run(tmp.path());
    // A run killed before its first snapshot has its checkpoint in the journal only; the
    // edits are made to a `state.json` written from it (what a snapshot would hold).
    let state: Value = rondo::run::rundir::read_checkpoint(&pristine).unwrap();
    let nodes = state["visits"].as_array().unwrap().len();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let edits: Vec<(&str, Edit)> = vec![
        ("not JSON", Box::new(|_| Some("{\"step\": 1,".into()))),
        (
            "a node that does not exist",
            Box::new(|s| {
                s["position"] = json!({"at": "node", "node": 999});
                None
            }),
        ),
        (
            "a route that does not exist",
            Box::new(|s| {
                s["position"] = json!({"at": "fork", "route": 99, "done": {}});
                None
            }),
        ),
        (
            "an exit that is no exit",
            Box::new(|s| {
                s["position"] = json!({"at": "exited", "node": 0, "reason": "edited"});
                None
            }),
        ),
        (
            "memory of the wrong type",
            Box::new(|s| {
                s["memory"][0] = json!(42);
                None
            }),
        ),
        (
            "a huge step count",
            Box::new(|s| {
                s["step"] = json!(u64::MAX);
                None
            }),
        ),
        (
            "huge visit counts",
            Box::new(move |s| {
                s["visits"] = json!(vec![u64::MAX; nodes]);
                None
            }),
        ),
        (
            "visit counts of another workflow",
            Box::new(|s| {
                s["visits"] = json!([0]);
                None
            }),
        ),
        (
            "edited inputs",
            Box::new(|s| {
                s["inputs"][0] = json!("/etc");
                None
            }),
        ),
        (
            "a file length of no file of the run",
            Box::new(|s| {
                s["file_lengths"]["../../outside.txt"] = json!(0);
                None
            }),
        ),
        (
            "deep nesting",
            Box::new(move |s| {
                s["memory"][0] = json!("NESTED");
                Some(s.to_string().replace("\"NESTED\"", &deep))
            }),
        ),
    ];
    for (n, (what, edit)) in edits.iter().enumerate() {
        let dir = copy_of(&pristine, &format!("v{n}"));
        let mut state = state.clone();
        let text = edit(&mut state).unwrap_or_else(|| state.to_string());
        std::fs::write(dir.join("state.json"), text).unwrap();
        let before = tree(&dir);
        let out = resume(tmp.path(), &dir);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {text}");
        assert!(!text.contains("panicked"), "{what}: {text}");
        assert!(text.contains("state.json"), "{what}: {text}");
        assert_unchanged(&dir, &before, what);
    }
}

/// A run folder whose journal, checkpoint or run record is a symbolic link is refused: the
/// file it points to and the folder stay as they were. (A linked journal used to be cut
/// and appended to through the link.)
#[test]
fn records_that_are_symbolic_links_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = crashed_run(tmp.path());
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let snapshot = rondo::run::rundir::read_checkpoint(&pristine).unwrap();
    for name in ["events.jsonl", "state.json", "run.json"] {
        let dir = copy_of(&pristine, &format!("linked-{name}"));
        if !dir.join(name).exists() {
            // No snapshot yet (the checkpoint is in the journal): a linked one is made.
            std::fs::write(dir.join(name), snapshot.to_string()).unwrap();
        }
        let target = elsewhere.join(name);
        std::fs::rename(dir.join(name), &target).unwrap();
        std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
        let (before, target_before) = (tree(&dir), std::fs::read(&target).unwrap());
        let out = resume(tmp.path(), &dir);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {text}");
        assert!(text.contains("symbolic link"), "{name}: {text}");
        assert_unchanged(&dir, &before, name);
        assert_eq!(std::fs::read(&target).unwrap(), target_before, "{name}");
    }
}

/// `rondo run` killed during its start-up, before the run had a `run.json`: `resume` says
/// the run never started and how to start it, and that command starts it. A kill there
/// leaves one of two things: the folder that claimed the id (empty), or the first
/// checkpoint, which is made durable before `run.json` says a run exists. Start-up reads
/// nothing that could be made to wait (its files must be regular), so the test makes each
/// leftover from a real run killed mid-step, less what the kill would not have written yet.
#[test]
fn a_run_killed_before_it_started_says_how_to_start_it() {
    let tmp = tempfile::tempdir().unwrap();
    let crashed = crashed_run(tmp.path());
    for leftover in ["claimed", "checkpointed"] {
        let dir = tmp.path().join("runs").join(leftover);
        std::fs::create_dir(&dir).unwrap();
        if leftover == "checkpointed" {
            for entry in std::fs::read_dir(&crashed).unwrap().flatten() {
                if entry.file_name() != "run.json" {
                    copy_into(&entry.path(), &dir);
                }
            }
        }
        let out = resume(tmp.path(), &dir);
        assert_exit(&out, 2);
        let text = stderr(&out);
        assert!(text.contains("never started"), "{leftover}: {text}");
        assert!(text.contains("nothing to resume"), "{leftover}: {text}");
        let advice = format!("--run-id {leftover}`");
        assert!(text.contains(&advice), "{leftover}: {text}");
        assert!(
            text.contains("rondo run WORKFLOW --run-dir"),
            "{leftover}: {text}"
        );

        let gate = Gate::new(tmp.path(), &format!("gate-{leftover}"), &[1]);
        let opened = gate.open(1);
        let out = run_cmd(
            tmp.path(),
            &gate,
            &["--run-dir", "runs", "--run-id", leftover],
        )
        .output()
        .unwrap();
        opened.close();
        assert_exit(&out, 0);
        assert_eq!(json(dir.join("run.json"))["exit"], "success", "{leftover}");
    }
}

fn copy_into(from: &Path, dir: &Path) {
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(dir)
            .status()
            .unwrap()
            .success()
    );
}

/// An id already taken: `run` says what the existing run is and what to do (resume it if it
/// is not finished; else choose another id, leave `--run-id` out, or replay it), and
/// `resume` of a finished run points to `replay` and a new run.
#[test]
fn a_taken_run_id_gives_advice_that_leads_somewhere() {
    let tmp = tempfile::tempdir().unwrap();
    crashed_run(tmp.path());
    let gate = Gate(tmp.path().join("gate"));
    let out = run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "r"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let text = stderr(&out);
    assert!(text.contains("not finished"), "{text}");
    assert!(
        text.contains("`rondo resume runs/r` continues it"),
        "{text}"
    );

    let gate = Gate::new(tmp.path(), "done", &[1]);
    let opened = gate.open(1);
    let out = run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "d"])
        .output()
        .unwrap();
    opened.close();
    assert_exit(&out, 0);
    let out = run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "d"])
        .output()
        .unwrap();
    assert_exit(&out, 2);
    let text = stderr(&out);
    assert!(text.contains("finished at `success`"), "{text}");
    assert!(text.contains("leave it out for a fresh id"), "{text}");
    assert!(text.contains("`rondo replay"), "{text}");
    assert!(!text.contains("rondo resume"), "{text}");

    let out = resume(tmp.path(), &tmp.path().join("runs/d"));
    assert_exit(&out, 2);
    let text = stderr(&out);
    assert!(text.contains("already finished"), "{text}");
    assert!(text.contains("`rondo replay"), "{text}");
    assert!(text.contains("`rondo run"), "{text}");
}

/// Root writes whatever the permissions say: as root, hands `dir` to user 65534 and
/// returns what makes a command that user (with a home of its own); otherwise nothing.
fn run_as_user(dir: &Path) -> impl Fn(&mut Command) {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        let chown = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    move |cmd: &mut Command| {
        if root {
            cmd.uid(65534).gid(65534).env("HOME", &home);
        }
    }
}

/// The run's system area made read-only (from outside the run) while its last step waits:
/// the run still ends where its routes lead. Its end is a journal record (the journal is
/// open already) and `run.json`, whose temporary file the folder refuses, is rewritten in
/// place. As root the run is made by user 65534, whom the permissions bind.
#[test]
fn a_system_area_made_read_only_before_the_end_still_ends_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let gate = Gate::new(tmp.path(), "gate", &[1]);
    let as_user = run_as_user(tmp.path());
    let mut cmd = run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "r"]);
    as_user(&mut cmd);
    let child = cmd.spawn().unwrap();
    let (mut writer, watcher) = wait_at(&child, &gate.at(1));
    let system = tmp.path().join("runs/r");
    std::fs::set_permissions(&system, std::fs::Permissions::from_mode(0o555)).unwrap();
    writer.write_all(b"go\n").unwrap();
    drop(writer);
    let out = child.wait_with_output().unwrap();
    watcher.join().unwrap();
    let names: Vec<String> = std::fs::read_dir(&system)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    std::fs::set_permissions(&system, std::fs::Permissions::from_mode(0o755)).unwrap();

    assert_exit(&out, 0);
    let info = json(system.join("run.json"));
    assert_eq!(info["status"], "finished", "{info:#}");
    assert_eq!(info["exit"], "success", "{info:#}");
    let state = common::state(&system);
    assert_eq!(state["status"], "finished", "{state:#}");
    assert_eq!(state["ended"]["exit"], "success", "{state:#}");
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".tmp") || n.starts_with('.')),
        "{names:?}"
    );
    // A short run ends with a journal record, not a snapshot.
    assert!(!names.contains(&"state.json".to_string()), "{names:?}");
    assert_eq!(read(system.join("workspace/out.txt")), "go\n");
}

/// The disk made to refuse writes while a step waits (the process may grow no file past
/// the journal's length then, as a full disk would refuse them): the step ends, its
/// records cannot be written, and the run ends at once at `error` (exit code 2) saying
/// why. No record is cut: the journal is as it was and `run.json`, which cannot be
/// replaced either, is left whole. Once the disk takes writes again, `resume` goes on
/// from the last checkpoint: the step, never recorded, runs again. As root the run is
/// made by user 65534.
#[test]
fn a_checkpoint_that_cannot_be_written_ends_the_run_at_error() {
    let tmp = tempfile::tempdir().unwrap();
    workflow(tmp.path());
    let gate = Gate::new(tmp.path(), "gate", &[1, 2]);
    let as_user = run_as_user(tmp.path());
    let mut cmd = run_cmd(tmp.path(), &gate, &["--run-dir", "runs", "--run-id", "r"]);
    as_user(&mut cmd);
    // SAFETY: only `signal` between fork and exec. An ignored signal stays ignored across
    // `exec`: a write past the file size limit then fails with EFBIG instead of killing.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let (mut writer, watcher) = wait_at(&child, &gate.at(1));
    let system = tmp.path().join("runs/r");
    let journal = std::fs::metadata(system.join("events.jsonl"))
        .unwrap()
        .len();
    // Set by the run's own user: root may lack CAP_SYS_RESOURCE (in a container).
    let mut prlimit = Command::new("prlimit");
    prlimit
        .arg("--pid")
        .arg(child.id().to_string())
        .arg(format!("--fsize={journal}:unlimited"));
    as_user(&mut prlimit);
    let set = prlimit.output().unwrap();
    assert!(set.status.success(), "{}", stderr(&set));
    writer.write_all(b"go\n").unwrap();
    drop(writer);
    let out = child.wait_with_output().unwrap();
    watcher.join().unwrap();

    assert_exit(&out, 2);
    let text = stderr(&out);
    assert!(text.contains("exit `error`"), "{text}");
    assert!(text.contains("records cannot be written"), "{text}");
    assert!(text.contains("events.jsonl"), "{text}");
    assert_eq!(
        std::fs::metadata(system.join("events.jsonl"))
            .unwrap()
            .len(),
        journal,
        "the journal grew past the limit"
    );
    assert!(text.contains("rondo resume"), "{text}");
    let info = json(system.join("run.json"));
    assert_eq!(info["run_id"], "r", "{info:#}");
    let names: Vec<String> = std::fs::read_dir(&system)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with('.')), "{names:?}");
    assert_eq!(read(system.join("workspace/out.txt")), "go\n");

    let second = gate.open(2);
    let mut again = rondo();
    again
        .current_dir(tmp.path())
        .args(["resume", "-q"])
        .arg(&system);
    as_user(&mut again);
    let out = again.output().unwrap();
    second.close();
    assert_exit(&out, 0);
    assert_eq!(json(system.join("run.json"))["exit"], "success");
    assert_eq!(read(system.join("workspace/attempts-gate")), "2\n");
    // A resumed run that stops takes a snapshot: a later resume reads from there, not
    // from the start of a journal every resume has added to.
    let snapshot = json(system.join("state.json"));
    assert_eq!(snapshot["status"], "finished", "{snapshot:#}");
    assert_eq!(snapshot, common::state(&system));
}
