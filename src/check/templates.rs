//! Prompt templates: each exists, parses, and reads only what its role will have, down to
//! fields. The tera AST of each template is walked with the types of the rendering role's
//! context (inputs, memory, role outputs, tools, loop variables, `set` values, included
//! partials in the includer's frame); diagnostics point into the template file.
//!
//! What fails at render time in tera, and so is checked here: a field that does not exist,
//! a field read through a null value, an index past the end of a list, a role output read
//! before the role surely ran (its value is null until then), a loop over something that is
//! not a list or map, an unknown filter, a filter given the wrong kind of value. What tera
//! forgives is accepted: an identifier alone as an `{% if %}` condition (an error counts as
//! false), `is defined`, and `| default(value=...)`; they also guard what they prove.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use petgraph::graph::NodeIndex;
use tera::ast::{
    Expr, ExprVal, FunctionCall, In, LogicExpr, LogicOperator, MathExpr, Node, StringConcat,
};

use super::node_name;
use super::ran::DefiniteRuns;
use crate::compile::types::Type;
use crate::compile::{MemoryKind, RoleKind, RouteTarget, ToolAction, Workflow};
use crate::diagnostics::{
    Code, Diagnostic, Diagnostics, ExternalLabel, Label, did_you_mean, did_you_mean_any,
};
use crate::prompt::{Prompts, TemplateError, tera_error_at};
use crate::source::Span;

/// Variables every prompt has besides the role names.
pub const PROMPT_ROOTS: &[&str] = &[
    "input",
    "memory",
    "tools",
    "round",
    "step",
    "visit",
    "item",
    "last_error",
    "run_id",
    "demos",
];

/// Nesting (blocks, expressions, includes) past which a template is not walked further.
const MAX_DEPTH: usize = 64;

/// Tera's filters (without the `builtins` feature) and Rondo's own.
const FILTERS: &[&str] = &[
    "upper",
    "lower",
    "trim",
    "trim_start",
    "trim_end",
    "trim_start_matches",
    "trim_end_matches",
    "truncate",
    "wordcount",
    "replace",
    "capitalize",
    "title",
    "linebreaksbr",
    "indent",
    "striptags",
    "spaceless",
    "escape",
    "escape_xml",
    "addslashes",
    "split",
    "int",
    "float",
    "first",
    "last",
    "nth",
    "join",
    "sort",
    "unique",
    "slice",
    "group_by",
    "filter",
    "map",
    "concat",
    "abs",
    "pluralize",
    "round",
    "length",
    "reverse",
    "json_encode",
    "as_str",
    "get",
    "safe",
    "default",
    "pad",
    "to_json",
];
const TESTERS: &[&str] = &[
    "defined",
    "undefined",
    "odd",
    "even",
    "string",
    "number",
    "divisibleby",
    "iterable",
    "object",
    "starting_with",
    "ending_with",
    "containing",
    "matching",
];
const FUNCTIONS: &[&str] = &["range", "throw", "get_env"];

/// Variables an inline template (a command argument, a log or artifact name) has besides
/// the role names: the runtime's name context has no `tools` nor `last_error`, and its
/// `memory` holds only the value slots.
pub const INLINE_ROOTS: &[&str] = &[
    "input", "memory", "round", "step", "visit", "item", "run_id", "role",
];

/// When an inline template renders, which decides the role outputs it surely has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    /// Before its role runs (command arguments, the log name).
    Before,
    /// After its role ran with a valid outcome (the role's artifact names).
    After,
    /// After every step (workflow artifact names).
    Always,
}

/// A string of the workflow file that is rendered with tera at run time.
struct Inline {
    /// The string literal in the workflow file.
    span: Span,
    /// Where the string's text starts in the file, when it maps byte for byte (no escapes).
    text_start: Option<usize>,
    /// What the string is, for messages: "the command of `build`".
    what: String,
    when: When,
}

/// `early`: the templates parsed before the workflow was compiled, used when they are
/// the ones it names.
pub fn check(
    workflow: &Workflow,
    runs: Option<&DefiniteRuns>,
    early: Option<Prompts>,
    diags: &mut Diagnostics,
) {
    let shared = Shared::new(workflow);
    check_inline(workflow, runs, &shared, diags);
    let has_llm = workflow
        .roles()
        .any(|(_, r)| matches!(r.kind, RoleKind::Llm(_)));
    if !has_llm {
        return;
    }
    let prompts = match early {
        Some(prompts) if prompts.serves(workflow) => prompts,
        _ => Prompts::for_workflow(workflow),
    };
    let mut reported_parse = BTreeSet::new();
    let mut found: Vec<Diagnostic> = Vec::new();
    for (index, role) in workflow.roles() {
        let RoleKind::Llm(llm) = &role.kind else {
            continue;
        };
        let name = node_name(workflow, index);
        let span = workflow.node(index).span;
        for template in llm.system.iter().chain(llm.prompt.iter()) {
            let file = template.to_string_lossy().replace('\\', "/");
            if file.is_empty() {
                continue;
            }
            if let Some(error) = prompts.errors.get(&file) {
                if reported_parse.insert(file.clone()) {
                    let renders = format!("role `{name}` renders `{file}`");
                    diags.push(template_error(workflow, &file, span, renders, error));
                }
                continue;
            }
            // A prompts folder that does not exist is reported (by compile), not each
            // template missing from it.
            if !prompts.has(&file) && !workflow.prompts_dir.is_dir() {
                continue;
            }
            if !prompts.has(&file) && looks_like_text(&file) {
                diags.push(
                    Diagnostic::error(
                        Code::TemplateMissing,
                        format!("role `{name}` gives its template as text, but a template is a file"),
                    )
                    .label(span, "the text is taken as a file name")
                    .help(format!(
                        "put the text in a file of the prompts folder ({}), e.g. `{name}.tera`, and write `prompt = \"{name}.tera\"`",
                        workflow.prompts_dir.display()
                    )),
                );
                continue;
            }
            if !prompts.has(&file) {
                let names = prompts.names();
                let help = did_you_mean(&file, names.iter().map(String::as_str))
                    .unwrap_or_else(|| format!("create it in {}", workflow.prompts_dir.display()));
                diags.push(
                    Diagnostic::error(
                        Code::TemplateMissing,
                        format!("role `{name}` uses template `{file}`, which does not exist"),
                    )
                    .label(
                        span,
                        format!("no file {}", workflow.prompts_dir.join(&file).display()),
                    )
                    .help(help),
                );
                continue;
            }
            let mut walker = Walker::new(workflow, &prompts, runs, &shared, index, &file);
            walker.template(&file);
            found.append(&mut walker.found);
        }
    }
    // A partial shared by several roles, with the same fault, is reported once.
    let mut seen = BTreeSet::new();
    for d in found {
        let key = (
            d.code,
            d.message.clone(),
            d.external.as_ref().map(|e| (e.path.clone(), e.span)),
        );
        if seen.insert(key) {
            diags.push(d);
        }
    }
}

/// A template name that is rather the template's text (`prompt = "Answer {{ x }}"`).
fn looks_like_text(name: &str) -> bool {
    name.contains("{{")
        || name.contains("{%")
        || name.contains('\n')
        || name.contains(": ")
        || name.split_whitespace().count() > 3
}

/// A template that cannot be used: at its own line and column when the error names one,
/// with the role that renders it.
fn template_error(
    workflow: &Workflow,
    file: &str,
    role_span: Span,
    renders: String,
    error: &TemplateError,
) -> Diagnostic {
    let path = workflow.prompts_dir.join(file);
    let Some((text, at)) = &error.at else {
        return Diagnostic::error(
            Code::TemplateParse,
            format!("template `{file}` cannot be used: {}", error.reason),
        )
        .label(role_span, renders)
        .help(format!("fix {}", path.display()));
    };
    if let Some(u) = &error.unclosed {
        return unclosed_block(&path, file, text, u).label(role_span, renders);
    }
    let at = *at;
    let end = text[at..].chars().next().map_or(at, |c| at + c.len_utf8());
    let (diagnostic, help) = if error.not_utf8 {
        (
            Diagnostic::not_utf8(format_args!("template `{file}`")),
            None,
        )
    } else {
        (
            Diagnostic::error(
                Code::TemplateParse,
                format!("template `{file}` does not parse"),
            ),
            Some(TAG_HELP),
        )
    };
    diagnostic
        .label(role_span, renders)
        .external(ExternalLabel::new(
            &path,
            text.clone(),
            Span::new(at, end),
            error.reason.clone(),
        ))
        .maybe_help(help.map(str::to_string))
}

/// A block tag without its end tag: where it opened, and where another block's end or the
/// end of the template came first.
fn unclosed_block(
    path: &std::path::Path,
    file: &str,
    text: &Arc<str>,
    u: &crate::prompt::Unclosed,
) -> Diagnostic {
    let block = &u.block;
    let (first, what) = match &u.instead {
        Some((tag, (start, end))) => (
            Span::new(*start, *end),
            format!("`{{% {tag} %}}` comes before it"),
        ),
        None => {
            let end = text.trim_end().len();
            (
                Span::new(end, end),
                "the template ends before it".to_string(),
            )
        }
    };
    let mut external = ExternalLabel::new(
        path,
        text.clone(),
        Span::new(u.opened.0, u.opened.1),
        format!("this `{{% {block} %}}` is not closed"),
    );
    external.also.push(Label {
        span: first,
        text: format!("{what}: `{{% end{block} %}}` is missing"),
    });
    let help = match &u.instead {
        Some((tag, _)) => format!(
            "add `{{% end{block} %}}` where its body ends, before the `{{% {tag} %}}` of the block around it"
        ),
        None => format!("add `{{% end{block} %}}` where its body ends"),
    };
    Diagnostic::error(
        Code::TemplateParse,
        format!("template `{file}` does not parse: a `{{% {block} %}}` is not closed"),
    )
    .external(external)
    .help(help)
}

/// How to write tera tags, for a template that does not parse.
const TAG_HELP: &str = "tera tags: `{{ value | filter }}`, `{% if x %}...{% endif %}`, `{% for x in xs %}...{% endfor %}`; close each `{{` and `{%`, and write a literal brace pair as `{{ \"{{\" }}`";

