//! The workspace (what tools, artifacts and `exists()` see) and the system area (journal,
//! checkpoint, run record) of a run, and the confinement of every path the engine touches
//! on a workflow's behalf. Real files, real `rondo` processes, real symbolic links.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use common::{docker_ready, json};
use common::{events, of_kind};

fn rondo_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn write_workflow(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("w.rondo");
    std::fs::write(&path, text).unwrap();
    let check = rondo_in(dir, &["check", "--offline", path.to_str().unwrap()]);
    common::assert_success(&check);
    path
}

fn run(dir: &Path, workflow: &Path, id: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "-q",
        workflow.to_str().unwrap(),
        "--run-dir",
        "runs",
        "--run-id",
        id,
    ];
    args.extend_from_slice(extra);
    rondo_in(dir, &args)
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tool that does its worst to the run's records from its working directory (erasing,
/// overwriting, deleting everything): the records are elsewhere, and replay is whole.
#[test]
fn a_tool_cannot_reach_the_journal_or_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow records {}
role first: tool { command = ["sh", "-c", "echo one > one.txt"] }
role vandal: tool {
  command = ["sh", "-c", "ls -A; rm -rf ./* ./.[!.]*; : > events.jsonl; echo '{}' > state.json; echo '{}' > run.json"]
}
role last: tool { command = ["sh", "-c", "echo done"] }
start -> first
first -> vandal
vandal -> last
last -> success
exit success
"#,
    );
    let out = run(tmp.path(), &wf, "r1", &[]);
    assert_ok(&out);
    let system = tmp.path().join("runs/r1");
    let all = events(&system);
    assert_eq!(all[0]["seq"], 1);
    assert_eq!(all[0]["event"], "run_start");
    // What the vandal saw in its working directory: only the workspace's own files.
    let vandal = of_kind(&all, "tool_call")
        .into_iter()
        .find(|e| e["role"] == "vandal")
        .unwrap();
    assert_eq!(vandal["result"]["stdout"], "one.txt\n");
    let state = common::state(&system);
    assert_eq!(state["step"], 3);
    assert_eq!(state["status"], "finished");
    assert_eq!(json(system.join("run.json"))["exit"], "success");
    // The tool's files are in the workspace, not mixed with the records.
    assert_eq!(
        std::fs::read_to_string(system.join("workspace/state.json")).unwrap(),
        "{}\n"
    );
    let replay = rondo_in(tmp.path(), &["replay", system.to_str().unwrap()]);
    assert_ok(&replay);
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(text.contains("step 1 · first"), "{text}");
    assert!(text.contains("step 3 · last"), "{text}");
}

/// `--workspace DIR`: the run works in DIR (the tools' cwd, the artifacts), keeps its
/// records in DIR/.rondo/runs/<id>/, and the folder serves several runs.
#[test]
fn a_workspace_outlives_its_runs_and_keeps_their_records_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("notes.md"), "kept\n").unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow durable {}
role work: tool { command = ["sh", "-c", "pwd; cat notes.md; echo run >> history.txt"] }
role sneaky: tool { command = ["sh", "-c", "ln -sfn .rondo/runs sys; printf '.rondo/runs/x.json'"] }
artifact "summary.md" = "summary of " + run_id
start -> work
work -> sneaky
sneaky -> success
exit success
"#,
    );
    let mut more = Vec::new();
    for id in ["first", "second"] {
        let out = run(
            tmp.path(),
            &wf,
            id,
            &["--workspace", project.to_str().unwrap()],
        );
        assert_ok(&out);
        let system = project.join(".rondo/runs").join(id);
        let all = events(&system);
        let work = of_kind(&all, "tool_call")
            .into_iter()
            .find(|e| e["role"] == "work")
            .unwrap();
        let stdout = work["result"]["stdout"].as_str().unwrap().to_string();
        let cwd = std::fs::canonicalize(&project).unwrap();
        assert!(
            stdout.starts_with(&format!("{}\n", cwd.display())),
            "{stdout}"
        );
        assert!(stdout.contains("kept"), "{stdout}");
        assert_eq!(
            json(system.join("run.json"))["workspace"],
            cwd.display().to_string()
        );
        more.push(all.len());
    }
    assert_eq!(
        std::fs::read_to_string(project.join("history.txt")).unwrap(),
        "run\nrun\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("summary.md")).unwrap(),
        "summary of second"
    );
    assert!(!tmp.path().join("runs").exists(), "nothing under --run-dir");
    let listed = rondo_in(
        tmp.path(),
        &["runs", "--workspace", project.to_str().unwrap()],
    );
    assert_ok(&listed);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(text.contains("first") && text.contains("second"), "{text}");
    let system = project.join(".rondo/runs/first");
    let resumed = rondo_in(tmp.path(), &["resume", system.to_str().unwrap()]);
    assert_eq!(resumed.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&resumed.stderr).contains("already finished"),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    // The same id again is refused, not mixed into the first run's journal.
    let again = run(
        tmp.path(),
        &wf,
        "first",
        &["--workspace", project.to_str().unwrap()],
    );
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(events(&system).len(), more[0]);
}

