//! The `workflow` header: inputs and attributes (description, prompts, provider, round,
//! limits, script).

use super::Compiler;
use super::attrs::Attrs;
use super::types::Type;
use super::workflow::{Input, Limits, MemoryKind, RoleKind};
use crate::diagnostics::Diagnostic;
use crate::syntax::{Ast, TypeExpr, TypeKind};

impl Compiler<'_> {
    pub(super) fn header_inputs(&mut self, ast: &Ast) {
        let Some(wf) = &ast.workflow else { return };
        self.workflow.name = wf.name.name.clone();
        for input in &wf.inputs {
            if self.input_names.contains_key(&input.name.name) {
                let first = wf
                    .inputs
                    .iter()
                    .find(|i| i.name.name == input.name.name)
                    .map(|i| i.name.span);
                self.duplicate("input", &input.name, first);
                continue;
            }
            let path = is_path_type(&input.ty);
            let ty = if path {
                if matches!(input.ty.kind, TypeKind::Optional(_)) {
                    Type::optional(Type::String)
                } else {
                    Type::String
                }
            } else {
                self.resolve_type(&input.ty)
            };
            let default = input.default.as_ref().and_then(|e| self.const_value(e));
            if let Some(d) = &default
                && let Err(e) = ty.validate(d)
            {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::input::bad_default",
                        format!(
                            "the default of input `{}` does not fit its type",
                            input.name.name
                        ),
                    )
                    .label(input.default.as_ref().map_or(input.span, |e| e.span), e)
                    .help(format!("the input is declared as `{}`", ty.display())),
                );
            }
            self.input_names
                .insert(input.name.name.clone(), self.workflow.inputs.len());
            self.workflow.inputs.push(Input {
                name: input.name.name.clone(),
                ty,
                default,
                path,
            });
        }
    }

    pub(super) fn header_attrs(&mut self, ast: &Ast) {
        let Some(wf) = &ast.workflow else { return };
        let mut attrs = Attrs::new(
            &wf.attrs,
            &[
                "description",
                "prompts",
                "provider",
                "round",
                "limits",
                "script",
                "finally",
                "durable",
            ],
            "the workflow header",
        );
        let diags = &mut self.diags;
        if let Some((d, _)) = attrs.string("description", diags) {
            self.workflow.description = d;
        }
        if let Some((p, span)) = attrs.string("prompts", diags) {
            let dir = self.workflow.dir.join(&p);
            if !dir.is_dir() {
                diags.push(
                    Diagnostic::error(
                        "rondo::workflow::prompts_missing",
                        format!("the prompts folder `{p}` does not exist"),
                    )
                    .label(span, format!("looked for {}", dir.display()))
                    .help("paths are relative to the folder of this file"),
                );
            }
            self.workflow.prompts_dir = dir;
        }
        if let Some((p, span)) = attrs.string("script", diags) {
            let path = self.workflow.dir.join(&p);
            if !path.is_file() {
                diags.push(
                    Diagnostic::error("rondo::workflow::script_missing", format!("the script `{p}` does not exist"))
                        .label(span, format!("looked for {}", path.display()))
                        .help("the scripted provider's replies file (YAML); paths are relative to the folder of this file"),
                );
            }
            self.workflow.script = Some(path);
        }
        let provider = attrs.ident("provider", diags);
        let round = attrs.ident("round", diags);
        let finally = attrs.ident("finally", diags);
        let durable = attrs.ident_list("durable", diags);
        if let Some(limits) = attrs.block("limits", diags) {
            let mut l = Attrs::new(
                limits,
                &["max_steps", "max_wall_time", "max_tokens", "max_cost"],
                "`limits`",
            );
            self.workflow.limits = Limits {
                max_steps: l.count("max_steps", diags).map(|x| x.0),
                max_wall_time_ms: l.duration_ms("max_wall_time", diags).map(|x| x.0),
                max_tokens: l.count("max_tokens", diags).map(|x| x.0),
                max_cost: l.number("max_cost", diags).map(|x| x.0),
            };
            l.finish(diags);
        }
        attrs.finish(diags);
        if let Some(p) = provider
            && let Some(id) = self.lookup_provider(&p)
        {
            self.workflow.default_provider = id;
        }
        if let Some(f) = finally {
            self.finally_role(&f);
        }
        for name in durable {
            let Some(id) = self.lookup_memory(&name) else {
                continue;
            };
            if matches!(
                self.workflow.memory[id].kind,
                MemoryKind::CodeContext { .. } | MemoryKind::History
            ) {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::workflow::not_durable",
                        format!(
                            "a {} cannot carry over from one run to the next",
                            self.workflow.memory[id].kind.kind_name()
                        ),
                    )
                    .label(name.span, "not a whiteboard or a value")
                    .help("`durable` takes whiteboards and plain values; a code context and a history describe one run"),
                );
            } else if !self.workflow.durable.contains(&id) {
                self.workflow.durable.push(id);
            }
        }
        if let Some(r) = round {
            match self.node_names.get(&r.name) {
                Some(&n) if self.workflow.role(n).is_some() => self.workflow.round_role = Some(n),
                _ => {
                    let help = self.suggest_role(&r.name);
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::workflow::unknown_round_role",
                            format!("`round` names `{}`, which is not a role", r.name),
                        )
                        .label(r.span, "not a role")
                        .help(help),
                    );
                }
            }
        }
    }
}

impl Compiler<'_> {
    /// `finally = ROLE`: a role of this workflow; [`Self::finally_is_builtin`] checks its
    /// kind once role bodies are compiled.
    fn finally_role(&mut self, name: &crate::syntax::Ident) {
        match self.node_names.get(&name.name) {
            Some(&n) if self.workflow.role(n).is_some() => {
                self.workflow.finally = Some(n);
                self.finally_span = name.span;
            }
            _ => self.unknown_finally(name),
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
                    "rondo::workflow::finally_not_builtin",
                    format!("`finally` names `{name}`, a {kind} role"),
                )
                .label(self.finally_span, "not a builtin role")
                .label(self.workflow.node(n).span, "declared here")
                .help("the role run when the run ends only updates memory and writes artifacts: declare it `role NAME: builtin { ... }`"),
            );
            self.workflow.finally = None;
        }
    }

    fn unknown_finally(&mut self, name: &crate::syntax::Ident) {
        let help = self.suggest_role(&name.name);
        self.diags.push(
            Diagnostic::error(
                "rondo::workflow::unknown_finally_role",
                format!("`finally` names `{}`, which is not a role", name.name),
            )
            .label(name.span, "not a role")
            .help(help),
        );
    }
}

/// `input NAME: path` (or `path?`): a string naming a file or folder of the host.
fn is_path_type(ty: &TypeExpr) -> bool {
    match &ty.kind {
        TypeKind::Named(name) => name == "path",
        TypeKind::Optional(inner) => matches!(&inner.kind, TypeKind::Named(name) if name == "path"),
        _ => false,
    }
}
