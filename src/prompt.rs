//! Prompt templates (tera): loading a workflow's prompt folder, the filters Rondo adds,
//! and finding which variables a template uses so `check` can prove they exist.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tera::ast::{Expr, ExprVal, Node};
use tera::{Tera, Value};

/// All templates of one prompts folder, parsed once.
pub struct Prompts {
    pub tera: Tera,
    pub dir: PathBuf,
    /// The names it was asked for, sorted once each: what [`Self::serves`] compares.
    named: Vec<String>,
    /// Files that failed to parse, with the reason.
    pub errors: HashMap<String, TemplateError>,
    /// The text of each file that parsed, for diagnostics that point into it.
    pub sources: HashMap<String, Arc<str>>,
}

/// Why a template cannot be used.
#[derive(Debug, Clone)]
pub struct TemplateError {
    pub reason: String,
    /// The template's text and the byte the reason points at, when it points somewhere.
    pub at: Option<(Arc<str>, usize)>,
    /// Its text is not UTF-8 (`text` is then the text read lossily).
    pub not_utf8: bool,
    /// The block tag left open where tera stopped, when that is why it stopped.
    pub unclosed: Option<Box<Unclosed>>,
}

/// A block tag (`{% for %}`, `{% if %}`, ...) without its end tag: tera's own words for it
/// ("expected an `else` tag, an endfor tag ...") name neither the block nor where it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unclosed {
    /// `for`, `if`, `block`, `macro` or `filter`.
    pub block: String,
    /// The opening tag's bytes in the text.
    pub opened: (usize, usize),
    /// The end tag of another block met first (`endif` and its bytes); `None` when the text
    /// ended first.
    pub instead: Option<(String, (usize, usize))>,
}

impl TemplateError {
    fn new(reason: impl Into<String>) -> Self {
        TemplateError {
            reason: reason.into(),
            at: None,
            not_utf8: false,
            unclosed: None,
        }
    }

    /// A tera error about `text`, at the line and column tera names.
    fn tera(error: &tera::Error, text: &str) -> Self {
        let (at, mut reason) = tera_error_at(&crate::compile::tera_error_text(error), text);
        if let Some(tag) = at.and_then(|at| stray_end(text, at)) {
            reason = format!(
                "`{{% end{tag} %}}` ends no `{{% {tag} %}}`: remove it, or open the block it ends"
            );
        }
        TemplateError {
            reason,
            at: at.map(|at| (Arc::from(text), at)),
            not_utf8: false,
            unclosed: at.and_then(|at| unclosed_block(text, at)).map(Box::new),
        }
    }
}

const BLOCKS: &[&str] = &["if", "for", "block", "macro", "filter"];

/// The block left open at `at`, where parsing stopped: the innermost one when the text
/// ends there, or when the end tag of another block starts there.
pub(crate) fn unclosed_block(text: &str, at: usize) -> Option<Unclosed> {
    let mut open: Vec<(&str, (usize, usize))> = Vec::new();
    // A tag left unterminated is the fault then, not the blocks it leaves open.
    let (tags, whole) = block_tags(text);
    if !whole {
        return None;
    }
    for (word, span) in tags {
        let end_of = word.strip_prefix("end");
        if span.0 <= at && at < span.1 {
            let (block, opened) = *open.last()?;
            return match end_of {
                Some(other) if other != block && BLOCKS.contains(&other) => Some(Unclosed {
                    block: block.to_string(),
                    opened,
                    instead: Some((word.to_string(), span)),
                }),
                _ => None,
            };
        }
        if span.0 > at {
            return None;
        }
        if BLOCKS.contains(&word) {
            open.push((word, span));
        } else if end_of.is_some_and(|b| open.last().is_some_and(|(o, _)| *o == b)) {
            open.pop();
        }
    }
    let (block, opened) = *open.last()?;
    (at >= text.trim_end().len()).then(|| Unclosed {
        block: block.to_string(),
        opened,
        instead: None,
    })
}

/// A tag's first word and its bytes.
type Tag<'t> = (&'t str, (usize, usize));

/// The block whose end tag starts at `at` while no block of its kind is open.
fn stray_end(text: &str, at: usize) -> Option<&str> {
    let (tags, _) = block_tags(text);
    let mut open: Vec<&str> = Vec::new();
    for (word, span) in tags {
        let end_of = word.strip_prefix("end").filter(|b| BLOCKS.contains(b));
        if span.0 == at {
            return end_of.filter(|b| !open.contains(b));
        }
        if BLOCKS.contains(&word) {
            open.push(word);
        } else if let Some(b) = end_of
            && open.last() == Some(&b)
        {
            open.pop();
        }
    }
    None
}

