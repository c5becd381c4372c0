//! The reference systems' contracts, asserted field by field on real runs: each
//! workflow's own `test` block is run by the interpreter, then its run directory and
//! `events.jsonl` are checked against the reference document.

use std::path::Path;

use rondo::check::{self, CheckOptions, Checked};
use rondo::compile;
use rondo::run::testing::{TestReport, run_test};
use rondo::source::SourceFile;
use serde_json::Value;

mod common;

use common::{events, json, keys};

fn workflow(name: &str) -> Checked {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workflows")
        .join(format!("{name}.rondo"));
    let file = SourceFile::read(&path).unwrap();
    match check::load(&file, &CheckOptions { offline: true }).checked {
        Ok(wf) => wf,
        Err(_) => panic!("{name} does not pass check"),
    }
}

fn run(wf: &Checked, test: &str, root: &Path) -> TestReport {
    let case = wf
        .tests
        .iter()
        .find(|t| t.name.starts_with(test))
        .unwrap_or_else(|| panic!("no test {test:?}"));
    let report = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(run_test(wf, case, root));
    assert!(
        report.passed(),
        "{test}: {:?} (run dir {})",
        report.failures,
        report.run_dir.display()
    );
    report
}

/// The parsed replies of one llm role, in order.
fn replies(events: &[Value], role: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event"] == "parsed_output" && e["role"] == role)
        .map(|e| e["output"].clone())
        .collect()
}

fn role_order(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "role_start")
        .map(|e| e["role"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn ds_star_hello_writes_every_artifact_with_the_reference_contracts() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("ds_star");
    let dir = run(&wf, "hello.txt", tmp.path()).run_dir;
    for file in [
        "run_metadata.json",
        "descriptions.json",
        "plan.json",
        "round_00_prompt.txt",
        "round_00_code.py",
        "round_00_exec.json",
        "final_answer.md",
    ] {
        assert!(dir.join("workspace").join(file).is_file(), "missing {file}");
    }
    // The coder's script ran for real with python3 in the run directory.
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace").join("hello.txt")).unwrap(),
        "hello"
    );
    let plan = json(dir.join("workspace").join("plan.json"));
    let steps = plan.as_array().unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(keys(&steps[0]), ["details", "id", "status", "title"]);
    assert_eq!(steps[0]["id"], 1);
    assert_eq!(steps[0]["title"], "Write hello.txt");
    let exec = json(dir.join("workspace").join("round_00_exec.json"));
    assert_eq!(exec["exit_code"], 0);
    assert!(exec["stdout"].as_str().unwrap().contains("wrote hello.txt"));
    assert!(
        std::fs::read_to_string(dir.join("workspace").join("round_00_code.py"))
            .unwrap()
            .contains("write_text('hello'")
    );
    assert!(
        std::fs::read_to_string(dir.join("workspace").join("round_00_prompt.txt"))
            .unwrap()
            .contains("Write hello.txt")
    );
    let ev = events(&dir);
    let verdicts = replies(&ev, "verifier");
    assert_eq!(verdicts.len(), 1);
    assert_eq!(
        keys(&verdicts[0]),
        ["missing", "next_action", "reason", "sufficient"]
    );
    assert_eq!(verdicts[0]["sufficient"], true);
    assert_eq!(verdicts[0]["next_action"], "stop");
    assert!(verdicts[0]["missing"].is_array());
    assert!(
        json(dir.join("workspace").join("descriptions.json")).is_object()
            || json(dir.join("workspace").join("descriptions.json")).is_array()
    );
}

#[test]
fn ds_star_failed_execution_goes_to_the_debugger_without_a_verifier_call() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("ds_star");
    let dir = run(&wf, "failing script", tmp.path()).run_dir;
    let ev = events(&dir);
    let order = role_order(&ev);
    let first_exec = order.iter().position(|r| r == "executor").unwrap();
    assert_eq!(order[first_exec + 1], "debugger", "{order:?}");
    // The failing execution is followed by no verifier LLM call before the debugger's.
    let failed_at = ev
        .iter()
        .position(|e| {
            e["event"] == "tool_call" && e["role"] == "executor" && e["result"]["ok"] == false
        })
        .unwrap();
    let debugger_at = ev
        .iter()
        .position(|e| e["event"] == "role_start" && e["role"] == "debugger")
        .unwrap();
    assert!(
        !ev[failed_at..debugger_at]
            .iter()
            .any(|e| e["event"] == "llm_response" && e["role"] == "verifier")
    );
    assert_ne!(ev[failed_at]["result"]["exit_code"], 0);
}

