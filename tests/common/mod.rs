//! Helpers shared by the integration tests of the language stage.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rondo::check::{self, CheckOptions, Summary};
use rondo::compile::{self, Workflow};
use rondo::diagnostics::{self, Diagnostic, Diagnostics, Severity};
use rondo::source::SourceFile;

/// The package root (tests run there, but be explicit).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path relative to the package root, as the tests name files (stable in renderings).
pub fn rel(path: &Path) -> PathBuf {
    path.strip_prefix(root()).unwrap_or(path).to_path_buf()
}

/// Compiles and checks source text the way `rondo check` (not offline) does.
pub fn check_source(file: &SourceFile, offline: bool) -> (Workflow, Diagnostics, Summary) {
    let (workflow, mut diags) = compile::load(file);
    let (more, summary) = check::check(&workflow, diags.has_errors(), &CheckOptions { offline });
    diags.extend(more);
    (workflow, diags, summary)
}

/// Reads a file by its path relative to the package root and checks it, as `rondo check`
/// does.
pub fn check_path(path: &Path, offline: bool) -> (SourceFile, Workflow, Diagnostics, Summary) {
    let (file, loaded) = rondo::check::load_checked(path, &CheckOptions { offline })
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let workflow = loaded.workflow().clone();
    (file, workflow, loaded.diagnostics, loaded.summary)
}

/// The codes of the diagnostics, in sorted order.
pub fn codes(diags: &Diagnostics) -> Vec<&'static str> {
    diags.sorted().iter().map(|d| d.code.as_str()).collect()
}

pub fn errors(diags: &Diagnostics) -> Vec<Diagnostic> {
    diags
        .sorted()
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .collect()
}

/// The expected-file text of a fixture: the human rendering (no colour, width 100),
/// then the JSON of the diagnostics.
pub fn expected_text(file: &SourceFile, diags: &Diagnostics) -> String {
    let sorted = diags.sorted();
    let human = diagnostics::render_human(file, &sorted, false, 100);
    let json = serde_json::to_string_pretty(&diagnostics::to_json(file, &sorted))
        .expect("diagnostics serialize");
    format!("{human}{JSON_SEPARATOR}\n{json}\n")
}

pub const JSON_SEPARATOR: &str = "==================== json ====================";