/// Checks every inline template: command arguments and log names of tool roles (rendered
/// before the role runs), artifact names (after it ran), workflow artifact names (after
/// every step), with the context `run` renders them with (`Interpreter::name_context`).
fn check_inline(
    workflow: &Workflow,
    runs: Option<&DefiniteRuns>,
    shared: &Shared,
    diags: &mut Diagnostics,
) {
    let prompts = Prompts::empty(&workflow.prompts_dir);
    // (role, text, span, what, when, whether a parse error is reported here)
    let mut sites: Vec<(NodeIndex, &str, Span, String, When, bool)> = Vec::new();
    for (index, role) in workflow.roles() {
        let name = node_name(workflow, index);
        let role_span = workflow.node(index).span;
        if let RoleKind::Tool(tool) = &role.kind {
            if let ToolAction::Command { argv } = &tool.action {
                for (i, arg) in argv.iter().enumerate() {
                    let span = tool.argv_spans.get(i).copied().unwrap_or(role_span);
                    let what = format!("the command of `{name}`");
                    sites.push((index, arg, span, what, When::Before, true));
                }
            }
            if let Some(log) = &tool.log {
                let what = format!("the log name of `{name}`");
                sites.push((index, log, tool.log_span, what, When::Before, true));
            }
        }
        // A name that does not parse is `rondo::artifact::bad_name`, from compile.
        for a in &role.artifacts {
            let what = format!("the artifact name of `{name}`");
            sites.push((index, &a.name, a.name_span, what, When::After, false));
        }
    }
    for a in &workflow.artifacts {
        let what = "the workflow artifact name".to_string();
        sites.push((
            workflow.start,
            &a.name,
            a.name_span,
            what,
            When::Always,
            false,
        ));
    }
    for (index, text, span, what, when, report_parse) in sites {
        // `render_str` leaves a string without tags as it is.
        if !text.contains("{{") && !text.contains("{%") {
            continue;
        }
        let text_start = (span.len() == text.len() + 2).then_some(span.start + 1);
        let template = match crate::prompt::parse_inline("inline", text) {
            Ok(template) => template,
            Err(e) => {
                if report_parse {
                    let (at, mut label) = tera_error_at(&crate::compile::tera_error_text(&e), text);
                    let mut help = TAG_HELP.to_string();
                    let mut at = at.map(|at| (at, at + 1));
                    if let Some(u) = at.and_then(|(at, _)| crate::prompt::unclosed_block(text, at))
                    {
                        label = format!("this `{{% {} %}}` is not closed", u.block);
                        help = format!("add `{{% end{} %}}` where its body ends", u.block);
                        at = Some(u.opened);
                    }
                    let at = match (text_start, at) {
                        (Some(start), Some((from, to))) => Span::new(start + from, start + to),
                        _ => span,
                    };
                    diags.push(
                        Diagnostic::error(
                            Code::TemplateParse,
                            format!("{what} is not a valid template"),
                        )
                        .label(at, label)
                        .help(help),
                    );
                }
                continue;
            }
        };
        let inline = Inline {
            span,
            text_start,
            what,
            when,
        };
        let mut walker = Walker::new(workflow, &prompts, runs, shared, index, "");
        walker.inline = Some(inline);
        walker.globals = &shared.inline_globals;
        walker.memory = &shared.value_memory;
        walker.files.push(FileCtx::new("", Arc::from(text)));
        walker.nodes(&template.ast);
        for d in walker.found {
            diags.push(d);
        }
    }
}

/// How a read fails: rendering fails on a missing value; an `{% if %}` condition, `is
/// defined` and `| default` take it as false or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Render,
    Tolerant,
}

/// The declared type of a `map ... over` path (a memory value, a role's output, an input).
fn over_type(workflow: &Workflow, over: &crate::compile::Expr) -> Option<Type> {
    let crate::compile::ExprKind::Path { root, fields } = &over.kind else {
        return None;
    };
    let root = match root {
        crate::compile::Root::Memory { id } => match &workflow.memory.get(*id)?.kind {
            MemoryKind::Value { ty, .. } => ty.clone(),
            _ => return None,
        },
        crate::compile::Root::Role { node } => workflow.read_type(*node)?,
        crate::compile::Root::Input { id } => workflow.inputs.get(*id)?.ty.clone(),
        _ => return None,
    };
    root.field_path(fields)
}

/// The guard `{% if x is defined %}` adds: `x` exists, though it may be null.
fn defined_guard(root: &str) -> String {
    format!("{root} is defined")
}

/// Locals and `set_global` values set in one branch.
type Sets = (Vec<(String, Type, bool)>, Vec<(String, Type, bool)>);

/// One segment of a tera identifier: `.name`, `.0` / `[0]`, `["key"]`, `[var.path]`.
#[derive(Debug, Clone)]
enum Seg {
    Field(String),
    Index(usize),
    Dynamic(String),
}

/// A segment and its byte range inside the identifier.
type Segs = Vec<(Seg, usize, usize)>;

/// An identifier read in a template: its root, its segments, and where it starts in the
/// text (when found).
struct Ident {
    start: Option<usize>,
    root: String,
    segs: Segs,
}

impl Ident {
    /// The span of bytes `from..to` of the identifier.
    fn at(&self, from: usize, to: usize) -> Span {
        match self.start {
            Some(s) => Span::new(s + from, s + to),
            None => Span::new(0, 0),
        }
    }
}

fn parse_ident(ident: &str) -> (String, Segs) {
    let bytes = ident.as_bytes();
    let root_end = ident.find(['.', '[']).unwrap_or(ident.len());
    let root = ident[..root_end].to_string();
    let mut segs = Vec::new();
    let mut i = root_end;
    while i < bytes.len() {
        if bytes[i] == b'.' {
            let start = i + 1;
            let end = ident[start..]
                .find(['.', '['])
                .map_or(ident.len(), |e| start + e);
            let name = &ident[start..end];
            let seg = match name.parse::<usize>() {
                Ok(n) => Seg::Index(n),
                Err(_) => Seg::Field(name.to_string()),
            };
            segs.push((seg, start, end));
            i = end;
        } else if bytes[i] == b'[' {
            let start = i + 1;
            let Some(close) = ident[start..].find(']').map(|e| start + e) else {
                break;
            };
            let inner = ident[start..close].trim();
            let seg = if let Some(s) = inner
                .strip_prefix(['"', '\'', '`'])
                .and_then(|s| s.strip_suffix(['"', '\'', '`']))
            {
                Seg::Field(s.to_string())
            } else if let Ok(n) = inner.parse::<usize>() {
                Seg::Index(n)
            } else {
                Seg::Dynamic(inner.to_string())
            };
            segs.push((seg, start, close));
            i = close + 1;
        } else {
            i += 1;
        }
    }
    (root, segs)
}

/// The identifier as guards record it: `a.b.0`, with `[?]` for a computed index.
fn normalize(root: &str, segs: &[(Seg, usize, usize)]) -> String {
    let mut out = root.to_string();
    for (seg, _, _) in segs {
        match seg {
            Seg::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Seg::Index(n) => {
                out.push('.');
                out.push_str(&n.to_string());
            }
            Seg::Dynamic(inner) => {
                out.push('[');
                out.push_str(inner);
                out.push(']');
            }
        }
    }
    out
}

/// `a`, `a.b`, `a.b.c` for `a.b.c`.
fn prefixes(root: &str, segs: &[(Seg, usize, usize)]) -> Vec<String> {
    (0..=segs.len())
        .map(|n| normalize(root, &segs[..n]))
        .collect()
}

/// A template file being walked: its text, the byte ranges of its tags, and how many times
/// each identifier was met so far (the n-th met is the n-th written).
struct FileCtx {
    name: String,
    text: Arc<str>,
    tags: Vec<(usize, usize)>,
    seen: HashMap<String, Cursor>,
}

/// Where the search for an identifier's next occurrence resumes, so that finding every
/// occurrence of a name reads the template once.
#[derive(Default)]
struct Cursor {
    tag: usize,
    from: usize,
    first: Option<usize>,
    /// What the last search answered.
    last: Option<usize>,
}

impl FileCtx {
    fn new(name: &str, text: Arc<str>) -> Self {
        let tags = tag_ranges(&text);
        FileCtx {
            name: name.to_string(),
            text,
            tags,
            seen: HashMap::new(),
        }
    }

    /// Byte offset of the next occurrence of `needle` inside a tag; once they are all
    /// met, the first.
    fn locate(&mut self, needle: &str) -> Option<usize> {
        let cursor = self.seen.entry(needle.to_string()).or_default();
        match next_in_tags(&self.text, &self.tags, needle, cursor) {
            Some(at) => {
                cursor.first.get_or_insert(at);
                cursor.last = Some(at);
            }
            None => cursor.last = cursor.first,
        }
        cursor.last
    }

    /// Where `needle` was last located, or its first occurrence when it was not yet.
    fn last_located(&self, needle: &str) -> Option<usize> {
        match self.seen.get(needle) {
            Some(cursor) => cursor.last,
            None => next_in_tags(&self.text, &self.tags, needle, &mut Cursor::default()),
        }
    }
}

/// The next occurrence of `needle` as a whole name inside a tag, from `cursor` on (which
/// moves past it).
fn next_in_tags(
    text: &str,
    tags: &[(usize, usize)],
    needle: &str,
    cursor: &mut Cursor,
) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    while let Some(&(start, end)) = tags.get(cursor.tag) {
        let inside = &text[start..end];
        while let Some(i) = inside[cursor.from..].find(needle) {
            let at = cursor.from + i;
            cursor.from = at + needle.len();
            let before = inside[..at].chars().next_back();
            let after = inside[at + needle.len()..].chars().next();
            let ident = |c: char| c.is_alphanumeric() || c == '_';
            if before.is_some_and(|c| ident(c) || c == '.')
                || after.is_some_and(|c| ident(c) || c == '.' || c == '[')
            {
                continue;
            }
            return Some(start + at);
        }
        cursor.tag += 1;
        cursor.from = 0;
    }
    None
}

