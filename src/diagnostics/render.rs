//! The human rendering of diagnostics: miette draws them, from an excerpt of each file
//! that holds only the lines around the labels, each cut to a readable width. Drawing a
//! diagnostic so costs the size of its excerpt, never the size of the file.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, SourceCode, SourceSpan,
    SpanContents,
};

use super::{Diagnostic, Label, Severity, position};
use crate::source::{SourceFile, Span};

/// A line longer than this is cut around what its labels point at.
const MAX_LINE_BYTES: usize = 160;
/// Bytes kept before a label's start and after its end on a cut line.
const MARGIN: usize = 32;
/// Of a long label on a cut line, the bytes kept from its start.
const MAX_LABEL_BYTES: usize = 64;
/// A label over more lines than this is drawn on its first line only.
const MAX_LABEL_LINES: usize = 4;
/// Source lines drawn for one diagnostic in one file (one label's lines always are).
const MAX_LINES: usize = 9;
/// Labels drawn for one diagnostic in one file; the places of the others are listed.
const MAX_LABELS: usize = 6;
/// Lines named in the list of labels not drawn.
const MAX_LISTED: usize = 10;
/// Around each label, the lines shown before and after it.
const CONTEXT: usize = 1;
/// Marks the bytes cut from a long line.
const CUT: &str = "…";

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
        .with_links(false)
        .with_context_lines(CONTEXT);
    // Files other than the workflow (templates), each indexed once.
    let mut others: HashMap<PathBuf, SourceFile> = HashMap::new();
    let mut out = String::new();
    for diagnostic in diagnostics {
        let (report, (path, line, col)) = match &diagnostic.external {
            None => {
                let (source, labels, hidden) = Excerpt::new(file, &diagnostic.labels);
                (
                    Report {
                        diagnostic,
                        source,
                        labels,
                        hidden,
                        related: Vec::new(),
                    },
                    position(file, diagnostic.primary_span()),
                )
            }
            Some(external) => {
                let ext_file = others
                    .entry(external.path.clone())
                    .or_insert_with(|| external.file());
                let (source, labels, hidden) = Excerpt::new(ext_file, &external.labels());
                let related = if diagnostic.labels.is_empty() {
                    Vec::new()
                } else {
                    let (source, labels, hidden) = Excerpt::new(file, &diagnostic.labels);
                    vec![Related {
                        source,
                        labels,
                        hidden,
                    }]
                };
                (
                    Report {
                        diagnostic,
                        source,
                        labels,
                        hidden,
                        related,
                    },
                    position(ext_file, external.span),
                )
            }
        };
        out.push_str(&format!("{path}:{line}:{col}\n"));
        let mut text = String::new();
        if handler.render_report(&mut text, &report).is_err() {
            text = diagnostic.message.clone();
        }
        let (wl, wc) = file.line_col(diagnostic.primary_span().start);
        let primaries = [
            format!("{path}:{line}:{col}"),
            format!("{}:{wl}:{wc}", file.path.display()),
        ];
        out.push_str(&join_excerpts(&text, &primaries));
        out.push('\n');
    }
    out
}

/// A diagnostic bound to the excerpt miette draws it from.
struct Report<'a> {
    diagnostic: &'a Diagnostic,
    source: Excerpt,
    /// The labels drawn, with spans into `source`.
    labels: Vec<Label>,
    /// The 1-based lines of the labels left out of the drawing.
    hidden: Vec<usize>,
    /// For a diagnostic reported in a template: the workflow's side, drawn after it.
    related: Vec<Related>,
}

/// The workflow labels of a diagnostic reported in a template.
struct Related {
    source: Excerpt,
    labels: Vec<Label>,
    hidden: Vec<usize>,
}

impl fmt::Debug for Related {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("in the workflow")
    }
}

impl fmt::Display for Related {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("in the workflow")
    }
}

impl std::error::Error for Related {}

