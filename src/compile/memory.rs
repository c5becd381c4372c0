//! Memory slots: their kinds, types and initial values.

use rondo_memory::{CodeContext, ScoreParams, SectionSpec, Whiteboard};
use serde_json::Value;

use super::Compiler;
use super::attrs::Attrs;
use super::types::Type;
use super::workflow::{
    DEFAULT_CONVERSATION_BYTES, DEFAULT_CONVERSATION_MESSAGES, MemoryKind, MemorySlot, SizeBound,
    Workflow,
};
use crate::diagnostics::{Code, Diagnostic, Diagnostics, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ast, Ident, ValueKind};

impl Compiler<'_> {
    pub(super) fn memory(&mut self, ast: &Ast) {
        for entry in &ast.memory {
            if let Some(&id) = self.memory_names.get(&entry.name.name) {
                let first = self.workflow.memory[id].span;
                self.duplicate("memory", &entry.name, Some(first));
                continue;
            }
            let mut bound = SizeBound::default();
            let kind = match &entry.shape {
                syntax::MemoryShape::Plain { ty, default } => {
                    let ty = self.resolve_type(ty);
                    let default = match default {
                        Some(e) => self.const_value(e).unwrap_or(Value::Null),
                        None => default_for(&ty),
                    };
                    if let Err(e) = ty.validate(&default) {
                        self.diags.push(
                            Diagnostic::error(
                                Code::MemoryBadDefault,
                                format!(
                                    "the initial value of `{}` does not fit its type",
                                    entry.name.name
                                ),
                            )
                            .label(entry.span, e)
                            .help(format!(
                                "`{}` is declared as `{}`",
                                entry.name.name,
                                ty.display()
                            )),
                        );
                    }
                    MemoryKind::Value { ty, default }
                }
                syntax::MemoryShape::Kind { kind, attrs } => {
                    let (kind, b) = self.memory_kind(kind, attrs);
                    bound = b;
                    kind
                }
            };
            self.memory_names
                .insert(entry.name.name.clone(), self.workflow.memory.len());
            self.workflow.memory.push(MemorySlot {
                name: entry.name.name.clone(),
                kind,
                span: entry.name.span,
                bound,
            });
        }
    }

    /// A structured kind and its own `max_bytes`/`max_len` (a conversation keeps its
    /// bounds in the kind).
    pub(super) fn memory_kind(
        &mut self,
        kind: &Ident,
        attrs: &[syntax::Attr],
    ) -> (MemoryKind, SizeBound) {
        let diags = &mut self.diags;
        let mut bound = SizeBound::default();
        let kind = match kind.name.as_str() {
            "whiteboard" => whiteboard_kind(kind, attrs, &mut bound, diags),
            "code_context" => code_context_kind(kind, attrs, &mut bound, diags),
            "conversation" => conversation_kind(attrs, diags),
            _ => history_kind(attrs, &mut bound, diags),
        };
        (kind, bound)
    }
}

/// `whiteboard { sections = [...] }`: the sections it may hold are required.
fn whiteboard_kind(
    kind: &Ident,
    attrs: &[syntax::Attr],
    bound: &mut SizeBound,
    diags: &mut Diagnostics,
) -> MemoryKind {
    let mut a = Attrs::new(attrs, &["sections", "max_bytes"], "a whiteboard");
    let sections = a.string_list("sections", diags).unwrap_or_default();
    let misspelled = a.misspells(&["sections"]);
    bound.max_bytes = view_bytes(&mut a, diags);
    a.finish(diags);
    if sections.is_empty() && !misspelled {
        diags.push(
            Diagnostic::error(
                Code::MemoryNoSections,
                "a whiteboard needs its allowed sections",
            )
            .label(kind.span, "no `sections`")
            .help("write `whiteboard { sections = [\"Facts\", \"Key Files\", \"Constraints\"] }`"),
        );
    }
    MemoryKind::Whiteboard {
        sections: sections.into_iter().map(|s| s.0).collect(),
    }
}