/// Byte ranges of the insides of `{{ }}` and `{% %}` tags, skipping comments and raw blocks.
fn tag_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut raw = false;
    while let Some(pos) = text[i..].find('{').map(|p| i + p) {
        let rest = &text[pos..];
        let close = if rest.starts_with("{{") {
            "}}"
        } else if rest.starts_with("{%") {
            "%}"
        } else if rest.starts_with("{#") {
            "#}"
        } else {
            i = pos + 1;
            continue;
        };
        let Some(end) = text[pos + 2..].find(close).map(|e| pos + 2 + e) else {
            break;
        };
        let inside = text[pos + 2..end].trim_matches(|c: char| c == '-' || c.is_whitespace());
        if close == "%}" && inside == "raw" {
            raw = true;
        } else if close == "%}" && inside == "endraw" {
            raw = false;
        } else if close != "#}" && !raw {
            out.push((pos + 2, end));
        }
        i = end + 2;
    }
    out
}

/// Whether a filter accepts a value of the type.
type Accepts = fn(&Type) -> bool;

/// What a filter needs, when it cannot take anything.
fn filter_needs(name: &str) -> Option<(&'static str, Accepts)> {
    match name {
        "first" | "last" | "nth" | "join" | "sort" | "unique" | "slice" | "group_by" | "filter"
        | "map" | "concat" => Some(("a list", |t| matches!(t, Type::List { .. }))),
        "length" | "reverse" => Some(("a list, a map or a string", |t| {
            matches!(
                t,
                Type::List { .. }
                    | Type::Map { .. }
                    | Type::Object { .. }
                    | Type::String
                    | Type::Literal { .. }
            ) || t.is_stringy()
        })),
        "abs" | "round" | "pluralize" => Some(("a number", |t| t.is_numeric())),
        "upper" | "lower" | "trim" | "trim_start" | "trim_end" | "trim_start_matches"
        | "trim_end_matches" | "truncate" | "wordcount" | "replace" | "capitalize" | "title"
        | "linebreaksbr" | "indent" | "striptags" | "spaceless" | "escape" | "escape_xml"
        | "addslashes" | "split" => Some(("a string", |t| t.is_stringy())),
        "get" => Some(("a map", |t| {
            matches!(t, Type::Map { .. } | Type::Object { .. })
        })),
        "int" | "float" => Some(("a number or a string", |t| t.is_stringy() || t.is_numeric())),
        _ => None,
    }
}

/// The arguments without which a filter always fails.
fn filter_required(name: &str) -> &'static [&'static str] {
    match name {
        "nth" => &["n"],
        "group_by" | "filter" | "map" => &["attribute"],
        "concat" => &["with"],
        "replace" => &["from", "to"],
        "split" | "trim_start_matches" | "trim_end_matches" => &["pat"],
        "get" => &["key"],
        "default" => &["value"],
        _ => &[],
    }
}

/// The type filter `f` gives for `input` (`inner` without its null, `item` the type of
/// its items when a list); `args` are the types of its arguments.
fn filter_output(
    f: &FunctionCall,
    input: Type,
    inner: Type,
    item: Type,
    args: &BTreeMap<String, Type>,
) -> Type {
    let name = f.name.as_str();
    match name {
        // Tera gives "" for `first`, `last` and `nth` of an empty list.
        "first" | "last" | "nth" => Type::optional(item),
        "join" | "upper" | "lower" | "trim" | "trim_start" | "trim_end" | "trim_start_matches"
        | "trim_end_matches" | "truncate" | "replace" | "capitalize" | "title" | "linebreaksbr"
        | "indent" | "striptags" | "spaceless" | "escape" | "escape_xml" | "addslashes"
        | "json_encode" | "as_str" | "pad" | "to_json" | "pluralize" => Type::String,
        "sort" | "unique" | "slice" | "filter" | "concat" | "reverse" => inner,
        "length" | "wordcount" | "int" => Type::Int,
        "float" => Type::Float,
        "abs" | "round" => inner,
        "split" => Type::list(Type::String),
        "group_by" => Type::Map {
            value: Box::new(Type::list(item)),
        },
        "map" => match f.args.get("attribute").map(|a| &a.val) {
            Some(ExprVal::String(attr)) => {
                let fields: Vec<String> = attr.split('.').map(str::to_string).collect();
                Type::list(item.field_path(&fields).unwrap_or(Type::Any))
            }
            _ => Type::list(Type::Any),
        },
        "get" => match (&inner, f.args.get("key").map(|a| &a.val)) {
            (_, Some(ExprVal::String(k))) => inner.field(k).unwrap_or(Type::Any),
            _ => Type::Any,
        },
        "default" => {
            let fallback = args.get("value").cloned().unwrap_or(Type::Any);
            if fallback == Type::Null { input } else { inner }
        }
        _ => input,
    }
}

/// What kind of value an operator or test takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Number,
    Text,
    TextOrNumber,
    Container,
}

/// A variable of the template's frame.
#[derive(Debug, Clone)]
enum Global {
    Plain(Type),
    Role(NodeIndex, Arc<Type>),
    Memory,
    Tools,
}

/// A role's few-shot demos: `[]` unless it names a demos file (`rondo optimize`).
fn demos_type() -> Type {
    Type::list(Type::object(vec![
        (
            "inputs",
            Type::Map {
                value: Box::new(Type::Any),
            },
        ),
        ("reply", Type::Any),
    ]))
}

/// What every role's templates see alike, built once per workflow.
struct Shared {
    globals: BTreeMap<String, Global>,
    /// Memory slots by name: (id, type in templates).
    memory: BTreeMap<String, (usize, Type)>,
    /// What inline templates see: no `tools`, no `last_error`, only value memory.
    inline_globals: BTreeMap<String, Global>,
    value_memory: BTreeMap<String, (usize, Type)>,
}

impl Shared {
    fn new(workflow: &Workflow) -> Self {
        let mut globals = BTreeMap::new();
        let workers = workflow.map_workers();
        for (index, r) in workflow.roles() {
            // A map worker read by name is the list of its branch outputs.
            let ty = if workers.contains(&index) {
                Arc::new(Type::list((*r.output_type).clone()))
            } else {
                r.output_type.clone()
            };
            globals.insert(
                node_name(workflow, index).to_string(),
                Global::Role(index, ty),
            );
        }
        let inputs = Type::object(
            workflow
                .inputs
                .iter()
                .map(|i| (i.name.as_str(), i.ty.clone()))
                .collect(),
        );
        for (name, ty) in [
            ("input", inputs),
            ("round", Type::Int),
            ("step", Type::Int),
            ("visit", Type::Int),
            ("last_error", Type::optional(Type::String)),
            ("run_id", Type::String),
            ("role", Type::String),
            ("demos", demos_type()),
            ("__tera_context", Type::Any),
        ] {
            globals.insert(name.to_string(), Global::Plain(ty));
        }
        globals.insert("memory".to_string(), Global::Memory);
        globals.insert("tools".to_string(), Global::Tools);
        let memory = workflow
            .memory
            .iter()
            .enumerate()
            .map(|(id, m)| (m.name.clone(), (id, memory_type(&m.kind))))
            .collect();
        let mut inline_globals = globals.clone();
        inline_globals.remove("tools");
        inline_globals.remove("last_error");
        inline_globals.remove("demos");
        let value_memory = workflow
            .memory
            .iter()
            .enumerate()
            .filter(|(_, m)| matches!(m.kind, MemoryKind::Value { .. }))
            .map(|(id, m)| (m.name.clone(), (id, memory_type(&m.kind))))
            .collect();
        Shared {
            globals,
            memory,
            inline_globals,
            value_memory,
        }
    }
}

struct Walker<'a> {
    workflow: &'a Workflow,
    prompts: &'a Prompts,
    runs: Option<&'a DefiniteRuns>,
    role: NodeIndex,
    role_name: &'a str,
    rendered: &'a str,
    globals: &'a BTreeMap<String, Global>,
    memory: &'a BTreeMap<String, (usize, Type)>,
    /// The role's `tools`, as `tools` in its templates.
    tools: Type,
    reads: Vec<usize>,
    /// Loop variables and `set` values: (name, type, whether it surely exists here). A
    /// value set in one branch of an `{% if %}`, or by `set_global` in a loop that may not
    /// run, exists only sometimes after it.
    locals: Vec<(String, Type, bool)>,
    /// `set_global` values: they outlive the loop that set them.
    set_globals: Vec<(String, Type, bool)>,
    /// Paths proven present and not null by an enclosing `{% if %}`.
    guards: Vec<String>,
    loops: usize,
    files: Vec<FileCtx>,
    depth: usize,
    too_deep: bool,
    found: Vec<Diagnostic>,
    /// Set when the template is a string of the workflow file.
    inline: Option<Inline>,
}

impl<'a> Walker<'a> {
    fn new(
        workflow: &'a Workflow,
        prompts: &'a Prompts,
        runs: Option<&'a DefiniteRuns>,
        shared: &'a Shared,
        role: NodeIndex,
        rendered: &'a str,
    ) -> Self {
        let role_def = workflow.role(role);
        let tools = match role_def.map(|r| &r.kind) {
            Some(RoleKind::Llm(l)) => l.tools.clone(),
            _ => Vec::new(),
        };
        let tool_type = Type::object(vec![
            ("name", Type::String),
            ("usage", Type::String),
            ("executable", Type::String),
            ("input_schema", Type::Any),
        ]);
        let tools = Type::object(
            tools
                .iter()
                .filter_map(|&t| workflow.tools.get(t))
                .map(|t| (t.name(), tool_type.clone()))
                .collect(),
        );
        let reads = role_def.map(|r| r.reads.clone()).unwrap_or_default();
        Walker {
            workflow,
            prompts,
            runs,
            role,
            role_name: node_name(workflow, role),
            rendered,
            globals: &shared.globals,
            memory: &shared.memory,
            tools,
            reads,
            locals: Vec::new(),
            set_globals: Vec::new(),
            guards: Vec::new(),
            loops: 0,
            files: Vec::new(),
            depth: 0,
            too_deep: false,
            found: Vec::new(),
            inline: None,
        }
    }