/// Artifact names that leave the workspace or name the system area: `check` refuses a
/// literal one; a templated one is skipped with an `artifact_rejected` event and the run
/// still reaches its exit. Writes through planted symbolic links never leave the workspace.
#[test]
fn artifacts_stay_in_the_workspace_whatever_their_name_or_the_links_planted() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let wf = write_workflow(
        tmp.path(),
        &format!(
            r#"
workflow names {{}}
role plant: tool {{
  command = ["sh", "-c", "ln -s {outside} out; ln -s {outside}/secret.txt report.md; ln -s {outside}/secret.txt log.jsonl; ln -s .rondo/runs/r1 sys; printf '../escaped.txt'"]
}}
role write: builtin {{
  artifact "out/planted.txt" = "planted"
  artifact "report.md" = "report"
  artifact "log.jsonl" += "line"
  artifact "sys/events.jsonl" = "erased"
  artifact "{{{{ plant.stdout }}}}" = "escaped"
  artifact "kept/fine.txt" = "fine"
}}
start -> plant
plant -> write
write -> success
exit success
"#,
            outside = outside.display()
        ),
    );
    let out = run(
        tmp.path(),
        &wf,
        "r1",
        &["--workspace", project.to_str().unwrap()],
    );
    assert_ok(&out);
    let system = project.join(".rondo/runs/r1");
    let all = events(&system);
    let rejected: Vec<String> = of_kind(&all, "artifact_rejected")
        .iter()
        .map(|e| e["file"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        rejected,
        ["out/planted.txt", "log.jsonl", "sys/events.jsonl",]
    );
    // A value cannot climb out: `../` in what a tool printed became `___`, inside.
    assert_eq!(
        std::fs::read_to_string(project.join("___escaped.txt")).unwrap(),
        "escaped"
    );
    assert_eq!(json(system.join("run.json"))["exit"], "success");
    // Nothing written outside, the file a link named untouched, the journal whole.
    let left: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, ["secret.txt"]);
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!tmp.path().join("escaped.txt").exists());
    assert_eq!(all[0]["seq"], 1);
    // The atomic write replaced the planted link by the artifact itself.
    let report = project.join("report.md");
    assert!(
        !std::fs::symlink_metadata(&report)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(report).unwrap(), "report");
    assert_eq!(
        std::fs::read_to_string(project.join("kept/fine.txt")).unwrap(),
        "fine"
    );
}

