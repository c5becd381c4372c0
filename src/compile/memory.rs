//! Memory slots: their kinds, types and initial values.

use rondo_memory::{CodeContext, ScoreParams, SectionSpec, Whiteboard};
use serde_json::Value;

use super::Compiler;
use super::attrs::Attrs;
use super::types::Type;
use super::workflow::{
    DEFAULT_CONVERSATION_BYTES, DEFAULT_CONVERSATION_MESSAGES, MemoryKind, MemorySlot,
};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::{self, Ast, Ident};

impl Compiler<'_> {
    pub(super) fn memory(&mut self, ast: &Ast) {
        for entry in &ast.memory {
            if let Some(&id) = self.memory_names.get(&entry.name.name) {
                let first = self.workflow.memory[id].span;
                self.duplicate("memory", &entry.name, Some(first));
                continue;
            }
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
                syntax::MemoryShape::Kind { kind, attrs } => self.memory_kind(kind, attrs),
            };
            self.memory_names
                .insert(entry.name.name.clone(), self.workflow.memory.len());
            self.workflow.memory.push(MemorySlot {
                name: entry.name.name.clone(),
                kind,
                span: entry.name.span,
            });
        }
    }

    pub(super) fn memory_kind(&mut self, kind: &Ident, attrs: &[syntax::Attr]) -> MemoryKind {
        let diags = &mut self.diags;
        match kind.name.as_str() {
            "whiteboard" => {
                let mut a = Attrs::new(attrs, &["sections"], "a whiteboard");
                let sections = a.string_list("sections", diags).unwrap_or_default();
                let misspelled = a.misspells(&["sections"]);
                a.finish(diags);
                if sections.is_empty() && !misspelled {
                    diags.push(
                        Diagnostic::error(Code::MemoryNoSections, "a whiteboard needs its allowed sections")
                            .label(kind.span, "no `sections`")
                            .help("write `whiteboard { sections = [\"Facts\", \"Key Files\", \"Constraints\"] }`"),
                    );
                }
                MemoryKind::Whiteboard {
                    sections: sections.into_iter().map(|s| s.0).collect(),
                }
            }
            "code_context" => {
                let mut a = Attrs::new(
                    attrs,
                    &["alpha", "beta", "gamma", "threshold", "root"],
                    "a code context",
                );
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
            "conversation" => {
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
            _ => {
                Attrs::new(attrs, &[], "a history").finish(diags);
                MemoryKind::History
            }
        }
    }
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
