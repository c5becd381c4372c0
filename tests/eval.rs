//! `rondo eval` through the real binary: per-case results and micro-agent's metrics on a
//! dataset with known outcomes (a passing case, a failing one, one ending at `error`), an
//! empty dataset, located dataset errors, `--resume`, and the reference workflows.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;

use common::{assert_success, json, project, stderr};

/// A tool with object data (for `keys`), an llm reply (the default answer), and an llm
/// role with no scripted reply: a run sent there ends at `error`.
const CALC: &str = r#"
workflow calc {
  prompts = "prompts"
  script = "script.yaml"
  provider = mock
  input question: string
  input fail: bool = false
}
provider mock {
  kind = "scripted"
}
tool lookup {
  executable = "python3 ./lookup.py"
  usage = "lookup: the length of a word"
  timeout = 10s
  input { word: string }
}
role look: tool {
  env = local
  tools = [lookup]
  call = "lookup"
  args = { word: input.question }
}
role reply: llm {
  prompt = "reply.tera"
  output text
}
role unscripted: llm {
  prompt = "reply.tera"
  output text
}
start -> look
look -> unscripted when input.fail
look -> reply otherwise
reply -> done
unscripted -> done
exit done
"#;

const LOOKUP_PY: &str = r#"import json, sys
args = json.loads(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read())
print(json.dumps({"status": "success", "tool_name": "lookup", "data": {"length": len(args["word"])}, "warnings": [], "error": None, "execution_time": 0.0}))
"#;

fn calc_project(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("lookup.py"), LOOKUP_PY).unwrap();
    project(
        dir,
        CALC,
        &[("reply.tera", "Answer {{ input.question }}.\n")],
        "replies:\n  reply: 'The answer is 42.'\n",
    )
}

const CASES: &str = r#"{"id": "pass", "inputs": {"question": "hello"}, "expect": {"contains": "42", "keys": ["length"], "tools": ["lookup"], "checks": ["look.data.length == 5"]}}
{"id": "miss", "inputs": {"question": "abc"}, "expect": {"contains": "nope", "keys": ["missing"], "checks": ["look.data.length == 3"]}}

{"id": "broken", "inputs": {"question": "x", "fail": true}, "expect": {"contains": "answer is"}}
"#;

fn eval(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir)
        .arg("eval")
        .args(args)
        .output()
        .unwrap()
}

