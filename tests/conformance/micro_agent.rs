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
            // The JSON decision loop (Ollama's mode), answered by the script.
            args: vec![
                "--provider".into(),
                "scripted".into(),
                "--input".into(),
                "llm_provider=ollama".into(),
            ],
        }
    }

    fn reply(mut self, text: &str) -> Self {
        self.replies.push(text.to_string());
        self
    }

    fn replies(mut self, text: &str, times: usize) -> Self {
        self.replies
            .extend(std::iter::repeat_n(text.to_string(), times));
        self
    }

    fn env(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.env.push((name, value.into()));
        self
    }

    /// No `--provider scripted`: the workflow's own provider choice.
    fn own_provider(mut self) -> Self {
        self.args.clear();
        self
    }

    fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    /// Runs it in `cwd` (created if missing).
    fn run_in(self, cwd: &Path) -> Asked {
        std::fs::create_dir_all(cwd).unwrap();
        static ASKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id = format!(
            "ask-{}",
            ASKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
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
            // The native-tools agent is another path (`mode`): these runs never reach it.
            let yaml = serde_json::json!({ "replies": { "planner": replies, "summarize": "from the model" }, "unreached": ["agent"] });
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

    /// The trace file of this ask: `traces/<id>.jsonl` in the folder it ran in.
    fn trace_file(&self) -> PathBuf {
        let id = self.run_dir.file_name().unwrap().to_string_lossy();
        self.cwd.join("traces").join(format!("{id}.jsonl"))
    }

    /// The one trace record of this ask.
    fn record(&self) -> Value {
        let path = self.trace_file();
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; {}", path.display(), stderr(&self.out)));
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

    /// The prompts the planner was sent, in order (rejected attempts included).
    fn prompts(&self) -> Vec<String> {
        super::common::prompts_to(&self.events(), "planner")
    }

    /// The results of the calls the planner chose (the `act` role's).
    fn calls(&self) -> Vec<Value> {
        of_kind(&self.events(), "tool_call")
            .into_iter()
            .filter(|c| c["role"] == "act")
            .collect()
    }

    fn path(&self) -> Vec<String> {
        of_kind(&self.events(), "role_start")
            .iter()
            .map(|e| e["role"].as_str().unwrap().to_string())
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

/// A native reply of the model: tool calls `(id, tool, arguments)` (the scripted provider's
/// form, which the OpenAI server sends as `tool_calls`).
fn tool_calls(calls: &[(&str, &str, Value)]) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| serde_json::json!({"id": id, "name": name, "arguments": args}))
        .collect();
    serde_json::json!({ "tool_calls": calls }).to_string()
}

/// An OpenAI chat completion's message: a reply of [`tool_calls`] as `tool_calls` with
/// their arguments as JSON text, anything else as the content.
fn openai_message(text: &str) -> Value {
    let calls = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("tool_calls").and_then(Value::as_array).cloned());
    match calls {
        Some(calls) => serde_json::json!({
            "role": "assistant", "content": null, "refusal": null,
            "tool_calls": calls.iter().map(|c| serde_json::json!({
                "id": c["id"], "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"].to_string()},
            })).collect::<Vec<_>>(),
        }),
        None => serde_json::json!({"role": "assistant", "content": text, "refusal": null}),
    }
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
    let calls = asked.calls();
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

