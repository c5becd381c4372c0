//! Golden tests of the diagnostics: every `tests/fixtures/check/<area>/<case>.rondo` is
//! checked the way `rondo check` does (not offline) and its rendering — the human text
//! (no colour, width 100) and the JSON — must equal `<case>.expected` beside it.
//!
//! `UPDATE_EXPECT=1 cargo test --test check_fixtures` rewrites the `.expected` files.
//!
//! Directives in a fixture's comments:
//! - `// expect: rondo::a::b rondo::c::d` — codes that must also appear;
//! - `// exactly: rondo::a::b` — the codes of all its diagnostics, one per diagnostic: the
//!   mistake is reported once, with nothing that follows from it.
//!
//! A fixture whose path names a code must trigger it: there is no way to mark one as a known
//! failure, so a bug in src/ fails this test until it is fixed.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use rondo::diagnostics::{Code, Severity};

const FIXTURES: &str = "tests/fixtures/check";

/// Codes that no `.rondo` file can produce, with the test that covers them instead.
/// (The `file` rule never fails: any line it does not understand is a `bad_line`, so
/// pest's own errors, `syntax::unexpected`, come only from `parse_expr`.)
const LIBRARY_ONLY: &[(&str, &str)] = &[
    (
        "rondo::syntax::expression",
        "tests/parse.rs: parse_expr_reports_trailing_text",
    ),
    (
        "rondo::syntax::unexpected",
        "tests/parse.rs: parse_expr_reports_pest_errors",
    ),
    // Problems of an eval's dataset and rubrics, not of a workflow file.
    (
        "rondo::eval::bad_case",
        "tests/eval.rs: a_bad_dataset_line_is_located_and_nothing_runs",
    ),
    (
        "rondo::eval::bad_rubrics",
        "tests/eval.rs: a_bad_rubrics_file_is_reported",
    ),
    // Problems of a SWE-bench dataset.
    (
        "rondo::swebench::bad_instance",
        "tests/swebench.rs: a_bad_instance_is_located_and_nothing_runs",
    ),
    // Needs a variable set: fixtures are checked with the test's own environment.
    (
        "rondo::tool::too_many_plugins",
        "tests/conformance/micro_agent.rs: more_plugin_specs_than_the_bound_are_a_diagnostic",
    ),
];

struct Fixture {
    path: PathBuf,
    /// `rondo::area::case` from the path, when the path names a code.
    own_code: Option<Code>,
    expect: Vec<String>,
    exactly: Option<Vec<String>>,
}

fn fixtures() -> Vec<Fixture> {
    let files = files_with_ext(&root().join(FIXTURES), "rondo");
    assert!(!files.is_empty(), "no fixtures found under {FIXTURES}");
    files
        .into_iter()
        .map(|abs| {
            let path = rel(&abs);
            // Lossy: one fixture is not UTF-8 on purpose.
            let text =
                String::from_utf8_lossy(&std::fs::read(&abs).expect("read fixture")).into_owned();
            let area = path
                .parent()
                .and_then(Path::file_name)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let case = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let code = format!("rondo::{area}::{case}");
            let mut expect = Vec::new();
            let mut exactly: Option<Vec<String>> = None;
            for line in text.lines() {
                let line = line.trim();
                if let Some(rest) = line.strip_prefix("// expect:") {
                    expect.extend(rest.split_whitespace().map(str::to_string));
                } else if let Some(rest) = line.strip_prefix("// exactly:") {
                    let codes = exactly.get_or_insert_with(Vec::new);
                    codes.extend(rest.split_whitespace().map(str::to_string));
                }
            }
            Fixture {
                path,
                own_code: Code::ALL.iter().copied().find(|c| *c == code),
                expect,
                exactly,
            }
        })
        .collect()
}

fn expected_path(fixture: &Path) -> PathBuf {
    fixture.with_extension("expected")
}

/// A short line diff: the first differing lines, with line numbers.
fn short_diff(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let mut out = String::new();
    let mut shown = 0;
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            out.push_str(&format!(
                "    line {}:\n      expected: {}\n      actual:   {}\n",
                i + 1,
                x.map_or("<missing>".to_string(), |s| format!("{s:?}")),
                y.map_or("<missing>".to_string(), |s| format!("{s:?}")),
            ));
            shown += 1;
            if shown == 6 {
                out.push_str("    ...\n");
                break;
            }
        }
    }
    out
}