    fn template(&mut self, name: &str) {
        let Ok(template) = self.prompts.tera.get_template(name) else {
            return;
        };
        let text = self.prompts.sources.get(name).cloned().unwrap_or_default();
        self.files.push(FileCtx::new(name, text));
        let locals = self.locals.len();
        self.nodes(&template.ast);
        self.locals.truncate(locals);
        self.files.pop();
    }

    fn file_name(&self) -> &str {
        self.files.last().map_or(self.rendered, |f| f.name.as_str())
    }

    /// The template, as messages name it.
    fn what(&self) -> String {
        match &self.inline {
            Some(i) => i.what.clone(),
            None => format!("template `{}`", self.file_name()),
        }
    }

    /// When the template renders, as messages say it.
    fn when(&self) -> String {
        match self.inline.as_ref().map(|i| i.when) {
            None | Some(When::Before) => format!("when `{}` starts", self.role_name),
            Some(When::After) => format!("after `{}` ran", self.role_name),
            Some(When::Always) => "after a step".to_string(),
        }
    }

    /// Whether `node` surely has a valid output where the template renders.
    fn surely_ran(&self, node: NodeIndex) -> bool {
        let Some(runs) = self.runs else {
            return true;
        };
        match self.inline.as_ref().map(|i| i.when) {
            None | Some(When::Before) => runs.has(self.role, node),
            Some(When::After) => runs.has_after(self.role, node),
            Some(When::Always) => runs.has_always(node),
        }
    }

    fn locate(&mut self, needle: &str) -> Option<usize> {
        self.files.last_mut().and_then(|f| f.locate(needle))
    }

    /// A diagnostic at `span` of the current template file.
    fn report(&mut self, code: Code, message: String, span: Span, label: String) -> usize {
        if let Some(inline) = &self.inline {
            // Inside the string when it maps byte for byte, else the whole string.
            let at = match inline.text_start {
                Some(start) if !span.is_empty() => Span::new(start + span.start, start + span.end),
                _ => inline.span,
            };
            self.found
                .push(Diagnostic::error(code, message).label(at, label));
            return self.found.len() - 1;
        }
        let role_span = self.workflow.node(self.role).span;
        let (path, text) = match self.files.last() {
            Some(f) => (self.prompts.dir.join(&f.name), f.text.clone()),
            None => (self.prompts.dir.join(self.rendered), Arc::from("")),
        };
        let span = Span::new(span.start.min(text.len()), span.end.min(text.len()));
        let via = match self.files.first() {
            Some(f) if self.files.len() > 1 => format!(
                "role `{}` renders `{}`, which includes `{}`",
                self.role_name,
                f.name,
                self.file_name()
            ),
            _ => format!("role `{}` renders `{}`", self.role_name, self.rendered),
        };
        self.found.push(
            Diagnostic::error(code, message)
                .label(role_span, via)
                .external(ExternalLabel::new(&path, text, span, label)),
        );
        self.found.len() - 1
    }

    fn help(&mut self, at: usize, help: Option<String>) {
        if let (Some(d), Some(h)) = (self.found.get_mut(at), help) {
            d.help = Some(h);
        }
    }