#[test]
fn a_wrong_type_a_missing_argument_and_an_unknown_tool_are_validation_errors() {
    let (_tmp, asked) = Ask::new("What is 2+2?")
        .reply(r#"{"tool": {"name": "calculator", "args": {"expression": 4}}}"#)
        .reply(r#"{"tool": {"name": "calculator", "args": {}}}"#)
        .reply(r#"{"tool": {"name": "python", "args": {"code": "2+2"}}}"#)
        .reply(&calc("2+2"))
        .reply(&final_answer("4"))
        .run();
    let asked = asked.ok();
    assert_eq!(
        asked.tools(),
        [
            "⛔️validation_error",
            "⛔️validation_error",
            "⛔️validation_error",
            "calculator"
        ]
    );
    let kinds: Vec<Value> = asked
        .calls()
        .iter()
        .map(|c| c["result"]["error_kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            Value::from("validation"),
            Value::from("validation"),
            Value::from("unknown_tool"),
            Value::Null
        ]
    );
}

// ---- "Tools are required when the question implies: math → must use calculator before
// finalize; time/date → must use now before finalize. Violations are recorded as steps
// (tool: "⛔️policy_violation") and the loop continues." --------------------------------------

/// Finalizes at once; the steps say whether a policy held it back.
fn policies_of(question: &str) -> Vec<String> {
    let (_tmp, asked) = Ask::new(question)
        .reply(&final_answer("an answer"))
        .reply(&final_answer("an answer"))
        .arg("--input")
        .arg("max_steps=2")
        .run();
    asked.ok().tools()
}

#[test]
fn math_questions_meet_the_calculator_policy_whatever_their_wording() {
    for question in [
        "What is 6 times 7?",
        "what's 2*(3+5)",
        "Compute 9! / (3!*3!*3!).",
        "What is 13! ?",
        "Please ADD 2 and 3",
        "What is the sum of 4 and 5?",
        "2 ** 10 = ?",
        "Divide 10 by 4",
        // arithmetic in words: percentages, roots, primality, powers, factorials
        "What is 15% of 80?",
        "What is 15 percent of 80?",
        "What is the square root of 144?",
        "Is 97 a prime number?",
        "What are the prime factors of 84?",
        "What is 2 to the power of 10?",
        "What is the factorial of 5?",
    ] {
        assert_eq!(
            policies_of(question),
            ["⛔️policy_violation", "⛔️policy_violation"],
            "{question}"
        );
    }
}

#[test]
fn near_miss_words_are_not_math_or_time() {
    for question in [
        "Hi! Do you know the capital of France?",
        "Give me a summary of Hamlet.",
        "What is the address of the Louvre?",
        "Is the Eiffel Tower additional to the list?",
        "Who won the Nobel prize in physics, sometimes called the top award?",
        "Which snowy mountains are in Norway?",
        "What is the totality of a solar eclipse?",
        "Which powerful kings ruled France?",
        "Wow!",
        "Who was the prime minister of Britain in 1990?",
        "What is the root cause of inflation?",
        // a question that merely mentions time or a date is not about the current time
        "Give me a brief history of timekeeping.",
        "What is the time complexity of quicksort?",
        "What was the date of the Battle of Hastings?",
        "When was the first mechanical clock built?",
        "Which time zones does Russia span?",
    ] {
        assert_eq!(policies_of(question), Vec::<String>::new(), "{question}");
    }
}

#[test]
fn time_questions_meet_the_now_policy_and_the_message_names_the_tool() {
    for question in [
        "What time is it?",
        "What's the date today?",
        "Tell me the current UTC timestamp",
        "Is it morning now?",
        "What year is it?",
        "How many days until Christmas?",
        "What's today's date?",
        "What day is it today?",
    ] {
        let (_tmp, asked) = Ask::new(question)
            .reply(&final_answer("noon"))
            .reply(r#"{"tool": {"name": "now", "args": {"timezone": "utc"}}}"#)
            .reply(&final_answer("noon"))
            .run();
        let asked = asked.ok();
        assert_eq!(asked.tools(), ["⛔️policy_violation", "now"], "{question}");
        assert_eq!(
            asked.steps()[0]["observation"],
            "Finalize attempted before now."
        );
    }
}

#[test]
fn a_question_about_math_and_time_needs_both_tools() {
    let (_tmp, asked) = Ask::new("Add 12345 and 67890, then tell me the current date (UTC).")
        .reply(&final_answer("80235"))
        .reply(&calc("12345 + 67890"))
        .reply(&final_answer("80235"))
        .reply(r#"{"tool": {"name": "now", "args": {"timezone": "utc"}}}"#)
        .reply(&final_answer("80235, and today"))
        .run();
    let asked = asked.ok();
    assert_eq!(
        asked.tools(),
        [
            "⛔️policy_violation",
            "calculator",
            "⛔️policy_violation",
            "now"
        ]
    );
    assert_eq!(
        asked.steps()[2]["observation"],
        "Finalize attempted before now."
    );
    // The next prompt sees the violation.
    assert!(asked.prompts()[3].contains("Finalize attempted before now."));
}

// ---- "Unknown/malformed inputs do not crash the loop; they are surfaced in the trace for
// self-correction." "One tool per step. Favor strict JSON decisions." ----------------------

#[test]
fn malformed_decisions_are_marked_steps_the_next_prompt_sees() {
    for (reply, why) in [
        (r#"{"final": {"answer": 42}}"#, "$.final.answer"),
        (r#"{"tool": {"name": "calculator"}}"#, "args"),
        (
            r#"{"tool": "calculator", "args": {"expression": "6*7"}}"#,
            "$.tool",
        ),
        (
            r#"{"tool": [{"name": "calculator", "args": {"expression": "6"}}, {"name": "now", "args": {}}]}"#,
            "$.tool",
        ),
        ("Let me think about 6*7 first.", ""),
    ] {
        let (_tmp, asked) = Ask::new("What is 6*7?")
            .reply(reply)
            .reply(&calc("6*7"))
            .reply(&final_answer("42"))
            .run();
        let asked = asked.ok();
        assert_eq!(
            asked.tools(),
            ["⛔️malformed_decision", "calculator"],
            "{reply}"
        );
        let observation = &asked.steps()[0]["observation"];
        assert_eq!(observation["raw"], reply);
        assert!(
            observation["error"].as_str().unwrap().contains(why),
            "{reply}: {observation}"
        );
        // The one self-correction retry was made, with the error, then the next turn
        // shows the step.
        let prompts = asked.prompts();
        assert_eq!(prompts.len(), 4, "{reply}: retry, then two more turns");
        assert!(
            prompts[1].contains("Your previous reply could not be used"),
            "{reply}"
        );
        assert!(prompts[2].contains("⛔️malformed_decision"), "{reply}");
        assert_eq!(asked.record()["answer"], "42");
    }
}

/// "exactly one" of a tool call and a final answer: a decision with both is malformed, and
/// neither its tool runs nor its answer is taken.
#[test]
fn a_decision_with_both_a_tool_and_a_final_is_a_malformed_step() {
    let both = r#"{"tool": {"name": "calculator", "args": {"expression": "6*7"}}, "final": {"answer": "41"}}"#;
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .reply(both)
        .reply(&calc("6*7"))
        .reply(&final_answer("42"))
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), ["⛔️malformed_decision", "calculator"]);
    assert_eq!(asked.calls().len(), 1);
    assert_eq!(asked.record()["answer"], "42");
    assert!(asked.prompts()[1].contains("⛔️malformed_decision"));
}

#[test]
fn a_decision_that_is_neither_tool_nor_final_is_a_malformed_step() {
    let (_tmp, asked) = Ask::new("What is the capital of Norway?")
        .reply("{}")
        .reply(&final_answer("Oslo"))
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), ["⛔️malformed_decision"]);
    assert_eq!(asked.record()["answer"], "Oslo");
}

#[test]
fn the_lenient_json_repair_reads_a_fenced_single_quoted_decision() {
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .reply("Sure!\n```json\n{'tool': {'name': 'calculator', 'args': {'expression': '6*7',},},}\n```")
        .reply(&final_answer("42"))
        .run();
    assert_eq!(asked.ok().tools(), ["calculator"]);
}

#[test]
fn a_run_of_malformed_replies_ends_through_its_own_exit_with_a_string_answer() {
    let (_tmp, asked) = Ask::new("What is the capital of Norway?")
        .replies("no JSON here", 12)
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), vec!["⛔️malformed_decision"; 6]);
    let path = asked.path();
    assert_eq!(&path[path.len() - 3..], ["compose", "summarize", "record"]);
    // Nothing to compose from: the model wrote it from the trace.
    assert_eq!(asked.record()["answer"], "from the model");
}

// ---- "the agent composes final answers from tool results (calculator/now) when available to
// preserve key values" -------------------------------------------------------------------------

#[test]
fn the_composed_answer_is_a_string_with_the_first_result_and_the_time() {
    let (_tmp, asked) = Ask::new("What's 2*(3+5), and what time is it?")
        .reply(&calc("2*(3+5)"))
        .reply(r#"{"tool": {"name": "now", "args": {"timezone": "utc"}}}"#)
        .reply(&calc("2*(3+5)+1"))
        .arg("--input")
        .arg("max_steps=3")
        .run();
    let asked = asked.ok();
    let record = asked.record();
    let iso = asked.steps()[1]["observation"]["iso"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(record["answer"], format!("16 | UTC: {iso}"));
}

#[test]
fn an_answer_is_composed_when_the_last_turn_is_a_policy_violation() {
    let (_tmp, asked) = Ask::new("Add 12345 and 67890.")
        .reply(&final_answer("80235"))
        .arg("--input")
        .arg("max_steps=1")
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), ["⛔️policy_violation"]);
    // No calculator ran: the reference's last-chance math on the question.
    assert_eq!(asked.record()["answer"], "80235");
}

/// The workflow's own mock (its default reply set, `{"final": {"answer": "ok"}}` every turn)
/// never calls the calculator: the answer of a question in words is still its value.
#[test]
fn the_mock_answers_a_question_in_words_with_its_value() {
    for (question, answer) in [
        ("What is 6 times 7?", "42"),
        ("What is 10 divided by 4?", "2.5"),
        ("What is 2 to the power of 10?", "1024"),
    ] {
        let (_tmp, asked) = Ask::new(question).arg("--input").arg("max_steps=2").run();
        let asked = asked.ok();
        assert_eq!(asked.tools(), ["⛔️policy_violation"; 2], "{question}");
        assert_eq!(asked.record()["answer"], answer, "{question}");
    }
}

#[test]
fn a_failed_calculation_is_skipped_for_the_first_result() {
    let (_tmp, asked) = Ask::new("What is 2**100?")
        .reply(&calc("2**100"))
        .reply(&calc("2**10"))
        .arg("--input")
        .arg("max_steps=2")
        .run();
    let asked = asked.ok();
    let first = &asked.steps()[0]["observation"]["error"];
    assert!(
        first.as_str().unwrap().contains("exponent bound"),
        "{first}"
    );
    assert_eq!(asked.record()["answer"], "1024");
}

// ---- "Calculator constraints: factorial ≤ 12, exponent bound, AST node-count limit, and number
// magnitude cap. The operator set is allow-listed." ---------------------------------------------

#[test]
fn the_calculator_refuses_what_its_constraints_forbid() {
    let long = vec!["1"; 60].join("+");
    let cases = [
        ("12!", Some("479001600")),
        ("13!", None),
        ("2**59", Some("576460752303423488")),
        ("0.5**65", None),
        ("1**100", Some("1")),
        ("10**18", Some("1000000000000000000")),
        ("10**18 * 10", None),
        (long.as_str(), None),
        ("__import__('os').getcwd()", None),
        ("abs(-1)", None),
        ("7 // 2 + 7 % 2", Some("4")),
    ];
    for (expression, result) in cases {
        let (_tmp, asked) = Ask::new("Compute it.")
            .reply(&calc(expression))
            .reply(&final_answer("done"))
            .run();
        let asked = asked.ok();
        let observation = &asked.steps()[0]["observation"];
        match result {
            Some(r) => assert_eq!(observation["result"].to_string(), r, "{expression}"),
            None => assert!(
                observation["error"].is_string(),
                "{expression}: {observation}"
            ),
        }
    }
}

// ---- Tracing: "Every ask appends a record to traces/<id>.jsonl: {id, ts, question, steps,
// answer}. Steps are {tool, args, observation}. CLI: replay --path traces/<id>.jsonl --index -1."

#[test]
fn every_ask_appends_one_record_to_the_shared_traces_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Ask::new("What is 6*7?")
        .reply(&calc("6*7"))
        .reply(&final_answer("42"))
        .run_in(tmp.path())
        .ok();
    let second = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .run_in(tmp.path())
        .ok();
    let files: Vec<String> = std::fs::read_dir(tmp.path().join("traces"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for asked in [&first, &second] {
        let record = asked.record();
        let mut keys: Vec<&String> = record.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["answer", "id", "question", "steps", "ts"]);
        assert_eq!(
            record["id"].as_str().unwrap(),
            asked.run_dir.file_name().unwrap().to_string_lossy()
        );
        for step in asked.steps() {
            let mut keys: Vec<&String> = step.as_object().unwrap().keys().collect();
            keys.sort();
            assert_eq!(keys, ["args", "observation", "tool"]);
        }
        assert!(record["answer"].is_string());
    }
    assert_eq!(second.record()["answer"], "Oslo");
}

#[test]
fn traces_dir_moves_the_traces_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("elsewhere/deeper");
    let asked = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .env("TRACES_DIR", elsewhere.to_string_lossy())
        .run_in(&tmp.path().join("cwd"))
        .ok();
    assert!(!asked.trace_file().exists());
    let id = asked.run_dir.file_name().unwrap().to_string_lossy();
    let text = std::fs::read_to_string(elsewhere.join(format!("{id}.jsonl"))).unwrap();
    assert!(text.contains("Oslo"));
    // A relative TRACES_DIR is relative to the folder the ask ran in.
    let relative = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .env("TRACES_DIR", "my traces")
        .run_in(&tmp.path().join("cwd"))
        .ok();
    let id = relative.run_dir.file_name().unwrap().to_string_lossy();
    assert!(
        tmp.path()
            .join("cwd/my traces")
            .join(format!("{id}.jsonl"))
            .is_file()
    );
}

