//! `rondo resume --engine`: a run whose sandboxes come from an engine other than the
//! local Docker one (`process` here: runner processes, the same protocol as in a
//! container) is killed in the middle of a tool step, and goes on from its last
//! checkpoint in a new sandbox of the same engine, to its exit, with nothing lost.

use std::path::Path;
use std::process::{Command, Stdio};

use rondo::run::rundir;

mod common;

/// Two tool steps in the run's sandbox, the second stuck the first time it runs; each
/// appends its step id to a file of the workspace (mounted at /work).
const TWICE: &str = r#"
workflow twice {
  answer = last
}
environment sandbox {
  kind = "docker"
  image = "rondo-test-base:latest"
  workdir = "/work"
  mounts = [".:/work:rw"]
}
role first: tool {
  env = sandbox
  command = ["sh", "-c", "echo first $RONDO_STEP_ID >> ids.txt"]
}
role slow: tool {
  env = sandbox
  command = ["sh", "-c", "echo slow $RONDO_STEP_ID >> ids.txt; [ -e started ] || { touch started; exec python3 -c 'import time; time.sleep(3600)' rondo-resume-engine-marker; }"]
}
role last: tool {
  env = sandbox
  command = ["sh", "-c", "echo last $RONDO_STEP_ID >> ids.txt; cat ids.txt"]
}
start -> first
first -> slow
slow -> last
last -> done
exit done
"#;

fn rondo(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_run_killed_in_a_tool_step_resumes_with_its_engine_to_its_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("twice.rondo");
    std::fs::write(&wf, TWICE).unwrap();
    let runs = tmp.path().join("runs");
    let dir = runs.join("twice");
    let workspace = dir.join("workspace");
    let mut child = rondo(tmp.path())
        .arg("run")
        .arg(&wf)
        .arg("--run-dir")
        .arg(&runs)
        .args(["--run-id", "twice", "-q", "--engine", "process"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("the slow step starts in its sandbox", || {
        workspace.join("started").exists()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let info = rundir::read_info(&dir).unwrap();
    assert!(info.ended_at.is_none(), "the run was stopped mid-way");
    // The sandbox's runner saw its driver go (its input closed) and ended the stuck
    // command's tree with it.
    common::wait_for("the killed run's command ends", || {
        common::processes_with("rondo-resume-engine-marker").is_empty()
    });

    let out = rondo(tmp.path())
        .arg("resume")
        .arg(&dir)
        .args(["-q", "--engine", "process"])
        .output()
        .unwrap();
    common::assert_success(&out);
    let info = rundir::read_info(&dir).unwrap();
    assert_eq!(info.exit.as_deref(), Some("done"));
    // Nothing lost, nothing done twice but the interrupted step, which runs again with
    // the same step id (at least once, as the journal documents).
    let ids = std::fs::read_to_string(workspace.join("ids.txt")).unwrap();
    let ids: Vec<&str> = ids.lines().collect();
    assert_eq!(
        ids,
        [
            "first twice-1",
            "slow twice-2",
            "slow twice-2",
            "last twice-3"
        ],
        "{ids:?}"
    );
    let state = rundir::read_checkpoint(&dir).unwrap();
    let path: Vec<String> = serde_json::from_value(state["path"].clone()).unwrap();
    assert_eq!(path, ["first", "slow", "last"], "{path:?}");
    // The answer is the last step's output, which read the file through the new sandbox.
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.contains("last twice-3"), "{answer}");
    // The resumed run's sandboxes ended with it.
    assert!(common::processes_with("rondo-resume-engine-marker").is_empty());
    let sandboxes = dir.join("sandboxes");
    let left: Vec<_> = std::fs::read_dir(&sandboxes)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.len() <= 1,
        "only the killed run's sandbox folder may be left: {left:?}"
    );
}
