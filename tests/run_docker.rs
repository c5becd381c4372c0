//! Tool roles in Docker through the interpreter: the run's container, one container per
//! parallel branch when the environment asks, and nothing left behind.

use std::process::Command;

use serde_json::Value;

const WORKFLOW: &str = r#"
workflow boxes {}
environment shared {
  kind = "docker"
  image = "rondo-test-base:latest"
}
environment isolated {
  kind = "docker"
  image = "rondo-test-base:latest"
  per_branch = true
}
role first: tool { env = shared  command = ["hostname"] }
role left: tool { env = isolated  command = ["hostname"] }
role right: tool { env = isolated  command = ["hostname"] }
role last: tool { env = shared  command = ["hostname"] }
start -> first
first -> parallel [left, right] -> last
last -> done
exit done
"#;

fn require_docker() -> bool {
    let ok = Command::new("docker")
        .args(["image", "inspect", "rondo-test-base:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && std::env::var_os("CI").is_some() {
        panic!("CI needs Docker and rondo-test-base:latest (scripts/build-test-image.sh)");
    }
    ok
}

#[test]
fn parallel_branches_get_their_own_containers_and_none_is_left() {
    if !require_docker() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("boxes.rondo");
    std::fs::write(&wf, WORKFLOW).unwrap();
    let runs = tmp.path().join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args([
            "run",
            "-q",
            wf.to_str().unwrap(),
            "--run-dir",
            runs.to_str().unwrap(),
            "--run-id",
            "boxes-test",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(runs.join("boxes-test/state.json")).unwrap())
            .unwrap();
    let host = |role: &str| {
        let events = std::fs::read_to_string(runs.join("boxes-test/events.jsonl")).unwrap();
        events
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["event"] == "tool_call" && e["role"] == role)
            .map(|e| e["result"]["stdout"].as_str().unwrap().trim().to_string())
            .unwrap()
    };
    let (first, left, right, last) = (host("first"), host("left"), host("right"), host("last"));
    assert_eq!(
        first, last,
        "roles of one environment share the run's container"
    );
    assert_ne!(left, right, "each branch has its own container");
    assert_ne!(left, first);
    assert_eq!(state["status"], "finished");
    let left_over = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=rondo.run_id=boxes-test"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left_over.stdout).trim().is_empty(),
        "containers left: {}",
        String::from_utf8_lossy(&left_over.stdout)
    );
}

fn rondo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(args)
        .output()
        .unwrap()
}

/// The `stdout` of each tool call, by role.
fn tool_stdout(run: &std::path::Path, role: &str) -> String {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "tool_call" && e["role"] == role)
        .map(|e| e["result"]["stdout"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no tool call of {role}"))
}

const LOCKED: &str = r#"
workflow locked {}
environment locked {
  kind = "docker"
  image = "rondo-test-base:latest"
  user = "65534:65534"
  read_only_root = true
  mounts = ["host:DATA:/data"]
}
environment plain {
  kind = "docker"
  image = "rondo-test-base:latest"
  mounts = ["out:/out:rw"]
}
role who: tool { env = locked  command = ["id", "-u"] }
role root_fs: tool {
  env = locked
  command = ["sh", "-c", "touch /etc/x 2>/dev/null; echo etc=$?; touch /tmp/x; echo tmp=$?"]
}
role data: tool {
  env = locked
  command = ["sh", "-c", "cat /data/in.txt; touch /data/new 2>/dev/null; echo write=$?"]
}
role write: tool { env = plain  command = ["sh", "-c", "echo written > /out/o.txt"] }
start -> who
who -> root_fs
root_fs -> data
data -> write
write -> done
exit done
"#;

#[test]
fn user_read_only_root_and_explicit_host_mounts() {
    if !require_docker() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("in.txt"), "from the host\n").unwrap();
    let wf = tmp.path().join("locked.rondo");
    std::fs::write(&wf, LOCKED.replace("DATA", data.path().to_str().unwrap())).unwrap();
    let check = rondo(&["check", "--offline", wf.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&check.stderr).to_string()
        + &String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{report}");
    assert!(
        report.contains("rondo::environment::host_mount"),
        "{report}"
    );

    let runs = tmp.path().join("runs");
    let out = rondo(&[
        "run",
        "-q",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "locked-test",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = runs.join("locked-test");
    assert_eq!(tool_stdout(&run, "who"), "65534\n");
    // The root file system refuses writes; /tmp is a writable tmpfs.
    assert_eq!(tool_stdout(&run, "root_fs"), "etc=1\ntmp=0\n");
    // The host folder is readable and, not marked `rw`, read-only.
    assert_eq!(tool_stdout(&run, "data"), "from the host\nwrite=1\n");
    assert!(!data.path().join("new").exists());
    assert_eq!(
        std::fs::read_to_string(run.join("workspace/out/o.txt")).unwrap(),
        "written\n"
    );
}

const PLANTED: &str = r#"
workflow planted {}
environment boxed {
  kind = "docker"
  image = "rondo-test-base:latest"
  mounts = ["sock:/s"]
}
role plant: tool { command = ["ln", "-s", "/run", "sock"] }
role use: tool { env = boxed  command = ["ls", "/s"] }
start -> plant
plant -> use
use -> done
exit done
"#;

#[test]
fn a_workspace_mount_replaced_by_a_link_out_is_refused_at_run_time() {
    if !require_docker() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("planted.rondo");
    std::fs::write(&wf, PLANTED).unwrap();
    let runs = tmp.path().join("runs");
    let out = rondo(&[
        "run",
        "-q",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "planted-test",
    ]);
    assert_eq!(out.status.code(), Some(2), "ends at `error`");
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(runs.join("planted-test/run.json")).unwrap())
            .unwrap();
    let reason = run["reason"].as_str().unwrap();
    assert!(
        reason.contains("inside the run's workspace") && reason.contains("link out"),
        "{reason}"
    );
    let left_over = Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=rondo.run_id=planted-test"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&left_over.stdout).trim().is_empty());
}