fn results(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.collect();
    v.iter().sum::<f64>() / v.len() as f64
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn hits(result: &Value) -> Vec<(String, String, bool)> {
    result["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["expected"].as_str().unwrap().to_string(),
                c["hit"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn every_case_runs_and_the_metrics_follow_from_the_results_field_by_field() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(tmp.path().join("cases.jsonl"), CASES).unwrap();
    let out = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "cases.jsonl",
            "--out",
            "res",
            "-c",
            "2",
        ],
    );
    // A case failed: exit 1, and the table names it.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Not a terminal: one progress line a case, with the running success rate.
    assert!(stderr(&out).contains("[3/3] "), "{}", stderr(&out));
    assert!(stderr(&out).contains("success "), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.contains("success_rate"), "{table}");
    assert!(table.contains("1 passed, 2 failed"), "{table}");
    let res = tmp.path().join("res");
    let rs = results(&res);
    let ids: Vec<&str> = rs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["pass", "miss", "broken"], "dataset order");

    let pass = &rs[0];
    assert_eq!(pass["exit"], "done");
    assert_eq!(pass["passed"], true);
    assert_eq!(pass["score"], 1.0);
    assert_eq!(pass["answer"], "The answer is 42.");
    assert_eq!(
        hits(pass),
        [
            ("contains".into(), "42".into(), true),
            ("key".into(), "length".into(), true),
            ("tool".into(), "lookup".into(), true),
            ("check".into(), "look.data.length == 5".into(), true),
        ]
    );
    // `look` calls `lookup` by name: a helper of the workflow, not a call a model asked for;
    // the one decision is `reply`'s.
    assert_eq!(
        (pass["llm_calls"].as_u64(), pass["tool_calls"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(pass["steps"], 1);

    let miss = &rs[1];
    assert_eq!(miss["exit"], "done");
    assert_eq!(miss["passed"], false);
    // contains and keys missed, tools (none expected) and checks held: 2 of 4 weights.
    assert_eq!(miss["score"], 0.5);
    assert_eq!(miss["contains_hit"], false);
    assert_eq!(miss["key_hit"], false);
    assert_eq!(
        hits(miss),
        [
            ("contains".into(), "nope".into(), false),
            ("key".into(), "missing".into(), false),
            ("check".into(), "look.data.length == 3".into(), true),
        ]
    );

    // Its replies run out: the run ends at `limit` and says why.
    let broken = &rs[2];
    assert_eq!(broken["exit"], "limit");
    assert_eq!(broken["exit_code"], 3);
    assert_eq!(broken["passed"], false);
    assert_eq!(broken["score"], 0.0);
    assert!(
        broken["reason"].as_str().unwrap().contains("no reply"),
        "{broken}"
    );
    // No `answer` declared: the output of the last role run, the tool before the failure.
    assert_eq!(broken["answer"]["tool_name"], "lookup", "{broken}");

    // Each run is a normal run directory, and the result's figures are its own.
    for r in &rs {
        let dir = res.join("runs").join(r["run_id"].as_str().unwrap());
        let info = json(dir.join("run.json"));
        assert_eq!(info["exit"], r["exit"], "{}", r["id"]);
        let state = common::state(&dir);
        assert!(r["steps"].as_u64() <= state["step"].as_u64(), "{}", r["id"]);
        assert_eq!(state["totals"]["llm_calls"], r["llm_calls"]);
        assert!(close(
            state["totals"]["cost"].as_f64().unwrap(),
            r["cost_usd"].as_f64().unwrap()
        ));
    }

    let summary = json(res.join("summary.json"));
    let names: Vec<&str> = summary
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        names,
        [
            "success_rate",
            "contains_hit_rate",
            "key_hit_rate",
            "avg_latency_sec",
            "avg_lm_calls",
            "avg_tool_calls",
            "avg_steps",
            "avg_cost_usd",
            "n"
        ]
    );
    let f = |k: &str| summary[k].as_f64().unwrap();
    let avg = |k: &str| mean(rs.iter().map(|r| r[k].as_f64().unwrap()));
    assert!(close(f("success_rate"), 0.5));
    assert!(close(f("contains_hit_rate"), 1.0 / 3.0));
    assert!(close(f("key_hit_rate"), 2.0 / 3.0));
    assert!(close(f("avg_latency_sec"), avg("latency_sec")));
    assert!(f("avg_latency_sec") > 0.0);
    assert!(close(f("avg_lm_calls"), avg("llm_calls")));
    assert!(close(f("avg_tool_calls"), 0.0));
    assert!(close(f("avg_steps"), avg("steps")));
    assert!(close(f("avg_cost_usd"), avg("cost_usd")));
    assert_eq!(summary["n"], 3);
}

#[test]
fn rubrics_weigh_the_parts_and_give_default_and_per_case_expectations() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(
        tmp.path().join("cases.jsonl"),
        "{\"id\": \"a\", \"inputs\": {\"question\": \"abc\"}}\n{\"id\": \"b\", \"inputs\": {\"question\": \"hello\"}, \"expect\": {\"contains\": \"nope\"}}\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("rubrics.yaml"),
        "contains_weight: 3\nkey_weight: 1\ndefault:\n  contains: \"42\"\n  keys: [length]\ncases:\n  a:\n    checks: ['look.data.length == 4']\n",
    )
    .unwrap();
    let out = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "cases.jsonl",
            "--rubrics",
            "rubrics.yaml",
            "--out",
            "res",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let rs = results(&tmp.path().join("res"));
    // a: default contains and keys hold, its rubric check does not: (3 + 1 + 1 + 0) / 6.
    assert_eq!(
        hits(&rs[0]),
        [
            ("contains".into(), "42".into(), true),
            ("key".into(), "length".into(), true),
            ("check".into(), "look.data.length == 4".into(), false),
        ]
    );
    assert!(close(rs[0]["score"].as_f64().unwrap(), 5.0 / 6.0));
    // b: its own `contains` wins over the default; the default key still holds.
    assert_eq!(hits(&rs[1])[0], ("contains".into(), "nope".into(), false));
    assert!(close(rs[1]["score"].as_f64().unwrap(), 3.0 / 6.0));
}

#[test]
fn an_empty_dataset_gives_zero_metrics_and_n_0() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(tmp.path().join("empty.jsonl"), "\n").unwrap();
    let out = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "empty.jsonl",
            "--out",
            "res",
        ],
    );
    assert_success(&out);
    let summary = json(tmp.path().join("res/summary.json"));
    assert_eq!(summary.as_object().unwrap().len(), 9);
    for (k, v) in summary.as_object().unwrap() {
        assert_eq!(v.as_f64(), Some(0.0), "{k}");
    }
    assert!(results(&tmp.path().join("res")).is_empty());
}

