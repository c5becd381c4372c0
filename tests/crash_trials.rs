//! Crash trials: `rondo run` of DS-STAR (scripted replies, a local tool, a Python script
//! it writes and runs, artifacts) is killed with SIGKILL at uniformly random moments over
//! the uninterrupted run's duration, start-up and the last step included, then resumed
//! (a resume is itself killed in some trials) until it ends. Every trial must end at the
//! same exit, with the same path and the same artifacts as an uninterrupted run, and
//! leave no temporary file.
//!
//! `RONDO_CRASH_TRIALS=100 cargo test --test crash_trials -- --nocapture` runs 100 trials
//! (default 20); `RONDO_CRASH_SEED` changes the seed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rondo::run::rundir;

mod common;

const WORKFLOW: &str = "workflows/ds_star.rondo";
const SCRIPT: &str = "workflows/scripts/ds_star_hello.yaml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// splitmix64: the trials are reproducible from their seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn run_cmd(runs: &Path, id: &str, cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(cwd)
        .arg("run")
        .arg(root().join(WORKFLOW))
        .arg("--script")
        .arg(root().join(SCRIPT))
        .args(["--input", "question=Create hello.txt containing 'hello'."])
        .args(["--input", "data_dir=no_data"])
        .arg("--run-dir")
        .arg(runs)
        .args(["--run-id", id, "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

fn resume_cmd(dir: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(cwd)
        .arg("resume")
        .arg(dir)
        .arg("-q")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd`, killing it with SIGKILL after `after` unless it ended first.
/// Returns whether it was killed.
fn run_killed(mut cmd: Command, after: Option<Duration>) -> bool {
    let mut child = cmd.spawn().expect("spawn rondo");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let _ = status;
            return false;
        }
        if after.is_some_and(|a| started.elapsed() >= a) {
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What a finished run must agree on.
#[derive(Debug, PartialEq)]
struct Result {
    exit: Option<String>,
    status: String,
    path: Vec<String>,
    artifacts: BTreeMap<String, String>,
}

/// Timing in a file is not part of what a run produced.
fn normalise(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = match line.find("\"execution_time\"") {
            Some(i) => format!("{}\"execution_time\": _", &line[..i]),
            None => line.to_string(),
        };
        let line = match line.find("after ") {
            Some(i) if line.starts_with("[exit code") => format!("{}after _", &line[..i]),
            _ => line,
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn files(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>, temps: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read run dir").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = path
            .strip_prefix(base)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".tmp") {
            temps.push(rel.clone());
        }
        if path.is_dir() {
            files(&path, base, out, temps);
        } else if !["run.json", "state.json", "events.jsonl"].contains(&name.as_str()) {
            let text = std::fs::read(&path).expect("read artifact");
            out.insert(rel, normalise(&String::from_utf8_lossy(&text)));
        }
    }
}

fn result_of(dir: &Path) -> Result {
    let info = rundir::read_info(dir).expect("run.json");
    let state = rundir::read_checkpoint(dir).expect("checkpoint");
    // Artifacts are the workspace's; temporary files are looked for in both areas.
    let mut artifacts = BTreeMap::new();
    let mut temps = Vec::new();
    let workspace = dir.join("workspace");
    files(&workspace, &workspace, &mut artifacts, &mut temps);
    files(dir, dir, &mut BTreeMap::new(), &mut temps);
    assert!(
        temps.is_empty(),
        "{}: temporary files left: {temps:?}",
        dir.display()
    );
    Result {
        exit: info.exit,
        status: info.status.to_string(),
        path: serde_json::from_value(state["path"].clone()).expect("the checkpoint's path"),
        artifacts,
    }
}

#[test]
fn killed_runs_resume_to_the_same_end() {
    let trials: u64 = std::env::var("RONDO_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("RONDO_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(11);
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let runs = cwd.join("runs");

    // The uninterrupted run, timed twice (the longer one spreads the kills).
    let mut duration = Duration::ZERO;
    for id in ["base", "base2"] {
        let started = Instant::now();
        let out = run_cmd(&runs, id, cwd).output().unwrap();
        duration = duration.max(started.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let expected = result_of(&runs.join("base"));
    assert_eq!(expected.exit.as_deref(), Some("success"));
    assert_eq!(result_of(&runs.join("base2")), expected);
    assert!(expected.artifacts.contains_key("final_answer.md"));

    let mut rng = Rng(seed);
    let span = duration.as_micros() as u64;
    let (mut before_start, mut mid_run, mut after_end, mut not_killed) = (0, 0, 0, 0);
    let (mut resumes, mut resume_kills) = (0, 0);
    for trial in 0..trials {
        let id = format!("t{trial}");
        let dir = runs.join(&id);
        let delay = Duration::from_micros(rng.below(span));
        let killed = run_killed(run_cmd(&runs, &id, cwd), Some(delay));
        if !killed {
            not_killed += 1;
        } else if rundir::read_info(&dir).is_err() {
            // Killed before the run existed: the run id is free again.
            before_start += 1;
            assert!(!run_killed(run_cmd(&runs, &id, cwd), None), "rerun of {id}");
        } else if rundir::read_info(&dir).is_ok_and(|i| i.ended_at.is_some()) {
            after_end += 1;
        } else {
            mid_run += 1;
        }
        // Resume until the run has ended; every other trial kills its first resume too.
        let mut attempt = 0;
        while rundir::read_info(&dir).map(|i| i.ended_at.is_none()) == Ok(true) {
            let kill =
                (trial % 2 == 1 && attempt == 0).then(|| Duration::from_micros(rng.below(span)));
            resumes += 1;
            if run_killed(resume_cmd(&dir, cwd), kill) {
                resume_kills += 1;
            }
            attempt += 1;
            assert!(attempt < 10, "{id}: resume does not end the run");
        }
        let got = result_of(&dir);
        assert_eq!(
            got, expected,
            "trial {id} (kill after {delay:?}) ended differently"
        );
    }
    eprintln!(
        "crash trials: {trials} (seed {seed}, uninterrupted run {duration:?}): killed before the run existed {before_start}, killed mid-run {mid_run}, killed after the run ended {after_end}, ended before the kill {not_killed}; {resumes} resumes ({resume_kills} of them killed); all {trials} ended at `success` with the uninterrupted run's path and artifacts"
    );
}

/// A tool killed mid-way runs again on resume, with the same `RONDO_STEP_ID`.
#[test]
fn a_tool_step_run_again_sees_the_same_step_id() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("twice.rondo");
    std::fs::write(
        &wf,
        r#"
workflow twice {}
role first: tool { command = ["sh", "-c", "echo $RONDO_STEP_ID >> ids.txt"] }
role slow: tool { command = ["sh", "-c", "echo $RONDO_STEP_ID >> ids.txt; [ -e started ] || { touch started; sleep 60; }"] }
start -> first
first -> slow
slow -> done
exit done
"#,
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let dir = runs.join("twice");
    let workspace = dir.join("workspace");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .arg("run")
        .arg(&wf)
        .arg("--run-dir")
        .arg(&runs)
        .args(["--run-id", "twice", "-q"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("the slow step starts", || {
        workspace.join("started").exists()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!run_killed(resume_cmd(&dir, tmp.path()), None));
    let ids = std::fs::read_to_string(workspace.join("ids.txt")).unwrap();
    let ids: Vec<&str> = ids.lines().collect();
    assert_eq!(ids, ["twice-1", "twice-2", "twice-2"], "{ids:?}");
    let info = rundir::read_info(&dir).unwrap();
    assert_eq!(info.exit.as_deref(), Some("done"));
}

/// After SIGKILL the run's container outlives `rondo`; the resume removes it first, even
/// when what is left of the run never starts a Docker environment again.
#[test]
fn resume_removes_the_orphaned_container_first() {
    if !common::docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("boxed.rondo");
    std::fs::write(
        &wf,
        r#"
workflow boxed {}
environment box {
  kind = "docker"
  image = "rondo-test-base:latest"
}
environment here { kind = "local" }
role boxed: tool { env = box  command = ["true"] }
role slow: tool { env = here  command = ["sh", "-c", "[ -e started ] || { touch started; sleep 60; }"] }
start -> boxed
boxed -> slow
slow -> done
exit done
"#,
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let id = format!("orphan-{}", std::process::id());
    let dir = runs.join(&id);
    let containers = || {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--no-trunc", "--filter"])
            .arg(format!("label=rondo.run_id={id}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .arg("run")
        .arg(&wf)
        .arg("--run-dir")
        .arg(&runs)
        .args(["--run-id", &id, "-q"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("the local step starts after the Docker one", || {
        dir.join("workspace/started").exists()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let orphans = containers();
    assert_eq!(
        orphans.len(),
        1,
        "the killed run's container is still there"
    );
    assert!(!run_killed(resume_cmd(&dir, tmp.path()), None));
    assert!(
        containers().is_empty(),
        "containers left: {:?}",
        containers()
    );
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let after_resume: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .skip_while(|e: &serde_json::Value| e["event"] != "run_resumed")
        .collect();
    assert_eq!(after_resume[1]["event"], "stale_containers_removed");
    assert!(
        after_resume[1]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str() == Some(orphans[0].as_str()))
    );
    assert_eq!(
        rundir::read_info(&dir).unwrap().exit.as_deref(),
        Some("done")
    );
}

const LOOP: &str = r#"
workflow ticks {
  limits { max_steps = 2000 }
}
memory {
  counter: int = 0
  seen: list[int] = []
}
role tick: builtin {
  max_visits = 700
  update {
    set counter = memory.counter + 1
    seen.append(memory.counter)
  }
  artifact "ticks.jsonl" += { n: memory.counter, step: step }
  artifact "{% if memory.counter > 300 %}late{% else %}early{% endif %}.jsonl" += memory.counter
  artifact "last.txt" = "{{ memory.counter }}"
}
role check: builtin {
  max_visits = 1
  artifact "summary.json" = { count: len(memory.seen), last: memory.counter }
}
start -> tick
tick -> tick when memory.counter < 600
tick -> check otherwise
check -> done
exit done
"#;

/// A long run (600 steps: several journal snapshots) with append-mode artifacts, some
/// first created mid-run: killed at random moments, resumed, no line written twice.
#[test]
fn killed_long_runs_replay_the_journal_past_snapshots() {
    let trials: u64 = std::env::var("RONDO_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(6, |t| t.div_ceil(4));
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let wf = cwd.join("ticks.rondo");
    std::fs::write(&wf, LOOP).unwrap();
    let runs = cwd.join("runs");
    let cmd = |id: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.current_dir(cwd)
            .arg("run")
            .arg(&wf)
            .arg("--run-dir")
            .arg(&runs)
            .args(["--run-id", id, "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let started = Instant::now();
    assert!(!run_killed(cmd("base"), None));
    let span = started.elapsed().as_micros() as u64;
    let expected = result_of(&runs.join("base"));
    assert_eq!(expected.exit.as_deref(), Some("done"));
    assert_eq!(expected.path.len(), 601);
    let mut rng = Rng(7);
    let mut killed = 0;
    for trial in 0..trials {
        let id = format!("l{trial}");
        let dir = runs.join(&id);
        if run_killed(cmd(&id), Some(Duration::from_micros(rng.below(span)))) {
            killed += 1;
        }
        if rundir::read_info(&dir).is_err() {
            assert!(!run_killed(cmd(&id), None));
        }
        let mut attempt = 0;
        while rundir::read_info(&dir).map(|i| i.ended_at.is_none()) == Ok(true) {
            let kill = (attempt == 0).then(|| Duration::from_micros(rng.below(span)));
            run_killed(resume_cmd(&dir, cwd), kill);
            attempt += 1;
            assert!(attempt < 10, "{id}: resume does not end the run");
        }
        assert_eq!(result_of(&dir), expected, "trial {id}");
    }
    eprintln!(
        "long-run trials: {trials}, {killed} killed mid-run; all ended like the uninterrupted run"
    );
}

/// `rondo eval` with 50 runs in flight, their steps made durable together by the
/// process's committer, killed at random moments and resumed (`--resume`, itself killed
/// once) until the eval ends: every case's run ends like the uninterrupted run.
#[test]
fn killed_evals_of_many_concurrent_runs_resume_to_the_same_ends() {
    const CASES: usize = 50;
    let trials: u64 = std::env::var("RONDO_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(3, |t| t.div_ceil(10));
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let wf = cwd.join("ticks.rondo");
    std::fs::write(&wf, LOOP.replace("< 600", "< 40")).unwrap();
    let dataset = cwd.join("cases.jsonl");
    let lines: Vec<String> = (0..CASES)
        .map(|i| format!("{{\"id\": \"c{i:02}\", \"inputs\": {{}}}}"))
        .collect();
    std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
    let rondo = |args: &[&std::ffi::OsStr]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.current_dir(cwd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let runs = cwd.join("runs");
    assert!(!run_killed(
        rondo(&[
            "run".as_ref(),
            wf.as_os_str(),
            "--run-dir".as_ref(),
            runs.as_os_str(),
            "--run-id".as_ref(),
            "base".as_ref(),
            "-q".as_ref(),
        ]),
        None
    ));
    let expected = result_of(&runs.join("base"));
    assert_eq!(expected.exit.as_deref(), Some("done"));
    let eval = |out: &Path| {
        rondo(&[
            "eval".as_ref(),
            wf.as_os_str(),
            "--dataset".as_ref(),
            dataset.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            "-c".as_ref(),
            "50".as_ref(),
            "-q".as_ref(),
        ])
    };
    let resume = |out: &Path| {
        rondo(&[
            "eval".as_ref(),
            "--resume".as_ref(),
            out.as_os_str(),
            "-q".as_ref(),
        ])
    };
    let started = Instant::now();
    assert!(!run_killed(eval(&cwd.join("whole")), None));
    let span = started.elapsed().as_micros() as u64;
    let mut rng = Rng(11);
    let mut killed = 0;
    for trial in 0..trials {
        let out = cwd.join(format!("e{trial}"));
        if run_killed(eval(&out), Some(Duration::from_micros(rng.below(span)))) {
            killed += 1;
        }
        let mut attempt = 0;
        while !out.join("summary.json").exists() {
            // Killed before the eval wrote its set-up: nothing to resume, start again.
            let cmd = if out.join("eval.json").exists() {
                resume(&out)
            } else {
                let _ = std::fs::remove_dir_all(&out);
                eval(&out)
            };
            let kill = (attempt == 0).then(|| Duration::from_micros(rng.below(span)));
            run_killed(cmd, kill);
            attempt += 1;
            assert!(attempt < 10, "{}: the eval does not end", out.display());
        }
        for i in 0..CASES {
            let dir = out.join("runs").join(format!("c{i:02}"));
            assert_eq!(result_of(&dir), expected, "trial {trial}, case c{i:02}");
        }
    }
    eprintln!(
        "concurrent-eval trials: {trials} of {CASES} runs each, {killed} killed mid-eval; \
         every run ended like the uninterrupted run"
    );
}