/// `code_context { alpha, beta, gamma, threshold, root }`: a root inside the workspace, a
/// decay factor between 0 and 1.
fn code_context_kind(
    kind: &Ident,
    attrs: &[syntax::Attr],
    bound: &mut SizeBound,
    diags: &mut Diagnostics,
) -> MemoryKind {
    let mut a = Attrs::new(
        attrs,
        &["alpha", "beta", "gamma", "threshold", "root", "max_bytes"],
        "a code context",
    );
    bound.max_bytes = view_bytes(&mut a, diags);
    let mut param = |name: &str, default: f64, a: &mut Attrs<'_>| {
        a.number(name, diags).map_or(default, |x| x.0)
    };
    let alpha = param("alpha", 1.0, &mut a);
    let beta = param("beta", 1.0, &mut a);
    let gamma = param("gamma", 0.9, &mut a);
    let threshold = param("threshold", 0.0, &mut a);
    let root = a.string("root", diags).map(|x| x.0);
    a.finish(diags);
    if let Some(Err(why)) = root.as_deref().map(rondo_workspace::relative_name) {
        diags.push(
            Diagnostic::error(
                Code::MemoryRootOutsideWorkspace,
                "a code context reads only inside the run's workspace",
            )
            .label(kind.span, why.to_string())
            .help("name a folder of the workspace, e.g. `root = \"repo\"`"),
        );
    }
    if !(0.0..=1.0).contains(&gamma) {
        diags.push(
            Diagnostic::error(
                Code::MemoryBadGamma,
                "the decay factor `gamma` must lie between 0 and 1",
            )
            .label(kind.span, format!("gamma = {gamma}"))
            .help("older operations weigh γ^(M−i): use e.g. `gamma = 0.9`"),
        );
    }
    MemoryKind::CodeContext {
        alpha,
        beta,
        gamma,
        threshold,
        root,
    }
}

/// `conversation { max_messages, max_bytes }`: bounds kept in the kind, neither 0.
fn conversation_kind(attrs: &[syntax::Attr], diags: &mut Diagnostics) -> MemoryKind {
    let mut a = Attrs::new(attrs, &["max_messages", "max_bytes"], "a conversation");
    let max_messages = a.count("max_messages", diags);
    let max_bytes = a.bytes("max_bytes", diags);
    a.finish(diags);
    for (key, bound) in [("max_messages", max_messages), ("max_bytes", max_bytes)] {
        if let Some((0, span)) = bound {
            diags.push(
                Diagnostic::error(
                    Code::MemoryBadBound,
                    format!("`{key} = 0` leaves the conversation no room"),
                )
                .label(span, "no message fits")
                .help(format!(
                    "a conversation is bounded by `max_messages` (default {DEFAULT_CONVERSATION_MESSAGES}) and `max_bytes` (default 1MB): give at least 1"
                )),
            );
        }
    }
    MemoryKind::Conversation {
        max_messages: max_messages.map_or(DEFAULT_CONVERSATION_MESSAGES, |x| x.0),
        max_bytes: max_bytes.map_or(DEFAULT_CONVERSATION_BYTES, |x| x.0),
    }
}

/// A history (the default kind): `max_bytes` and a `max_len` of at least 1.
fn history_kind(
    attrs: &[syntax::Attr],
    bound: &mut SizeBound,
    diags: &mut Diagnostics,
) -> MemoryKind {
    let mut a = Attrs::new(attrs, &["max_bytes", "max_len"], "a history");
    bound.max_bytes = view_bytes(&mut a, diags);
    bound.max_len = a.count("max_len", diags).and_then(|(n, span)| {
        if n == 0 {
            diags.push(no_room("max_len", span, "a history"));
            return None;
        }
        Some(n)
    });
    a.finish(diags);
    MemoryKind::History
}

/// The least a structured memory's `max_bytes` may be: its view's fixed fields fit.
pub const MIN_VIEW_BYTES: u64 = 256;

fn view_bytes(a: &mut Attrs<'_>, diags: &mut Diagnostics) -> Option<u64> {
    let (n, span) = a.bytes("max_bytes", diags)?;
    if n < MIN_VIEW_BYTES {
        diags.push(
            Diagnostic::error(
                Code::MemoryBadBound,
                format!("`max_bytes = {n}` leaves no room for what a template sees of it"),
            )
            .label(span, "too small")
            .help(format!(
                "give at least {MIN_VIEW_BYTES} bytes; e.g. `max_bytes = \"32KB\"`"
            )),
        );
        return None;
    }
    Some(n)
}

fn no_room(key: &str, span: Span, what: &str) -> Diagnostic {
    Diagnostic::error(
        Code::MemoryBadBound,
        format!("`{key} = 0` leaves {what} no room"),
    )
    .label(span, "nothing fits")
    .help(format!("give `{key}` at least 1, or leave it out"))
}

