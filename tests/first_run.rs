//! A newcomer's first hour (issue 22): what the README's commands print, followed as a user
//! follows them — run a command, then act on what it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

use common::stderr;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The path a line of standard error names after `label` (`workspace: PATH (a, b)`).
fn printed_path(text: &str, label: &str) -> PathBuf {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{text}"));
    PathBuf::from(line.split(" (").next().unwrap_or(line).trim())
}

/// The README's set-up command that runs a real workflow.
fn readme_run_command() -> String {
    let readme = std::fs::read_to_string(common::root().join("README.md")).expect("README.md");
    readme
        .lines()
        .find(|l| l.starts_with("cargo run --release -- run "))
        .expect("the README's run command")
        .to_string()
}

// ---------- a run prints its answer and where its files are ----------

/// The README's run command, as written: the answer is on standard output (the finalyzer's
/// text, also in `final_answer.md`), and standard error says where the files are, so the
/// user finds `hello.txt` by following it.
#[test]
fn the_readme_run_prints_its_answer_and_where_its_files_are() {
    let dir = common::repo_copy();
    let line = readme_run_command();
    let out = common::run_example(dir.path(), &line);
    common::assert_example_ran(&line, &out);
    assert_eq!(stdout(&out), "Created hello.txt in the run directory.\n");
    let err = stderr(&out);
    let workspace = printed_path(&err, "workspace: ");
    let workspace = dir.path().join(workspace);
    assert_eq!(
        std::fs::read_to_string(workspace.join("hello.txt")).expect("hello.txt where it said"),
        "hello"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("final_answer.md")).unwrap(),
        stdout(&out).trim_end()
    );
    let line = err.lines().find(|l| l.starts_with("workspace: ")).unwrap();
    assert!(
        line.contains("final_answer.md") && line.contains("hello.txt"),
        "{line}"
    );
    let run_dir = dir.path().join(printed_path(&err, "run directory: "));
    assert!(run_dir.join("run.json").is_file(), "{err}");
}

/// `-q`: a run that succeeds prints its answer and nothing else, so `> answer.txt` keeps
/// exactly the answer (micro-agent's `answer = memory.answer`).
#[test]
fn a_quiet_run_prints_only_its_answer() {
    let dir = common::repo_copy();
    let out = common::run_example(
        dir.path(),
        "rondo run -q workflows/micro_agent.rondo --provider scripted -i question='What is 2*(3+4)?' > answer.txt",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("answer.txt")).unwrap(),
        "14\n"
    );
}