impl miette::Diagnostic for Related {
    fn severity(&self) -> Option<miette::Severity> {
        Some(miette::Severity::Advice)
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        hidden_note(&self.hidden).map(|n| Box::new(n) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(labeled_spans(&self.labels)))
    }
}

fn labeled_spans(labels: &[Label]) -> impl Iterator<Item = LabeledSpan> + '_ {
    labels.iter().enumerate().map(|(i, l)| {
        let text = (!l.text.is_empty()).then(|| l.text.clone());
        if i == 0 {
            LabeledSpan::new_primary_with_span(text, l.span)
        } else {
            LabeledSpan::new_with_span(text, l.span)
        }
    })
}

/// "also at lines 12, 30 and 41", for the labels not drawn.
fn hidden_note(lines: &[usize]) -> Option<String> {
    let (last, rest) = lines.split_last()?;
    if rest.is_empty() {
        return Some(format!("also at line {last}"));
    }
    if lines.len() > MAX_LISTED {
        let shown: Vec<String> = lines[..MAX_LISTED].iter().map(usize::to_string).collect();
        return Some(format!(
            "also at lines {} and {} more",
            shown.join(", "),
            lines.len() - MAX_LISTED
        ));
    }
    let rest: Vec<String> = rest.iter().map(usize::to_string).collect();
    Some(format!("also at lines {} and {last}", rest.join(", ")))
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
        let help = match (&self.diagnostic.help, hidden_note(&self.hidden)) {
            (Some(h), Some(n)) => format!("{h}\n{n}"),
            (Some(h), None) => h.clone(),
            (None, Some(n)) => n,
            (None, None) => return None,
        };
        Some(Box::new(help))
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        Some(Box::new(labeled_spans(&self.labels)))
    }

    fn related<'b>(&'b self) -> Option<Box<dyn Iterator<Item = &'b dyn miette::Diagnostic> + 'b>> {
        if self.related.is_empty() {
            return None;
        }
        Some(Box::new(
            self.related.iter().map(|r| r as &dyn miette::Diagnostic),
        ))
    }
}

/// The lines of a file around some labels, as miette reads them: real line numbers and
/// columns, but only these lines in `text`, long ones cut.
struct Excerpt {
    name: String,
    text: String,
    lines: Vec<Shown>,
}

/// One line of an excerpt.
struct Shown {
    /// 0-based line in the file.
    line: usize,
    /// Runs of consecutive file lines get consecutive numbers: a context never spans two.
    run: usize,
    /// Where the line starts in the file and in the excerpt.
    file_start: usize,
    start: usize,
    /// Where its text ends (before the line break), in the file and in the excerpt.
    file_end: usize,
    end: usize,
    /// The kept pieces: (file offset, excerpt offset, length).
    parts: Vec<(usize, usize, usize)>,
}

/// The labels drawn (indexes into `placed`, the first being the primary), the runs of
/// lines shown, and the 1-based lines of the labels left out: the primary label first,
/// then the others in file order, while the drawing stays within MAX_LINES lines and
/// MAX_LABELS labels.
fn choose_labels(
    file: &SourceFile,
    placed: &[Placed],
) -> (Vec<usize>, Vec<(usize, usize)>, Vec<usize>) {
    let mut order: Vec<usize> = (1..placed.len()).collect();
    order.sort_by_key(|&i| (placed[i].start, i));
    if !placed.is_empty() {
        order.insert(0, 0);
    }
    let last_line = file.line_count() - 1;
    let mut chosen: Vec<usize> = Vec::new();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut hidden: Vec<usize> = Vec::new();
    for i in order {
        let p = &placed[i];
        let range = (
            p.first.saturating_sub(CONTEXT),
            (p.last + CONTEXT).min(last_line),
        );
        let mut with = ranges.clone();
        with.push(range);
        let with = merge(with);
        let lines: usize = with.iter().map(|(a, b)| b - a + 1).sum();
        if !chosen.is_empty() && (lines > MAX_LINES || chosen.len() >= MAX_LABELS) {
            hidden.push(p.first + 1);
            continue;
        }
        chosen.push(i);
        ranges = with;
    }
    hidden.sort_unstable();
    hidden.dedup();
    chosen.sort_unstable();
    (chosen, ranges, hidden)
}