#[test]
fn replay_path_index_shows_a_record_of_a_trace() {
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .reply(&calc("6*7"))
        .reply(&final_answer("42"))
        .run();
    let asked = asked.ok();
    let trace = asked.trace_file();
    let id = asked
        .run_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let replay = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
            .current_dir(&asked.cwd)
            .arg("replay")
            .args(args)
            .output()
            .unwrap()
    };
    let relative = format!("traces/{id}.jsonl");
    let out = replay(&["--path", &relative, "--index", "-1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (title, body) = text.split_once('\n').unwrap();
    assert_eq!(title, format!("REPLAY 0 : {relative}"));
    let shown: Value = serde_json::from_str(body).unwrap();
    assert_eq!(shown, asked.record());
    // Two more records (a file shared by several asks): -1 is the last, 0 the first.
    let mut lines = std::fs::read_to_string(&trace).unwrap();
    lines.push_str("{\"id\": \"second\"}\n{\"id\": \"third\"}\n");
    std::fs::write(&trace, lines).unwrap();
    let out = replay(&["--path", &relative, "--index", "-1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"third\""));
    let out = replay(&["--path", &relative, "--index", "-3"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("REPLAY 0 :"));
    let out = replay(&["--path", &relative, "--index", "1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"second\""));
    let out = replay(&["--path", &relative, "--index", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has 3"), "{}", stderr(&out));
    let out = replay(&["--path", "traces/missing.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
}

// ---- Provider configuration: LLM_PROVIDER, OPENAI_MODEL, OLLAMA_HOST, OLLAMA_MODEL, prices;
// "configure_lm() ... falls back in order: Ollama → OpenAI → mock LM" -------------------------

/// A request a [`Server`] got: its path, headers (lower-case names) and JSON body.
type Request = (String, Vec<(String, String)>, Value);

/// A local server speaking one provider's wire protocol: it checks each request it gets
/// and answers with the next reply.
struct Server {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Request>>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    /// `POST /api/chat`, NDJSON or one JSON object (`stream: false`).
    Ollama,
    /// `POST /v1/chat/completions`.
    OpenAi,
}

impl Server {
    fn start(wire: Wire, replies: Vec<String>, usage: (u64, u64)) -> Server {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut headers = Vec::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap_or(0);
                    let line = line.trim_end().to_string();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                    }
                }
                let length: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap_or(());
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
                let text = replies.next().unwrap_or_else(|| final_answer("server"));
                let (status, answer) = match (wire, path.as_str()) {
                    (Wire::Ollama, "/api/chat") if body["stream"] == false => (
                        "200 OK",
                        serde_json::json!({
                            "model": body["model"], "created_at": "2025-01-01T00:00:00Z",
                            "message": {"role": "assistant", "content": text},
                            "done": true, "done_reason": "stop", "total_duration": 1000,
                            "prompt_eval_count": usage.0, "eval_count": usage.1,
                        }),
                    ),
                    (Wire::OpenAi, "/v1/chat/completions") => (
                        "200 OK",
                        serde_json::json!({
                            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
                            "model": body["model"],
                            "choices": [{"index": 0, "message": openai_message(&text),
                                "logprobs": null, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1,
                                "total_tokens": usage.0 + usage.1},
                        }),
                    ),
                    _ => (
                        "404 Not Found",
                        serde_json::json!({"error": format!("no route {path}")}),
                    ),
                };
                log.lock().unwrap().push((path, headers, body));
                let answer = answer.to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        Server { addr, seen }
    }

    fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

/// A port nothing listens on.
fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[test]
fn a_user_with_only_ollama_runs_it_with_ollama_host_and_ollama_model() {
    let server = Server::start(Wire::Ollama, vec![calc("6*7"), final_answer("42")], (30, 7));
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .own_provider()
        .env("LLM_PROVIDER", "ollama")
        // As Ollama's own CLI takes it: no scheme.
        .env("OLLAMA_HOST", server.addr.to_string())
        .env("OLLAMA_MODEL", "qwen2.5:0.5b")
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), ["calculator"]);
    assert_eq!(asked.record()["answer"], "42");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for (path, _, body) in &requests {
        assert_eq!(path, "/api/chat");
        assert_eq!(body["model"], "qwen2.5:0.5b");
        assert_eq!(body["stream"], false);
        // The JSON decision loop: the tools are described in the prompt, not offered natively.
        assert!(body.get("tools").is_none(), "{body}");
        assert!(body["format"].is_object(), "the decision's schema: {body}");
    }
    let responses = of_kind(&asked.events(), "llm_response");
    assert!(responses.iter().all(|r| r["profile"] == "ollama"));
    let info: Value = super::common::json(asked.run_dir.join("run.json"));
    let ollama = info["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "ollama")
        .unwrap()
        .clone();
    assert_eq!(ollama["model"], "qwen2.5:0.5b");
    assert_eq!(info["totals"]["input_tokens"], 60);
}

/// "falls back in order: Ollama → OpenAI → mock LM", and the mock is never a silent answer:
/// with Ollama down and no OpenAI key the run fails naming the chain, it does not answer
/// `ok` as if a model had.
#[test]
fn ollama_down_and_no_openai_key_is_an_error_never_a_silent_mock() {
    for env in [
        vec![
            ("LLM_PROVIDER", "ollama".to_string()),
            ("OLLAMA_HOST", dead_address()),
        ],
        vec![("OLLAMA_HOST", dead_address())],
    ] {
        let mut ask = Ask::new("What is the capital of Norway?").own_provider();
        for (k, v) in env.clone() {
            ask = ask.env(k, v);
        }
        let (_tmp, asked) = ask.run();
        assert_eq!(asked.out.status.code(), Some(2), "{env:?}");
        let err = stderr(&asked.out);
        assert!(err.contains("all providers failed"), "{env:?}: {err}");
        assert!(!err.contains("mock"), "{env:?}: {err}");
        assert!(
            !of_kind(&asked.events(), "llm_response")
                .iter()
                .any(|r| r["profile"] == "mock")
        );
    }
}

/// The mock runs when chosen (`LLM_PROVIDER=mock`) and says so on standard error.
#[test]
fn the_mock_runs_only_when_chosen_and_says_so() {
    let (_tmp, asked) = Ask::new("What is the capital of Norway?")
        .own_provider()
        .env("LLM_PROVIDER", "mock")
        .run();
    let asked = asked.ok();
    assert_eq!(asked.record()["answer"], "ok");
    let err = stderr(&asked.out);
    assert!(
        err.contains("replies from the script, not a model (profile `mock`"),
        "{err}"
    );
}

/// With a key for OpenAI and `LLM_PROVIDER` unset, the default is OpenAI with native tool
/// calls ("LLM_PROVIDER: ... (default: openai)"; "OpenAI → native tool-calls").
#[test]
fn with_an_openai_key_and_llm_provider_unset_openai_calls_the_tools_natively() {
    let server = Server::start(
        Wire::OpenAi,
        vec![
            tool_calls(&[(
                "call_1",
                "calculator",
                serde_json::json!({"expression": "6*7"}),
            )]),
            "The product is forty-two.".into(),
        ],
        (10, 5),
    );
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .own_provider()
        .env("OPENAI_API_KEY", "sk-test-default")
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .run();
    let asked = asked.ok();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].2["tools"].is_array(), "{}", requests[0].2);
    assert!(requests[0].2.get("response_format").is_none());
    assert_eq!(asked.tools(), ["calculator"]);
    // "composes final answers from tool results ... to preserve key values"
    assert_eq!(asked.record()["answer"], "42");
}

/// A user with only Ollama (`OLLAMA_HOST`, no OpenAI key, `LLM_PROVIDER` unset) gets Ollama.
#[test]
fn a_user_with_only_ollama_and_no_llm_provider_gets_ollama() {
    let server = Server::start(Wire::Ollama, vec!["Oslo".into()], (30, 7));
    let (_tmp, asked) = Ask::new("What is the capital of Norway?")
        .own_provider()
        .env("OLLAMA_HOST", server.addr.to_string())
        .run();
    let asked = asked.ok();
    assert_eq!(asked.record()["answer"], "Oslo");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].0, "/api/chat");
    let responses = of_kind(&asked.events(), "llm_response");
    assert!(responses.iter().all(|r| r["profile"] == "ollama"));
}

/// At `max_steps` in native mode the answer is composed from the native tool results (their
/// `id` and `ok` fields are no reason to refuse them), not written by a summarising model.
#[test]
fn a_native_loop_that_reaches_max_steps_composes_its_answer_from_the_results() {
    let call =
        |id: &str| tool_calls(&[(id, "calculator", serde_json::json!({"expression": "6*7"}))]);
    let server = Server::start(Wire::OpenAi, vec![call("c1"), call("c2")], (10, 5));
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .own_provider()
        .env("OPENAI_API_KEY", "sk-test-steps")
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .arg("--input")
        .arg("max_steps=2")
        .run();
    let asked = asked.ok();
    assert_eq!(server.requests().len(), 2);
    let path = asked.path();
    assert_eq!(&path[path.len() - 2..], ["compose", "record"]);
    assert_eq!(asked.record()["answer"], "42");
}

#[test]
fn llm_provider_must_name_a_profile() {
    let (_tmp, asked) = Ask::new("hi")
        .own_provider()
        .env("LLM_PROVIDER", "clippy")
        .run();
    assert_eq!(asked.out.status.code(), Some(2));
    let err = stderr(&asked.out);
    assert!(err.contains("LLM_PROVIDER=\"clippy\""), "{err}");
    assert!(err.contains("ollama"), "{err}");
}

#[test]
fn openai_model_and_the_price_variables_reach_the_call_and_the_cost() {
    // OpenAI runs natively: a tool call, then the answer as text.
    let server = Server::start(
        Wire::OpenAi,
        vec![
            tool_calls(&[(
                "call_1",
                "calculator",
                serde_json::json!({"expression": "6*7"}),
            )]),
            "42".into(),
        ],
        (1000, 500),
    );
    let key = "sk-test-micro-agent-0123456789";
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .own_provider()
        .env("LLM_PROVIDER", "openai")
        .env("OPENAI_API_KEY", key)
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .env("OPENAI_MODEL", "gpt-4.1")
        .env("OPENAI_INPUT_PRICE_PER_1K", "0.002")
        .env("OPENAI_OUTPUT_PRICE_PER_1K", "0.008")
        .run();
    let asked = asked.ok();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for (path, headers, body) in &requests {
        assert_eq!(path, "/v1/chat/completions");
        assert_eq!(body["model"], "gpt-4.1");
        assert!(headers.contains(&("authorization".into(), format!("Bearer {key}"))));
    }
    let info: Value = super::common::json(asked.run_dir.join("run.json"));
    // Two calls of 1000 input and 500 output tokens at the prices of the variables.
    let cost = info["totals"]["cost"].as_f64().unwrap();
    assert!((cost - 2.0 * (0.002 + 0.5 * 0.008)).abs() < 1e-9, "{cost}");
    // The key is not recorded anywhere in the run.
    for entry in walk(&asked.cwd) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(key),
            "{}",
            entry.display()
        );
    }
}

