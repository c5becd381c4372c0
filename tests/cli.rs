//! The real `rondo` binary: exit codes, output formats, and help.

mod common;

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

const CLEAN: &str = "workflows/iter.rondo";
const ERRORS: &str = "tests/fixtures/check/route/unknown_target.rondo";
const WARNING: &str = "tests/fixtures/check/graph/exit_never_reached.rondo";
const MISSING_KEY: &str = "tests/fixtures/check/env/missing_key.rondo";
const KEY_VAR: &str = "RONDO_TEST_SURELY_UNSET_KEY";

fn rondo() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove(KEY_VAR)
        .env("NO_COLOR", "1");
    cmd
}

/// The same, as a std command (for its own standard streams).
fn std_rondo() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove(KEY_VAR)
        .env("NO_COLOR", "1");
    cmd
}

fn run(args: &[&str]) -> Output {
    rondo().args(args).output().expect("run rondo")
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

// ---------- check: exit codes ----------

#[test]
fn check_clean_file_exits_0_with_a_summary() {
    rondo()
        .args(["check", "--offline", CLEAN])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with(format!("√ {CLEAN}: ")))
        .stdout(predicate::str::contains("LLM calls per run"))
        .stderr(predicate::str::is_empty());
}

#[test]
fn check_with_errors_exits_1_and_renders_them() {
    rondo()
        .args(["check", "--offline", ERRORS])
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("rondo::route::unknown_target"))
        .stderr(predicate::str::contains(format!("{ERRORS}:8:9")))
        .stderr(predicate::str::contains(format!(
            "x {ERRORS}: 1 error(s), 0 warning(s)"
        )))
        // Not a terminal: no colour codes.
        .stderr(predicate::str::contains("\u{1b}[").not());
}

#[test]
fn check_stderr_is_the_library_rendering() {
    let output = run(&["check", ERRORS]);
    let (file, _, diags, _) = common::check_path(Path::new(ERRORS), false);
    let rendered = rondo::diagnostics::render_human(&file, &diags.sorted(), false, 100);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&rendered),
        "stderr:\n{stderr}\nlibrary:\n{rendered}"
    );
}

#[test]
fn unreadable_file_exits_2() {
    rondo()
        .args(["check", "tests/fixtures/check/no_such_file.rondo"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "error: cannot read tests/fixtures/check/no_such_file.rondo",
        ));
    // A folder is not a readable file either.
    rondo().args(["check", "tests/fixtures"]).assert().code(2);
}

#[test]
fn worst_exit_code_wins_and_every_file_is_checked() {
    let output = run(&["check", "--offline", ERRORS, "no_such_file.rondo", CLEAN]);
    assert_eq!(output.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains(&format!("√ {CLEAN}")), "{stdout}");
    assert!(stderr.contains(&format!("x {ERRORS}")), "{stderr}");
    assert!(
        stderr.contains("cannot read no_such_file.rondo"),
        "{stderr}"
    );
    assert_eq!(
        run(&["check", "--offline", CLEAN, ERRORS]).status.code(),
        Some(1)
    );
}

#[test]
fn warnings_pass_unless_denied() {
    rondo()
        .args(["check", "--offline", WARNING])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with(format!("~ {WARNING}: ")))
        .stderr(predicate::str::contains("rondo::graph::exit_never_reached"));
    rondo()
        .args(["check", "--offline", "--deny-warnings", WARNING])
        .assert()
        .code(1);
    // A clean file stays clean with --deny-warnings.
    rondo()
        .args(["check", "--offline", "--deny-warnings", CLEAN])
        .assert()
        .code(0);
}

