//! The `workflow` header: inputs and attributes (description, prompts, provider, round,
//! limits, script).

use rondo_provider::Budget;

use super::Compiler;
use super::attrs::Attrs;
use super::types::Type;
use super::workflow::{Input, Limits, Workflow};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};
use crate::source::Span;
use crate::syntax::{Ast, Attr, Expr, ExprKind, Ident, TypeExpr, TypeKind};

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
                        Code::InputBadDefault,
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
                span: input.span,
                bound: Default::default(),
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
                "plugins_modules",
                "round",
                "limits",
                "script",
                "finally",
                "durable",
                "secret_env",
                "budget",
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
                        Code::WorkflowPromptsMissing,
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
            script_replies(&path, &p, span, ast, diags);
            self.workflow.script = Some(path);
        }
        let provider = attrs.ident("provider", diags);
        if let Some((var, span)) = attrs.string("provider_env", diags) {
            match env_name_problem(&var, span) {
                Some(diag) => diags.push(diag),
                None => self.workflow.default_provider_env = Some(var),
            }
        }
        for (var, span) in attrs.string_list("secret_env", diags).unwrap_or_default() {
            match env_name_syntax_problem(&var, span) {
                Some(diag) => diags.push(diag),
                None => self.workflow.secret_env.push(var),
            }
        }
        // Read by `plugin_tools` (imports), before the roles that list `plugins`.
        if let Some((var, span)) = attrs.string("plugins_env", diags)
            && let Some(diag) = env_name_problem(&var, span)
        {
            diags.push(diag);
        }
        // Read by `plugin_tools` too: the command listing the tools of a module entry.
        let _ = attrs.string("plugins_modules", diags);
        let round = attrs.ident("round", diags);
        let finally = attrs.ident("finally", diags);
        let durable = attrs.ident_list("durable", diags);
        if let Some(limits) = attrs.block("limits", diags) {
            self.workflow.limits = read_limits(limits, &mut self.workflow, diags);
        }
        if let Some((text, span)) = attrs.string("budget", diags) {
            self.workflow.budget = read_budget(&text, span, diags);
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
        self.durable_memory(durable);
        if let Some(r) = round {
            self.round_role(&r);
        }
    }

    /// `round = ROLE`: the role whose visits count the rounds.
    fn round_role(&mut self, r: &Ident) {
        match self.node_names.get(&r.name) {
            Some(&n) if self.workflow.role(n).is_some() => self.workflow.round_role = Some(n),
            _ => {
                let help = self.suggest_role(&r.name);
                self.diags.push(
                    Diagnostic::error(
                        Code::WorkflowUnknownRoundRole,
                        format!("`round` names `{}`, which is not a role", r.name),
                    )
                    .label(r.span, "not a role")
                    .help(help),
                );
            }
        }
    }
}

impl Compiler<'_> {
    /// `answer = EXPR`: read once the run has ended, like a `test` block's `expect`.
    pub(super) fn header_answer(&mut self, ast: &Ast) {
        let Some(wf) = &ast.workflow else { return };
        let mut answers = wf.answers.iter();
        if let Some(first) = answers.next() {
            let (expr, _) = self.expr(first, &super::Scope::global());
            self.workflow.answer = Some(expr);
        }
        for again in answers {
            self.diags.push(
                Diagnostic::error(
                    Code::AttrDuplicate,
                    "`answer` is set twice in the workflow header",
                )
                .label(again.span, "set again here")
                .help("remove one of the two lines"),
            );
        }
    }
}

