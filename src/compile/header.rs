//! The `workflow` header: inputs and attributes (description, prompts, provider, round,
//! limits, script).

use super::Compiler;
use super::attrs::Attrs;
use super::types::Type;
use super::workflow::{Input, Limits};
use crate::diagnostics::Diagnostic;
use crate::syntax::{Ast, Expr, ExprKind, TypeExpr, TypeKind};

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
            let (env, default_expr) = match &input.default {
                Some(e) => match env_default(e) {
                    Some(Ok((var, d))) => (Some(var), d),
                    Some(Err(diag)) => {
                        self.diags.push(diag);
                        (None, None)
                    }
                    None => (None, Some(e)),
                },
                None => (None, None),
            };
            let default = default_expr.and_then(|e| self.const_value(e));
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
                env,
                path,
                artifact_root: false,
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
                "provider_env",
                "plugins_env",
                "round",
                "limits",
                "script",
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
        if let Some((var, span)) = attrs.string("provider_env", diags) {
            match env_name_problem(&var, span) {
                Some(diag) => diags.push(diag),
                None => self.workflow.default_provider_env = Some(var),
            }
        }
        // Read by `plugin_tools` (imports), before the roles that list `plugins`.
        if let Some((var, span)) = attrs.string("plugins_env", diags)
            && let Some(diag) = env_name_problem(&var, span)
        {
            diags.push(diag);
        }
        let round = attrs.ident("round", diags);
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

/// `env("VAR")` or `env("VAR", default)` as an input's default: the variable and the
/// default's expression; `None` for any other default.
fn env_default(e: &Expr) -> Option<Result<(String, Option<&Expr>), Diagnostic>> {
    let ExprKind::Call(name, args) = &e.kind else {
        return None;
    };
    if name.name != "env" {
        return None;
    }
    let var = match args.first().map(|a| &a.kind) {
        Some(ExprKind::String(v)) if args.len() <= 2 => v,
        _ => {
            return Some(Err(Diagnostic::error(
                "rondo::input::bad_env",
                "`env` takes the variable's name and, optionally, a default",
            )
            .label(e.span, "not env(\"NAME\") or env(\"NAME\", default)")
            .help(
                "e.g. `input traces_dir: path = env(\"TRACES_DIR\", \"traces\")`",
            )));
        }
    };
    if let Some(diag) = env_name_problem(var, args[0].span) {
        return Some(Err(diag));
    }
    Some(Ok((var.clone(), args.get(1))))
}

/// Why `var` cannot be read into the workflow: not a variable name, or one that holds a
/// secret (keys stay in the environment; only `api_key_env` names them).
fn env_name_problem(var: &str, span: crate::source::Span) -> Option<Diagnostic> {
    let valid = var
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Some(
            Diagnostic::error(
                "rondo::input::bad_env",
                format!("{var:?} is not an environment variable's name"),
            )
            .label(span, "letters, digits and `_`, not starting with a digit")
            .help("e.g. \"TRACES_DIR\""),
        );
    }
    let upper = var.to_ascii_uppercase();
    const SECRET_WORDS: &[&str] = &[
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
    ];
    let secret = upper.split('_').any(|part| SECRET_WORDS.contains(&part));
    secret.then(|| {
        Diagnostic::error(
            "rondo::input::secret_env",
            format!("`{var}` looks like a secret; its value would be recorded with the run"),
        )
        .label(span, "a key, token or password")
        .help("secrets stay in the environment: a provider names its key with `api_key_env`")
    })
}

/// `input NAME: path` (or `path?`): a string naming a file or folder of the host.
fn is_path_type(ty: &TypeExpr) -> bool {
    match &ty.kind {
        TypeKind::Named(name) => name == "path",
        TypeKind::Optional(inner) => matches!(&inner.kind, TypeKind::Named(name) if name == "path"),
        _ => false,
    }
}
