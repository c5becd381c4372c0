//! tree-sitter-python analysis: the scopes (classes, functions, block statements)
//! enclosing each line, their header rows, and a per-path cache keyed by content hash.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use tree_sitter::{Node, Parser};

/// What a scope is; only classes and functions name the chunk a line belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScopeKind {
    Class,
    Function,
    Block,
}

/// One class, function or block statement. Rows are 0-based and inclusive.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub kind: ScopeKind,
    pub parent: Option<u32>,
    /// First row (the first decorator for decorated definitions) to the row of the `:`.
    pub header: (usize, usize),
    /// Whole extent, decorators included.
    pub span: (usize, usize),
    /// The (class, function) key of the lines directly inside this scope.
    pub class: Option<String>,
    pub function: Option<String>,
}

const NO_SCOPE: u32 = u32::MAX;

/// Scope index of a parsed Python file.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileSyntax {
    pub scopes: Vec<Scope>,
    /// Innermost scope of each row, `NO_SCOPE` at module level.
    innermost: Vec<u32>,
}

impl FileSyntax {
    pub fn parse(text: &str, n_rows: usize) -> Option<FileSyntax> {
        let mut parser = Parser::new();
        parser
            .set_language(&tree_sitter_python::LANGUAGE.into())
            .ok()?;
        let tree = parser.parse(text, None)?;
        let mut syntax = FileSyntax {
            scopes: Vec::new(),
            innermost: vec![NO_SCOPE; n_rows],
        };
        // Iterative walk: deeply nested input must not overflow the stack.
        let mut cursor = tree.walk();
        let mut open: Vec<(usize, u32)> = Vec::new();
        'walk: loop {
            let node = cursor.node();
            if let Some(kind) = classify(node.kind()) {
                let parent = open.last().map(|&(_, idx)| idx);
                let idx = syntax.push_scope(node, kind, parent, text.as_bytes());
                open.push((node.id(), idx));
            }
            // Expressions and simple statements hold no scopes: skip their subtrees.
            if holds_scopes(node.kind()) && cursor.goto_first_child() {
                continue;
            }
            loop {
                if open.last().is_some_and(|&(id, _)| id == cursor.node().id()) {
                    open.pop();
                }
                if cursor.goto_next_sibling() {
                    continue 'walk;
                }
                if !cursor.goto_parent() {
                    break 'walk;
                }
            }
        }
        // Parents precede children in `scopes`, so inner scopes overwrite outer ones.
        for (idx, scope) in syntax.scopes.iter().enumerate() {
            let end = scope.span.1.min(n_rows.saturating_sub(1));
            for row in scope.span.0..=end {
                if row < n_rows {
                    syntax.innermost[row] = idx as u32;
                }
            }
        }
        Some(syntax)
    }

    fn push_scope(&mut self, node: Node, kind: ScopeKind, parent: Option<u32>, src: &[u8]) -> u32 {
        let outer = node
            .parent()
            .filter(|p| p.kind() == "decorated_definition" && kind != ScopeKind::Block)
            .unwrap_or(node);
        let start = outer.start_position().row;
        let end = last_row(node).max(start);
        let colon_row = {
            let mut c = node.walk();
            node.children(&mut c)
                .find(|child| child.kind() == ":")
                .map(|child| child.start_position().row)
        };
        let header_end = colon_row.unwrap_or(start).clamp(start, end);
        let (parent_class, parent_function) = match parent {
            Some(p) => {
                let p = &self.scopes[p as usize];
                (p.class.clone(), p.function.clone())
            }
            None => (None, None),
        };
        let name = node
            .child_by_field_name("name")
            .map(|n| n.utf8_text(src).unwrap_or("?").to_string());
        let (class, function) = match kind {
            ScopeKind::Block => (parent_class, parent_function),
            ScopeKind::Class | ScopeKind::Function => {
                let name = name.unwrap_or_else(|| "?".to_string());
                if kind == ScopeKind::Class {
                    // A class nested in functions is qualified by them: `f.A`.
                    let prefix = join(parent_class.as_deref(), parent_function.as_deref());
                    (Some(join_name(prefix.as_deref(), &name)), None)
                } else {
                    (
                        parent_class,
                        Some(join_name(parent_function.as_deref(), &name)),
                    )
                }
            }
        };
        self.scopes.push(Scope {
            kind,
            parent,
            header: (start, header_end),
            span: (start, end),
            class,
            function,
        });
        (self.scopes.len() - 1) as u32
    }

    fn innermost(&self, row: usize) -> Option<u32> {
        self.innermost.get(row).copied().filter(|&s| s != NO_SCOPE)
    }

    /// The (class, function) key of the chunk that `row` belongs to.
    pub fn key_of(&self, row: usize) -> (Option<&str>, Option<&str>) {
        match self.innermost(row) {
            Some(s) => {
                let s = &self.scopes[s as usize];
                (s.class.as_deref(), s.function.as_deref())
            }
            None => (None, None),
        }
    }

    /// Adds to `rows` the header rows of every scope enclosing `row`. `seen`
    /// (one flag per scope) stops the climb at scopes already handled.
    pub fn add_headers(&self, row: usize, seen: &mut [bool], rows: &mut Vec<usize>) {
        let mut cur = self.innermost(row);
        while let Some(s) = cur {
            if std::mem::replace(&mut seen[s as usize], true) {
                break;
            }
            let scope = &self.scopes[s as usize];
            rows.extend(scope.header.0..=scope.header.1);
            cur = scope.parent;
        }
    }

    /// Spans of the functions keyed (class, function); several when a name is
    /// defined more than once (property getter and setter).
    pub fn function_spans<'a>(
        &'a self,
        class: Option<&'a str>,
        function: &'a str,
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.scopes
            .iter()
            .filter(move |s| {
                s.kind == ScopeKind::Function
                    && s.function.as_deref() == Some(function)
                    && s.class.as_deref() == class
            })
            .map(|s| s.span)
    }
}

