//! Completion: what may be written at the cursor, read from the text before it (which is
//! often half a statement that does not parse yet) and the names of the last analysis of
//! the file that parsed.

use lsp_types::{CompletionItem, CompletionItemKind};

use super::analysis::Analysis;
use super::features::path_type;
use super::index::{BUILTIN_ROOTS, BUILTIN_TYPES, Kind, PathRead};
use super::probe::{self, Block};
use crate::compile::{self, NodeKind};
use crate::source::Span;

const DECLARATIONS: &[&str] = &[
    "workflow",
    "import",
    "type",
    "memory",
    "provider",
    "tool",
    "environment",
    "role",
    "exit",
    "artifact",
    "test",
];
const ROLE_KINDS: &[&str] = &["llm", "tool", "builtin"];
const OUTPUTS: &[&str] = &["json", "tagged", "text", "code"];
const MEMORY_KINDS: &[&str] = &["whiteboard", "code_context", "history", "conversation"];
const ROUTE_WORDS: &[&str] = &["when", "otherwise", "max", "backtrack"];
/// Variables of a prompt template besides the role names.
const TEMPLATE_ROOTS: &[&str] = &[
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

fn item(label: &str, kind: CompletionItemKind, detail: Option<String>) -> CompletionItem {
    CompletionItem {
        label: label.to_string(),
        kind: Some(kind),
        detail,
        ..CompletionItem::default()
    }
}

fn words(words: &[&str], kind: CompletionItemKind) -> Vec<CompletionItem> {
    words.iter().map(|w| item(w, kind, None)).collect()
}

/// One enclosing `{ ... }` block: the text of its line before the brace.
#[derive(Debug, Clone)]
struct Open {
    header: String,
}

/// The blocks open at `offset`, outermost first; whether `offset` is inside a string.
fn open_blocks(text: &str, offset: usize) -> (Vec<Open>, bool) {
    let bytes = text.as_bytes();
    let mut stack: Vec<Open> = Vec::new();
    let mut i = 0;
    let end = offset.min(text.len());
    // Every delimiter is ASCII: the scan is over bytes, and text is sliced only at them.
    let find = |from: usize, needle: &[u8]| {
        bytes[from.min(bytes.len())..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| from + p)
    };
    while i < end {
        let rest = &bytes[i..];
        let c = bytes[i];
        if rest.starts_with(b"//") {
            match find(i, b"\n") {
                Some(e) => i = e,
                None => return (stack, false),
            }
        } else if rest.starts_with(b"/*") {
            match find(i + 2, b"*/") {
                Some(e) => i = e + 2,
                None => return (stack, false),
            }
        } else if rest.starts_with(b"\"\"\"") {
            match find(i + 3, b"\"\"\"") {
                Some(e) if e + 3 <= end => i = e + 3,
                _ => return (stack, true),
            }
        } else if c == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' && bytes[j] != b'\n' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            if j >= end {
                return (stack, true);
            }
            i = j + 1;
        } else if c == b'{' {
            let line_start = text[..i].rfind('\n').map_or(0, |s| s + 1);
            stack.push(Open {
                header: text[line_start..i].trim().to_string(),
            });
            i += 1;
        } else if c == b'}' {
            stack.pop();
            i += 1;
        } else {
            i += 1;
        }
    }
    (stack, false)
}

/// The kind of block a header opens.
fn block_of(header: &str, parent: Option<&str>) -> Option<Block> {
    let words: Vec<&str> = header
        .split(|c: char| c.is_whitespace() || c == ':')
        .filter(|w| !w.is_empty())
        .collect();
    match words.as_slice() {
        ["workflow", ..] => Some(Block::Header),
        ["limits"] => Some(Block::Limits),
        ["role", _, kind, ..] => match *kind {
            "llm" => Some(Block::Llm),
            "tool" => Some(Block::Tool),
            "builtin" => Some(Block::Builtin),
            _ => None,
        },
        ["provider", ..] => Some(Block::Provider),
        ["retry"] if parent.is_some_and(|p| p.starts_with("provider")) => Some(Block::Retry),
        ["price" | "price_env"] => Some(Block::Price),
        ["tool", ..] => Some(Block::ToolDecl),
        ["environment", ..] => Some(Block::Environment),
        ["exit", ..] => Some(Block::Exit),
        [_, "whiteboard"] => Some(Block::Whiteboard),
        [_, "code_context"] => Some(Block::CodeContext),
        [_, "conversation"] => Some(Block::Conversation),
        _ => None,
    }
}