/// The first word of every `{% ... %}` tag and the tag's bytes, outside comments and
/// `{% raw %}` blocks; and whether every tag is terminated.
fn block_tags(text: &str) -> (Vec<Tag<'_>>, bool) {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find('{').map(|i| from + i) {
        let close = match text.as_bytes().get(i + 1) {
            Some(b'%') => "%}",
            Some(b'{') => "}}",
            Some(b'#') => "#}",
            _ => {
                from = i + 1;
                continue;
            }
        };
        let Some(end) = text[i + 2..].find(close).map(|e| i + 2 + e + 2) else {
            return (out, false);
        };
        from = end;
        if close != "%}" {
            continue;
        }
        let body = &text[i + 2..end - 2];
        let word = body
            .trim_start_matches('-')
            .split_whitespace()
            .next()
            .unwrap_or("");
        if word == "raw" {
            from = text[end..].find("endraw").map_or(text.len(), |j| end + j);
            continue;
        }
        out.push((word, (i, end)));
    }
    (out, true)
}

/// Where in `text` a tera error points (from its `--> line:col`), and its reason.
pub(crate) fn tera_error_at(error: &str, text: &str) -> (Option<usize>, String) {
    let reason = error
        .rsplit_once("= ")
        .map_or(error, |(_, r)| r)
        .trim()
        .to_string();
    let at = error.split_once("--> ").and_then(|(_, rest)| {
        let (line, rest) = rest.split_once(':')?;
        let col: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let (line, col) = (
            line.trim().parse::<usize>().ok()?,
            col.parse::<usize>().ok()?,
        );
        let start = text
            .split_inclusive('\n')
            .take(line.checked_sub(1)?)
            .map(str::len)
            .sum::<usize>();
        let line_text = text[start..].lines().next().unwrap_or("");
        let offset = line_text
            .char_indices()
            .nth(col.checked_sub(1)?)
            .map_or(line_text.len(), |(i, _)| i);
        // At the end of the text (an unclosed tag): right after its last word, not on
        // the empty line past it.
        Some((start + offset).min(text.trim_end().len()))
    });
    (at, reason)
}

/// A template file larger than this is refused.
pub const MAX_TEMPLATE_BYTES: u64 = 1 << 20;
/// Templates read for one workflow at most: the named ones and what they pull in.
const MAX_TEMPLATES: usize = 1000;
/// Blocks (`{% if %}`, `{% for %}`, ...) plus brackets nested deeper than this are refused
/// before tera parses the template: its parser and ours recurse once per level.
const MAX_TEMPLATE_DEPTH: usize = 64;
/// Entries looked at when listing the folder for "did you mean" suggestions.
const MAX_LISTED: usize = 10_000;
/// The most one rendering, or one filter's result within it, may hold. Widths, counts and
/// separators may come from replies: a bound keeps a wild one from allocating gigabytes.
pub const MAX_RENDERED: usize = 16 << 20;
/// `pad(width=N)` pads to this many characters at most.
pub const MAX_PAD_WIDTH: usize = 4096;
/// `range(...)` yields this many numbers at most.
pub const MAX_RANGE: usize = 100_000;

impl Prompts {
    /// The templates a workflow's llm roles name, and what they include, extend or import.
    pub fn for_workflow(workflow: &crate::compile::Workflow) -> Prompts {
        Self::load_named(&workflow.prompts_dir, &Self::names_of(workflow))
    }

    /// No templates: what inline strings are checked against.
    pub fn empty(dir: &Path) -> Prompts {
        Prompts {
            tera: Tera::default(),
            dir: dir.to_path_buf(),
            named: Vec::new(),
            errors: HashMap::new(),
            sources: HashMap::new(),
        }
    }

    /// Whether these are the templates [`Self::for_workflow`] would load: the same folder
    /// and names (`check` starts reading them before the workflow is compiled).
    pub fn serves(&self, workflow: &crate::compile::Workflow) -> bool {
        self.dir == workflow.prompts_dir && self.named == distinct(&Self::names_of(workflow))
    }

