//! Tool roles in Docker through the interpreter: the run's container, one container per
//! parallel branch when the environment asks, and nothing left behind.

use std::process::Command;

use serde_json::Value;

mod common;

use common::{docker_ready, rondo};

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

#[test]
fn parallel_branches_get_their_own_containers_and_none_is_left() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("boxes.rondo");
    std::fs::write(&wf, WORKFLOW).unwrap();
    let runs = tmp.path().join("runs");
    let id = format!("boxes-test-{}", std::process::id());
    let (out, _) = common::run(&wf, &id);
    common::assert_success(&out);
    let state = common::state(&runs.join(&id));
    let host = |role: &str| {
        let events = std::fs::read_to_string(runs.join(&id).join("events.jsonl")).unwrap();
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
        .args(["ps", "-aq", "--filter", &format!("label=rondo.run_id={id}")])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left_over.stdout).trim().is_empty(),
        "containers left: {}",
        String::from_utf8_lossy(&left_over.stdout)
    );
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
    if !docker_ready() {
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
    let (out, _) = common::run(&wf, "locked-test");
    common::assert_success(&out);
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
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("planted.rondo");
    std::fs::write(&wf, PLANTED).unwrap();
    let runs = tmp.path().join("runs");
    let id = format!("planted-test-{}", std::process::id());
    let (out, _) = common::run(&wf, &id);
    assert_eq!(out.status.code(), Some(2), "ends at `error`");
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(runs.join(&id).join("run.json")).unwrap())
            .unwrap();
    let reason = run["reason"].as_str().unwrap();
    assert!(
        reason.contains("inside the run's workspace") && reason.contains("link out"),
        "{reason}"
    );
    let left_over = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=rondo.run_id={id}")])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&left_over.stdout).trim().is_empty());
}

const SLOW: &str = r#"
workflow slow {
  limits {
    max_wall_time = 8s
  }
}
environment box {
  kind = "docker"
  image = "rondo-test-base:latest"
  mounts = ["w:/w:rw"]
}
role warm: tool { env = box  command = ["true"] }
role slow: tool { env = box  command = ["sh", "-c", "touch /w/started; sleep 600"] }
role after: tool { env = box  command = ["true"] }
start -> warm
warm -> slow
slow -> after
after -> done
exit done
"#;

/// The run's wall time runs out in the middle of a long tool step in Docker: the step's
/// processes in the container are killed (the container is kept here, so it can be
/// looked into), the run ends at `limit`, and its records are whole.
#[test]
fn the_wall_time_kills_a_long_docker_step() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("slow.rondo");
    std::fs::write(&wf, SLOW).unwrap();
    // An id of its own: other checkouts may run this test on the same engine at once.
    let id = format!("wall-test-{}", std::process::id());
    let (out, run) = common::run_with(&wf, &id, &["--keep-env"]);
    let containers = Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label=rondo.run_id={id}")])
        .output()
        .unwrap();
    let containers = String::from_utf8_lossy(&containers.stdout).to_string();
    let ps = |id: &str| {
        let top = Command::new("docker").args(["top", id]).output().unwrap();
        String::from_utf8_lossy(&top.stdout).to_string()
    };
    let tops: Vec<String> = containers.lines().map(ps).collect();
    for id in containers.lines() {
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    assert!(
        run.join("workspace/w/started").exists(),
        "the slow step never ran"
    );
    assert_eq!(containers.lines().count(), 1, "the kept container");
    for top in tops {
        assert!(!top.contains("sleep 600"), "the step still runs:\n{top}");
    }
    let info = common::json(run.join("run.json"));
    assert_eq!(info["exit"], "limit");
    assert!(
        info["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("during `slow`")
            || std::fs::read_to_string(run.join("events.jsonl"))
                .unwrap()
                .contains("during `slow`")
    );
    let state = common::state(&run);
    assert_eq!(state["path"].as_array().map(Vec::len), Some(1), "{state}");
    let replay = rondo(&["replay", run.to_str().unwrap()]);
    common::assert_success(&replay);
    assert!(String::from_utf8_lossy(&replay.stdout).contains("warm"));
}

const LONG_ARG: &str = r#"
workflow long {
  input a: string
  input b: string
}
environment box {
  kind = "docker"
  image = "rondo-test-base:latest"
}
role echo: tool { env = box  command = ["echo", "{{ input.a }}{{ input.b }}"] }
start -> echo
echo -> done when echo.ok
echo -> failed otherwise
exit done
exit failed { code = 1 }
"#;

/// An argument past the OS limit in Docker is the tool's failure, seen like any other
/// failed tool result, not an error of the run.
#[test]
fn an_over_long_argument_in_docker_is_a_failed_tool_result() {
    if !docker_ready() {
        eprintln!("skipped locally: no Docker engine or test image");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("long.rondo");
    std::fs::write(&wf, LONG_ARG).unwrap();
    let half = "x".repeat(100_000);
    let (a, b) = (format!("a={half}"), format!("b={half}"));
    let (out, run) = common::run_with(&wf, "long-test", &["--input", &a, "--input", &b]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let call = common::of_kind(&common::events(&run), "tool_call")
        .into_iter()
        .find(|e| e["role"] == "echo")
        .unwrap();
    assert_eq!(call["result"]["exit_code"], 126, "{}", call["result"]);
    assert!(
        call["result"]["stderr"]
            .as_str()
            .unwrap()
            .contains("rgument list too long"),
        "{}",
        call["result"]["stderr"]
    );
}
