//! One workflow as the editor has it: parsed, compiled and checked by the same pipeline
//! as `rondo check` (so the same diagnostics, codes and help), with the index of its names
//! and the prompt templates it renders.
//!
//! A template open in the editor may differ from the file on disk. The checker reads
//! templates from the prompts folder, so the workflow is checked against a copy of that
//! folder holding the editor's text, and what the diagnostics say of the copy is said of
//! the real files.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::check::{self, CheckOptions, Summary};
use crate::compile::{self, RoleKind, Workflow};
use crate::diagnostics::Diagnostic;
use crate::source::{SourceFile, Span};
use crate::syntax::Ast;

use super::index::{Index, Kind, Occurrence};
use super::position::LineIndex;
use super::tera;

/// A prompt template the workflow renders (directly or through another template), or the
/// scripted provider's reply set (`script = "..."`), whose keys are role names.
pub struct Template {
    pub path: PathBuf,
    pub text: Arc<str>,
    pub lines: LineIndex,
    pub reads: Vec<tera::Read>,
    /// The names it reads and the templates it names, as occurrences.
    pub occurrences: Vec<Occurrence>,
}

pub struct Analysis {
    pub file: SourceFile,
    pub lines: LineIndex,
    pub ast: Ast,
    pub workflow: Workflow,
    /// Sorted as `rondo check` prints them.
    pub diagnostics: Vec<Diagnostic>,
    pub has_errors: bool,
    pub syntax_errors: bool,
    pub summary: Summary,
    /// Built on first use: diagnostics are published before them.
    index: OnceLock<Index>,
    templates: OnceLock<Vec<Template>>,
    /// The proven worst case in tokens and money, made on the first hover that shows it.
    cost: OnceLock<crate::check::cost::CostReport>,
    /// The editor's text of the open templates when the workflow was checked.
    open: HashMap<PathBuf, String>,
}

/// At most this many templates are read for the index (the checker's own bound).
const MAX_TEMPLATES: usize = 1000;

impl Analysis {
    /// `open` holds the editor's text of open files (absolute, normalised paths).
    pub fn new(
        path: &Path,
        text: &str,
        open: &HashMap<PathBuf, String>,
        options: &CheckOptions,
        overlays: &Overlays,
    ) -> Analysis {
        let file = SourceFile::new(path, text);
        let (ast, mut workflow, mut diagnostics) = compile::load_keeping_ast(&file);
        let syntax_errors = diagnostics
            .iter()
            .any(|d| d.code.as_str().starts_with("rondo::syntax::"));
        let prompts_dir = workflow.prompts_dir.clone();
        let copy = overlays.prepare(&normalize(&prompts_dir), open);
        if let Some(copy) = &copy {
            workflow.prompts_dir = copy.clone();
        }
        // What `check::load` does, the prompts folder aside.
        let (more, summary) = check::check(&workflow, diagnostics.has_errors(), options);
        diagnostics.extend(more);
        workflow.prompts_dir = prompts_dir;
        let mut sorted = diagnostics.sorted();
        if let Some(copy) = &copy {
            for d in &mut sorted {
                unmap(d, copy, &normalize(&workflow.prompts_dir));
            }
        }
        let open = open
            .iter()
            .filter(|(p, _)| p.starts_with(normalize(&workflow.prompts_dir)))
            .map(|(p, t)| (p.clone(), t.clone()))
            .collect();
        Analysis {
            lines: LineIndex::new(text),
            has_errors: diagnostics.has_errors(),
            syntax_errors,
            file,
            ast,
            workflow,
            diagnostics: sorted,
            summary,
            index: OnceLock::new(),
            templates: OnceLock::new(),
            cost: OnceLock::new(),
            open,
        }
    }

    pub fn index(&self) -> &Index {
        self.index
            .get_or_init(|| Index::build(&self.ast, &self.file.text))
    }

    /// The templates the workflow renders, with the editor's text of those open, and its
    /// reply script.
    pub fn templates(&self) -> &[Template] {
        self.templates.get_or_init(|| {
            let mut out = templates(&self.workflow, &self.open);
            out.extend(self.workflow.script.as_deref().and_then(script));
            out
        })
    }

    /// The worst case of a run (`rondo check --cost`); meaningful only without errors.
    pub fn cost(&self) -> &crate::check::cost::CostReport {
        self.cost
            .get_or_init(|| crate::check::cost::analyse(&self.workflow))
    }