/// The header's `script`: the workflow's default reply set (its demo), served by the scripted
/// provider when a run gives no `--script`. It must exist, parse, and reply only as llm roles.
fn script_replies(
    path: &std::path::Path,
    written: &str,
    span: crate::source::Span,
    ast: &Ast,
    diags: &mut crate::diagnostics::Diagnostics,
) {
    const HELP: &str = "the scripted provider's replies (YAML: `replies: {role: \"text\" | [visit 1, visit 2, ...] | {\"2\": \"text\", default: \"text\"}}`); paths are relative to the folder of this file";
    if !path.is_file() {
        diags.push(
            Diagnostic::error(
                Code::WorkflowScriptMissing,
                format!("the script `{written}` does not exist"),
            )
            .label(span, format!("looked for {}", path.display()))
            .help(HELP),
        );
        return;
    }
    let script = match crate::script::Script::from_yaml(path) {
        Ok(s) => s,
        Err(e) => {
            // The YAML parser's first line says where and what; the rest is a code excerpt.
            let prefix = format!("script {}: ", path.display());
            let what = e.lines().next().unwrap_or("");
            let what = what.strip_prefix(prefix.as_str()).unwrap_or(what);
            let what = what.strip_prefix("error: ").unwrap_or(what);
            diags.push(
                Diagnostic::error(
                    Code::WorkflowBadScript,
                    format!("the script `{written}` is not a reply set"),
                )
                .label(span, format!("{}: {what}", path.display()))
                .help(HELP),
            );
            return;
        }
    };
    let llm_roles: Vec<&str> = ast
        .roles
        .iter()
        .filter(|r| r.kind.name == "llm")
        .map(|r| r.name.name.as_str())
        .collect();
    let mut named: Vec<&String> = script.roles.keys().collect();
    named.sort();
    for role in named {
        if !llm_roles.contains(&role.as_str()) {
            let hint = crate::diagnostics::did_you_mean(role, llm_roles.iter().copied())
                .unwrap_or_else(|| format!("its llm roles: {}", llm_roles.join(", ")));
            diags.push(
                Diagnostic::error(
                    Code::WorkflowScriptUnknownRole,
                    format!("the script `{written}` replies as `{role}`, which is not an llm role of this workflow"),
                )
                .label(span, "this reply set")
                .help(hint),
            );
        }
    }
}

/// The workflow's `limits { ... }`.
fn read_limits(limits: &[Attr], workflow: &mut Workflow, diags: &mut Diagnostics) -> Limits {
    let mut l = Attrs::new(
        limits,
        &[
            "max_steps",
            "max_wall_time",
            "max_tokens",
            "max_cost",
            "max_input_bytes",
            "max_memory_bytes",
            "max_bytes",
            "max_len",
            "max_depth",
        ],
        "`limits`",
    );
    super::memory::named_bounds(workflow, &mut l, diags);
    let read = Limits {
        max_steps: l.count("max_steps", diags).map(|x| x.0),
        max_wall_time_ms: l.duration_ms("max_wall_time", diags).map(|x| x.0),
        budget: Budget {
            max_tokens: l.count("max_tokens", diags).map(|x| x.0),
            max_cost: l.number("max_cost", diags).map(|x| x.0),
        },
        max_input_bytes: l.bytes("max_input_bytes", diags),
        max_memory_bytes: l.bytes("max_memory_bytes", diags),
    };
    l.finish(diags);
    read
}

/// `budget = "$2.00"`: the most a run may cost, and where it is written.
fn read_budget(text: &str, span: Span, diags: &mut Diagnostics) -> Option<(f64, Span)> {
    match parse_budget(text) {
        Some(dollars) => Some((dollars, span)),
        None => {
            diags.push(
            Diagnostic::error(
                Code::WorkflowBadBudget,
                format!("{text:?} is not an amount of money"),
            )
            .label(span, "not dollars")
            .help("write the most a run may cost in the profiles' currency, e.g. `budget = \"$2.00\"` or `budget = \"0.50\"`"),
            );
            None
        }
    }
}

/// `"$2.00"`, `"2"` or `"0.5"`: a finite amount of at least 0.
fn parse_budget(text: &str) -> Option<f64> {
    let t = text.trim();
    let t = t.strip_prefix('$').unwrap_or(t).trim();
    if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
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
                Code::InputBadEnv,
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
    if let Some(diag) = env_name_syntax_problem(var, span) {
        return Some(diag);
    }
    rondo_env::name_looks_secret(var).then(|| {
        Diagnostic::error(
            Code::InputSecretEnv,
            format!("`{var}` looks like a secret; its value would be recorded with the run"),
        )
        .label(span, "a key, token or password")
        .help("secrets stay in the environment: a provider names its key with `api_key_env`")
    })
}

/// Why `var` is not an environment variable's name.
fn env_name_syntax_problem(var: &str, span: crate::source::Span) -> Option<Diagnostic> {
    let valid = var
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Some(
            Diagnostic::error(
                Code::InputBadEnv,
                format!("{var:?} is not an environment variable's name"),
            )
            .label(span, "letters, digits and `_`, not starting with a digit")
            .help("e.g. \"TRACES_DIR\""),
        );
    }
    None
}

/// `input NAME: path` (or `path?`): a string naming a file or folder of the host.
fn is_path_type(ty: &TypeExpr) -> bool {
    match &ty.kind {
        TypeKind::Named(name) => name == "path",
        TypeKind::Optional(inner) => matches!(&inner.kind, TypeKind::Named(name) if name == "path"),
        _ => false,
    }
}