/// `limits { max_bytes = { NAME: SIZE, ... }  max_len = { NAME: N, ... } }`: the bounds of
/// inputs and value memories by name (`"input.NAME"`/`"memory.NAME"` when both have it).
/// Read after the inputs and memory are declared.
pub(super) fn named_bounds(workflow: &mut Workflow, l: &mut Attrs<'_>, diags: &mut Diagnostics) {
    for key in ["max_bytes", "max_len", "max_depth"] {
        let Some(value) = l.value(key) else { continue };
        let ValueKind::Map(entries) = &value.kind else {
            diags.push(
                Diagnostic::error(
                    Code::AttrWrongKind,
                    format!("`{key}` in `limits` bounds inputs and memories by name"),
                )
                .label(value.span, "expected a map")
                .help(format!(
                    "write e.g. `{key} = {{ question = {} }}`; `max_input_bytes`/`max_memory_bytes` bound every input or value memory",
                    if key == "max_bytes" { "\"16KB\"" } else { "20" }
                )),
            );
            continue;
        };
        for (name, v) in entries {
            let Some(n) = bound_number(key, v, diags) else {
                continue;
            };
            if n == 0 && key != "max_depth" {
                diags.push(no_room(key, v.span, &format!("`{}`", name.name)));
                continue;
            }
            match target(workflow, name, diags) {
                Some(Target::Input(id)) => {
                    let input = &mut workflow.inputs[id];
                    if key == "max_len" && !is_list(&input.ty) {
                        diags.push(not_a_list(&name.name, &input.ty, v.span));
                        continue;
                    }
                    set(&mut input.bound, key, n);
                    if let Some(d) = &input.default
                        && let Some(why) = over(d, input.bound)
                    {
                        diags.push(
                            Diagnostic::error(
                                Code::MemoryBadBound,
                                format!("the default of input `{}` is past its bound", name.name),
                            )
                            .label(v.span, why)
                            .help("raise the bound or shorten the default"),
                        );
                    }
                }
                Some(Target::Memory(id)) => {
                    let slot = &mut workflow.memory[id];
                    let MemoryKind::Value { ty, default } = &slot.kind else {
                        diags.push(
                            Diagnostic::error(
                                Code::MemoryBadBound,
                                format!(
                                    "`{}` is a {}: its bounds go in its own block",
                                    name.name,
                                    slot.kind.kind_name()
                                ),
                            )
                            .label(name.span, "not a value memory")
                            .help(match slot.kind {
                                MemoryKind::Conversation { .. } => format!(
                                    "write `{}: conversation {{ max_messages = 100  max_bytes = \"256KB\" }}`",
                                    name.name
                                ),
                                _ => format!(
                                    "write `{}: {} {{ ... max_bytes = \"32KB\" }}` in the memory block",
                                    name.name,
                                    slot.kind.kind_name()
                                ),
                            }),
                        );
                        continue;
                    };
                    if key == "max_len" && !is_list(ty) {
                        diags.push(not_a_list(&name.name, ty, v.span));
                        continue;
                    }
                    set(&mut slot.bound, key, n);
                    if let Some(why) = over(default, slot.bound) {
                        diags.push(
                            Diagnostic::error(
                                Code::MemoryBadBound,
                                format!(
                                    "the initial value of memory `{}` is past its bound",
                                    name.name
                                ),
                            )
                            .label(v.span, why)
                            .help("raise the bound or shorten the initial value"),
                        );
                    }
                }
                None => {}
            }
        }
    }
}

enum Target {
    Input(usize),
    Memory(usize),
}