pub struct Names<'a> {
    /// The last analysis of the file that parsed (its names), else the current one.
    pub a: &'a Analysis,
}

impl Names<'_> {
    fn declared(&self, kind: Kind) -> Vec<&str> {
        self.a.index().declared(kind)
    }

    fn roles(&self) -> Vec<CompletionItem> {
        let w = &self.a.workflow;
        w.roles()
            .map(|(i, r)| {
                item(
                    &w.node(i).name,
                    CompletionItemKind::CLASS,
                    Some(format!("{} role", r.kind.name())),
                )
            })
            .collect()
    }

    fn nodes(&self) -> Vec<CompletionItem> {
        let w = &self.a.workflow;
        let mut out = self.roles();
        for i in w.graph.node_indices() {
            if let NodeKind::Exit(e) = &w.node(i).kind {
                out.push(item(
                    &w.node(i).name,
                    CompletionItemKind::ENUM_MEMBER,
                    Some(format!("exit, code {}", e.code)),
                ));
            }
        }
        out
    }

    fn of_kind(&self, kind: Kind) -> Vec<CompletionItem> {
        let w = &self.a.workflow;
        match kind {
            Kind::Node => self.roles(),
            Kind::Memory => w
                .memory
                .iter()
                .map(|m| {
                    let detail = match &m.kind {
                        compile::MemoryKind::Value { ty, .. } => ty.display(),
                        other => other.kind_name().to_string(),
                    };
                    item(&m.name, CompletionItemKind::VARIABLE, Some(detail))
                })
                .collect(),
            Kind::Input => w
                .inputs
                .iter()
                .map(|i| item(&i.name, CompletionItemKind::FIELD, Some(i.ty.display())))
                .collect(),
            Kind::Tool => w
                .tools
                .iter()
                .map(|t| item(t.name(), CompletionItemKind::METHOD, Some("tool".into())))
                .collect(),
            Kind::Provider => w
                .providers
                .iter()
                .map(|p| {
                    item(
                        p.name(),
                        CompletionItemKind::MODULE,
                        Some(format!("provider ({})", p.profile.kind.as_str())),
                    )
                })
                .collect(),
            Kind::Environment => w
                .environments
                .iter()
                .map(|e| {
                    item(
                        &e.name,
                        CompletionItemKind::MODULE,
                        Some("environment".into()),
                    )
                })
                .collect(),
            Kind::Type => {
                let mut out: Vec<CompletionItem> = BUILTIN_TYPES
                    .iter()
                    .chain(["list", "map"].iter())
                    .map(|t| item(t, CompletionItemKind::KEYWORD, Some("built-in type".into())))
                    .collect();
                out.extend(
                    self.declared(Kind::Type)
                        .into_iter()
                        .map(|t| item(t, CompletionItemKind::STRUCT, Some("type".into()))),
                );
                out
            }
            Kind::Template => template_files(&self.a.prompts_dir()),
            Kind::Function => functions(),
        }
    }

    /// What an expression may start with.
    fn expression(&self) -> Vec<CompletionItem> {
        let mut out = self.roles();
        out.extend(
            BUILTIN_ROOTS
                .iter()
                .map(|r| item(r, CompletionItemKind::VARIABLE, Some("built in".into()))),
        );
        out.extend(functions());
        out.extend(words(
            &["true", "false", "null", "not", "and", "or"],
            CompletionItemKind::KEYWORD,
        ));
        out
    }

    /// The fields after `parts.` (a path read in role `role`).
    fn fields(&self, parts: &[&str], role: Option<&str>) -> Vec<CompletionItem> {
        let w = &self.a.workflow;
        match parts {
            ["memory"] => return self.of_kind(Kind::Memory),
            ["input"] => return self.of_kind(Kind::Input),
            _ => {}
        }
        let read = PathRead {
            parts: parts
                .iter()
                .map(|p| (p.to_string(), Span::default()))
                .collect(),
            role: role.map(str::to_string),
        };
        let mut out = Vec::new();
        if let [name] = parts
            && let Some(node) = w.find_node(name)
            && w.is_json_llm(node)
        {
            for f in compile::INVALID_FIELDS {
                let ty = compile::invalid_field_type(f).map(|t| t.display());
                out.push(item(f, CompletionItemKind::FIELD, ty));
            }
        }
        if let Some(ty) = path_type(w, &read, parts.len() - 1) {
            for name in ty.field_names() {
                let detail = ty.strip_optional().field(&name).map(|t| t.display());
                out.push(item(&name, CompletionItemKind::FIELD, detail));
            }
        }
        out
    }
}

