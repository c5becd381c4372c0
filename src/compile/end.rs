//! The end of a run as the header declares it: `finally = ROLE`, the builtin role applied
//! once whatever the exit, and `durable = [...]`, the memories carried over to the next run
//! made in the same `--workspace` folder.

use super::Compiler;
use super::workflow::{MemoryKind, RoleKind};
use crate::diagnostics::{Code, Diagnostic};
use crate::syntax::Ident;

impl Compiler<'_> {
    /// `finally = ROLE`: a role of this workflow; [`Self::finally_is_builtin`] checks its
    /// kind once role bodies are compiled.
    pub(super) fn finally_role(&mut self, name: &Ident) {
        match self.node_names.get(&name.name) {
            Some(&n) if self.workflow.role(n).is_some() => {
                self.workflow.finally = Some(n);
                self.finally_span = name.span;
            }
            _ => {
                let help = self.suggest_role(&name.name);
                self.diags.push(
                    Diagnostic::error(
                        Code::WorkflowUnknownFinallyRole,
                        format!("`finally` names `{}`, which is not a role", name.name),
                    )
                    .label(name.span, "not a role")
                    .help(help),
                );
            }
        }
    }

    /// The `finally` role is builtin: it must not call a model or a tool at the end of a
    /// run that may have stopped for want of budget or time.
    pub(super) fn finally_is_builtin(&mut self) {
        let Some(n) = self.workflow.finally else {
            return;
        };
        let Some(role) = self.workflow.role(n) else {
            return;
        };
        if !matches!(role.kind, RoleKind::Builtin) {
            let kind = role.kind.name();
            let name = self.workflow.node(n).name.clone();
            self.diags.push(
                Diagnostic::error(
                    Code::WorkflowFinallyNotBuiltin,
                    format!("`finally` names `{name}`, a {kind} role"),
                )
                .label(self.finally_span, "not a builtin role")
                .label(self.workflow.node(n).span, "declared here")
                .help("the role run when the run ends only updates memory and writes artifacts: declare it `role NAME: builtin { ... }`"),
            );
            self.workflow.finally = None;
        }
    }

    /// `durable = [...]`: whiteboards and plain values; a code context and a history
    /// describe one run.
    pub(super) fn durable_memory(&mut self, names: Vec<Ident>) {
        for name in names {
            let Some(id) = self.lookup_memory(&name) else {
                continue;
            };
            if matches!(
                self.workflow.memory[id].kind,
                MemoryKind::CodeContext { .. }
                    | MemoryKind::History
                    | MemoryKind::Conversation { .. }
            ) {
                self.diags.push(
                    Diagnostic::error(
                        Code::WorkflowNotDurable,
                        format!(
                            "a {} cannot carry over from one run to the next",
                            self.workflow.memory[id].kind.kind_name()
                        ),
                    )
                    .label(name.span, "not a whiteboard or a value")
                    .help("`durable` takes whiteboards and plain values; a code context, a history and a conversation describe one run"),
                );
            } else if !self.workflow.durable.contains(&id) {
                self.workflow.durable.push(id);
            }
        }
    }
}