/// Code-context reads and `exists()` stay inside the workspace: a link to /etc/passwd
/// planted in the repository never puts it into the memory's view (what prompts get).
/// (Literal paths out of the workspace are check errors; these are computed.)
#[test]
fn code_context_and_exists_read_nothing_outside_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow reads {}
memory {
  code: code_context { alpha = 1.0  beta = 0.5  gamma = 0.9  threshold = 0.5  root = "repo" }
  linked: code_context { alpha = 1.0  beta = 0.5  gamma = 0.9  threshold = 0.5  root = "linked" }
}
role plant: tool {
  command = ["sh", "-c", "ln -s /etc linked; mkdir -p repo; printf 'def f():\n    return 1\n' > repo/calc.py; ln -s /etc/passwd repo/leak.py; ln -s /etc repo/etc; ln -s /etc/passwd here"]
}
role look: builtin {
  update {
    code.access({ path: "calc.py", start: 1, end: 2 })
    code.access({ path: "leak.py", start: 1, end: 3 })
    code.access({ path: "etc/passwd", start: 1, end: 3 })
    code.access({ path: "../../../../etc/passwd", start: 1, end: 3 })
    linked.access({ path: "passwd", start: 1, end: 3 })
  }
  artifact "view.json" = memory.code
  artifact "linked.json" = memory.linked
  artifact "exists.json" = { passwd: exists("/" + "etc/passwd"), up: exists(".." + "/events.jsonl"), link: exists("here"), via_dir: exists("repo/etc/passwd"), calc: exists("repo/calc.py") }
}
start -> plant
plant -> look
look -> success
exit success
"#,
    );
    let out = run(tmp.path(), &wf, "r1", &[]);
    assert_ok(&out);
    let workspace = tmp.path().join("runs/r1/workspace");
    let view = std::fs::read_to_string(workspace.join("view.json")).unwrap();
    assert!(view.contains("return 1"), "{view}");
    assert!(!view.contains("root:"), "{view}");
    let files: Vec<String> = json(workspace.join("view.json"))["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(files, ["calc.py"]);
    let exists = json(workspace.join("exists.json"));
    assert_eq!(
        exists,
        serde_json::json!({"passwd": false, "up": false, "link": false, "via_dir": false, "calc": true})
    );
    // A root turned into a link out of the workspace reads nothing, and the run goes on.
    assert_eq!(
        std::fs::read_to_string(workspace.join("linked.json")).unwrap(),
        "null"
    );
    // Nothing of /etc/passwd in the run's records either.
    let journal = std::fs::read_to_string(tmp.path().join("runs/r1/events.jsonl")).unwrap();
    assert!(!journal.contains("root:x:0"));
}

/// A tool's log file goes through the same confinement: a link planted where the log
/// will be written is refused (the tool still runs), the linked file is untouched.
#[test]
fn a_log_through_a_planted_link_is_refused_and_the_tool_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let wf = write_workflow(
        tmp.path(),
        &format!(
            r#"
workflow logs {{}}
role plant: tool {{ command = ["sh", "-c", "mkdir -p logs; ln -s {victim} logs/run.log"] }}
role logged: tool {{
  command = ["sh", "-c", "echo hello"]
  log = "logs/run.log"
}}
start -> plant
plant -> logged
logged -> success
exit success
"#,
            victim = victim.display()
        ),
    );
    let out = run(tmp.path(), &wf, "r1", &[]);
    assert_ok(&out);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let all = events(&tmp.path().join("runs/r1"));
    assert_eq!(of_kind(&all, "log_rejected").len(), 1);
    let logged = of_kind(&all, "tool_call")
        .into_iter()
        .find(|e| e["role"] == "logged")
        .unwrap();
    assert_eq!(logged["result"]["stdout"], "hello\n");
}

#[test]
fn a_run_id_is_a_plain_name() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow ids {}
role work: tool { command = ["true"] }
start -> work
work -> success
exit success
"#,
    );
    let long = "a".repeat(200);
    for id in [
        "../escape",
        "a/b",
        "",
        "..",
        ".",
        "/abs",
        "a\\b",
        "tab\there",
        &long,
    ] {
        let out = run(tmp.path(), &wf, id, &[]);
        assert_eq!(out.status.code(), Some(2), "{id:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not a plain name"), "{id:?}: {err}");
    }
    assert!(!tmp.path().join("escape").exists());
    assert!(!tmp.path().join("runs").exists());
    assert_ok(&run(tmp.path(), &wf, "ok-1.2_x", &[]));
}