    fn names_of(workflow: &crate::compile::Workflow) -> Vec<String> {
        let mut names = Vec::new();
        for (_, role) in workflow.roles() {
            if let crate::compile::RoleKind::Llm(l) = &role.kind {
                names.extend(
                    l.system
                        .iter()
                        .chain(l.prompt.iter())
                        .map(|p| p.to_string_lossy().replace('\\', "/"))
                        .filter(|n| !n.is_empty()),
                );
            }
        }
        names
    }

    /// Only the named templates and what they include, extend or import: no other file
    /// is read. A file that is not a regular file, is too large or nests too deeply is
    /// an entry in `errors`, never a hang or a crash.
    pub fn load_named(dir: &Path, names: &[String]) -> Prompts {
        let ready = parse_named(dir, &distinct(names));
        Self::load_read(dir, names, ready)
    }

    /// As [`Self::load_named`], given templates of `dir` already read and parsed.
    pub fn load_read(dir: &Path, names: &[String], mut ready: HashMap<String, Read>) -> Prompts {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        register(&mut tera);
        let mut prompts = Prompts {
            tera,
            dir: dir.to_path_buf(),
            named: distinct(names),
            errors: HashMap::new(),
            sources: HashMap::new(),
        };
        // Parsed first, then added parents and imported macro files first: tera refuses a
        // template whose parent it does not have yet.
        let mut parsed: Vec<(String, String, tera::Template, Vec<String>)> = Vec::new();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut queue: Vec<String> = names.to_vec();
        while let Some(name) = queue.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            if seen.len() > MAX_TEMPLATES {
                prompts.errors.insert(
                    name,
                    TemplateError::new(format!("more than {MAX_TEMPLATES} templates are included")),
                );
                continue;
            }
            // A missing file is not an error here: `has` says so, and check reports it.
            if !dir.join(&name).exists() && std::fs::symlink_metadata(dir.join(&name)).is_err() {
                continue;
            }
            let read = ready
                .remove(&name)
                .unwrap_or_else(|| read_template(dir, &name));
            match read {
                Ok((text, template)) => {
                    let mut locals = Vec::new();
                    let mut vars = BTreeSet::new();
                    let mut includes = Vec::new();
                    walk_nodes(&template.ast, &mut locals, &mut vars, &mut includes);
                    let mut needs: Vec<String> = template.parent.iter().cloned().collect();
                    needs.extend(template.imported_macro_files.iter().map(|(f, _)| f.clone()));
                    queue.extend(includes);
                    queue.extend(needs.iter().cloned());
                    parsed.push((name, text, template, needs));
                }
                Err(e) => {
                    prompts.errors.insert(name, e);
                }
            }
        }
        loop {
            let before = parsed.len();
            let mut waiting = Vec::new();
            for (name, text, template, needs) in parsed {
                if needs.iter().all(|n| prompts.has(n)) {
                    // What `add_raw_template` does, without parsing the text a second time.
                    prompts.tera.templates.insert(name.clone(), template);
                    let added = prompts
                        .tera
                        .build_inheritance_chains()
                        .and_then(|()| prompts.tera.check_macro_files());
                    match added {
                        Ok(()) => {
                            prompts.sources.insert(name, Arc::from(text));
                        }
                        Err(e) => {
                            prompts.errors.insert(name, TemplateError::tera(&e, &text));
                        }
                    }
                } else {
                    waiting.push((name, text, template, needs));
                }
            }
            parsed = waiting;
            if parsed.is_empty() || parsed.len() == before {
                break;
            }
        }
        for (name, _, _, needs) in parsed {
            let missing: Vec<&str> = needs
                .iter()
                .filter(|n| !prompts.has(n))
                .map(String::as_str)
                .collect();
            prompts.errors.insert(
                name,
                TemplateError::new(format!(
                    "it needs {}, which is missing, broken or circular",
                    missing.join(", ")
                )),
            );
        }
        prompts
    }

    /// The template files in the folder (bounded listing, no symbolic link followed),
    /// for suggestions: nothing is read.
    pub fn names(&self) -> Vec<String> {
        list_names(&self.dir)
    }

    pub fn has(&self, name: &str) -> bool {
        self.tera.get_template(name).is_ok()
    }

    /// `(root, second segment)` of every variable the template (and what it includes) reads,
    /// minus loop variables and `set` names.
    pub fn variables(&self, name: &str) -> BTreeSet<(String, Option<String>)> {
        let mut out = BTreeSet::new();
        let mut seen = BTreeSet::new();
        self.walk_template(name, &mut out, &mut seen);
        out
    }

    fn walk_template(
        &self,
        name: &str,
        out: &mut BTreeSet<(String, Option<String>)>,
        seen: &mut BTreeSet<String>,
    ) {
        if !seen.insert(name.to_string()) {
            return;
        }
        let Ok(template) = self.tera.get_template(name) else {
            return;
        };
        let mut locals = vec!["loop".to_string(), "__tera_context".to_string()];
        let mut includes = Vec::new();
        walk_nodes(&template.ast, &mut locals, out, &mut includes);
        for include in includes {
            self.walk_template(&include, out, seen);
        }
    }

    pub fn render(&self, name: &str, context: &tera::Context) -> Result<String, RenderError> {
        bounded_render(&self.tera, name, context)
    }
}

