//! Interpreter behaviour on small workflows: parallel and map fan-out with a join,
//! retries after an invalid reply, bounds and run limits, and offline replay of a
//! recorded run. The real binary runs each workflow.

use serde_json::Value;

mod common;

use common::{events, json, project, rondo, run_with};

const FANOUT: &str = r#"
workflow fan {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  items: list[string] = ["a", "b", "c"]
  results: list[any] = []
}
role dispatch: builtin { update { set results = [] } }
role lint: tool { command = ["python3", "-c", "import os, time; open('lint.here', 'w').close(); d = time.time() + 30; [time.sleep(0.01) for _ in iter(lambda: os.path.exists('test.here') or time.time() > d, True)]; print('lint' if os.path.exists('test.here') else 'alone')"] }
role test: tool { command = ["python3", "-c", "import os, time; open('test.here', 'w').close(); d = time.time() + 30; [time.sleep(0.01) for _ in iter(lambda: os.path.exists('lint.here') or time.time() > d, True)]; print('test' if os.path.exists('lint.here') else 'alone')"] }
role review: llm {
  prompt = "review.tera"
  output json { verdict: "ok" | "bad" }
}
role collect: builtin {
  update { results.append({ lint: lint.stdout, test: test.stdout, review: review.verdict }) }
}
role shout: llm {
  prompt = "shout.tera"
  output text
}
role gather: builtin { update { results.append(shout) } }
start -> dispatch
dispatch -> parallel [lint, test, review] -> collect
collect -> map shout over memory.items -> gather max 10
gather -> done
exit done
"#;

#[test]
fn parallel_branches_run_concurrently_and_join_and_map_runs_once_per_item() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        FANOUT,
        &[
            ("review.tera", "Review it.\n"),
            ("shout.tera", "Shout {{ item }}.\n"),
        ],
        "replies:\n  review: '{\"verdict\": \"ok\"}'\n  shout:\n    - 'A'\n    - 'B'\n    - 'C'\n",
    );
    let (out, dir) = run_with(&wf, "a", &[]);
    common::assert_success(&out);
    let state = common::state(&dir);
    // Branches are applied in declaration order, then the join runs once.
    let path: Vec<&str> = state["path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        path,
        [
            "dispatch", "lint", "test", "review", "collect", "shout", "shout", "shout", "gather"
        ]
    );
    let results = &state["memory"][1];
    // Each tool waits for the other's marker and says `alone` if it never comes: both
    // printing their names means the two branches overlapped.
    assert_eq!(results[0]["lint"], "lint\n");
    assert_eq!(results[0]["test"], "test\n");
    assert_eq!(results[0]["review"], "ok");
    // The map's worker output is the list of its branch outputs, in item order.
    assert_eq!(results[1], serde_json::json!(["A", "B", "C"]));
    let ev = events(&dir);
    let prompts: Vec<&str> = ev
        .iter()
        .filter(|e| e["event"] == "llm_response" && e["role"] == "shout")
        .map(|e| e["prompt"].as_str().unwrap())
        .collect();
    assert_eq!(prompts, ["Shout a.\n", "Shout b.\n", "Shout c.\n"]);
}

const RETRY: &str = r#"
workflow retry {
  prompts = "prompts"
  script = "script.yaml"
}
memory { n: int = 0 }
role ask: llm {
  prompt = "ask.tera"
  retries = 2
  max_visits = 10
  output json { n: int }
  update { set n = output.n }
}
role again: builtin { update { set n = memory.n + 1 } }
start -> ask
ask -> again
ask -> invalid_output when ask.invalid
again -> ask max 3
again -> done otherwise
exit done
"#;

#[test]
fn an_invalid_reply_is_asked_again_with_the_error_and_every_attempt_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        RETRY,
        &[(
            "ask.tera",
            "Give n.{% if last_error %} Your last answer was wrong: {{ last_error }}{% endif %}\n",
        )],
        "replies:\n  ask: '{\"n\": 1}'\n",
    );
    let (out, dir) = run_with(&wf, "ok", &[]);
    common::assert_success(&out);
    // `again -> ask max 3` is used up after three loops; `otherwise` ends the run.
    let state = common::state(&dir);
    assert_eq!(
        state["visits"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_u64)
            .sum::<u64>(),
        8
    );

    // Invalid, then still invalid (wrong type), then valid: two invalid_output events
    // and the retry prompt carries the validation error. A test block gives one reply
    // per attempt of visit 1.
    let test_block = r#"