/// Files under `dir` (recursively) with the extension, sorted, skipping folders whose
/// name starts with `_` (support files).
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('_') {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The `.rondo` files of `workflows/`.
pub fn workflow_files() -> Vec<PathBuf> {
    files_with_ext(&root().join("workflows"), "rondo")
        .into_iter()
        .map(|p| rel(&p))
        .collect()
}

/// Runs the `rondo` binary with the arguments and waits for it.
pub fn rondo(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .args(args)
        .output()
        .unwrap()
}

/// Writes a project into `dir` (the prompts, `script.yaml` and `w.rondo`) and checks the
/// workflow offline; returns the workflow's path.
pub fn project(dir: &Path, workflow: &str, prompts: &[(&str, &str)], script: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    for (name, text) in prompts {
        std::fs::write(dir.join("prompts").join(name), text).unwrap();
    }
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    let path = dir.join("w.rondo");
    std::fs::write(&path, workflow).unwrap();
    let check = rondo(&["check", "--offline", path.to_str().unwrap()]);
    assert_success(&check);
    path
}

/// Runs the workflow quietly as `id` under `runs/` next to it, with the extra arguments;
/// returns the output and the run's directory.
pub fn run_with(workflow: &Path, id: &str, extra: &[&str]) -> (std::process::Output, PathBuf) {
    let runs = workflow.parent().unwrap().join("runs");
    let mut args = vec![
        "run",
        "-q",
        workflow.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        id,
    ];
    args.extend(extra);
    (rondo(&args), runs.join(id))
}

/// [`run_with`] without extra arguments.
pub fn run(workflow: &Path, id: &str) -> (std::process::Output, PathBuf) {
    run_with(workflow, id, &[])
}

/// Reads a JSON file (the panic names the file).
/// The keys of a JSON object, sorted (panics on anything else).
pub fn keys(v: &serde_json::Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort();
    k
}

pub fn json(path: impl AsRef<Path>) -> serde_json::Value {
    let path = path.as_ref();
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A run's last checkpointed state, read as `rondo` reads it (a finished run's last state
/// is its journal's last record, not always a `state.json`).
pub fn state(run_dir: &Path) -> serde_json::Value {
    rondo::run::rundir::read_checkpoint(run_dir).unwrap_or_else(|e| panic!("{e}"))
}

/// The events of a run (its `events.jsonl`).
pub fn events(run_dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The events of one kind.
pub fn of_kind(events: &[serde_json::Value], kind: &str) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|e| e["event"] == kind)
        .cloned()
        .collect()
}

/// The prompts an llm role was sent, every attempt, in order (from a run's journal).
pub fn prompts_to(events: &[serde_json::Value], role: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            (e["event"] == "llm_response" || e["event"] == "invalid_output") && e["role"] == role
        })
        .map(|e| e["prompt"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The standard error of a process, as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the process succeeded; the message is its standard error.
pub fn assert_success(out: &std::process::Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// Whether an engine a test needs is there. A missing one fails the test, with how to
/// install it, unless the developer lists it in `RONDO_TEST_SKIP` (`docker,go`): then the
/// skip is printed, never silent.
pub fn engine_ready(engine: &str, available: bool, install: &str) -> bool {
    if available {
        return true;
    }
    let skipped = std::env::var("RONDO_TEST_SKIP")
        .is_ok_and(|list| list.split(',').any(|e| e.trim() == engine));
    assert!(
        skipped,
        "this test needs {engine}: {install} (or RONDO_TEST_SKIP={engine} to skip it)"
    );
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("SKIPPED {test}: {engine} is not available (RONDO_TEST_SKIP)");
    false
}

/// Whether Docker and the test image are there.
pub fn docker_ready() -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "rondo-test-base:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    engine_ready(
        "docker",
        ok,
        "a Docker engine and rondo-test-base:latest (bash scripts/build-test-image.sh)",
    )
}

/// Whether Go is installed (iter's default build command).
pub fn go_ready() -> bool {
    let ok = std::process::Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    engine_ready("go", ok, "apt-get install golang-go (scripts/test.sh does)")
}

/// The live (not zombie) processes whose command line holds `marker`: found from outside
/// a tool's PID namespace, where the pids it reports mean nothing.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Runs `rondo` where the kernel answers one system call with `errno` (a seccomp filter
/// set before `exec`), as a kernel without that feature, or a policy refusing it, does.
pub fn rondo_refusing(
    syscall: libc::c_long,
    errno: i32,
    cwd: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let filter = [
        // A = the system call number
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: syscall as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | errno as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env_remove("RONDO_UNCONFINED_TOOLS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: only system calls on data that lives until `exec`.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

/// Hosted providers' key variables: an example must not need one.
pub const KEY_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "OLLAMA_HOST",
];

/// A fresh folder holding what the examples read from the repository root (workflows with
/// their prompts, tools and config), so examples that write runs leave the checkout alone.
pub fn repo_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for sub in ["workflows", "prompts", "tools", "config"] {
        let status = std::process::Command::new("cp")
            .arg("-R")
            .arg(root.join(sub))
            .arg(dir.path())
            .status()
            .expect("cp");
        assert!(status.success(), "copying {sub}");
    }
    dir
}

/// Runs one example line with `sh` in `dir`, `rondo` being the binary under test (and
/// `cargo run --release --` the same command, as the README's set-up spells it).
pub fn run_example(dir: &Path, line: &str) -> std::process::Output {
    let line = line.replace("cargo run --release -- ", "rondo ");
    let bin = Path::new(env!("CARGO_BIN_EXE_rondo"))
        .parent()
        .expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(&line).current_dir(dir).env("PATH", path);
    for var in KEY_VARS {
        cmd.env_remove(var);
    }
    cmd.output().expect("sh")
}

pub fn assert_example_ran(line: &str, output: &std::process::Output) {
    assert!(
        output.status.success(),
        "`{line}` exited {:?}:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The commands of `rondo COMMAND --help`'s examples: one a line, or several lines joined
/// by a trailing `\` as a shell joins them.
pub fn help_examples(command: &str) -> Vec<String> {
    let help = rondo(&[command, "--help"]);
    let text = String::from_utf8_lossy(&help.stdout).into_owned();
    let mut examples: Vec<String> = Vec::new();
    let mut continued = false;
    for line in text
        .split("Examples:\n")
        .nth(1)
        .expect("an Examples section")
        .lines()
        .take_while(|l| !l.trim().is_empty())
    {
        // Longer lines would wrap on an 80-column terminal, and a wrapped line is no command.
        assert!(line.len() <= 80, "`{line}` is longer than 80 columns");
        match examples.last_mut() {
            Some(last) if continued => last.push_str(line.trim()),
            _ => examples.push(line.trim().to_string()),
        }
        continued = line.ends_with('\\');
        if let Some(last) = examples.last_mut() {
            *last = last.trim_end_matches('\\').to_string();
        }
    }
    examples
}

/// Runs a reference workflow's demo, `rondo run -q --provider scripted [ARGS] WORKFLOW`, in a
/// copy of the repository, with no API key in its environment and a demo value for every
/// input that has no default.
pub fn run_demo(path: &Path, args: &[&str]) -> (tempfile::TempDir, std::process::Output) {
    let (_, workflow, _, _) = check_path(path, true);
    let dir = repo_copy();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(dir.path())
        .args(["run", "-q", "--provider", "scripted"])
        .args(args)
        .arg(path);
    for var in KEY_VARS {
        cmd.env_remove(var);
    }
    for input in workflow
        .inputs
        .iter()
        .filter(|i| i.default.is_none() && !i.ty.is_optional())
    {
        cmd.arg("--input")
            .arg(format!("{}=a demo question", input.name));
    }
    let out = cmd.output().expect("run the demo");
    (dir, out)
}

/// Polls `ready` every 20 ms until it holds; a guard against a hang (60 s), not a timing
/// check: `what` says what never happened.
pub fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
