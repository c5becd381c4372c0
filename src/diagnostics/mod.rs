//! Diagnostics: every user error of every stage, accumulated rather than stopping at the
//! first, rendered with miette (human) or as JSON (editors and CI).

use std::collections::HashMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::source::{SourceFile, Span};

mod code;
mod render;

pub use code::Code;
pub use render::render_human;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, Serialize)]
pub struct Label {
    pub span: Span,
    pub text: String,
}

/// One problem found in a workflow file.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    pub labels: Vec<Label>,
    pub help: Option<String>,
    /// Set when the problem lies in another file than the workflow (a prompt template):
    /// the diagnostic is reported there, and `labels` show the workflow's side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<Box<ExternalLabel>>,
}

/// A labelled span in a file other than the workflow being checked.
#[derive(Debug, Clone, Serialize)]
pub struct ExternalLabel {
    pub path: PathBuf,
    #[serde(skip)]
    pub text: Arc<str>,
    pub span: Span,
    pub label: String,
    /// More places in that file with the same fault (the same variable misspelled twice).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Label>,
}

impl ExternalLabel {
    pub fn new(path: &Path, text: Arc<str>, span: Span, label: impl Into<String>) -> Self {
        ExternalLabel {
            path: normalize(path),
            text,
            span,
            label: label.into(),
            also: Vec::new(),
        }
    }

    /// The labels drawn in the other file: its place, then the others.
    pub fn labels(&self) -> Vec<Label> {
        let mut out = vec![Label {
            span: self.span,
            text: self.label.clone(),
        }];
        out.extend(self.also.iter().cloned());
        out
    }

    fn file(&self) -> SourceFile {
        SourceFile::new(self.path.clone(), self.text.clone())
    }
}

/// `a/b/../c` as `a/c`, so a prompts folder named relative to the workflow reads well.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            labels: Vec::new(),
            help: None,
            external: None,
        }
    }

    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn label(mut self, span: Span, text: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            text: text.into(),
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Reports the diagnostic in another file (a template); labels stay in the workflow.
    pub fn external(mut self, external: ExternalLabel) -> Self {
        self.external = Some(Box::new(external));
        self
    }

    pub fn maybe_help(self, help: Option<String>) -> Self {
        match help {
            Some(h) => self.help(h),
            None => self,
        }
    }

    /// A file (the workflow, an import, a template) whose bytes are not UTF-8; the caller
    /// labels the first bad byte ([`ReadError::bad_byte`]) in that file.
    pub fn not_utf8(what: impl fmt::Display) -> Self {
        Diagnostic::error(Code::FileNotUtf8, format!("{what} is not UTF-8 text"))
            .help("save it as UTF-8 (from Latin-1: `iconv -f latin1 -t utf-8 FILE > NEW`)")
    }

    /// The places of the same fault met again: labelled, their text left out when it
    /// repeats the first label's.
    fn add_uses(&mut self, other: Diagnostic) {
        add_labels(&mut self.labels, other.labels);
        if let (Some(mine), Some(theirs)) = (&mut self.external, other.external) {
            let first = Label {
                span: mine.span,
                text: mine.label.clone(),
            };
            let mut all = vec![first];
            all.append(&mut mine.also);
            add_labels(&mut all, theirs.labels());
            mine.also = all.split_off(1);
        }
    }

    pub fn primary_span(&self) -> Span {
        self.labels.first().map(|l| l.span).unwrap_or_default()
    }

    fn external_key(&self) -> Option<(&Path, Span)> {
        self.external.as_ref().map(|e| (e.path.as_path(), e.span))
    }
}

/// Adds `more` labels after `labels`, skipping places already labelled; a text that
/// repeats the first label's is left out.
fn add_labels(labels: &mut Vec<Label>, more: Vec<Label>) {
    let first = labels.first().map(|l| l.text.clone());
    for mut label in more {
        if labels.iter().any(|l| l.span == label.span) {
            continue;
        }
        if first.as_deref() == Some(label.text.as_str()) {
            label.text.clear();
        }
        labels.push(label);
    }
}

/// The diagnostics of one file.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
    /// Where the diagnostic of a fault met in several places is ([`Code::merges_uses`]).
    repeated: HashMap<RepeatKey, usize>,
}

/// What makes two diagnostics one fault: code, message and the other file they are in.
type RepeatKey = (Code, String, Option<PathBuf>);

fn repeat_key(d: &Diagnostic) -> Option<RepeatKey> {
    d.code.merges_uses().then(|| {
        let external = d.external.as_ref().map(|e| e.path.clone());
        (d.code, d.message.clone(), external)
    })
}