/// Why a template did not render.
#[derive(Debug, Clone)]
pub struct RenderError {
    pub message: String,
    /// What failed is the value rendered: `check` proves every read, loop, filter, test and
    /// operator of a template against the declared types, so at run time only a value it
    /// could not prove (typed `any`: a reply's open map, a tool's data, a demo) fails one.
    /// Not so for a rendering past its bound, `throw`, or `get_env` of an unset variable.
    pub wrong_kind: bool,
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<RenderError> for String {
    fn from(e: RenderError) -> String {
        e.message
    }
}

/// What the refusals of [`range`], [`replace`], [`indent`] and [`join`] for their size say.
const BOUND_REFUSALS: &[&str] = &["would yield", "would make", "step_by must be at least 1"];

/// Whether a tera error is about a value's kind (see [`RenderError::wrong_kind`]).
fn wrong_kind(error: &tera::Error) -> bool {
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = at {
        if let Some(t) = e.downcast_ref::<tera::Error>() {
            match &t.kind {
                tera::ErrorKind::Io(_) | tera::ErrorKind::Utf8Conversion { .. } => return false,
                tera::ErrorKind::CallFunction(name) if name == "throw" || name == "get_env" => {
                    return false;
                }
                _ => {}
            }
        }
        if e.downcast_ref::<std::io::Error>().is_some() {
            return false;
        }
        // A bound of Rondo's own filters and functions (`range`, `replace`, `indent`,
        // `join`): a rendering refused for its size, as one past `MAX_RENDERED` is.
        let text = e.to_string();
        if BOUND_REFUSALS.iter().any(|m| text.contains(m)) {
            return false;
        }
        at = e.source();
    }
    true
}

/// Renders into a buffer that refuses to grow past [`MAX_RENDERED`].
fn bounded_render(tera: &Tera, name: &str, context: &tera::Context) -> Result<String, RenderError> {
    let mut out = BoundedBuffer(Vec::new());
    // Tera's arithmetic panics on some numbers (`a + b` past f64's range, `i64::MIN % -1`):
    // numbers a reply gave, as a failure of their kind.
    let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tera.render_to(name, context, &mut out)
    }))
    .map_err(|_| RenderError {
        message: "its arithmetic overflowed on a number it was given".into(),
        wrong_kind: true,
    })?;
    rendered.map_err(|e| RenderError {
        message: crate::compile::tera_error_text(&e),
        wrong_kind: wrong_kind(&e),
    })?;
    String::from_utf8(out.0).map_err(|e| RenderError {
        message: e.to_string(),
        wrong_kind: false,
    })
}

struct BoundedBuffer(Vec<u8>);

impl std::io::Write for BoundedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.0.len().saturating_add(bytes.len()) > MAX_RENDERED {
            return Err(std::io::Error::other(format!(
                "the template renders more than {} MiB",
                MAX_RENDERED >> 20
            )));
        }
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Parses a one-off template string as `render_str` would take it: one that extends or
/// imports another template is refused there, since it stands alone. Tera's registry
/// (its filters and functions) is built only for that refusal.
pub fn parse_inline(name: &str, text: &str) -> Result<tera::Template, tera::Error> {
    let mut template = crate::compile::parse_template(text)?;
    template.name = name.to_string();
    if template.parent.is_some() || !template.imported_macro_files.is_empty() {
        Tera::default().add_raw_template(name, text)?;
    }
    Ok(template)
}

