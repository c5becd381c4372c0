//! Model output that does not fit is an outcome: an invalid reply (after its retries) is
//! routed by `X.invalid`, ends at the built-in `invalid_output` exit (code 4) or goes to a
//! handler role; every attempt counts in the run's totals and budgets. The real binary
//! runs each workflow with the scripted provider.

use std::path::{Path, PathBuf};

mod common;

use common::{events, json, project, rondo, run, stderr};

/// `ask` wants `{n: int}`; `INVALID_ROUTE` is replaced by the route its invalid outcome takes.
const ASK: &str = r#"
workflow outcomes {
  prompts = "prompts"
  script = "script.yaml"
  LIMITS
}
memory {
  n: int = 0
  note: string? = null
}
role ask: llm {
  prompt = "ask.tera"
  retries = 2
  output json { n: int }
  update { set n = output.n }
}
exit done
start -> ask
ask -> done
INVALID_ROUTE
"#;

/// A handler of the invalid outcome, ending at its own exit.
const FIX: &str = r#"ask -> fix when ask.invalid
role fix: builtin {
  update { set note = ask.invalid_reply.raw }
  artifact "invalid.json" = ask.invalid_reply
}
fix -> repaired
exit repaired { code = 5 }"#;

const TO_EXIT: &str = "ask -> invalid_output when ask.invalid";

fn ask(invalid_route: &str, limits: &str) -> String {
    ASK.replace("INVALID_ROUTE", invalid_route)
        .replace("LIMITS", limits)
}

const PROSE: &str = "replies:\n  ask: 'Sure! The number is seven.'\n";

#[test]
fn an_invalid_reply_after_its_retries_ends_at_invalid_output_with_exit_code_4() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        &ask(TO_EXIT, ""),
        &[("ask.tera", "Give n.\n")],
        PROSE,
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let info = json(dir.join("run.json"));
    assert_eq!(info["exit"], "invalid_output");
    assert_eq!(info["status"], "finished");
    // Three attempts (retries = 2), all counted.
    assert_eq!(info["totals"]["llm_calls"], 3);
    let state = common::state(&dir);
    let output = state["outputs"]
        .as_object()
        .unwrap()
        .values()
        .find(|v| v.get("invalid").is_some())
        .cloned()
        .unwrap();
    assert_eq!(output["invalid"], true);
    assert_eq!(output["raw"], "Sure! The number is seven.");
    assert_eq!(output["attempts"], 3);
    assert!(
        output["error"].as_str().unwrap().contains("no JSON"),
        "{output}"
    );
    // The role's own update did not run on the invalid outcome.
    assert_eq!(state["memory"][0], 0);
    let ev = events(&dir);
    assert_eq!(
        ev.iter().filter(|e| e["event"] == "invalid_output").count(),
        3
    );
    assert!(ev.iter().any(|e| e["event"] == "invalid_outcome"));
}

#[test]
fn an_invalid_reply_is_routed_to_a_handler_that_reads_invalid_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        &ask(FIX, ""),
        &[("ask.tera", "Give n.\n")],
        PROSE,
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let state = common::state(&dir);
    assert_eq!(state["path"], serde_json::json!(["ask", "fix"]));
    assert_eq!(state["memory"][1], "Sure! The number is seven.");
    let artifact = json(dir.join("workspace/invalid.json"));
    assert_eq!(artifact["raw"], "Sure! The number is seven.");
    assert_eq!(artifact["attempts"], 3);

    // A valid reply skips the invalid route.
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        &ask(FIX, ""),
        &[("ask.tera", "Give n.\n")],
        "replies:\n  ask: '{\"n\": 3}'\n",
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(common::state(&dir)["memory"][0], 3);
}