impl Diagnostics {
    /// Adds a diagnostic; one of a fault already reported only labels its place there.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        if let Some(key) = repeat_key(&diagnostic) {
            if let Some(&at) = self.repeated.get(&key) {
                self.items[at].add_uses(diagnostic);
                return;
            }
            self.repeated.insert(key, self.items.len());
        }
        self.items.push(diagnostic);
    }

    pub fn extend(&mut self, other: Diagnostics) {
        for d in other.items {
            self.push(d);
        }
    }

    pub fn retain(&mut self, keep: impl FnMut(&Diagnostic) -> bool) {
        self.items.retain(keep);
        self.repeated = self
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, d)| repeat_key(d).map(|k| (k, i)))
            .collect();
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn error_count(&self) -> usize {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }

    pub fn warning_count(&self) -> usize {
        self.items.len() - self.error_count()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sorted by position, then code, without duplicates, so output is stable. The
    /// workflow's own problems come before those of its templates, which are read in the
    /// light of its declarations (a template's follow-on of a misspelled `reads` is after
    /// it, though the role's name is above).
    pub fn sorted(&self) -> Vec<Diagnostic> {
        let mut items = self.items.clone();
        items.sort_by(|a, b| {
            let elsewhere = |d: &Diagnostic| d.external.is_some();
            (
                elsewhere(a),
                a.primary_span(),
                a.external_key(),
                a.code,
                &a.message,
            )
                .cmp(&(
                    elsewhere(b),
                    b.primary_span(),
                    b.external_key(),
                    b.code,
                    &b.message,
                ))
        });
        items.dedup_by(|a, b| {
            a.code == b.code
                && a.message == b.message
                && a.primary_span() == b.primary_span()
                && a.external_key() == b.external_key()
        });
        items
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }
}

fn position(file: &SourceFile, span: Span) -> (String, usize, usize) {
    let (line, col) = file.line_col(span.start);
    (file.path.display().to_string(), line, col)
}

#[derive(Serialize)]
struct JsonLabel<'a> {
    /// Only on the labels of a diagnostic reported in another file.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    text: &'a str,
    line: usize,
    column: usize,
    end_line: usize,
    end_column: usize,
    offset: usize,
    length: usize,
}

#[derive(Serialize)]
struct JsonDiagnostic<'a> {
    file: String,
    severity: Severity,
    code: &'a str,
    message: &'a str,
    line: usize,
    column: usize,
    labels: Vec<JsonLabel<'a>>,
    help: Option<&'a str>,
}

/// One JSON value per diagnostic, positions 1-based.
pub fn to_json<'a>(file: &SourceFile, diagnostics: &'a [Diagnostic]) -> Vec<serde_json::Value> {
    diagnostics
        .iter()
        .map(|d| {
            let ext_file = d.external.as_deref().map(ExternalLabel::file);
            let (path, line, column) = match (&d.external, &ext_file) {
                (Some(e), Some(f)) => position(f, e.span),
                _ => position(file, d.primary_span()),
            };
            let json_label = |f: &SourceFile, text: &'a str, span: Span, named: bool| {
                let (line, column) = f.line_col(span.start);
                let (end_line, end_column) = f.line_col(span.end);
                JsonLabel {
                    file: named.then(|| f.path.display().to_string()),
                    text,
                    line,
                    column,
                    end_line,
                    end_column,
                    offset: span.start,
                    length: span.len(),
                }
            };
            let mut labels: Vec<JsonLabel> = Vec::new();
            if let (Some(e), Some(f)) = (&d.external, &ext_file) {
                labels.push(json_label(f, &e.label, e.span, true));
                labels.extend(e.also.iter().map(|l| json_label(f, &l.text, l.span, true)));
            }
            let named = d.external.is_some();
            labels.extend(
                d.labels
                    .iter()
                    .map(|l| json_label(file, &l.text, l.span, named)),
            );
            let json = JsonDiagnostic {
                file: path,
                severity: d.severity,
                code: d.code.as_str(),
                message: &d.message,
                line,
                column,
                labels,
                help: d.help.as_deref(),
            };
            serde_json::to_value(json).unwrap_or(serde_json::Value::Null)
        })
        .collect()
}

