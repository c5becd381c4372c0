//! What `check` proves beyond single diagnostics: visit bounds, the worst-case LLM call
//! count, exit codes — and the known bugs of the checker, each with its exact input.

mod common;

use rondo::compile::NodeKind;
use rondo::source::SourceFile;

fn check(
    text: &str,
) -> (
    rondo::compile::Workflow,
    rondo::diagnostics::Diagnostics,
    rondo::check::Summary,
) {
    let file = SourceFile::new("tests/fixtures/check/inline.rondo", text);
    common::check_source(&file, true)
}

fn bound(summary: &rondo::check::Summary, role: &str) -> Option<u64> {
    summary
        .max_visits
        .iter()
        .find(|(name, _)| name == role)
        .unwrap_or_else(|| panic!("no role `{role}` in the summary"))
        .1
}

const LOOP: &str = r#"workflow loop {
  prompts = "_support/prompts"
  input question: string
}

role ask: llm {
  prompt = "ask.tera"
  retries = 1
  max_visits = 4
}

role run: tool {
  command = ["true"]
}

start -> ask
ask -> run
run -> ask when not run.ok
run -> success otherwise
exit success
"#;

#[test]
fn a_bounded_loop_has_bounded_visits_and_llm_calls() {
    let (_, diags, summary) = check(LOOP);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(bound(&summary, "ask"), Some(4));
    // `run` follows each `ask`, so it runs at most as often, plus the loop budget.
    assert!(bound(&summary, "run").is_some_and(|b| b >= 4));
    // 4 visits × (1 + 1 retry).
    assert_eq!(summary.worst_case_llm_calls, Some(8));
    assert_eq!(
        (summary.roles, summary.llm_roles, summary.tool_roles),
        (2, 1, 1)
    );
    assert_eq!((summary.routes, summary.exits), (4, 1));
}

#[test]
fn an_edge_bound_also_bounds_the_loop() {
    let text = LOOP.replace("  max_visits = 4\n", "").replace(
        "run -> ask when not run.ok",
        "run -> ask max 2 when not run.ok",
    );
    let (_, diags, summary) = check(&text);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    // One entry from start plus two trips round the loop.
    assert_eq!(bound(&summary, "ask"), Some(3));
    assert_eq!(summary.worst_case_llm_calls, Some(6));
}

/// `max_visits = input.N`: the loop is bounded, the figures use the input's default and the
/// summary says so; without a default the count is the run's to set.
#[test]
fn an_input_bound_bounds_the_loop_with_its_default() {
    let text = LOOP
        .replace(
            "  input question: string\n",
            "  input question: string\n  input tries: int = 3\n",
        )
        .replace("  max_visits = 4\n", "  max_visits = input.tries\n");
    let (_, diags, summary) = check(&text);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(bound(&summary, "ask"), Some(3));
    assert_eq!(summary.worst_case_llm_calls, Some(6));
    assert_eq!(summary.bounded_by_inputs, ["tries"]);
    assert!(
        summary
            .line()
            .ends_with("at most 6 LLM calls per run with the default of input `tries`"),
        "{}",
        summary.line()
    );
    let no_default = text.replace("input tries: int = 3", "input tries: int");
    let (_, diags, summary) = check(&no_default);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(summary.worst_case_llm_calls, None);
    assert!(
        summary
            .line()
            .ends_with("a number of LLM calls per run set by input `tries`"),
        "{}",
        summary.line()
    );
}