/// A key that is not set is a warning of the environment tier: the file is sound, so
/// `check` passes unless warnings are denied; `run` still refuses to start.
#[test]
fn a_missing_key_is_a_warning_of_check_and_an_error_of_run() {
    rondo()
        .args(["check", MISSING_KEY])
        .assert()
        .code(0)
        .stdout(predicate::str::starts_with(format!("~ {MISSING_KEY}: ")))
        .stderr(predicate::str::contains("rondo::env::missing_key"))
        .stderr(predicate::str::contains("⚠"));
    rondo()
        .args(["check", "--deny-warnings", MISSING_KEY])
        .assert()
        .code(1);
    let json = json_of(&run(&["check", "--format", "json", MISSING_KEY]));
    assert_eq!(json[0]["ok"], true);
    assert_eq!(json[0]["warnings"], 1);
    assert_eq!(json[0]["diagnostics"][0]["severity"], "warning");
    rondo()
        .args(["check", "--offline", "--deny-warnings", MISSING_KEY])
        .assert()
        .code(0);
    // With the variable set, the environment tier passes.
    rondo()
        .env(KEY_VAR, "sk-test")
        .args(["check", "--deny-warnings", MISSING_KEY])
        .assert()
        .code(0);
    let runs = tempfile::tempdir().expect("tempdir");
    rondo()
        .args([
            "run",
            "-q",
            MISSING_KEY,
            "--input",
            "question=hi",
            "--run-dir",
        ])
        .arg(runs.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains(KEY_VAR));
}

/// Every example of `rondo check --help` runs as written, from the project root, with no
/// API key set.
#[test]
fn check_help_examples_work_as_written() {
    let help = run(&["check", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("`rondo run` will not start without the key"),
        "{help}"
    );
    let examples: Vec<&str> = help
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("rondo check "))
        .map(|l| l.split(" #").next().unwrap_or(l).trim())
        .collect();
    assert!(examples.len() >= 4, "{help}");
    assert!(examples.iter().any(|e| e.contains("--deny-warnings")));
    for example in examples {
        let mut args: Vec<String> = Vec::new();
        for word in example.split_whitespace().skip(1) {
            match word.strip_suffix("*.rondo") {
                // The shell's glob, in the project root.
                Some(dir) => args.extend(
                    common::files_with_ext(&common::root().join(dir), "rondo")
                        .iter()
                        .map(|p| common::rel(p).display().to_string()),
                ),
                None => args.push(word.to_string()),
            }
        }
        let mut cmd = rondo();
        for var in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"] {
            cmd.env_remove(var);
        }
        cmd.args(&args).assert().code(0);
    }
}

#[test]
fn check_needs_a_file() {
    rondo().args(["check"]).assert().code(2);
}

// ---------- check --format json ----------