/// A label with its span clamped to the file, and its first and last lines.
struct Placed {
    start: usize,
    end: usize,
    first: usize,
    last: usize,
}

impl Excerpt {
    /// The excerpt for `labels` (the first is the primary), the labels moved into it, and
    /// the 1-based lines of the labels left out to keep the drawing short.
    fn new(file: &SourceFile, labels: &[Label]) -> (Excerpt, Vec<Label>, Vec<usize>) {
        let placed: Vec<Placed> = labels.iter().map(|l| place(file, l.span)).collect();
        let (chosen, ranges, hidden) = choose_labels(file, &placed);
        let mut excerpt = Excerpt {
            name: file.path.display().to_string(),
            text: String::new(),
            lines: Vec::new(),
        };
        for (run, &(from, to)) in ranges.iter().enumerate() {
            for line in from..=to {
                let on_line = chosen
                    .iter()
                    .map(|&i| &placed[i])
                    .filter(|p| p.first <= line && line <= p.last);
                excerpt.push_line(file, line, run, on_line);
            }
        }
        let moved = chosen
            .iter()
            .map(|&i| {
                let p = &placed[i];
                let start = excerpt.map(p.first, p.start, false);
                let end = if p.end == p.start {
                    start
                } else {
                    excerpt.map(p.last, p.end, true).max(start)
                };
                Label {
                    span: Span::new(start, end),
                    text: labels[i].text.clone(),
                }
            })
            .collect();
        (excerpt, moved, hidden)
    }

    /// Adds file line `line` (of run `run` of consecutive lines) to the excerpt: the
    /// windows of it around the labels `on_line`, cut marks where it is cut.
    fn push_line<'p>(
        &mut self,
        file: &SourceFile,
        line: usize,
        run: usize,
        on_line: impl Iterator<Item = &'p Placed>,
    ) {
        let text = &*file.text;
        let (file_start, file_end, next) = file.line_bounds(line);
        let windows = windows(text, file_start, file_end, on_line);
        let start = self.text.len();
        let mut parts = Vec::new();
        let mut at = file_start;
        for (a, b) in windows {
            if a > at {
                self.text
                    .push_str(if at == file_start { CUT } else { " … " });
            }
            parts.push((a, self.text.len(), b - a));
            self.text.push_str(&text[a..b]);
            at = b;
        }
        if at < file_end {
            self.text.push_str(CUT);
        }
        let end = self.text.len();
        if next > file_end {
            self.text.push('\n');
        }
        self.lines.push(Shown {
            line,
            run,
            file_start,
            start,
            file_end,
            end,
            parts,
        });
    }

    fn shown(&self, line: usize) -> Option<&Shown> {
        self.lines
            .binary_search_by_key(&line, |s| s.line)
            .ok()
            .map(|i| &self.lines[i])
    }

    /// Where a file offset on `line` lies in the excerpt. An offset in a cut part maps to
    /// the cut's mark: before it for a start, after it for an end (`end`: the offset ends a
    /// span, so the byte before it is the one that counts).
    fn map(&self, line: usize, offset: usize, end: bool) -> usize {
        let Some(s) = self.shown(line) else {
            return self.text.len();
        };
        if offset > s.file_end || (offset == s.file_end && !end) {
            // On the line break: it is kept, one byte.
            let past = usize::from(offset > s.file_end && self.text.len() > s.end);
            return s.end + past;
        }
        let mut before = s.start;
        for &(file, at, len) in &s.parts {
            let inside = if end {
                file < offset && offset <= file + len
            } else {
                file <= offset && offset < file + len
            };
            if inside {
                return at + (offset - file);
            }
            if offset < file + usize::from(end) {
                return if end { at } else { before };
            }
            before = at + len;
        }
        if end { s.end } else { before }
    }

    /// The file column (0-based, in bytes) of an excerpt offset on line `s`.
    fn column(s: &Shown, offset: usize) -> usize {
        for &(file, at, len) in &s.parts {
            if offset < at {
                return file - s.file_start;
            }
            if offset <= at + len {
                return file + (offset - at) - s.file_start;
            }
        }
        s.file_end - s.file_start
    }

    fn index_of(&self, offset: usize) -> usize {
        self.lines
            .partition_point(|s| s.start <= offset)
            .saturating_sub(1)
    }
}

