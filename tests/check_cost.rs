//! Issue 27 §4: the proven worst case of a run (`rondo check --cost`, `budget`), on
//! workflows whose bound is worked out by hand, and the size limits it counts on enforced
//! by real runs.

mod common;

use common::*;
use rondo::check::cost::{self, TOKENS_PER_CALL, TOKENS_PER_MESSAGE};
use rondo::check::{self as checker, CheckOptions};
use rondo::diagnostics::Code;
use rondo::source::SourceFile;

/// A project folder with `w.rondo` and its prompts.
fn write(dir: &std::path::Path, source: &str, prompts: &[(&str, &str)]) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    for (name, text) in prompts {
        std::fs::write(dir.join("prompts").join(name), text).unwrap();
    }
    let path = dir.join("w.rondo");
    std::fs::write(&path, source).unwrap();
    path
}

fn load(path: &std::path::Path) -> rondo::check::Loaded {
    let file = SourceFile::read(path).unwrap();
    checker::load(&file, &CheckOptions { offline: true })
}

const PAID: &str = r#"provider p {
  kind = "openai"
  model = "m"
  api_key_env = "OPENAI_API_KEY"
  max_tokens = 100
  retry { max_attempts = 1 }
  price { input_per_1k = 1.0  output_per_1k = 2.0 }
  FALLBACK
}
provider q {
  kind = "openai"
  model = "n"
  api_key_env = "OPENAI_API_KEY"
  max_tokens = 50
  retry { max_attempts = 2 }
  price { input_per_1k = 0.5  output_per_1k = 0.5 }
}
"#;

fn paid_workflow(header: &str, fallback: &str) -> String {
    format!(
        r#"workflow w {{
  prompts = "prompts"
  input n: int = 2
{header}}}
{}
role a: llm {{
  provider = p
  prompt = "a.tera"
  output text
  retries = 1
}}
start -> a
a -> done
exit done
"#,
        PAID.replace("FALLBACK", fallback)
    )
}

/// "Hello " + the visit (a count, at most 21 characters) + "!\n": 29 bytes, one message.
const HELLO: (&str, &str) = ("a.tera", "Hello {{ visit }}!\n");

#[test]
fn the_bound_of_a_single_call_is_the_one_worked_out_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), &paid_workflow("", ""), &[HELLO]);
    let loaded = load(&path);
    assert!(loaded.checked.is_ok(), "{:?}", codes(&loaded.diagnostics));
    let report = cost::analyse(loaded.workflow());
    let a = report.role("a").unwrap();
    assert_eq!(a.max_prompt_bytes, 29);
    assert!(!a.prompt_capped);
    let per_try = 29 + TOKENS_PER_MESSAGE + TOKENS_PER_CALL;
    assert_eq!(a.input_tokens_per_attempt, per_try);
    assert_eq!((a.visits, a.attempts), (Some(1), 2));
    // One visit, two attempts, one try each on `p`.
    assert_eq!(a.input_tokens, Some(2 * per_try));
    assert_eq!(a.output_tokens, Some(2 * 100));
    let dollars = 2.0 * (per_try as f64 * 1.0 + 100.0 * 2.0) / 1000.0;
    assert!(
        (a.max_cost.unwrap() - dollars).abs() < 1e-9,
        "{:?}",
        a.max_cost
    );
    assert_eq!(report.max_cost, a.max_cost);
}

#[test]
fn an_int_from_outside_may_print_every_digit_of_a_whole_float() {
    // `-i n=1e300` is a whole number, so an `int`, and prints 301 digits.
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        &paid_workflow("", ""),
        &[("a.tera", "{{ input.n }}")],
    );
    let report = cost::analyse(load(&path).workflow());
    assert!(report.roles[0].max_prompt_bytes >= 301);
}