    pub fn text(&self) -> &str {
        &self.file.text
    }

    pub fn template(&self, path: &Path) -> Option<&Template> {
        self.templates().iter().find(|t| t.path == path)
    }

    /// The prompts folder, absolute and normalised.
    pub fn prompts_dir(&self) -> PathBuf {
        normalize(&self.workflow.prompts_dir)
    }
}

/// The templates the llm roles name and those they include, extend or import, with the
/// editor's text where the file is open.
fn templates(workflow: &Workflow, open: &HashMap<PathBuf, String>) -> Vec<Template> {
    let dir = normalize(&workflow.prompts_dir);
    let mut queue: Vec<String> = Vec::new();
    for (_, role) in workflow.roles() {
        if let RoleKind::Llm(l) = &role.kind {
            queue.extend(
                l.system
                    .iter()
                    .chain(l.prompt.iter())
                    .map(|p| p.to_string_lossy().replace('\\', "/")),
            );
        }
    }
    queue.reverse();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    while let Some(name) = queue.pop() {
        if name.is_empty() || !seen.insert(name.clone()) || seen.len() > MAX_TEMPLATES {
            continue;
        }
        let path = normalize(&dir.join(&name));
        let text: Arc<str> = match open.get(&path) {
            Some(t) => Arc::from(t.as_str()),
            None => match crate::source::read_regular(&path, crate::prompt::MAX_TEMPLATE_BYTES) {
                Ok(t) => Arc::from(t),
                Err(_) => continue,
            },
        };
        let reads = tera::reads(&text);
        let named = tera::named(&text);
        let mut occurrences = Vec::new();
        for read in &reads {
            occurrences.extend(read_occurrence(read));
        }
        for n in &named {
            queue.push(n.name.clone());
            occurrences.push(Occurrence {
                kind: Kind::Template,
                name: n.name.clone(),
                span: n.span,
                def: false,
            });
        }
        occurrences.sort_by_key(|o| o.span.start);
        out.push(Template {
            path,
            lines: LineIndex::new(&text),
            text,
            reads,
            occurrences,
        });
    }
    out
}

/// The reply script: the role each reply set is for (`replies:` then `  ROLE: ...`).
fn script(path: &Path) -> Option<Template> {
    let path = normalize(path);
    let text = crate::source::read_regular(&path, crate::source::MAX_SOURCE_BYTES).ok()?;
    let mut occurrences = Vec::new();
    let mut in_replies = false;
    let mut indent = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let content = line.trim_end();
        let body = content.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let depth = content.len() - body.len();
        if depth == 0 {
            in_replies = body.starts_with("replies:");
            indent = None;
            continue;
        }
        if !in_replies || *indent.get_or_insert(depth) != depth {
            continue;
        }
        let Some((key, _)) = body.split_once(':') else {
            continue;
        };
        let name = key.trim_matches(['"', '\'']);
        let offset = start + depth + key.find(name).unwrap_or(0);
        occurrences.push(Occurrence {
            kind: Kind::Node,
            name: name.to_string(),
            span: Span::new(offset, offset + name.len()),
            def: false,
        });
    }
    Some(Template {
        path,
        lines: LineIndex::new(&text),
        text: Arc::from(text),
        reads: Vec::new(),
        occurrences,
    })
}

/// What a path read of a template names: an input, a memory, or a role.
pub fn read_occurrence(read: &tera::Read) -> Option<Occurrence> {
    let (root, root_span) = read.parts.first()?;
    let (kind, (name, span)) = match root.as_str() {
        "input" => (Kind::Input, read.parts.get(1)?),
        "memory" => (Kind::Memory, read.parts.get(1)?),
        r if super::index::BUILTIN_ROOTS.contains(&r) || TEMPLATE_ROOTS.contains(&r) => {
            return None;
        }
        _ => (Kind::Node, &(root.clone(), *root_span)),
    };
    Some(Occurrence {
        kind,
        name: name.clone(),
        span: *span,
        def: false,
    })
}

/// Variables every prompt has besides those of expressions.
const TEMPLATE_ROOTS: &[&str] = &["tools", "last_error", "demos", "role"];

