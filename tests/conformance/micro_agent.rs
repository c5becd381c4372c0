//! `../shared/reference/micro-agent.md`, rule by rule, on real runs of
//! `workflows/micro_agent.rondo` by the `rondo` binary: the scripted provider answers for the
//! model (or a local server speaking Ollama's wire protocol), the tools are the workflow's
//! own Python scripts.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use super::common::{events, of_kind, stderr};

/// Variables of the guide's configuration, removed from every run unless a test sets them.
const CONFIG_VARS: &[&str] = &[
    "LLM_PROVIDER",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
    "OPENAI_BASE_URL",
    "OLLAMA_HOST",
    "OLLAMA_MODEL",
    "OPENAI_INPUT_PRICE_PER_1K",
    "OPENAI_OUTPUT_PRICE_PER_1K",
    "TRACES_DIR",
    "COMPILED_DEMOS_PATH",
    "TOOLS_MODULES",
];

fn workflow() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/micro_agent.rondo")
}

/// One `micro-agent ask`: a question, the model's replies in order, and the environment.
struct Ask<'a> {
    question: &'a str,
    replies: Vec<String>,
    env: Vec<(&'a str, String)>,
    args: Vec<String>,
}

/// What an ask left behind.
struct Asked {
    out: Output,
    /// The folder the ask ran in (`rondo`'s working directory).
    cwd: PathBuf,
    run_dir: PathBuf,
}

impl<'a> Ask<'a> {
    fn new(question: &'a str) -> Self {
        Ask {
            question,
            replies: Vec::new(),
            env: Vec::new(),
            args: vec!["--provider".into(), "scripted".into()],
        }
    }

    fn reply(mut self, text: &str) -> Self {
        self.replies.push(text.to_string());
        self
    }

    /// Runs it in `cwd` (created if missing).
    fn run_in(self, cwd: &Path) -> Asked {
        std::fs::create_dir_all(cwd).unwrap();
        let id = format!("ask-{}", std::fs::read_dir(cwd).unwrap().count());
        let runs = cwd.join("runs");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.current_dir(cwd)
            .env("NO_COLOR", "1")
            .args(["run", "-q"])
            .arg(workflow())
            .arg("--run-dir")
            .arg(&runs)
            .args(["--run-id", &id])
            .arg("--input")
            .arg(format!("question={}", self.question))
            .args(&self.args);
        for var in CONFIG_VARS {
            cmd.env_remove(var);
        }
        if !self.replies.is_empty() {
            let script = cwd.join(format!("{id}.yaml"));
            let replies: Vec<Value> = self.replies.iter().cloned().map(Value::String).collect();
            let yaml = serde_json::json!({ "replies": { "planner": replies } });
            // JSON is YAML.
            std::fs::write(&script, yaml.to_string()).unwrap();
            cmd.arg("--script").arg(&script);
        }
        for (name, value) in &self.env {
            cmd.env(name, value);
        }
        let out = cmd.output().unwrap();
        Asked {
            out,
            cwd: cwd.to_path_buf(),
            run_dir: runs.join(id),
        }
    }

    fn run(self) -> (tempfile::TempDir, Asked) {
        let tmp = tempfile::tempdir().unwrap();
        let asked = self.run_in(tmp.path());
        (tmp, asked)
    }
}

impl Asked {
    fn ok(self) -> Self {
        assert!(
            self.out.status.success(),
            "exit {:?}: {}",
            self.out.status.code(),
            stderr(&self.out)
        );
        self
    }

    fn events(&self) -> Vec<Value> {
        events(&self.run_dir)
    }

    /// The one trace record of this ask.
    fn record(&self) -> Value {
        let id = self.run_dir.file_name().unwrap().to_string_lossy();
        let found: Vec<PathBuf> = [
            self.cwd.join("traces"),
            self.run_dir.join("workspace/traces"),
        ]
        .iter()
        .map(|d| d.join(format!("{id}.jsonl")))
        .filter(|p| p.is_file())
        .collect();
        let path = found
            .first()
            .unwrap_or_else(|| panic!("no trace for {id}: {}", stderr(&self.out)));
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "one line per ask: {text}");
        serde_json::from_str(lines[0]).unwrap()
    }

    fn steps(&self) -> Vec<Value> {
        self.record()["steps"].as_array().unwrap().clone()
    }

    fn tools(&self) -> Vec<String> {
        self.steps()
            .iter()
            .map(|s| s["tool"].as_str().unwrap().to_string())
            .collect()
    }

    /// The prompts the planner was sent, in order.
    fn prompts(&self) -> Vec<String> {
        of_kind(&self.events(), "llm_response")
            .iter()
            .map(|e| e["prompt"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

fn calc(expression: &str) -> String {
    serde_json::json!({"tool": {"name": "calculator", "args": {"expression": expression}}})
        .to_string()
}

fn final_answer(answer: &str) -> String {
    serde_json::json!({"final": {"answer": answer}}).to_string()
}

// ---- "Tool args are validated against JSON Schema before execution; invalid inputs add a
// ⛔️validation_error step. The loop then requests a corrected call next iteration." --------

#[test]
fn an_extra_argument_is_a_validation_error_decided_before_the_tool_runs() {
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .reply(r#"{"tool": {"name": "calculator", "args": {"expression": "6*7", "precision": 2}}}"#)
        .reply(&calc("6*7"))
        .reply(&final_answer("42"))
        .run();
    let asked = asked.ok();
    let steps = asked.steps();
    assert_eq!(asked.tools(), ["⛔️validation_error", "calculator"]);
    let error = steps[0]["observation"]["error"].as_str().unwrap();
    assert!(error.contains("precision"), "{error}");
    // Rondo's own check decided it: the script never ran (no exit code).
    let calls = of_kind(&asked.events(), "tool_call");
    assert_eq!(calls[0]["result"]["error_kind"], "validation");
    assert!(calls[0]["result"]["exit_code"].is_null());
    assert_eq!(calls[1]["result"]["exit_code"], 0);
    // The corrected call is asked for with the error in view.
    assert!(asked.prompts()[1].contains("precision"));
    assert_eq!(asked.record()["answer"], "42");
}

#[test]
fn an_extra_argument_to_now_is_rejected_too() {
    let (_tmp, asked) = Ask::new("What time is it (UTC)?")
        .reply(r#"{"tool": {"name": "now", "args": {"timezone": "utc", "format": "iso"}}}"#)
        .reply(r#"{"tool": {"name": "now", "args": {"timezone": "utc"}}}"#)
        .reply(&final_answer("It is now."))
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), ["⛔️validation_error", "now"]);
    assert!(
        asked.steps()[0]["observation"]["error"]
            .as_str()
            .unwrap()
            .contains("format")
    );
}