#[test]
fn fallbacks_are_counted_at_their_own_prices_and_tries() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), &paid_workflow("", "fallback = [q]"), &[HELLO]);
    let loaded = load(&path);
    let report = cost::analyse(loaded.workflow());
    let a = report.role("a").unwrap();
    let per_try = 29 + TOKENS_PER_MESSAGE + TOKENS_PER_CALL;
    // p once, then q twice: every try may be billed.
    assert_eq!(a.profiles, ["p", "q"]);
    assert_eq!(a.input_tokens, Some(2 * 3 * per_try));
    assert_eq!(a.output_tokens, Some(2 * (100 + 2 * 50)));
    let p = (per_try as f64 * 1.0 + 100.0 * 2.0) / 1000.0;
    let q = 2.0 * (per_try as f64 * 0.5 + 50.0 * 0.5) / 1000.0;
    assert!((a.max_cost.unwrap() - 2.0 * (p + q)).abs() < 1e-9);
}

#[test]
fn a_budget_below_the_worst_case_fails_check_and_shows_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        &paid_workflow("  budget = \"$1.00\"\n", ""),
        &[HELLO],
    );
    let loaded = load(&path);
    let over: Vec<_> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::CostOverBudget)
        .collect();
    assert_eq!(over.len(), 1, "{:?}", codes(&loaded.diagnostics));
    assert!(loaded.checked.is_err());
    assert!(over[0].message.contains("$2.5380"), "{}", over[0].message);
    let help = over[0].help.as_deref().unwrap_or("");
    assert!(
        help.contains("start → a (1 visits × 2 attempts, $2.5380)"),
        "{help}"
    );
    // The same workflow within a budget of $3 passes.
    let path = write(
        tmp.path(),
        &paid_workflow("  budget = \"$3\"\n", ""),
        &[HELLO],
    );
    let loaded = load(&path);
    assert!(loaded.checked.is_ok(), "{:?}", codes(&loaded.diagnostics));
}

#[test]
fn an_unbounded_value_is_named_where_it_is_declared_and_where_it_is_rendered() {
    let tmp = tempfile::tempdir().unwrap();
    let source = paid_workflow("  input q: string\n  budget = \"$100\"\n", "");
    let path = write(tmp.path(), &source, &[("a.tera", "Q: {{ input.q }}\n")]);
    let loaded = load(&path);
    assert!(loaded.checked.is_err());
    let unbounded: Vec<_> = loaded
        .diagnostics
        .iter()
        .filter(|d| d.code == Code::CostUnbounded)
        .collect();
    let input = unbounded
        .iter()
        .find(|d| d.message.contains("input `q`"))
        .unwrap_or_else(|| panic!("{unbounded:?}"));
    // The declaration's line in the workflow, the use in the template, and the fix.
    let file = SourceFile::read(&path).unwrap();
    let (line, _) = file.line_col(input.primary_span().start);
    assert_eq!(line, 4, "{input:?}");
    let ext = input.external.as_ref().unwrap();
    assert!(ext.path.ends_with("prompts/a.tera"));
    assert_eq!(&ext.text[ext.span.start..ext.span.end], "q");
    assert!(input.help.as_deref().unwrap().contains("max_input_bytes"));
    // Bounded, the figure is proven and within the budget.
    let source = paid_workflow(
        "  input q: string\n  budget = \"$100\"\n  limits { max_input_bytes = 1000 }\n",
        "",
    );
    let path = write(tmp.path(), &source, &[("a.tera", "Q: {{ input.q }}\n")]);
    let loaded = load(&path);
    assert!(loaded.checked.is_ok(), "{:?}", codes(&loaded.diagnostics));
    let a = cost::analyse(loaded.workflow()).roles[0].clone();
    // "Q: " + a string of at most 1000 bytes of JSON + "\n".
    assert_eq!(a.max_prompt_bytes, 3 + 1000 + 1);
}