pub fn functions() -> Vec<CompletionItem> {
    probe::functions()
        .iter()
        .map(|(name, _)| {
            let (detail, doc) = match super::signature(name) {
                Some((params, returns, doc)) => (format!("{name}({params}) -> {returns}"), doc),
                None => (format!("{name}(...)"), ""),
            };
            CompletionItem {
                documentation: (!doc.is_empty())
                    .then(|| lsp_types::Documentation::String(doc.to_string())),
                ..item(name, CompletionItemKind::FUNCTION, Some(detail))
            }
        })
        .collect()
}

/// The template files of a prompts folder (bounded, links not followed).
fn template_files(dir: &std::path::Path) -> Vec<CompletionItem> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten().take(1000) {
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            match e.file_type() {
                Ok(t) if t.is_dir() && prefix.matches('/').count() < 4 => {
                    stack.push((e.path(), format!("{name}/")))
                }
                Ok(t) if t.is_file() => out.push(item(
                    &name,
                    CompletionItemKind::FILE,
                    Some("template".into()),
                )),
                _ => {}
            }
        }
    }
    out.sort_by(|a, b| a.label.cmp(&b.label));
    out
}

/// The dotted path before a `.` that ends at `end` (`planner.title.` gives
/// `["planner", "title"]`).
fn path_before(text: &str, end: usize) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut start = end;
    while start > 0
        && (bytes[start - 1].is_ascii_alphanumeric() || matches!(bytes[start - 1], b'_' | b'.'))
    {
        start -= 1;
    }
    text[start..end]
        .split('.')
        .filter(|p| !p.is_empty())
        .collect()
}

fn word_start(text: &str, offset: usize) -> usize {
    let bytes = text.as_bytes();
    let mut ws = offset.min(text.len());
    while ws > 0 && (bytes[ws - 1].is_ascii_alphanumeric() || bytes[ws - 1] == b'_') {
        ws -= 1;
    }
    ws
}