/// Without `answer`, the answer is the last output of a role that has one: CatMaster's
/// `finally` role (a builtin, run after the exit) has none, so its summarizer answers.
#[test]
fn the_last_output_is_the_answer_past_a_finally_role() {
    let dir = common::repo_copy();
    let out = common::run_example(
        dir.path(),
        "rondo run -q workflows/catmaster.rondo --provider scripted -i request='Build CO'",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = &common::events(&latest_run(&dir.path().join("runs")))
        .into_iter()
        .rfind(|e| e["event"] == "llm_response" && e["role"] == "summarizer")
        .expect("the summarizer ran")["raw"];
    assert_eq!(
        stdout(&out).trim_end(),
        summary.as_str().unwrap().trim_end()
    );
    assert!(!stdout(&out).trim().is_empty());
}

fn latest_run(runs: &Path) -> PathBuf {
    let mut all: Vec<PathBuf> = std::fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    all.pop().expect("a run")
}

/// A waiting tool: it marks that it started, waits (at most a minute) for `go` in the
/// workspace, then prints the answer.
const WAITING: &str = r#"
workflow waiting {
  answer = say.stdout
}
role say: tool {
  env = local
  command = ["sh", "-c", "touch started; i=0; while [ ! -f go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo the answer"]
}
start -> say
say -> done
exit done
"#;

/// An engine exit is no answer: a run interrupted by Ctrl-C prints nothing on standard
/// output and says where it is; `rondo resume` of it, once it ends, prints the answer.
#[test]
fn an_interrupted_run_prints_no_answer_and_its_resume_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.rondo"), WAITING).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .args(["run", "w.rondo", "--run-id", "r"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = dir.path().join("runs/r/workspace/started");
    for _ in 0..1200 {
        if started.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(started.exists(), "the tool never started");
    // SAFETY: signalling a child this test started and has not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    let run_dir = dir.path().join(printed_path(&err, "run directory: "));

    // The user does what the tool waits for, then resumes the run it named.
    std::fs::write(printed_path(&err, "workspace: ").join("go"), "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .args(["resume", "-q"])
        .arg(&run_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "the answer\n");
    assert_eq!(stderr(&out), "");
}

/// A run that ends at `limit` prints no answer (not the output of the last role that ran);
/// `-q` says why and where on standard error.
#[test]
fn a_run_at_a_limit_prints_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.rondo"),
        r#"
workflow short {
  limits { max_steps = 1 }
}
role a: tool {
  env = local
  command = ["echo", "first"]
}
role b: tool {
  env = local
  command = ["echo", "second"]
}
start -> a
a -> b
b -> done
exit done
"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .args(["run", "-q", "w.rondo"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert!(err.starts_with("exit `limit`: "), "{err}");
    assert!(
        dir.path()
            .join(printed_path(&err, "run directory: "))
            .join("run.json")
            .is_file(),
        "{err}"
    );
}

// ---------- `rondo check` without API keys ----------

/// `rondo check workflows/*.rondo` on a machine without keys: each missing variable is
/// named once, followed by the providers that need it, each at its file, line and column,
/// and what a run does without it; then one help line. The user can open each place it
/// names and find the provider there.
#[test]
fn check_without_keys_names_each_missing_variable_once() {
    let dir = common::repo_copy();
    let out = common::run_example(dir.path(), "NO_COLOR=1 rondo check workflows/*.rondo");
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("OPENAI_API_KEY").count(), 1, "{err}");
    assert_eq!(err.matches("ANTHROPIC_API_KEY").count(), 1, "{err}");
    assert_eq!(err.matches("help:").count(), 1, "{err}");
    assert!(err.lines().count() <= 15, "{err}");
    assert!(
        err.starts_with("⚠ 2 environment variables are not set (rondo::env::missing_key)\n"),
        "{err}"
    );
    // Every place named is the provider's declaration, and its line says what happens.
    let mut places = 0;
    for line in err.lines().filter(|l| l.starts_with("    workflows/")) {
        let (at, said) = line.trim().split_once("  ").unwrap();
        let said = said.trim();
        let provider = said
            .strip_prefix("provider `")
            .and_then(|s| s.split_once('`'))
            .map(|(name, _)| name)
            .unwrap_or_else(|| panic!("{line}"));
        let mut parts = at.split(':');
        let (file, number) = (parts.next().unwrap(), parts.next().unwrap());
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        let declared = text
            .lines()
            .nth(number.parse::<usize>().unwrap() - 1)
            .unwrap();
        assert_eq!(declared, format!("provider {provider} {{"), "{line}");
        assert!(
            said.ends_with("`rondo run` will not start without it")
                || said.contains("without it, its calls go to `"),
            "{line}"
        );
        places += 1;
    }
    assert_eq!(places, 6, "{err}");
    // Standard output still has one line a file.
    assert_eq!(stdout(&out).lines().count(), 5, "{}", stdout(&out));
}

// ---------- `rondo swebench` says why ----------