/// "Costs (OpenAI): `OPENAI_INPUT_PRICE_PER_1K`, `OPENAI_OUTPUT_PRICE_PER_1K` (defaults
/// provided for 4o/4o-mini/4.1)": without the variables, the model `OPENAI_MODEL` names is
/// priced at its own default (the table of default prices), not at gpt-4o-mini's.
#[test]
fn without_the_price_variables_each_model_has_its_default_price() {
    let reply = || {
        vec![
            tool_calls(&[(
                "call_1",
                "calculator",
                serde_json::json!({"expression": "6*7"}),
            )]),
            "42".into(),
        ]
    };
    let per_model = [
        ("gpt-4o", 0.0025, 0.01),
        ("gpt-4.1", 0.002, 0.008),
        ("gpt-4o-mini", 0.00015, 0.0006),
    ];
    for (model, input, output) in per_model {
        let server = Server::start(Wire::OpenAi, reply(), (1000, 500));
        let (_tmp, asked) = Ask::new("What is 6*7?")
            .own_provider()
            .env("LLM_PROVIDER", "openai")
            .env("OPENAI_API_KEY", "sk-test-micro-agent-0123456789")
            .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
            .env("OPENAI_MODEL", model)
            .run();
        let asked = asked.ok();
        assert_eq!(server.requests().len(), 2, "{model}");
        let info: Value = super::common::json(asked.run_dir.join("run.json"));
        let cost = info["totals"]["cost"].as_f64().unwrap();
        let expected = 2.0 * (1.0 * input + 0.5 * output);
        assert!(
            (cost - expected).abs() < 1e-12,
            "{model}: {cost} != {expected}"
        );
    }

    // One variable set: its half wins, the other half stays the model's default.
    let server = Server::start(Wire::OpenAi, reply(), (1000, 500));
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .own_provider()
        .env("LLM_PROVIDER", "openai")
        .env("OPENAI_API_KEY", "sk-test-micro-agent-0123456789")
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .env("OPENAI_MODEL", "gpt-4o")
        .env("OPENAI_INPUT_PRICE_PER_1K", "0.001")
        .run();
    let info: Value = super::common::json(asked.ok().run_dir.join("run.json"));
    let cost = info["totals"]["cost"].as_f64().unwrap();
    assert!((cost - 2.0 * (0.001 + 0.5 * 0.01)).abs() < 1e-12, "{cost}");
}