#[test]
fn the_invalid_outcome_replays_from_the_recorded_attempts() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        &ask(FIX, ""),
        &[("ask.tera", "Give n.\n")],
        PROSE,
    );
    let (_, first) = run(&wf, "first");
    std::fs::write(
        tmp.path().join("script.yaml"),
        "replies:\n  ask: '{\"n\": 1}'\n",
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let out = rondo(&[
        "run",
        "-q",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
        "--run-id",
        "again",
        "--replay-from",
        first.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_eq!(
        common::state(&runs.join("again"))["path"],
        serde_json::json!(["ask", "fix"])
    );
}

#[test]
fn rejected_attempts_count_in_the_totals_and_the_token_budget_stops_before_the_next_attempt() {
    // Each attempt uses 9 tokens: the prompt "Give n.\n" (2) and the reply (7). Before a
    // call, the provider's estimate of it (the prompt with message overhead and the answer
    // schema: 30 tokens) must fit in what is left: 0 + 30 and 9 + 30 fit in 45, 18 + 30 does not.
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        &ask(TO_EXIT, "limits { max_tokens = 45 }"),
        &[("ask.tera", "Give n.\n")],
        PROSE,
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let info = json(dir.join("run.json"));
    assert_eq!(info["exit"], "limit");
    assert!(
        info["reason"].as_str().unwrap().contains("max_tokens = 45"),
        "{}",
        info["reason"]
    );
    assert_eq!(info["totals"]["llm_calls"], 2);
    assert_eq!(
        info["totals"]["input_tokens"].as_u64().unwrap()
            + info["totals"]["output_tokens"].as_u64().unwrap(),
        18
    );
    assert_eq!(
        events(&dir)
            .iter()
            .filter(|e| e["event"] == "invalid_output")
            .count(),
        2
    );
}

#[test]
fn a_valid_reply_after_rejected_ones_counts_every_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let text = ask(TO_EXIT, "")
        + r#"
test "two rejected attempts, then a valid one" {
  reply ask visit 1 = "prose"
  reply ask visit 1 = """{"n": "two"}"""
  reply ask visit 1 = """{"n": 2}"""
  expect exit done
  expect memory.n == 2
}
"#;
    let wf = project(tmp.path(), &text, &[("ask.tera", "Give n.\n")], PROSE);
    let runs = tmp.path().join("tests");
    let out = rondo(&[
        "test",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let info = json(dir.join("run.json"));
    assert_eq!(info["totals"]["llm_calls"], 3, "{}", info["totals"]);
    let tokens: u64 = events(&dir)
        .iter()
        .filter(|e| e["event"] == "invalid_output" || e["event"] == "llm_response")
        .map(|e| {
            e["usage"]["input_tokens"].as_u64().unwrap()
                + e["usage"]["output_tokens"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(
        info["totals"]["input_tokens"].as_u64().unwrap()
            + info["totals"]["output_tokens"].as_u64().unwrap(),
        tokens
    );
}

/// One reply that needs every coercion of the safe set.
const COERCE: &str = r#"
workflow coercions {
  prompts = "prompts"
  script = "script.yaml"
}
type Reply {
  answer: string
  count: int
  ratio: float
  ok: bool
  tags: list[string]
  note: string?
  items: list[int]
  mode: "fast" | "slow"
  final: { answer: string }
  name: string
}
role ask: llm {
  prompt = "ask.tera"
  retries = 0
  COERCE_ATTR
  output json Reply
}
exit done
start -> ask
ask -> done
ask -> invalid_output when ask.invalid
"#;

const NEEDS_EVERY_COERCION: &str = r#"{"answer": 4, "count": "3", "ratio": "1.5", "ok": "true", "tags": "a", "mode": "FAST", "final": "done", "name": {"value": "x"}, "extra": 1}"#;

fn coerce_project(dir: &Path, attr: &str) -> PathBuf {
    project(
        dir,
        &COERCE.replace("COERCE_ATTR", attr),
        &[("ask.tera", "Answer.\n")],
        &format!("replies:\n  ask: '{NEEDS_EVERY_COERCION}'\n"),
    )
}

#[test]
fn the_safe_coercions_align_a_near_valid_reply_and_each_is_recorded_as_a_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = coerce_project(tmp.path(), "");
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let state = common::state(&dir);
    let output = state["outputs"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap();
    assert_eq!(
        *output,
        serde_json::json!({
            "answer": "4", "count": 3, "ratio": 1.5, "ok": true, "tags": ["a"], "note": null,
            "items": [], "mode": "fast", "final": {"answer": "done"}, "name": "x"
        })
    );
    let ev = events(&dir);
    let response = ev.iter().find(|e| e["event"] == "llm_response").unwrap();
    let mut flags: Vec<(String, String)> = response["coercions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["flag"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    flags.sort();
    let mut expected: Vec<(String, String)> = [
        ("extra_field_dropped", "$.extra"),
        ("missing_collection", "$.items"),
        ("missing_optional", "$.note"),
        ("number_to_string", "$.answer"),
        ("single_to_list", "$.tags"),
        ("string_to_bool", "$.ok"),
        ("string_to_number", "$.count"),
        ("string_to_number", "$.ratio"),
        ("union_case", "$.mode"),
        ("unwrapped_object", "$.name"),
        ("wrapped_value", "$.final"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    expected.sort();
    assert_eq!(flags, expected);
}

#[test]
fn strict_mode_rejects_what_safe_mode_coerces() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = coerce_project(tmp.path(), "coerce = strict");
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let ev = events(&dir);
    let rejected = ev.iter().find(|e| e["event"] == "invalid_output").unwrap();
    assert!(
        rejected["error"]
            .as_str()
            .unwrap()
            .contains("$.answer: expected a string"),
        "{}",
        rejected["error"]
    );

    // A list allows only the coercions it names: the string "3" for an int is refused.
    let tmp = tempfile::tempdir().unwrap();
    let wf = coerce_project(tmp.path(), "coerce = [number_to_string]");
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let ev = events(&dir);
    let rejected = ev.iter().find(|e| e["event"] == "invalid_output").unwrap();
    assert!(
        rejected["error"]
            .as_str()
            .unwrap()
            .contains("$.count: expected an integer"),
        "{}",
        rejected["error"]
    );
}

#[test]
fn an_absent_optional_field_is_null_in_templates_expressions_updates_and_artifacts() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        r#"
workflow nulls {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  notes: list[{ text: string, tag: string? }] = []
}
role supervisor: llm {
  prompt = "supervisor.tera"
  output json { ok: bool, reason: string? }
  update { notes.append({ text: "first" }) }
  artifact "supervisor.json" = { reason: supervisor.reason, is_null: supervisor.reason == null }
}
role report: llm {
  prompt = "report.tera"
  reads = [notes]
  output text
}
exit done
exit other
start -> supervisor
supervisor -> report when supervisor.reason == null
supervisor -> other otherwise
supervisor -> invalid_output when supervisor.invalid
report -> done
"#,
        &[
            ("supervisor.tera", "Supervise.\n"),
            (
                "report.tera",
                "Reason: [{{ supervisor.reason }}]{% for n in memory.notes %} {{ n.text }}/[{{ n.tag }}]{% endfor %}\n",
            ),
        ],
        "replies:\n  supervisor: '{\"ok\": true}'\n  report: 'ok'\n",
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ev = events(&dir);
    let prompt = ev
        .iter()
        .find(|e| e["event"] == "llm_response" && e["role"] == "report")
        .unwrap()["prompt"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(prompt, "Reason: [] first/[]\n");
    let artifact = json(dir.join("workspace/supervisor.json"));
    assert_eq!(
        artifact,
        serde_json::json!({"reason": null, "is_null": true})
    );
    let state = common::state(&dir);
    assert_eq!(
        state["memory"][0],
        serde_json::json!([{"text": "first", "tag": null}])
    );
}

#[test]
fn a_map_over_an_empty_list_joins_to_an_empty_list() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        r#"
workflow empty_map {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  items: list[string] = []
  joined: any = "not yet"
}
role dispatch: builtin { update { set items = [] } }
role shout: llm {
  prompt = "shout.tera"
  output text
}
role gather: builtin {
  update { set joined = shout }
  artifact "joined.json" = { shout: shout, count: len(shout) }
}
exit done
start -> dispatch
dispatch -> map shout over memory.items -> gather max 10
gather -> done
"#,
        &[("shout.tera", "Shout {{ item }}.\n")],
        "replies:\n  shout: 'HEY'\n",
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let state = common::state(&dir);
    assert_eq!(state["memory"][1], serde_json::json!([]));
    assert_eq!(
        json(dir.join("workspace/joined.json")),
        serde_json::json!({"shout": [], "count": 0})
    );
    assert_eq!(state["path"], serde_json::json!(["dispatch", "gather"]));
}

/// A map worker cannot route its invalid outcome, so one invalid branch ends the run at
/// `invalid_output` before the join reads a record that is not of the worker's type.
#[test]
fn an_invalid_branch_of_a_map_ends_the_run_at_invalid_output() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        r#"
workflow branch_invalid {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  items: list[string] = ["a", "b"]
  total: int = 0
}
role start_map: builtin { update { set total = 0 } }
role count: llm {
  prompt = "count.tera"
  output json { n: int }
}
role gather: builtin {
  update { set total = len(count) }
}
exit done
start -> start_map
start_map -> map count over memory.items -> gather max 10
gather -> done
"#,
        &[("count.tera", "Count {{ item }}.\n")],
        "replies:\n  count:\n    - '{\"n\": 1}'\n    - 'I would rather not.'\n",
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let record = json(dir.join("run.json"));
    assert_eq!(record["exit"], "invalid_output");
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .contains("branch `count`"),
        "{record}"
    );
    let state = common::state(&dir);
    assert_eq!(state["path"], serde_json::json!(["start_map"]));
}

/// An ordering with null (an absent optional field) is false, not a failed run: the route
/// that needs `score > 5` is not taken and `otherwise` is.
#[test]
fn an_ordering_with_an_absent_optional_field_is_false() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        r#"
workflow ordering {
  prompts = "prompts"
  script = "script.yaml"
}
role grade: llm {
  prompt = "grade.tera"
  output json { score: int? }
}
exit high
exit low { code = 5 }
start -> grade
grade -> invalid_output when grade.invalid
grade -> high when grade.score > 5
grade -> low when not (grade.score > 5)
grade -> high otherwise
"#,
        &[("grade.tera", "Grade it.\n")],
        "replies:\n  grade: '{}'\n",
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_eq!(json(dir.join("run.json"))["exit"], "low");
}

/// A reply the role's own `update` block refuses (`extend` with a value that is not a list,
/// a `set` that does not fit the memory's type) is asked again with the reason, like a
/// reply of the wrong shape; the next attempt is applied.
#[test]
fn a_reply_its_updates_refuse_is_asked_again_with_the_reason() {
    let workflow = r#"
workflow refuse {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  items: list[string] = []
  count: int = 0
}
role ask: llm {
  prompt = "ask.tera"
  retries = 2
  output json { items: any, count: any }
  update {
    items.extend(output.items)
    set count = output.count
  }
}
start -> ask
ask -> invalid_output when ask.invalid
ask -> done
exit done
"#;
    let tmp = tempfile::tempdir().unwrap();
    let path = project(
        tmp.path(),
        workflow,
        &[(
            "ask.tera",
            "Give items.{% if last_error %} Rejected: {{ last_error }}{% endif %}\n",
        )],
        r#"replies:
  ask:
    "1":
      - '{"items": "a", "count": 1}'
      - '{"items": ["a"], "count": "one"}'
      - '{"items": ["a", "b"], "count": 2}'
"#,
    );
    let (out, dir) = run(&path, "r");
    assert!(out.status.success(), "{}", stderr(&out));
    let ev = events(&dir);
    let rejected: Vec<String> = common::of_kind(&ev, "invalid_output")
        .iter()
        .map(|e| e["error"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert!(
        rejected[0].contains("extend needs a list"),
        "{}",
        rejected[0]
    );
    assert!(rejected[1].contains("set count"), "{}", rejected[1]);
    // The next attempt's prompt carries the reason.
    let accepted = &common::of_kind(&ev, "llm_response")[0];
    assert!(accepted["prompt"].as_str().unwrap().contains("set count"));
    // Nothing of the refused attempts was applied.
    let state = common::state(&dir);
    assert_eq!(state["memory"][0], serde_json::json!(["a", "b"]));
    assert_eq!(state["memory"][1], 2);
}

const ENDS: &str = r#"
workflow ends {
  prompts = "prompts"
  script = "script.yaml"
  finally = record
}
memory {
  n: int = 0
  ends: list[string] = []
}
role ask: llm {
  prompt = "ask.tera"
  max_visits = 3
  output json { n: int }
  update { set n = output.n }
}
role record: builtin {
  update { ends.append(ended.exit) }
  artifact "ended.txt" = ended.exit + ": " + ended.reason
}
artifact "final.json" = { n: memory.n, status: ended.exit ?? "running", code: ended.code, ends: memory.ends }
start -> ask
ask -> invalid_output when ask.invalid
ask -> ask when memory.n < 10
ask -> done otherwise
exit done
"#;

/// `ended`, the `finally` role and the workflow-level artifacts see every end: the
/// workflow's exit, `limit` (a bound, replies that ran out), `error`; a resumed error run
/// ends again and applies the role again; the artifacts never stay at "running".
#[test]
fn finally_and_ended_see_every_end_of_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let end_of = |id: &str, script: &str| {
        let dir = tmp.path().join(id);
        let path = project(&dir, ENDS, &[("ask.tera", "n?\n")], script);
        let (out, run_dir) = run(&path, id);
        (out, run_dir)
    };
    let (out, dir) = end_of("done", "replies:\n  ask: '{\"n\": 10}'\n");
    assert!(out.status.success(), "{}", stderr(&out));
    let state = json(dir.join("workspace/final.json"));
    assert_eq!(state["status"], "done");
    assert_eq!(state["code"], 0);
    assert_eq!(state["ends"], serde_json::json!(["done"]));
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace/ended.txt")).unwrap(),
        "done: `otherwise` holds"
    );
    let path_taken = common::state(&dir)["path"].clone();
    assert_eq!(path_taken, serde_json::json!(["ask", "record"]));

    // Three visits never reach 10: `limit`.
    let (out, dir) = end_of("limit", "replies:\n  ask: '{\"n\": 1}'\n");
    assert_eq!(out.status.code(), Some(3));
    let state = json(dir.join("workspace/final.json"));
    assert_eq!(state["status"], "limit");
    assert_eq!(state["code"], 3);
    assert_eq!(state["ends"], serde_json::json!(["limit"]));
    let ended = std::fs::read_to_string(dir.join("workspace/ended.txt")).unwrap();
    assert!(
        ended.starts_with("limit: role `ask` reached max_visits = 3"),
        "{ended}"
    );

    // No reply for the second visit: the replies ran out, `limit`, finished.
    let (out, dir) = end_of("ran_out", "replies:\n  ask:\n    \"1\": '{\"n\": 1}'\n");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let state = json(dir.join("workspace/final.json"));
    assert_eq!(state["status"], "limit");
    assert_eq!(state["ends"], serde_json::json!(["limit"]));

    // The second prompt is past a rendering bound (`range` yields at most 100,000
    // numbers): `error`; with the template fixed, `rondo resume` continues, ends at `done`
    // and the finally role runs at both ends.
    let error_dir = tmp.path().join("error");
    let path = project(
        &error_dir,
        ENDS,
        &[(
            "ask.tera",
            "{% for i in range(end=visit * 60000) %}{% endfor %}n?\n",
        )],
        "replies:\n  ask:\n    \"1\": '{\"n\": 1}'\n    \"2\": '{\"n\": 10}'\n",
    );
    let (out, dir) = run(&path, "error");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let state = json(dir.join("workspace/final.json"));
    assert_eq!(state["status"], "error");
    assert_eq!(state["ends"], serde_json::json!(["error"]));
    std::fs::write(error_dir.join("prompts/ask.tera"), "n?\n").unwrap();
    let resumed = rondo(&["resume", "-q", dir.to_str().unwrap()]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let state = json(dir.join("workspace/final.json"));
    assert_eq!(state["status"], "done");
    assert_eq!(state["n"], 10);
    assert_eq!(state["ends"], serde_json::json!(["error", "done"]));
}
