//! Scripted replies (issue 22 §3): a `rondo run` whose script has no reply for an llm role
//! every run reaches is refused before it starts, naming every role without replies; one
//! only some runs reach is named in a warning; replies that run out during a run end it at
//! `limit`, finished — never at `error`, "resumable".

mod common;

use common::{json, project, run, stderr};

const WORKFLOW: &str = r#"
workflow replies {
  prompts = "prompts"
  script = "script.yaml"
}
role plan: llm {
  prompt = "plan.tera"
  output text
}
role write: llm {
  prompt = "write.tera"
  max_visits = 5
  output text
}
role review: llm {
  prompt = "review.tera"
  output json { ok: bool }
}
start -> plan
plan -> write
write -> review
review -> invalid_output when review.invalid
review -> done when review.ok
review -> write otherwise
exit done
"#;

const PROMPTS: &[(&str, &str)] = &[
    ("plan.tera", "Plan.\n"),
    ("write.tera", "Write.\n"),
    ("review.tera", "Review.\n"),
];

#[test]
fn a_run_whose_script_leaves_out_reachable_roles_is_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        WORKFLOW,
        PROMPTS,
        "replies:\n  plan: 'a plan'\n",
    );
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no reply for roles `write`, `review`, which every run reaches"),
        "{err}"
    );
    // Refused before anything started: no run was recorded.
    assert!(!dir.join("run.json").exists(), "{}", dir.display());
    // A `default:` reply answers every role: the run starts.
    let wf = project(
        tmp.path(),
        WORKFLOW,
        PROMPTS,
        "replies:\n  review: '{\"ok\": true}'\ndefault: 'text'\n",
    );
    let (out, _) = run(&wf, "r2");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn replies_that_run_out_during_a_run_end_it_at_limit() {
    let tmp = tempfile::tempdir().unwrap();
    // `write` has replies for visits 1 and 2; the review sends it back a second time.
    let script = r#"replies:
  plan: 'a plan'
  write:
    "1": 'draft one'
    "2": 'draft two'
  review:
    - '{"ok": false}'
    - '{"ok": false}'
    - '{"ok": true}'
"#;
    let wf = project(tmp.path(), WORKFLOW, PROMPTS, script);
    let (out, dir) = run(&wf, "r");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let record = json(dir.join("run.json"));
    assert_eq!(record["exit"], "limit");
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(
        record["reason"],
        "the scripted replies ran out: no reply for role `write`, visit 3"
    );
    let state = json(dir.join("state.json"));
    assert_eq!(
        state["path"],
        serde_json::json!(["plan", "write", "review", "write", "review"])
    );
}

/// A role only some runs reach may go without replies: the run starts with a warning
/// naming it, and ends at `limit` only if it gets there.
#[test]
fn a_role_only_some_runs_reach_is_named_in_a_warning() {
    const BRANCHING: &str = r#"
workflow branching {
  prompts = "prompts"
  script = "script.yaml"
}
role ask: llm {
  prompt = "plan.tera"
  output json { ok: bool }
}
role fix: llm {
  prompt = "write.tera"
  output text
}
start -> ask
ask -> invalid_output when ask.invalid
ask -> done when ask.ok
ask -> fix otherwise
fix -> done
exit done
"#;
    let tmp = tempfile::tempdir().unwrap();
    for (ok, code) in [("true", 0), ("false", 3)] {
        let script = format!("replies:\n  ask: '{{\"ok\": {ok}}}'\n");
        let wf = project(tmp.path(), BRANCHING, PROMPTS, &script);
        let (out, dir) = run(&wf, &format!("r{ok}"));
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert!(
            stderr(&out)
                .contains("no reply for role `fix`; a run that reaches one ends at `limit`"),
            "{}",
            stderr(&out)
        );
        let record = json(dir.join("run.json"));
        assert_eq!(record["status"], "finished");
    }
}