/// The default prices are what `rondo check --cost` proves a budget with: a profile that
/// writes no price and names gpt-4o has the worst case of one that writes gpt-4o's prices,
/// marked as estimated from the table; an unknown model is free, as before.
#[test]
fn check_cost_prices_a_known_model_from_the_table_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("prompts")).unwrap();
    std::fs::write(
        tmp.path().join("prompts/ask.tera"),
        "Answer {{ input.q }}.\n",
    )
    .unwrap();
    let cost_of = |model: &str, price: &str| {
        let source = format!(
            "workflow w {{\n  prompts = \"prompts\"\n  provider = p\n  input q: string\n  limits {{ max_input_bytes = \"1KB\" }}\n}}\n\
             provider p {{\n  kind = \"openai\"\n  model = \"{model}\"\n  max_tokens = 1000\n  {price}\n}}\n\
             role ask: llm {{\n  prompt = \"ask.tera\"\n  max_visits = 1\n  output text\n}}\n\
             exit done\nstart -> ask\nask -> done\n"
        );
        let path = tmp.path().join("w.rondo");
        std::fs::write(&path, source).unwrap();
        let out = super::common::rondo(&[
            "check",
            "--offline",
            "--cost",
            "--format",
            "json",
            path.to_str().unwrap(),
        ]);
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        report[0]["cost"].clone()
    };
    let table = cost_of("gpt-4o-2024-08-06", "");
    let written = cost_of(
        "gpt-4o-2024-08-06",
        "price { input_per_1k = 0.0025  output_per_1k = 0.01 }",
    );
    let unknown = cost_of("my-model", "");
    let max = |c: &Value| c["max_cost"].as_f64().unwrap();
    assert!(max(&table) > 0.01, "{table}");
    assert_eq!(max(&table), max(&written));
    assert_eq!(max(&unknown), 0.0);
    assert_eq!(
        table["estimated_prices"],
        serde_json::json!(["`p` (gpt-4o-2024-08-06)"])
    );
    assert_eq!(written["estimated_prices"], serde_json::json!([]));
    assert_eq!(unknown["estimated_prices"], serde_json::json!([]));
}