fn classify(kind: &str) -> Option<ScopeKind> {
    match kind {
        "class_definition" => Some(ScopeKind::Class),
        "function_definition" => Some(ScopeKind::Function),
        "if_statement"
        | "elif_clause"
        | "else_clause"
        | "for_statement"
        | "while_statement"
        | "try_statement"
        | "except_clause"
        | "except_group_clause"
        | "finally_clause"
        | "with_statement"
        | "match_statement"
        | "case_clause" => Some(ScopeKind::Block),
        _ => None,
    }
}

fn holds_scopes(kind: &str) -> bool {
    matches!(kind, "module" | "block" | "decorated_definition" | "ERROR")
        || classify(kind).is_some()
}

/// Last row a node occupies; a node ending at column 0 ends on the row before.
fn last_row(node: Node) -> usize {
    let start = node.start_position();
    let end = node.end_position();
    if end.column == 0 && end.row > start.row {
        end.row - 1
    } else {
        end.row
    }
}

/// `class.function`, or whichever of the two is present.
pub(crate) fn join(class: Option<&str>, function: Option<&str>) -> Option<String> {
    match (class, function) {
        (Some(c), Some(f)) => Some(format!("{c}.{f}")),
        (Some(c), None) => Some(c.to_string()),
        (None, Some(f)) => Some(f.to_string()),
        (None, None) => None,
    }
}

fn join_name(prefix: Option<&str>, name: &str) -> String {
    match prefix {
        Some(p) => format!("{p}.{name}"),
        None => name.to_string(),
    }
}

/// A file as read from disk, split into lines, with its scope index when it is Python.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    hash: u64,
    len: usize,
    pub text: String,
    /// Byte range of each line, without the line terminator.
    lines: Vec<(usize, usize)>,
    pub syntax: Option<FileSyntax>,
}

impl SourceFile {
    fn new(bytes: &[u8], hash: u64, python: bool) -> SourceFile {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let mut lines = Vec::new();
        let mut start = 0;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                let end = if i > start && text.as_bytes()[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                };
                lines.push((start, end));
                start = i + 1;
            }
        }
        if start < text.len() {
            lines.push((start, text.len()));
        }
        let syntax = if python {
            FileSyntax::parse(&text, lines.len())
        } else {
            None
        };
        SourceFile {
            hash,
            len: bytes.len(),
            text,
            lines,
            syntax,
        }
    }

    pub fn line_count(&self) -> usize {
        self.lines.len()
    }

    /// Text of 0-based `row`.
    pub fn line(&self, row: usize) -> &str {
        self.lines
            .get(row)
            .map(|&(s, e)| &self.text[s..e])
            .unwrap_or("")
    }
}

/// Parsed files by workspace-relative path; an entry is reused while the file's
/// content hash is unchanged. Not persisted: after a checkpoint restore it is
/// refilled from the process-wide cache or by parsing again.
#[derive(Clone, Default)]
pub(crate) struct SyntaxCache {
    files: HashMap<String, Arc<SourceFile>>,
    parses: u64,
}

impl std::fmt::Debug for SyntaxCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyntaxCache")
            .field("files", &self.files.len())
            .field("parses", &self.parses)
            .finish()
    }
}

/// Process-wide cache by absolute path, shared by all instances: a code context
/// restored from a checkpoint, or a copy rendered for one view, starts with an
/// empty cache of its own. Bounded by total source size; cleared when full.
static SHARED: LazyLock<Mutex<SharedCache>> = LazyLock::new(Mutex::default);
const SHARED_MAX_BYTES: usize = 64 << 20;

#[derive(Default)]
struct SharedCache {
    files: HashMap<PathBuf, Arc<SourceFile>>,
    bytes: usize,
}

impl SyntaxCache {
    /// Reads `root/rel` and returns it parsed, from a cache when unchanged.
    /// The read is confined to `root`: a symbolic link out of it (or into `.rondo/`) fails.
    pub fn load(&mut self, root: &Path, rel: &str) -> std::io::Result<&SourceFile> {
        let full = root.join(rel);
        let bytes = rondo_workspace::Workspace::open(root)?.read(rel)?;
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        let hash = hasher.finish();
        let fresh = |f: &SourceFile| f.hash == hash && f.len == bytes.len();
        if !self.files.get(rel).is_some_and(|f| fresh(f)) {
            let shared = SHARED
                .lock()
                .ok()
                .and_then(|c| c.files.get(&full).filter(|f| fresh(f)).cloned());
            let file = match shared {
                Some(file) => file,
                None => {
                    let python = is_python(rel);
                    self.parses += u64::from(python);
                    let file = Arc::new(SourceFile::new(&bytes, hash, python));
                    if let Ok(mut cache) = SHARED.lock() {
                        if cache.bytes + bytes.len() > SHARED_MAX_BYTES {
                            cache.files.clear();
                            cache.bytes = 0;
                        }
                        cache.bytes += bytes.len();
                        if let Some(old) = cache.files.insert(full, Arc::clone(&file)) {
                            cache.bytes = cache.bytes.saturating_sub(old.len);
                        }
                    }
                    file
                }
            };
            self.files.insert(rel.to_string(), file);
        }
        Ok(&self.files[rel])
    }

    /// How many Python parses this cache has run (tests check reuse with it).
    pub fn parses(&self) -> u64 {
        self.parses
    }
}

fn is_python(path: &str) -> bool {
    [".py", ".pyi", ".pyw"]
        .iter()
        .any(|ext| path.ends_with(ext))
}