/// The label's span clamped into the file on character boundaries; a label over many
/// lines is cut to its first line.
fn place(file: &SourceFile, span: Span) -> Placed {
    let text = &*file.text;
    let mut start = text.floor_char_boundary(span.start.min(text.len()));
    let mut end = text.ceil_char_boundary(span.end.clamp(start, text.len()));
    let mut first = file.line_index(start);
    if start == end && start == text.len() && first > 0 && file.line_bounds(first).0 == start {
        // At the end of a text ending in a line break: that empty line is not drawn, so
        // the label goes to the end of the line before.
        first -= 1;
        (start, end) = (file.line_bounds(first).1, file.line_bounds(first).1);
    }
    let mut last = if end > start {
        file.line_index(end - 1)
    } else {
        first
    };
    if last - first >= MAX_LABEL_LINES {
        end = file.line_bounds(first).1.max(start);
        last = first;
    }
    Placed {
        start,
        end,
        first,
        last,
    }
}

/// Sorted ranges of lines, joined when they overlap or one line apart (the line is
/// shown rather than a mark in its place).
fn merge(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some((_, end)) if a <= *end + 2 => *end = (*end).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The byte ranges of a line kept in the excerpt: all of a short line; of a long one, the
/// surroundings of the label starts and ends on it (or its beginning when it has none).
fn windows<'p>(
    text: &str,
    start: usize,
    end: usize,
    labels: impl Iterator<Item = &'p Placed>,
) -> Vec<(usize, usize)> {
    if end - start <= MAX_LINE_BYTES {
        return vec![(start, end)];
    }
    let mut wanted: Vec<(usize, usize)> = Vec::new();
    for p in labels {
        if (start..=end).contains(&p.start) {
            let kept_end = p.end.min(p.start + MAX_LABEL_BYTES);
            wanted.push((p.start.saturating_sub(MARGIN), kept_end + MARGIN));
        } else {
            let p_end = p.end.min(end);
            wanted.push((p_end.saturating_sub(MARGIN), p_end + MARGIN));
        }
    }
    if wanted.is_empty() {
        wanted.push((start, start + MAX_LINE_BYTES));
    }
    let wanted = wanted.into_iter().map(|(a, b)| {
        (
            text.floor_char_boundary(a.clamp(start, end)),
            text.ceil_char_boundary(b.clamp(start, end)),
        )
    });
    merge_bytes(wanted.collect())
}

/// Sorted byte ranges with overlapping ones (or ones closer than a cut mark) joined.
fn merge_bytes(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some((_, end)) if a <= *end + 5 => *end = (*end).max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

struct Contents<'a> {
    data: &'a [u8],
    span: SourceSpan,
    name: &'a str,
    line: usize,
    column: usize,
    line_count: usize,
}

impl<'a> SpanContents<'a> for Contents<'a> {
    fn data(&self) -> &'a [u8] {
        self.data
    }

    fn span(&self) -> &SourceSpan {
        &self.span
    }

    fn name(&self) -> Option<&str> {
        Some(self.name)
    }

    fn line(&self) -> usize {
        self.line
    }

    fn column(&self) -> usize {
        self.column
    }

    fn line_count(&self) -> usize {
        self.line_count
    }
}

