//! `../shared/reference/catmaster.md`, rule by rule, on real runs of
//! `workflows/catmaster.rondo` (the `rondo` binary, the built-in scripted provider, the
//! Python tools of `tools/catmaster/`), in a `--workspace` folder as a CatMaster user works.
//! The workflow's own `test` blocks cover one task, a corrected payload and a failed task;
//! these go further: every tool's result field by field, whiteboard batches the rules
//! refuse, the whiteboard and the run history across runs, the system view out of the
//! tools' reach, batch mapping collisions, host paths in tool messages, and how
//! `task_state.json` ends whatever ends the run.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common;

struct Run {
    out: std::process::Output,
    /// The run's system area, `WS/.rondo/runs/<id>`.
    system: PathBuf,
    ws: PathBuf,
}

impl Run {
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }

    fn events(&self) -> Vec<Value> {
        common::events(&self.system)
    }

    fn info(&self) -> Value {
        common::json(self.system.join("run.json"))
    }

    fn task_state(&self) -> Value {
        common::json(self.ws.join(".catmaster/task_state.json"))
    }

    fn whiteboard(&self) -> String {
        std::fs::read_to_string(self.ws.join(".catmaster/whiteboard.md")).unwrap()
    }

    /// Tool results in call order (the journal's `tool_call` events).
    fn tool_results(&self) -> Vec<Value> {
        common::of_kind(&self.events(), "tool_call")
            .into_iter()
            .map(|e| e["result"].clone())
            .collect()
    }

    /// The prompts an llm role was sent, attempts included, in order.
    fn prompts(&self, role: &str) -> Vec<String> {
        common::prompts_to(&self.events(), role)
    }
}

/// Runs CatMaster in the workspace `ws` as run `id`; `replies` is the scripted provider's
/// `replies:` map, written beside the workspace (out of the tools' sight).
fn catmaster(ws: &Path, id: &str, request: &str, replies: Value, extra: &[&str]) -> Run {
    std::fs::create_dir_all(ws).unwrap();
    let script = ws.parent().unwrap().join(format!("{id}.script.json"));
    // JSON is YAML: the script file takes it as it is. A role a test gives no reply is one
    // its run is written not to reach (a run that reaches it ends at `limit`).
    let unreached: Vec<&str> = ["planner", "task_runner", "summarizer"]
        .into_iter()
        .filter(|r| replies.get(r).is_none())
        .collect();
    let script_text = json!({ "replies": replies, "unreached": unreached }).to_string();
    std::fs::write(&script, script_text).unwrap();
    let workflow = common::root().join("workflows/catmaster.rondo");
    let request = format!("request={request}");
    let mut args = vec![
        "run",
        "-q",
        workflow.to_str().unwrap(),
        "--provider",
        "scripted",
        "--script",
        script.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--run-id",
        id,
        "--input",
        &request,
    ];
    args.extend(extra);
    let out = common::rondo(&args);
    Run {
        out,
        system: ws.join(".rondo/runs").join(id),
        ws: ws.to_path_buf(),
    }
}

fn plan(tasks: &[(&str, &str)], ops: Value) -> String {
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|(id, goal)| json!({"id": id, "goal": goal, "deliverables": []}))
        .collect();
    json!({"summary": "plan", "tasks": tasks, "whiteboard_ops": ops}).to_string()
}

fn call(tool: &str, params: Value) -> String {
    json!({"action": "call_tool", "reason": "next step", "tool": tool, "params": params, "whiteboard_ops": []})
        .to_string()
}

fn finish(ops: Value) -> String {
    json!({"action": "finish_task", "reason": "done", "summary": "task done", "outputs": [], "whiteboard_ops": ops})
        .to_string()
}

/// The task runner's replies, visit by visit.
fn visits(replies: &[String]) -> Value {
    Value::Object(
        replies
            .iter()
            .enumerate()
            .map(|(i, r)| ((i + 1).to_string(), Value::String(r.clone())))
            .collect(),
    )
}

