//! The path rule: an input that names a file or folder is declared `path` (a host file,
//! resolved and shown read-only) or `workspace_path` (inside the workspace), never a plain
//! `string`, which a caller of `rondo serve` could point anywhere (`../../..`).

use super::Compiler;
use super::types::Type;
use super::workflow::{Expr, ExprKind, Root};
use crate::diagnostics::{Code, Diagnostic};
use crate::source::Span;

impl Compiler<'_> {
    /// Reports each `string` input that `expr` reads, which then reaches `place`.
    pub(super) fn string_inputs_name_files(&mut self, expr: &Expr, place: &str) {
        let mut found = Vec::new();
        string_inputs(expr, &mut found);
        for (id, span) in found {
            self.string_input_names_file(id, span, place);
        }
    }

    /// Reports a `string` input named by `{{ input.NAME }}` in a template (a tool's log
    /// name) that reaches `place`.
    pub(super) fn template_inputs_name_files(&mut self, template: &str, span: Span, place: &str) {
        let mut rest = template;
        while let Some(at) = rest.find("input.") {
            let after = &rest[at + "input.".len()..];
            let name_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let preceded = rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
            if !preceded && let Some(&id) = self.input_names.get(&after[..name_len]) {
                self.string_input_names_file(id, span, place);
            }
            rest = &after[name_len..];
        }
    }

    /// A tool's arguments (`args = { ... }`): a field the tool declares `workspace_path`
    /// (for any of `tools`) is a folder or file, so no `string` input may fill it.
    pub(super) fn folder_args_from_inputs(&mut self, tools: &[usize], args: &Expr) {
        let ExprKind::Map { entries } = &args.kind else {
            return;
        };
        for (field, value) in entries {
            let folder = tools.iter().find_map(|&t| {
                let tool = self.workflow.tools.get(t)?;
                let ty = tool.input.as_ref()?.field(field)?;
                matches!(ty.strip_optional(), Type::WorkspacePath).then(|| tool.name().to_string())
            });
            if let Some(tool) = folder {
                self.string_inputs_name_files(
                    value,
                    &format!("the folder or file argument `{field}` of tool `{tool}`"),
                );
            }
        }
    }

    fn string_input_names_file(&mut self, id: usize, span: Span, place: &str) {
        let Some(input) = self.workflow.inputs.get(id) else {
            return;
        };
        if input.path || !matches!(input.ty.strip_optional(), Type::String) {
            return;
        }
        let name = input.name.clone();
        self.diags.push(
            Diagnostic::error(
                Code::InputStringPath,
                format!("input `{name}` is a `string`, but it names {place}"),
            )
            .label(span, format!("`input.{name}` reaches {place}"))
            .help(format!(
                "declare it `input {name}: workspace_path` (a folder or file inside the run's workspace, without `..`), or `path` (a host file or folder, read-only for tools): a string may point anywhere, `../../..` included"
            )),
        );
    }
}

/// The `input.X` reads of `expr`, with where each is written. Compiled expressions nest
/// no deeper than the parser's bound.
fn string_inputs(expr: &Expr, out: &mut Vec<(usize, Span)>) {
    match &expr.kind {
        ExprKind::Path {
            root: Root::Input { id },
            ..
        } => out.push((*id, expr.span)),
        ExprKind::Literal { .. }
        | ExprKind::Path { .. }
        | ExprKind::Visits { .. }
        | ExprKind::Used { .. } => {}
        ExprKind::List { items } => items.iter().for_each(|i| string_inputs(i, out)),
        ExprKind::Map { entries } => entries.iter().for_each(|(_, v)| string_inputs(v, out)),
        ExprKind::Call { args, .. } => args.iter().for_each(|a| string_inputs(a, out)),
        ExprKind::Get { base, .. } | ExprKind::Matches { text: base, .. } => {
            string_inputs(base, out)
        }
        ExprKind::Not { operand } | ExprKind::Neg { operand, .. } => string_inputs(operand, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            string_inputs(lhs, out);
            string_inputs(rhs, out);
        }
    }
}