/// `rondo swebench` with an image the engine does not have (or no engine at all): the run
/// ends at `error`, and the command prints why, as results.jsonl records it, with the run to
/// replay; replaying it shows the same reason.
#[test]
fn swebench_prints_why_an_instance_failed() {
    let dir = common::repo_copy();
    let fixtures = dir.path().join("tests/fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    let status = Command::new("cp")
        .arg("-R")
        .arg(common::root().join("tests/fixtures/swebench"))
        .arg(&fixtures)
        .status()
        .unwrap();
    assert!(status.success());
    let dataset = fixtures.join("swebench/instances.jsonl");
    let text = std::fs::read_to_string(&dataset).unwrap().replace(
        "\"split\":",
        "\"image\": \"rondo-surely-missing-image:latest\", \"split\":",
    );
    std::fs::write(&dataset, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .args([
            "swebench",
            "tests/fixtures/swebench/instances.jsonl",
            "--provider",
            "scripted",
            "--script",
            "tests/fixtures/swebench/fix.yaml",
            "-i",
            "calc-add",
            "--out",
            "swe",
            "-q",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let result: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("swe/results.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(result["exit"], "error", "{result:#}");
    let reason = result["reason"].as_str().unwrap();
    let reason = reason.lines().next().unwrap();
    let printed = stdout(&out);
    assert!(
        printed.contains(&format!("calc-add: exit `error`: {reason}")),
        "{printed}"
    );
    let run = printed
        .lines()
        .find_map(|l| l.strip_prefix("calc-add: its run: rondo replay "))
        .unwrap_or_else(|| panic!("no run to replay in:\n{printed}"));
    let replay = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .args(["replay", run])
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", stderr(&replay));
    assert!(stdout(&replay).contains(reason), "{}", stdout(&replay));
}

// ---------- `rondo replay` of native tool calls ----------

const NATIVE: &str = r#"
workflow native {
  prompts = "prompts"
  provider = mock
  input question: string = "How slow?"
  answer = agent.text
}
provider mock { kind = "scripted" }
memory {
  chat: conversation { max_messages = 20 }
}
tool slow {
  executable = "sh ./slow.sh"
  usage = "slow: sleeps, then says so"
  input { n: int }
}
tool broken {
  executable = "sh ./broken.sh"
  usage = "broken: fails"
  input { }
}
role begin: builtin {
  max_visits = 1
  update { chat.user("Question: " + input.question) }
}
role agent: llm {
  system = "system.tera"
  conversation = chat
  mode = native
  tools = [slow, broken]
  max_visits = 2
}
role run_tools: tool {
  tools = [slow, broken]
  calls = agent.calls
  conversation = chat
  max_visits = 1
}
start -> begin
begin -> agent
agent -> run_tools when len(agent.calls) > 0
agent -> answered otherwise
run_tools -> agent
exit answered
"#;

/// `rondo replay` of a run whose model called tools natively: the llm step says it sent
/// its conversation (it has no prompt of its own) and lists the calls of the reply; the
/// tool step shows each call (tool, arguments, how it ended, what went back to the model)
/// and how long the step took, not an empty prompt and `tool → (exit null, 0.00s)`.
#[test]
fn replay_shows_what_a_native_tool_step_did() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("prompts")).unwrap();
    std::fs::write(root.join("prompts/system.tera"), "Use the tools.\n").unwrap();
    std::fs::write(
        root.join("slow.sh"),
        "sleep 0.3\necho '{\"slept\": true}'\n",
    )
    .unwrap();
    std::fs::write(root.join("broken.sh"), "echo broken >&2\nexit 3\n").unwrap();
    std::fs::write(root.join("w.rondo"), NATIVE).unwrap();
    std::fs::write(
        root.join("script.yaml"),
        "replies:\n  agent:\n    - '{\"tool_calls\": [{\"name\": \"slow\", \"arguments\": {\"n\": 1}}, {\"name\": \"broken\", \"arguments\": {}}, {\"name\": \"slow\", \"arguments\": {\"n\": \"one\"}}]}'\n    - Done.\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(root)
        .args([
            "run",
            "-q",
            "w.rondo",
            "--script",
            "script.yaml",
            "--run-id",
            "n",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Done.\n");

    let replay = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(root)
        .args(["replay", "runs/n"])
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", stderr(&replay));
    let text = stdout(&replay);
    assert!(!text.contains("exit null"), "{text}");
    assert!(
        text.contains("  sent (scripted via mock): its conversation, with no prompt of its own\n"),
        "{text}"
    );
    assert!(
        text.contains(
            " tokens), 3 tool calls:\n      slow {\"n\":1}\n      broken {}\n      slow {\"n\":\"one\"}\n"
        ),
        "{text}"
    );
    let step = text
        .split("\nstep ")
        .find(|s| s.contains("· run_tools (tool)"))
        .unwrap_or_else(|| panic!("no tool step in:\n{text}"));
    let took = step
        .split("ran the reply's 3 tool calls at once in ")
        .nth(1)
        .and_then(|rest| rest.split("s:\n").next())
        .unwrap_or_else(|| panic!("{step}"));
    // The step includes the 0.3 s the tool slept.
    assert!(took.parse::<f64>().unwrap() >= 0.3, "{step}");
    assert!(
        step.contains("    slow {\"n\":1} → ok\n        {\"slept\":true}\n"),
        "{step}"
    );
    assert!(
        step.contains("    broken {} → failed (exit)\n        exit code 3\n"),
        "{step}"
    );
    assert!(
        step.contains("    slow {\"n\":\"one\"} → not run (validation)\n        invalid arguments for `slow`: $.n: expected an integer, found \"one\"\n"),
        "{step}"
    );
}

// ---------- the DS-STAR demo ----------

/// The README's DS-STAR demo, where no `data` folder exists: the missing folder is said
/// once (in the analyzer's one-line result), not twice in a 15-line JSON dump; the
/// prompts are still told (descriptions.json).
#[test]
fn the_ds_star_demo_runs_clean() {
    let dir = common::repo_copy();
    let line = readme_run_command();
    let out = common::run_example(dir.path(), &line);
    common::assert_example_ran(&line, &out);
    let err = stderr(&out);
    assert!(!err.contains("does not exist"), "{err}");
    assert!(!err.to_lowercase().contains("warning"), "{err}");
    // The analyzer's result record is data for the prompts, not a line for the terminal.
    assert!(!err.contains("analyzer| "), "{err}");
    let workspace = dir.path().join(printed_path(&err, "workspace: "));
    let descriptions = common::json(workspace.join("descriptions.json"));
    assert_eq!(descriptions["files"], serde_json::json!({}));
    assert_eq!(descriptions["warnings"].as_array().unwrap().len(), 1);
}

/// A tool's progress lines reach the terminal as they come; its result record does not.
#[test]
fn a_tools_progress_lines_are_shown_and_its_result_record_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"print('step one done', flush=True)
import json, sys
print('half way', file=sys.stderr, flush=True)
print(json.dumps({"status": "success", "tool_name": "prog", "data": {"n": 7}, "warnings": [], "error": None}))
"#;
    std::fs::write(dir.path().join("prog.py"), script).unwrap();
    let workflow = r#"workflow progress {}
role work: tool {
  command = ["python3", "prog.py"]
}
start -> work
work -> done when work.ok
work -> failed otherwise
exit done
exit failed { code = 1 }
"#;
    std::fs::write(dir.path().join("w.rondo"), workflow).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .args(["run", "w.rondo", "--workspace", "."])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("work| step one done"), "{err}");
    assert!(err.contains("work| half way"), "{err}");
    assert!(!err.contains("tool_name"), "{err}");
}

// ---------- the README ----------

/// The README's tour calls `rondo` by name, so before its first `rondo` line it puts the
/// binary on the PATH (`cargo install --path .`, which installs this package's `rondo`), and
/// where it offers svg it says whether that needs Graphviz. The set-up keeps exactly two commands.
#[test]
fn the_readme_puts_rondo_on_the_path_before_the_tour_uses_it() {
    let readme = std::fs::read_to_string(common::root().join("README.md")).unwrap();
    let setup = readme
        .split("## Set-up")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Set-up section");
    let commands: Vec<&str> = shell_lines(setup).collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    let tour = readme
        .split("## A tour")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a tour");
    let lines: Vec<&str> = shell_lines(tour).collect();
    let install = lines
        .iter()
        .position(|l| l.starts_with("cargo install --path . "))
        .expect("`cargo install --path .` in the tour");
    let first_rondo = lines.iter().position(|l| l.starts_with("rondo ")).unwrap();
    assert!(install < first_rondo, "{lines:#?}");
    // `cargo install --path .` installs the binary the tour calls.
    let manifest = std::fs::read_to_string(common::root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains("name = \"rondo\""), "{manifest}");
    assert!(Path::new(env!("CARGO_BIN_EXE_rondo")).ends_with("rondo"));
    for line in lines.iter().filter(|l| l.contains("svg")) {
        assert!(line.contains("Graphviz"), "{line}");
    }
    // svg is drawn by rondo itself now (tests/graph_layout.rs draws it with no `dot` on
    // the PATH): the tour says so instead of sending the newcomer to install Graphviz.
    assert!(tour.contains("svg needs no Graphviz"), "{tour}");
}

/// The command lines of the ```bash blocks of a README section.
fn shell_lines(section: &str) -> impl Iterator<Item = &str> {
    let mut in_shell = false;
    section.lines().filter(move |line| {
        if line.starts_with("```") {
            in_shell = *line == "```bash";
            return false;
        }
        in_shell && !line.trim().is_empty()
    })
}

// ---------- docs/language.md: what a newcomer needs, run as written ----------

/// The fenced blocks of a section of a Markdown file: (the line before the block's opening
/// fence that is not blank, the fence's language, the block's text).
fn blocks(section: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut last = String::new();
    let mut current: Option<(String, String, String)> = None;
    for line in section.lines() {
        match &mut current {
            None if line.starts_with("```") => {
                current = Some((last.clone(), line[3..].to_string(), String::new()));
            }
            None => {
                if !line.trim().is_empty() {
                    last = line.to_string();
                }
            }
            Some(_) if line.starts_with("```") => {
                out.push(current.take().unwrap());
                last.clear();
            }
            Some((_, _, text)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    out
}

fn doc_section(doc: &str, title: &str) -> String {
    doc.split(&format!("\n{title}\n"))
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap_or_else(|| panic!("no section `{title}`"))
        .to_string()
}

/// docs/language.md's Templates example, written out as its files and run as it says: it
/// checks, its test passes, its command prints the answer, the prompts sent are the ones
/// shown (so `tools`, `role`, `item`, a text role's value and list and map inputs are what
/// the text says), and `tools` is the JSON shown. Then the claims around it: a text role
/// has no fields, replies reach map branches by visit (the Tests section's example), and
/// a list input that is not JSON is refused with the error quoted.
#[test]
fn the_language_reference_examples_for_newcomers_are_true() {
    let doc = std::fs::read_to_string(common::root().join("docs/language.md")).unwrap();
    let templates = doc_section(&doc, "## Templates");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("prompts")).unwrap();
    let found = blocks(&templates);
    let mut files = 0;
    for (before, _, text) in &found {
        if let Some(name) = before.strip_prefix('`').and_then(|b| b.strip_suffix("`:")) {
            std::fs::write(root.join(name), text).unwrap();
            files += 1;
        }
    }
    assert_eq!(files, 5, "{found:#?}");
    let ok = |out: &Output| assert!(out.status.success(), "{}{}", stdout(out), stderr(out));

    let check = common::run_example(root, "rondo check --offline review.rondo");
    ok(&check);
    let test = common::run_example(root, "rondo test review.rondo");
    ok(&test);
    assert!(
        stdout(&test).contains("1 passed, 0 failed"),
        "{}",
        stdout(&test)
    );

    let command = found
        .iter()
        .find(|(_, lang, _)| lang == "bash")
        .map(|(_, _, text)| text.trim().to_string())
        .unwrap();
    let run = common::run_example(root, &format!("{command} --run-id doc"));
    ok(&run);
    assert_eq!(stdout(&run), "One bug, in b.py.\n");
    assert!(templates.contains("prints `One bug, in b.py.`"));
    let events = common::events(&root.join("runs/doc"));
    let sent: Vec<String> = events
        .iter()
        .filter(|e| e["event"] == "llm_response")
        .map(|e| e["prompt"].as_str().unwrap().to_string())
        .collect();
    let shown: Vec<&String> = found
        .iter()
        .filter(|(_, lang, _)| lang == "text")
        .map(|(_, _, text)| text)
        .collect();
    assert_eq!(sent.len(), 4);
    assert_eq!(shown.len(), 4);
    for (sent, shown) in sent.iter().zip(&shown) {
        assert_eq!(sent, *shown);
    }
    let schemas = sent[0]
        .lines()
        .find_map(|l| l.strip_prefix("Their schemas: "))
        .unwrap();
    let tools: serde_json::Value = serde_json::from_str(schemas).unwrap();
    let (_, _, json) = found.iter().find(|(_, lang, _)| lang == "json").unwrap();
    assert_eq!(
        tools,
        serde_json::from_str::<serde_json::Value>(json).unwrap()
    );

    // A text role has no fields, as said, with the code and message quoted.
    let workflow = std::fs::read_to_string(root.join("review.rondo")).unwrap();
    std::fs::write(
        root.join("fields.rondo"),
        workflow.replace("= plan\n", "= plan.text\n"),
    )
    .unwrap();
    let fields = common::run_example(root, "NO_COLOR=1 rondo check --offline fields.rondo");
    assert_eq!(fields.status.code(), Some(1));
    assert!(
        templates.contains("`plan.text` is\n`rondo::expr::unknown_field`, \"the output of `plan` is string, which has no fields\""),
        "{templates}"
    );
    assert!(
        stderr(&fields).contains("rondo::expr::unknown_field"),
        "{}",
        stderr(&fields)
    );
    assert!(
        stderr(&fields).contains("the output of `plan` is string, which has no fields"),
        "{}",
        stderr(&fields)
    );

    // The Tests section's map example, added to the workflow, passes.
    let tests = doc_section(&doc, "## Tests");
    let (_, _, map_test) = blocks(&tests)
        .into_iter()
        .find(|(_, _, text)| text.contains("reply reviewer visit 3"))
        .expect("the map branches example");
    std::fs::write(root.join("review.rondo"), format!("{workflow}\n{map_test}")).unwrap();
    let test = common::run_example(root, "rondo test review.rondo");
    ok(&test);
    assert!(
        stdout(&test).contains("2 passed, 0 failed"),
        "{}",
        stdout(&test)
    );

    // Inputs on the command line: the errors quoted.
    let inputs = doc_section(&doc, "### Inputs on the command line");
    for (given, said) in [
        (
            "-i files=a.py",
            "error: input `files`: $: expected a list, found \"a.py\"",
        ),
        (
            "-i files='[\"a.py\"]' -i limits='{\"lines\": \"many\"}'",
            "error: input `limits`: $.lines: expected an integer, found \"many\"",
        ),
    ] {
        let out = common::run_example(
            root,
            &format!("rondo run review.rondo --provider scripted --script replies.yaml {given}"),
        );
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(stderr(&out).trim_end(), said);
        assert!(
            inputs
                .replace('\n', " ")
                .contains(&said.replace("error: ", "`error: ")),
            "{said} in {inputs}"
        );
    }
    // A string input takes the value as it is, quotes included.
    let dir = common::repo_copy();
    let quoted = common::run_example(
        dir.path(),
        "rondo run -q workflows/ds_star.rondo --run-id q -i question='\"Write hello.txt\"'",
    );
    ok(&quoted);
    let info = common::json(dir.path().join("runs/q/run.json"));
    assert_eq!(
        info["inputs"]["question"], "\"Write hello.txt\"",
        "{info:#}"
    );
}

/// A workflow without `answer` that ends on a tool role answers with what the role shows
/// (`show`), not the tool's whole result record: its output printed, or `PASS` for
/// `show = tail(N)`.
#[test]
fn a_tool_role_answers_with_what_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    let workflow = r#"
workflow tool_last {
}
role say: tool {
  env = local
  command = ["printf", "hello\nworld\n"]
}
start -> say
say -> done
exit done
"#;
    for (show, printed) in [("", "hello\nworld\n"), ("  show = tail(1)\n", "PASS\n")] {
        std::fs::write(
            dir.path().join("w.rondo"),
            workflow.replace("  env = local\n", &format!("  env = local\n{show}")),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
            .current_dir(dir.path())
            .args(["run", "-q", "w.rondo"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out), printed, "{show}");
    }
}