/// Renders a one-off template string (artifact names, command arguments).
pub fn render_str(text: &str, context: &tera::Context) -> Result<String, RenderError> {
    if !text.contains("{{") && !text.contains("{%") {
        return Ok(text.to_string());
    }
    let mut tera = Tera::default();
    tera.autoescape_on(vec![]);
    register(&mut tera);
    tera.add_raw_template("inline", text)
        .map_err(|e| RenderError {
            message: crate::compile::tera_error_text(&e),
            wrong_kind: false,
        })?;
    bounded_render(&tera, "inline", context)
}

/// Each name once, sorted.
fn distinct(names: &[String]) -> Vec<String> {
    let set: BTreeSet<&String> = names.iter().collect();
    set.into_iter().cloned().collect()
}

/// A template file read and parsed, or why it cannot be used.
pub type Read = Result<(String, tera::Template), TemplateError>;

/// The named templates (a workflow's prompts: most of the parsing there is) read and parsed
/// on the available cores, as tera's parser is slow; what they include is parsed after.
/// Empty when one core or one name would do the same alone. `names`: each once, sorted.
fn parse_named(dir: &Path, names: &[String]) -> HashMap<String, Read> {
    let distinct: Vec<&String> = names.iter().take(MAX_TEMPLATES).collect();
    // One name needs no thread, nor the count of cores (a read of the cgroup's files).
    if distinct.len() < 2 {
        return HashMap::new();
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
        .min(distinct.len());
    if threads < 2 {
        return HashMap::new();
    }
    let per_thread = distinct.len().div_ceil(threads);
    let mut parts = distinct.chunks(per_thread);
    // The caller reads the first part itself, beside the workers.
    let own = parts.next().unwrap_or_default();
    std::thread::scope(|scope| {
        let workers: Vec<_> = parts
            .filter_map(|part| {
                // The main thread's stack: tera's parser recurses once per nesting level.
                std::thread::Builder::new()
                    .stack_size(8 << 20)
                    .spawn_scoped(scope, move || {
                        part.iter()
                            .map(|name| ((*name).clone(), read_template(dir, name)))
                            .collect::<Vec<_>>()
                    })
                    .ok()
            })
            .collect();
        let mut read: Vec<(String, Read)> = own
            .iter()
            .map(|name| ((*name).clone(), read_template(dir, name)))
            .collect();
        // A worker that could not start or failed leaves its names to the caller.
        read.extend(workers.into_iter().filter_map(|w| w.join().ok()).flatten());
        read.into_iter().collect()
    })
}

/// Reads and parses one template of the folder.
pub fn read_template(dir: &Path, name: &str) -> Read {
    let rel = Path::new(name);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(TemplateError::new(format!(
            "`{name}` is not a path inside the prompts folder"
        )));
    }
    let text =
        crate::source::read_regular(&dir.join(rel), MAX_TEMPLATE_BYTES).map_err(|e| {
            match e.bad_byte() {
                Some((text, span, label)) => TemplateError {
                    reason: label,
                    at: Some((Arc::from(text), span.start)),
                    not_utf8: true,
                    unclosed: None,
                },
                None => TemplateError::new(e.to_string()),
            }
        })?;
    let depth = template_depth(&text);
    if depth > MAX_TEMPLATE_DEPTH {
        return Err(TemplateError::new(format!(
            "it nests blocks and brackets {depth} levels deep, more than {MAX_TEMPLATE_DEPTH}"
        )));
    }
    let template =
        tera::Template::new(name, None, &text).map_err(|e| TemplateError::tera(&e, &text))?;
    Ok((text, template))
}

/// How deep a template nests `{% if/for/block/macro/filter %}` blocks plus the brackets
/// inside its tags, in one pass without recursion (an upper estimate).
fn template_depth(text: &str) -> usize {
    let (mut blocks, mut deepest) = (0usize, 0usize);
    let mut rest = text;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        let close = match after.as_bytes().first() {
            Some(b'%') => "%}",
            Some(b'{') => "}}",
            Some(b'#') => "#}",
            _ => {
                rest = after;
                continue;
            }
        };
        let Some(end) = after[1..].find(close) else {
            break;
        };
        let body = &after[1..1 + end];
        rest = &after[1 + end + 2..];
        if close == "#}" {
            continue;
        }
        if close == "%}" {
            let word = body.trim_start_matches('-').split_whitespace().next();
            match word {
                Some("if" | "for" | "block" | "macro" | "filter") => blocks += 1,
                Some("endif" | "endfor" | "endblock" | "endmacro" | "endfilter") => {
                    blocks = blocks.saturating_sub(1)
                }
                Some("raw") => {
                    rest = rest.find("endraw").map_or("", |j| &rest[j..]);
                }
                _ => {}
            }
        }
        let mut brackets = 0usize;
        for c in body.chars() {
            match c {
                '(' | '[' | '{' => {
                    brackets += 1;
                    deepest = deepest.max(blocks + brackets);
                }
                ')' | ']' | '}' => brackets = brackets.saturating_sub(1),
                _ => {}
            }
        }
        deepest = deepest.max(blocks);
    }
    deepest
}