#[test]
fn json_output_shape() {
    let output = run(&["check", "--format", "json", "--offline", ERRORS, CLEAN]);
    assert_eq!(output.status.code(), Some(1));
    let v = json_of(&output);
    let files = v.as_array().expect("an array, one entry per file");
    assert_eq!(files.len(), 2);
    for entry in files {
        assert_eq!(
            keys(entry),
            ["file", "ok", "errors", "warnings", "diagnostics", "summary"]
        );
        let summary = &entry["summary"];
        for key in [
            "roles",
            "llm_roles",
            "tool_roles",
            "builtin_roles",
            "routes",
            "exits",
            "worst_case_llm_calls",
            "max_visits",
        ] {
            assert!(summary.get(key).is_some(), "summary lacks {key}: {summary}");
        }
    }
    let bad = &files[0];
    assert_eq!(bad["file"], ERRORS);
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["errors"], 1);
    assert_eq!(bad["warnings"], 0);
    let diags = bad["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diags.len(), 1);
    let d = &diags[0];
    assert_eq!(
        keys(d),
        [
            "file", "severity", "code", "message", "line", "column", "labels", "help"
        ]
    );
    assert_eq!(d["file"], ERRORS);
    assert_eq!(d["severity"], "error");
    assert_eq!(d["code"], "rondo::route::unknown_target");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(8), Some(9))
    );
    assert_eq!(d["help"], "did you mean `success`?");
    let label = &d["labels"][0];
    assert_eq!(
        keys(label),
        [
            "text",
            "line",
            "column",
            "end_line",
            "end_column",
            "offset",
            "length"
        ]
    );
    assert_eq!(label["length"], "sucess".len());

    let good = &files[1];
    assert_eq!(good["file"], CLEAN);
    assert_eq!(good["ok"], true);
    assert_eq!(good["diagnostics"], Value::Array(vec![]));
    assert!(
        good["summary"]["worst_case_llm_calls"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    // Nothing but the JSON on stdout, nothing on stderr.
    assert!(output.stderr.is_empty());
}

#[test]
fn json_ok_follows_deny_warnings() {
    let plain = json_of(&run(&["check", "--format", "json", "--offline", WARNING]));
    assert_eq!(plain[0]["ok"], true);
    assert_eq!(plain[0]["warnings"], 1);
    assert_eq!(plain[0]["diagnostics"][0]["severity"], "warning");
    let output = run(&[
        "check",
        "--format",
        "json",
        "--offline",
        "--deny-warnings",
        WARNING,
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(json_of(&output)[0]["ok"], false);
}

#[test]
fn json_with_an_unreadable_file_is_still_json() {
    let output = run(&["check", "--format", "json", "no_such_file.rondo", CLEAN]);
    assert_eq!(output.status.code(), Some(2));
    let v = json_of(&output);
    assert_eq!(v.as_array().map(Vec::len), Some(1));
}

#[test]
fn json_summary_is_unbounded_as_null() {
    // `worst_case_llm_calls` is a number or null; never a string.
    let v = json_of(&run(&["check", "--format", "json", "--offline", CLEAN]));
    let calls = &v[0]["summary"]["worst_case_llm_calls"];
    assert!(calls.is_u64() || calls.is_null(), "{calls}");
}

// ---------- graph ----------

#[test]
fn graph_dot_and_mermaid_match_the_library() {
    let (_, workflow, _, _) = common::check_path(Path::new(CLEAN), true);
    for (flag, format, head) in [
        ("dot", rondo::render::Format::Dot, "digraph \""),
        ("mermaid", rondo::render::Format::Mermaid, "flowchart TD\n"),
    ] {
        let output = run(&["graph", CLEAN, "--format", flag]);
        assert_eq!(output.status.code(), Some(0), "{flag}");
        let stdout = String::from_utf8(output.stdout).expect("utf-8");
        assert!(stdout.starts_with(head), "{flag}: {stdout}");
        assert_eq!(
            stdout,
            rondo::render::render(&workflow, format).expect("render")
        );
    }
    // DOT is the default.
    let output = run(&["graph", CLEAN]);
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("digraph"));
}

#[test]
fn graph_writes_to_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("iter.mmd");
    rondo()
        .args(["graph", CLEAN, "--format", "mermaid", "-o"])
        .arg(&out)
        .assert()
        .code(0)
        .stdout(predicate::str::is_empty());
    let text = std::fs::read_to_string(&out).expect("written");
    assert!(text.starts_with("flowchart TD"));
}

#[test]
fn graph_refuses_a_broken_workflow() {
    rondo()
        .args(["graph", ERRORS])
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("rondo::route::unknown_target"))
        .stderr(predicate::str::contains("fix the errors above first"));
    rondo()
        .args(["graph", "no_such_file.rondo"])
        .assert()
        .code(2);
}