impl SourceCode for Excerpt {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        before: usize,
        after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let (offset, len) = (span.offset(), span.len());
        if self.lines.is_empty() || offset + len > self.text.len() {
            return Err(MietteError::OutOfBounds);
        }
        let first = self.index_of(offset);
        let run = self.lines[first].run;
        let last = self.index_of(offset + len.saturating_sub(1)).max(first);
        // A context stays within its run of consecutive lines.
        let run_start = self.lines[..first].partition_point(|s| s.run < run);
        let run_end = first + self.lines[first..].partition_point(|s| s.run == run) - 1;
        let last = last.min(run_end);
        let from = first.saturating_sub(before).max(run_start);
        let to = (last + after).min(run_end);
        let data_start = if before == 0 {
            offset
        } else {
            self.lines[from].start
        };
        let data_end = self
            .lines
            .get(to + 1)
            .map_or(self.text.len(), |s| s.start)
            .max(data_start);
        let column = if before == 0 {
            Excerpt::column(&self.lines[first], offset)
        } else {
            0
        };
        Ok(Box::new(Contents {
            data: &self.text.as_bytes()[data_start..data_end],
            span: SourceSpan::new(data_start.into(), data_end - data_start),
            name: &self.name,
            line: self.lines[from].line,
            column,
            // miette joins two contexts when the first's line plus its line count reaches
            // the second's line: counting to the end of the run makes it join exactly the
            // contexts of one run.
            line_count: self.lines[run_end].line - self.lines[from].line + 1,
        }))
    }
}

/// miette draws each run of lines in a box of its own; boxes of one file that follow each
/// other become one, the skipped lines marked `⋮`, their line numbers aligned. The joined
/// box is headed by the location in `primaries` it holds, if any.
fn join_excerpts(rendered: &str, primaries: &[String]) -> String {
    let lines: Vec<&str> = rendered.split_inclusive('\n').collect();
    // (header, footer, gutter width, file, location) of every box.
    let mut boxes: Vec<(usize, usize, usize, String, String)> = Vec::new();
    let mut open: Option<(usize, usize, String, String)> = None;
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_end_matches('\n');
        let trimmed = body.trim_start_matches(' ');
        let indent = body.len() - trimmed.len();
        if trimmed.starts_with("╭─") && indent >= 2 {
            let (file, location) = box_location(trimmed);
            open = Some((i, indent - 2, file, location));
        } else if trimmed == "╰────"
            && let Some((header, width, file, location)) = open.take()
        {
            boxes.push((header, i, width, file, location));
        }
    }
    let mut joined_to_next = vec![false; boxes.len()];
    for k in 1..boxes.len() {
        joined_to_next[k - 1] = boxes[k - 1].1 + 1 == boxes[k].0 && boxes[k - 1].3 == boxes[k].3;
    }
    let mut out = String::with_capacity(rendered.len());
    let mut next_line = 0;
    let mut k = 0;
    while k < boxes.len() {
        let group_start = k;
        while joined_to_next[k] {
            k += 1;
        }
        let group = &boxes[group_start..=k];
        k += 1;
        for line in &lines[next_line..group[0].0] {
            out.push_str(line);
        }
        let width = group.iter().map(|b| b.2).max().unwrap_or(0);
        let head = group
            .iter()
            .find(|b| primaries.contains(&b.4))
            .unwrap_or(&group[0]);
        out.push_str(&" ".repeat(width - head.2));
        out.push_str(lines[head.0]);
        for (j, &(header, footer, w, _, _)) in group.iter().enumerate() {
            let pad = " ".repeat(width - w);
            let from = header + 1;
            let to = if j + 1 == group.len() {
                footer
            } else {
                footer - 1
            };
            for line in &lines[from..=to] {
                out.push_str(&pad);
                out.push_str(line);
            }
            if j + 1 < group.len() {
                out.push_str(&format!(" {:>width$} ·\n", "⋮"));
            }
        }
        next_line = group[group.len() - 1].1 + 1;
    }
    for line in &lines[next_line..] {
        out.push_str(line);
    }
    out
}