/// Relative names of the files under `root`, breadth first, without following symbolic
/// links and within [`MAX_LISTED`] entries.
fn list_names(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = std::collections::VecDeque::from([root.to_path_buf()]);
    let mut looked = 0;
    while let Some(dir) = dirs.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            looked += 1;
            if looked > MAX_LISTED {
                out.sort();
                return out;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                dirs.push_back(path);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

fn register(tera: &mut Tera) {
    tera.register_filter("pad", pad);
    tera.register_filter("to_json", |value: &Value, _: &HashMap<String, Value>| {
        Ok(Value::String(
            serde_json::to_string_pretty(value).unwrap_or_default(),
        ))
    });
    // Tera's own versions allocate whatever their arguments ask for.
    tera.register_filter("replace", replace);
    tera.register_filter("indent", indent);
    tera.register_filter("join", join);
    tera.register_function("range", range);
}

type Args = HashMap<String, Value>;

/// Zeros on the left up to `width` characters (default 2), `width` bounded by
/// [`MAX_PAD_WIDTH`]; a negative one pads nothing.
fn pad(value: &Value, args: &Args) -> tera::Result<Value> {
    let width = match args.get("width") {
        // A number written as text counts too: an artifact name holds a reply's long float
        // as its cut text.
        Some(w) => match w
            .as_f64()
            .or_else(|| w.as_str().and_then(|s| s.trim().parse().ok()))
        {
            Some(w) if w.is_nan() || w <= 0.0 => 0,
            // `as` saturates: 1e300 is usize::MAX here, then the bound.
            Some(w) => (w as usize).min(MAX_PAD_WIDTH),
            None => {
                return Err(tera::Error::msg(format!(
                    "`pad`: width {w} is not a number"
                )));
            }
        },
        None => 2,
    };
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let missing = width.saturating_sub(text.chars().count());
    Ok(Value::String("0".repeat(missing) + &text))
}

fn string_arg(filter: &str, args: &Args, name: &str) -> tera::Result<Option<String>> {
    match args.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(tera::Error::msg(format!(
            "`{filter}`: `{name}` must be a string, not {other}"
        ))),
    }
}

fn string_value<'a>(filter: &str, value: &'a Value) -> tera::Result<&'a str> {
    value
        .as_str()
        .ok_or_else(|| tera::Error::msg(format!("`{filter}` applies to a string, not {value}")))
}

fn within_bound(filter: &str, size: usize) -> tera::Result<()> {
    if size > MAX_RENDERED {
        return Err(tera::Error::msg(format!(
            "`{filter}` would make {size} bytes, more than the {} MiB a template may produce",
            MAX_RENDERED >> 20
        )));
    }
    Ok(())
}

fn replace(value: &Value, args: &Args) -> tera::Result<Value> {
    let text = string_value("replace", value)?;
    let from = string_arg("replace", args, "from")?
        .ok_or_else(|| tera::Error::msg("`replace` needs `from`"))?;
    let to = string_arg("replace", args, "to")?
        .ok_or_else(|| tera::Error::msg("`replace` needs `to`"))?;
    let found = if from.is_empty() {
        text.chars().count() + 1
    } else {
        text.matches(from.as_str()).count()
    };
    let size = found.saturating_mul(to.len()).saturating_add(text.len());
    within_bound("replace", size)?;
    Ok(Value::String(text.replace(&from, &to)))
}

/// Tera's `indent`: `prefix` (four spaces) before every line but the first (unless
/// `first`), and before blank ones only with `blank`.
fn indent(value: &Value, args: &Args) -> tera::Result<Value> {
    let text = string_value("indent", value)?;
    let prefix = string_arg("indent", args, "prefix")?.unwrap_or_else(|| "    ".into());
    let flag = |name: &str| match args.get(name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(tera::Error::msg(format!(
            "`indent`: `{name}` must be true or false, not {other}"
        ))),
    };
    let (first, blank) = (flag("first")?, flag("blank")?);
    let lines = text.lines().count();
    within_bound(
        "indent",
        prefix
            .len()
            .saturating_mul(lines)
            .saturating_add(text.len()),
    )?;
    let mut out = String::with_capacity(text.len() + prefix.len() * lines);
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if (i == 0 && first) || (i > 0 && (blank || !line.trim_start().is_empty())) {
            out.push_str(&prefix);
        }
        out.push_str(line);
    }
    Ok(Value::String(out))
}

