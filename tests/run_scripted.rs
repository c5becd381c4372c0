//! Scripted replies (issue 22 §3): a `rondo run` whose script has no reply for an llm role
//! the workflow can reach is refused before it starts, naming every role without replies,
//! unless the script says it is written not to reach them (`unreached: [...]`); replies
//! that run out during a run (a role's visits past its replies, or a role said unreached
//! that the run reached) end it at `limit`, finished — never at `error`, "resumable".

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
        err.contains("no reply for roles `write`, `review`, which the workflow can reach"),
        "{err}"
    );
    assert!(err.contains("`unreached: [write, review]`"), "{err}");
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
    let state = common::state(&dir);
    assert_eq!(
        state["path"],
        serde_json::json!(["plan", "write", "review", "write", "review"])
    );
}

/// A role only some runs reach is refused too (it was only warned of, and a run that got
/// there ended at `limit`); a script that says it is written for runs that do not reach it
/// (`unreached: [fix]`) starts, and a run that reaches it anyway ends at `limit`, saying so.
#[test]
fn a_role_only_some_runs_reach_must_have_replies_or_be_declared_unreached() {
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
    let wf = project(
        tmp.path(),
        BRANCHING,
        PROMPTS,
        "replies:\n  ask: '{\"ok\": true}'\n",
    );
    let (out, dir) = run(&wf, "refused");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no reply for role `fix`, which the workflow can reach"),
        "{err}"
    );
    assert!(!dir.join("run.json").exists(), "{}", dir.display());
    for (ok, code, exit) in [("true", 0, "done"), ("false", 3, "limit")] {
        let script = format!("replies:\n  ask: '{{\"ok\": {ok}}}'\nunreached: [fix]\n");
        let wf = project(tmp.path(), BRANCHING, PROMPTS, &script);
        let (out, dir) = run(&wf, &format!("r{ok}"));
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        let record = json(dir.join("run.json"));
        assert_eq!(record["status"], "finished");
        assert_eq!(record["exit"], exit);
        if exit == "limit" {
            assert_eq!(
                record["reason"],
                "the scripted replies ran out: no reply for role `fix`, visit 1"
            );
        }
    }
    // A name there that is no llm role of the workflow is refused, with the nearest one.
    let wf = project(
        tmp.path(),
        BRANCHING,
        PROMPTS,
        "replies:\n  ask: '{\"ok\": true}'\nunreached: [fxi]\n",
    );
    let (out, _) = run(&wf, "typo");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`unreached` names `fxi`, which is not an llm role"),
        "{}",
        stderr(&out)
    );
}