    /// Enters one level of nesting; false (reported once) past [`MAX_DEPTH`].
    fn enter(&mut self) -> bool {
        self.depth += 1;
        if self.depth <= MAX_DEPTH {
            return true;
        }
        if !self.too_deep {
            self.too_deep = true;
            let what = self.what();
            let at = self.report(
                Code::TemplateTooDeep,
                format!("{what} nests deeper than {MAX_DEPTH} levels"),
                Span::default(),
                "checked up to here".into(),
            );
            self.help(
                at,
                Some("flatten it: move nested parts into partials or simpler conditions".into()),
            );
        }
        false
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Takes the locals and `set_global` values set since the given lengths.
    fn take_sets(&mut self, locals: usize, globals: usize) -> Sets {
        (
            self.locals.split_off(locals.min(self.locals.len())),
            self.set_globals
                .split_off(globals.min(self.set_globals.len())),
        )
    }

    /// After a choice between branches: a value set in every branch surely exists, one set
    /// in some of them only sometimes (tera leaves it undefined on the other paths).
    fn merge_sets(&mut self, branches: Vec<Sets>) {
        fn merge(branches: Vec<&Vec<(String, Type, bool)>>) -> Vec<(String, Type, bool)> {
            let mut out: Vec<(String, Type, bool)> = Vec::new();
            for (name, ty, _) in branches.iter().flat_map(|b| b.iter()) {
                if out.iter().any(|(n, _, _)| n == name) {
                    continue;
                }
                let sure = branches.iter().all(|b| {
                    b.iter()
                        .rev()
                        .find(|(n, _, _)| n == name)
                        .is_some_and(|(_, _, s)| *s)
                });
                out.push((name.clone(), ty.clone(), sure));
            }
            out
        }
        let locals = merge(branches.iter().map(|b| &b.0).collect());
        let globals = merge(branches.iter().map(|b| &b.1).collect());
        for (name, ty, sure) in locals {
            // A value that surely existed before the choice still does.
            let before = self.local(&name).is_some_and(|(_, s)| s);
            self.locals.push((name, ty, sure || before));
        }
        for (name, ty, sure) in globals {
            let before = self.local(&name).is_some_and(|(_, s)| s);
            self.set_globals.push((name, ty, sure || before));
        }
    }

    /// The type of `item` in a map worker's templates: the items of the list its map
    /// routes go over, when that is a declared list (else `any`).
    fn item_type(&self) -> Type {
        let mut found: Option<Type> = None;
        for route in &self.workflow.routes {
            let RouteTarget::Map { worker, over, .. } = &route.target else {
                continue;
            };
            if *worker != self.role {
                continue;
            }
            let item = match over_type(self.workflow, over)
                .as_ref()
                .map(Type::strip_optional)
            {
                Some(Type::List { item }) => (**item).clone(),
                _ => Type::Any,
            };
            match &found {
                None => found = Some(item),
                Some(t) if *t == item => {}
                Some(_) => return Type::Any,
            }
        }
        found.unwrap_or(Type::Any)
    }

    /// A loop variable or `set` value by name: its type, and whether it surely exists.
    fn local(&self, name: &str) -> Option<(Type, bool)> {
        self.locals
            .iter()
            .rev()
            .chain(self.set_globals.iter().rev())
            .find(|(n, _, _)| n == name)
            .map(|(_, t, sure)| (t.clone(), *sure))
    }

    fn nodes(&mut self, nodes: &[Node]) {
        if !self.enter() {
            self.leave();
            return;
        }
        for node in nodes {
            self.node(node);
        }
        self.leave();
    }

    fn node(&mut self, node: &Node) {
        match node {
            Node::VariableBlock(_, e) => {
                self.expr(e, Mode::Render);
            }
            Node::Set(_, set) => {
                // The name written here is not a read: later reads are located past it.
                self.locate(&set.key);
                let ty = self.expr(&set.value, Mode::Render);
                if set.global {
                    self.set_globals.push((set.key.clone(), ty, true));
                } else {
                    self.locals.push((set.key.clone(), ty, true));
                }
            }
            Node::Forloop(_, f, _) => self.for_loop(f),
            Node::If(i, _) => {
                let guards = self.guards.len();
                let (locals, globals) = (self.locals.len(), self.set_globals.len());
                // What each branch set: only what every branch sets surely exists after.
                let mut branches = Vec::new();
                for (_, cond, body) in &i.conditions {
                    let (yes, no) = self.condition(cond);
                    let before = self.guards.len();
                    self.guards.extend(yes);
                    self.nodes(body);
                    self.guards.truncate(before);
                    self.guards.extend(no);
                    branches.push(self.take_sets(locals, globals));
                }
                if let Some((_, body)) = &i.otherwise {
                    self.nodes(body);
                    branches.push(self.take_sets(locals, globals));
                } else {
                    branches.push(Default::default());
                }
                self.guards.truncate(guards);
                self.merge_sets(branches);
            }
            Node::FilterSection(_, f, _) => {
                self.filter(Type::String, &f.filter, Mode::Render, None);
                self.nodes(&f.body);
            }
            Node::Block(_, b, _) => self.nodes(&b.body),
            Node::Include(_, names, ignore_missing) => self.include(names, *ignore_missing),
            // Macros render in a frame of their own arguments; their bodies are not walked.
            _ => {}
        }
    }

    fn include(&mut self, names: &[String], ignore_missing: bool) {
        let broken = names
            .iter()
            .find_map(|n| self.prompts.errors.get(n).map(|e| (n, e)));
        if let (Some((name, error)), None) = (broken, self.inline.as_ref()) {
            let renders = format!(
                "role `{}` renders `{}`, which includes `{name}`",
                self.role_name,
                self.file_name()
            );
            let role_span = self.workflow.node(self.role).span;
            let d = template_error(self.workflow, name, role_span, renders, error);
            self.found.push(d);
            return;
        }
        let Some(name) = names.iter().find(|n| self.prompts.has(n)) else {
            if !ignore_missing {
                let shown = names.join("`, `");
                let start = names.first().and_then(|n| self.locate(n)).unwrap_or(0);
                let len = names.first().map_or(0, String::len);
                let at = self.report(
                    Code::TemplateMissing,
                    format!("{} includes `{shown}`, which does not exist", self.what()),
                    Span::new(start, start + len),
                    format!("no file in {}", self.prompts.dir.display()),
                );
                let names: Vec<String> = self
                    .prompts
                    .tera
                    .get_template_names()
                    .map(str::to_string)
                    .collect();
                let help = names
                    .first()
                    .and_then(|_| did_you_mean(&shown, names.iter().map(String::as_str)));
                self.help(at, help);
            }
            return;
        };
        let start = names.first().and_then(|n| self.locate(n)).unwrap_or(0);
        if self.files.iter().any(|f| &f.name == name) {
            let file = self.file_name().to_string();
            let at = self.report(
                Code::TemplateTooDeep,
                format!("template `{file}` includes `{name}`, which includes it again"),
                Span::new(start, start + name.len()),
                "include cycle".into(),
            );
            self.help(
                at,
                Some("an include cycle never ends rendering: break it".into()),
            );
            return;
        }
        if !self.enter() {
            self.leave();
            return;
        }
        self.template(name);
        self.leave();
    }

    fn for_loop(&mut self, f: &tera::ast::Forloop) {
        let container = self.expr(&f.container, Mode::Render);
        let path = match &f.container.val {
            ExprVal::Ident(id) if f.container.filters.is_empty() => {
                let (root, segs) = parse_ident(id);
                Some(normalize(&root, &segs))
            }
            _ => None,
        };
        let shown = path.clone().unwrap_or_else(|| "the container".into());
        if matches!(container, Type::Optional { .. } | Type::Null)
            && !path.as_ref().is_some_and(|p| self.guards.contains(p))
        {
            let start = self.container_start(f);
            let at = self.report(
                Code::TemplateMaybeNull,
                format!("`{{% for %}}` loops over `{shown}`, which may be null"),
                Span::new(start, start + shown.len()),
                format!("`{shown}` is {}", short(&container)),
            );
            self.help(
                at,
                Some(format!(
                    "guard the loop: `{{% if {shown} %}}{{% for ... %}}...{{% endfor %}}{{% endif %}}`"
                )),
            );
        }
        let inner = container.strip_optional().clone();
        let (key, value) = match (&f.key, &inner) {
            (_, Type::Any | Type::Null) => (Type::Any, Type::Any),
            (None, Type::List { item }) => (Type::Any, (**item).clone()),
            (None, Type::String | Type::Literal { .. }) => (Type::Any, Type::String),
            (Some(_), Type::Map { value }) => (Type::String, (**value).clone()),
            (Some(_), Type::Object { fields, .. }) => {
                let first = fields.first().map(|f| f.ty.clone());
                let same = fields.iter().all(|f| Some(&f.ty) == first.as_ref());
                (
                    Type::String,
                    if same {
                        first.unwrap_or(Type::Any)
                    } else {
                        Type::Any
                    },
                )
            }
            (_, Type::Union { .. }) => (Type::Any, Type::Any),
            _ => {
                let wanted = if f.key.is_some() {
                    "a map (`for key, value in ...`)"
                } else if matches!(inner, Type::Map { .. } | Type::Object { .. }) {
                    "a list: a map is looped over as `for key, value in ...`"
                } else {
                    "a list"
                };
                let start = self.container_start(f);
                let at = self.report(
                    Code::TemplateLoopTarget,
                    format!(
                        "`{{% for %}}` loops over `{shown}`, which is {}",
                        short(&container)
                    ),
                    Span::new(start, start + shown.len()),
                    format!("not {wanted}"),
                );
                self.help(at, Some(format!("loop over {wanted}")));
                (Type::Any, Type::Any)
            }
        };
        for name in f.key.iter().chain([&f.value]) {
            self.locate(name);
        }
        let locals = self.locals.len();
        let globals = self.set_globals.len();
        if let Some(k) = &f.key {
            self.locals.push((k.clone(), key, true));
        }
        self.locals.push((f.value.clone(), value, true));
        self.loops += 1;
        self.nodes(&f.body);
        self.loops -= 1;
        self.locals.truncate(locals);
        // The body may run no time at all, and the `{% else %}` body only then.
        let in_body = self.take_sets(locals, globals);
        let mut branches = vec![in_body];
        if let Some(body) = &f.empty_body {
            self.nodes(body);
            branches.push(self.take_sets(locals, globals));
        }
        for sets in &mut branches {
            sets.0.clear();
        }
        if f.empty_body.is_none() {
            branches.push(Default::default());
        }
        self.merge_sets(branches);
    }

    /// Where a loop's container is written (already located once by [`Self::expr`]).
    fn container_start(&mut self, f: &tera::ast::Forloop) -> usize {
        let ExprVal::Ident(id) = &f.container.val else {
            return 0;
        };
        let file = self.files.last();
        let Some(file) = file else { return 0 };
        file.last_located(id).unwrap_or(0)
    }

    /// Walks an `{% if %}` condition; returns what holds in its body and what holds after
    /// it turned out false.
    fn condition(&mut self, e: &Expr) -> (Vec<String>, Vec<String>) {
        if !self.enter() {
            self.leave();
            return (Vec::new(), Vec::new());
        }
        let (mut yes, mut no) = (Vec::new(), Vec::new());
        match &e.val {
            ExprVal::Ident(id) => {
                self.expr(e, Mode::Tolerant);
                if e.filters.is_empty() {
                    let (root, segs) = parse_ident(id);
                    yes = prefixes(&root, &segs);
                }
            }
            ExprVal::Logic(l) if matches!(l.operator, LogicOperator::And | LogicOperator::Or) => {
                let and = l.operator == LogicOperator::And;
                let (y1, n1) = self.condition(&l.lhs);
                let before = self.guards.len();
                self.guards
                    .extend(if and { y1.clone() } else { n1.clone() });
                let (y2, n2) = self.condition(&l.rhs);
                self.guards.truncate(before);
                if and {
                    yes = [y1, y2].concat();
                } else {
                    no = [n1, n2].concat();
                }
            }
            ExprVal::Test(t) => {
                self.test(t);
                if t.name == "defined" || t.name == "undefined" {
                    // `x is defined` holds for a null `x`: it proves only what leads to it,
                    // and that `x` itself exists (a value that exists only sometimes).
                    let (root, segs) = parse_ident(&t.ident);
                    let mut p = prefixes(&root, &segs);
                    p.pop();
                    p.push(defined_guard(&root));
                    if (t.name == "defined") != t.negated {
                        yes = p;
                    } else {
                        no = p;
                    }
                }
            }
            _ => {
                self.expr(e, Mode::Render);
            }
        }
        self.leave();
        if e.negated && !matches!(e.val, ExprVal::Ident(_)) {
            (no, yes)
        } else if e.negated {
            (Vec::new(), yes)
        } else {
            (yes, no)
        }
    }

    fn test(&mut self, t: &tera::ast::Test) {
        let mode = if t.name == "defined" || t.name == "undefined" {
            Mode::Tolerant
        } else {
            Mode::Render
        };
        let ty = self.read(&t.ident, mode);
        let needs = match t.name.as_str() {
            "odd" | "even" | "divisibleby" => Some(Needs::Number),
            "starting_with" | "ending_with" | "matching" => Some(Needs::Text),
            "containing" => Some(Needs::Container),
            _ => None,
        };
        if let Some(needs) = needs {
            let subject = Expr::new(ExprVal::Ident(t.ident.clone()));
            let _ = self.operand(&subject, &ty, &format!("is {}", t.name), needs);
        }
        if !TESTERS.contains(&t.name.as_str()) {
            self.unknown_callable("test", &t.name, TESTERS);
        }
        for a in &t.args {
            self.expr(a, Mode::Render);
        }
    }

    /// An operand of an operator or test that tera evaluates only on some kinds of value:
    /// a known type of another kind, or one that may be null unguarded, fails the
    /// rendering. A value typed `any` is the run's to tell (a failure there ends the run
    /// at `invalid_output`).
    fn operand(&mut self, e: &Expr, ty: &Type, op: &str, needs: Needs) -> bool {
        let path = match &e.val {
            ExprVal::Ident(id) if e.filters.is_empty() => {
                let (root, segs) = parse_ident(id);
                Some(normalize(&root, &segs))
            }
            _ => None,
        };
        let inner = ty.strip_optional();
        let fits = |t: &Type| match needs {
            Needs::Number => matches!(t, Type::Int | Type::Float),
            Needs::Text => t.is_stringy(),
            Needs::TextOrNumber => t.is_stringy() || matches!(t, Type::Int | Type::Float),
            Needs::Container => {
                t.is_stringy()
                    || matches!(
                        t,
                        Type::List { .. } | Type::Map { .. } | Type::Object { .. }
                    )
            }
        };
        let unknown = match inner {
            Type::Any => true,
            Type::Union { members } => !members.iter().all(|m| fits(m.strip_optional())),
            _ => false,
        };
        let kind = match needs {
            Needs::Number => "a number",
            Needs::Text => "a string",
            Needs::TextOrNumber => "a string or a number",
            Needs::Container => "a list, a map or a string",
        };
        let shown = match (&path, &e.val) {
            (Some(p), _) => p.clone(),
            (None, ExprVal::String(s)) => format!("{s:?}"),
            (None, ExprVal::Bool(b)) => b.to_string(),
            _ => "the value".to_string(),
        };
        let wrong = !unknown && !matches!(inner, Type::Null) && !fits(inner);
        let null = !wrong
            && !unknown
            && matches!(ty, Type::Optional { .. } | Type::Null)
            && !path.as_ref().is_some_and(|p| self.guarded(p));
        if !wrong && !null {
            return false;
        }
        let (start, len) = match &e.val {
            ExprVal::Ident(id) => (self.last_seen(id), shown.len()),
            ExprVal::String(_) => {
                let start = self.locate(&shown);
                (start.unwrap_or(0), start.map_or(0, |_| shown.len()))
            }
            _ => (0, 0),
        };
        let (message, help) = if wrong {
            (
                format!("`{op}` needs {kind}, but `{shown}` is {}", short(ty)),
                format!(
                    "give `{op}` {kind}{}",
                    if needs == Needs::Number {
                        " (tera compares and computes with numbers only; `==` compares anything)"
                    } else {
                        ""
                    }
                ),
            )
        } else {
            (
                format!("`{op}` fails when `{shown}` is null"),
                format!(
                    "guard it: `{{% if {shown} %}}...{{% endif %}}`, or give a default first: `{shown} | default(value=...)`"
                ),
            )
        };
        let code = if wrong {
            Code::TemplateOperand
        } else {
            Code::TemplateMaybeNull
        };
        let at = self.report(
            code,
            message,
            Span::new(start, start + len),
            format!("`{shown}` is {}", short(ty)),
        );
        self.help(at, Some(help));
        true
    }

    /// Where the identifier met last was written (already located by [`Self::read`]).
    fn last_seen(&mut self, id: &str) -> usize {
        let Some(file) = self.files.last() else {
            return 0;
        };
        file.last_located(id).unwrap_or(0)
    }

    fn unknown_callable(&mut self, what: &str, name: &str, known: &[&str]) {
        let start = self.locate(name).unwrap_or(0);
        let at = self.report(
            Code::TemplateUnknownFilter,
            format!("unknown {what} `{name}`"),
            Span::new(start, start + name.len()),
            format!("no {what} of this name"),
        );
        self.help(at, Some(callable_help(what, name, known)));
    }

    /// The type of an expression, reporting what fails in it.
    fn expr(&mut self, e: &Expr, mode: Mode) -> Type {
        if !self.enter() {
            self.leave();
            return Type::Any;
        }
        let defaulted = e.has_default_filter();
        let mut ty = match &e.val {
            ExprVal::String(_) => Type::String,
            ExprVal::Int(_) => Type::Int,
            ExprVal::Float(_) => Type::Float,
            ExprVal::Bool(_) => Type::Bool,
            ExprVal::Ident(id) => {
                let tolerant = defaulted || e.negated || mode == Mode::Tolerant;
                self.read(
                    id,
                    if tolerant {
                        Mode::Tolerant
                    } else {
                        Mode::Render
                    },
                )
            }
            ExprVal::Math(m) => self.math(m),
            ExprVal::Logic(l) => {
                self.logic(e, l);
                Type::Bool
            }
            ExprVal::In(i) => {
                self.contains(i);
                Type::Bool
            }
            ExprVal::Test(t) => {
                self.test(t);
                Type::Bool
            }
            ExprVal::FunctionCall(f) => {
                if !FUNCTIONS.contains(&f.name.as_str()) {
                    self.unknown_callable("function", &f.name, FUNCTIONS);
                }
                self.args(f);
                if f.name == "range" {
                    Type::list(Type::Int)
                } else {
                    Type::Any
                }
            }
            ExprVal::MacroCall(m) => {
                let mut args: Vec<_> = m.args.iter().collect();
                args.sort_by_key(|(k, _)| k.as_str());
                for (_, a) in args {
                    self.expr(a, Mode::Render);
                }
                Type::String
            }
            ExprVal::Array(items) => {
                let mut item = None;
                for i in items {
                    let t = self.expr(i, Mode::Render);
                    item.get_or_insert(t);
                }
                Type::list(item.unwrap_or(Type::Any))
            }
            ExprVal::StringConcat(s) => {
                self.concat(s);
                Type::String
            }
        };
        let path = match &e.val {
            ExprVal::Ident(id) => {
                let (root, segs) = parse_ident(id);
                Some(normalize(&root, &segs))
            }
            _ => None,
        };
        let mut first = true;
        for f in &e.filters {
            let input_path = if first { path.clone() } else { None };
            first = false;
            let m = if mode == Mode::Tolerant {
                Mode::Tolerant
            } else {
                Mode::Render
            };
            ty = self.filter(ty, f, m, input_path);
        }
        self.leave();
        if e.negated { Type::Bool } else { ty }
    }

    fn math(&mut self, m: &MathExpr) -> Type {
        let l = self.expr(&m.lhs, Mode::Render);
        let r = self.expr(&m.rhs, Mode::Render);
        let op = m.operator.to_string();
        // One fault per operator: the first operand that cannot take it.
        let _ = self.operand(&m.lhs, &l, &op, Needs::Number)
            || self.operand(&m.rhs, &r, &op, Needs::Number);
        if matches!((&l, &r), (Type::Int, Type::Int)) {
            Type::Int
        } else {
            Type::Float
        }
    }

    /// A comparison, or `and` / `or` (`e` is the whole expression).
    fn logic(&mut self, e: &Expr, l: &LogicExpr) {
        if matches!(l.operator, LogicOperator::And | LogicOperator::Or) {
            self.condition(e);
            return;
        }
        let lt = self.expr(&l.lhs, Mode::Render);
        let rt = self.expr(&l.rhs, Mode::Render);
        // Tera orders numbers only: a string, or null, fails the comparison.
        if !matches!(l.operator, LogicOperator::Eq | LogicOperator::NotEq) {
            let op = l.operator.to_string();
            let _ = self.operand(&l.lhs, &lt, &op, Needs::Number)
                || self.operand(&l.rhs, &rt, &op, Needs::Number);
        }
    }

    /// `a in b`.
    fn contains(&mut self, i: &In) {
        let lt = self.expr(&i.lhs, Mode::Render);
        let rt = self.expr(&i.rhs, Mode::Render);
        let reported = self.operand(&i.rhs, &rt, "in", Needs::Container);
        // In a string or a map's keys, only a string is looked for.
        if !reported
            && matches!(
                rt.strip_optional(),
                Type::String
                    | Type::WorkspacePath
                    | Type::Literal { .. }
                    | Type::Map { .. }
                    | Type::Object { .. }
            )
        {
            let _ = self.operand(&i.lhs, &lt, "in", Needs::Text);
        }
    }

    /// `a ~ b`.
    fn concat(&mut self, s: &StringConcat) {
        for v in &s.values {
            match v {
                ExprVal::Ident(id) => {
                    let ty = self.read(id, Mode::Render);
                    let part = Expr::new(ExprVal::Ident(id.clone()));
                    let _ = self.operand(&part, &ty, "~", Needs::TextOrNumber);
                }
                ExprVal::FunctionCall(f) => {
                    self.args(f);
                }
                _ => {}
            }
        }
    }

    fn args(&mut self, f: &FunctionCall) -> BTreeMap<String, Type> {
        let mut args: Vec<_> = f.args.iter().collect();
        args.sort_by_key(|(k, _)| k.as_str());
        args.into_iter()
            .map(|(k, a)| (k.clone(), self.expr(a, Mode::Render)))
            .collect()
    }

    /// The type a filter gives, reporting a value it cannot take.
    fn filter(&mut self, input: Type, f: &FunctionCall, mode: Mode, path: Option<String>) -> Type {
        let name = f.name.as_str();
        let start = self.locate(name).unwrap_or(0);
        let span = Span::new(start, start + name.len());
        let args = self.args(f);
        if !FILTERS.contains(&name) {
            self.unknown_callable_at("filter", name, FILTERS, span);
            return Type::Any;
        }
        let shown = path.clone().unwrap_or_else(|| "the value".into());
        let inner = input.strip_optional().clone();
        if let Some((kind, ok)) = filter_needs(name) {
            let known = !matches!(inner, Type::Any | Type::Union { .. } | Type::Null);
            if known && !ok(&inner) {
                let at = self.report(
                    Code::TemplateFilterInput,
                    format!(
                        "filter `{name}` needs {kind}, but `{shown}` is {}",
                        short(&input)
                    ),
                    span,
                    format!("needs {kind}"),
                );
                self.help(
                    at,
                    Some(format!("give `{name}` {kind}, or drop the filter")),
                );
                return Type::Any;
            }
            let maybe_null = matches!(input, Type::Optional { .. } | Type::Null);
            if maybe_null
                && mode == Mode::Render
                && !path.as_ref().is_some_and(|p| self.guards.contains(p))
            {
                let at = self.report(
                    Code::TemplateMaybeNull,
                    format!("`{shown} | {name}` fails when `{shown}` is null"),
                    span,
                    format!("`{shown}` is {}", short(&input)),
                );
                self.help(
                    at,
                    Some(format!(
                        "guard it: `{{% if {shown} %}}...{{% endif %}}`, or give a default first: `{shown} | default(value=...) | {name}`"
                    )),
                );
            }
        }
        if let Some(arg) = filter_required(name)
            .iter()
            .find(|a| !f.args.contains_key(**a))
        {
            let at = self.report(
                Code::TemplateFilterInput,
                format!("filter `{name}` needs its `{arg}` argument"),
                span,
                format!("no `{arg}`"),
            );
            self.help(at, Some(format!("give it: `{name}({arg}=...)`")));
            return Type::Any;
        }
        if name == "get" && mode == Mode::Render && self.get_may_fail(f, &input, &shown, span) {
            return Type::Any;
        }
        let item = match &inner {
            Type::List { item } => (**item).clone(),
            _ => Type::Any,
        };
        if let ("map" | "filter" | "group_by" | "sort", Some(attr)) =
            (name, f.args.get("attribute"))
            && let ExprVal::String(attr) = &attr.val
        {
            self.attribute(&item, attr);
        }
        filter_output(f, input, inner, item, &args)
    }

    /// `get` of a key the value does not have fails unless a default is given (a map's
    /// keys are known only at run time): reports it.
    fn get_may_fail(&mut self, f: &FunctionCall, input: &Type, shown: &str, span: Span) -> bool {
        if f.args.contains_key("default") {
            return false;
        }
        let inner = input.strip_optional();
        let key = match f.args.get("key").map(|a| &a.val) {
            Some(ExprVal::String(k)) => Some(k.clone()),
            _ => None,
        };
        let absent = match (inner, &key) {
            (Type::Map { .. }, _) => true,
            (Type::Object { .. }, None) => true,
            (Type::Object { .. }, Some(k)) => inner.field(k).is_none(),
            _ => false,
        };
        if absent {
            let shown_key = key.map_or("the key".to_string(), |k| format!("`{k}`"));
            let at = self.report(
                Code::TemplateMaybeNull,
                format!("`{shown} | get` fails when `{shown}` has no {shown_key}"),
                span,
                format!("`{shown}` is {}", short(input)),
            );
            self.help(
                at,
                Some("give a default: `get(key=..., default=...)`".to_string()),
            );
        }
        absent
    }

    fn unknown_callable_at(&mut self, what: &str, name: &str, known: &[&str], span: Span) {
        let at = self.report(
            Code::TemplateUnknownFilter,
            format!("unknown {what} `{name}`"),
            span,
            format!("no {what} of this name"),
        );
        self.help(at, Some(callable_help(what, name, known)));
    }

    /// `attribute="a.b"` of `map`, `filter`, `group_by`, `sort`: a path in each item.
    fn attribute(&mut self, item: &Type, attr: &str) {
        let start = self.locate(attr);
        let mut ty = item.clone();
        let mut offset = 0;
        for name in attr.split('.') {
            let inner = ty.strip_optional().clone();
            if matches!(inner, Type::Any | Type::Union { .. }) {
                return;
            }
            match inner.field(name) {
                Some(t) => ty = t,
                None => {
                    let begin = start.map_or(0, |s| s + offset);
                    let at = self.report(
                        Code::TemplateUnknownField,
                        format!("the items have no field `{name}` (in `attribute=\"{attr}\"`)"),
                        Span::new(begin, begin + name.len()),
                        format!("items are {}", short(&inner)),
                    );
                    let names = inner.field_names();
                    let help = did_you_mean(name, names.iter().map(String::as_str))
                        .or_else(|| fields_help(&names));
                    self.help(at, help);
                    return;
                }
            }
            offset += name.len() + 1;
        }
    }

    fn guarded(&self, path: &str) -> bool {
        self.guards.iter().any(|g| g == path)
    }

    /// Reads an identifier (`a.b[0].c`), checking each step; returns its type.
    fn read(&mut self, ident: &str, mode: Mode) -> Type {
        let (root, segs) = parse_ident(ident);
        let id = Ident {
            start: self.locate(ident),
            root,
            segs,
        };
        // The computed indexes are reads of their own.
        for (seg, _, _) in &id.segs {
            if let Seg::Dynamic(inner) = seg {
                self.read(inner, Mode::Render);
            }
        }
        // A role's output read by name: its maps are a reply's (or a tool's), whose keys
        // are the model's choice.
        let from_output = self.local(&id.root).is_none()
            && matches!(self.globals.get(&id.root), Some(Global::Role(..)));
        let Some((mut ty, skipped)) = self.root_type(&id, mode) else {
            return Type::Any;
        };
        for i in skipped..id.segs.len() {
            match self.step(&id, ty, i, mode, from_output) {
                Some(next) => ty = next,
                None => return Type::Any,
            }
        }
        ty
    }

    /// The type of the identifier's root (with the segments it takes: `memory.NAME`
    /// takes one); `None` once a fault is reported (or nothing can be known).
    fn root_type(&mut self, id: &Ident, mode: Mode) -> Option<(Type, usize)> {
        let root = id.root.as_str();
        let defined = self.guarded(root) || self.guarded(&defined_guard(root));
        match self.local(root) {
            Some((_, false)) if mode == Mode::Render && !defined => {
                let at_ = self.report(
                    Code::TemplateUnknownVariable,
                    format!(
                        "{} uses `{root}`, which is set only on some paths before this point",
                        self.what()
                    ),
                    id.at(0, root.len()),
                    "may not be set here".into(),
                );
                self.help(
                    at_,
                    Some(format!(
                        "set it before the `{{% if %}}` or loop (or in every branch, `{{% else %}}` included), or guard the read: `{{% if {root} is defined %}}...{{% endif %}}`"
                    )),
                );
                None
            }
            Some((t, _)) => Some((t, 0)),
            // `item` exists only in a map branch: elsewhere it is not defined at all.
            None if root == "item" && !self.workflow.is_map_worker(self.role) => {
                if mode == Mode::Render && !defined {
                    self.item_outside_map_worker(id);
                }
                None
            }
            None if root == "item" => Some((self.item_type(), 0)),
            None if root == "loop" && self.loops > 0 => Some((
                Type::object(vec![
                    ("index", Type::Int),
                    ("index0", Type::Int),
                    ("first", Type::Bool),
                    ("last", Type::Bool),
                ]),
                0,
            )),
            None => self.global_type(id, mode),
        }
    }

    fn item_outside_map_worker(&mut self, id: &Ident) {
        let whose = match &self.inline {
            Some(i) => i.what.clone(),
            None => format!(
                "template `{}` of role `{}`",
                self.file_name(),
                self.role_name
            ),
        };
        let at_ = self.report(
            Code::TemplateUnknownVariable,
            format!("{whose} uses `item`, which exists only in the templates of a map worker"),
            id.at(0, id.root.len()),
            "not defined here".into(),
        );
        self.help(
            at_,
            Some(format!(
                "`item` is the item of `map ROLE over LIST`, seen by ROLE only; `{}` is not a map worker. In a partial shared with one, guard it: `{{% if item is defined %}}...{{% endif %}}`",
                self.role_name
            )),
        );
    }

    /// The type of a root that is no local: a global, `memory.NAME`, a role's output.
    fn global_type(&mut self, id: &Ident, mode: Mode) -> Option<(Type, usize)> {
        let root = id.root.as_str();
        match self.globals.get(root).cloned() {
            Some(Global::Tools) => Some((self.tools.clone(), 0)),
            Some(Global::Plain(t)) => {
                if root == "input"
                    && let Some((Seg::Field(name), from, to)) = id.segs.first()
                    && t.field(name).is_none()
                {
                    let names = t.field_names();
                    let at_ = self.report(
                        Code::TemplateUnknownInput,
                        format!(
                            "{} reads `input.{name}`, which is not an input",
                            self.what()
                        ),
                        id.at(*from, *to),
                        "not declared".into(),
                    );
                    let help = did_you_mean(name, names.iter().map(String::as_str))
                        .unwrap_or_else(|| "declare it: `input NAME: type`".into());
                    self.help(at_, Some(help));
                    return None;
                }
                Some((t, 0))
            }
            Some(Global::Memory) => self.memory_type(id).map(|t| (t, 1)),
            Some(Global::Role(node, t)) => {
                let pseudo = matches!(id.segs.first(), Some((Seg::Field(f), _, _)) if f == "invalid" || f == "invalid_reply");
                if pseudo {
                    return None;
                }
                if mode == Mode::Render && !self.surely_ran(node) && !self.guarded(root) {
                    // One report per read: the fields below are still typed.
                    self.may_not_have_run(id);
                }
                Some(((*t).clone(), 0))
            }
            None => {
                self.unknown_root(id);
                None
            }
        }
    }

    /// The type of `memory.NAME`, when the template may read it.
    fn memory_type(&mut self, id: &Ident) -> Option<Type> {
        let Some((Seg::Field(name), from, to)) = id.segs.first() else {
            return None;
        };
        match self.memory.get(name).cloned() {
            None => {
                let names: Vec<String> = self.memory.keys().cloned().collect();
                let declared = self.workflow.memory.iter().any(|m| &m.name == name);
                let why = if declared {
                    "is not a value slot (only those are in inline templates)"
                } else {
                    "is not declared"
                };
                let at_ = self.report(
                    Code::TemplateUnknownMemory,
                    format!("{} reads `memory.{name}`, which {why}", self.what()),
                    id.at(*from, *to),
                    if declared {
                        "not a value slot"
                    } else {
                        "no such memory"
                    }
                    .into(),
                );
                let help = if declared {
                    "copy what it needs into a value slot with an update (`set x = ...`), or render it in a prompt".to_string()
                } else {
                    did_you_mean(name, names.iter().map(String::as_str))
                        .unwrap_or_else(|| "declare it in `memory { ... }`".into())
                };
                self.help(at_, Some(help));
                None
            }
            Some((slot, _)) if self.inline.is_none() && !self.reads.contains(&slot) => {
                let at_ = self.report(
                    Code::TemplateMemoryNotRead,
                    format!(
                        "template `{}` reads `memory.{name}`, but role `{}` does not declare it",
                        self.file_name(),
                        self.role_name
                    ),
                    id.at(*from, *to),
                    "missing from the role's `reads`".into(),
                );
                self.help(at_, Some(format!("add it: `reads = [{name}]`")));
                None
            }
            Some((_, t)) => Some(t),
        }
    }

    fn may_not_have_run(&mut self, id: &Ident) {
        let root = id.root.as_str();
        let at_ = self.report(
            Code::TemplateMayNotHaveRun,
            format!(
                "{} reads `{root}`, which may have no valid output {}",
                self.what(),
                self.when()
            ),
            id.at(0, root.len()),
            format!("null until `{root}` runs with a valid reply"),
        );
        self.help(
            at_,
            Some(format!(
                "guard it: `{{% if {root} %}}...{{% endif %}}`, give a default (`{} | default(value=\"\")`), or route so that `{root}` surely runs before `{}`",
                normalize(root, &id.segs),
                self.role_name
            )),
        );
    }

    fn unknown_root(&mut self, id: &Ident) {
        let root = id.root.as_str();
        let mut candidates: Vec<String> = self
            .locals
            .iter()
            .chain(&self.set_globals)
            .map(|(n, _, _)| n.clone())
            .collect();
        candidates.extend(
            self.globals
                .keys()
                .filter(|k| !k.starts_with("__") && *k != "role")
                .cloned(),
        );
        let message = match &self.inline {
            Some(i) => {
                format!("{} uses `{root}`, which is not defined there", i.what)
            }
            None => format!(
                "template `{}` uses `{root}`, which role `{}` will not have",
                self.file_name(),
                self.role_name
            ),
        };
        let at_ = self.report(
            Code::TemplateUnknownVariable,
            message,
            id.at(0, root.len()),
            "not defined here".into(),
        );
        let roots = if self.inline.is_some() {
            INLINE_ROOTS
        } else {
            PROMPT_ROOTS
        };
        let by_name = (self.inline.is_some() && root == "output").then(|| {
            format!(
                "read the role's output by its name: `{}`",
                normalize(self.role_name, &id.segs)
            )
        });
        let help = by_name
            .or_else(|| did_you_mean(root, candidates.iter().map(String::as_str)))
            .unwrap_or_else(|| {
                format!(
                    "templates see: {}, and each role's latest output by role name",
                    roots.join(", ")
                )
            });
        self.help(at_, Some(help));
    }

    /// The type after segment `i` of a value of type `ty`; `None` once a fault is reported
    /// (or nothing more can be known).
    fn step(
        &mut self,
        id: &Ident,
        ty: Type,
        i: usize,
        mode: Mode,
        from_output: bool,
    ) -> Option<Type> {
        let (root, segs) = (id.root.as_str(), id.segs.as_slice());
        let (seg, from, to) = &segs[i];
        let prefix = normalize(root, &segs[..i]);
        let whole = normalize(root, &segs[..i + 1]);
        // Tera fails on a key a value does not have: a value typed `any` (a tool's
        // `data`) may lack any, and so may every map: a reply's (`action_params`), a
        // memory map the workflow fills itself, an input map.
        let open_map = matches!(ty, Type::Map { .. });
        if (matches!(ty, Type::Any) || open_map) && mode == Mode::Render && !self.guarded(&whole) {
            let kind = match (open_map, from_output) {
                (true, true) => "a map in a role's output",
                (true, false) => "a map, whose keys are known only at run time",
                (false, _) => "typed `any`",
            };
            let message =
                format!("`{prefix}` is {kind}, so reading `{whole}` fails when it has no such key");
            self.unsafe_step(
                id,
                message,
                *to,
                format!("`{prefix}` may not have it"),
                &whole,
            );
            return None;
        }
        if matches!(ty, Type::Any) {
            return None;
        }
        if matches!(ty, Type::Optional { .. } | Type::Null)
            && mode == Mode::Render
            && !self.guarded(&prefix)
        {
            let message = format!("`{prefix}` may be null here, so reading `{whole}` fails");
            let label = format!("`{prefix}` is {}", short(&ty));
            self.unsafe_step(id, message, *to, label, &prefix);
            return None;
        }
        let inner = match ty.strip_optional() {
            Type::Null => return None,
            t => t.clone(),
        };
        Some(match (seg, &inner) {
            (Seg::Dynamic(_), Type::List { item }) => {
                // A computed index may be past the end (or not a number at all).
                if mode == Mode::Render && !self.guarded(&whole) {
                    self.past_end(
                        id,
                        *to,
                        &prefix,
                        &whole,
                        format!("`{prefix}` may have no item at this index"),
                    );
                    return None;
                }
                (**item).clone()
            }
            (Seg::Dynamic(_), Type::Map { value }) => (**value).clone(),
            (Seg::Dynamic(_), _) => Type::Any,
            (Seg::Index(n), Type::List { item }) => {
                let safe = (n == &0 && self.guarded(&prefix)) || self.guarded(&whole);
                if mode == Mode::Render && !safe {
                    let label = format!("`{prefix}` may have fewer than {} items", n + 1);
                    self.past_end(id, *to, &prefix, &whole, label);
                    return None;
                }
                (**item).clone()
            }
            (Seg::Index(_), Type::String | Type::Literal { .. }) => Type::String,
            (Seg::Index(n), _) => self.field(
                &inner,
                &n.to_string(),
                root,
                &segs[..i + 1],
                id.at(*from, *to),
            ),
            (Seg::Field(name), _) => self.field(
                &inner,
                name.as_str(),
                root,
                &segs[..i + 1],
                id.at(*from, *to),
            ),
        })
    }

    /// Reports an index read `whole` of list `prefix` (ending at byte `to` of the
    /// identifier) that may be past its end.
    fn past_end(&mut self, id: &Ident, to: usize, prefix: &str, whole: &str, label: String) {
        let at_ = self.report(
            Code::TemplateMaybeNull,
            format!("`{whole}` may be past the end of `{prefix}`"),
            id.at(0, to),
            label,
        );
        self.help(
            at_,
            Some(format!(
                "loop over it (`{{% for x in {prefix} %}}`), or guard the read: `{{% if {whole} %}}...{{% endif %}}`"
            )),
        );
    }

    /// Reports a step that fails unless `guard` is checked first.
    fn unsafe_step(&mut self, id: &Ident, message: String, to: usize, label: String, guard: &str) {
        let at_ = self.report(Code::TemplateMaybeNull, message, id.at(0, to), label);
        self.help(
            at_,
            Some(format!(
                "guard it: `{{% if {guard} %}}...{{% endif %}}`, or read it with a default: `{} | default(value=...)`",
                normalize(&id.root, &id.segs)
            )),
        );
    }

    fn field(
        &mut self,
        ty: &Type,
        name: &str,
        root: &str,
        upto: &[(Seg, usize, usize)],
        span: Span,
    ) -> Type {
        if let Some(t) = ty.field(name) {
            return t;
        }
        let owner = normalize(root, &upto[..upto.len() - 1]);
        let worker = upto.len() == 1
            && matches!(self.globals.get(root), Some(Global::Role(node, _)) if self.workflow.is_map_worker(*node))
            && !self.locals.iter().any(|(n, _, _)| n == root);
        let at = self.report(
            Code::TemplateUnknownField,
            format!("`{owner}` has no field `{name}`"),
            span,
            format!("`{owner}` is {}", short(ty)),
        );
        let names = ty.field_names();
        let help = if worker {
            Some(format!(
                "`{root}` is a map worker: here it is the list of its branch outputs; loop over it (`{{% for x in {root} %}}{{{{ x.{name} }}}}{{% endfor %}}`) or take one (`{root} | first`)"
            ))
        } else {
            did_you_mean(name, names.iter().map(String::as_str))
                .or_else(|| fields_help(&names))
                .or_else(|| no_fields_help(ty, &owner, name))
        };
        self.help(at, help);
        Type::Any
    }
}

/// For a field read of a value that has none: the filter it names, or how to reach an item.
fn no_fields_help(ty: &Type, owner: &str, name: &str) -> Option<String> {
    let list = matches!(ty.strip_optional(), Type::List { .. });
    let filters: &[&str] = if list { LIST_FILTERS } else { FILTERS };
    if filters.contains(&name) {
        return Some(format!("`{name}` is a filter: write `{owner} | {name}`"));
    }
    match ty.strip_optional() {
        Type::List { .. } => Some(format!(
            "a list has no fields: take an item with `{owner}[0]` or `{owner} | first`, or loop over it with `{{% for item in {owner} %}}`"
        )),
        Type::Any | Type::Object { .. } | Type::Map { .. } | Type::Union { .. } => None,
        other => Some(format!("a {} has no fields", short(other))),
    }
}

/// The nearest names of the filters, tests or functions; all of them only when they are few.
fn callable_help(what: &str, name: &str, known: &[&str]) -> String {
    if let Some(near) = did_you_mean_any(name, known.iter().copied()) {
        return near;
    }
    if known.len() <= 15 {
        return format!("{what}s: {}", known.join(", "));
    }
    format!(
        "no {what} has a name near it; the common ones: {}; all are tera's built-in {what}s (keats.github.io/tera/docs), plus `pad` and `to_json`",
        COMMON_FILTERS.join(", ")
    )
}

/// The filters that take a list.
const LIST_FILTERS: &[&str] = &[
    "first",
    "last",
    "nth",
    "join",
    "sort",
    "unique",
    "slice",
    "group_by",
    "filter",
    "map",
    "concat",
    "length",
    "reverse",
    "json_encode",
    "to_json",
];

/// Named when an unknown filter is near no filter.
const COMMON_FILTERS: &[&str] = &[
    "upper",
    "lower",
    "trim",
    "length",
    "first",
    "last",
    "join",
    "default",
    "json_encode",
    "truncate",
];

fn fields_help(names: &[String]) -> Option<String> {
    (!names.is_empty()).then(|| format!("its fields: {}", names.join(", ")))
}

/// A type's name, cut short for a label.
fn short(ty: &Type) -> String {
    let text = ty.display();
    if text.chars().count() <= 60 {
        return text;
    }
    match ty.strip_optional() {
        Type::Object { .. } => format!(
            "an object{}",
            if ty.is_optional() { " or null" } else { "" }
        ),
        Type::List { .. } => "a list".into(),
        _ => text.chars().take(57).collect::<String>() + "...",
    }
}

/// What a template sees of a memory slot: a value slot's declared type, or the fixed view
/// of a whiteboard, code context or history (see docs/memory.md).
fn memory_type(kind: &MemoryKind) -> Type {
    let s = Type::String;
    let opt = Type::optional;
    match kind {
        MemoryKind::Value { ty, .. } => ty.clone(),
        MemoryKind::Conversation { .. } => crate::compile::conversation_type(),
        MemoryKind::Whiteboard { .. } => {
            let entry = Type::object(vec![
                ("id", s.clone()),
                ("text", s.clone()),
                ("path", opt(s.clone())),
                ("status", s.clone()),
                ("reason", opt(s.clone())),
                ("superseded_by", opt(s.clone())),
            ]);
            let section = Type::object(vec![
                (
                    "spec",
                    Type::object(vec![
                        ("name", s.clone()),
                        ("prefix", s.clone()),
                        ("paths", Type::Bool),
                    ]),
                ),
                ("entries", Type::list(entry)),
                ("next_number", Type::Int),
            ]);
            Type::object(vec![("sections", Type::list(section)), ("markdown", s)])
        }
        MemoryKind::CodeContext { .. } => {
            let item = Type::object(vec![
                ("kind", s.clone()),
                ("number", opt(Type::Int)),
                ("text", opt(s.clone())),
            ]);
            Type::object(vec![
                (
                    "files",
                    Type::list(Type::object(vec![
                        ("path", s.clone()),
                        ("items", Type::list(item)),
                    ])),
                ),
                (
                    "skipped",
                    Type::list(Type::object(vec![
                        ("path", s.clone()),
                        ("line", opt(Type::Int)),
                        ("reason", s),
                    ])),
                ),
            ])
        }
        MemoryKind::History => {
            let node = Type::object(vec![
                ("id", Type::Int),
                ("parent", opt(Type::Int)),
                ("children", Type::list(Type::Int)),
                ("thought", s.clone()),
                ("action_type", s.clone()),
                ("action_params", s.clone()),
                ("observation", opt(s.clone())),
                ("bad_action", opt(Type::Bool)),
                ("summary", s.clone()),
                ("lessons", s.clone()),
            ]);
            Type::object(vec![
                ("chain", Type::list(node)),
                (
                    "lessons",
                    Type::list(Type::object(vec![("node", Type::Int), ("text", s)])),
                ),
                ("last_bad_action", opt(Type::Bool)),
                ("n_nodes", Type::Int),
            ])
        }
    }
}