/// The input or memory a `limits` entry names; a name both have must say which.
fn target(workflow: &Workflow, name: &Ident, diags: &mut Diagnostics) -> Option<Target> {
    let (only, bare) = match name.name.split_once('.') {
        Some(("input", rest)) => (Some(true), rest),
        Some(("memory", rest)) => (Some(false), rest),
        _ => (None, name.name.as_str()),
    };
    let input = workflow.inputs.iter().position(|i| i.name == bare);
    let memory = workflow.memory.iter().position(|m| m.name == bare);
    match (only, input, memory) {
        (Some(true), Some(i), _) | (None, Some(i), None) => Some(Target::Input(i)),
        (Some(false), _, Some(m)) | (None, None, Some(m)) => Some(Target::Memory(m)),
        (None, Some(_), Some(_)) => {
            diags.push(
                Diagnostic::error(
                    Code::MemoryBadBound,
                    format!("`{bare}` is both an input and a memory"),
                )
                .label(name.span, "which one?")
                .help(format!(
                    "write `\"input.{bare}\" = ...` or `\"memory.{bare}\" = ...`"
                )),
            );
            None
        }
        _ => {
            let names = workflow
                .inputs
                .iter()
                .map(|i| i.name.as_str())
                .chain(workflow.memory.iter().map(|m| m.name.as_str()));
            let help = did_you_mean(bare, names).unwrap_or_else(|| {
                "`limits { max_bytes = { ... } }` names inputs and memories".to_string()
            });
            diags.push(
                Diagnostic::error(
                    Code::MemoryUnknown,
                    format!("`{bare}` is neither an input nor a memory"),
                )
                .label(name.span, "not declared")
                .help(help),
            );
            None
        }
    }
}

fn bound_number(key: &str, v: &syntax::Value, diags: &mut Diagnostics) -> Option<u64> {
    let parsed = match (&v.kind, key) {
        (ValueKind::Number(n), _) if *n >= 0.0 && n.fract() == 0.0 => Some(*n as u64),
        (ValueKind::String(s), "max_bytes") => rondo_config::parse_size(s),
        _ => None,
    };
    if parsed.is_none() {
        let expected = if key == "max_bytes" {
            "a size such as `\"16KB\"` or a number of bytes"
        } else {
            "a number"
        };
        diags.push(
            Diagnostic::error(Code::AttrWrongKind, format!("`{key}` takes {expected}"))
                .label(v.span, format!("expected {expected}"))
                .help(format!(
                    "write e.g. `{key} = {{ plan = {} }}`",
                    if key == "max_bytes" { "\"16KB\"" } else { "20" }
                )),
        );
    }
    parsed
}

fn set(bound: &mut SizeBound, key: &str, n: u64) {
    match key {
        "max_bytes" => bound.max_bytes = Some(n),
        "max_len" => bound.max_len = Some(n),
        _ => bound.max_depth = Some(n),
    }
}