#[test]
fn fixtures_render_as_expected() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some_and(|v| !v.is_empty() && v != "0");
    let mut problems = Vec::new();
    let mut seen_expected = BTreeSet::new();
    for fixture in fixtures() {
        let (file, _, diags, _) = check_path(&fixture.path, false);
        let actual = expected_text(&file, &diags);
        let expected_file = expected_path(&fixture.path);
        seen_expected.insert(expected_file.clone());
        let expected = std::fs::read_to_string(&expected_file).ok();
        if expected.as_deref() == Some(actual.as_str()) {
            continue;
        }
        if update {
            std::fs::write(&expected_file, &actual).expect("write .expected");
            eprintln!("updated {}", expected_file.display());
            continue;
        }
        match expected {
            None => problems.push(format!(
                "{}: no {} (run with UPDATE_EXPECT=1 to create it)",
                fixture.path.display(),
                expected_file.display()
            )),
            Some(expected) => problems.push(format!(
                "{}: the rendering changed\n{}",
                fixture.path.display(),
                short_diff(&expected, &actual)
            )),
        }
    }
    // An `.expected` without its fixture is stale.
    for stale in files_with_ext(&root().join(FIXTURES), "expected") {
        let stale = rel(&stale);
        if !seen_expected.contains(&stale) {
            problems.push(format!("{}: no fixture beside it", stale.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "{} fixture(s) differ (UPDATE_EXPECT=1 cargo test --test check_fixtures rewrites them):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn each_fixture_triggers_its_code() {
    let mut problems = Vec::new();
    for fixture in fixtures() {
        let (_, _, diags, _) = check_path(&fixture.path, false);
        let got: BTreeSet<&str> = diags.iter().map(|d| d.code.as_str()).collect();
        if let Some(exactly) = &fixture.exactly {
            let mut all: Vec<&str> = diags.sorted().iter().map(|d| d.code.as_str()).collect();
            all.sort_unstable();
            let mut wanted: Vec<&str> = exactly.iter().map(String::as_str).collect();
            wanted.sort_unstable();
            if all != wanted {
                problems.push(format!(
                    "{}: expected exactly {wanted:?}, got {all:?}",
                    fixture.path.display()
                ));
            }
        }
        if fixture.own_code.is_none() && fixture.expect.is_empty() && fixture.exactly.is_none() {
            problems.push(format!(
                "{}: its path names no code and it has no `// expect:` line",
                fixture.path.display()
            ));
        }
        let mut wanted: Vec<&str> = fixture.expect.iter().map(String::as_str).collect();
        wanted.extend(fixture.own_code.map(Code::as_str));
        for code in wanted {
            if !got.contains(code) {
                problems.push(format!(
                    "{}: expected `{code}`, got {:?}",
                    fixture.path.display(),
                    got
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_code_has_a_fixture() {
    let mut missing = Vec::new();
    for code in Code::ALL {
        if LIBRARY_ONLY.iter().any(|(c, _)| code == c) {
            continue;
        }
        let mut parts = code.split("::").skip(1);
        let (Some(area), Some(case)) = (parts.next(), parts.next()) else {
            missing.push(format!("{code}: not of the form rondo::area::case"));
            continue;
        };
        let path = Path::new(FIXTURES).join(area).join(format!("{case}.rondo"));
        if !path.is_file() {
            missing.push(format!("{code}: no {}", path.display()));
        }
    }
    // The library-only codes must still exist, or the exception is stale.
    for (code, _) in LIBRARY_ONLY {
        if !Code::ALL.iter().any(|c| c == code) {
            missing.push(format!("{code}: listed as library-only but not a code"));
        }
    }
    assert!(
        missing.is_empty(),
        "codes without a fixture:\n{}",
        missing.join("\n")
    );
}

#[test]
fn fixture_diagnostics_point_into_the_file() {
    // Every label of every fixture lies inside its file, on character boundaries.
    for fixture in fixtures() {
        let (file, _, diags, _) = check_path(&fixture.path, false);
        for d in diags.iter() {
            for label in &d.labels {
                assert!(
                    label.span.start <= label.span.end && label.span.end <= file.text.len(),
                    "{}: {} has a label outside the file: {:?}",
                    fixture.path.display(),
                    d.code,
                    label.span
                );
                assert!(
                    file.text.is_char_boundary(label.span.start)
                        && file.text.is_char_boundary(label.span.end),
                    "{}: {} label splits a character",
                    fixture.path.display(),
                    d.code
                );
            }
            // A problem of an imported file is shown in that file.
            if let Some(e) = &d.external {
                assert!(
                    e.span.start <= e.span.end
                        && e.text.is_char_boundary(e.span.start)
                        && e.text.is_char_boundary(e.span.end),
                    "{}: {} has a label outside {}: {:?}",
                    fixture.path.display(),
                    d.code,
                    e.path.display(),
                    e.span
                );
            }
        }
    }
}

/// One file with mistakes in every stage: all of them are reported in one run.
#[test]
fn all_errors_of_a_file_are_reported_at_once() {
    let path = Path::new(FIXTURES).join("combined/all_errors_at_once.rondo");
    let (file, _, diags, _) = check_path(&path, false);
    let errors = errors(&diags);
    let lines: BTreeSet<usize> = errors
        .iter()
        .map(|d| file.line_col(d.primary_span().start).0)
        .collect();
    let codes: BTreeSet<&str> = errors.iter().map(|d| d.code.as_str()).collect();
    for code in [
        "rondo::syntax::invalid_line",
        "rondo::type::unknown",
        "rondo::attr::unknown",
        "rondo::memory::unknown",
        "rondo::expr::unknown_field",
        "rondo::route::unknown_target",
        "rondo::tool::no_executable",
        "rondo::test::not_an_exit",
    ] {
        assert!(codes.contains(code), "missing {code}; got {codes:?}");
    }
    assert!(
        lines.len() >= 8,
        "errors should come from many lines, got {lines:?}"
    );
    assert_eq!(
        diags.error_count(),
        errors.len(),
        "sorted() dropped distinct errors"
    );
}

/// One bad line gives one diagnostic, and parsing goes on: mistakes on later lines are
/// still found, and the declarations after the bad line are compiled.
#[test]
fn one_bad_line_one_diagnostic_and_parsing_goes_on() {
    let path = Path::new(FIXTURES).join("combined/syntax_recovery.rondo");
    let (file, workflow, diags, _) = check_path(&path, false);
    let sorted = diags.sorted();
    let syntax: Vec<_> = sorted
        .iter()
        .filter(|d| d.code.starts_with("rondo::syntax::"))
        .collect();
    let text = &file.text;
    let bad_lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("!!") && !l.trim_start().starts_with("//"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        syntax.len(),
        bad_lines.len(),
        "one syntax diagnostic per bad line: {syntax:#?}"
    );
    for (d, line) in syntax.iter().zip(&bad_lines) {
        assert_eq!(file.line_col(d.primary_span().start).0, *line);
        let (end_line, _) = file.line_col(d.primary_span().end);
        assert_eq!(end_line, *line, "the diagnostic covers one line only");
    }
    // Declarations after the bad lines were parsed and compiled...
    for role in ["after_top", "after_block"] {
        assert!(
            workflow.find_node(role).is_some(),
            "role `{role}` after a bad line was lost"
        );
    }
    // ...and so were the attributes after a bad line inside a block.
    let after = workflow.find_node("after_block").expect("role");
    assert_eq!(
        workflow.role(after).and_then(|r| r.max_visits),
        Some(rondo::compile::MaxVisits::Fixed(4))
    );
    // The semantic mistake on the last line is still reported.
    let last = sorted
        .iter()
        .find(|d| d.code == "rondo::route::unknown_target")
        .expect("the unknown target on the last line is reported");
    assert_eq!(
        file.line_col(last.primary_span().start).0,
        text.lines().count()
    );
    assert!(sorted.iter().all(|d| d.severity == Severity::Error));
}

/// "did you mean" names the same candidate in every run: of equally close names, the first
/// by name, whatever order the compiler's maps hand them over in.
#[test]
fn suggestions_do_not_change_between_runs() {
    let path = Path::new(FIXTURES).join("route/unknown_target_tie.rondo");
    let helps: BTreeSet<Option<String>> = (0..12)
        .map(|_| {
            let (_, _, diags, _) = check_path(&path, false);
            diags
                .iter()
                .find(|d| d.code == "rondo::route::unknown_target")
                .and_then(|d| d.help.clone())
        })
        .collect();
    assert_eq!(
        helps,
        BTreeSet::from([Some("did you mean `a`?".to_string())])
    );
}

/// The root cause comes first: the workflow's own error (an unknown name in `reads`) is
/// shown before a template's, though the role the template belongs to is declared above.
#[test]
fn the_workflows_own_errors_come_before_its_templates() {
    let path = Path::new(FIXTURES).join("combined/root_cause_first.rondo");
    let (_, _, diags, _) = check_path(&path, false);
    assert_eq!(
        codes(&diags),
        ["rondo::memory::unknown", "rondo::template::memory_not_read"]
    );
}

/// A block tag left open is named with the line it opened on, whether the template ends
/// first or another block's end tag comes first.
#[test]
fn an_unclosed_template_block_says_where_it_opened() {
    for (case, closed_by) in [
        ("parse_unclosed_for", "the template ends"),
        ("parse_unclosed_for_in_if", "`{% endif %}`"),
    ] {
        let path = Path::new(FIXTURES).join(format!("template/{case}.rondo"));
        let (_, _, diags, _) = check_path(&path, false);
        let errors = errors(&diags);
        assert_eq!(errors.len(), 1, "{case}: {errors:#?}");
        let d = &errors[0];
        assert!(
            d.message.contains("`{% for %}` is not closed"),
            "{case}: {}",
            d.message
        );
        let e = d.external.as_deref().expect("shown in the template");
        let opened_at = &e.text[e.span.start..e.span.end];
        assert!(opened_at.starts_with("{% for"), "{case}: {opened_at:?}");
        assert!(
            e.also.iter().any(|l| l.text.contains(closed_by)),
            "{case}: {:?}",
            e.also
        );
    }
}

/// An unknown filter gets the nearest names, never the whole list; a field read of a list
/// or a string gets a help line saying how to write it.
#[test]
fn unknown_filters_and_fields_get_a_short_help() {
    let help_of = |case: &str, what: &str| {
        let path = Path::new(FIXTURES).join(format!("template/{case}.rondo"));
        let (_, _, diags, _) = check_path(&path, false);
        diags
            .iter()
            .find(|d| d.message.contains(what))
            .unwrap_or_else(|| panic!("{case}: no diagnostic about {what}"))
            .help
            .clone()
            .unwrap_or_default()
    };
    let near = "unknown_filter_near";
    assert!(help_of(near, "`uppercase`").contains("`upper`"));
    assert!(help_of(near, "`len`").contains("`length`"));
    for what in ["`uppercase`", "`len`", "`frobnicate`"] {
        let help = help_of(near, what);
        assert!(
            !help.contains("linebreaksbr"),
            "{what}: lists every filter: {help}"
        );
    }
    let list = "unknown_field_of_list";
    assert!(help_of(list, "field `first`").contains("memory.plan | first"));
    assert!(help_of(list, "field `title`").contains("memory.plan[0]"));
    assert!(help_of(list, "field `upper`").contains("input.question | upper"));
}

/// A prompt written inline where a template file is named: the error says so, and not
/// "no file <the text>".
#[test]
fn a_prompt_written_inline_is_told_to_go_in_a_file() {
    let path = Path::new(FIXTURES).join("template/missing_inline_text.rondo");
    let (_, _, diags, _) = check_path(&path, false);
    let errors = errors(&diags);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].message.contains("as text"),
        "{}",
        errors[0].message
    );
    assert!(errors[0].labels.iter().all(|l| !l.text.contains("{{")));
    let help = errors[0].help.as_deref().unwrap_or("");
    assert!(help.contains("prompt = \"answer.tera\""), "{help}");
}

/// `rondo check` parses the templates a file names while it compiles, guessing their names
/// from the syntax tree; the passes run on a compiled workflow parse them after. Both give
/// the same reports for every fixture and shipped workflow that compiles, whether the guess
/// was right or not.
#[test]
fn templates_parsed_while_compiling_give_the_reports_of_templates_parsed_after() {
    let mut files = files_with_ext(&root().join(FIXTURES), "rondo");
    files.extend(files_with_ext(&root().join("workflows"), "rondo"));
    let options = rondo::check::CheckOptions { offline: true };
    let shown = |diags: &rondo::diagnostics::Diagnostics| -> Vec<String> {
        // The template passes' reports: `load` runs other passes that `check` leaves out.
        diags
            .sorted()
            .iter()
            .filter(|d| d.code.as_str().starts_with("rondo::template::"))
            .map(|d| format!("{} {:?} {}", d.code.as_str(), d.primary_span(), d.message))
            .collect()
    };
    let (mut compared, mut reported) = (0, 0);
    for abs in files {
        let Ok(text) = std::fs::read_to_string(&abs) else {
            continue;
        };
        let file = rondo::source::SourceFile::new(rel(&abs), text);
        let (workflow, compiled) = rondo::compile::load(&file);
        if compiled.has_errors() {
            continue;
        }
        let (after, _) = rondo::check::check(&workflow, false, &options);
        let early = rondo::check::load(&file, &options);
        assert_eq!(
            shown(&early.diagnostics),
            shown(&after),
            "{}",
            abs.display()
        );
        compared += 1;
        reported += usize::from(!shown(&after).is_empty());
    }
    assert!(compared > 20, "only {compared} files compiled");
    assert!(reported > 5, "only {reported} files had template reports");
}