/// `if(c, a, b)`: the condition is a truth value, the result is the wider side or either, and
/// it checks against the memory it is stored in.
#[test]
fn if_types_as_either_side() {
    let workflow = |value: &str| {
        format!(
            "workflow w {{}}\nmemory {{\n  status: \"todo\" | \"done\" | \"failed\" = \"todo\"\n}}\nrole work: tool {{\n  command = [\"true\"]\n  update {{ set status = {value} }}\n}}\nstart -> work\nwork -> success\nexit success\n"
        )
    };
    let (_, diags, _) = check(&workflow(r#"if(output.ok, "done", "failed")"#));
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    let (_, diags, _) = check(&workflow(r#"if(output.ok, "done", "later")"#));
    assert_eq!(common::codes(&diags), ["rondo::update::type_mismatch"]);
    let (_, diags, _) = check(&workflow(r#"if(output.stdout, "done", "failed")"#));
    assert_eq!(common::codes(&diags), ["rondo::expr::bad_argument"]);
}

#[test]
fn exit_codes() {
    let text = "workflow w {}\nrole r: tool {\n  command = [\"true\"]\n}\nstart -> r\nr -> ok when r.ok\nr -> bad when r.exit_code == 1\nr -> worse otherwise\nexit ok\nexit bad\nexit worse { code = 7 }\n";
    let (workflow, diags, _) = check(text);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    let code = |name: &str| match &workflow.node(workflow.find_node(name).expect(name)).kind {
        NodeKind::Exit(spec) => spec.code,
        _ => panic!("{name} is not an exit"),
    };
    assert_eq!((code("ok"), code("bad"), code("worse")), (0, 1, 7));
    assert_eq!(
        (code("limit"), code("error"), code("interrupted")),
        (3, 2, 130)
    );
}

#[test]
fn graph_passes_wait_for_names_to_resolve() {
    // An unknown name must not cascade into dead ends or unreachable roles.
    let text = "workflow w {}\nrole a: tool {\n  command = [\"true\"]\n}\nrole b: tool {\n  command = [\"true\"]\n}\nstart -> a\na -> bb\nb -> success\nexit success\n";
    let (_, diags, _) = check(text);
    assert_eq!(common::codes(&diags), ["rondo::route::unknown_target"]);
}

/// A role reached only through `fixer -> ask max 3`-style bounded routes runs at most
/// as often as that route is taken, not as often as the loop around it.
#[test]
fn a_role_behind_a_bounded_route_runs_at_most_its_bound() {
    let text = r#"workflow w {
  prompts = "_support/prompts"
  input question: string
}

role ask: llm {
  prompt = "ask.tera"
  retries = 0
}

role fixer: llm {
  prompt = "ask.tera"
  retries = 0
}

start -> ask
ask -> fixer max 3 when len(ask) == 0
ask -> success otherwise
fixer -> ask
exit success
"#;
    let (_, diags, summary) = check(text);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(bound(&summary, "fixer"), Some(3));
    assert_eq!(bound(&summary, "ask"), Some(4));
    assert_eq!(summary.worst_case_llm_calls, Some(7));
}

const SUPERVISOR: &str = r#"workflow w {
  prompts = "_support/prompts"
  input question: string
}

role supervisor: llm {
  prompt = "ask.tera"
  retries = 2
  max_visits = 10
  output json { next: "work" | "done" }
}

role worker: llm {
  prompt = "ask.tera"
  retries = 0
}

role check_work: tool {
  command = ["true"]
}

start -> supervisor
supervisor -> invalid_output when supervisor.invalid
supervisor -> worker when supervisor.next == "work"
supervisor -> success otherwise
worker -> check_work
check_work -> supervisor
exit success
"#;

/// A worker inside a supervisor loop capped at 10 runs at most 10 times, not 11, and the
/// worst case multiplies each role's visits by its attempts (1 + retries).
#[test]
fn a_worker_inside_a_capped_supervisor_loop_runs_at_most_the_cap() {
    let (_, diags, summary) = check(SUPERVISOR);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(bound(&summary, "supervisor"), Some(10));
    assert_eq!(bound(&summary, "worker"), Some(10));
    assert_eq!(bound(&summary, "check_work"), Some(10));
    // 10 × (1 + 2) + 10 × (1 + 0).
    assert_eq!(summary.worst_case_llm_calls, Some(40));
}

/// `retries` at the top of the 64-bit range saturates the figure instead of wrapping to 0.
#[test]
fn the_largest_retries_does_not_overflow_the_worst_case() {
    let text = SUPERVISOR.replace("retries = 2", "retries = 18446744073709551615");
    let (_, diags, summary) = check(&text);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(summary.worst_case_llm_calls, Some(u64::MAX));
    assert!(
        summary
            .line()
            .ends_with("more than 18446744073709551614 LLM calls per run"),
        "{}",
        summary.line()
    );
}

/// A number past the 64-bit range is an error, not a clamped value.
#[test]
fn a_number_past_64_bits_is_an_error() {
    let text = SUPERVISOR.replace("retries = 2", "retries = 99999999999999999999");
    let (_, diags, _) = check(&text);
    assert_eq!(common::codes(&diags), ["rondo::syntax::number_too_large"]);
}

/// A map fan-out runs its worker at most `max` items per time its route is taken, and the
/// route at most `max` times; the join runs once per fan-out.
#[test]
fn a_map_fan_out_bounds_its_worker_by_items_and_takings() {
    let text = r#"workflow w {}

memory {
  items: list[string] = []
}

role plan: tool {
  command = ["true"]
  max_visits = 5
}

role each: tool {
  command = ["true"]
}

role collect: tool {
  command = ["true"]
}

start -> plan
plan -> map each over memory.items -> collect max 4
collect -> plan when not collect.ok
collect -> success otherwise
exit success
"#;
    let (_, diags, summary) = check(text);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    assert_eq!(bound(&summary, "plan"), Some(5));
    assert_eq!(bound(&summary, "collect"), Some(4));
    assert_eq!(bound(&summary, "each"), Some(16));
}

/// `T? ?? T` is `T`; `T? ?? U?` stays optional; a fallback of another type is an error.
#[test]
fn coalesce_types() {
    let with = |value: &str| {
        format!(
            "workflow w {{\n  input steps: list[string]?\n  input more: list[string]?\n  input n: int?\n}}\nmemory {{\n  plan: list[string] = []\n  count: int = 0\n}}\nrole r: builtin {{\n  update {{\n    {value}\n  }}\n}}\nstart -> r\nr -> done\nexit done\n"
        )
    };
    for clean in [
        "set plan = input.steps ?? []",
        "set plan = input.steps ?? input.more ?? [\"x\"]",
        "set count = input.n ?? 0",
        "plan.append(first(input.steps) ?? \"none\")",
    ] {
        let (_, diags, _) = check(&with(clean));
        assert!(diags.is_empty(), "{clean}: {:?}", common::codes(&diags));
    }
    for (bad, code) in [
        (
            "set plan = input.steps ?? input.more",
            "rondo::update::optional_value",
        ),
        (
            "set count = input.n ?? \"none\"",
            "rondo::expr::type_mismatch",
        ),
        (
            "plan.append(first(input.steps))",
            "rondo::update::optional_value",
        ),
        ("set count = null", "rondo::update::optional_value"),
    ] {
        let (_, diags, _) = check(&with(bad));
        assert_eq!(common::codes(&diags), [code], "{bad}");
    }
}

// ---------- known bugs (ignored until src/ is fixed) ----------

/// Input: two pairs of duplicate inputs. The second pair's "first declared here" label
/// points at the second `a` (line 3) instead of the first `b` (line 4): the id of the
/// compiled inputs is used as an index into the declared ones, which include duplicates.
#[test]
fn duplicate_input_points_at_its_first_declaration() {
    let text = "workflow w {\n  input a: string\n  input a: string\n  input b: string\n  input b: string\n}\nrole r: tool {\n  command = [\"true\"]\n}\nstart -> r\nr -> success\nexit success\n";
    let file = SourceFile::new("t.rondo", text);
    let (_, diags, _) = common::check_source(&file, true);
    let sorted = diags.sorted();
    let second = sorted
        .iter()
        .filter(|d| d.code == "rondo::name::duplicate")
        .nth(1)
        .expect("two duplicates");
    let first_label = second.labels.get(1).expect("a `first declared here` label");
    assert_eq!(file.line_col(first_label.span.start).0, 4);
}

/// Input: `tool calc { usage = "calc EXPR" }` — one missing `executable` is reported
/// twice with the same code: by the compiler ("has no `executable`") and again by the
/// tool pass ("field `executable` is empty").
#[test]
fn a_missing_executable_is_reported_once() {
    let (_, _, diags, _) = common::check_path(
        std::path::Path::new("tests/fixtures/check/tool/no_executable.rondo"),
        true,
    );
    let count = diags
        .iter()
        .filter(|d| d.code == "rondo::tool::no_executable")
        .count();
    assert_eq!(count, 1);
}

/// Input: a route condition nested 100,000 parentheses deep. pest's stack guard makes the
/// whole-file parse fail (`syntax::too_deep`), and then `workflow::empty` claims the
/// file "declares no workflow" — it does; the compiler does not see the syntax error
/// because `compile::run` only looks at its own diagnostics.
#[test]
fn a_syntax_error_is_not_also_an_empty_workflow() {
    let depth = 100_000;
    let text = format!(
        "workflow w {{}}\nrole r: tool {{\n  command = [\"true\"]\n}}\nstart -> r\nr -> success when {}r.ok{}\nr -> success otherwise\nexit success\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    // The main thread's 8 MiB, so that pest's guard (not an overflow elsewhere) decides.
    let codes = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let file = SourceFile::new("deep.rondo", text);
            let (_, diags, _) = common::check_source(&file, true);
            common::codes(&diags)
        })
        .expect("thread")
        .join()
        .expect("no panic");
    assert!(codes.contains(&"rondo::syntax::too_deep"), "{codes:?}");
    assert!(!codes.contains(&"rondo::workflow::empty"), "{codes:?}");
}

/// Input: a role block whose closing `}` is missing. Every line of the block becomes its
/// own `invalid_line` ("this line is not a declaration or a route" for `role a: tool {`),
/// the role is lost, and routes to it become `unknown_target` errors: 5 errors for one
/// missing brace, none of which says "unclosed `{`".
#[test]
fn an_unclosed_block_is_one_error_about_the_brace() {
    let text = "workflow w {}\n\nrole a: tool {\n  command = [\"true\"]\n  timeout = 5s\n\nstart -> a\na -> success\nexit success\n";
    let file = SourceFile::new("t.rondo", text);
    let (_, diags, _) = common::check_source(&file, true);
    let sorted = diags.sorted();
    assert_eq!(sorted.len(), 1, "{:?}", common::codes(&diags));
    assert!(
        sorted[0].message.contains('{')
            || sorted[0].help.as_deref().unwrap_or("").contains("unclosed")
    );
}

// ---- templates typed down to fields, and reads of roles that may not have run ----------------

/// A workflow whose `answer` renders `prompt`, after `build` ran (or before, with `early`).
fn templated(prompt: &str, early: bool) -> String {
    let routes = if early {
        "start -> answer\nanswer -> build\nbuild -> success"
    } else {
        "start -> build\nbuild -> answer\nanswer -> success"
    };
    format!(
        r#"workflow templated {{
  prompts = "_support/prompts"
}}

type Step {{
  title: string
}}

type Message {{
  name: string
  text: string
}}

memory {{
  steps: list[Step] = []
  messages: list[Message] = []
  notes: map[string] = {{}}
}}

role build: tool {{
  command = ["true"]
}}

role answer: llm {{
  prompt = "{prompt}"
  reads = [steps, messages, notes]
  max_visits = 3
}}

{routes}
exit success
"#
    )
}

#[test]
fn guarded_reads_loops_partials_and_set_values_pass() {
    // `build` has not run when `answer` starts: every read of it in guarded.tera is guarded.
    let (_, diags, _) = check(&templated("guarded.tera", true));
    assert!(diags.is_empty(), "{:#?}", diags.sorted());
    let (_, diags, _) = check(&templated("guarded.tera", false));
    assert!(diags.is_empty(), "{:#?}", diags.sorted());
}

#[test]
fn a_partial_is_checked_with_the_includers_loop_variable() {
    let (_, diags, _) = check(&templated("includes_typo.tera", false));
    let sorted = diags.sorted();
    assert_eq!(common::codes(&diags), ["rondo::template::unknown_field"]);
    let ext = sorted[0]
        .external
        .as_ref()
        .expect("reported in the template");
    assert!(ext.path.ends_with("_message_typo.tera"), "{:?}", ext.path);
    let text = &ext.text[ext.span.start..ext.span.end];
    assert_eq!(text, "txet");
    assert_eq!(sorted[0].help.as_deref(), Some("did you mean `text`?"));
    // The workflow side names the role and the file it renders.
    assert!(
        sorted[0].labels[0]
            .text
            .contains("includes `_message_typo.tera`")
    );
}

#[test]
fn a_role_reading_its_own_output_in_its_own_prompt_has_not_run_yet() {
    let (_, diags, _) = check(&templated("own_output.tera", false));
    assert_eq!(common::codes(&diags), ["rondo::template::may_not_have_run"]);
    let (_, diags, _) = check(&templated("own_output_guarded.tera", false));
    assert!(diags.is_empty(), "{:#?}", diags.sorted());
}

#[test]
fn template_diagnostics_render_at_the_templates_line_and_column() {
    let file = SourceFile::new(
        "tests/fixtures/check/inline.rondo",
        templated("includes_typo.tera", false),
    );
    let (_, diags, _) = common::check_source(&file, true);
    let sorted = diags.sorted();
    let human = rondo::diagnostics::render_human(&file, &sorted, false, 100);
    assert!(
        human.starts_with("tests/fixtures/check/_support/prompts/_message_typo.tera:1:22\n"),
        "{human}"
    );
    assert!(
        human.contains("inline.rondo:"),
        "the role is shown too: {human}"
    );
    let json = rondo::diagnostics::to_json(&file, &sorted);
    assert_eq!(json[0]["line"], 1);
    assert_eq!(json[0]["column"], 22);
}

const BRANCHES: &str = r#"workflow branches {
  input deep: bool = false
}