#[test]
fn ds_star_router_backtrack_truncates_the_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("ds_star");
    let dir = run(&wf, "router backtrack", tmp.path()).run_dir;
    let ev = events(&dir);
    let routers = replies(&ev, "router");
    assert_eq!(keys(&routers[1]), ["action", "backtrack_to_step_id"]);
    assert_eq!(routers[1]["action"], "backtrack");
    let back = ev
        .iter()
        .find(|e| e["event"] == "route" && e["backtrack"] == true)
        .expect("a backtrack route");
    assert_eq!(back["to"][0], "truncate_plan");
    let plan = json(dir.join("workspace").join("plan.json"));
    assert_eq!(plan.as_array().unwrap().len(), 2);
    assert_eq!(plan[1]["title"], "Compute the mean");
}

fn micro_trace(dir: &Path) -> Vec<Value> {
    let traces = std::fs::read_dir(dir.join("workspace").join("traces"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_to_string(traces)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn micro_agent_trace_records_and_steps_have_the_reference_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("micro_agent");
    let dir = run(&wf, "math question", tmp.path()).run_dir;
    let trace = micro_trace(&dir);
    assert_eq!(trace.len(), 1, "one record per ask");
    let record = &trace[0];
    assert_eq!(keys(record), ["answer", "id", "question", "steps", "ts"]);
    assert!(record["ts"].as_str().unwrap().ends_with('Z'));
    let steps = record["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    for step in steps {
        assert_eq!(keys(step), ["args", "observation", "tool"]);
    }
    assert_eq!(steps[0]["tool"], "calculator");
}

#[test]
fn micro_agent_validation_errors_and_policy_violations_are_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("micro_agent");
    let dir = run(&wf, "invalid tool arguments", tmp.path()).run_dir;
    let steps = micro_trace(&dir)[0]["steps"].as_array().unwrap().clone();
    assert_eq!(steps[0]["tool"], "⛔️validation_error");
    // The tool never ran for the invalid call: its tool_call has no exit code.
    let ev = events(&dir);
    let first_call = ev.iter().find(|e| e["event"] == "tool_call").unwrap();
    assert_eq!(first_call["result"]["error_kind"], "validation");
    assert!(first_call["result"]["exit_code"].is_null());

    let dir = run(&wf, "finalizing a math question without", tmp.path()).run_dir;
    let steps = micro_trace(&dir)[0]["steps"].as_array().unwrap().clone();
    assert!(
        steps.iter().any(|s| s["tool"] == "⛔️policy_violation"),
        "{steps:?}"
    );
}

#[test]
fn iter_uses_its_profiles_rejects_by_default_and_shows_only_the_log_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("iter");
    let dir = run(&wf, "default REJECT", tmp.path()).run_dir;
    let ev = events(&dir);
    let profile_of = |role: &str| {
        ev.iter()
            .find(|e| e["event"] == "llm_response" && e["role"] == role)
            .map(|e| e["profile"].as_str().unwrap().to_string())
    };
    // The test runs every llm role on the scripted provider, so the profiles are checked
    // on the compiled workflow: planning and execution differ.
    let provider_of = |role: &str| {
        let node = wf.find_node(role).unwrap();
        match &wf.role(node).unwrap().kind {
            compile::RoleKind::Llm(l) => wf.providers[l.provider].name().to_string(),
            _ => unreachable!(),
        }
    };
    assert_eq!(provider_of("architect"), "planning");
    assert_eq!(provider_of("worker"), "execution");
    assert_eq!(provider_of("validator"), "validation");
    assert_eq!(profile_of("worker").as_deref(), Some("scripted"));
    // Build output goes to a log file; the prompt sees pass/fail and at most 30 lines.
    let builds: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "tool_call" && e["role"] == "build")
        .collect();
    assert!(!builds.is_empty());
    for b in &builds {
        let log = b["result"]["log"].as_str().expect("a log file");
        assert!(dir.join("workspace").join(log).is_file(), "{log}");
        let shown = b["result"]["shown"].as_str().unwrap();
        assert!(
            shown.starts_with("PASS") || shown.starts_with("FAIL"),
            "{shown}"
        );
        assert!(
            shown.lines().count() <= 31,
            "{} lines shown",
            shown.lines().count()
        );
    }
    // A validator's claimed pass on a failing build was rejected: the worker ran again.
    let order = role_order(&ev);
    assert_eq!(
        order.iter().filter(|r| *r == "worker").count(),
        2,
        "{order:?}"
    );
}