// ---- "OpenAI → native tool-calls ...; Others (e.g., Ollama) → robust JSON decision loop" ------

/// One ask on OpenAI: the tools' schemas in the request, a refused call and a good one made
/// at once, the results back in the conversation, the answer in text.
#[test]
fn openai_calls_the_tools_natively_and_sees_every_result_in_the_conversation() {
    let server = Server::start(
        Wire::OpenAi,
        vec![
            tool_calls(&[
                ("call_a", "calculator", serde_json::json!({"expr": "6*7"})),
                ("call_b", "now", serde_json::json!({"timezone": "utc"})),
            ]),
            tool_calls(&[(
                "call_c",
                "calculator",
                serde_json::json!({"expression": "6*7"}),
            )]),
            "6*7 is 42.".into(),
        ],
        (10, 5),
    );
    let (_tmp, asked) = Ask::new("What is 6*7, and what time is it?")
        .own_provider()
        .env("LLM_PROVIDER", "openai")
        .env("OPENAI_API_KEY", "sk-test-native")
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .run();
    let asked = asked.ok();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let first = &requests[0].2;
    // The tools in OpenAI's own form, with their schemas; no JSON decision format.
    let tools = first["tools"].as_array().expect("tools offered");
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(names, ["calculator", "now"]);
    assert!(tools.iter().all(|t| t["type"] == "function"));
    let calculator = &tools[0]["function"]["parameters"];
    assert_eq!(calculator["required"], serde_json::json!(["expression"]));
    assert_eq!(calculator["additionalProperties"], false);
    assert!(first.get("response_format").is_none(), "{first}");
    let roles = |body: &Value| -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(roles(first), ["system", "user"]);
    assert_eq!(
        first["messages"][1]["content"],
        "What is 6*7, and what time is it?"
    );
    // Turn 2 is sent both calls and a result for each: the refused one says why.
    let second = &requests[1].2;
    assert_eq!(
        roles(second),
        ["system", "user", "assistant", "tool", "tool"]
    );
    let calls = &second["messages"][2]["tool_calls"];
    assert_eq!(calls[0]["id"], "call_a");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"expr":"6*7"}"#);
    let refused = &second["messages"][3];
    assert_eq!(refused["tool_call_id"], "call_a");
    let refused = refused["content"].as_str().unwrap();
    assert!(
        refused.starts_with("⛔️validation_error: invalid arguments for `calculator`"),
        "{refused}"
    );
    assert_eq!(second["messages"][4]["tool_call_id"], "call_b");
    assert!(
        second["messages"][4]["content"]
            .as_str()
            .unwrap()
            .contains('T')
    );
    let third = &requests[2].2;
    assert_eq!(third["messages"][6]["tool_call_id"], "call_c");
    assert!(
        third["messages"][6]["content"]
            .as_str()
            .unwrap()
            .contains("42")
    );
    // The trace: a ⛔️validation_error step, then the calls that ran; the model's answer.
    assert_eq!(asked.tools(), ["⛔️validation_error", "now", "calculator"]);
    // Composed from the tool results: the calculator's value and the `now` time.
    let iso = asked.steps()[1]["observation"]["iso"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(asked.record()["answer"], format!("42 | UTC: {iso}"));
    assert_eq!(asked.steps()[0]["observation"]["tool"], "calculator");
}

/// A native answer before the calculator ran is a policy violation the model is told of.
#[test]
fn a_native_answer_before_the_calculator_is_a_policy_violation_the_model_reads() {
    let server = Server::start(
        Wire::OpenAi,
        vec![
            "80235".into(),
            tool_calls(&[(
                "call_1",
                "calculator",
                serde_json::json!({"expression": "12345 + 67890"}),
            )]),
            "80235".into(),
        ],
        (10, 5),
    );
    let (_tmp, asked) = Ask::new("Add 12345 and 67890.")
        .own_provider()
        .env("LLM_PROVIDER", "openai")
        .env("OPENAI_API_KEY", "sk-test-native")
        .env("OPENAI_BASE_URL", format!("http://{}/v1", server.addr))
        .run();
    let asked = asked.ok();
    assert_eq!(asked.tools(), ["⛔️policy_violation", "calculator"]);
    let second = &server.requests()[1].2;
    let told = second["messages"][3]["content"].as_str().unwrap();
    assert!(
        told.contains("Finalize attempted before calculator"),
        "{told}"
    );
    assert_eq!(asked.record()["answer"], "80235");
}