role a: tool {
  command = ["true"]
}

role b: tool {
  command = ["true"]
}

role c: tool {
  command = ["true"]
}

role d: tool {
  command = ["true"]
}

role p: tool {
  command = ["true"]
}

role q: tool {
  command = ["true"]
}

role j: tool {
  command = ["true"]
}

start -> a
a -> b when input.deep
a -> c otherwise
b -> d
c -> d
d -> parallel [p, q] -> j
j -> a when not d.ok max 2
j -> success otherwise
exit success
"#;

#[test]
fn definite_runs_intersect_at_merges_and_joins_see_every_branch() {
    let (workflow, diags, _) = check(BRANCHES);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    let runs = rondo::check::ran::definitely_valid(&workflow);
    let n = |name: &str| workflow.find_node(name).expect("node");
    // Nothing has run when `a` starts, even on the loop back from `j`.
    for r in ["a", "b", "c", "d", "p", "q", "j"] {
        assert!(!runs.has(n("a"), n(r)), "{r} at a");
    }
    // At the merge `d`: `a` on both paths, `b` and `c` on one each.
    assert!(runs.has(n("d"), n("a")));
    assert!(!runs.has(n("d"), n("b")));
    assert!(!runs.has(n("d"), n("c")));
    // Branches see what ran before the fork, not each other; the join sees them all.
    assert!(runs.has(n("p"), n("d")) && !runs.has(n("p"), n("q")));
    for r in ["a", "d", "p", "q"] {
        assert!(runs.has(n("j"), n(r)), "{r} at j");
    }
    assert!(!runs.has(n("j"), n("b")));
}