#[test]
fn a_provider_without_max_tokens_has_no_money_bound_unless_its_output_is_free() {
    let tmp = tempfile::tempdir().unwrap();
    let source = paid_workflow("", "").replace("  max_tokens = 100\n", "");
    let path = write(tmp.path(), &source, &[HELLO]);
    let report = cost::analyse(load(&path).workflow());
    assert_eq!(report.max_cost, None);
    assert_eq!(report.output_tokens, None);
    assert!(
        report
            .unbounded
            .iter()
            .any(|d| d.message.contains("provider `p` has no `max_tokens`"))
    );
    assert!(cost::CostReport::money(report.max_cost).contains("unbounded"));
    // The scripted profile costs nothing, whatever its replies.
    let source = "workflow w {\n  prompts = \"prompts\"\n  input n: int = 2\n}\nrole a: llm {\n  prompt = \"a.tera\"\n  output text\n}\nstart -> a\na -> done\nexit done\n";
    let path = write(tmp.path(), source, &[HELLO]);
    let report = cost::analyse(load(&path).workflow());
    assert_eq!(report.max_cost, Some(0.0));
    assert_eq!(report.output_tokens, None);
}

/// A loop over a list whose bytes are bounded: each item's text is paid once over all
/// items, the static text once per item.
const LOOP: &str = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
  limits { max_memory_bytes = 100 }
}
memory { xs: list[string] = [] }
role a: llm {
  prompt = "a.tera"
  reads = [xs]
  max_visits = 30
  output text
  update { xs.append(output) }
}
start -> a
a -> a when len(memory.xs) < 20
a -> done
exit done
"#;

#[test]
fn a_loop_over_bounded_memory_is_bounded_and_the_run_stays_within_it() {
    let tmp = tempfile::tempdir().unwrap();
    let path = project(
        tmp.path(),
        LOOP,
        &[("a.tera", "{% for x in memory.xs %}- {{ x }}\n{% endfor %}")],
        "replies:\n  a: \"abcdefghij\"\n",
    );
    let loaded = load(&path);
    let a = cost::analyse(loaded.workflow()).roles[0].clone();
    // 33 items at most (`[`, `""` and `,` per item, `]`: 3n + 1 ≤ 100) × "- " and "\n",
    // plus 100 bytes of text.
    assert_eq!(a.max_prompt_bytes, 33 * 3 + 100);
    // Each reply adds 13 bytes of JSON: the 8th would pass 100, so the run ends at `limit`.
    let (out, dir) = run_with(&path, "r", &["--provider", "scripted"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let info = json(dir.join("run.json"));
    assert_eq!(info["exit"], "limit");
    let reason = info["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("max_memory_bytes = 100"), "{info}");
    let prompts = prompts_to(&events(&dir), "a");
    assert_eq!(prompts.len(), 8);
    for p in prompts {
        assert!(p.len() as u64 <= a.max_prompt_bytes, "{} bytes", p.len());
    }
}

#[test]
fn an_input_past_max_input_bytes_does_not_start_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let source = "workflow w {\n  prompts = \"prompts\"\n  script = \"script.yaml\"\n  input q: string\n  limits { max_input_bytes = 12 }\n}\nrole a: llm {\n  prompt = \"a.tera\"\n  output text\n}\nstart -> a\na -> done\nexit done\n";
    let path = project(
        tmp.path(),
        source,
        &[("a.tera", "{{ input.q }}\n")],
        "replies:\n  a: ok\n",
    );
    // `"0123456789"` is 12 bytes of JSON: it fits; one more character does not.
    let (out, _) = run_with(&path, "fits", &["-i", "q=0123456789"]);
    assert_success(&out);
    let (out, dir) = run_with(&path, "past", &["-i", "q=0123456789a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("input `q` holds 13 bytes, more than max_input_bytes = 12"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("events.jsonl").exists());
}

#[test]
fn check_cost_prints_the_table_and_the_json() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), &paid_workflow("", ""), &[HELLO]);
    let out = rondo(&["check", "--offline", "--cost", path.to_str().unwrap()]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("a "))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["a", "1", "2", "2138", "200", "$2.5380"], "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("run ") && l.ends_with("$2.5380"))
    );
    let out = rondo(&[
        "check",
        "--offline",
        "--cost",
        "--format",
        "json",
        path.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["cost"]["roles"][0]["input_tokens"], 2138);
    assert_eq!(v[0]["cost"]["output_tokens"], 200);
}

#[test]
fn a_budget_that_is_not_money_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(
        tmp.path(),
        &paid_workflow("  budget = \"two dollars\"\n", ""),
        &[HELLO],
    );
    assert_eq!(
        codes(&load(&path).diagnostics),
        ["rondo::workflow::bad_budget"]
    );
}

