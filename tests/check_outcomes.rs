//! How `check` treats invalid outcomes: `X.invalid` routes are recognised, typed, kept out
//! of the valid-outcome routing analysis, and required for every json llm role.

mod common;

use rondo::source::SourceFile;

fn check(text: &str) -> (rondo::compile::Workflow, Vec<&'static str>) {
    let file = SourceFile::new("tests/fixtures/check/inline.rondo", text);
    let (workflow, diags, _) = common::check_source(&file, true);
    let codes = common::codes(&diags);
    (workflow, codes)
}

fn workflow(routes: &str) -> String {
    format!(
        r#"workflow w {{
  prompts = "_support/prompts"
  input question: string
}}
role judge: llm {{
  prompt = "ask.tera"
  output json {{ ok: bool, why: string? }}
}}
role fix: builtin {{ update {{ set note = judge.invalid_reply.raw }} }}
role say: llm {{
  prompt = "ask.tera"
  output text
}}
memory {{ note: string? = null }}
start -> judge
{routes}
fix -> done
say -> done
exit done
"#
    )
}

#[test]
fn an_invalid_route_after_otherwise_is_taken_and_sets_on_invalid() {
    let (wf, codes) = check(&workflow(
        "judge -> say otherwise\njudge -> fix when judge.invalid",
    ));
    assert!(codes.is_empty(), "{codes:?}");
    let flags: Vec<bool> = wf.routes.iter().map(|r| r.on_invalid).collect();
    assert_eq!(flags.iter().filter(|f| **f).count(), 1, "{flags:?}");
}

#[test]
fn an_invalid_route_does_not_make_valid_routing_exhaustive() {
    let (_, codes) = check(&workflow(
        "judge -> say when judge.ok\njudge -> fix when judge.invalid",
    ));
    assert_eq!(codes, ["rondo::route::non_exhaustive"]);
    let (_, codes) = check(&workflow(
        "judge -> say when judge.ok\njudge -> say when not judge.ok\njudge -> fix when judge.invalid",
    ));
    assert!(codes.is_empty(), "{codes:?}");
}

#[test]
fn only_exactly_x_invalid_is_an_invalid_route() {
    // A compound condition is an ordinary route: the invalid outcome stays unrouted.
    let (wf, codes) = check(&workflow(
        "judge -> say otherwise\njudge -> fix when judge.invalid and len(judge.invalid_reply.raw) > 0",
    ));
    assert!(wf.routes.iter().all(|r| !r.on_invalid));
    assert!(
        codes.contains(&"rondo::route::invalid_not_routed"),
        "{codes:?}"
    );
}

#[test]
fn text_roles_have_no_invalid_pseudo_fields() {
    let (_, codes) = check(&workflow(
        "judge -> say otherwise\njudge -> fix when judge.invalid\nsay -> fix when say.invalid",
    ));
    assert!(codes.contains(&"rondo::expr::unknown_field"), "{codes:?}");
}