fn reading(condition: &str) -> String {
    format!(
        r#"workflow reads {{
  input deep: bool = false
}}

role probe: tool {{
  command = ["true"]
}}

role report: tool {{
  command = ["true"]
}}

start -> probe when input.deep
start -> report otherwise
probe -> report
report -> success when {condition}
report -> failed otherwise
exit success
exit failed
"#
    )
}

#[test]
fn an_expression_reading_a_role_that_may_not_have_run_needs_a_guard() {
    // An ordering of a value that is null when `probe` did not run fails at run time.
    let (_, diags, _) = check(&reading("probe.execution_time > 1.0"));
    assert_eq!(common::codes(&diags), ["rondo::expr::may_not_have_run"]);
    for fine in [
        "visits(probe) > 0 and probe.execution_time > 1.0",
        "probe != null and probe.execution_time > 1.0",
        // A truth value or an equality with a literal reads null as "not (yet)".
        "probe.ok",
        "probe.status == \"failed\"",
        // Optional fields are null-aware already.
        "probe.exit_code == null",
    ] {
        let (_, diags, _) = check(&reading(fine));
        assert!(diags.is_empty(), "{fine}: {:?}", common::codes(&diags));
    }
}

#[test]
fn a_deeply_nested_template_is_one_diagnostic_not_a_crash() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Past the checker's limit (64); tera's own recursive parser sets the ceiling of a test.
    let depth = 100;
    let template =
        "{% if input.q %}".repeat(depth) + "{{ input.q }}" + &"{% endif %}".repeat(depth);
    std::fs::create_dir(dir.path().join("prompts")).expect("prompts dir");
    std::fs::write(dir.path().join("prompts/deep.tera"), template).expect("write template");
    let text = r#"workflow deep {
  prompts = "prompts"
  input q: string
}