test "retries" {
  reply ask visit 1 = "no json here"
  reply ask visit 1 = """{"n": "seven"}"""
  reply ask visit 1 = """{"n": 7}"""
  reply ask = """{"n": 1}"""
  expect exit done
  expect memory.n == 2
}
"#;
    let mut text = std::fs::read_to_string(&wf).unwrap();
    text.push_str(test_block);
    std::fs::write(&wf, text).unwrap();
    let runs = tmp.path().join("tests");
    let out = rondo(&[
        "test",
        wf.to_str().unwrap(),
        "--run-dir",
        runs.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let ev = events(&dir);
    let invalid: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "invalid_output")
        .collect();
    assert_eq!(invalid.len(), 2, "{invalid:?}");
    assert!(invalid[0]["error"].as_str().unwrap().contains("no JSON"));
    assert!(
        invalid[1]["error"]
            .as_str()
            .unwrap()
            .contains("$.n: expected an integer")
    );
    let accepted = ev
        .iter()
        .find(|e| e["event"] == "llm_response" && e["visit"] == 1)
        .unwrap();
    assert_eq!(accepted["attempt"], 3);
    assert!(
        accepted["prompt"]
            .as_str()
            .unwrap()
            .contains("$.n: expected an integer"),
        "{}",
        accepted["prompt"]
    );
    let first = common::state(&dir);
    assert_eq!(
        first["outputs"]
            .as_object()
            .unwrap()
            .values()
            .find(|v| v.get("n").is_some())
            .unwrap()["n"],
        1
    );
}

