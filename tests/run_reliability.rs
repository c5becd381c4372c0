//! A run killed at any moment loses no completed step and runs none twice; Ctrl-C
//! stops cleanly and the run resumes. These drive the real binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const ROUNDS: u64 = 10;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

/// A workflow mixing llm (scripted), tool (a real process) and builtin steps, with an
/// append-mode artifact whose lines must appear exactly once each.
/// The tool's command line carries `marker` (the test's folder name), so a test looks for
/// its own processes only, not those of tests running beside it.
fn marker(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

fn project(dir: &Path, sleep_s: f64) -> PathBuf {
    let marker = marker(dir);
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    std::fs::write(
        dir.join("prompts/plan.tera"),
        "Round {{ memory.counter }}: give the next number.\n",
    )
    .unwrap();
    let replies: Vec<String> = (1..=ROUNDS)
        .map(|k| format!("    - '{{\"k\": {k}}}'"))
        .collect();
    std::fs::write(
        dir.join("script.yaml"),
        format!("replies:\n  plan:\n{}\n", replies.join("\n")),
    )
    .unwrap();
    let wf = format!(
        r#"
workflow killme {{
  prompts = "prompts"
  script = "script.yaml"
  input rounds: int = {ROUNDS}
}}
memory {{
  counter: int = 0
  seen: list[int] = []
}}
role plan: llm {{
  prompt = "plan.tera"
  reads = [counter]
  max_visits = 50
  output json {{ k: int }}
  update {{ seen.append(output.k) }}
}}
role work: tool {{
  command = ["python3", "-c", "import time; time.sleep({sleep_s}); print('worked {{{{ memory.counter }}}}') # {marker}"]
  timeout = 30s
}}
role count: builtin {{
  max_visits = 50
  update {{ set counter = memory.counter + 1 }}
  artifact "trace.jsonl" += {{ counter: memory.counter, work: work.stdout }}
}}
start -> plan
plan -> work
plan -> invalid_output when plan.invalid
work -> count
count -> plan when memory.counter < input.rounds
count -> done otherwise
exit done
"#
    );
    let path = dir.join("killme.rondo");
    std::fs::write(&path, wf).unwrap();
    let check = rondo()
        .args(["check", "--offline"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    path
}

fn start_run(workflow: &Path, runs: &Path, id: &str) -> Child {
    rondo()
        .args(["run", "--quiet"])
        .arg(workflow)
        .arg("--run-dir")
        .arg(runs)
        .args(["--run-id", id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn resume(run_dir: &Path) -> Child {
    rondo()
        .args(["resume", "--quiet"])
        .arg(run_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// What must be identical between an interrupted-and-resumed run and a clean one.
fn essence(run_dir: &Path) -> Value {
    let state = rondo::run::rundir::read_checkpoint(run_dir).unwrap();
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let steps: Vec<String> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "role_start")
        .map(|e| format!("{}#{}", e["role"].as_str().unwrap_or(""), e["visit"]))
        .collect();
    serde_json::json!({
        "status": state["status"],
        "position": state["position"],
        "step": state["step"],
        "path": state["path"],
        "visits": state["visits"],
        "route_taken": state["route_taken"],
        "memory": state["memory"],
        // Tool outputs carry timings; the others must match exactly.
        "outputs": state["outputs"].as_object().map(|o| o.iter().filter(|(_, v)| v.get("execution_time").is_none()).map(|(k, v)| (k.clone(), v.clone())).collect::<serde_json::Map<_, _>>()),
        "tokens": state["totals"]["input_tokens"],
        "llm_calls": state["totals"]["llm_calls"],
        "trace": std::fs::read_to_string(run_dir.join("workspace/trace.jsonl")).unwrap_or_default(),
        "role_starts": steps,
    })
}

/// Deterministic pseudo-random delays (no extra crate): a 64-bit LCG.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below.max(1)
    }
}

fn kill_after(mut child: Child, delay: Duration) -> bool {
    let deadline = Instant::now() + delay;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // SIGKILL: no handler runs, nothing is flushed.
    child.kill().unwrap();
    child.wait().unwrap();
    true
}

#[test]
fn sigkill_at_random_moments_then_resume_equals_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let workflow = project(tmp.path(), 0.03);
    let runs = tmp.path().join("runs");

    let started = Instant::now();
    let status = start_run(&workflow, &runs, "clean").wait().unwrap();
    let clean_ms = started.elapsed().as_millis() as u64;
    assert!(status.success(), "the clean run failed");
    let expected = essence(&runs.join("clean"));
    assert_eq!(expected["step"], 3 * ROUNDS);
    assert_eq!(
        expected["trace"].as_str().unwrap().lines().count() as u64,
        ROUNDS
    );

    let mut rng = Lcg(0x5eed);
    let mut kills = 0;
    let trials = 12;
    for trial in 0..trials {
        let id = format!("trial{trial}");
        let run_dir = runs.join(&id);
        // Kill the first process, and sometimes the resumes too.
        let mut child = start_run(&workflow, &runs, &id);
        let mut rounds = 0;
        loop {
            let delay = Duration::from_millis(5 + rng.next(clean_ms));
            let killed = kill_after(child, delay);
            if killed {
                kills += 1;
            }
            rounds += 1;
            let finished = rondo::run::rundir::read_checkpoint(&run_dir)
                .is_ok_and(|state| state["status"] == "finished");
            if finished {
                break;
            }
            if !run_dir.join("run.json").exists() {
                // Killed before the run existed (its first checkpoint is in the journal,
                // `run.json` follows it): nothing to resume; start again.
                std::fs::remove_dir_all(&run_dir).ok();
                child = start_run(&workflow, &runs, &id);
                continue;
            }
            child = resume(&run_dir);
            if rounds >= 3 {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "resume failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                break;
            }
        }
        assert_eq!(
            essence(&run_dir),
            expected,
            "trial {trial} differs from the uninterrupted run"
        );
    }
    assert!(
        kills >= trials / 2,
        "only {kills} kills landed in {trials} trials: the delays are too long"
    );
}

#[test]
fn ctrl_c_checkpoints_marks_interrupted_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let workflow = project(tmp.path(), 0.6);
    let runs = tmp.path().join("runs");
    let child = start_run(&workflow, &runs, "int");
    // Let it reach a slow tool step (its start is journaled), then Ctrl-C.
    let journal = runs.join("int").join("events.jsonl");
    let in_tool = || {
        std::fs::read_to_string(&journal).is_ok_and(|text| {
            text.lines()
                .any(|l| l.contains("\"role_start\"") && l.contains("\"role\":\"work\""))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !in_tool() {
        assert!(
            Instant::now() < deadline,
            "the run never reached its tool step"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = child.id() as i32;
    // SAFETY: signalling a process has no memory-safety preconditions.
    assert_eq!(unsafe { libc_kill(pid, 2) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = runs.join("int");
    let info = read_json(&run_dir.join("run.json"));
    assert_eq!(info["status"], "interrupted");
    assert_eq!(info["exit"], "interrupted");
    let state = rondo::run::rundir::read_checkpoint(&run_dir).unwrap();
    assert_eq!(state["status"], "interrupted");
    let done_before = state["step"].as_u64().unwrap();
    assert!(done_before < 3 * ROUNDS);
    // No process of the interrupted step is left running.
    let ps = Command::new("pgrep")
        .args(["-f", &marker(tmp.path())])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ps.stdout).trim().is_empty(),
        "a tool process survived the interrupt"
    );

    let out = resume(&run_dir).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = rondo::run::rundir::read_checkpoint(&run_dir).unwrap();
    assert_eq!(state["status"], "finished");
    assert_eq!(state["step"], 3 * ROUNDS);
    assert_eq!(state["memory"][0], ROUNDS);
    let trace = std::fs::read_to_string(run_dir.join("workspace/trace.jsonl")).unwrap();
    assert_eq!(trace.lines().count() as u64, ROUNDS, "{trace}");
    assert_eq!(read_json(&run_dir.join("run.json"))["status"], "finished");
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