role answer: llm {
  prompt = "deep.tera"
}

start -> answer
answer -> success
exit success
"#;
    let file = SourceFile::new(dir.path().join("deep.rondo"), text);
    let (_, diags, _) = common::check_source(&file, true);
    // Refused before tera parses it (tera's parser recurses), as one diagnostic.
    assert_eq!(common::codes(&diags), ["rondo::template::parse"]);
    let text = format!("{diags:?}");
    assert!(text.contains("levels deep"), "{text}");
}

fn inline_reads(command: &str, artifact: &str) -> String {
    format!(
        r#"workflow inline {{}}

artifact "trace/{artifact}.json" = round

role d: tool {{
  command = ["true"]
}}

role p: tool {{
  command = ["sh", "-c", "echo {command}"]
  log = "logs/p_{{{{ d.exit_code }}}}.log"
}}

role q: tool {{
  command = ["true"]
  artifact "out/q_{{{{ q.exit_code }}}}_{{{{ d.stdout | length }}}}.txt" = q.stdout
}}

role j: tool {{
  command = ["echo", "{{{{ p.stdout }}}} {{{{ q.stdout }}}}"]
}}

start -> d
d -> parallel [p, q] -> j
j -> success
exit success
"#
    )
}

#[test]
fn an_inline_template_reads_what_surely_ran_where_it_renders() {
    // A branch's command renders before its sibling ran (seed 0x5eed0023 of the soundness
    // test); the workflow artifact renders after every step, when `q` may not have run.
    for (command, artifact, code) in [
        (
            "{{ q.stdout }}",
            "{{ round }}",
            "rondo::template::may_not_have_run",
        ),
        (
            "{{ d.stdout }}",
            "{{ q.stdout }}",
            "rondo::template::may_not_have_run",
        ),
        (
            "{{ d.nmae }}",
            "{{ round }}",
            "rondo::template::unknown_field",
        ),
        (
            "{{ last_error }}",
            "{{ round }}",
            "rondo::template::unknown_variable",
        ),
    ] {
        let (_, diags, _) = check(&inline_reads(command, artifact));
        assert_eq!(common::codes(&diags), [code], "{command} / {artifact}");
    }
    // Guarded, defaulted, or read where the role surely ran: the fork's role in a branch,
    // a role's own output in its artifact name, the branches at the join.
    for (command, artifact) in [
        (
            "{{ d.stdout }} {% if q %}{{ q.stdout }}{% endif %}",
            "{{ round }}",
        ),
        (
            "{{ q.stdout | default(value='') }}",
            "{{ q.exit_code | default(value=0) }}",
        ),
        (
            "{{ input | length }} {{ memory | length }} {{ role }}",
            "{{ run_id }}_{{ step }}",
        ),
    ] {
        let (_, diags, _) = check(&inline_reads(command, artifact));
        assert!(
            diags.is_empty(),
            "{command} / {artifact}: {:?}",
            common::codes(&diags)
        );
    }
}