#[test]
fn a_bad_dataset_line_is_located_and_nothing_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(
        tmp.path().join("bad.jsonl"),
        concat!(
            "{\"id\": \"ok\", \"inputs\": {\"question\": \"hi\"}}\n",
            "{\"id\": \"x\" \"inputs\": {}}\n",
            "{\"id\": \"y\", \"inputs\": {\"questoin\": \"hi\"}}\n",
            "{\"id\": \"z\", \"inputs\": {\"question\": \"hi\"}, \"expect\": {\"checks\": [\"look.data.length == \\\"a\\\" +\"], \"tools\": [\"lookp\"]}}\n",
            "{\"id\": \"ok\", \"inputs\": {\"question\": \"hi\"}}\n",
        ),
    )
    .unwrap();
    let out = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "bad.jsonl",
            "--out",
            "res",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for want in [
        "rondo::eval::bad_case",
        "bad.jsonl:2:",
        "this line is not JSON",
        "bad.jsonl:3:",
        "`questoin` is not an input of calc",
        "did you mean `question`?",
        "bad.jsonl:4:",
        "`lookp` is not a tool of calc",
        "check `look.data.length == \"a\" +`",
        "bad.jsonl:5:",
        "two cases have the id \"ok\"",
        "nothing ran",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert!(!tmp.path().join("res").exists(), "nothing ran");
}

#[test]
fn a_check_that_does_not_type_check_is_located_on_its_text() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(
        tmp.path().join("bad.jsonl"),
        "{\"id\": \"a\", \"inputs\": {\"question\": \"hi\"}, \"expect\": {\"checks\": [\"memory.nope\", \"step + 1\"]}}\n",
    )
    .unwrap();
    let out = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "bad.jsonl",
            "--out",
            "res",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    // Located on the check's own text in the line (the unknown name); `step + 1` is not a
    // condition.
    let line = std::fs::read_to_string(tmp.path().join("bad.jsonl")).unwrap();
    let col = line.find("nope").unwrap() + 1;
    assert!(err.contains(&format!("bad.jsonl:1:{col}")), "{err}");
    assert!(err.contains("rondo::memory::unknown"), "{err}");
    assert!(err.contains("rondo::expr::not_bool"), "{err}");
}