/// Completion in a workflow file.
pub fn workflow(text: &str, offset: usize, names: &Names<'_>) -> Vec<CompletionItem> {
    let offset = offset.min(text.len());
    let ws = word_start(text, offset);
    let (blocks, in_string) = open_blocks(text, ws);
    let line_start = text[..ws].rfind('\n').map_or(0, |s| s + 1);
    let before = &text[line_start..ws];
    let trimmed = before.trim();
    let role = blocks.iter().find_map(|b| {
        let mut w = b.header.split_whitespace();
        (w.next() == Some("role"))
            .then(|| w.next().map(|n| n.trim_end_matches(':').to_string()))
            .flatten()
    });
    let header = blocks.last().map(|b| b.header.as_str());
    let parent = blocks
        .len()
        .checked_sub(2)
        .map(|i| blocks[i].header.as_str());
    if in_string {
        let key = trimmed
            .trim_end_matches('"')
            .trim_end()
            .trim_end_matches('=')
            .trim();
        return if matches!(key, "prompt" | "system") {
            names.of_kind(Kind::Template)
        } else {
            Vec::new()
        };
    }
    if ws > 0 && text.as_bytes()[ws - 1] == b'.' {
        let parts = path_before(text, ws - 1);
        return names.fields(&parts, role.as_deref());
    }
    // The first word of a statement (also right after a block's `{` on its line).
    if trimmed.is_empty() || trimmed.ends_with('{') {
        return first_word(header, parent, names);
    }
    let last = trimmed.split_whitespace().last().unwrap_or("");
    // `role NAME:`
    if trimmed.starts_with("role ") && trimmed.ends_with(':') {
        return words(ROLE_KINDS, CompletionItemKind::KEYWORD);
    }
    if trimmed == "output" {
        return words(OUTPUTS, CompletionItemKind::KEYWORD);
    }
    if matches!(trimmed, "output json" | "output tagged")
        || trimmed.ends_with("list[")
        || trimmed.ends_with("map[")
        || trimmed.ends_with('|')
    {
        return names.of_kind(Kind::Type);
    }
    // `name:` in a type, the memory block or an input: a type.
    if trimmed.ends_with(':') && !trimmed.contains('=') {
        let mut out = names.of_kind(Kind::Type);
        if header.is_some_and(|h| h.starts_with("memory")) {
            out.extend(words(MEMORY_KINDS, CompletionItemKind::KEYWORD));
        }
        return out;
    }
    if last == "->"
        || trimmed.ends_with("->")
        || trimmed.contains("parallel [") && !trimmed.contains(']')
    {
        return route_targets(names);
    }
    if header.is_some_and(|h| h.starts_with("test")) {
        match trimmed {
            "reply" | "expect path [" => return names.roles(),
            "expect exit" => return names.nodes(),
            "input" => return names.of_kind(Kind::Input),
            "expect" => {
                let mut out = words(&["exit", "path", "artifact"], CompletionItemKind::KEYWORD);
                out.extend(names.expression());
                return out;
            }
            _ => {}
        }
    }
    if trimmed == "set" {
        return names.of_kind(Kind::Memory);
    }
    if let Some(out) = attribute_value(trimmed, names) {
        return out;
    }
    // After a route's target: its modifiers.
    let route = header.is_none()
        && trimmed.contains("->")
        && !trimmed
            .split_whitespace()
            .any(|w| w == "when" || w == "over");
    if route {
        return words(ROUTE_WORDS, CompletionItemKind::KEYWORD);
    }
    names.expression()
}

/// The first word of a statement in the block `header` (inside `parent`), or of a
/// declaration outside any block.
fn first_word(
    header: Option<&str>,
    parent: Option<&str>,
    names: &Names<'_>,
) -> Vec<CompletionItem> {
    let Some(header) = header else {
        let mut out = words(DECLARATIONS, CompletionItemKind::KEYWORD);
        out.push(item(
            "start",
            CompletionItemKind::KEYWORD,
            Some("the start node".into()),
        ));
        out.extend(names.roles());
        return out;
    };
    let first = header.split_whitespace().next().unwrap_or("");
    let mut out: Vec<CompletionItem> = match block_of(header, parent) {
        Some(block) => probe::attributes(block)
            .iter()
            .map(|k| item(k, CompletionItemKind::PROPERTY, Some("attribute".into())))
            .collect(),
        None => Vec::new(),
    };
    let extra: &[&str] = match first {
        "workflow" => &["input", "answer"],
        "role" => &["output", "update", "artifact"],
        "tool" => &["input"],
        "test" => &["input", "reply", "expect"],
        _ => &[],
    };
    out.extend(words(extra, CompletionItemKind::KEYWORD));
    if first == "type" {
        out.push(item(
            "extra",
            CompletionItemKind::PROPERTY,
            Some("attribute: ignore | forbid (a field the type does not declare)".into()),
        ));
    }
    if first == "update" {
        out.push(item("set", CompletionItemKind::KEYWORD, None));
        out.extend(names.of_kind(Kind::Memory));
    }
    out
}