#[test]
fn graph_rejects_an_unknown_format() {
    rondo()
        .args(["graph", CLEAN, "--format", "png"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid value"));
}

// ---------- dump ----------

#[test]
fn dump_prints_the_compiled_workflow_as_json() {
    let output = run(&["dump", CLEAN, "--format", "json"]);
    assert_eq!(output.status.code(), Some(0));
    let v = json_of(&output);
    assert_eq!(v["name"], "iter");
    let routes = v["routes"].as_array().expect("routes");
    let (_, workflow, _, _) = common::check_path(Path::new(CLEAN), true);
    assert_eq!(routes.len(), workflow.routes.len());
    assert_eq!(
        v["graph"]["nodes"].as_array().map(Vec::len),
        Some(workflow.graph.node_count())
    );
    assert_eq!(v["source_hash"].as_str().map(str::len), Some(64));
    // JSON is the default format.
    assert_eq!(run(&["dump", CLEAN]).stdout, output.stdout);
    rondo().args(["dump", ERRORS]).assert().code(1);
}

// ---------- help ----------

#[test]
fn help_has_examples() {
    rondo()
        .arg("--help")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("Examples:"))
        .stdout(predicate::str::contains("rondo check workflows/"));
    for (sub, example) in [
        ("check", "rondo check --format json"),
        ("graph", "rondo graph workflows/"),
        ("dump", "rondo dump workflows/"),
    ] {
        rondo()
            .args([sub, "--help"])
            .assert()
            .code(0)
            .stdout(predicate::str::contains("Example"))
            .stdout(predicate::str::contains(example));
    }
    rondo()
        .args(["check", "--help"])
        .assert()
        .stdout(predicate::str::contains(
            "Exit code: 0 clean or warnings only, 1 errors",
        ));
}

// ---------- robustness ----------

/// A condition nested 3,000 parentheses deep: the parser must report it, not overflow
/// the stack (the process aborts with SIGABRT today).
#[test]
fn deeply_nested_expression_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("deep.rondo");
    let depth = 3000;
    let text = format!(
        "workflow w {{}}\nrole r: tool {{\n  command = [\"true\"]\n}}\nstart -> r\nr -> success when {}r.ok{}\nr -> success otherwise\nexit success\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    std::fs::write(&path, text).expect("write");
    let output = rondo().arg("check").arg(&path).output().expect("run");
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "rondo check crashed: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Input: a route `a -> success when exists("done.txt")   // finished` — the DOT label
/// must be the condition, not the condition plus the comment and the lines after it.
#[test]
fn graph_labels_hold_only_the_condition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.rondo");
    std::fs::write(
        &path,
        "workflow w {}\nrole a: tool {\n  command = [\"true\"]\n}\nstart -> a\na -> success when exists(\"done.txt\")   // finished\n\n// fallback\na -> failed otherwise\nexit success\nexit failed\n",
    )
    .expect("write");
    let output = rondo().arg("graph").arg(&path).output().expect("run");
    let dot = String::from_utf8_lossy(&output.stdout);
    assert!(
        dot.contains("[label=\"exists(\\\"done.txt\\\")\"]"),
        "{dot}"
    );
    let output = rondo()
        .args(["graph", "--format", "mermaid"])
        .arg(&path)
        .output()
        .expect("run");
    let mermaid = String::from_utf8_lossy(&output.stdout);
    assert!(!mermaid.contains("finished"), "{mermaid}");
}

// ---------- closed pipes ----------

/// `rondo runs | head`, `rondo check --format json ... | head -1`: the reader of standard
/// output is gone (here before the process starts, so every write fails). The process
/// ends quietly, by SIGPIPE as any Unix tool would (status 141 in a shell), not with a
/// panic.
#[test]
fn a_closed_stdout_ends_the_process_by_sigpipe_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let runs = tempfile::tempdir().expect("tempdir");
    let runs = runs.path().to_str().expect("utf-8 path");
    let commands: [&[&str]; 5] = [
        &["runs", "--run-dir", runs],
        &["check", "--format", "json", "--offline", CLEAN, ERRORS],
        &["check", "--offline", CLEAN],
        &["graph", CLEAN],
        &["dump", CLEAN],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let output = std_rondo()
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run rondo");
        assert_eq!(
            output.status.signal(),
            Some(libc::SIGPIPE),
            "rondo {args:?}: {:?}",
            output.status
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "rondo {args:?}: {stderr}");
    }
}

/// Diagnostics go to standard error: `rondo check ... 2>&1 | head -1` closes that too.
#[test]
fn a_closed_stderr_ends_check_by_sigpipe() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let status = std_rondo()
        .args(["check", "--offline", ERRORS])
        .stderr(writer)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run rondo");
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}");
}