/// Tera's `join`: each item as a template prints it, `sep` between them (`\n` and `\t`
/// written out in a template file are the characters).
fn join(value: &Value, args: &Args) -> tera::Result<Value> {
    let Value::Array(items) = value else {
        return Err(tera::Error::msg(format!(
            "`join` applies to a list, not {value}"
        )));
    };
    let sep = string_arg("join", args, "sep")?
        .unwrap_or_default()
        .replace("\\n", "\n")
        .replace("\\t", "\t");
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            within_bound("join", out.len().saturating_add(sep.len()))?;
            out.push_str(&sep);
        }
        let text = match item {
            Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
            other => std::borrow::Cow::Owned(printed(other)),
        };
        within_bound("join", out.len().saturating_add(text.len()))?;
        out.push_str(&text);
    }
    Ok(Value::String(out))
}

/// A value as tera prints it: null as nothing, a list as `[a, b]`, a map as `[object]`.
fn printed(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(printed).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(_) => "[object]".into(),
        other => other.to_string(),
    }
}

/// Tera's `range(end, start=0, step_by=1)`, refused past [`MAX_RANGE`] numbers or with a
/// step of 0 (which never ends).
fn range(args: &Args) -> tera::Result<Value> {
    let number = |name: &str, default: Option<u64>| match args.get(name) {
        None => default.ok_or_else(|| tera::Error::msg(format!("`range` needs `{name}`"))),
        Some(v) => v.as_u64().ok_or_else(|| {
            tera::Error::msg(format!(
                "`range`: `{name}` must be a whole number, at least 0, not {v}"
            ))
        }),
    };
    let (start, end, step) = (
        number("start", Some(0))?,
        number("end", None)?,
        number("step_by", Some(1))?,
    );
    if start > end {
        return Err(tera::Error::msg(format!(
            "`range`: start {start} is past end {end}"
        )));
    }
    if step == 0 {
        return Err(tera::Error::msg("`range`: step_by must be at least 1"));
    }
    let count = (end - start).div_ceil(step);
    if count > MAX_RANGE as u64 {
        return Err(tera::Error::msg(format!(
            "`range` would yield {count} numbers, more than {MAX_RANGE}"
        )));
    }
    Ok(Value::Array(
        (0..count).map(|i| Value::from(start + i * step)).collect(),
    ))
}

fn split_ident(ident: &str) -> (String, Option<String>) {
    let mut parts = ident.split(['.', '[']);
    let root = parts.next().unwrap_or("").to_string();
    let second = parts
        .next()
        .map(|s| s.trim_end_matches(']').to_string())
        .filter(|s| {
            !s.is_empty() && !s.starts_with(['"', '\'']) && !s.chars().all(|c| c.is_ascii_digit())
        });
    (root, second)
}

fn walk_nodes(
    nodes: &[Node],
    locals: &mut Vec<String>,
    out: &mut BTreeSet<(String, Option<String>)>,
    includes: &mut Vec<String>,
) {
    for node in nodes {
        match node {
            Node::VariableBlock(_, e) => walk_expr(e, locals, out),
            Node::Set(_, set) => {
                walk_expr(&set.value, locals, out);
                locals.push(set.key.clone());
            }
            Node::Forloop(_, f, _) => {
                walk_expr(&f.container, locals, out);
                let before = locals.len();
                locals.push(f.value.clone());
                if let Some(k) = &f.key {
                    locals.push(k.clone());
                }
                walk_nodes(&f.body, locals, out, includes);
                if let Some(body) = &f.empty_body {
                    walk_nodes(body, locals, out, includes);
                }
                locals.truncate(before);
            }
            Node::If(i, _) => {
                for (_, cond, body) in &i.conditions {
                    walk_expr(cond, locals, out);
                    walk_nodes(body, locals, out, includes);
                }
                if let Some((_, body)) = &i.otherwise {
                    walk_nodes(body, locals, out, includes);
                }
            }
            Node::FilterSection(_, f, _) => {
                for arg in f.filter.args.values() {
                    walk_expr(arg, locals, out);
                }
                walk_nodes(&f.body, locals, out, includes);
            }
            Node::Block(_, b, _) => walk_nodes(&b.body, locals, out, includes),
            Node::MacroDefinition(_, m, _) => {
                let before = locals.len();
                locals.extend(m.args.keys().cloned());
                walk_nodes(&m.body, locals, out, includes);
                locals.truncate(before);
            }
            Node::Include(_, names, _) => includes.extend(names.iter().cloned()),
            _ => {}
        }
    }
}