#[test]
fn iter_exits_only_on_indicators_and_signal_together() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("iter");
    let done = run(&wf, "one step", tmp.path());
    assert!(done.run_dir.join("workspace/summary.md").is_file());
    let info = json(done.run_dir.join("run.json"));
    assert_eq!(info["exit"], "done");
    let other = run(&wf, "an exit signal alone", tmp.path());
    assert_eq!(json(other.run_dir.join("run.json"))["exit"], "incomplete");
}

#[test]
fn catmaster_tool_results_and_task_state_have_the_reference_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("catmaster");
    let dir = run(&wf, "one task", tmp.path()).run_dir;
    let ev = events(&dir);
    let calls: Vec<&Value> = ev.iter().filter(|e| e["event"] == "tool_call").collect();
    assert!(!calls.is_empty());
    for call in &calls {
        let r = &call["result"];
        for field in [
            "status",
            "tool_name",
            "data",
            "warnings",
            "error",
            "execution_time",
        ] {
            assert!(r.get(field).is_some(), "tool result lacks `{field}`: {r}");
        }
        assert!(r["status"] == "success" || r["status"] == "failed");
        assert!(r["warnings"].is_array());
        assert!(r["execution_time"].is_number());
    }
    // task_state.json is rewritten after every step, whatever the role.
    let steps = ev.iter().filter(|e| e["event"] == "role_start").count();
    let writes = ev
        .iter()
        .filter(|e| e["event"] == "artifact" && e["file"] == ".catmaster/task_state.json")
        .count();
    assert_eq!(writes, steps);
    let state = json(dir.join("workspace").join(".catmaster/task_state.json"));
    for field in ["user_request", "plan", "tasks", "observations", "status"] {
        assert!(
            state.get(field).is_some(),
            "task_state.json lacks `{field}`"
        );
    }
    assert_eq!(state["status"], "completed");
    let board =
        std::fs::read_to_string(dir.join("workspace").join(".catmaster/whiteboard.md")).unwrap();
    assert!(board.contains("structures/molecules/CO.xyz"));
}

#[test]
fn llm_ide_reflects_then_acts_with_the_template_bad_action_chooses() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = workflow("llm_ide");
    let dir = run(&wf, "bad_action true", tmp.path()).run_dir;
    let ev = events(&dir);
    let order = role_order(&ev);
    let reflections = replies(&ev, "reflect");
    // After each reflection, the act role is the one its bad_action chooses.
    let mut r = 0;
    for (i, role) in order.iter().enumerate() {
        if role == "reflect" {
            let next = &order[i + 1];
            let bad = reflections[r]["bad_action"] == true;
            assert_eq!(
                next,
                if bad { "act_alternative" } else { "act_next" },
                "{order:?}"
            );
            r += 1;
        }
    }
    assert!(r >= 2);
    let prompt_of = |role: &str| {
        ev.iter()
            .find(|e| e["event"] == "llm_response" && e["role"] == role)
            .map(|e| e["prompt"].as_str().unwrap().to_string())
            .unwrap()
    };
    let alternative = prompt_of("act_alternative");
    let next = prompt_of("act_next");
    assert_ne!(alternative, next);
    for prompt in [&alternative, &next] {
        let at = |h: &str| {
            prompt
                .find(h)
                .unwrap_or_else(|| panic!("no {h} in:\n{prompt}"))
        };
        assert!(at("## Task Description") < at("## Code Context"));
        assert!(at("## Code Context") < at("## Operation History"));
        assert!(at("## Operation History") < at("## Tool Usage"));
        assert!(at("## Tool Usage") < at("## Lessons Learned"));
        assert!(at("## Lessons Learned") < at("## Response Format"));
    }
}