#[test]
fn a_set_in_one_branch_of_an_if_counts_after_it() {
    // `hint` is short before the `if` and may be the long input after it.
    let tmp = tempfile::tempdir().unwrap();
    let template =
        "{% set hint = \"x\" %}{% if visit > 1 %}{% set hint = input.q %}{% endif %}{{ hint }}";
    let source = paid_workflow(
        "  input q: string\n  limits { max_input_bytes = 500 }\n",
        "",
    );
    let path = write(tmp.path(), &source, &[("a.tera", template)]);
    let report = cost::analyse(load(&path).workflow());
    assert_eq!(report.roles[0].max_prompt_bytes, 500);
}

/// A durable value saved longer than `max_memory_bytes` (by a run before the limit was
/// written) starts empty: the bound holds from the first step.
#[test]
fn a_durable_value_past_max_memory_bytes_is_not_carried_over() {
    let tmp = tempfile::tempdir().unwrap();
    let source = "workflow keep {\n  prompts = \"prompts\"\n  script = \"script.yaml\"\n  durable = [notes]\n  limits { max_memory_bytes = 40 }\n}\nmemory { notes: list[string] = [] }\nrole note: builtin {\n  update { notes.append(\"n\") }\n}\nstart -> note\nnote -> done\nexit done\n";
    let path = project(tmp.path(), source, &[], "replies: {}\n");
    let ws = tmp.path().join("ws");
    let saved = ws.join(".rondo/memory/keep.json");
    std::fs::create_dir_all(saved.parent().unwrap()).unwrap();
    let in_ws = |id: &str| {
        let out = rondo(&[
            "run",
            "-q",
            path.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
            "--run-id",
            id,
        ]);
        assert_success(&out);
        let system = ws.join(".rondo/runs").join(id);
        (common::state(&system), events(&system))
    };
    // 27 bytes of compact JSON: carried, and one more item still fits.
    std::fs::write(
        &saved,
        r#"{"memory": {"notes": ["0123456789", "0123456789"]}}"#,
    )
    .unwrap();
    let (state, _) = in_ws("a");
    assert_eq!(state["memory"][0].as_array().unwrap().len(), 3);
    // 53 bytes: past the bound, so the run starts without it.
    std::fs::write(
        &saved,
        r#"{"memory": {"notes": ["0123456789", "0123456789", "0123456789", "0123456789"]}}"#,
    )
    .unwrap();
    let (state, events) = in_ws("b");
    assert_eq!(state["memory"][0], serde_json::json!(["n"]));
    let carried = &of_kind(&events, "durable_memory")[0];
    assert!(
        carried["skipped"]
            .to_string()
            .contains("max_memory_bytes = 40"),
        "{carried}"
    );
}

// ---- per-declaration bounds (`max_bytes`, `max_len`) ---------------------------------------

/// A tool prints 20,000 bytes each time and keeps 4 KiB of it (`max_output`); its output
/// goes into a history bounded to 2 KiB of view, which the llm role renders whole.
const HISTORY: &str = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
}
memory {
  ops: history { max_bytes = "2KB"  max_len = 3 }
}
role big: tool {
  command = ["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' 'x'"]
  max_output = "4KB"
  update {
    ops.push({ thought: "look", action_type: "run", action_params: "" })
    ops.observe(output.stdout)
  }
}
role a: llm {
  prompt = "a.tera"
  reads = [ops]
  output text
  max_visits = 5
}
start -> big
big -> a
a -> big when visits(a) < 4
a -> done
exit done
"#;

const CHAIN: (&str, &str) = (
    "a.tera",
    "{% for n in memory.ops.chain %}[{{ n.id }}] {{ n.observation }}\n{% endfor %}",
);

