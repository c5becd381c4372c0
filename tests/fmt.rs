//! `rondo fmt`: every workflow the parser accepts comes out in one layout that reads as the
//! same workflow (same `check` verdict, same compiled workflow), keeps its comments, and
//! stays as it is when formatted again.

mod common;
#[path = "soundness/gen.rs"]
#[allow(dead_code)]
mod generator;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use proptest::prelude::*;
use rondo::check::{self, CheckOptions};
use rondo::source::SourceFile;
use serde_json::Value;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

/// The comments of a text, read apart from the formatter: `//` to the end of the line,
/// `/* ... */`, neither inside a `"..."` or `"""..."""` string.
fn comments(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(['"', '/']) {
        let from = &rest[at..];
        let skip = if let Some(body) = from.strip_prefix("\"\"\"") {
            3 + body.find("\"\"\"").map_or(body.len(), |e| e + 3)
        } else if let Some(body) = from.strip_prefix('"') {
            let mut escaped = false;
            let end = body
                .char_indices()
                .find(|&(_, c)| {
                    let closes = !escaped && (c == '"' || c == '\n');
                    escaped = !escaped && c == '\\';
                    closes
                })
                .map_or(body.len(), |(i, _)| i + 1);
            1 + end
        } else if from.starts_with("//") {
            let end = from.find('\n').unwrap_or(from.len());
            found.push(from[..end].trim_end().to_string());
            end
        } else if let Some(body) = from.strip_prefix("/*") {
            let end = body.find("*/").map_or(from.len(), |e| e + 4);
            found.push(from[..end].to_string());
            end
        } else {
            1
        };
        rest = &from[skip.min(from.len())..];
    }
    found
}

/// A JSON value with every span (`{"start": .., "end": ..}`), the source's hash and the
/// text of each expression as written (kept for messages) taken out: what stays is what
/// the workflow says, not where or in what layout it says it.
fn meaning(mut value: Value) -> Value {
    let mut stack = vec![&mut value];
    while let Some(v) = stack.pop() {
        let is_span = v
            .as_object()
            .is_some_and(|m| m.len() == 2 && m.contains_key("start") && m.contains_key("end"));
        if is_span {
            *v = Value::Null;
            continue;
        }
        match v {
            Value::Object(map) => {
                map.remove("source_hash");
                if map.contains_key("kind") && map.contains_key("span") {
                    map.remove("text");
                }
                stack.extend(map.values_mut());
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            _ => {}
        }
    }
    value
}

/// What `rondo check` says of a text read as the file `path` (imports and prompts found
/// beside it), and the compiled workflow `rondo dump` prints, both without positions.
fn verdict(path: &Path, text: &str) -> (Value, Value) {
    let file = SourceFile::new(path, text);
    let loaded = check::load(&file, &CheckOptions { offline: true });
    let diagnostics: Vec<Value> = loaded
        .diagnostics
        .sorted()
        .iter()
        .map(|d| {
            serde_json::json!({
                "severity": format!("{:?}", d.severity),
                "code": d.code.as_str(),
                "message": d.message,
                "labels": d.labels.iter().map(|l| l.text.clone()).collect::<Vec<_>>(),
                "help": d.help,
            })
        })
        .collect();
    let workflow = serde_json::to_value(loaded.workflow()).unwrap();
    (Value::Array(diagnostics), meaning(workflow))
}

fn format(path: &Path, text: &str) -> String {
    rondo::fmt::format(&SourceFile::new(path, text))
        .unwrap_or_else(|e| panic!("{}: not formatted: {e}", path.display()))
}

/// Formatting `text` (the file `path`) gives a text that formats to itself, keeps every
/// comment, and means the same to `check` and `dump`.
fn assert_formats_faithfully(path: &Path, text: &str) -> String {
    let formatted = format(path, text);
    let again = format(path, &formatted);
    assert_eq!(
        again,
        formatted,
        "{}: formatting twice changed the text",
        path.display()
    );
    assert_eq!(
        comments(&formatted),
        comments(text),
        "{}: the comments changed",
        path.display()
    );
    let (said, compiled) = verdict(path, text);
    let (said_after, compiled_after) = verdict(path, &formatted);
    assert_eq!(
        said_after,
        said,
        "{}: check says something else once formatted:\n{formatted}",
        path.display()
    );
    assert!(
        compiled_after == compiled,
        "{}: the compiled workflow changed once formatted:\n{formatted}",
        path.display()
    );
    formatted
}

fn rondo_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rondo_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rondo") {
            found.push(path);
        }
    }
}