/// After `->`: the nodes, the built-in exits, `parallel` and `map`.
fn route_targets(names: &Names<'_>) -> Vec<CompletionItem> {
    let mut out = names.nodes();
    for (name, code) in compile::BUILTIN_EXITS {
        if !out.iter().any(|i| i.label == *name) {
            out.push(item(
                name,
                CompletionItemKind::ENUM_MEMBER,
                Some(format!("built-in exit, code {code}")),
            ));
        }
    }
    out.extend(words(&["parallel", "map"], CompletionItemKind::KEYWORD));
    out
}

/// After `key = ` (or `key = [a, `) of an attribute naming things of the workflow or
/// taking one of a few words.
fn attribute_value(trimmed: &str, names: &Names<'_>) -> Option<Vec<CompletionItem>> {
    // `key = ` and `key = [a, ` of an attribute naming things of the workflow.
    let key = trimmed.split(['=', ':']).next().unwrap_or("").trim();
    if trimmed.contains('=') || trimmed.ends_with(':') {
        let kind = match key {
            "provider" | "fallback" => Some(Kind::Provider),
            "reads" | "durable" | "conversation" => Some(Kind::Memory),
            "tools" | "run" => Some(Kind::Tool),
            "env" => Some(Kind::Environment),
            "round" | "finally" => Some(Kind::Node),
            _ => None,
        };
        if let Some(kind) = kind {
            return Some(names.of_kind(kind));
        }
        match key {
            "mode" => {
                return Some(words(
                    &["json", "native", "auto"],
                    CompletionItemKind::ENUM_MEMBER,
                ));
            }
            "show" => {
                return Some(words(
                    &["all", "status", "tail", "head_tail"],
                    CompletionItemKind::ENUM_MEMBER,
                ));
            }
            "coerce" => return Some(words(&["safe", "strict"], CompletionItemKind::ENUM_MEMBER)),
            "extra" => {
                return Some(words(
                    &["ignore", "forbid"],
                    CompletionItemKind::ENUM_MEMBER,
                ));
            }
            _ => {}
        }
    }
    None
}

/// Completion in a template: the variables of a prompt and their fields.
pub fn template(text: &str, offset: usize, names: &Names<'_>) -> Vec<CompletionItem> {
    let offset = offset.min(text.len());
    let ws = word_start(text, offset);
    let before = &text[..ws];
    let open = before.rfind("{{").max(before.rfind("{%"));
    let close = before.rfind("}}").max(before.rfind("%}"));
    if open.is_none() || close > open {
        return Vec::new();
    }
    if ws > 0 && text.as_bytes()[ws - 1] == b'.' {
        let parts = path_before(text, ws - 1);
        return names.fields(&parts, None);
    }
    let mut out = names.roles();
    out.extend(
        TEMPLATE_ROOTS
            .iter()
            .map(|r| item(r, CompletionItemKind::VARIABLE, Some("built in".into()))),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_open_at_an_offset_skip_strings_and_comments() {
        let text = "role a: llm {\n  prompt = \"{\" // {\n  update {\n    set x = ";
        let (blocks, in_string) = open_blocks(text, text.len());
        let headers: Vec<&str> = blocks.iter().map(|b| b.header.as_str()).collect();
        assert_eq!(headers, ["role a: llm", "update"]);
        assert!(!in_string);
        let (_, in_string) = open_blocks("role a: llm {\n  prompt = \"pla", 29);
        assert!(in_string);
        assert_eq!(block_of("role a: tool", None), Some(Block::Tool));
        assert_eq!(
            block_of("plan: conversation", Some("memory")),
            Some(Block::Conversation)
        );
    }

    #[test]
    fn path_before_a_dot() {
        let text = "when planner.invalid_reply.";
        assert_eq!(
            path_before(text, text.len() - 1),
            ["planner", "invalid_reply"]
        );
    }
}