/// `a/b/../c` as `a/c`, and relative to the current folder made absolute.
pub fn normalize(path: &Path) -> PathBuf {
    let absolute;
    let path = if path.is_absolute() {
        path
    } else {
        absolute = std::env::current_dir().unwrap_or_default().join(path);
        &absolute
    };
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// A diagnostic about the copy of the prompts folder, said of the real folder.
fn unmap(d: &mut Diagnostic, copy: &Path, real: &Path) {
    let (from, to) = (copy.display().to_string(), real.display().to_string());
    let fix = |s: &mut String| {
        if s.contains(&from) {
            *s = s.replace(&from, &to);
        }
    };
    fix(&mut d.message);
    if let Some(h) = &mut d.help {
        fix(h);
    }
    for l in &mut d.labels {
        fix(&mut l.text);
    }
    if let Some(e) = &mut d.external {
        if let Ok(rest) = e.path.strip_prefix(copy) {
            e.path = real.join(rest);
        }
        fix(&mut e.label);
        for l in &mut e.also {
            fix(&mut l.text);
        }
    }
}

/// Copies of prompts folders with the editor's text of their open templates, in one
/// private temporary folder removed when the server ends.
pub struct Overlays {
    /// Made on first use, new and private (`None`: it could not be made).
    root: OnceLock<Option<PathBuf>>,
}

/// Files copied into one overlay at most; a larger prompts folder is checked from disk.
const MAX_COPIED: usize = 2000;

impl Overlays {
    pub fn new() -> Overlays {
        Overlays {
            root: OnceLock::new(),
        }
    }

    /// A folder this process made, readable by its user only: never one that was there
    /// already (another user's, or a link planted to redirect the copies).
    fn root(&self) -> Option<&Path> {
        self.root
            .get_or_init(|| {
                use std::os::unix::fs::DirBuilderExt;
                let base = std::env::temp_dir();
                (0..100).find_map(|i| {
                    let dir = base.join(format!("rondo-lsp-{}-{i}", std::process::id()));
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&dir)
                        .ok()
                        .map(|()| dir)
                })
            })
            .as_deref()
    }

    /// A copy of `dir` with the open templates in it, or `None` when none of them is in
    /// `dir` (the folder itself is then read, as `rondo check` reads it).
    fn prepare(&self, dir: &Path, open: &HashMap<PathBuf, String>) -> Option<PathBuf> {
        let inside: Vec<(&Path, &String)> = open
            .iter()
            .filter_map(|(p, t)| p.strip_prefix(dir).ok().map(|rel| (rel, t)))
            .filter(|(rel, _)| !rel.as_os_str().is_empty())
            .collect();
        if inside.is_empty() {
            return None;
        }
        let name = {
            use sha2::Digest;
            hex::encode(&sha2::Sha256::digest(dir.as_os_str().as_encoded_bytes())[..8])
        };
        let copy = self.root()?.join(name);
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir_all(&copy).ok()?;
        let mut budget = MAX_COPIED;
        copy_tree(dir, &copy, &mut budget, 0).ok()?;
        for (rel, text) in inside {
            let to = copy.join(rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).ok()?;
            }
            std::fs::write(&to, text).ok()?;
        }
        Some(copy)
    }
}

impl Default for Overlays {
    fn default() -> Self {
        Overlays::new()
    }
}

impl Drop for Overlays {
    fn drop(&mut self) {
        if let Some(Some(root)) = self.root.get() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// Copies regular files and folders (no symbolic link followed), bounded in count and depth.
fn copy_tree(from: &Path, to: &Path, budget: &mut usize, depth: usize) -> std::io::Result<()> {
    if depth > 16 {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return Err(std::io::Error::other("too many files"));
        }
        *budget -= 1;
        let Ok(mut kind) = entry.file_type() else {
            continue;
        };
        // A linked file is read through its link, as the checker reads it; a linked
        // folder is not followed (it could loop).
        if kind.is_symlink() {
            match std::fs::metadata(entry.path()) {
                Ok(m) if m.is_file() => kind = m.file_type(),
                _ => continue,
            }
        }
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target, budget, depth + 1)?;
        } else if kind.is_file() {
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            if size <= crate::prompt::MAX_TEMPLATE_BYTES {
                std::fs::copy(entry.path(), &target)?;
            }
        }
    }
    Ok(())
}

/// The text of a span, empty when the span is not in the text.
pub fn span_text(text: &str, span: Span) -> &str {
    text.get(span.start..span.end).unwrap_or("")
}