#[test]
fn every_shipped_workflow_and_fixture_that_parses_is_formatted_to_the_same_workflow() {
    let root = common::root();
    let mut files = Vec::new();
    rondo_files(&root.join("workflows"), &mut files);
    rondo_files(&root.join("tests/fixtures"), &mut files);
    files.sort();
    let (mut formatted, mut skipped, mut checked) = (0, 0, 0);
    for path in &files {
        let Ok(text) = std::fs::read_to_string(path) else {
            skipped += 1;
            continue;
        };
        let file = SourceFile::new(path, text.as_str());
        let (ast, diagnostics) = rondo::syntax::parse(&file);
        if diagnostics.has_errors() {
            skipped += 1;
            continue;
        }
        if !ast.extra_headers.is_empty() {
            // The tree keeps one `workflow` header: a second is refused, not dropped.
            let refused = rondo::fmt::format(&file);
            assert!(
                matches!(refused, Err(rondo::fmt::FormatError::Syntax(_))),
                "{}: a second workflow header must be refused",
                path.display()
            );
            skipped += 1;
            continue;
        }
        let result = assert_formats_faithfully(path, &text);
        let file = SourceFile::new(path, result.as_str());
        if check::load(&file, &CheckOptions { offline: true })
            .checked
            .is_ok()
        {
            checked += 1;
        }
        formatted += 1;
    }
    // The fixtures include files that do not parse on purpose; most do.
    assert!(
        formatted >= 150 && checked >= 10,
        "formatted {formatted}, of which {checked} check; skipped {skipped}"
    );
}

const MESSY: &str = r#"// A review loop, written carelessly.
workflow   review{
  description="a writer and a reviewer"   // what it is
  input topic:string
  limits { max_steps = 20  max_wall_time = 10m }
}
type Verdict {  status : "accept"|"revise"   // the decision
  notes: string
}

memory{ drafts: list[string] = [ ] }
/* the writer */
role writer:builtin{
  update { drafts.append( input.topic ) }
}
role reviewer : builtin {
  max_visits=3
}
start->writer
writer -> reviewer
reviewer->writer when len(memory.drafts)<2   max 3
reviewer -> done otherwise
exit done
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_file_is_rewritten_in_place_and_dumps_the_same_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "review.rondo", MESSY);
    let dump = |path: &Path| {
        let out = rondo().arg("dump").arg(path).output().unwrap();
        common::assert_success(&out);
        meaning(serde_json::from_slice(&out.stdout).unwrap())
    };
    let before = dump(&path);
    let out = rondo().arg("fmt").arg(&path).output().unwrap();
    common::assert_success(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        path.display().to_string(),
        "fmt lists the file it rewrote"
    );
    let written = std::fs::read_to_string(&path).unwrap();
    assert_ne!(written, MESSY);
    assert_eq!(
        written,
        r#"// A review loop, written carelessly.
workflow review {
  description = "a writer and a reviewer"  // what it is
  input topic: string
  limits {
    max_steps = 20
    max_wall_time = 10m
  }
}

type Verdict {
  status: "accept" | "revise"  // the decision
  notes: string
}

memory {
  drafts: list[string] = []
}

/* the writer */
role writer: builtin {
  update {
    drafts.append(input.topic)
  }
}

role reviewer: builtin {
  max_visits = 3
}

start -> writer
writer -> reviewer
reviewer -> writer when len(memory.drafts) < 2 max 3
reviewer -> done otherwise

exit done
"#
    );
    assert_eq!(dump(&path), before, "the compiled workflow changed");
    let again = rondo().arg("fmt").arg(&path).output().unwrap();
    common::assert_success(&again);
    assert!(again.stdout.is_empty(), "a formatted file is not rewritten");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
}