/// Found by the generative soundness test (seed 0x5eed02ea): a bare role read (the whole
/// output) stored before the role ran put nulls into a `list[T]` and crashed a later
/// prompt. It is checked like a field read.
#[test]
fn a_whole_output_stored_before_its_role_ran_is_an_error() {
    let text = r#"workflow w {
  prompts = "_support/prompts"
  input question: string
}
type Step { title: string }
memory { plan: list[Step] = [] }
role early: builtin {
  update { plan.extend([late]) }
}
role late: llm {
  prompt = "ask.tera"
  output json Step
}
role after: builtin {
  update { plan.append(late) }
}
start -> early
early -> late
late -> invalid_output when late.invalid
late -> after
after -> done
exit done
"#;
    let (_, diags, _) = check(text);
    let codes = common::codes(&diags);
    assert_eq!(codes, vec!["rondo::expr::may_not_have_run"], "{codes:?}");
}

/// A tool block with one setting; the workflow around it is sound.
fn tool_with(setting: &str) -> String {
    format!(
        "workflow tools {{}}\n\ntool calc {{\n  executable = \"calc\"\n  version = \"1.0\"\n  installation = \"pip\"\n  {setting}\n}}\n\nrole work: tool {{\n  run = calc\n}}\n\nstart -> work\nwork -> success\nexit success\n"
    )
}

