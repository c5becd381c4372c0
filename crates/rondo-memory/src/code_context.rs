//! Code-context memory: chunks of source files scored by a decayed referral
//! score and rendered with their enclosing signatures and block headers.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::citation::{Citation, parse_citations};
use crate::paths::{PathError, normalize_workspace_path};
use crate::syntax::{SourceFile, SyntaxCache, join};

/// Weights of the referral score and the display threshold, declared by the workflow.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoreParams {
    /// Weight of an access (the operation opened the chunk).
    pub alpha: f64,
    /// Weight of one reference in the operation's reasoning.
    pub beta: f64,
    /// Decay per operation, in [0, 1].
    pub gamma: f64,
    /// A chunk is rendered when its score is strictly greater than this.
    pub threshold: f64,
}

/// Per-operation activity of a chunk; index `i` is operation `i + 1`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Activity {
    /// 1 if the operation opened the chunk, else 0.
    pub accessed: Vec<u32>,
    /// How many times the operation's thought cited the chunk.
    pub referred: Vec<u32>,
    /// Referral score, recomputed on render (or `update_scores`).
    pub score: f64,
}

/// A labelled part of a source file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Workspace-relative, `/`-separated.
    pub file_path: String,
    /// Dotted names of the enclosing classes (`Outer.Inner`; `f.A` for a class inside function `f`).
    pub class: Option<String>,
    /// Dotted names of the enclosing functions below `class` (`method.helper`).
    pub function: Option<String>,
    /// Render the whole function instead of `lines`.
    pub whole_function: bool,
    /// 1-based line numbers, sorted, without duplicates.
    pub lines: Vec<usize>,
    pub activity: Activity,
}

impl Chunk {
    fn key_matches(&self, path: &str, class: Option<&str>, function: Option<&str>) -> bool {
        self.file_path == path
            && self.class.as_deref() == class
            && self.function.as_deref() == function
    }

    fn add_line(&mut self, line: usize) {
        if let Err(pos) = self.lines.binary_search(&line) {
            self.lines.insert(pos, line);
        }
    }
}

/// S = Σᵢ₌₁..ₘ (α·Aᵢ + β·Rᵢ)·γ^(M−i), M = number of operations. Missing
/// entries (shorter vectors) count as 0.
pub fn referral_score(
    accessed: &[u32],
    referred: &[u32],
    alpha: f64,
    beta: f64,
    gamma: f64,
) -> f64 {
    let m = accessed.len().max(referred.len());
    // Horner form of the sum: each later operation multiplies the past by γ once.
    (0..m).fold(0.0, |s, i| {
        let a = f64::from(accessed.get(i).copied().unwrap_or(0));
        let r = f64::from(referred.get(i).copied().unwrap_or(0));
        s * gamma + alpha * a + beta * r
    })
}

/// Errors of code-context operations. Per-line and per-citation problems are not
/// errors: they are reported as [`Skipped`] items.
#[derive(Debug, Error)]
pub enum CodeContextError {
    #[error("invalid code-context parameters: {0}")]
    InvalidParams(String),
    #[error("no operation in progress: call `begin_operation` before recording activity")]
    NoOperation,
    #[error("invalid path `{path}`: {source}")]
    InvalidPath {
        path: String,
        #[source]
        source: PathError,
    },
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Something left out of an operation or a rendering, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    pub line: Option<usize>,
    pub reason: String,
}

/// Result of [`CodeContext::record_access`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessReport {
    /// Indices (into [`CodeContext::chunks`]) of the chunks the access touched.
    pub chunks: Vec<usize>,
    pub skipped: Vec<Skipped>,
}

/// Result of [`CodeContext::record_citations`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CitationReport {
    /// Citations counted, each with the index of the chunk credited.
    pub counted: Vec<(Citation, usize)>,
    pub skipped: Vec<Skipped>,
}

/// One line of a rendered file, or a gap between non-adjacent lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ViewItem {
    Line { number: usize, text: String },
    Gap,
}

/// The visible part of one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileView {
    pub path: String,
    pub items: Vec<ViewItem>,
}

/// What a template receives to render the code context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeContextView {
    pub files: Vec<FileView>,
    /// Chunks or lines that could not be shown (missing file, line out of range…).
    pub skipped: Vec<Skipped>,
}