/// DS-STAR's `data_dir` is a `path` input: relative to the folder rondo starts in, and
/// what the analyzer describes is that folder, not a folder of the run.
#[test]
fn a_relative_path_input_names_the_callers_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("data")).unwrap();
    std::fs::write(
        tmp.path().join("data/sales.csv"),
        "region,amount\nnorth,10\nsouth,20\n",
    )
    .unwrap();
    let out = rondo_in(
        tmp.path(),
        &[
            "run",
            "-q",
            root.join("workflows/ds_star.rondo").to_str().unwrap(),
            "--provider",
            "scripted",
            "--script",
            root.join("workflows/scripts/ds_star_hello.yaml")
                .to_str()
                .unwrap(),
            "--input",
            "question=Create hello.txt",
            "--input",
            "data_dir=data",
            "--run-dir",
            "runs",
            "--run-id",
            "d1",
        ],
    );
    assert_ok(&out);
    let system = tmp.path().join("runs/d1");
    let data = std::fs::canonicalize(tmp.path().join("data")).unwrap();
    assert_eq!(
        json(system.join("run.json"))["inputs"]["data_dir"],
        data.display().to_string()
    );
    let descriptions = std::fs::read_to_string(system.join("workspace/descriptions.json")).unwrap();
    assert!(descriptions.contains("sales.csv"), "{descriptions}");
    assert!(descriptions.contains("region"), "{descriptions}");
}

/// In Docker the workspace is mounted, its `.rondo/` system area is covered by an empty
/// read-only tmpfs, and a `path` input is visible read-only at the same path.
#[test]
fn a_container_sees_the_workspace_without_its_system_area_and_path_inputs_read_only() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/main.py"), "print(1)\n").unwrap();
    std::fs::create_dir_all(tmp.path().join("data")).unwrap();
    std::fs::write(tmp.path().join("data/input.csv"), "a,b\n1,2\n").unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow boxed {
  input data: path
}
environment box {
  kind = "docker"
  image = "rondo-test-base:latest"
  mounts = [".:/work:rw"]
}
role look: tool {
  env = box
  command = ["sh", "-c", "ls -A /work/.rondo | wc -l; rm -rf /work/.rondo/runs 2>/dev/null; touch /work/.rondo/x 2>/dev/null || echo masked; cat src/main.py; cat {{ input.data }}/input.csv; touch {{ input.data }}/new 2>/dev/null || echo read-only"]
}
start -> look
look -> success
exit success
"#,
    );
    let out = run(
        tmp.path(),
        &wf,
        "c1",
        &[
            "--workspace",
            project.to_str().unwrap(),
            "--input",
            "data=data",
        ],
    );
    assert_ok(&out);
    let system = project.join(".rondo/runs/c1");
    let all = events(&system);
    let look = of_kind(&all, "tool_call").into_iter().next().unwrap();
    assert_eq!(
        look["result"]["stdout"], "0\nmasked\nprint(1)\na,b\n1,2\nread-only\n",
        "{look:#}"
    );
    assert_eq!(all[0]["seq"], 1);
    assert_eq!(json(system.join("run.json"))["exit"], "success");
    assert!(!tmp.path().join("data/new").exists());
}

#[test]
fn a_workspace_must_exist_and_lie_outside_any_system_area() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow places {}
role work: tool { command = ["true"] }
start -> work
work -> success
exit success
"#,
    );
    std::fs::create_dir_all(tmp.path().join("p/.rondo/runs")).unwrap();
    for (dir, why) in [
        ("missing", "not an existing folder"),
        ("p/.rondo", "inside a `.rondo` folder"),
        ("p/.rondo/runs", "inside a `.rondo` folder"),
    ] {
        let out = run(tmp.path(), &wf, "r1", &["--workspace", dir]);
        assert_eq!(out.status.code(), Some(2), "{dir}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{dir}: {err}");
    }
    assert!(!tmp.path().join("missing").exists());
    assert!(!tmp.path().join("p/.rondo/.rondo").exists());
}