/// `check` refuses exactly what the installer refuses: the same validation, the same
/// renderer, each problem at the line and column of its setting.
#[test]
fn check_refuses_what_the_installer_refuses() {
    for (setting, code) in [
        ("py_standalone = \"3.11.4\"", "rondo::tool::bad_python"),
        (
            "setup_script = \"{{ env_python | default(value='python3') }} -V\"",
            "rondo::tool::bad_setup_script",
        ),
        (
            "setup_script = \"{% if version %}echo {{ version }}{% endif %}\"",
            "rondo::tool::bad_setup_script",
        ),
    ] {
        let text = tool_with(setting);
        let (workflow, diags, _) = check(&text);
        assert_eq!(common::codes(&diags), [code], "{setting}");
        let file = SourceFile::new("inline.rondo", text.as_str());
        let at = file.line_col(diags.iter().next().unwrap().primary_span().start);
        let value_column = setting.find('"').unwrap() + 3;
        assert_eq!(at, (7, value_column), "{setting}: the value is labelled");
        // The installer's own validation says no to the compiled spec too.
        let spec = &workflow.tools[0].spec;
        assert!(
            spec.validate().is_err(),
            "{setting}: the installer accepts it"
        );
    }
    // What both accept: a minor version and the variables the installer substitutes.
    let (workflow, diags, _) = check(&tool_with(
        "py_standalone = \"3.11\"\n  setup_script = \"{{ env_python }} -m calc --version\"",
    ));
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    workflow.tools[0]
        .spec
        .validate()
        .expect("the installer accepts it");
}

/// One duration syntax in the file and in YAML: `1.5s` is 1500 ms everywhere, never dropped.
#[test]
fn provider_durations_from_yaml_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("providers.yaml"),
        "profiles:\n  - name: main\n    kind: scripted\n    timeout: 1.5s\n    retry: { max_attempts: 2, initial_backoff: 250ms, total_budget: 2m }\n",
    )
    .expect("write yaml");
    let path = dir.path().join("wf.rondo");
    let text = "import providers \"providers.yaml\"\nworkflow w {}\nprovider local {\n  kind = \"ollama\"\n  model = \"m\"\n  timeout = 90s\n  retry { initial_backoff = 500ms }\n  fallback = [main]\n}\nrole work: tool {\n  command = [\"true\"]\n}\nstart -> work\nwork -> success\nexit success\n";
    let file = SourceFile::new(&path, text);
    let (workflow, diags, _) = common::check_source(&file, true);
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    let profile = |name: &str| &workflow.providers[workflow.provider_id(name).unwrap()].profile;
    let main = profile("main");
    assert_eq!(main.timeout, std::time::Duration::from_millis(1500));
    assert_eq!(main.retry.max_attempts, 2);
    assert_eq!(
        main.retry.initial_backoff,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(main.retry.total_budget, std::time::Duration::from_secs(120));
    let local = profile("local");
    assert_eq!(local.timeout, std::time::Duration::from_secs(90));
    assert_eq!(
        local.retry.initial_backoff,
        std::time::Duration::from_millis(500)
    );
    assert_eq!(local.fallback, ["main"]);
}

/// An input may take its default from a variable unless the name looks like a secret: one of
/// its `_`-separated parts is a word such as KEY, TOKEN, SECRET or PASSWORD (whole parts, so
/// TOKENIZER_PATH and KEYBOARD_LAYOUT are fine).
#[test]
fn inputs_from_secret_looking_variables_are_refused_by_whole_parts() {
    let source = |var: &str| {
        format!(
            "workflow w {{\n  input x: string = env(\"{var}\", \"d\")\n}}\nstart -> done\nexit done\n"
        )
    };
    for var in [
        "TOKENIZER_PATH",
        "KEYBOARD_LAYOUT",
        "MONKEY",
        "PASSAGE_DIR",
        "TRACES_DIR",
    ] {
        let (_, diags, _) = check(&source(var));
        assert!(diags.is_empty(), "{var}: {:?}", common::codes(&diags));
    }
    for var in [
        "OPENAI_API_KEY",
        "API_KEY",
        "MY_APIKEY",
        "GITHUB_TOKEN",
        "db_password",
        "AWS_SECRET_ACCESS_KEY",
        "GOOGLE_CREDENTIALS",
    ] {
        let (_, diags, _) = check(&source(var));
        assert_eq!(common::codes(&diags), ["rondo::input::secret_env"], "{var}");
    }
}