#[test]
fn a_history_past_its_max_bytes_is_cut_and_the_run_ends_where_it_declares() {
    let tmp = tempfile::tempdir().unwrap();
    let path = project(tmp.path(), HISTORY, &[CHAIN], "replies:\n  a: ok\n");
    let loaded = load(&path);
    let report = cost::analyse(loaded.workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let a = report.role("a").unwrap().clone();
    assert!(!a.prompt_capped);
    let (out, dir) = run(&path, "r");
    assert_success(&out);
    assert_eq!(json(dir.join("run.json"))["exit"], "done");
    let prompts = prompts_to(&events(&dir), "a");
    assert_eq!(prompts.len(), 4);
    for p in &prompts {
        assert!(p.len() as u64 <= a.max_prompt_bytes, "{} bytes", p.len());
        // What the template sees is at most 2 KiB of JSON; its text is no longer.
        assert!(p.len() <= 2048, "{} bytes", p.len());
    }
    // The 4 KiB kept of each output did not fit: it was cut, with the mark.
    assert!(
        prompts[0].contains(rondo_memory::CUT_MARK),
        "{}",
        prompts[0]
    );
    // `max_len = 3`: the fourth prompt shows the last three operations only.
    let last = &prompts[3];
    assert!(!last.contains("[0]") && last.contains("[3]"), "{last}");
}

#[test]
fn a_history_without_max_bytes_is_named_with_the_bound_to_add() {
    let tmp = tempfile::tempdir().unwrap();
    let source = HISTORY.replace(
        r#"ops: history { max_bytes = "2KB"  max_len = 3 }"#,
        "ops: history",
    );
    let path = write(tmp.path(), &source, &[CHAIN]);
    std::fs::write(tmp.path().join("script.yaml"), "replies:\n  a: ok\n").unwrap();
    let loaded = load(&path);
    let report = cost::analyse(loaded.workflow());
    assert!(report.role("a").unwrap().prompt_capped);
    let d = report
        .unbounded
        .iter()
        .find(|d| {
            d.message
                .contains("memory `ops` (history) has no size bound")
        })
        .unwrap_or_else(|| panic!("{:?}", report.unbounded));
    let file = SourceFile::read(&path).unwrap();
    let (line, _) = file.line_col(d.primary_span().start);
    assert_eq!(line, 6, "{d:?}");
    let ext = d.external.as_ref().unwrap();
    assert!(ext.path.ends_with("prompts/a.tera"));
    assert_eq!(&ext.text[ext.span.start..ext.span.end], "ops");
    let help = d.help.as_deref().unwrap();
    assert!(
        help.contains("ops: history { ...  max_bytes = \"32KB\" }"),
        "{help}"
    );
}

#[test]
fn a_tool_output_is_bounded_by_its_max_output_and_the_run_holds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let source = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
}
role t: tool {
  command = ["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' 'y'; printf '\\377\\376'"]
  max_output = "1KB"
}
role a: llm {
  prompt = "a.tera"
  output text
}
start -> t
t -> a
a -> done
exit done
"#;
    let path = project(
        tmp.path(),
        source,
        &[("a.tera", "out: {{ t.stdout }}\nerr: {{ t.stderr }}\n")],
        "replies:\n  a: ok\n",
    );
    let report = cost::analyse(load(&path).workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let a = report.role("a").unwrap().clone();
    // Two streams of at most 3 × (1,024 + 512) bytes of text, and 12 of static text.
    assert_eq!(a.max_prompt_bytes, 12 + 2 * 3 * (1024 + 512));
    let (out, dir) = run(&path, "r");
    assert_success(&out);
    assert_eq!(json(dir.join("run.json"))["exit"], "done");
    let prompts = prompts_to(&events(&dir), "a");
    assert_eq!(prompts.len(), 1);
    assert!(prompts[0].len() as u64 <= a.max_prompt_bytes);
    assert!(prompts[0].len() < 2000, "{} bytes", prompts[0].len());
    assert!(prompts[0].contains("bytes cut"), "{}", prompts[0]);
}

const LIST: &str = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
  input q: string = ""
  limits {
    max_bytes = { xs = "1KB", q = 12 }
    max_len = { xs = 5 }
  }
}
memory { xs: list[string] = [] }
role a: llm {
  prompt = "a.tera"
  reads = [xs]
  max_visits = 30
  output text
  update { xs.append(output) }
}
start -> a
a -> a when len(memory.xs) < 20
a -> done
exit done
"#;