/// The code-context memory kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CodeContext {
    params: ScoreParams,
    /// Number of operations begun (M).
    n_operations: usize,
    chunks: Vec<Chunk>,
    #[serde(skip)]
    cache: SyntaxCache,
}

impl PartialEq for CodeContext {
    fn eq(&self, other: &Self) -> bool {
        self.params == other.params
            && self.n_operations == other.n_operations
            && self.chunks == other.chunks
    }
}

impl CodeContext {
    pub fn new(params: ScoreParams) -> Result<CodeContext, CodeContextError> {
        let ScoreParams {
            alpha,
            beta,
            gamma,
            threshold,
        } = params;
        let bad = |what: &str| Err(CodeContextError::InvalidParams(what.to_string()));
        if ![alpha, beta, gamma, threshold]
            .iter()
            .all(|v| v.is_finite())
        {
            return bad("alpha, beta, gamma and threshold must be finite numbers");
        }
        if alpha < 0.0 || beta < 0.0 {
            return bad("alpha and beta must not be negative");
        }
        if !(0.0..=1.0).contains(&gamma) {
            return bad("gamma must be between 0 and 1");
        }
        Ok(CodeContext {
            params,
            n_operations: 0,
            chunks: Vec::new(),
            cache: SyntaxCache::default(),
        })
    }

    pub fn params(&self) -> ScoreParams {
        self.params
    }

    /// Number of operations begun so far (M of the score).
    pub fn n_operations(&self) -> usize {
        self.n_operations
    }

    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// Python parses run by this instance's cache since it was created or restored.
    pub fn parse_count(&self) -> u64 {
        self.cache.parses()
    }

    /// Starts a new operation: every chunk's `accessed` and `referred` grow by a 0.
    /// Returns the 1-based number of the operation.
    pub fn begin_operation(&mut self) -> usize {
        self.n_operations += 1;
        for chunk in &mut self.chunks {
            chunk.activity.accessed.resize(self.n_operations, 0);
            chunk.activity.referred.resize(self.n_operations, 0);
        }
        self.n_operations
    }

    fn current_op(&self) -> Result<usize, CodeContextError> {
        self.n_operations
            .checked_sub(1)
            .ok_or(CodeContextError::NoOperation)
    }

    /// Records that the current operation opened `lines` (1-based) of `path`.
    /// Lines are grouped by their enclosing class/function (one chunk each), merged
    /// into existing chunks or new ones; each touched chunk gets `accessed = 1`.
    /// A chunk whose lines cover a whole function becomes `whole_function`.
    /// Lines outside the file are skipped and reported.
    pub fn record_access(
        &mut self,
        repo_root: &Path,
        path: &str,
        lines: &[usize],
    ) -> Result<AccessReport, CodeContextError> {
        let op = self.current_op()?;
        let path = checked_path(path)?;
        let file = self
            .cache
            .load(repo_root, &path)
            .map_err(|source| CodeContextError::Read {
                path: path.clone(),
                source,
            })?;
        let mut report = AccessReport::default();
        let mut touched: Vec<usize> = Vec::new();
        for &line in lines {
            if line == 0 || line > file.line_count() {
                report
                    .skipped
                    .push(out_of_range(&path, line, file.line_count()));
                continue;
            }
            let idx = chunk_for_line(&mut self.chunks, self.n_operations, &path, file, line);
            self.chunks[idx].add_line(line);
            if !touched.contains(&idx) {
                touched.push(idx);
            }
        }
        for &idx in &touched {
            let chunk = &mut self.chunks[idx];
            *slot(&mut chunk.activity.accessed, op) = 1;
            if let (Some(function), Some(syntax)) = (chunk.function.as_deref(), &file.syntax) {
                let covered = syntax
                    .function_spans(chunk.class.as_deref(), function)
                    .any(|(s, e)| (s + 1..=e + 1).all(|l| chunk.lines.binary_search(&l).is_ok()));
                chunk.whole_function |= covered;
            }
        }
        report.chunks = touched;
        Ok(report)
    }