/// A conversation reads as its typed message list, changes only through its operations, and
/// a native loop is proven bounded like any other: the agent's worst case is its bound.
#[test]
fn a_conversation_is_typed_and_a_native_loop_is_bounded() {
    let native = |extra: &str| {
        format!(
            r#"workflow chat {{
  prompts = "_support/prompts"
  input question: string
}}
memory {{
  chat: conversation
}}
tool calc {{
  executable = "python3 calc.py"
  input {{ expression: string }}
}}
role begin: builtin {{
  update {{ chat.system("Be brief.")  chat.user(input.question) }}
}}
role agent: llm {{
  conversation = chat
  mode = native
  tools = [calc]
  max_visits = 5
}}
role run_calls: tool {{
  tools = [calc]
  calls = agent.calls
  conversation = chat
  max_visits = 5
}}
{extra}
start -> begin
begin -> agent
agent -> run_calls when len(agent.calls) > 0
agent -> success when at(memory.chat, 0).role == "system"
agent -> success otherwise
run_calls -> agent
exit success
"#
        )
    };
    let (_, diags, summary) = check(&native(""));
    assert!(diags.is_empty(), "{:?}", common::codes(&diags));
    // 5 visits × (1 + 2 retries).
    assert_eq!(bound(&summary, "agent"), Some(5));
    assert_eq!(summary.worst_case_llm_calls, Some(15));
    for (extra, code) in [
        (
            "role note: builtin {\n  update { set chat = [] }\n}\nagent -> note when agent.text == \"x\"\nnote -> success",
            "rondo::update::set_structured",
        ),
        (
            "role note: builtin {\n  update { chat.append(\"x\") }\n}\nagent -> note when agent.text == \"x\"\nnote -> success",
            "rondo::update::unknown_op",
        ),
        (
            "role note: builtin {\n  update { chat.user(at(memory.chat, 0).contents) }\n}\nagent -> note when agent.text == \"x\"\nnote -> success",
            "rondo::expr::unknown_field",
        ),
        (
            "role note: builtin {\n  update { chat.user(agent.answer) }\n}\nagent -> note when agent.text == \"x\"\nnote -> success",
            "rondo::expr::unknown_field",
        ),
    ] {
        let (_, diags, _) = check(&native(extra));
        let codes = common::codes(&diags);
        assert!(codes.contains(&code), "{extra}: {codes:?}");
    }
}

// ---- templates read while the file is parsed --------------------------------------------

/// What `rondo check` reports (templates read as the roles naming them are parsed) and
/// what a check of the compiled workflow reports (templates read after it) are the same.
fn same_as_after_compiling(text: &str) -> Vec<String> {
    let file = SourceFile::new("tests/fixtures/check/inline.rondo", text);
    let options = rondo::check::CheckOptions { offline: true };
    let early = rondo::check::load(&file, &options);
    let (_, after, _) = common::check_source(&file, true);
    let shown = |diags: &rondo::diagnostics::Diagnostics| -> Vec<String> {
        diags
            .sorted()
            .iter()
            .map(|d| format!("{} {} {:?} {:?}", d.code, d.message, d.labels, d.external))
            .collect()
    };
    assert_eq!(shown(&early.diagnostics), shown(&after));
    shown(&after)
}

#[test]
fn templates_read_during_the_parse_report_what_a_later_read_reports() {
    // The header first, then the roles: each template is read as its role is parsed.
    let found = same_as_after_compiling(&templated("includes_typo.tera", false));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("rondo::template::unknown_field"));
    // The header last: the templates named before it wait for the folder it names.
    let text = templated("unknown_variable.tera", false);
    let header_end = text.find("}\n").unwrap() + 2;
    let moved = format!("{}\n{}", &text[header_end..], &text[..header_end]);
    let found = same_as_after_compiling(&moved);
    let codes: Vec<&str> = found.iter().filter_map(|d| d.split(' ').next()).collect();
    assert_eq!(
        codes,
        [
            "rondo::template::unknown_memory",
            "rondo::template::unknown_variable"
        ]
    );
    // No header: the templates are those of the file's own folder, where none exists.
    let found = same_as_after_compiling(&text[header_end..]);
    assert!(
        found
            .iter()
            .any(|d| d.starts_with("rondo::template::missing")),
        "{found:#?}"
    );
    // Two roles naming the same template, and a template that is fine.
    let twice = templated("guarded.tera", true).replace(
        "role build: tool {",
        "role second: llm {\n  prompt = \"guarded.tera\"\n}\n\nrole build: tool {",
    );
    same_as_after_compiling(&twice);
}