/// How deep `value` nests (a scalar 0, `[1]` 1), walked without recursion.
pub fn depth_of(value: &Value) -> u64 {
    let mut deepest = 0;
    let mut stack = vec![(value, 0u64)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

fn is_list(ty: &Type) -> bool {
    matches!(ty.strip_optional(), Type::List { .. })
}

fn not_a_list(name: &str, ty: &Type, span: Span) -> Diagnostic {
    Diagnostic::error(
        Code::MemoryBadBound,
        format!(
            "`max_len` bounds a list, and `{name}` is a `{}`",
            ty.display()
        ),
    )
    .label(span, "not a list")
    .help(format!(
        "bound its size instead: `max_bytes = {{ {name}: \"16KB\" }}`"
    ))
}

/// Why `value` is past `bound`, if it is.
pub fn over(value: &Value, bound: SizeBound) -> Option<String> {
    if let Some(max) = bound.max_len
        && let Value::Array(items) = value
        && items.len() as u64 > max
    {
        return Some(format!("{} items, past max_len = {max}", items.len()));
    }
    if let Some(max) = bound.max_bytes {
        let bytes = serde_json::to_string(value).map_or(0, |s| s.len()) as u64;
        if bytes > max {
            return Some(format!("{bytes} bytes of JSON, past max_bytes = {max}"));
        }
    }
    if let Some(max) = bound.max_depth {
        let depth = depth_of(value);
        if depth > max {
            return Some(format!("nested {depth} levels, past max_depth = {max}"));
        }
    }
    None
}

fn default_for(ty: &Type) -> Value {
    match ty {
        Type::List { .. } => Value::Array(Vec::new()),
        Type::Map { .. } | Type::Object { .. } => Value::Object(Default::default()),
        Type::String => Value::String(String::new()),
        Type::Int | Type::Float => Value::from(0),
        Type::Bool => Value::Bool(false),
        _ => Value::Null,
    }
}

impl MemoryKind {
    /// What a template sees of a slot of this kind: a value's declared type, a
    /// conversation's messages, or the view of a whiteboard, code context or history (see
    /// docs/memory.md). `max_bytes` of a structured kind bounds this value's JSON.
    pub fn view_type(&self) -> Type {
        let s = || Type::String;
        let opt = Type::optional;
        match self {
            MemoryKind::Value { ty, .. } => ty.clone(),
            MemoryKind::Conversation { .. } => super::conversation_type(),
            MemoryKind::Whiteboard { .. } => {
                let entry = Type::object(vec![
                    ("id", s()),
                    ("text", s()),
                    ("path", opt(s())),
                    ("status", s()),
                    ("reason", opt(s())),
                    ("superseded_by", opt(s())),
                ]);
                let spec =
                    Type::object(vec![("name", s()), ("prefix", s()), ("paths", Type::Bool)]);
                let section = Type::object(vec![
                    ("spec", spec),
                    ("entries", Type::list(entry)),
                    ("next_number", Type::Int),
                ]);
                Type::object(vec![("sections", Type::list(section)), ("markdown", s())])
            }
            MemoryKind::CodeContext { .. } => {
                let item = Type::object(vec![
                    ("kind", s()),
                    ("number", opt(Type::Int)),
                    ("text", opt(s())),
                ]);
                let file = Type::object(vec![("path", s()), ("items", Type::list(item))]);
                let skipped = Type::object(vec![
                    ("path", s()),
                    ("line", opt(Type::Int)),
                    ("reason", s()),
                ]);
                let activity = Type::object(vec![
                    ("accessed", Type::list(Type::Int)),
                    ("referred", Type::list(Type::Int)),
                    ("score", Type::Float),
                ]);
                let chunk = Type::object(vec![
                    ("file_path", s()),
                    ("class", opt(s())),
                    ("function", opt(s())),
                    ("whole_function", Type::Bool),
                    ("lines", Type::list(Type::Int)),
                    ("activity", activity),
                ]);
                Type::object(vec![
                    ("files", Type::list(file)),
                    ("skipped", Type::list(skipped)),
                    ("chunks", Type::list(chunk)),
                ])
            }
            MemoryKind::History => {
                let node = Type::object(vec![
                    ("id", Type::Int),
                    ("parent", opt(Type::Int)),
                    ("children", Type::list(Type::Int)),
                    ("thought", s()),
                    ("action_type", s()),
                    ("action_params", s()),
                    ("observation", opt(s())),
                    ("bad_action", opt(Type::Bool)),
                    ("summary", s()),
                    ("lessons", s()),
                ]);
                let lesson = Type::object(vec![("node", Type::Int), ("text", s())]);
                Type::object(vec![
                    ("chain", Type::list(node)),
                    ("lessons", Type::list(lesson)),
                    ("last_bad_action", opt(Type::Bool)),
                    ("n_nodes", Type::Int),
                ])
            }
        }
    }

    /// Whether a slot of this kind can be made as the run makes it: `check` reports one
    /// that cannot before any run starts.
    pub fn can_be_made(&self) -> Result<(), String> {
        match self {
            MemoryKind::Whiteboard { sections } => new_whiteboard(sections).map(drop),
            &MemoryKind::CodeContext {
                alpha,
                beta,
                gamma,
                threshold,
                ..
            } => new_code_context(alpha, beta, gamma, threshold).map(drop),
            _ => Ok(()),
        }
    }
}

/// Sections named in the workflow become whiteboard sections: the ID prefix is the last
/// word in capitals without a plural `S` (`Key Facts` → `FACT`); a section about files
/// holds workspace-relative paths.
pub fn new_whiteboard(sections: &[String]) -> Result<Whiteboard, String> {
    let specs = sections
        .iter()
        .map(|name| {
            let last = name
                .split_whitespace()
                .last()
                .unwrap_or(name)
                .to_uppercase();
            let prefix: String = last
                .trim_end_matches('S')
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect();
            let prefix = if prefix.is_empty() {
                "ENTRY".to_string()
            } else {
                prefix
            };
            if last.starts_with("FILE") {
                SectionSpec::files(name, &prefix)
            } else {
                SectionSpec::new(name, &prefix)
            }
        })
        .collect();
    Whiteboard::new(specs, vec![".rondo".into(), ".catmaster".into()]).map_err(|e| e.to_string())
}

/// The empty code context of a `code_context` slot, with its weights.
pub fn new_code_context(
    alpha: f64,
    beta: f64,
    gamma: f64,
    threshold: f64,
) -> Result<CodeContext, String> {
    CodeContext::new(ScoreParams {
        alpha,
        beta,
        gamma,
        threshold,
    })
    .map_err(|e| e.to_string())
}