#[test]
fn check_lists_the_files_that_would_change_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let messy = write(dir.path(), "messy.rondo", MESSY);
    let tidy_text = format(&messy, MESSY);
    let tidy = write(dir.path(), "tidy.rondo", &tidy_text);

    let out = rondo()
        .args(["fmt", "--check"])
        .args([&messy, &tidy])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", messy.display())
    );
    assert_eq!(
        std::fs::read_to_string(&messy).unwrap(),
        MESSY,
        "--check writes nothing"
    );

    let out = rondo()
        .args(["fmt", "--check"])
        .arg(&tidy)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(out.stdout.is_empty());
}

#[test]
fn a_file_that_does_not_parse_is_reported_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let broken = "workflow w {\n  x: 1\n}\nrole r: llm {\n";
    let path = write(dir.path(), "broken.rondo", broken);
    for args in [vec!["fmt"], vec!["fmt", "--check"]] {
        let out = rondo().args(&args).arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = common::stderr(&out);
        assert!(stderr.contains("not formatted"), "{stderr}");
        assert!(
            stderr.contains("rondo::syntax"),
            "the diagnostics are shown: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);
    }
}

/// Nesting too deep to read: refused with a message, never a crash (1,000 nested object
/// types overflowed the printer's stack; the parser now stops them first, at 128 levels).
#[test]
fn a_file_nested_too_deeply_is_refused_not_crashed() {
    let depth = 1000;
    let source = format!(
        "type T = {}string{}\n",
        "{ a: ".repeat(depth),
        " }".repeat(depth)
    );
    let out = with_stdin(&["fmt", "-"], &source);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("nested too deeply"),
        "{}",
        common::stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

fn with_stdin(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = rondo()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_dash_reads_standard_input_and_writes_standard_output() {
    let out = with_stdin(&["fmt", "-"], MESSY);
    common::assert_success(&out);
    let formatted = String::from_utf8(out.stdout).unwrap();
    assert_eq!(formatted, format(Path::new("review.rondo"), MESSY));

    let out = with_stdin(&["fmt", "--check", "-"], MESSY);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "-\n");

    let out = with_stdin(&["fmt", "--check", "-"], &formatted);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());

    let out = with_stdin(&["fmt", "-"], "role r: {\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "nothing is written for a file that does not parse"
    );
}

/// Comments in every kind of place: each is kept, in order, on its statement's line or on
/// its own line before the statement it preceded.
#[test]
fn comments_stay_with_what_they_were_written_beside() {
    let source = r#"// file header

workflow w { // on the header
  description = "d" // after an attribute
  /* before the limits */
  limits {
    max_steps = 4 // inside a block
    // at the end of a block
  }
}

// about the types

type T { // object header
  a: string // a field
  // before b
  b: int
}
role r: builtin {
  update {
    set n = 1 // a set
    // at the end of the update
  }
  reads = [n, // inside a list
    n]
}
memory { n: int = 0 }
start -> r
r -> done when n == 1 and /* inside a condition */ n < 2
exit done // the exit
// the last line
"#;
    let path = Path::new("comments.rondo");
    let formatted = assert_formats_faithfully(path, source);
    assert_eq!(
        formatted,
        r#"// file header

workflow w {  // on the header
  description = "d"  // after an attribute
  /* before the limits */
  limits {
    max_steps = 4  // inside a block
    // at the end of a block
  }
}

// about the types

type T {  // object header
  a: string  // a field
  // before b
  b: int
}

role r: builtin {
  update {
    set n = 1  // a set
    // at the end of the update
  }
  // inside a list
  reads = [n, n]
}

memory {
  n: int = 0
}

start -> r
/* inside a condition */
r -> done when n == 1 and n < 2

exit done  // the exit
// the last line
"#
    );
}

/// Operators print with the parentheses the parser needs, and none it does not: the
/// tree read back is the one written.
#[test]
fn expressions_keep_their_grouping() {
    let source = "workflow w {\n  input a: int\n  input b: bool\n}\nrole r: builtin {\n  update {\n    set x = a - (a - 1)\n    set y = (a - 1) - a\n    set z = not (b and b) or (not b) == false\n    set v = -(a + 1) + (a ?? 2)\n    set u = ((a))\n  }\n}\nmemory {\n  x: int = 0\n  y: int = 0\n  z: bool = false\n  v: int = 0\n  u: int = 0\n}\nstart -> r\nr -> done\nexit done\n";
    let path = Path::new("grouping.rondo");
    let formatted = format(path, source);
    assert!(formatted.contains("set x = a - (a - 1)\n"), "{formatted}");
    assert!(formatted.contains("set y = a - 1 - a\n"), "{formatted}");
    assert!(
        formatted.contains("set z = not (b and b) or (not b) == false\n"),
        "{formatted}"
    );
    assert!(formatted.contains("set u = a\n"), "{formatted}");
    assert_eq!(format(path, &formatted), formatted);
}