#[test]
fn run_limits_end_at_limit_with_exit_code_3() {
    let tmp = tempfile::tempdir().unwrap();
    let text = RETRY
        .replace("again -> ask max 3", "again -> ask max 30")
        .replace("max_visits = 10", "max_visits = 50")
        .replace(
            "script = \"script.yaml\"",
            "script = \"script.yaml\"\n  limits { max_steps = 6 }",
        );
    let wf = project(
        tmp.path(),
        &text,
        &[("ask.tera", "Give n.\n")],
        "replies:\n  ask: '{\"n\": 1}'\n",
    );
    let (out, dir) = run_with(&wf, "lim", &[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = json(dir.join("run.json"));
    assert_eq!(info["exit"], "limit");
    assert!(
        info["reason"].as_str().unwrap().contains("max_steps = 6"),
        "{}",
        info["reason"]
    );
    assert_eq!(common::state(&dir)["step"], 6);
}

/// A loop bounded by an input (`max_visits = input.n`) runs as many times as the run is
/// given, then ends at `limit`; `if(output.ok, ...)` picks the status of each visit.
const INPUT_BOUND: &str = r#"
workflow bound {
  input n: int = 2
}
memory {
  states: list["done" | "failed"] = []
}
role work: tool {
  command = ["python3", "-c", "import sys; sys.exit({{ visit }} % 2 == 0)"]
  max_visits = input.n
  update { states.append(if(output.ok, "done", "failed")) }
}
start -> work
work -> work when len(memory.states) < 100
work -> done otherwise
exit done
"#;

#[test]
fn an_input_bound_is_the_runs_value_and_below_one_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(tmp.path(), INPUT_BOUND, &[], "replies: {}\n");
    let (out, dir) = run_with(&wf, "three", &["-i", "n=3"]);
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    let info = json(dir.join("run.json"));
    assert!(
        info["reason"]
            .as_str()
            .unwrap()
            .contains("role `work` reached max_visits = 3"),
        "{}",
        info["reason"]
    );
    assert_eq!(
        common::state(&dir)["memory"][0],
        serde_json::json!(["done", "failed", "done"])
    );
    // The default applies when the run gives none.
    let (_, dir) = run_with(&wf, "default", &[]);
    assert_eq!(
        common::state(&dir)["memory"][0],
        serde_json::json!(["done", "failed"])
    );
    for bad in ["n=0", "n=-2"] {
        let (out, dir) = run_with(&wf, "bad", &["-i", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            common::stderr(&out).contains("but it bounds the visits of role `work`"),
            "{bad}: {}",
            common::stderr(&out)
        );
        assert!(!dir.join("run.json").exists(), "{bad}");
    }
}

#[test]
fn a_recorded_run_replays_offline_with_the_same_path_and_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        FANOUT,
        &[
            ("review.tera", "Review it.\n"),
            ("shout.tera", "Shout {{ item }}.\n"),
        ],
        "replies:\n  review: '{\"verdict\": \"bad\"}'\n  shout: 'Z'\n",
    );
    let (out, first) = run_with(&wf, "rec", &[]);
    assert!(out.status.success());
    // No script at all: every reply comes from the recorded events.
    std::fs::write(tmp.path().join("script.yaml"), "replies: {}\n").unwrap();
    let (out, second) = run_with(&wf, "replayed", &["--replay-from", first.to_str().unwrap()]);
    common::assert_success(&out);
    let (a, b) = (common::state(&first), common::state(&second));
    assert_eq!(a["path"], b["path"]);
    assert_eq!(a["memory"], b["memory"]);
    assert_eq!(b["memory"][1][0]["review"], "bad");
    // Without the recording the same run has no replies for the roles it can reach: it is
    // refused before it starts, naming them (it used to start and stop at `error`).
    let (out, third) = run_with(&wf, "noreplies", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!third.join("run.json").exists());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no reply for roles `review`, `shout`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const STRICT: &str = r#"
workflow strict {
  prompts = "prompts"
  script = "script.yaml"
}
import tool "open.yaml"
import tool "closed.yaml"
tool strict_echo {
  executable = "python3 -c 'import sys; print(sys.argv[1])'"
  input { a: string, inner: { b: int }? }
}
tool open_echo {
  executable = "python3 -c 'import sys; print(sys.argv[1])'"
  input { a: string }
  extra_fields = "allow"
}
role r1: tool { tools = [strict_echo] call = "strict_echo" args = { a: "x", extra: 1 } }
role r2: tool { tools = [strict_echo] call = "strict_echo" args = { a: "x", inner: { b: 1, c: 2 } } }
role r3: tool { tools = [strict_echo] call = "strict_echo" args = { a: "x", inner: { b: 1 } } }
role r4: tool { tools = [open_echo] call = "open_echo" args = { a: "x", extra: 1 } }
role r5: tool { tools = [yaml_open] call = "yaml_open" args = { a: "x", extra: 1 } }
role r6: tool { tools = [yaml_closed] call = "yaml_closed" args = { a: "x", extra: 1 } }
start -> r1
r1 -> r2
r2 -> r3
r3 -> r4
r4 -> r5
r5 -> r6
r6 -> done
exit done
"#;

/// A tool's arguments are checked by Rondo before it runs: fields its `input` does not
/// declare are rejected (at any depth) unless the tool allows them; a YAML spec's objects
/// are open unless its schema says `additionalProperties: false`.
#[test]
fn undeclared_argument_fields_are_rejected_unless_the_tool_allows_them() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = |name: &str, closed: &str| {
        format!(
            "tool_name: {name}\nexecutable: python3 -c 'import sys; print(sys.argv[1])'\ninput_schema:\n  type: object\n  properties:\n    a: {{type: string}}\n  required: [a]\n{closed}"
        )
    };
    std::fs::write(tmp.path().join("open.yaml"), spec("yaml_open", "")).unwrap();
    std::fs::write(
        tmp.path().join("closed.yaml"),
        spec("yaml_closed", "  additionalProperties: false\n"),
    )
    .unwrap();
    let wf = project(tmp.path(), STRICT, &[], "replies: {}\n");
    let (out, dir) = run_with(&wf, "r", &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let kinds: Vec<(String, Value)> = common::of_kind(&events(&dir), "tool_call")
        .iter()
        .map(|c| {
            (
                c["role"].as_str().unwrap().to_string(),
                c["result"]["error_kind"].clone(),
            )
        })
        .collect();
    let validation = Value::from("validation");
    assert_eq!(
        kinds,
        [
            ("r1".to_string(), validation.clone()),
            ("r2".to_string(), validation.clone()),
            ("r3".to_string(), Value::Null),
            ("r4".to_string(), Value::Null),
            ("r5".to_string(), Value::Null),
            ("r6".to_string(), validation),
        ]
    );
    let calls = common::of_kind(&events(&dir), "tool_call");
    assert!(
        calls[1]["result"]["error"]
            .as_str()
            .unwrap()
            .contains("$.inner: unexpected field `c`")
    );
    // What ran got the extra field as it was given.
    assert_eq!(calls[3]["result"]["data"]["extra"], 1);
}

const FROM_ENV: &str = r#"
workflow from_env {
  prompts = "prompts"
  script = "script.yaml"
  provider = first
  provider_env = "RONDO_TEST_PROVIDER"
  input rounds: int = env("RONDO_TEST_ROUNDS", 2)
  input label: string = env("RONDO_TEST_LABEL")
}
provider first { kind = "scripted" }
provider second { kind = "scripted" }
role r1: llm { prompt = "r1.tera" output text }
start -> r1
r1 -> done
exit done
"#;

/// `env("VAR", default)`: the variable's value when the input is not given (typed as a
/// `--input` value would be), the default when it is unset; `--input` wins. The header's
/// `provider_env` names the profile of roles that name none.
#[test]
fn inputs_and_the_default_profile_come_from_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        FROM_ENV,
        &[("r1.tera", "Hi\n")],
        "replies:\n  r1: hello\n",
    );
    let run = |id: &str, env: &[(&str, &str)], extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.args(["run", "-q", wf.to_str().unwrap(), "--run-dir"])
            .arg(tmp.path().join("runs"))
            .args(["--run-id", id])
            .args(extra);
        for var in [
            "RONDO_TEST_PROVIDER",
            "RONDO_TEST_ROUNDS",
            "RONDO_TEST_LABEL",
        ] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        (cmd.output().unwrap(), tmp.path().join("runs").join(id))
    };
    let (out, _) = run("a", &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("input `label` is required"));

    let (out, dir) = run("b", &[("RONDO_TEST_LABEL", "x")], &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let info = json(dir.join("run.json"));
    assert_eq!(info["inputs"]["rounds"], 2);
    assert_eq!(info["inputs"]["label"], "x");
    let profiles: Vec<Value> = common::of_kind(&events(&dir), "llm_response")
        .iter()
        .map(|e| e["profile"].clone())
        .collect();
    assert_eq!(profiles, ["first"]);

    let env = [
        ("RONDO_TEST_LABEL", "x"),
        ("RONDO_TEST_ROUNDS", "7"),
        ("RONDO_TEST_PROVIDER", "second"),
    ];
    let (out, dir) = run("c", &env, &["--input", "label=given"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let info = json(dir.join("run.json"));
    assert_eq!(info["inputs"]["rounds"], 7);
    assert_eq!(info["inputs"]["label"], "given");
    let response = &common::of_kind(&events(&dir), "llm_response")[0];
    assert_eq!(response["profile"], "second");

    let (out, _) = run(
        "d",
        &[("RONDO_TEST_LABEL", "x"), ("RONDO_TEST_ROUNDS", "seven")],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = common::stderr(&out);
    assert!(
        err.contains("input `rounds` (from RONDO_TEST_ROUNDS)"),
        "{err}"
    );
}

/// Runs started at the same moment get their own ids and records: a new id is claimed by
/// creating its folder (a server or an eval starts hundreds a second; the id's random part
/// is 16 bits).
#[test]
fn runs_started_together_never_share_a_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let path = project(
        tmp.path(),
        "workflow w {}\nrole b: builtin { update {} }\nstart -> b\nb -> done\nexit done\n",
        &[],
        "replies: {}\n",
    );
    let (_, loaded) = rondo::check::load_checked(&path, &Default::default()).unwrap();
    let Ok(workflow) = loaded.checked else {
        panic!("the workflow does not check")
    };
    let runs = tmp.path().join("runs");
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..1000)
            .map(|_| {
                scope.spawn(|| {
                    let options = rondo::run::RunOptions {
                        runs_root: runs.clone(),
                        ..Default::default()
                    };
                    let (_, state) = rondo::run::Interpreter::start(&workflow, &options)
                        .unwrap_or_else(|e| panic!("{e}"));
                    state.run_id
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len());
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), ids.len());
}

const BUILT_INS: &str = r#"
workflow pick {
  input question: string
}
memory {
  seen: list[int] = []
}
role count: builtin { update { seen.append(visits(count)) } }
role digits: builtin { update { seen.append(0) } }
role words: builtin { update { seen.append(-1) } }
start -> count
count -> count when visits(count) < 3 max 3
count -> digits when matches(input.question, "^[0-9]+$")
count -> words otherwise
digits -> numeric
words -> text
exit numeric
exit text { code = 1 }
"#;

#[test]
fn visits_counts_a_roles_runs_and_matches_tests_its_compiled_pattern() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(tmp.path(), BUILT_INS, &[], "replies: {}\n");
    let (out, dir) = run_with(&wf, "number", &["-i", "question=123"]);
    common::assert_success(&out);
    let state = common::state(&dir);
    assert_eq!(state["memory"][0], serde_json::json!([1, 2, 3, 0]));
    assert_eq!(json(dir.join("run.json"))["exit"], "numeric");
    let (out, dir) = run_with(&wf, "word", &["-i", "question=12 apples"]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert_eq!(
        common::state(&dir)["memory"][0],
        serde_json::json!([1, 2, 3, -1])
    );
    assert_eq!(json(dir.join("run.json"))["exit"], "text");
}