fn walk_expr(e: &Expr, locals: &[String], out: &mut BTreeSet<(String, Option<String>)>) {
    for f in &e.filters {
        for arg in f.args.values() {
            walk_expr(arg, locals, out);
        }
    }
    match &e.val {
        ExprVal::Ident(ident) => {
            let (root, second) = split_ident(ident);
            if !locals.contains(&root) {
                out.insert((root, second));
            }
        }
        ExprVal::Math(m) => {
            walk_expr(&m.lhs, locals, out);
            walk_expr(&m.rhs, locals, out);
        }
        ExprVal::Logic(l) => {
            walk_expr(&l.lhs, locals, out);
            walk_expr(&l.rhs, locals, out);
        }
        ExprVal::In(i) => {
            walk_expr(&i.lhs, locals, out);
            walk_expr(&i.rhs, locals, out);
        }
        ExprVal::Test(t) => {
            // `x is defined` may name something absent on purpose.
            if t.name != "defined" && t.name != "undefined" {
                let (root, second) = split_ident(&t.ident);
                if !locals.contains(&root) {
                    out.insert((root, second));
                }
            }
            for a in &t.args {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::FunctionCall(f) => {
            for a in f.args.values() {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::MacroCall(m) => {
            for a in m.args.values() {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::Array(items) => {
            for a in items {
                walk_expr(a, locals, out);
            }
        }
        ExprVal::StringConcat(s) => {
            for v in &s.values {
                if let ExprVal::Ident(ident) = v {
                    let (root, second) = split_ident(ident);
                    if !locals.contains(&root) {
                        out.insert((root, second));
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_blocks_and_brackets() {
        assert_eq!(template_depth("{% if a %}{{ (b) }}{% endif %}"), 2);
        assert_eq!(
            template_depth("{# {% if %} #}{% raw %}{% if %}{% endraw %}"),
            0
        );
        let deep = "{% if x %}".repeat(5000) + &"{% endif %}".repeat(5000);
        assert_eq!(template_depth(&deep), 5000);
    }

    /// Where tera stops on each template, and the block named as left open there.
    fn unclosed(text: &str) -> Option<Unclosed> {
        let e = tera::Template::new("t", None, text).expect_err("does not parse");
        let (at, _) = tera_error_at(&crate::compile::tera_error_text(&e), text);
        unclosed_block(text, at?)
    }

    #[test]
    fn an_unclosed_block_is_the_innermost_open_one_where_tera_stops() {
        let u = unclosed("a {% if x %}{% for y in z %}{{ y }}{% endif %} b").expect("found");
        assert_eq!(u.block, "for");
        assert_eq!(u.opened, (12, 28));
        assert_eq!(u.instead, Some(("endif".to_string(), (35, 46))));
        // Tags in comments and raw blocks are text; closed blocks are not named.
        let u = unclosed(
            "{# {% if %} #}{% raw %}{% for %}{% endraw %}{% if a %}{% for x in y %}{% endfor %}\n",
        )
        .expect("found");
        assert_eq!((u.block.as_str(), u.opened.0, u.instead), ("if", 44, None));
        // A stray end tag, a broken expression or an unterminated tag is not an open block.
        assert_eq!(unclosed("{% endfor %}"), None);
        assert_eq!(unclosed("{% for x in y %}{{ x + }}{% endfor %}"), None);
        assert_eq!(unclosed("{% for x in y %}{{ x }}\n{% endfor\n"), None);
    }

    #[test]
    fn a_stray_end_tag_is_named() {
        let text = "a\n{% endfor %}\n";
        let e = tera::Template::new("t", None, text).expect_err("does not parse");
        let e = TemplateError::tera(&e, text);
        assert_eq!(
            e.reason,
            "`{% endfor %}` ends no `{% for %}`: remove it, or open the block it ends"
        );
        assert_eq!(e.at.map(|(_, at)| at), Some(2));
    }
}