    /// [`record_access`](Self::record_access) for the range `start..=end`, clamped to the file.
    pub fn record_access_range(
        &mut self,
        repo_root: &Path,
        path: &str,
        start: usize,
        end: usize,
    ) -> Result<AccessReport, CodeContextError> {
        let rel = checked_path(path)?;
        let n = self
            .cache
            .load(repo_root, &rel)
            .map_err(|source| CodeContextError::Read {
                path: rel.clone(),
                source,
            })?
            .line_count();
        let lines: Vec<usize> = (start.max(1)..=end.min(n)).collect();
        let mut report = self.record_access(repo_root, path, &lines)?;
        if start == 0 || end > n || start > end {
            report.skipped.push(Skipped {
                path: rel,
                line: None,
                reason: format!("range {start}-{end} clamped to the file's lines 1-{n}"),
            });
        }
        Ok(report)
    }

    /// Counts the citations `[n](path:line)` of `thought` for the current
    /// operation: each adds 1 to `referred` of the chunk containing the line (a
    /// chunk listing it, or a whole-function chunk spanning it); otherwise the
    /// line joins the chunk of its class/function, created if needed. Citations
    /// of unreadable files or lines outside the file are skipped and reported.
    pub fn record_citations(
        &mut self,
        repo_root: &Path,
        thought: &str,
    ) -> Result<CitationReport, CodeContextError> {
        let op = self.current_op()?;
        let mut report = CitationReport::default();
        for citation in parse_citations(thought) {
            let path = match checked_path(&citation.path) {
                Ok(p) => p,
                Err(e) => {
                    report.skipped.push(Skipped {
                        path: citation.path.clone(),
                        line: Some(citation.line),
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            let file = match self.cache.load(repo_root, &path) {
                Ok(f) => f,
                Err(e) => {
                    report.skipped.push(Skipped {
                        path,
                        line: Some(citation.line),
                        reason: format!("cannot read file: {e}"),
                    });
                    continue;
                }
            };
            let line = citation.line;
            if line == 0 || line > file.line_count() {
                report
                    .skipped
                    .push(out_of_range(&path, line, file.line_count()));
                continue;
            }
            let containing = self.chunks.iter().position(|c| {
                c.file_path == path
                    && (c.lines.binary_search(&line).is_ok()
                        || (c.whole_function && spans_line(file, c, line)))
            });
            let idx = match containing {
                Some(idx) => idx,
                None => {
                    let idx =
                        chunk_for_line(&mut self.chunks, self.n_operations, &path, file, line);
                    self.chunks[idx].add_line(line);
                    idx
                }
            };
            *slot(&mut self.chunks[idx].activity.referred, op) += 1;
            report.counted.push((citation, idx));
        }
        Ok(report)
    }

    /// Recomputes every chunk's score from its activity.
    pub fn update_scores(&mut self) {
        let ScoreParams {
            alpha, beta, gamma, ..
        } = self.params;
        for chunk in &mut self.chunks {
            let a = &chunk.activity;
            chunk.activity.score = referral_score(&a.accessed, &a.referred, alpha, beta, gamma);
        }
    }

    /// Recomputes the scores and returns, file by file (in order of first
    /// appearance), the chunks scoring above the threshold: their lines, whole
    /// functions, and the signature and block-header lines enclosing them, with
    /// gaps between non-adjacent lines. Files are read under `repo_root`.
    pub fn render(&mut self, repo_root: &Path) -> CodeContextView {
        self.update_scores();
        let threshold = self.params.threshold;
        let mut files: Vec<&str> = Vec::new();
        for chunk in self.chunks.iter().filter(|c| c.activity.score > threshold) {
            if !files.contains(&chunk.file_path.as_str()) {
                files.push(&chunk.file_path);
            }
        }
        let mut view = CodeContextView::default();
        for path in files {
            let file = match self.cache.load(repo_root, path) {
                Ok(f) => f,
                Err(e) => {
                    view.skipped.push(Skipped {
                        path: path.to_string(),
                        line: None,
                        reason: format!("cannot read file: {e}"),
                    });
                    continue;
                }
            };
            let chunks = self
                .chunks
                .iter()
                .filter(|c| c.file_path == path && c.activity.score > threshold);
            let items = render_file(file, path, chunks, &mut view.skipped);
            view.files.push(FileView {
                path: path.to_string(),
                items,
            });
        }
        view
    }
}

/// Entry `op` of an activity list, grown with zeros if a hand-edited
/// checkpoint left it shorter than the operation count.
fn slot(list: &mut Vec<u32>, op: usize) -> &mut u32 {
    if list.len() <= op {
        list.resize(op + 1, 0);
    }
    &mut list[op]
}

fn checked_path(path: &str) -> Result<String, CodeContextError> {
    normalize_workspace_path(path, &[]).map_err(|source| CodeContextError::InvalidPath {
        path: path.to_string(),
        source,
    })
}

fn out_of_range(path: &str, line: usize, n: usize) -> Skipped {
    Skipped {
        path: path.to_string(),
        line: Some(line),
        reason: format!("line {line} is outside the file (1-{n})"),
    }
}

fn spans_line(file: &SourceFile, chunk: &Chunk, line: usize) -> bool {
    match (&file.syntax, chunk.function.as_deref()) {
        (Some(syntax), Some(function)) => syntax
            .function_spans(chunk.class.as_deref(), function)
            .any(|(s, e)| (s + 1..=e + 1).contains(&line)),
        _ => false,
    }
}

/// Index of the chunk keyed by the class/function enclosing `line`, created
/// (with zeroed activity for the operations so far) when missing.
fn chunk_for_line(
    chunks: &mut Vec<Chunk>,
    n_ops: usize,
    path: &str,
    file: &SourceFile,
    line: usize,
) -> usize {
    let (class, function) = match &file.syntax {
        Some(syntax) => syntax.key_of(line - 1),
        None => (None, None),
    };
    if let Some(idx) = chunks
        .iter()
        .position(|c| c.key_matches(path, class, function))
    {
        return idx;
    }
    chunks.push(Chunk {
        file_path: path.to_string(),
        class: class.map(str::to_string),
        function: function.map(str::to_string),
        whole_function: false,
        lines: Vec::new(),
        activity: Activity {
            accessed: vec![0; n_ops],
            referred: vec![0; n_ops],
            score: 0.0,
        },
    });
    chunks.len() - 1
}

fn render_file<'a>(
    file: &SourceFile,
    path: &str,
    chunks: impl Iterator<Item = &'a Chunk>,
    skipped: &mut Vec<Skipped>,
) -> Vec<ViewItem> {
    let n = file.line_count();
    // 0-based rows selected by the chunks themselves.
    let mut rows: Vec<usize> = Vec::new();
    for chunk in chunks {
        let spans: Vec<(usize, usize)> = match (&file.syntax, chunk.function.as_deref()) {
            (Some(syntax), Some(function)) if chunk.whole_function => syntax
                .function_spans(chunk.class.as_deref(), function)
                .collect(),
            _ => Vec::new(),
        };
        // A whole function is the function as the file has it now: the line numbers recorded
        // when it was read may belong to other code since an edit.
        if spans.is_empty() {
            for &line in &chunk.lines {
                if line == 0 || line > n {
                    skipped.push(out_of_range(path, line, n));
                } else {
                    rows.push(line - 1);
                }
            }
        }
        if chunk.whole_function {
            if spans.is_empty() {
                skipped.push(Skipped {
                    path: path.to_string(),
                    line: None,
                    reason: format!(
                        "function {} not found; showing the chunk's lines only",
                        join(chunk.class.as_deref(), chunk.function.as_deref())
                            .unwrap_or_else(|| "<module>".into())
                    ),
                });
            }
            for (s, e) in spans {
                rows.extend(s..=e.min(n.saturating_sub(1)));
            }
        }
    }
    if let Some(syntax) = &file.syntax {
        let mut seen = vec![false; syntax.scopes.len()];
        let mut headers = Vec::new();
        let selected: BTreeSet<usize> = rows.iter().copied().collect();
        for row in selected {
            syntax.add_headers(row, &mut seen, &mut headers);
        }
        rows.extend(headers.into_iter().filter(|&r| r < n));
    }
    rows.sort_unstable();
    rows.dedup();
    let mut items = Vec::with_capacity(rows.len() + rows.len() / 4);
    let mut prev: Option<usize> = None;
    for row in rows {
        if prev.is_some_and(|p| row != p + 1) {
            items.push(ViewItem::Gap);
        }
        items.push(ViewItem::Line {
            number: row + 1,
            text: file.line(row).to_string(),
        });
        prev = Some(row);
    }
    items
}