fn assert_exit(run: &Run, exit: &str, code: i32) {
    assert_eq!(
        run.info()["exit"],
        exit,
        "{}\n{}",
        common::stderr(&run.out),
        run.info()["reason"]
    );
    assert_eq!(run.code(), code);
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// An extended-XYZ file of `n` hydrogen atoms on a line.
fn xyz(n: usize) -> String {
    let mut s = format!("{n}\nLattice=\"10 0 0 0 10 0 0 0 10\"\n");
    for i in 0..n {
        s.push_str(&format!("H 0.0 0.0 {}.0\n", i));
    }
    s
}

// ---- §3 Tools return standardized outputs ------------------------------------------------

/// Every tool, succeeding and failing (its own failure and a payload Rondo refuses), returns
/// `{status, tool_name, data, warnings, error, execution_time}`, and the task runner's
/// observation in task_state.json records each field as the tool gave it.
#[test]
fn every_tool_result_has_the_standard_shape_field_by_field() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let calls = [
        (
            "build_molecule",
            json!({"molecule": "CO", "output_dir": "structures/molecules"}),
        ),
        (
            "write_file",
            json!({"path": "notes/a.md", "content": "a = 3.92 Å"}),
        ),
        ("read_file", json!({"path": "notes/a.md"})),
        ("list_files", json!({"pattern": "*.xyz"})),
        (
            "xyz_summary_batch",
            json!({"input_dir": "structures", "output_dir": "outputs/xyz"}),
        ),
        ("read_file", json!({"path": "missing.txt"})),
        ("build_molecule", json!({"molecule": "C6H6"})),
    ];
    let mut runner: Vec<String> = calls.iter().map(|(t, p)| call(t, p.clone())).collect();
    runner.push(finish(json!([])));
    let run = catmaster(
        &ws,
        "tools",
        "Build CO and summarize it",
        json!({"planner": plan(&[("T1", "build and summarize")], json!([])), "task_runner": visits(&runner), "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let results = run.tool_results();
    assert_eq!(results.len(), calls.len());
    let observations = run.task_state()["observations"].as_array().unwrap().clone();
    assert_eq!(observations.len(), calls.len());
    for ((tool, params), (result, obs)) in calls.iter().zip(results.iter().zip(&observations)) {
        for (name, r) in [("journal", result), ("observation", obs)] {
            assert!(
                r["status"] == "success" || r["status"] == "failed",
                "{name} {tool}: {r}"
            );
            assert_eq!(r["tool_name"], *tool, "{name}: {r}");
            assert!(
                r["warnings"]
                    .as_array()
                    .is_some_and(|w| w.iter().all(Value::is_string))
            );
            assert!(
                r["execution_time"].as_f64().is_some_and(|t| t >= 0.0),
                "{name}: {r}"
            );
            match r["status"].as_str() {
                Some("success") => assert!(r["error"].is_null(), "{name}: {r}"),
                _ => assert!(
                    r["error"].as_str().is_some_and(|e| !e.is_empty()),
                    "{name}: {r}"
                ),
            }
        }
        // The observation is the reference's tool-call record: a dict payload, the params.
        assert!(obs["data"].is_object(), "{obs}");
        assert_eq!(obs["params"], *params);
        assert_eq!(obs["task"]["id"], "T1");
        for field in ["status", "tool_name", "warnings", "error"] {
            assert_eq!(obs[field], result[field], "`{field}` of {tool}");
        }
    }
    let ok: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        ok,
        [
            "success", "success", "success", "success", "success", "failed", "failed"
        ]
    );
    // Workspace-relative paths that point at real files (§4 rule 3, §5.4).
    assert_eq!(results[0]["data"]["xyz_rel"], "structures/molecules/CO.xyz");
    assert!(ws.join("structures/molecules/CO.xyz").is_file());
    assert_eq!(results[2]["data"]["content"], "a = 3.92 Å");
    assert_eq!(
        results[3]["data"]["files"],
        json!(["structures/molecules/CO.xyz"])
    );
    let summary = results[4]["data"]["summary_json_rel"].as_str().unwrap();
    assert!(ws.join(summary).is_file());
    assert_eq!(results[4]["data"]["counts"]["summarized"], 1);
    // A tool's own failure vs a payload refused before the tool ran.
    assert_eq!(results[5]["error_kind"], "tool");
    assert_eq!(results[6]["error_kind"], "validation");
}

/// §5.1: "ToolExecutor rejects extra fields strictly". A payload with a field the tool's
/// schema lacks is refused by Rondo before any process starts (`error_kind: validation`,
/// no exit code, nothing written), at any depth of the payload; the task runner sees the
/// failure as an observation and its corrected call goes through.
#[test]
fn an_extra_field_is_refused_before_the_tool_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let calls = [
        (
            "write_file",
            json!({"path": "notes/x.md", "content": "x", "mode": "w"}),
        ),
        ("build_molecule", json!({"molecule": "CO", "size": 15})),
        ("list_files", json!({"path": ".", "recursive": true})),
        ("write_file", json!({"path": "notes/x.md", "content": "x"})),
    ];
    let mut runner: Vec<String> = calls.iter().map(|(t, p)| call(t, p.clone())).collect();
    runner.push(finish(json!([])));
    let run = catmaster(
        &ws,
        "strict",
        "write a note",
        json!({"planner": plan(&[("T1", "note")], json!([])), "task_runner": visits(&runner), "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let results = run.tool_results();
    for (r, field) in results[..3].iter().zip(["mode", "size", "recursive"]) {
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["error_kind"], "validation", "{r}");
        assert!(r["exit_code"].is_null(), "no process ran: {r}");
        assert!(r["error"].as_str().unwrap().contains(field), "{r}");
    }
    assert!(!ws.join("structures").exists(), "build_molecule ran");
    assert_eq!(results[3]["status"], "success");
    assert_eq!(std::fs::read_to_string(ws.join("notes/x.md")).unwrap(), "x");
    // The refusals are observations the next prompt shows, with the reason.
    let prompts = run.prompts("task_runner");
    let reason = results[0]["error"].as_str().unwrap();
    assert!(prompts[1].contains(reason), "{}", prompts[1]);
}

// ---- §7 Whiteboard: ops, rules, stable IDs ---------------------------------------------------

/// A batch the whiteboard's rules refuse goes back to the model with the reason, as a
/// batch of the wrong shape does; the corrected reply is applied, the refused one never.
#[test]
fn a_refused_whiteboard_batch_goes_back_to_the_model_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "outside",
            json!({"op": "UPSERT", "section": "Key Files", "id": "FILE-1", "path": "../outside.xyz", "text": "BAD"}),
            "climbs out of the workspace",
        ),
        (
            "absolute",
            json!({"op": "UPSERT", "section": "Key Files", "id": "FILE-1", "path": "/etc/passwd", "text": "BAD"}),
            "absolute",
        ),
        (
            "system",
            json!({"op": "UPSERT", "section": "Key Files", "id": "FILE-1", "path": ".catmaster/task_state.json", "text": "BAD"}),
            ".catmaster",
        ),
        (
            "prefix",
            json!({"op": "UPSERT", "section": "Facts", "id": "FILE-3", "text": "BAD"}),
            "is not of the form FACT-<number>",
        ),
        (
            "unknown_id",
            json!({"op": "DEPRECATE", "section": "Facts", "id": "FACT-7", "reason": "BAD"}),
            "no entry `FACT-7`",
        ),
        (
            "system_upper",
            json!({"op": "UPSERT", "section": "Key Files", "id": "FILE-1", "path": ".CATMASTER/x", "text": "BAD"}),
            ".catmaster",
        ),
        (
            "system_mixed",
            json!({"op": "UPSERT", "section": "Key Files", "id": "FILE-1", "path": "structures/../.CatMaster/task_state.json", "text": "BAD"}),
            ".catmaster",
        ),
        (
            "section",
            json!({"op": "UPSERT", "section": "Results", "text": "BAD"}),
            "Results",
        ),
    ];
    let good = json!([{"op": "UPSERT", "section": "Facts", "id": "FACT-1", "text": "GOOD fact"}]);
    for (name, bad, reason) in cases {
        let ws = tmp.path().join(name);
        // The planner's first attempt carries the bad op; its retry, the good one.
        let planner =
            json!({"1": [plan(&[("T1", "t")], json!([bad])), plan(&[("T1", "t")], good.clone())]});
        let run = catmaster(
            &ws,
            name,
            "record a fact",
            json!({"planner": planner, "task_runner": finish(json!([])), "summarizer": "ok"}),
            &[],
        );
        assert_exit(&run, "completed", 0);
        let rejected = common::of_kind(&run.events(), "invalid_output");
        assert_eq!(rejected.len(), 1, "{name}");
        let error = rejected[0]["error"].as_str().unwrap();
        assert!(error.contains(reason), "{name}: {error}");
        let prompts = run.prompts("planner");
        assert_eq!(prompts.len(), 2, "{name}");
        assert!(
            prompts[1].contains("rejected") && prompts[1].contains(reason),
            "{name}: the retry's prompt does not carry the reason"
        );
        let board = run.whiteboard();
        assert!(board.contains("FACT-1: GOOD fact"), "{name}: {board}");
        assert!(!board.contains("BAD"), "{name}: {board}");
    }

    // The task runner's batches are held to the same rules.
    let ws = tmp.path().join("runner");
    let bad = json!([{"op": "UPSERT", "section": "Key Files", "path": "../../etc/passwd", "text": "BAD"}]);
    let ok = json!([{"op": "UPSERT", "section": "Key Files", "path": "./out/../structures/CO.xyz", "text": "CO"}]);
    let run = catmaster(
        &ws,
        "runner",
        "record a file",
        json!({"planner": plan(&[("T1", "t")], json!([])), "task_runner": {"1": [finish(bad), finish(ok)]}, "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "completed", 0);
    assert!(
        run.whiteboard()
            .contains("FILE-1: `structures/CO.xyz` — CO")
    );
    assert_eq!(common::of_kind(&run.events(), "invalid_output").len(), 1);

    // A model that never gets it right ends the run at `invalid_output` (code 4), not at
    // `error`, and task_state.json says so.
    let ws = tmp.path().join("stubborn");
    let bad = plan(
        &[("T1", "t")],
        json!([{"op": "DEPRECATE", "section": "Facts", "id": "FACT-9"}]),
    );
    let run = catmaster(
        &ws,
        "stubborn",
        "never right",
        json!({"planner": bad, "task_runner": finish(json!([])), "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "invalid_output", 4);
    assert_eq!(common::of_kind(&run.events(), "invalid_output").len(), 3);
    let state = run.task_state();
    assert_eq!(state["status"], "invalid_output");
    assert!(state["reason"].as_str().unwrap().contains("planner"));
}

/// Stable IDs: UPSERT of an existing ID replaces it, an op without an ID gets the next
/// number, DEPRECATE keeps the entry (struck through, with its reason and successor),
/// Key Files paths are workspace-relative; the system area's whiteboard.md and the
/// workspace's are the same text, written as UTF-8.
#[test]
fn whiteboard_ids_are_stable_and_only_ops_change_it() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let planner = plan(
        &[("T1", "t")],
        json!([
            {"op": "UPSERT", "section": "Facts", "id": "FACT-1", "text": "a = 3.92 Å"},
            {"op": "UPSERT", "section": "Constraints", "text": "ENCUT ≥ 400 eV"}
        ]),
    );
    let runner = finish(json!([
        {"op": "UPSERT", "section": "Constraints", "id": "constraint-01", "text": "ENCUT ≥ 450 eV"},
        {"op": "UPSERT", "section": "Facts", "text": "a = 3.97 Å (PBE)"},
        {"op": "DEPRECATE", "section": "Facts", "id": "FACT-1", "reason": "wrong functional", "superseded_by": "FACT-2"},
        {"op": "UPSERT", "section": "Key Files", "path": "./structures/../structures/CO.xyz", "text": "CO"}
    ]));
    let run = catmaster(
        &ws,
        "ids",
        "lattice a = 3.92 Å",
        json!({"planner": planner, "task_runner": runner, "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let board = run.whiteboard();
    assert_eq!(
        board,
        "# Whiteboard

## Facts

- FACT-2: a = 3.97 Å (PBE)
- ~~FACT-1: a = 3.92 Å~~ (deprecated: wrong functional; superseded by FACT-2)

## Key Files

- FILE-1: `structures/CO.xyz` — CO

## Constraints

- CONSTRAINT-1: ENCUT ≥ 450 eV
"
    );
    assert_eq!(
        std::fs::read_to_string(run.system.join("whiteboard.md")).unwrap(),
        board
    );
    // JSON is written as UTF-8, never as \u escapes (§8).
    let raw = std::fs::read_to_string(ws.join(".catmaster/task_state.json")).unwrap();
    assert!(raw.contains("Å") && !raw.contains("\\u00c5"));
}

// ---- §1, §4: durable workspace and whiteboard, system view vs user view ------------------

/// In a `--workspace` folder the whiteboard lasts from run to run (the second run's planner
/// sees the first run's entries and can deprecate them, numbering goes on), each run's
/// records sit in the system view, task_state.json lists the runs, and no tool reaches the
/// system view (`.rondo/`, `.catmaster/`), by listing or by name.
#[test]
fn workspace_and_whiteboard_last_across_runs_the_system_view_stays_out_of_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("project");
    let first = catmaster(
        &ws,
        "r1",
        "Build CO",
        json!({
            "planner": plan(&[("T1", "build CO")], json!([{"op": "UPSERT", "section": "Facts", "text": "CO bond 1.128 Å"}])),
            "task_runner": visits(&[
                call("build_molecule", json!({"molecule": "CO"})),
                finish(json!([{"op": "UPSERT", "section": "Key Files", "path": "structures/molecules/CO.xyz", "text": "CO"}])),
            ]),
            "summarizer": "CO built",
        }),
        &[],
    );
    assert_exit(&first, "completed", 0);

    let second = catmaster(
        &ws,
        "r2",
        "Check CO",
        json!({
            "planner": plan(&[("T1", "check")], json!([
                {"op": "DEPRECATE", "section": "Facts", "id": "FACT-1", "reason": "re-measured"},
                {"op": "UPSERT", "section": "Facts", "text": "CO bond 1.130 Å"}
            ])),
            "task_runner": visits(&[
                call("list_files", json!({"pattern": "*"})),
                call("read_file", json!({"path": ".rondo/runs/r1/events.jsonl"})),
                call("read_file", json!({"path": "structures/../.rondo/memory/catmaster.json"})),
                call("read_file", json!({"path": ".catmaster/task_state.json"})),
                call("list_files", json!({"path": ".rondo"})),
                finish(json!([])),
            ]),
            "summarizer": "checked",
        }),
        &[],
    );
    assert_exit(&second, "completed", 0);
    // The second run started from the first run's whiteboard.
    let prompt = &second.prompts("planner")[0];
    assert!(prompt.contains("[FACT-1] CO bond 1.128 Å"), "{prompt}");
    assert!(prompt.contains("`structures/molecules/CO.xyz`"), "{prompt}");
    let board = second.whiteboard();
    assert!(board.contains("- FACT-2: CO bond 1.130 Å"), "{board}");
    assert!(board.contains("~~FACT-1: CO bond 1.128 Å~~ (deprecated: re-measured)"));
    assert!(board.contains("FILE-1: `structures/molecules/CO.xyz`"));
    let carried = common::of_kind(&second.events(), "durable_memory");
    assert_eq!(carried[0]["loaded"], json!(["board", "runs"]));

    // Every run's records, in the system view; task_state.json carries the history.
    for run in [&first, &second] {
        let events = run.events();
        assert!(!common::of_kind(&events, "tool_call").is_empty());
        assert!(!common::of_kind(&events, "llm_response").is_empty());
        assert_eq!(
            PathBuf::from(run.info()["workspace"].as_str().unwrap()),
            ws.canonicalize().unwrap()
        );
    }
    let state = second.task_state();
    assert_eq!(state["user_request"], "Check CO");
    assert_eq!(state["status"], "completed");
    let runs = state["runs"].as_object().unwrap();
    assert_eq!(runs.keys().collect::<Vec<_>>(), ["r1", "r2"]);
    assert_eq!(runs["r1"]["user_request"], "Build CO");
    assert_eq!(runs["r1"]["status"], "completed");
    assert_eq!(runs["r1"]["summary"], "CO built");
    assert_eq!(runs["r2"]["tasks_done"], 1);

    // The tools never see the system view.
    let results = second.tool_results();
    let listed: Vec<&str> = results[0]["data"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&"structures/molecules/CO.xyz"),
        "{listed:?}"
    );
    assert!(
        listed
            .iter()
            .all(|f| !f.starts_with(".rondo") && !f.starts_with(".catmaster")),
        "{listed:?}"
    );
    for r in &results[1..5] {
        assert_eq!(r["status"], "failed", "{r}");
        assert!(r["error"].as_str().unwrap().contains("system view"), "{r}");
        assert!(r["data"].as_object().is_none_or(|d| d.is_empty()), "{r}");
    }
}

// ---- task_state.json is final however the run ends --------------------------------------------

/// Whatever ends the run — its own exits, a limit, an error — task_state.json ends with the
/// exit as its status, the reason, a summary, and the run in the history; never `running`.
#[test]
fn task_state_json_is_final_whatever_ends_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");

    // A task runner that keeps calling a tool that does not exist: `limit`.
    let limit = catmaster(
        &ws,
        "limit",
        "loop",
        json!({"planner": plan(&[("T1", "t")], json!([])), "task_runner": call("no_such_tool", json!({})), "summarizer": "never"}),
        &["--input", "max_tool_calls=1000"],
    );
    assert_exit(&limit, "limit", 3);
    let reason = limit.info()["reason"].as_str().unwrap().to_string();
    let state = limit.task_state();
    assert_eq!(state["status"], "limit");
    assert_eq!(state["reason"], reason);
    assert_eq!(state["summary"], reason);
    assert_eq!(state["runs"]["limit"]["status"], "limit");
    assert_eq!(state["runs"]["limit"]["reason"], reason);
    assert!(state["runs"]["limit"]["summary"].is_null());
    let observations = state["observations"].as_array().unwrap();
    assert!(observations.iter().all(|o| o["status"] == "failed"));
    assert_eq!(observations.len(), 60);

    // The replies run out (none for the summarizer): `limit`, as the run says why.
    let ran_out = catmaster(
        &ws,
        "ran_out",
        "no summary",
        json!({"planner": plan(&[("T1", "t")], json!([])), "task_runner": finish(json!([]))}),
        &[],
    );
    assert_exit(&ran_out, "limit", 3);
    let state = ran_out.task_state();
    assert_eq!(state["status"], "limit");
    assert!(
        state["reason"].as_str().unwrap().contains("summarizer"),
        "{state}"
    );
    assert_eq!(state["summary"], state["reason"]);
    assert_eq!(state["tasks"].as_array().unwrap().len(), 1);

    // The workflow's own exits: the summary is the summarizer's report.
    let failed = catmaster(
        &ws,
        "failed",
        "benzene",
        json!({
            "planner": plan(&[("T1", "build C6H6")], json!([])),
            "task_runner": json!({"action": "fail_task", "reason": "no tool", "summary": "cannot build C6H6", "whiteboard_ops": []}).to_string(),
            "summarizer": "Benzene could not be built.",
        }),
        &[],
    );
    assert_exit(&failed, "failed", 1);
    let state = failed.task_state();
    assert_eq!(state["status"], "failed");
    assert_eq!(state["summary"], "Benzene could not be built.");
    // The history of the folder, in order, each as it ended.
    let runs = state["runs"].as_object().unwrap();
    let statuses: Vec<(&str, &str)> = runs
        .iter()
        .map(|(id, r)| (id.as_str(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("limit", "limit"),
            ("ran_out", "limit"),
            ("failed", "failed")
        ]
    );
}

// ---- §5.5 Batch tools --------------------------------------------------------------------

/// The input → output mapping is one-to-one (`sub/a.xyz` and `sub__a.xyz` do not meet, a
/// structure named `summary.xyz` does not overwrite the aggregate), staging folders and
/// the system view are not scanned, output_dir inside input_dir is refused, and the same
/// inputs give the same outputs.
#[test]
fn batch_mapping_is_one_to_one_and_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let inputs = [
        ("structures/sub/a.xyz", 1),
        ("structures/sub__a.xyz", 2),
        ("structures/summary.xyz", 3),
        ("structures/a_.xyz", 4),
        ("structures/_a.xyz", 5),
    ];
    for (path, n) in inputs {
        write(&ws.join(path), &xyz(n));
    }
    write(&ws.join("structures/run_batch_1/staged.xyz"), &xyz(6));
    write(&ws.join("structures/.catmaster/hidden.xyz"), &xyz(7));
    let summarize = json!({"input_dir": "structures", "output_dir": "outputs/xyz"});
    let run = catmaster(
        &ws,
        "batch",
        "summarize",
        json!({
            "planner": plan(&[("T1", "summarize")], json!([])),
            "task_runner": visits(&[
                call("xyz_summary_batch", summarize.clone()),
                call("xyz_summary_batch", summarize),
                call("xyz_summary_batch", json!({"input_dir": "structures", "output_dir": "structures/out"})),
                finish(json!([])),
            ]),
            "summarizer": "ok",
        }),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let results = run.tool_results();
    assert_eq!(results[0]["status"], "success", "{}", results[0]);
    assert_eq!(
        results[0]["data"]["counts"],
        json!({"found": 5, "summarized": 5, "failed": 0})
    );
    let aggregate = common::json(ws.join(results[0]["data"]["summary_json_rel"].as_str().unwrap()));
    let keys: Vec<&str> = aggregate
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected: Vec<&str> = inputs.iter().map(|(p, _)| *p).collect();
    expected.sort();
    assert_eq!(
        keys, expected,
        "the aggregate lists every input, and only them"
    );
    let mut outputs = std::collections::BTreeSet::new();
    for (path, n) in inputs {
        let entry = &aggregate[path];
        assert_eq!(entry["n_atoms"], n, "{path}");
        let rel = entry["summary_rel"].as_str().unwrap();
        assert!(
            outputs.insert(rel.to_string()),
            "{rel} is the output of two inputs"
        );
        // Each structure's own file holds its own summary.
        assert_eq!(common::json(ws.join(rel))["n_atoms"], n, "{rel}");
    }
    // Deterministic: the same scan gives the same result.
    assert_eq!(results[1]["data"], results[0]["data"]);
    assert_eq!(
        common::json(ws.join(results[1]["data"]["summary_json_rel"].as_str().unwrap())),
        aggregate
    );
    assert_eq!(results[2]["status"], "failed");
    assert!(
        results[2]["error"]
            .as_str()
            .unwrap()
            .contains("inside input_dir")
    );
    assert!(!ws.join("structures/out").exists());
}

// ---- §4 Path policy: messages never reveal the host ------------------------------------------

/// File tools work in the user view: patterns and paths that climb out, absolute paths and
/// links leading out are refused, and no result (data, error, warnings) names a host path
/// or a file outside the workspace.
#[test]
fn file_tools_never_reveal_paths_outside_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    write(&tmp.path().join("secret-host-file.txt"), "secret");
    write(&tmp.path().join("outside/other-host-file.txt"), "secret");
    write(&ws.join("data/ok.txt"), "ok");
    std::os::unix::fs::symlink(tmp.path().join("outside"), ws.join("link")).unwrap();
    let calls = [
        ("list_files", json!({"pattern": "../*"})),
        ("list_files", json!({"pattern": "../../*"})),
        ("list_files", json!({"path": "link"})),
        ("list_files", json!({"pattern": "link/*"})),
        ("read_file", json!({"path": "link/other-host-file.txt"})),
        ("read_file", json!({"path": "../secret-host-file.txt"})),
        (
            "read_file",
            json!({"path": tmp.path().join("secret-host-file.txt").to_str().unwrap()}),
        ),
        (
            "write_file",
            json!({"path": "../escape.txt", "content": "x"}),
        ),
        ("list_files", json!({})),
    ];
    let mut runner: Vec<String> = calls.iter().map(|(t, p)| call(t, p.clone())).collect();
    runner.push(finish(json!([])));
    let run = catmaster(
        &ws,
        "paths",
        "look around",
        json!({"planner": plan(&[("T1", "t")], json!([])), "task_runner": visits(&runner), "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let host = tmp.path().to_str().unwrap().to_string();
    let results = run.tool_results();
    for (r, (tool, params)) in results.iter().zip(&calls) {
        let shown = json!([r["data"], r["error"], r["warnings"]]).to_string();
        // Only what the model itself wrote may come back (a refused path is quoted).
        for name in ["secret-host-file", "other-host-file"] {
            assert!(
                params.to_string().contains(name) || !shown.contains(name),
                "{tool} {params} names a file outside the workspace: {shown}"
            );
        }
        assert!(
            !shown.contains(&host),
            "{tool} {params} names a host path: {shown}"
        );
        for f in r["data"]["files"].as_array().into_iter().flatten() {
            let f = f.as_str().unwrap();
            assert!(
                !f.starts_with('/') && !f.split('/').any(|c| c == ".."),
                "{f}"
            );
        }
    }
    let statuses: Vec<&str> = results
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "failed", "failed", "failed", "success", "failed", "failed", "failed", "failed",
            "success"
        ]
    );
    assert_eq!(results[3]["data"]["files"], json!([]));
    assert_eq!(results[8]["data"]["files"], json!(["data/ok.txt"]));
    assert!(!tmp.path().join("escape.txt").exists());
}

/// §6 Structured outputs are Pydantic models, and Pydantic's default for a field the model
/// does not declare is `extra = "ignore"`: a reply with one more top-level field (and a
/// whiteboard op with one more field) is taken as it is, without it, on the first attempt.
/// Tool payloads stay strict (§5.1, `ToolExecutor` rejects extra fields).
#[test]
fn an_extra_reply_field_is_ignored_as_pydantic_does() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("extra");
    let mut planned: Value = serde_json::from_str(&plan(
        &[("T1", "t")],
        json!([{"op": "UPSERT", "section": "Facts", "id": "FACT-1", "text": "GOOD fact", "confidence": 0.9}]),
    ))
    .unwrap();
    planned["notes"] = json!("the model's aside");
    let mut done: Value = serde_json::from_str(&finish(json!([]))).unwrap();
    done["confidence"] = json!("high");
    let run = catmaster(
        &ws,
        "extra",
        "record a fact",
        json!({"planner": planned.to_string(), "task_runner": done.to_string(), "summarizer": "ok"}),
        &[],
    );
    assert_exit(&run, "completed", 0);
    assert!(common::of_kind(&run.events(), "invalid_output").is_empty());
    assert_eq!(run.prompts("planner").len(), 1);
    assert_eq!(run.prompts("task_runner").len(), 1);
    assert!(run.whiteboard().contains("FACT-1: GOOD fact"));
    let state = run.task_state();
    assert_eq!(state["plan"][0]["id"], "T1");
    assert!(!state.to_string().contains("the model's aside"));
}

/// §4: the system view `.catmaster/` is not reachable from tools, whatever its case:
/// `.CATMASTER/task_state.json` is refused by `read_file` and `write_file` as
/// `.catmaster/...` is.
#[test]
fn the_system_view_is_refused_to_tools_whatever_its_case() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("cased");
    write(&ws.join(".CATMASTER/secret.txt"), "hidden");
    let run = catmaster(
        &ws,
        "cased",
        "read the records",
        json!({
            "planner": plan(&[("T1", "t")], json!([])),
            "task_runner": visits(&[
                call("read_file", json!({"path": ".CATMASTER/secret.txt"})),
                call("write_file", json!({"path": ".CatMaster/new.txt", "content": "x"})),
                finish(json!([])),
            ]),
            "summarizer": "ok",
        }),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let results = run.tool_results();
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r["status"], "failed", "{r}");
        assert!(r["error"].as_str().unwrap().contains("system view"), "{r}");
    }
    assert!(!ws.join(".CatMaster/new.txt").exists());
}

/// A reply workflow of one llm role whose reply type is `Reply`; `types` declares it.
fn extra_project(dir: &Path, types: &str, role_attr: &str, reply: &Value) -> PathBuf {
    let workflow = format!(
        r#"
workflow extra {{
  prompts = "prompts"
  script = "script.yaml"
}}
{types}
role ask: llm {{
  prompt = "ask.tera"
  retries = 0
  {role_attr}
  output json Reply
}}
exit done
start -> ask
ask -> done
ask -> invalid_output when ask.invalid
"#
    );
    // JSON is YAML: the reply is one JSON string.
    let script = json!({"replies": {"ask": reply.to_string()}}).to_string();
    common::project(dir, &workflow, &[("ask.tera", "Plan.\n")], &script)
}

/// The flags of the run's one `llm_response`, as `(flag, path)`, sorted.
fn coercions(dir: &Path) -> Vec<(String, String)> {
    let events = common::events(dir);
    let response = common::of_kind(&events, "llm_response");
    let mut flags: Vec<(String, String)> = response[0]["coercions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["flag"].as_str().unwrap().into(),
                c["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    flags.sort();
    flags
}

/// §6 "Use Pydantic models ... for any LLM response": whether a field the model does not
/// declare is dropped or refused is the model's own setting (Pydantic's `extra`), not the
/// caller's. In Rondo it is the type's `extra = ignore | forbid`, and it holds whatever the
/// role's `coerce` says, object by object (a nested type decides for itself).
#[test]
fn a_types_extra_policy_decides_over_the_roles_coerce() {
    let reply = json!({"summary": "s", "tasks": [{"id": "T1", "why": "aside"}], "notes": "aside"});

    // `ignore` under `coerce = strict`: taken on the first attempt, the fields dropped.
    let tmp = tempfile::tempdir().unwrap();
    let types = r#"
type Task {
  extra = ignore
  id: string
}
type Reply {
  extra = ignore
  summary: string
  tasks: list[Task]
}"#;
    let wf = extra_project(tmp.path(), types, "coerce = strict", &reply);
    let (out, dir) = common::run(&wf, "ignore");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let state = common::state(&dir);
    let outputs: Vec<&Value> = state["outputs"].as_object().unwrap().values().collect();
    assert_eq!(outputs, [&json!({"summary": "s", "tasks": [{"id": "T1"}]})]);
    assert_eq!(
        coercions(&dir),
        [
            ("extra_field_dropped".to_string(), "$.notes".to_string()),
            (
                "extra_field_dropped".to_string(),
                "$.tasks[0].why".to_string()
            ),
        ]
    );

    // The policy is per object: `Task` says nothing, so under `strict` its extra field is
    // refused though `Reply` ignores its own.
    let tmp = tempfile::tempdir().unwrap();
    let types = r#"
type Task { id: string }
type Reply {
  extra = ignore
  summary: string
  tasks: list[Task]
}"#;
    let wf = extra_project(tmp.path(), types, "coerce = strict", &reply);
    let (out, dir) = common::run(&wf, "nested");
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    let events = common::events(&dir);
    let refused = &common::of_kind(&events, "invalid_output")[0];
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("$.tasks[0]: unexpected field `why`"),
        "{refused}"
    );

    // `forbid` under the default `coerce = safe` (which drops extra fields): refused.
    let tmp = tempfile::tempdir().unwrap();
    let types = r#"
type Reply = { extra = forbid, summary: string, tasks: list[any] }"#;
    let wf = extra_project(tmp.path(), types, "", &reply);
    let (out, dir) = common::run(&wf, "forbid");
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    let events = common::events(&dir);
    let refused = &common::of_kind(&events, "invalid_output")[0];
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("$: unexpected field `notes`"),
        "{refused}"
    );

    // A type that says nothing keeps today's rule: `safe` drops, recorded as a coercion.
    let tmp = tempfile::tempdir().unwrap();
    let types = "type Reply { summary: string\n tasks: list[any] }";
    let wf = extra_project(tmp.path(), types, "", &reply);
    let (out, dir) = common::run(&wf, "unsaid");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(
        coercions(&dir),
        [("extra_field_dropped".to_string(), "$.notes".to_string())]
    );
}

/// `forbid` holds in memory too: `check` refuses an object literal with a field the type
/// forbids, at its line, and `ignore` accepts it. A policy that is neither is reported with
/// the two choices; `rondo fmt` keeps the attribute and is stable on it.
#[test]
fn extra_is_checked_and_kept_by_fmt() {
    let tmp = tempfile::tempdir().unwrap();
    let source = |policy: &str| {
        format!(
            r#"workflow w {{ }}
type Entry {{
  extra = {policy}
  id: string
}}
memory {{
  last: Entry? = null
}}
role keep: builtin {{
  update {{
    set last = {{ id: "a", note: "b" }}
  }}
}}
exit done
start -> keep
keep -> done
"#
        )
    };
    let path = tmp.path().join("w.rondo");
    let check = |text: &str| {
        std::fs::write(&path, text).unwrap();
        common::rondo(&[
            "check",
            "--offline",
            "--format",
            "json",
            path.to_str().unwrap(),
        ])
    };
    let out = check(&source("ignore"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = check(&source("forbid"));
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("the field `note` is not in"), "{report}");
    assert!(
        report.contains("\"line\": 11") || report.contains("\"line\":11"),
        "{report}"
    );

    let out = check(&source("allow"));
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("rondo::type::bad_extra"), "{report}");
    assert!(
        report.contains("`ignore` drops it, `forbid` refuses"),
        "{report}"
    );

    // fmt: a messy layout comes out canonical with the attribute where it was, twice alike.
    let messy = "workflow w { }\ntype Entry {\n      id: string\n  extra   =   ignore\n}\ntype Pair = {extra=forbid,a:int}\nmemory {\n  xs: list[{extra=ignore,a:int}] = []\n}\nexit done\nstart -> done\n";
    std::fs::write(&path, messy).unwrap();
    let out = common::rondo(&["fmt", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let formatted = std::fs::read_to_string(&path).unwrap();
    assert!(
        formatted.contains("type Entry {\n  id: string\n  extra = ignore\n}"),
        "{formatted}"
    );
    assert!(
        formatted.contains("type Pair {\n  extra = forbid\n  a: int\n}"),
        "{formatted}"
    );
    assert!(
        formatted.contains("xs: list[{ a: int, extra = ignore }] = []"),
        "{formatted}"
    );
    let out = common::rondo(&["fmt", "--check", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let out = common::rondo(&["check", "--offline", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
}

/// §6 in the workflow itself: the planner's and the task runner's reply types, and every
/// object type inside them, are the guide's Pydantic models and say Pydantic's default,
/// `extra = ignore`; the roles' `coerce` lists no longer carry the choice.
#[test]
fn the_reply_models_say_extra_ignore_in_the_workflow() {
    use rondo::compile::types::{Coercion, Extra, Type};
    use rondo::compile::{OutputFormat, RoleKind};
    let path = common::root().join("workflows/catmaster.rondo");
    let (_, workflow, diags, _) = common::check_path(&path, true);
    assert!(!diags.has_errors());
    let mut seen = Vec::new();
    for (index, role) in workflow.roles() {
        let name = &workflow.node(index).name;
        let RoleKind::Llm(llm) = &role.kind else {
            continue;
        };
        let OutputFormat::Json { ty, .. } = &llm.output else {
            continue;
        };
        assert!(!llm.coerce.contains(&Coercion::ExtraFieldDropped), "{name}");
        // Every object of the type, without recursion.
        let mut stack = vec![ty];
        let mut objects = 0;
        while let Some(t) = stack.pop() {
            match t {
                Type::Object { fields, extra } => {
                    assert_eq!(*extra, Extra::Ignore, "{name}: {}", t.display());
                    objects += 1;
                    stack.extend(fields.iter().map(|f| &f.ty));
                }
                Type::List { item } | Type::Optional { inner: item } => stack.push(item),
                Type::Union { members } => stack.extend(members),
                _ => {}
            }
        }
        seen.push((name.clone(), objects));
    }
    seen.sort();
    // Plan, its tasks and its ops; StepDecision and its ops.
    assert_eq!(
        seen,
        [("planner".to_string(), 3), ("task_runner".to_string(), 2)]
    );
}

/// §1 "Artifacts/toolcalls are persisted under `.catmaster/runs/<run_id>/...`": one line per
/// tool call (its task, tool, params and standard output) in
/// `.catmaster/runs/<run_id>/toolcalls.jsonl`, a refused payload included; and the system view
/// stays out of the tools' reach (`list_files` of `.` does not show it).
#[test]
fn toolcalls_are_persisted_under_the_runs_system_view() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("calls");
    let run = catmaster(
        &ws,
        "calls",
        "build CO",
        json!({
            "planner": plan(&[("T1", "build CO")], json!([])),
            "task_runner": visits(&[
                call("build_molecule", json!({"molecule": "CO", "color": "red"})),
                call("build_molecule", json!({"molecule": "CO"})),
                call("list_files", json!({"path": "."})),
                finish(json!([])),
            ]),
            "summarizer": "ok",
        }),
        &[],
    );
    assert_exit(&run, "completed", 0);
    let text = std::fs::read_to_string(ws.join(".catmaster/runs/calls/toolcalls.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["tool_name"].as_str().unwrap(),
                l["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("build_molecule", "failed"),
            ("build_molecule", "success"),
            ("list_files", "success")
        ]
    );
    assert_eq!(
        lines[0]["params"],
        json!({"molecule": "CO", "color": "red"})
    );
    assert_eq!(lines[1]["task"]["id"], "T1");
    assert!(
        lines[1]["data"]["xyz_rel"]
            .as_str()
            .unwrap()
            .ends_with("CO.xyz"),
        "{}",
        lines[1]
    );
    let listed = lines[2]["data"].to_string();
    assert!(!listed.contains(".catmaster"), "{listed}");
}
