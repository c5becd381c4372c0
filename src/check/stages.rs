//! Which passes of `check` can run on a file whose compilation found errors. A pass runs
//! unless an error lies in what it reads, so one batch of mistakes does not hide the next
//! (a wrong update type says nothing about the graph), while a dropped route or an
//! unresolved condition, which would make the graph passes report follow-on errors, stops
//! them.

use crate::diagnostics::{Code, Diagnostic, Diagnostics, Severity, did_you_mean};
use crate::source::Span;
use crate::syntax::{Ast, Attr, UpdateStmt};

/// What the passes after compilation may rely on.
#[derive(Debug, Clone, Copy)]
pub struct Sound {
    /// Nodes, routes, their conditions and bounds, and the output types routes read are
    /// as written: the graph passes (and which roles surely ran) mean something.
    pub graph: bool,
    /// Memory declarations compiled without error.
    pub memory: bool,
}

impl Sound {
    pub const ALL: Sound = Sound {
        graph: true,
        memory: true,
    };
    pub const NONE: Sound = Sound {
        graph: false,
        memory: false,
    };
}

/// What the compiler's `diags` leave sound in the workflow it made from `ast`.
pub fn sound(ast: &Ast, diags: &Diagnostics) -> Sound {
    let harmless = harmless_regions(ast);
    let errors = || diags.iter().filter(|d| d.severity == Severity::Error);
    Sound {
        graph: errors().all(|d| leaves_graph(d, &harmless)),
        memory: errors().all(|d| !is_memory_declaration_error(d.code)),
    }
}

/// Codes whose fault stays where it is: the compiler reported it and kept (or dropped)
/// only something no graph pass reads: an update, an artifact, a test, a tool, provider or
/// environment declaration, a template, or a spelling read as meant (`True`, `&&`).
fn local_code(code: Code) -> bool {
    use Code::*;
    let area = code.as_str().split("::").nth(1).unwrap_or("");
    matches!(
        area,
        "update"
            | "artifact"
            | "test"
            | "tool"
            | "provider"
            | "environment"
            | "env"
            | "import"
            | "input"
            | "exit"
            | "template"
    ) || is_memory_declaration_error(code)
        || matches!(
            code,
            SyntaxPythonLiteral
                | SyntaxPythonKeyword
                | SyntaxIsOperator
                | SyntaxCOperator
                | SyntaxSingleEquals
                | SyntaxSingleQuote
                | SyntaxColonAttribute
                | WorkflowBadScript
                | WorkflowScriptMissing
                | WorkflowScriptUnknownRole
                | WorkflowPromptsMissing
                | WorkflowNotDurable
                | RoleBadCall
                | RoleBadCalls
                | RoleBadDemos
                | RoleBadMode
                | RoleBadShow
                | RoleEmptyCommand
                | RoleNativeNeeds
                | RoleNoAction
                | RoleNoPrompt
                | RoleNotConversation
                | RoleUnknownCoercion
        )
}

fn is_memory_declaration_error(code: Code) -> bool {
    code.as_str().starts_with("rondo::memory::") && code != Code::MemoryUnknown
}

fn leaves_graph(d: &Diagnostic, harmless: &[Span]) -> bool {
    if local_code(d.code) {
        return true;
    }
    // A type or name wrong anywhere may change what a route condition reads.
    if d.code.as_str().starts_with("rondo::type::") || d.code.as_str().starts_with("rondo::name::")
    {
        return false;
    }
    // A syntax error may have dropped a line of any kind: only one inside a test block,
    // an update or an artifact stays there.
    let at = d.primary_span();
    harmless
        .iter()
        .any(|h| h.start <= at.start && at.end <= h.end && !h.is_empty())
}

/// Parts of the file the graph passes never read: what an error inside them breaks, they
/// do not need.
fn harmless_regions(ast: &Ast) -> Vec<Span> {
    let mut out = Vec::new();
    if let Some(w) = &ast.workflow {
        out.extend(w.inputs.iter().map(|i| i.span));
        out.extend(w.answers.iter().map(|a| a.span));
        out.extend(attr_spans(&w.attrs, &["finally", "round"]));
    }
    out.extend(ast.imports.iter().map(|i| i.span));
    out.extend(ast.memory.iter().map(|m| m.span));
    out.extend(ast.providers.iter().map(|p| p.span));
    out.extend(ast.tools.iter().map(|t| t.span));
    out.extend(ast.environments.iter().map(|e| e.span));
    out.extend(ast.artifacts.iter().map(|a| a.span));
    out.extend(ast.tests.iter().map(|t| t.span));
    for role in &ast.roles {
        out.extend(role.updates.iter().map(|u| match u {
            UpdateStmt::Set { span, .. } | UpdateStmt::Call { span, .. } => *span,
        }));
        out.extend(role.artifacts.iter().map(|a| a.span));
        out.extend(attr_spans(&role.attrs, &["max_visits"]));
    }
    out
}

/// The attributes other than `graph` ones (nor a misspelling of one).
fn attr_spans<'a>(attrs: &'a [Attr], graph: &'a [&str]) -> impl Iterator<Item = Span> + 'a {
    attrs
        .iter()
        .filter(|a| did_you_mean(&a.key.name, graph.iter().copied()).is_none())
        .map(|a| a.span)
}