/// A `"""` string moves to its new indentation as a whole: its value is the same.
#[test]
fn a_multiline_string_is_moved_not_changed() {
    let source = "workflow w {\n      description = \"\"\"\n            first\n              indented\n\n            last\n          \"\"\"\n}\nrole r: builtin {}\nstart -> r\nr -> done\nexit done\n";
    let path = Path::new("raw.rondo");
    let formatted = assert_formats_faithfully(path, source);
    assert!(
        formatted
            .contains("  description = \"\"\"\n    first\n      indented\n\n    last\n  \"\"\"\n"),
        "{formatted}"
    );
}

/// Windows line ends come out as `\n`, inside `"""` strings too, the values unchanged.
#[test]
fn crlf_line_ends_give_the_same_text_as_lf() {
    let path = common::root().join("workflows/iter.rondo");
    let lf = std::fs::read_to_string(&path).unwrap();
    let crlf = lf.replace('\n', "\r\n");
    let formatted = assert_formats_faithfully(&path, &crlf);
    assert!(!formatted.contains('\r'));
    assert_eq!(formatted, format(&path, &lf));
}

/// Adds comments to a generated workflow (it has no multi-line string, so each line ends
/// outside one): a line comment at the end of some lines, a comment line before others,
/// a block comment at the start of some.
fn with_comments(source: &str, seed: u64) -> String {
    let mut rng = generator::Rng::new(seed);
    let mut out = String::new();
    for (n, line) in source.lines().enumerate() {
        if rng.chance(0.15) {
            out.push_str(&format!("// own line {n}\n"));
        }
        if rng.chance(0.1) {
            out.push_str(&format!("/* block {n} */ "));
        }
        out.push_str(line);
        if !line.trim().is_empty() && rng.chance(0.2) {
            out.push_str(&format!(" // end of line {n}"));
        }
        out.push('\n');
    }
    out
}

fn write_prompts(dir: &Path, case: &generator::Case) {
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    for (name, text) in &case.prompts {
        std::fs::write(prompts.join(name), text).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The soundness tests' random workflows (accepted by `check` or not), with comments
    /// added: fmt keeps them, formats to a fixed point, and never changes what `check`
    /// says or what `dump` prints.
    #[test]
    fn generated_workflows_format_faithfully(seed in any::<u64>()) {
        let case = generator::generate(seed, generator::Features::FINAL);
        let dir = tempfile::tempdir().unwrap();
        write_prompts(dir.path(), &case);
        let path = dir.path().join("w.rondo");
        assert_formats_faithfully(&path, &case.source);
        let commented = with_comments(&case.source, seed);
        let formatted = assert_formats_faithfully(&path, &commented);
        prop_assert_eq!(verdict(&path, &formatted), verdict(&path, &case.source));
    }
}

/// Issue 27 §4: the header's `budget` and the size limits the worst case counts on.
#[test]
fn a_budget_and_size_limits_are_printed() {
    let messy = "workflow w {\n budget   =  \"$2.00\"\n  limits {  max_input_bytes = \"4KB\"   max_memory_bytes=65536 }\n}\nrole r: builtin {}\nstart -> r\nr -> done\nexit done\n";
    let out = with_stdin(&["fmt", "-"], messy);
    common::assert_success(&out);
    let formatted = String::from_utf8(out.stdout).unwrap();
    assert!(formatted.contains("  budget = \"$2.00\"\n"), "{formatted}");
    assert!(
        formatted.contains("max_input_bytes = \"4KB\""),
        "{formatted}"
    );
    assert!(
        formatted.contains("max_memory_bytes = 65536"),
        "{formatted}"
    );
    assert_formats_faithfully(Path::new("w.rondo"), messy);
    let out = with_stdin(&["fmt", "--check", "-"], &formatted);
    assert_eq!(out.status.code(), Some(0));
}