/// What the attack script (`ATTACK`) reports: one line per write that got through.
const ATTACK: &str = r#"#!/bin/sh
# $1: a folder outside the workspace (the user's home); $2: the run's system area,
# relative to the working directory.
sys="$2"
try() { ( eval "$2" ) 2>/dev/null && echo "ESCAPED: $1"; }
try "overwrite the journal" "echo x > $sys/events.jsonl"
try "append to the journal" "echo x >> $sys/events.jsonl"
try "empty the journal" ": > $sys/events.jsonl"
try "remove the checkpoint (the journal holds it until the first snapshot)" "rm -f $sys/events.jsonl; [ ! -e $sys/events.jsonl ]"
try "remove the run record" "rm -f $sys/run.json; [ ! -e $sys/run.json ]"
try "rename the run record" "mv $sys/run.json run.json"
try "write through a link" "ln -sfn $sys/events.jsonl link && echo x > link"
try "hard-link the journal" "ln $sys/events.jsonl hard && echo x >> hard"
try "write the home folder" "echo x > '$1/.profile'"
try "write /tmp" "echo x > /tmp/rondo-escaped-$$"
echo mine > mine.txt
echo tmp > "$TMPDIR/t" && cat "$TMPDIR/t"
"#;

/// The attack script and a "home" folder beside the workspace, in `dir`.
fn attack_kit(dir: &Path) -> (PathBuf, PathBuf) {
    let script = dir.join("attack.sh");
    std::fs::write(&script, ATTACK).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    (script, home)
}

/// The `attack` tool's stdout.
fn attack_report(system: &Path) -> String {
    of_kind(&events(system), "tool_call")
        .into_iter()
        .find(|e| e["role"] == "attack")
        .map(|e| e["result"]["stdout"].as_str().unwrap().to_string())
        .unwrap()
}

const SANDBOXED: &str = r#"
workflow sandboxed {
  input script: string
  input home: string
  input sys: string
  input hold: string = "0"
}
role attack: tool { command = ["sh", "{{ input.script }}", "{{ input.home }}", "{{ input.sys }}"] }
role hold: tool { command = ["sh", "-c", "[ -e held ] || { touch held; echo $$ > hold.pid; sleep $0; }", "{{ input.hold }}"] }
role last: tool { command = ["sh", "-c", "cat mine.txt"] }
start -> attack
attack -> hold
hold -> last
last -> success
exit success
"#;