/// The file a box header `╭─[path:line:col]` names, and `path:line:col`, colours removed.
fn box_location(header: &str) -> (String, String) {
    let mut plain = String::with_capacity(header.len());
    let mut chars = header.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let name = plain
        .trim_start_matches(['╭', '─', '['])
        .trim_end_matches(']');
    let file = match name.rsplitn(3, ':').collect::<Vec<_>>().as_slice() {
        [_, _, path] => path.to_string(),
        _ => name.to_string(),
    };
    (file, name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::{Code, Diagnostic};

    /// The source lines a rendering draws (`  12 │ text`), by number.
    fn drawn_lines(rendered: &str) -> Vec<usize> {
        rendered
            .lines()
            .filter_map(|l| {
                let (number, rest) = l.trim_start().split_once(' ')?;
                rest.starts_with('│').then(|| number.parse().ok())?
            })
            .collect()
    }

    fn span_of(file: &SourceFile, needle: &str, nth: usize) -> Span {
        let start = file
            .text
            .match_indices(needle)
            .nth(nth)
            .map(|(i, _)| i)
            .expect("needle in text");
        Span::new(start, start + needle.len())
    }

    #[test]
    fn twenty_thousand_diagnostics_each_drawn_from_its_own_lines() {
        let n = 20_000;
        let mut text = String::new();
        let mut diags = Vec::new();
        for i in 0..n {
            let start = text.len() + "a -> ".len();
            text.push_str(&format!("a -> b{i} when x\n"));
            let span = Span::new(start, start + format!("b{i}").len());
            diags.push(
                Diagnostic::error(Code::RouteUnknownTarget, format!("unknown `b{i}`"))
                    .label(span, "not declared"),
            );
        }
        let file = SourceFile::new("big.rondo", text);
        // What one diagnostic costs is its excerpt, bounded whatever the file's size: so
        // the whole rendering is linear in the number of diagnostics.
        let mut excerpt_bytes = 0;
        for d in &diags {
            let (excerpt, labels, hidden) = Excerpt::new(&file, &d.labels);
            assert_eq!((labels.len(), hidden.len()), (1, 0));
            assert!(excerpt.lines.len() <= 3, "{} lines", excerpt.lines.len());
            excerpt_bytes += excerpt.text.len();
        }
        assert!(
            excerpt_bytes <= n * 3 * 20,
            "{excerpt_bytes} bytes of excerpts"
        );
        let out = render_human(&file, &diags, false, 100);
        let headers: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("big.rondo:"))
            .collect();
        assert_eq!(headers.len(), n);
        for (i, header) in headers.iter().enumerate() {
            assert_eq!(*header, format!("big.rondo:{}:6", i + 1));
        }
        assert_eq!(out.matches("not declared").count(), n);
    }

    #[test]
    fn a_label_past_column_65535_is_drawn_on_a_cut_line() {
        let text = format!(
            "start -> a\na -> done when{} input.nope\nexit done\n",
            " ".repeat(70_000)
        );
        let file = SourceFile::new("long.rondo", text);
        let span = span_of(&file, "input.nope", 0);
        let d = Diagnostic::error(Code::ExprUnknownInput, "unknown input `nope`")
            .label(span, "not an input");
        let out = render_human(&file, &[d], false, 100);
        assert!(out.starts_with("long.rondo:2:70016\n"), "{out}");
        assert!(out.contains("[long.rondo:2:70016]"), "{out}");
        let line = out
            .lines()
            .find(|l| l.contains("input.nope"))
            .expect("the labelled text is drawn");
        assert!(line.contains(CUT), "{line}");
        assert!(out.contains("╰── not an input"));
        let widest = out.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        assert!(widest < 200, "a line of {widest} characters");
        assert_eq!(drawn_lines(&out), vec![1, 2, 3]);
    }

    #[test]
    fn a_long_label_on_a_long_line_is_cut_both_ways() {
        let long = "x".repeat(100_000);
        let text = format!("a = \"{long}\"\n");
        let file = SourceFile::new("w.rondo", text);
        let d = Diagnostic::error(Code::AttrWrongKind, "too long")
            .label(span_of(&file, &long, 0), "this string");
        let out = render_human(&file, &[d], false, 100);
        assert!(out.lines().all(|l| l.chars().count() < 200), "{out}");
        assert!(out.contains("this string"));
    }

    #[test]
    fn far_apart_labels_are_joined_with_a_mark_and_the_excerpt_stays_short() {
        let text: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
        let file = SourceFile::new("w.rondo", text);
        let mut d = Diagnostic::error(Code::LoopUnbounded, "unbounded loop");
        for (i, line) in [500, 10, 900, 300, 700, 100].iter().enumerate() {
            d = d.label(
                span_of(&file, &format!("line {line}\n"), 0),
                format!("label {i}"),
            );
        }
        let out = render_human(&file, &[d], false, 100);
        let drawn = drawn_lines(&out);
        assert!(drawn.len() <= MAX_LINES, "{drawn:?}\n{out}");
        // The primary label first, then the others in file order while they fit.
        assert_eq!(drawn, vec![9, 10, 11, 99, 100, 101, 499, 500, 501], "{out}");
        assert_eq!(out.matches('⋮').count(), 2, "{out}");
        assert_eq!(out.matches("╭─[").count(), 1, "one box: {out}");
        assert!(
            out.contains("╭─[w.rondo:500:1]"),
            "headed by the primary label: {out}"
        );
        assert!(out.contains("also at lines 300, 700 and 900"), "{out}");
    }

    #[test]
    fn a_label_over_many_lines_is_drawn_on_its_first() {
        let body: String = (0..40).map(|i| format!("  expect x == {i}\n")).collect();
        let text = format!("workflow w {{}}\n\ntest \"t\" {{\n{body}}}\n");
        let file = SourceFile::new("w.rondo", text);
        let start = span_of(&file, "test", 0).start;
        let d = Diagnostic::error(Code::TestDuplicate, "two tests")
            .label(Span::new(start, file.text.len() - 1), "this test");
        let out = render_human(&file, &[d], false, 100);
        assert_eq!(drawn_lines(&out), vec![2, 3, 4], "{out}");
        assert!(out.contains("this test"));
    }

    #[test]
    fn thousands_of_labels_draw_a_few_and_count_the_rest() {
        let text: String = (0..5000).map(|_| "a -> nowhere\n").collect();
        let file = SourceFile::new("w.rondo", text);
        let mut d = Diagnostic::error(Code::RouteUnknownTarget, "`nowhere` is not declared");
        for i in 0..5000 {
            d = d.label(span_of(&file, "nowhere", i), "");
        }
        let out = render_human(&file, &[d], false, 100);
        assert!(drawn_lines(&out).len() <= MAX_LINES, "{out}");
        assert!(out.contains("and 4984 more"), "{out}");
    }

    #[test]
    fn labels_in_a_file_with_crlf_and_multibyte_text_keep_their_columns() {
        let text = "é é\r\nrole x: llm {}\r\n";
        let file = SourceFile::new("w.rondo", text);
        let d = Diagnostic::error(Code::RoleNoPrompt, "no prompt")
            .label(span_of(&file, "x", 0), "here");
        let out = render_human(&file, &[d], false, 100);
        assert!(out.starts_with("w.rondo:2:6\n"), "{out}");
        assert!(out.contains("[w.rondo:2:6]"), "{out}");
        assert!(out.contains(" 2 │ role x: llm {}\n"), "{out}");
    }
}