#[test]
fn named_bounds_of_inputs_and_value_memory_are_proven_and_held() {
    let tmp = tempfile::tempdir().unwrap();
    let path = project(
        tmp.path(),
        LIST,
        &[(
            "a.tera",
            "{{ input.q }}\n{% for x in memory.xs %}- {{ x }}\n{% endfor %}",
        )],
        "replies:\n  a: \"abcdefghij\"\n",
    );
    let loaded = load(&path);
    let report = cost::analyse(loaded.workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let a = report.role("a").unwrap().clone();
    // `q`: 12 bytes of JSON and "\n"; `xs`: 5 items of "- " and "\n", 1,024 bytes of text.
    assert_eq!(a.max_prompt_bytes, 12 + 1 + 5 * 3 + 1024);
    // The sixth append passes `max_len = 5`: the run ends at `limit`, the list kept at 5.
    let (out, dir) = run_with(&path, "r", &["-i", "q=0123456789"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let info = json(dir.join("run.json"));
    assert_eq!(info["exit"], "limit");
    assert!(
        info["reason"]
            .as_str()
            .unwrap()
            .contains("past max_len = 5"),
        "{info}"
    );
    let state = common::state(&dir);
    assert_eq!(state["memory"][0].as_array().unwrap().len(), 5);
    for p in prompts_to(&events(&dir), "a") {
        assert!(p.len() as u64 <= a.max_prompt_bytes, "{} bytes", p.len());
    }
    // An input past its own bound does not start a run.
    let (out, dir) = run_with(&path, "past", &["-i", "q=0123456789a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("input `q` holds 13 bytes of JSON, past max_bytes = 12"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("events.jsonl").exists());
}

#[test]
fn named_bounds_that_cannot_hold_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "max_bytes = { nope = 10 }",
            "rondo::memory::unknown",
            "neither an input nor a memory",
        ),
        (
            "max_len = { q = 3 }",
            "rondo::memory::bad_bound",
            "`max_len` bounds a list",
        ),
        (
            "max_bytes = { ys = 4 }",
            "rondo::memory::bad_bound",
            "initial value of memory `ys`",
        ),
        (
            "max_bytes = { q = 1 }",
            "rondo::memory::bad_bound",
            "default of input `q`",
        ),
        (
            "max_bytes = { ops = 1000 }",
            "rondo::memory::bad_bound",
            "its bounds go in its own block",
        ),
        (
            "max_bytes = 100",
            "rondo::attr::wrong_kind",
            "bounds inputs and memories by name",
        ),
        (
            "max_len = { xs = 0 }",
            "rondo::memory::bad_bound",
            "no room",
        ),
    ];
    for (limits, code, message) in cases {
        let source = format!(
            "workflow w {{\n  input q: string = \"abc\"\n  limits {{ {limits} }}\n}}\nmemory {{\n  xs: list[string] = []\n  ys: list[string] = [\"long enough\"]\n  ops: history\n}}\nrole b: builtin {{}}\nstart -> b\nb -> done\nexit done\n"
        );
        let path = write(tmp.path(), &source, &[]);
        let loaded = load(&path);
        let found = loaded
            .diagnostics
            .iter()
            .find(|d| d.code.as_str() == code)
            .unwrap_or_else(|| panic!("{limits}: {:?}", codes(&loaded.diagnostics)));
        assert!(
            found.message.contains(message),
            "{limits}: {}",
            found.message
        );
    }
    let source = "workflow w {}\nmemory { ops: history { max_bytes = 100 } }\nrole b: builtin {}\nstart -> b\nb -> done\nexit done\n";
    let loaded = load(&write(tmp.path(), source, &[]));
    assert!(
        codes(&loaded.diagnostics).contains(&"rondo::memory::bad_bound"),
        "{:?}",
        codes(&loaded.diagnostics)
    );
}

#[test]
fn a_whiteboard_batch_past_max_bytes_is_refused_and_the_model_asked_again() {
    let tmp = tempfile::tempdir().unwrap();
    let source = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
}
type Op {
  op: "UPSERT" | "DEPRECATE"
  section: "Facts"
  id: string?
  text: string?
}
type Reply { ops: list[Op] }
memory { board: whiteboard { sections = ["Facts"]  max_bytes = 600 } }
role a: llm {
  prompt = "a.tera"
  output json Reply
  retries = 1
  update { board.apply(output.ops) }
}
role b: llm {
  prompt = "b.tera"
  reads = [board]
  output text
}
start -> a
a -> failed when a.invalid
a -> b
b -> done
exit done
exit failed { code = 1 }
"#;
    let long = "z".repeat(2000);
    let script = format!(
        "replies:\n  a:\n    \"1\":\n      - '{{\"ops\": [{{\"op\": \"UPSERT\", \"section\": \"Facts\", \"text\": \"{long}\"}}]}}'\n      - '{{\"ops\": [{{\"op\": \"UPSERT\", \"section\": \"Facts\", \"text\": \"short fact\"}}]}}'\n  b: ok\n"
    );
    let path = project(
        tmp.path(),
        source,
        &[
            ("a.tera", "Facts?\n"),
            ("b.tera", "{{ memory.board.markdown }}"),
        ],
        &script,
    );
    let report = cost::analyse(load(&path).workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let b = report.role("b").unwrap().clone();
    assert_eq!(b.max_prompt_bytes, 600);
    let (out, dir) = run(&path, "r");
    assert_success(&out);
    assert_eq!(json(dir.join("run.json"))["exit"], "done");
    let prompts = prompts_to(&events(&dir), "b");
    assert_eq!(prompts.len(), 1);
    assert!(prompts[0].contains("short fact") && !prompts[0].contains("zzz"));
    assert!(prompts[0].len() <= 600);
    let all = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(
        all.contains("past its max_bytes = 600"),
        "no refusal recorded"
    );
}

#[test]
fn last_of_a_list_is_bounded_by_its_item_not_by_the_whole_list() {
    let tmp = tempfile::tempdir().unwrap();
    let source = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
  limits {
    max_bytes = { xs = 100, ns = "1KB" }
  }
}
memory {
  xs: list[string] = []
  ns: list[int] = []
}
role a: llm {
  prompt = "a.tera"
  reads = [xs, ns]
  max_visits = 3
  output text
  update { xs.append(output) }
}
start -> a
a -> a when len(memory.xs) < 2
a -> done
exit done
"#;
    let template = "{% if memory.xs | length > 0 %}{{ memory.xs | last }}{% endif %}\n{% if memory.ns | length > 0 %}{{ memory.ns | last }}{% endif %}\n";
    let path = project(
        tmp.path(),
        source,
        &[("a.tera", template)],
        "replies:\n  a: \"abc\"\n",
    );
    let report = cost::analyse(load(&path).workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let a = report.role("a").unwrap().clone();
    // A string item holds the list's 100 bytes of JSON less its brackets; an `int` item
    // prints at most 350 characters however long the list (not 62 × 1,024).
    assert_eq!(a.max_prompt_bytes, 98 + 1 + 350 + 1);
    let (out, dir) = run(&path, "r");
    assert_success(&out);
    let prompts = prompts_to(&events(&dir), "a");
    assert_eq!(prompts.len(), 2);
    assert!(prompts[1].starts_with("abc\n"), "{}", prompts[1]);
    for p in prompts {
        assert!(p.len() as u64 <= a.max_prompt_bytes, "{} bytes", p.len());
    }
}

/// What a tool role parsed from its output (`data`) is typed `any`: a number written short
/// prints every digit (`1e308`, 5 bytes, 309 characters), so its text is bounded by 62 times
/// the bytes it was parsed from, the kept output, not 62 times a bound on its JSON.
#[test]
fn a_value_parsed_from_a_tool_output_renders_at_most_62_times_the_output() {
    let tmp = tempfile::tempdir().unwrap();
    let source = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
}
role t: tool {
  command = ["sh", "-c", "printf '{\"diff\": 1e308}'"]
  max_output = "1KB"
}
role a: llm {
  prompt = "a.tera"
  output text
}
start -> t
t -> a
a -> done
exit done
"#;
    let path = project(
        tmp.path(),
        source,
        &[("a.tera", "d: {{ t.data.diff | default(value=\"\") }}\n")],
        "replies:\n  a: ok\n",
    );
    let report = cost::analyse(load(&path).workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let a = report.role("a").unwrap().clone();
    assert_eq!(a.max_prompt_bytes, 4 + 62 * (1024 + 512));
    let (out, dir) = run(&path, "r");
    assert_success(&out);
    let prompts = prompts_to(&events(&dir), "a");
    assert_eq!(prompts.len(), 1);
    // The number printed whole: 309 digits from 5 bytes of output.
    assert!(
        prompts[0].contains(&format!("1{}", "0".repeat(308))),
        "{}",
        prompts[0]
    );
    assert!(prompts[0].len() as u64 <= a.max_prompt_bytes);
}

/// Issue 27 §4: an `any` value without a declared bound is named, where it is declared and
/// where it is rendered, with the bound to add; never a number made up for it.
#[test]
fn an_any_value_without_a_bound_is_named_with_the_bound_to_add() {
    let tmp = tempfile::tempdir().unwrap();
    let source = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
}
memory { notes: map[any] = {} }
role a: llm {
  prompt = "a.tera"
  reads = [notes]
  output text
}
start -> a
a -> done
exit done
"#;
    let path = project(
        tmp.path(),
        source,
        &[(
            "a.tera",
            "{% for k, v in memory.notes %}{{ k }}: {{ v }}\n{% endfor %}",
        )],
        "replies:\n  a: ok\n",
    );
    let report = cost::analyse(load(&path).workflow());
    let a = report.role("a").unwrap();
    assert!(a.prompt_capped);
    let d = report
        .unbounded
        .iter()
        .find(|d| d.message.contains("memory `notes` has no size bound"))
        .unwrap_or_else(|| panic!("{:?}", report.unbounded));
    assert!(
        d.help
            .as_deref()
            .unwrap()
            .contains("max_bytes = { notes: \"64KB\" }"),
        "{d:?}"
    );
    let ext = d.external.as_ref().unwrap();
    assert_eq!(&ext.text[ext.span.start..ext.span.end], "notes");
    // `check --cost` prints it and no figure for the prompt but the engine's cap.
    let out = rondo(&["check", "--cost", "--offline", path.to_str().unwrap()]);
    assert_success(&out);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(text.contains("memory `notes` has no size bound"), "{text}");
}

/// `split` cuts a text of t bytes into at most t / |pat| + 1 pieces: a loop over its lines
/// counts that many passes, not one per 3 bytes of the pieces' JSON.
#[test]
fn a_loop_over_split_lines_counts_at_most_one_pass_per_separator() {
    let tmp = tempfile::tempdir().unwrap();
    let source = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
  input q: string = ""
  limits {
    max_bytes = { q = 12 }
  }
}
role a: llm {
  prompt = "a.tera"
  output text
}
start -> a
a -> done
exit done
"#;
    let path = project(
        tmp.path(),
        source,
        &[(
            "a.tera",
            "{% for line in input.q | split(pat=\",\") %}{{ loop.index }}\n{% endfor %}",
        )],
        "replies:\n  a: ok\n",
    );
    let report = cost::analyse(load(&path).workflow());
    assert!(report.unbounded.is_empty(), "{:?}", report.unbounded);
    let a = report.role("a").unwrap().clone();
    // 12 bytes of JSON: at most 12 / 1 + 2 pieces, each a count (21 characters) and "\n".
    assert_eq!(a.max_prompt_bytes, 14 * 22);
    let (out, dir) = run_with(&path, "r", &["-i", "q=,,,,,,,,,,"]);
    assert_success(&out);
    let prompts = prompts_to(&events(&dir), "a");
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].lines().count(), 11, "{}", prompts[0]);
    assert!(prompts[0].len() as u64 <= a.max_prompt_bytes);
}