/// Local tools are confined (Landlock): a tool that climbs out of its working directory
/// to the run's records, through a link, into the user's home or `/tmp` is denied; the
/// journal, checkpoint and run record stay whole, and a run killed afterwards resumes
/// and replays. What the tool writes in the workspace and in its `TMPDIR` is kept.
#[test]
fn a_local_tool_cannot_write_the_system_area_or_outside_its_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let (script, home) = attack_kit(tmp.path());
    let wf = write_workflow(tmp.path(), SANDBOXED);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args([
            "run",
            "-q",
            wf.to_str().unwrap(),
            "--run-dir",
            "runs",
            "--run-id",
            "r",
        ])
        .args(["--input", &format!("script={}", script.display())])
        .args(["--input", &format!("home={}", home.display())])
        .args(["--input", "sys=..", "--input", "hold=60"])
        .current_dir(tmp.path())
        .spawn()
        .unwrap();
    let system = tmp.path().join("runs/r");
    let pid_file = system.join("workspace/hold.pid");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(&pid_file).map_or(true, |p| !p.ends_with('\n')) {
        assert!(
            std::time::Instant::now() < deadline,
            "the hold step never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A crash in the step after the attack.
    child.kill().unwrap();
    // The step's processes end with rondo (the tool's PID namespace goes with it).
    child.wait().unwrap();

    assert_eq!(attack_report(&system), "tmp\n", "every escape is denied");
    let all = events(&system);
    assert_eq!(all[0]["event"], "run_start");
    assert!(system.join("events.jsonl").is_file() && system.join("run.json").is_file());
    assert!(!home.join(".profile").exists());
    assert_eq!(
        std::fs::read_to_string(system.join("workspace/mine.txt")).unwrap(),
        "mine\n"
    );

    let resumed = rondo_in(tmp.path(), &["resume", "-q", system.to_str().unwrap()]);
    assert_ok(&resumed);
    assert_eq!(json(system.join("run.json"))["exit"], "success");
    let last = of_kind(&events(&system), "tool_call")
        .into_iter()
        .find(|e| e["role"] == "last")
        .unwrap();
    assert_eq!(last["result"]["stdout"], "mine\n");
    let replay = rondo_in(tmp.path(), &["replay", system.to_str().unwrap()]);
    assert_ok(&replay);
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(text.contains("step 1 · attack"), "{text}");
    assert!(text.contains("step 3 · last"), "{text}");
}

/// In a `--workspace` folder the system area is beneath the workspace: tools see
/// `.rondo/` read-only (as root, and as an ordinary user through a user namespace).
#[test]
fn a_local_tool_cannot_write_the_records_inside_a_workspace_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (script, home) = attack_kit(tmp.path());
    let wf = write_workflow(tmp.path(), SANDBOXED);
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    // As root the tool runs in a private mount namespace; as any other user it also
    // needs a user namespace: both are tried when the tests run as root.
    let users: &[Option<u32>] = if root { &[None, Some(65534)] } else { &[None] };
    for (n, user) in users.iter().enumerate() {
        let project = tmp.path().join(format!("project{n}"));
        std::fs::create_dir_all(&project).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.args(["run", "-q", wf.to_str().unwrap(), "--run-id", "r"])
            .args(["--workspace", project.to_str().unwrap()])
            .args(["--input", &format!("script={}", script.display())])
            .args(["--input", &format!("home={}", home.display())])
            .args(["--input", "sys=.rondo/runs/r"])
            .current_dir(tmp.path());
        if let Some(uid) = user {
            use std::os::unix::process::CommandExt;
            for dir in [tmp.path(), &project, &home] {
                std::os::unix::fs::chown(dir, Some(*uid), Some(*uid)).unwrap();
            }
            cmd.uid(*uid).gid(*uid).env("HOME", &home);
        }
        let out = cmd.output().unwrap();
        assert_ok(&out);
        let system = project.join(".rondo/runs/r");
        assert_eq!(attack_report(&system), "tmp\n", "as {user:?}");
        assert_eq!(json(system.join("run.json"))["exit"], "success");
        assert_eq!(events(&system)[0]["event"], "run_start");
        let replay = rondo_in(tmp.path(), &["replay", system.to_str().unwrap()]);
        assert_ok(&replay);
    }
}

/// Runs `rondo` in a process where the kernel answers the Landlock system calls with
/// ENOSYS, as a kernel without Landlock does.
fn rondo_without_landlock(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    common::rondo_refusing(
        libc::SYS_landlock_create_ruleset,
        libc::ENOSYS,
        cwd,
        args,
        env,
    )
}