#[test]
fn a_bad_rubrics_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(tmp.path().join("cases.jsonl"), CASES).unwrap();
    for rubric in ["key_weigth: 1\n", "key_weight: -1\n"] {
        std::fs::write(tmp.path().join("rubrics.yaml"), rubric).unwrap();
        let out = eval(
            tmp.path(),
            &[
                wf.to_str().unwrap(),
                "--dataset",
                "cases.jsonl",
                "--rubrics",
                "rubrics.yaml",
                "--out",
                "res",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{rubric}");
        assert!(
            stderr(&out).contains("rondo::eval::bad_rubrics"),
            "{}",
            stderr(&out)
        );
        assert!(!tmp.path().join("res").exists());
    }
}

#[test]
fn resume_runs_only_the_cases_without_a_result() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = calc_project(tmp.path());
    std::fs::write(tmp.path().join("cases.jsonl"), CASES).unwrap();
    let out = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "cases.jsonl",
            "--out",
            "res",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let res = tmp.path().join("res");
    let before = results(&res);
    let runs = res.join("runs");
    let events = |id: &str| std::fs::read_to_string(runs.join(id).join("events.jsonl")).unwrap();
    let (pass_events, broken_events) = (events("pass"), events("broken"));
    // `miss` lost its result and its run; `broken` lost only its result (its run finished).
    let kept: String = before
        .iter()
        .filter(|r| r["id"] == "pass")
        .map(|r| format!("{r}\n"))
        .collect();
    std::fs::write(res.join("cases.jsonl"), kept).unwrap();
    std::fs::remove_dir_all(runs.join("miss")).unwrap();

    // Again from the start of the same folder: refused, it says how to continue.
    let again = eval(
        tmp.path(),
        &[
            wf.to_str().unwrap(),
            "--dataset",
            "cases.jsonl",
            "--out",
            "res",
        ],
    );
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("--resume"), "{}", stderr(&again));

    let out = eval(tmp.path(), &["--resume", "res"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let after = results(&res);
    let ids: Vec<&str> = after.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["pass", "miss", "broken"]);
    // `pass` did not run again; `broken` was scored from its finished run.
    assert_eq!(events("pass"), pass_events);
    assert_eq!(events("broken"), broken_events);
    assert!(runs.join("miss/run.json").exists(), "miss ran again");
    for (b, a) in before.iter().zip(&after) {
        for k in [
            "exit",
            "passed",
            "score",
            "checks",
            "steps",
            "llm_calls",
            "answer",
        ] {
            assert_eq!(b[k], a[k], "{} {k}", b["id"]);
        }
    }
    assert_eq!(after[0]["latency_sec"], before[0]["latency_sec"]);
    // Nothing left: a second resume runs nothing and keeps the results.
    let out = eval(tmp.path(), &["--resume", "res"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(results(&res).len(), 3);
    assert_eq!(json(res.join("summary.json"))["n"], 3);
}

#[test]
fn micro_agent_is_evaluated_on_its_dataset_with_its_rubrics() {
    let dir = common::repo_copy();
    let out = eval(
        dir.path(),
        &[
            "workflows/micro_agent.rondo",
            "--provider",
            "scripted",
            "--dataset",
            "workflows/evals/micro_agent.jsonl",
            "--rubrics",
            "workflows/evals/micro_agent_rubrics.yaml",
            "--out",
            "res",
        ],
    );
    assert_success(&out);
    let rs = results(&dir.path().join("res"));
    assert_eq!(rs.len(), 4);
    // The answer is the workflow's `answer = memory.answer`: the mock LM's "ok" or the
    // composed value of a math question.
    let answers: Vec<&str> = rs.iter().map(|r| r["answer"].as_str().unwrap()).collect();
    assert_eq!(answers, ["5", "42", "ok", "ok"]);
    for r in &rs {
        assert_eq!(r["passed"], true, "{r}");
        // The rubric's default check is added to every case.
        assert!(
            hits(r).contains(&("check".into(), "ended.exit == \"answered\"".into(), true)),
            "{r}"
        );
    }
    let summary = json(dir.path().join("res/summary.json"));
    assert_eq!(summary["success_rate"], 1.0);
    assert_eq!(summary["n"], 4);
}

#[test]
fn ds_star_is_evaluated_by_the_output_of_its_last_role() {
    let dir = common::repo_copy();
    let out = eval(
        dir.path(),
        &[
            "workflows/ds_star.rondo",
            "--provider",
            "scripted",
            "--dataset",
            "workflows/evals/ds_star.jsonl",
            "--out",
            "res",
        ],
    );
    assert_success(&out);
    let rs = results(&dir.path().join("res"));
    // No `answer` declared: the finalyzer's reply, the last role before `success`.
    assert_eq!(rs[0]["answer"], "Created hello.txt in the run directory.");
    assert!(hits(&rs[0]).iter().all(|h| h.2), "{}", rs[0]);
}

#[test]
fn eval_help_examples_work_as_written() {
    let examples = common::help_examples("eval");
    assert!(examples.len() >= 3, "{examples:?}");
    let dir = common::repo_copy();
    for line in &examples {
        assert!(line.starts_with("rondo eval "), "{line}");
        let out = common::run_example(dir.path(), line);
        assert!(out.status.success(), "`{line}`: {}", stderr(&out));
    }
}

/// Ctrl-C stops the runs going on and records no result for them; `--resume` continues the
/// interrupted run (not a new one) and records its result.
#[test]
fn an_interrupted_eval_resumes_its_interrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    // The tool works in its run's workspace (local tools are confined to it).
    let workflow = r#"
workflow slow {
  input question: string
}
role wait: tool {
  command = ["python3", "-c", "import os, time; open('started', 'a').close(); d = time.time() + 60; [time.sleep(0.02) for _ in iter(lambda: os.path.exists('go') or time.time() > d, True)]; print('through' if os.path.exists('go') else 'timed out')"]
}
start -> wait
wait -> done
exit done
"#;
    let wf = project(tmp.path(), workflow, &[], "replies: {}\n");
    std::fs::write(
        tmp.path().join("cases.jsonl"),
        "{\"id\": \"slow\", \"inputs\": {\"question\": \"q\"}, \"expect\": {\"checks\": [\"contains(wait.stdout, \\\"through\\\")\"]}}\n",
    )
    .unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(tmp.path())
        .args([
            "eval",
            wf.to_str().unwrap(),
            "--dataset",
            "cases.jsonl",
            "--out",
            "res",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let workspace = tmp.path().join("res/runs/slow/workspace");
    let started = workspace.join("started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(started.exists(), "the tool never started");
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(table.contains("1 unfinished"), "{table}");
    let res = tmp.path().join("res");
    assert!(results(&res).is_empty());
    assert_eq!(
        json(res.join("runs/slow/run.json"))["status"],
        "interrupted"
    );

    std::fs::write(workspace.join("go"), "").unwrap();
    let out = eval(tmp.path(), &["--resume", "res"]);
    assert_success(&out);
    let rs = results(&res);
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0]["passed"], true, "{}", rs[0]);
    let events = std::fs::read_to_string(res.join("runs/slow/events.jsonl")).unwrap();
    assert!(events.contains("\"run_resumed\""), "{events}");
}

/// micro-agent's evals count "the agent's decisions and the tool calls the model asked
/// for": in the JSON loop the planner's turns and its tools, natively the model's turns and
/// its calls; not the engine's roles (classify, observe, record...) nor the helper tools
/// (`load_demos`, `compose_answer`).
#[test]
fn micro_agent_steps_and_tool_calls_are_the_agents_decisions_and_calls() {
    let dir = common::repo_copy();
    std::fs::write(
        dir.path().join("cases.jsonl"),
        concat!(
            r#"{"id": "loop", "inputs": {"question": "What is 6*7?", "llm_provider": "ollama"}, "expect": {"contains": "42"}}"#,
            "\n",
            r#"{"id": "native", "inputs": {"question": "What is 6*7?", "llm_provider": "openai"}, "expect": {"contains": "42"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let calc = r#"{"tool": {"name": "calculator", "args": {"expression": "6*7"}}}"#;
    let native = r#"{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}, {"name": "calculator", "arguments": {"expr": "6*7"}}]}"#;
    let script = serde_json::json!({"replies": {
        "planner": [calc, r#"{"final": {"answer": "42"}}"#],
        "agent": [native, "It is 42."],
    }});
    std::fs::write(dir.path().join("script.json"), script.to_string()).unwrap();
    let out = eval(
        dir.path(),
        &[
            "workflows/micro_agent.rondo",
            "--provider",
            "scripted",
            "--script",
            "script.json",
            "--dataset",
            "cases.jsonl",
            "--out",
            "res",
        ],
    );
    assert_success(&out);
    let rs = results(&dir.path().join("res"));
    let figures: Vec<(String, u64, u64)> = rs
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["steps"].as_u64().unwrap(),
                r["tool_calls"].as_u64().unwrap(),
            )
        })
        .collect();
    // loop: two planner turns, one calculator call. native: two model turns, two calls asked
    // for (one refused by the schema), compose_answer not counted.
    assert_eq!(
        figures,
        [("loop".to_string(), 2, 1), ("native".to_string(), 2, 2)]
    );
}