#[test]
fn a_price_variable_that_is_not_a_number_stops_the_start() {
    let (_tmp, asked) = Ask::new("What is 6*7?")
        .own_provider()
        .env("OPENAI_INPUT_PRICE_PER_1K", "cheap")
        .run();
    assert_eq!(asked.out.status.code(), Some(2));
    let err = stderr(&asked.out);
    assert!(err.contains("OPENAI_INPUT_PRICE_PER_1K"), "{err}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

// ---- "Optimization demos: COMPILED_DEMOS_PATH (default opt/plan_demos.json)"; the agent
// auto-loads them if present ------------------------------------------------------------------

#[test]
fn compiled_demos_are_shown_to_the_planner_from_the_default_path_and_the_variable() {
    // The format `rondo optimize` writes (docs/optimize.md): the run's inputs and the
    // planner's reply, as text or as an object.
    let demos = serde_json::json!([
        {"inputs": {"question": "What's 17*3? Return only the number."},
         "reply": r#"{"tool": {"name": "calculator", "args": {"expression": "17*3"}}}"#},
        {"inputs": {"question": "Say hello."}, "reply": {"final": {"answer": "hello"}}},
    ]);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("opt")).unwrap();
    std::fs::write(tmp.path().join("opt/plan_demos.json"), demos.to_string()).unwrap();
    let asked = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .run_in(tmp.path())
        .ok();
    let prompt = &asked.prompts()[0];
    assert!(prompt.contains("Example Question: What's 17*3? Return only the number."));
    assert!(
        prompt.contains(
            r#"Decision: {"tool": {"name": "calculator", "args": {"expression": "17*3"}}}"#
        )
    );
    assert!(prompt.contains(r#"Decision: {"final": {"answer": "hello"}}"#));
    // Elsewhere, named by the variable; a missing file is no demos.
    std::fs::rename(
        tmp.path().join("opt/plan_demos.json"),
        tmp.path().join("demos.json"),
    )
    .unwrap();
    let asked = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .env("COMPILED_DEMOS_PATH", "demos.json")
        .run_in(tmp.path())
        .ok();
    assert!(asked.prompts()[0].contains("17*3"));
    let asked = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .run_in(tmp.path())
        .ok();
    assert!(!asked.prompts()[0].contains("17*3"));
}

// ---- "Plugin loader: set TOOLS_MODULES=... to merge additional tool dicts." --------------------

/// A folder with one plugin tool spec (`upper`) and its script.
fn plugin_folder(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("upper.py"),
        "import json, sys\nargs = json.loads(sys.argv[1])\nprint(json.dumps({'status': 'success', 'tool_name': 'upper', 'data': {'text': args['text'].upper()}, 'warnings': [], 'error': None}))\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("upper.yaml"),
        "tool_name: upper\nexecutable: python3 ./upper.py\nusage: 'upper: upper-cases a text. args: {\"text\": \"...\"}'\ntimeout: 10\ninput_schema:\n  type: object\n  properties:\n    text: {type: string}\n  required: [text]\n  additionalProperties: false\n",
    )
    .unwrap();
}

#[test]
fn plugin_tools_are_offered_called_and_checked_like_the_workflows_own() {
    let tmp = tempfile::tempdir().unwrap();
    plugin_folder(&tmp.path().join("plugins"));
    let asked = Ask::new("Shout hello")
        .reply(r#"{"tool": {"name": "upper", "args": {"text": "hello", "loud": true}}}"#)
        .reply(r#"{"tool": {"name": "upper", "args": {"text": "hello"}}}"#)
        .reply(&final_answer("HELLO"))
        .env("TOOLS_MODULES", "plugins")
        .run_in(tmp.path())
        .ok();
    assert_eq!(asked.tools(), ["⛔️validation_error", "upper"]);
    assert_eq!(asked.steps()[1]["observation"]["text"], "HELLO");
    assert!(asked.prompts()[0].contains("upper: upper-cases a text"));
    // A file named directly works the same; without the variable the tool is unknown.
    let asked = Ask::new("Shout hello")
        .reply(r#"{"tool": {"name": "upper", "args": {"text": "hello"}}}"#)
        .reply(&final_answer("HELLO"))
        .env("TOOLS_MODULES", "plugins/upper.yaml")
        .run_in(tmp.path())
        .ok();
    assert_eq!(asked.tools(), ["upper"]);
    let asked = Ask::new("Shout hello")
        .reply(r#"{"tool": {"name": "upper", "args": {"text": "hello"}}}"#)
        .reply(&final_answer("HELLO"))
        .run_in(tmp.path())
        .ok();
    assert_eq!(asked.tools(), ["⛔️validation_error"]);
    assert!(
        asked.steps()[0]["observation"]["error"]
            .as_str()
            .unwrap()
            .contains("not one of the available tools")
    );
}

/// A Python package `pkg` with a tools module in the guide's form: a `TOOLS` dict of the
/// reference's `Tool(name, description, schema, func)`, imported from `micro_agent.tools`;
/// `other.tools` gives its tools with `get_tools()` and plain dicts.
fn plugin_package(dir: &Path) {
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    std::fs::create_dir_all(dir.join("other")).unwrap();
    std::fs::write(dir.join("pkg/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("pkg/tools.py"),
        r#"from micro_agent.tools import Tool

def _reverse(args):
    return {"text": args["text"][::-1]}

def _boom(args):
    raise RuntimeError("the tool broke")

TOOLS = {
    "reverse": Tool("reverse", "Reverse a text. Schema: {text: string}.",
                    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                    _reverse),
    "boom": Tool("boom", "Always fails.", {"type": "object", "properties": {}}, _boom),
}
"#,
    )
    .unwrap();
    std::fs::write(dir.join("other/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("other/tools.py"),
        r#"def get_tools():
    return {"count": {"name": "count", "description": "Count the words of a text.",
                      "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                      "func": lambda args: {"words": len(args["text"].split())}}}
"#,
    )
    .unwrap();
}

/// "Plugin loader: set `TOOLS_MODULES="pkg1.tools,pkg2.tools"` to merge additional tool
/// dicts": the guide's Python modules, importable from the folder the agent starts in, join
/// the registry beside a YAML spec of ours; their tools are offered, their arguments checked
/// against their JSON Schema before they run ("invalid inputs add a ⛔️validation_error
/// step"), and a tool that raises is a failed call the loop goes on after.
#[test]
fn tools_modules_in_the_guides_python_form_work_beside_yaml_specs() {
    let tmp = tempfile::tempdir().unwrap();
    plugin_package(tmp.path());
    plugin_folder(&tmp.path().join("plugins"));
    let asked = Ask::new("Reverse and count hello world")
        .reply(r#"{"tool": {"name": "reverse", "args": {"text": 5}}}"#)
        .reply(r#"{"tool": {"name": "reverse", "args": {"text": "hello world"}}}"#)
        .reply(r#"{"tool": {"name": "count", "args": {"text": "hello world"}}}"#)
        .reply(r#"{"tool": {"name": "upper", "args": {"text": "hi"}}}"#)
        .reply(r#"{"tool": {"name": "boom", "args": {}}}"#)
        .reply(&final_answer("dlrow olleh, 2 words"))
        .env("TOOLS_MODULES", "pkg.tools, other.tools,plugins/upper.yaml")
        .run_in(tmp.path())
        .ok();
    assert_eq!(
        asked.tools(),
        ["⛔️validation_error", "reverse", "count", "upper", "boom"]
    );
    let steps = asked.steps();
    assert_eq!(
        steps[1]["observation"],
        serde_json::json!({"text": "dlrow olleh"})
    );
    assert_eq!(steps[2]["observation"], serde_json::json!({"words": 2}));
    assert_eq!(steps[3]["observation"]["text"], "HI");
    let calls = asked.calls();
    let boom = calls.last().unwrap();
    assert_eq!(boom["result"]["status"], "failed", "{boom}");
    assert!(
        boom["result"]["error"]
            .as_str()
            .unwrap()
            .contains("RuntimeError: the tool broke"),
        "{boom}"
    );
    let prompt = &asked.prompts()[0];
    assert!(prompt.contains("reverse: Reverse a text."), "{prompt}");
    assert!(
        prompt.contains("count: Count the words of a text."),
        "{prompt}"
    );
    assert!(prompt.contains("upper: upper-cases a text"), "{prompt}");
    assert_eq!(asked.record()["answer"], "dlrow olleh, 2 words");

    // A module that cannot be imported is a diagnostic naming it, and nothing runs.
    let asked = Ask::new("hi")
        .reply(&final_answer("hi"))
        .env("TOOLS_MODULES", "pkg.tools,nosuch.tools")
        .run_in(tmp.path());
    assert_eq!(asked.out.status.code(), Some(1), "{}", stderr(&asked.out));
    let err = stderr(&asked.out);
    assert!(err.contains("rondo::import::missing"), "{err}");
    assert!(err.contains("nosuch.tools"), "{err}");
    assert!(err.contains("ModuleNotFoundError"), "{err}");
    assert!(!asked.run_dir.exists());
}

#[test]
fn a_bad_plugin_spec_is_a_diagnostic_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plugins");
    plugin_folder(&dir);
    std::fs::write(
        dir.join("calculator.yaml"),
        "tool_name: calculator\nexecutable: python3 x.py\n",
    )
    .unwrap();
    std::fs::write(dir.join("typo.yaml"), "tool_name: typo\nexecutabel: x\n").unwrap();
    let asked = Ask::new("What is 6*7?")
        .reply(&final_answer("42"))
        .env("TOOLS_MODULES", "plugins,missing.yaml")
        .run_in(tmp.path());
    assert_eq!(asked.out.status.code(), Some(1), "{}", stderr(&asked.out));
    let err = stderr(&asked.out);
    for code in [
        "rondo::import::missing",
        "rondo::name::duplicate",
        "rondo::tool::unknown_field",
    ] {
        assert!(err.contains(code), "{code}: {err}");
    }
    assert!(err.contains("TOOLS_MODULES"), "{err}");
    assert!(!asked.run_dir.exists());
}

#[test]
fn more_plugin_specs_than_the_bound_are_a_diagnostic() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..257 {
        std::fs::write(
            dir.join(format!("t{i:03}.yaml")),
            format!("tool_name: t{i:03}\nexecutable: 'true'\n"),
        )
        .unwrap();
    }
    let asked = Ask::new("hi")
        .reply(&final_answer("hi"))
        .env("TOOLS_MODULES", "plugins")
        .run_in(tmp.path());
    assert_eq!(asked.out.status.code(), Some(1));
    let err = stderr(&asked.out);
    assert!(err.contains("rondo::tool::too_many_plugins"), "{err}");
    assert!(err.contains("more than 256"), "{err}");
}

/// `rondo optimize --role planner --out opt/plan_demos.json` on the shipped micro-agent
/// ("Saves demos to JSON; the agent auto-loads them if present"): the file it writes is the
/// one the loader reads (the next run's planner prompt shows the demo), it holds no absolute
/// path of this machine, and a demos file the loader cannot use is said, never silently no
/// demos.
#[test]
fn optimized_planner_demos_are_read_back_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::write(
        dir.join("train.jsonl"),
        concat!(
            r#"{"id": "t1", "inputs": {"question": "What is 6*7?", "llm_provider": "ollama"}, "expect": {"contains": "42"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let script = serde_json::json!({"replies": {"planner": [calc("6*7"), final_answer("42")]}});
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.current_dir(&dir)
        .args(["optimize", "-q"])
        .arg(workflow())
        .args(["--provider", "scripted", "--script", "script.json"])
        .args(["--dataset", "train.jsonl", "--role", "planner"])
        .args(["--out", "opt/plan_demos.json", "--runs", "evals/opt"]);
    for var in CONFIG_VARS {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(dir.join("opt/plan_demos.json")).unwrap();
    assert!(!text.contains(dir.to_str().unwrap()), "{text}");
    let demos: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(demos.as_array().unwrap().len(), 1);
    assert_eq!(demos[0]["inputs"]["question"], "What is 6*7?");
    // The next ask loads it from the default path and shows it to the planner.
    let asked = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .run_in(&dir)
        .ok();
    let prompt = &asked.prompts()[0];
    assert!(
        prompt.contains("Example Question: What is 6*7?"),
        "{prompt}"
    );
    assert!(
        prompt.contains(
            r#"Decision: {"tool": {"name": "calculator", "args": {"expression": "6*7"}}}"#
        ),
        "{prompt}"
    );
    // A file the loader cannot use (the Python reference's own layout) is said and stops
    // the ask, with its own exit code.
    std::fs::write(
        dir.join("opt/plan_demos.json"),
        serde_json::json!([{"question": "q", "state": "[]", "tool_calls": [], "final": "x"}])
            .to_string(),
    )
    .unwrap();
    let asked = Ask::new("What is the capital of Norway?")
        .reply(&final_answer("Oslo"))
        .run_in(&dir);
    assert_eq!(asked.out.status.code(), Some(5), "{}", stderr(&asked.out));
    let said = String::from_utf8_lossy(&asked.out.stdout);
    assert!(
        said.contains("cannot use the demos file") && said.contains("demo 1 of"),
        "{said}"
    );
}

/// "Every ask appends a record to `traces/<id>.jsonl`": an ask Rondo stops (here at `limit`:
/// the model's replies run out) is recorded too, with the steps it made.
#[test]
fn an_ask_stopped_at_limit_still_appends_its_trace_record() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("visit1.json");
    // A reply for the planner's first visit only.
    let replies = serde_json::json!({
        "replies": {"planner": {"1": calc("6*7")}},
        "unreached": ["agent", "summarize"],
    });
    std::fs::write(&script, replies.to_string()).unwrap();
    let asked = Ask::new("What is 6*7?")
        .arg("--script")
        .arg(script.to_str().unwrap())
        .run_in(tmp.path());
    assert_eq!(asked.out.status.code(), Some(3), "{}", stderr(&asked.out));
    let record = asked.record();
    assert_eq!(record["question"], "What is 6*7?");
    assert_eq!(asked.tools(), ["calculator"]);
}