/// Where the kernel cannot confine local tools, a run refuses to start them (a clear
/// error, nothing run) unless the user accepts unconfined tools with
/// `--unconfined-tools` or `RONDO_UNCONFINED_TOOLS=1`.
#[test]
fn without_landlock_local_tools_are_refused_unless_the_user_opts_in() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = write_workflow(
        tmp.path(),
        r#"
workflow plain {}
role touch: tool { command = ["sh", "-c", "echo ran > ran.txt; echo x > ../escaped.txt"] }
start -> touch
touch -> success
exit success
"#,
    );
    let w = wf.to_str().unwrap();
    let refused = rondo_without_landlock(
        tmp.path(),
        &["run", "-q", w, "--run-dir", "runs", "--run-id", "no"],
        &[],
    );
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        common::stderr(&refused)
    );
    let err = common::stderr(&refused);
    assert!(err.contains("no Landlock"), "{err}");
    assert!(err.contains("--unconfined-tools"), "{err}");
    assert!(
        !tmp.path().join("runs/no/workspace/ran.txt").exists(),
        "the tool ran"
    );
    assert!(!tmp.path().join("runs/no/escaped.txt").exists());

    let flag = rondo_without_landlock(
        tmp.path(),
        &[
            "run",
            "-q",
            w,
            "--run-dir",
            "runs",
            "--run-id",
            "flag",
            "--unconfined-tools",
        ],
        &[],
    );
    assert_ok(&flag);
    let by_env = rondo_without_landlock(
        tmp.path(),
        &["run", "-q", w, "--run-dir", "runs", "--run-id", "env"],
        &[("RONDO_UNCONFINED_TOOLS", "1")],
    );
    assert_ok(&by_env);
    for id in ["flag", "env"] {
        let run = tmp.path().join("runs").join(id);
        assert!(run.join("workspace/ran.txt").exists());
        // Unconfined means what it says: the tool wrote beside its workspace.
        assert!(run.join("escaped.txt").exists());
    }
    let help = rondo_in(tmp.path(), &["run", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--unconfined-tools") && help.contains("RONDO_UNCONFINED_TOOLS"));
}

/// A mount onto a path where the image has files would hide them: the run is refused
/// before any role runs (and no container is left), unless the mount says `:replace`.
/// A mount onto an empty folder of the image (`/work`) is fine.
#[test]
fn a_mount_hides_nothing_the_image_has_unless_it_says_replace() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let workflow = |mount: &str| {
        format!(
            r#"
workflow covered {{}}
environment box {{
  kind = "docker"
  image = "rondo-test-base:latest"
  mounts = ["{mount}"]
}}
role look: tool {{
  env = box
  command = ["sh", "-c", "ls -A /opt /work"]
}}
start -> look
look -> success
exit success
"#
        )
    };
    let hiding = write_workflow(tmp.path(), &workflow("data:/opt:rw"));
    let out = run(tmp.path(), &hiding, "hide", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let info = json(tmp.path().join("runs/hide/run.json"));
    assert_eq!(info["exit"], "error");
    let reason = info["reason"].as_str().unwrap();
    assert!(
        reason.contains("-> /opt: the image rondo-test-base:latest has files there (envs)"),
        "{reason}"
    );
    assert!(reason.contains("`:replace`"), "{reason}");
    assert!(of_kind(&events(&tmp.path().join("runs/hide")), "tool_call").is_empty());
    let left = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=rondo.run_id=hide"])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "containers left: {:?}", left);

    std::fs::create_dir_all(tmp.path().join("replace")).unwrap();
    let replacing = tmp.path().join("replace/w.rondo");
    std::fs::write(&replacing, workflow("data:/opt:rw:replace")).unwrap();
    let out = run(tmp.path(), &replacing, "replace", &[]);
    assert_ok(&out);
    let look = of_kind(&events(&tmp.path().join("runs/replace")), "tool_call")
        .into_iter()
        .next()
        .unwrap();
    // The mount (an empty folder of the workspace) is all the container sees at /opt.
    assert_eq!(look["result"]["stdout"], "/opt:\n\n/work:\n", "{look:#}");

    std::fs::create_dir_all(tmp.path().join("empty")).unwrap();
    let onto_empty = tmp.path().join("empty/w.rondo");
    std::fs::write(&onto_empty, workflow("data:/work:rw")).unwrap();
    assert_ok(&run(tmp.path(), &onto_empty, "empty", &[]));
}
