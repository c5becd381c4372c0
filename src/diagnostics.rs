//! Diagnostics: every user error of every stage, accumulated rather than stopping at the
//! first, rendered with miette (human) or as JSON (editors and CI).

use std::fmt;
use std::sync::Arc;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};
use serde::Serialize;

use crate::source::{SourceFile, Span};

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
    /// A stable code such as `rondo::route::unknown_target`.
    pub code: &'static str,
    pub message: String,
    pub labels: Vec<Label>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            labels: Vec::new(),
            help: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
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

    pub fn maybe_help(self, help: Option<String>) -> Self {
        match help {
            Some(h) => self.help(h),
            None => self,
        }
    }

    pub fn primary_span(&self) -> Span {
        self.labels.first().map(|l| l.span).unwrap_or_default()
    }
}

/// The diagnostics of one file.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.items.push(diagnostic);
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    pub fn retain(&mut self, keep: impl FnMut(&Diagnostic) -> bool) {
        self.items.retain(keep);
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

    /// Sorted by position, then code, without duplicates, so output is stable.
    pub fn sorted(&self) -> Vec<Diagnostic> {
        let mut items = self.items.clone();
        items.sort_by(|a, b| {
            (a.primary_span(), a.code, &a.message).cmp(&(b.primary_span(), b.code, &b.message))
        });
        items.dedup_by(|a, b| {
            a.code == b.code && a.message == b.message && a.primary_span() == b.primary_span()
        });
        items
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }
}

/// A diagnostic bound to its source so miette can draw it.
struct Report<'a> {
    diagnostic: &'a Diagnostic,
    source: NamedSource<Arc<str>>,
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diagnostic.message)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diagnostic.message)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diagnostic.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.diagnostic.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diagnostic
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(self.diagnostic.labels.iter().enumerate().map(
            |(i, l)| {
                let text = (!l.text.is_empty()).then(|| l.text.clone());
                if i == 0 {
                    LabeledSpan::new_primary_with_span(text, l.span)
                } else {
                    LabeledSpan::new_with_span(text, l.span)
                }
            },
        )))
    }
}

/// Renders diagnostics as text; `color` off gives stable, snapshot-friendly output.
pub fn render_human(
    file: &SourceFile,
    diagnostics: &[Diagnostic],
    color: bool,
    width: usize,
) -> String {
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(width)
        .with_links(false);
    let source = file.named();
    let mut out = String::new();
    for diagnostic in diagnostics {
        let report = Report {
            diagnostic,
            source: source.clone(),
        };
        let (line, col) = file.line_col(diagnostic.primary_span().start);
        out.push_str(&format!("{}:{line}:{col}\n", file.path.display()));
        if handler.render_report(&mut out, &report).is_err() {
            out.push_str(&diagnostic.message);
        }
        out.push('\n');
    }
    out
}

#[derive(Serialize)]
struct JsonLabel<'a> {
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
pub fn to_json(file: &SourceFile, diagnostics: &[Diagnostic]) -> Vec<serde_json::Value> {
    diagnostics
        .iter()
        .map(|d| {
            let (line, column) = file.line_col(d.primary_span().start);
            let labels = d
                .labels
                .iter()
                .map(|l| {
                    let (line, column) = file.line_col(l.span.start);
                    let (end_line, end_column) = file.line_col(l.span.end);
                    JsonLabel {
                        text: &l.text,
                        line,
                        column,
                        end_line,
                        end_column,
                        offset: l.span.start,
                        length: l.span.len(),
                    }
                })
                .collect();
            let json = JsonDiagnostic {
                file: file.path.display().to_string(),
                severity: d.severity,
                code: d.code,
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

/// "did you mean `x`?" for the closest candidate within a small edit distance.
pub fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let distance = strsim::levenshtein(name, candidate);
        let limit = (name.len().max(candidate.len()) / 3).max(1);
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| format!("did you mean `{c}`?"))
}
