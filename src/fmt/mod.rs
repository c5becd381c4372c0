//! `rondo fmt`: a workflow in the one canonical layout, its comments where they were.
//!
//! The file is read by the one parser ([`syntax`](crate::syntax)); the printer walks its
//! tree, and a scan of the text brings back the comments and braces the tree does not
//! keep. Before the result is given, it is parsed again: it must hold the same tree
//! (spans aside) and the same comments, or the file is left as it was.

mod doc;
mod print;
mod scan;

use crate::diagnostics::Diagnostics;
use crate::source::SourceFile;
use crate::syntax;

pub use scan::Comment;

#[derive(Debug)]
pub enum FormatError {
    /// The file does not parse: its syntax errors. A file is formatted only whole.
    Syntax(Diagnostics),
    /// The file nests blocks, types or expressions deeper than the formatter goes.
    TooDeep,
    /// The layout would change what the file says: a fault of the formatter, reported
    /// rather than written.
    Changed(String),
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::Syntax(d) => write!(f, "{} syntax error(s)", d.error_count()),
            FormatError::TooDeep => write!(
                f,
                "nested more than {} levels deep: not formatted",
                print::MAX_NESTING
            ),
            FormatError::Changed(what) => write!(
                f,
                "formatting would change the workflow ({what}); the file is left as it is (a bug in `rondo fmt`: please report it)"
            ),
        }
    }
}

impl std::error::Error for FormatError {}

/// The file's text in the canonical layout.
pub fn format(file: &SourceFile) -> Result<String, FormatError> {
    let (ast, diagnostics) = syntax::parse(file);
    if diagnostics.has_errors() {
        return Err(FormatError::Syntax(diagnostics));
    }
    if !ast.extra_headers.is_empty() {
        // The tree keeps only the first `workflow` header: printing it would drop the rest.
        let mut diagnostics = diagnostics;
        for span in &ast.extra_headers {
            diagnostics.push(
                crate::diagnostics::Diagnostic::error(
                    crate::diagnostics::Code::SyntaxInvalidLine,
                    "a second `workflow` header",
                )
                .label(*span, "second header")
                .help("a file has one `workflow` block; merge them"),
            );
        }
        return Err(FormatError::Syntax(diagnostics));
    }
    let scanned = scan::scan(&file.text);
    let formatted = print::Printer::new(&file.text, &scanned, &ast)
        .file()
        .ok_or(FormatError::TooDeep)?;
    verify(&ast, &scanned.comments, &formatted)?;
    Ok(formatted)
}

/// The comments of a text, as `rondo fmt` finds them (outside string literals).
pub fn comments(text: &str) -> Vec<Comment> {
    scan::scan(text).comments
}

/// The formatted text reads as the same tree, with the same comments in the same order.
fn verify(ast: &syntax::Ast, comments: &[Comment], formatted: &str) -> Result<(), FormatError> {
    let again = SourceFile::new(std::path::PathBuf::new(), formatted);
    let (tree, diagnostics) = syntax::parse(&again);
    if diagnostics.has_errors() {
        let first = diagnostics
            .sorted()
            .first()
            .map(|d| d.message.clone())
            .unwrap_or_default();
        return Err(FormatError::Changed(format!(
            "the result does not parse: {first}"
        )));
    }
    if without_spans(ast) != without_spans(&tree) {
        return Err(FormatError::Changed(
            "the result parses to another tree".into(),
        ));
    }
    let texts = |c: &[Comment]| c.iter().map(|c| c.text.clone()).collect::<Vec<_>>();
    if texts(comments) != texts(&scan::scan(formatted).comments) {
        return Err(FormatError::Changed(
            "a comment was lost or moved out of order".into(),
        ));
    }
    Ok(())
}

/// The tree as JSON, every span (`{"start":N,"end":M}`) written `null`. A string of
/// the tree cannot hold that text: its quotes would be escaped.
fn without_spans(ast: &syntax::Ast) -> String {
    let json = serde_json::to_string(ast).unwrap_or_default();
    let mut out = String::with_capacity(json.len());
    let mut rest = json.as_str();
    while let Some(at) = rest.find("{\"start\":") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        match span_length(after) {
            Some(length) => {
                out.push_str("null");
                rest = &after[length..];
            }
            None => {
                out.push('{');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of the `{"start":N,"end":M}` that `text` starts with.
fn span_length(text: &str) -> Option<usize> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let mut at = "{\"start\":".len();
    let n = digits(&text[at..]);
    at += n;
    let rest = text[at..].strip_prefix(",\"end\":")?;
    at += ",\"end\":".len();
    let m = digits(rest);
    at += m;
    (n > 0 && m > 0 && text[at..].starts_with('}')).then_some(at + 1)
}
