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