/// A full disk is not a closed pipe: the output is lost, and the exit code says so.
#[test]
fn output_that_cannot_be_written_is_an_error() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let output = std_rondo()
        .args(["graph", CLEAN])
        .stdout(full)
        .output()
        .expect("run rondo");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot write the output"));
}

// ---------- the examples of `rondo run --help` and the README, run as written ----------

/// Every line of `rondo run --help`'s examples, in order, in one copy of the repository:
/// the replay example replays the run the first one made.
#[test]
fn run_help_examples_work_as_written() {
    let examples = common::help_examples("run");
    assert!(examples.len() >= 3, "{examples:?}");
    let dir = common::repo_copy();
    for line in &examples {
        assert!(line.starts_with("rondo run "), "{line}");
        let output = common::run_example(dir.path(), line);
        common::assert_example_ran(line, &output);
    }
}

/// Every `rondo run` command of the README's shell blocks, each in a fresh copy.
#[test]
fn readme_run_examples_work_as_written() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let mut in_shell = false;
    let mut ran = 0;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_shell = line == "```bash";
            continue;
        }
        if !in_shell
            || !(line.contains("rondo run ") || line.contains("cargo run --release -- run "))
        {
            continue;
        }
        let dir = common::repo_copy();
        let output = common::run_example(dir.path(), line);
        common::assert_example_ran(line, &output);
        ran += 1;
    }
    assert!(ran >= 3, "the README's run examples were not found");
}

/// Each reference workflow runs to its success exit with `--provider scripted` and only its
/// required inputs: its header's default reply set is its demo, and no key is needed.
#[test]
fn every_reference_workflow_runs_its_demo_with_the_scripted_provider() {
    for path in common::workflow_files() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "llm_ide" && !common::docker_ready() {
            eprintln!("skipping llm_ide: Docker or rondo-test-base:latest is missing");
            continue;
        }
        if name == "iter" && !common::go_ready() {
            eprintln!("skipping iter: its default build command needs Go");
            continue;
        }
        let (_, workflow, diags, _) = common::check_path(&path, true);
        assert!(!diags.has_errors(), "{name} does not check");
        assert!(
            workflow.script.is_some(),
            "{name} declares no default reply set"
        );
        let (_dir, output) = common::run_demo(&path, &[]);
        assert!(
            output.status.success(),
            "{name}: exit {:?}\n{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// What bash completes after `words` (the last one being typed), with the script sourced.
fn bash_completes(script: &str, words: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rondo.bash");
    std::fs::write(&path, script).expect("write the script");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let probe = format!(
        "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n_rondo rondo '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        quoted.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        words[words.len().saturating_sub(2)],
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "-c", &probe])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn completions_complete_subcommands_and_flags() {
    let out = run(&["completions", "bash"]);
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout).into_owned();
    let subcommands = bash_completes(&script, &["rondo", ""]);
    for sub in ["check", "run", "resume", "test", "completions"] {
        assert!(
            subcommands.iter().any(|s| s == sub),
            "{sub} in {subcommands:?}"
        );
    }
    assert_eq!(
        bash_completes(&script, &["rondo", "run", "--prov"]),
        ["--provider"]
    );
    let shells = bash_completes(&script, &["rondo", "completions", ""]);
    assert_eq!(shells, ["-h", "--help", "bash", "zsh", "fish"]);

    let zsh = run(&["completions", "zsh"]);
    let zsh = String::from_utf8_lossy(&zsh.stdout);
    assert!(zsh.starts_with("#compdef rondo"), "{zsh}");
    assert!(zsh.contains("--replay-from"));
    let fish = run(&["completions", "fish"]);
    let fish = String::from_utf8_lossy(&fish.stdout);
    assert!(
        fish.contains("complete -c rondo") && fish.contains("replay-from"),
        "{fish}"
    );
    let bad = run(&["completions", "powershell-ish"]);
    assert_eq!(bad.status.code(), Some(2));
}