/// "did you mean `x`?" for the closest candidate within a small edit distance (a swap
/// of two letters, `nmae`, is one edit); of equally close ones, the first by name, so the
/// answer does not depend on the order candidates come in.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    nearest(name, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// "did you mean `a` or `b`?" for up to three candidates near `name`: within a small edit
/// distance, as [`did_you_mean`], or one containing the other (`upper` for `uppercase`,
/// `length` for `len`), as a name from another language often is. Closest first.
pub fn did_you_mean_any<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let mut near: Vec<((u8, usize), &str)> = candidates
        .into_iter()
        .filter_map(|candidate| {
            let distance = strsim::osa_distance(name, candidate);
            let limit = (name.len().max(candidate.len()) / 3).max(1);
            if distance <= limit {
                return Some(((0, distance), candidate));
            }
            let (short, long) = if name.len() < candidate.len() {
                (name, candidate)
            } else {
                (candidate, name)
            };
            (short.len() >= 3 && long.contains(short))
                .then_some(((1, long.len() - short.len()), candidate))
        })
        .collect();
    near.sort_unstable();
    near.dedup_by_key(|(_, c)| *c);
    let names: Vec<String> = near.iter().take(3).map(|(_, c)| format!("`{c}`")).collect();
    match names.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [first @ .., last] => Some(format!("did you mean {} or {last}?", first.join(", "))),
    }
}

/// The candidate [`did_you_mean`] suggests.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter_map(|candidate| {
            let distance = strsim::osa_distance(name, candidate);
            let limit = (name.len().max(candidate.len()) / 3).max(1);
            (distance <= limit).then_some((distance, candidate))
        })
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_breaks_ties_by_name_whatever_the_order() {
        let names = ["coder", "c", "a", "ab", "cb"];
        for rotation in 0..names.len() {
            let mut order = names.to_vec();
            order.rotate_left(rotation);
            assert_eq!(
                did_you_mean("b", order.iter().copied()).as_deref(),
                Some("did you mean `a`?")
            );
            order.reverse();
            assert_eq!(
                did_you_mean("b", order.iter().copied()).as_deref(),
                Some("did you mean `a`?")
            );
        }
    }

    fn unknown(name: &str, at: usize) -> Diagnostic {
        Diagnostic::error(Code::RouteUnknownTarget, format!("unknown `{name}`"))
            .label(Span::new(at, at + name.len()), "not declared")
    }

    #[test]
    fn one_fault_met_in_several_places_is_one_diagnostic() {
        let mut diags = Diagnostics::default();
        diags.push(unknown("done", 10));
        diags.push(unknown("other", 20));
        diags.push(unknown("done", 30));
        diags.push(unknown("done", 30));
        // Not a code of that kind: two lines not understood are two faults.
        diags.push(
            Diagnostic::error(Code::SyntaxInvalidLine, "not understood").label(Span::new(1, 2), ""),
        );
        diags.push(
            Diagnostic::error(Code::SyntaxInvalidLine, "not understood").label(Span::new(3, 4), ""),
        );
        assert_eq!(diags.error_count(), 4);
        let done = diags
            .iter()
            .find(|d| d.message == "unknown `done`")
            .expect("merged");
        let spans: Vec<(usize, &str)> = done
            .labels
            .iter()
            .map(|l| (l.span.start, l.text.as_str()))
            .collect();
        assert_eq!(spans, [(10, "not declared"), (30, "")]);
        // After a retain, later uses still find their diagnostic.
        diags.retain(|d| d.message != "unknown `other`");
        diags.push(unknown("done", 50));
        diags.push(unknown("other", 60));
        assert_eq!(diags.error_count(), 4);
        let done = diags
            .iter()
            .find(|d| d.message == "unknown `done`")
            .expect("merged");
        assert_eq!(done.labels.len(), 3);
    }

    #[test]
    fn did_you_mean_any_takes_names_one_contains_and_names_at_most_three() {
        let filters = ["upper", "lower", "length", "json_encode", "to_json", "trim"];
        assert_eq!(
            did_you_mean_any("uppercase", filters).as_deref(),
            Some("did you mean `upper`?")
        );
        assert_eq!(
            did_you_mean_any("len", filters).as_deref(),
            Some("did you mean `length`?")
        );
        assert_eq!(
            did_you_mean_any("json", filters).as_deref(),
            Some("did you mean `to_json` or `json_encode`?")
        );
        assert_eq!(did_you_mean_any("frobnicate", filters), None);
        // Two letters are in too many names to mean one.
        assert_eq!(did_you_mean_any("up", ["upper", "lookup"]), None);
        let many = ["ab1", "ab2", "ab3", "ab4"];
        assert_eq!(
            did_you_mean_any("ab", many).as_deref(),
            Some("did you mean `ab1`, `ab2` or `ab3`?")
        );
    }

    #[test]
    fn did_you_mean_counts_a_swap_as_one_edit_and_stays_close() {
        assert_eq!(
            did_you_mean("nmae", ["name", "none"]).as_deref(),
            Some("did you mean `name`?")
        );
        assert_eq!(did_you_mean("planner", ["executor", "verifier"]), None);
    }
}
