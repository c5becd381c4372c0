//! Roles: names first (with exits), then bodies: llm and tool roles, their outputs and artifacts.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use petgraph::graph::NodeIndex;

use super::attrs::Attrs;
use super::expr::Scope;
use super::types::{self, Type};
use super::workflow::{
    Artifact, ExitSpec, InputId, LlmRole, MaxVisits, MemoryId, MemoryKind, Node, NodeKind,
    OutputFormat, Role, RoleKind, RouteTarget, Show, ToolAction, ToolMode, ToolRole, Update,
};
use super::{BUILTIN_EXITS, Compiler, INVALID_FIELDS, RESERVED_ROOTS, tera_error_text};
use crate::diagnostics::{Code, Diagnostic, did_you_mean};
use crate::source::Span;
use crate::syntax::{self, Ast, Ident, ValueKind};

impl Compiler<'_> {
    pub(super) fn declare_nodes(&mut self, ast: &Ast) {
        for (name, code) in BUILTIN_EXITS {
            let index = self.workflow.graph.add_node(Node {
                name: (*name).into(),
                kind: NodeKind::Exit(ExitSpec {
                    code: *code,
                    builtin: true,
                }),
                span: Span::default(),
            });
            self.node_names.insert((*name).into(), index);
        }
        for role in &ast.roles {
            if self.check_node_name(&role.name) {
                let index = self.workflow.graph.add_node(Node {
                    name: role.name.name.clone(),
                    kind: NodeKind::Role(Box::new(Role {
                        kind: RoleKind::Builtin,
                        max_visits: None,
                        reads: Vec::new(),
                        writes: Vec::new(),
                        updates: Vec::new(),
                        artifacts: Vec::new(),
                        output_type: Arc::new(Type::Any),
                        map_worker: false,
                    })),
                    span: role.name.span,
                });
                self.node_names.insert(role.name.name.clone(), index);
                if role.kind.name == "llm"
                    && matches!(
                        role.output,
                        Some((
                            syntax::OutputDecl::Json(_) | syntax::OutputDecl::Tagged(_),
                            _
                        ))
                    )
                {
                    self.json_llm.insert(index);
                }
                let output_type = self.role_output_type(role);
                if let NodeKind::Role(r) = &mut self.workflow.graph[index].kind {
                    r.output_type = output_type;
                }
            }
        }
        let mut next_code = 0;
        for exit in &ast.exits {
            if self.check_node_name(&exit.name) {
                let index = self.workflow.graph.add_node(Node {
                    name: exit.name.name.clone(),
                    kind: NodeKind::Exit(ExitSpec {
                        code: next_code,
                        builtin: false,
                    }),
                    span: exit.name.span,
                });
                next_code = 1;
                self.node_names.insert(exit.name.name.clone(), index);
            }
        }
    }

    fn check_node_name(&mut self, name: &Ident) -> bool {
        if RESERVED_ROOTS.contains(&name.name.as_str()) {
            self.refused_nodes.insert(name.name.clone());
            self.diags.push(
                Diagnostic::error(Code::NameReserved, format!("`{}` is reserved", name.name))
                    .label(name.span, "reserved name")
                    .help(format!(
                        "{} have a meaning in expressions; choose another name",
                        RESERVED_ROOTS.join(", ")
                    )),
            );
            return false;
        }
        if let Some(&existing) = self.node_names.get(&name.name) {
            let first = self.workflow.graph[existing].span;
            self.twice_declared.insert(name.name.clone());
            let what = if BUILTIN_EXITS.iter().any(|(n, _)| *n == name.name) {
                "the built-in exit"
            } else {
                "role or exit"
            };
            self.duplicate(what, name, Some(first));
            return false;
        }
        true
    }

    fn role_output_type(&mut self, role: &syntax::RoleDecl) -> Arc<Type> {
        match role.kind.name.as_str() {
            "tool" if role.attrs.iter().any(|a| a.key.name == "calls") => {
                Arc::new(calls_result_type())
            }
            "tool" => self
                .tool_result
                .get_or_insert_with(|| Arc::new(tool_result_type()))
                .clone(),
            "llm" if declared_mode(role).is_some_and(ToolMode::native) => {
                Arc::new(native_output_type())
            }
            "llm" => Arc::new(match &role.output {
                Some((syntax::OutputDecl::Json(ty), span)) => {
                    let ty = self.resolve_type(ty);
                    self.reserved_output_fields(&role.name.name, &ty, *span);
                    ty
                }
                Some((syntax::OutputDecl::Tagged(ty), span)) => {
                    let ty = self.resolve_type(ty);
                    self.reserved_output_fields(&role.name.name, &ty, *span);
                    if !matches!(ty, Type::Object { .. }) {
                        self.diags.push(
                            Diagnostic::error(
                                Code::RoleTaggedOutputNotObject,
                                format!(
                                    "`output tagged` of `{}` needs an object type, not {}",
                                    role.name.name,
                                    ty.display()
                                ),
                            )
                            .label(*span, "each field is one `<field>...</field>` tag of the reply")
                            .help("declare the fields, e.g. `output tagged { thought: string, action: string }`, or use `output json`"),
                        );
                    }
                    ty
                }
                _ => Type::String,
            }),
            "builtin" => Arc::new(Type::Null),
            // An unknown kind is reported; reads of its output are not faults of their own.
            _ => Arc::new(Type::Any),
        }
    }

    /// `invalid` and `invalid_reply` are the pseudo-fields of the invalid outcome.
    fn reserved_output_fields(&mut self, role: &str, ty: &Type, span: Span) {
        for name in ty.field_names() {
            if INVALID_FIELDS.contains(&name.as_str()) {
                self.diags.push(
                    Diagnostic::error(
                        Code::RoleReservedOutputField,
                        format!("the output type of `{role}` declares a field `{name}`, which is reserved"),
                    )
                    .label(span, format!("declares `{name}`"))
                    .help(format!(
                        "`{role}.invalid` and `{role}.invalid_reply` describe a reply that stayed invalid after its retries; rename the field"
                    )),
                );
            }
        }
    }

    pub(super) fn role_bodies(&mut self, ast: &Ast) {
        for decl in &ast.roles {
            let Some(&index) = self.node_names.get(&decl.name.name) else {
                continue;
            };
            if self.workflow.graph[index].span != decl.name.span {
                continue;
            }
            let role = self.role_body(decl, index);
            if let NodeKind::Role(r) = &mut self.workflow.graph[index].kind {
                **r = role;
            }
        }
    }

    fn role_body(&mut self, decl: &syntax::RoleDecl, index: NodeIndex) -> Role {
        let kind_name = decl.kind.name.as_str();
        let known: &'static [&'static str] = match kind_name {
            "llm" => LLM_KEYS,
            "tool" => TOOL_KEYS,
            "builtin" => &["reads", "max_visits"],
            _ => &ANY_ROLE_KEYS,
        };
        if !matches!(kind_name, "llm" | "tool" | "builtin") {
            let keys = || decl.attrs.iter().map(|a| a.key.name.as_str());
            let looks_like = if keys().any(|k| LLM_KEYS.contains(&k) && !TOOL_KEYS.contains(&k)) {
                Some("llm")
            } else if keys().any(|k| TOOL_KEYS.contains(&k) && !LLM_KEYS.contains(&k)) {
                Some("tool")
            } else {
                None
            };
            let help = did_you_mean(kind_name, ["llm", "tool", "builtin"])
                .or_else(|| looks_like.map(|k| format!("from its attributes, did you mean `{k}`?")))
                .unwrap_or_else(|| "a role is `llm`, `tool` or `builtin`".into());
            self.diags.push(
                Diagnostic::error(
                    Code::RoleUnknownKind,
                    format!("unknown role kind `{kind_name}`"),
                )
                .label(decl.kind.span, "not a role kind")
                .help(help),
            );
        }
        let mut attrs = Attrs::new(
            &decl.attrs,
            known,
            format!("{kind_name} role `{}`", decl.name.name),
        );
        let max_visits = self.max_visits(&mut attrs, decl);
        let reads = attrs
            .ident_list("reads", &mut self.diags)
            .iter()
            .filter_map(|name| self.lookup_memory(name))
            .collect::<Vec<_>>();
        let output_type = self
            .workflow
            .role(index)
            .map_or_else(|| Arc::new(Type::Any), |r| r.output_type.clone());
        let scope = Scope::role(index);
        let kind = match kind_name {
            "llm" => RoleKind::Llm(Box::new(self.llm_role(decl, &mut attrs))),
            "tool" => RoleKind::Tool(Box::new(self.tool_role(decl, &mut attrs, &scope))),
            _ => RoleKind::Builtin,
        };
        if kind_name != "llm"
            && let Some((_, span)) = &decl.output
        {
            self.diags.push(
                Diagnostic::error(
                    Code::RoleOutputOnNonLlm,
                    format!(
                        "only llm roles declare an output; `{}` is a {kind_name} role",
                        decl.name.name
                    ),
                )
                .label(*span, "not allowed here")
                .help("a tool role's output is the standard tool result; a builtin role has none"),
            );
        }
        attrs.finish(&mut self.diags);
        let mut writes = Vec::new();
        let updates = decl
            .updates
            .iter()
            .filter_map(|u| {
                let update = self.update(u, &scope)?;
                let m = match &update {
                    Update::Set { memory, .. } | Update::Op { memory, .. } => *memory,
                };
                if !writes.contains(&m) {
                    writes.push(m);
                }
                Some(update)
            })
            .collect();
        let artifacts = decl
            .artifacts
            .iter()
            .map(|a| self.artifact(a, &scope))
            .collect();
        Role {
            kind,
            max_visits,
            reads,
            writes,
            updates,
            artifacts,
            output_type,
            map_worker: false,
        }
    }

    /// A builtin role without updates or artifacts is a mistake, unless the routes give it
    /// work: branches start (`-> parallel [..]`, `-> map`) or meet there, or it chooses
    /// between routes. Run after the routes are compiled.
    pub(super) fn empty_builtins(&mut self, ast: &Ast) {
        for decl in &ast.roles {
            if decl.kind.name != "builtin" || !decl.updates.is_empty() || !decl.artifacts.is_empty()
            {
                continue;
            }
            let Some(&index) = self.node_names.get(&decl.name.name) else {
                continue;
            };
            if self.workflow.graph[index].span != decl.name.span {
                continue;
            }
            let leaving = self.workflow.routes.iter().filter(|r| r.from == index);
            let forks = leaving.clone().any(|r| {
                matches!(
                    r.target,
                    RouteTarget::Parallel { .. } | RouteTarget::Map { .. }
                )
            });
            let chooses = leaving.count() > 1;
            let joins = self.workflow.routes.iter().any(|r| match &r.target {
                RouteTarget::Parallel { join, .. } | RouteTarget::Map { join, .. } => {
                    *join == index
                }
                RouteTarget::Node { .. } => false,
            });
            if forks || joins || chooses {
                continue;
            }
            self.diags.push(
                Diagnostic::warning(
                    Code::RoleEmptyBuiltin,
                    format!("builtin role `{}` does nothing", decl.name.name),
                )
                .label(decl.name.span, "no `update` block and no artifact")
                .help("a builtin role updates memory: add `update { ... }`, or route to the next role directly"),
            );
        }
    }

    /// `max_visits = N`, or `max_visits = input.NAME` naming an `int` input: the run's value
    /// bounds the role (a loop bounded by a number the user gives, such as `max_rounds`).
    fn max_visits(&mut self, attrs: &mut Attrs<'_>, decl: &syntax::RoleDecl) -> Option<MaxVisits> {
        let zero = |span| {
            Diagnostic::error(
                Code::RoleZeroVisits,
                "`max_visits = 0` means the role can never run",
            )
            .label(span, "never runs")
        };
        if let Some(attr) = attrs.get("max_visits")
            && let syntax::ValueKind::Path(parts) = &attr.value.kind
        {
            let span = attr.value.span;
            let name = match parts.as_slice() {
                [root, name] if root.name == "input" => name,
                _ => {
                    self.diags.push(
                        Diagnostic::error(
                            Code::RoleBadMaxVisits,
                            "`max_visits` is a whole number or an input",
                        )
                        .label(span, "neither a number nor `input.NAME`")
                        .help("e.g. `max_visits = 10` or `max_visits = input.max_rounds`"),
                    );
                    return None;
                }
            };
            let Some(&id) = self.input_names.get(&name.name) else {
                let names: Vec<&str> = self
                    .workflow
                    .inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect();
                self.diags.push(
                    Diagnostic::error(
                        Code::RoleUnknownInput,
                        format!(
                            "`max_visits` names input `{}`, which is not declared",
                            name.name
                        ),
                    )
                    .label(name.span, "no such input")
                    .help(
                        did_you_mean(&name.name, names.iter().copied()).unwrap_or_else(|| {
                            "declare it in the workflow header: `input max_rounds: int = 8`".into()
                        }),
                    ),
                );
                return None;
            };
            let input = &self.workflow.inputs[id];
            if input.ty != Type::Int {
                self.diags.push(
                    Diagnostic::error(
                        Code::RoleBadMaxVisits,
                        format!(
                            "`max_visits` needs an `int` input; `{}` is `{}`",
                            input.name,
                            input.ty.display()
                        ),
                    )
                    .label(span, "not a whole number")
                    .help(format!(
                        "declare it `input {}: int`, with a default if it may be left out",
                        input.name
                    )),
                );
                return None;
            }
            if input.default.as_ref().and_then(serde_json::Value::as_u64) == Some(0) {
                self.diags.push(zero(span).help(format!(
                    "the default of input `{}` is 0: give it a default of at least 1",
                    input.name
                )));
            }
            return Some(MaxVisits::Input(id));
        }
        let max_visits = attrs.count("max_visits", &mut self.diags).map(|x| x.0);
        if max_visits == Some(0) {
            self.diags
                .push(zero(decl.span).help("use a bound of at least 1, or remove the role"));
        }
        max_visits.map(MaxVisits::Fixed)
    }

    pub(super) fn artifact(&mut self, a: &syntax::ArtifactDecl, scope: &Scope) -> Artifact {
        let (value, _) = self.expr(&a.value, scope);
        // Text without a brace is plain text to tera: no parse needed (each costs more
        // than the rest of the role's compile).
        if a.name.contains('{')
            && let Err(e) = super::parse_template(&a.name)
        {
            self.diags.push(
                Diagnostic::error(
                    Code::ArtifactBadName,
                    "the artifact name is not a valid template",
                )
                .label(a.name_span, tera_error_text(&e))
                .help("names may use `{{ round }}`, `{{ visit }}`, `{{ step }}`, `{{ run_id }}`"),
            );
        }
        let (root, name) = match self.artifact_root(&a.name) {
            Some((id, rest)) => {
                self.workflow.inputs[id].artifact_root = true;
                (Some(id), rest.to_string())
            }
            None => (None, a.name.clone()),
        };
        // The part before the first template tag is known now: a literal name, or the
        // folders a templated one starts with.
        let fixed = match name.find(['{']) {
            None => Some(name.as_str()),
            Some(at) => name[..at].rfind('/').map(|slash| &name[..slash]),
        };
        if let Some(Err(why)) = fixed
            .filter(|f| !f.is_empty() || name.starts_with('/'))
            .map(|f| rondo_workspace::relative_name(if f.is_empty() { "/" } else { f }))
        {
            self.diags.push(
                Diagnostic::error(
                    Code::ArtifactOutsideWorkspace,
                    "the artifact would be written outside the run's workspace",
                )
                .label(a.name_span, why.to_string())
                .help("name it relative to the workspace, e.g. `reports/summary.md`; the run records stay out of reach"),
            );
        }
        Artifact {
            root,
            name,
            append: a.append,
            value,
            span: a.span,
            name_span: a.name_span,
        }
    }

    /// `{{ input.NAME }}/rest` where `NAME` is a `path` input: the input and `rest`.
    fn artifact_root<'n>(&self, name: &'n str) -> Option<(InputId, &'n str)> {
        let (tag, rest) = name.strip_prefix("{{")?.split_once("}}")?;
        let input = tag.trim().strip_prefix("input.")?;
        let rest = rest.strip_prefix('/')?;
        let &id = self.input_names.get(input)?;
        self.workflow.inputs[id].path.then_some((id, rest))
    }

    pub(super) fn workflow_artifacts(&mut self, ast: &Ast) {
        let scope = Scope::global();
        self.workflow.artifacts = ast
            .artifacts
            .iter()
            .map(|a| self.artifact(a, &scope))
            .collect();
    }

    fn llm_role(&mut self, decl: &syntax::RoleDecl, attrs: &mut Attrs<'_>) -> LlmRole {
        let diags = &mut self.diags;
        let provider = attrs.ident("provider", diags);
        let prompt = attrs.string("prompt", diags);
        let system = attrs.string("system", diags);
        let conversation = attrs.ident("conversation", diags);
        let mode_attr = attrs.get("mode").map(|a| (a.value.span, a.key.span));
        let retries = attrs.count("retries", diags).map_or(2, |x| x.0);
        let tools = attrs.ident_list("tools", diags);
        let max_reply = attrs.bytes("max_reply", diags).map(|x| x.0);
        let demos = attrs.string("demos", diags).and_then(|(d, span)| {
            if d.ends_with(".json") && !d.starts_with('/') {
                return Some(PathBuf::from(d));
            }
            self.diags.push(
                Diagnostic::error(Code::RoleBadDemos, "`demos` names a JSON file")
                    .label(span, "not a relative path ending in `.json`")
                    .help("e.g. `demos = \"opt/plan_demos.json\"`, relative to the workflow file"),
            );
            None
        });
        // The header, compiled before role bodies, has set the default.
        let default_provider = provider.is_none();
        let provider = provider
            .and_then(|p| self.lookup_provider(&p))
            .unwrap_or(self.workflow.default_provider);
        // A conversation that is named but wrong is its own error: the role is judged as
        // written, with one.
        let names_conversation = conversation.is_some();
        let conversation = conversation.and_then(|c| self.conversation_memory(&c));
        let prompt = match prompt {
            Some((p, _)) => Some(p.into()),
            // The conversation holds the user's turns.
            None if names_conversation => None,
            None if attrs.misspells(&["prompt"]) => None,
            None => {
                self.diags.push(
                    Diagnostic::error(
                        Code::RoleNoPrompt,
                        format!("llm role `{}` has no prompt template", decl.name.name),
                    )
                    .label(decl.name.span, "no `prompt = \"...\"`")
                    .help(format!(
                        "add `prompt = \"{}.tera\"` (a file in the prompts folder)",
                        decl.name.name
                    )),
                );
                None
            }
        };
        let mode = self.llm_mode(decl, mode_attr, &tools, names_conversation);
        let output = self.llm_output(decl);
        let coerce = self.coerce_attr(attrs);
        LlmRole {
            provider,
            default_provider,
            system: system.map(|s| s.0.into()),
            prompt,
            output,
            retries,
            tools: self.tool_list(&tools),
            coerce,
            max_reply,
            demos,
            conversation,
            mode,
        }
    }

    /// How an llm role offers its tools (`mode = ...`, or a declared `output` of native
    /// calls); native calling needs tools, a conversation and no declared output.
    fn llm_mode(
        &mut self,
        decl: &syntax::RoleDecl,
        mode_attr: Option<(Span, Span)>,
        tools: &[Ident],
        names_conversation: bool,
    ) -> ToolMode {
        let mode = match (declared_mode(decl), mode_attr) {
            (Some(mode), _) => mode,
            (None, None) => ToolMode::Json,
            (None, Some((span, _))) => {
                self.diags.push(
                Diagnostic::error(Code::RoleBadMode, "`mode` is `json`, `native` or `auto`")
                    .label(span, "not a mode")
                    .help("`native` sends the tools' schemas in the provider's own form and the reply's calls become `{text, calls}`; `json` (the default) shows their usage in the prompt; `auto` is native where the provider supports it"),
            );
                ToolMode::Json
            }
        };
        if mode.native() {
            let span = mode_attr.map_or(decl.name.span, |(_, key)| key);
            let lacking: Vec<&str> = [
                (tools.is_empty(), "`tools`"),
                (!names_conversation, "a `conversation`"),
                (decl.output.is_some(), "no declared `output`"),
            ]
            .into_iter()
            .filter_map(|(missing, what)| missing.then_some(what))
            .collect();
            if !lacking.is_empty() {
                self.diags.push(
                Diagnostic::error(
                    Code::RoleNativeNeeds,
                    format!(
                        "native tool calling in `{}` needs {}",
                        decl.name.name,
                        lacking.join(" and ")
                    ),
                )
                .label(span, "native tool calls")
                .help("a native role offers `tools = [..]`, sends and extends `conversation = NAME`, and outputs `{text, calls}` (no `output` line): route `calls` to a tool role with `calls = ROLE.calls`"),
            );
            }
        }
        mode
    }

    /// The form of an llm role's reply, by its `output` line.
    fn llm_output(&self, decl: &syntax::RoleDecl) -> OutputFormat {
        match &decl.output {
            Some((syntax::OutputDecl::Json(_), _)) => OutputFormat::Json {
                ty: self
                    .workflow
                    .node_output_type(&self.node_names, &decl.name.name),
            },
            Some((syntax::OutputDecl::Tagged(_), _)) => OutputFormat::Tagged {
                ty: self
                    .workflow
                    .node_output_type(&self.node_names, &decl.name.name),
            },
            Some((syntax::OutputDecl::Code(lang), _)) => OutputFormat::Code {
                language: lang.clone(),
            },
            _ => OutputFormat::Text,
        }
    }

    /// `conversation = NAME` names a conversation memory.
    fn conversation_memory(&mut self, name: &Ident) -> Option<MemoryId> {
        let id = self.lookup_memory(name)?;
        if matches!(
            self.workflow.memory[id].kind,
            MemoryKind::Conversation { .. }
        ) {
            return Some(id);
        }
        self.not_a_conversation(id, name.span);
        None
    }

    /// Memory `id` used where a conversation is needed, at `used`: one error for every
    /// such use ([`Code::merges_uses`]), first at the declaration, which is what to change.
    pub(super) fn not_a_conversation(&mut self, id: MemoryId, used: Span) {
        let slot = &self.workflow.memory[id];
        let is = match &slot.kind {
            MemoryKind::Value { ty, .. } => format!("`{}`", ty.display()),
            kind => format!("a {}", kind.kind_name()),
        };
        let name = &slot.name;
        self.diags.push(
            Diagnostic::error(
                Code::RoleNotConversation,
                format!("memory `{name}` is used as a conversation, but it is {is}"),
            )
            .label(slot.span, format!("declared as {is}"))
            .label(used, "used as a conversation")
            .help(format!(
                "declare it `{name}: conversation` in `memory {{ }}`: a conversation holds the messages a role with `conversation = {name}` sends and extends"
            )),
        );
    }

    /// `coerce = safe` (default), `coerce = strict`, or a list of coercion names.
    fn coerce_attr(&mut self, attrs: &mut Attrs<'_>) -> Vec<types::Coercion> {
        use types::Coercion;
        let Some(value) = attrs.value("coerce") else {
            return Coercion::safe();
        };
        let names: Vec<(String, Span)> = match &value.kind {
            ValueKind::Ident(s) if s == "safe" => return Coercion::safe(),
            ValueKind::Ident(s) if s == "strict" => return Vec::new(),
            ValueKind::Ident(s) | ValueKind::String(s) => vec![(s.clone(), value.span)],
            ValueKind::List(items) => items
                .iter()
                .filter_map(|v| match &v.kind {
                    ValueKind::Ident(s) | ValueKind::String(s) => Some((s.clone(), v.span)),
                    _ => None,
                })
                .collect(),
            _ => vec![(String::new(), value.span)],
        };
        let mut out = Vec::new();
        for (name, span) in names {
            match Coercion::from_name(&name) {
                Some(c) => out.push(c),
                None => {
                    let all: Vec<&str> = ["safe", "strict"]
                        .into_iter()
                        .chain(Coercion::ALL.iter().map(|c| c.name()))
                        .collect();
                    self.diags.push(
                        Diagnostic::error(
                            Code::RoleUnknownCoercion,
                            format!("`{name}` is not a coercion"),
                        )
                        .label(span, "unknown")
                        .help(
                            did_you_mean(&name, all.iter().copied()).unwrap_or_else(|| {
                                format!(
                                    "`coerce` is `safe` (the default), `strict`, or a list of: {}",
                                    all[2..].join(", ")
                                )
                            }),
                        ),
                    );
                }
            }
        }
        out
    }

    fn tool_role(
        &mut self,
        decl: &syntax::RoleDecl,
        attrs: &mut Attrs<'_>,
        scope: &Scope,
    ) -> ToolRole {
        let diags = &mut self.diags;
        let env = attrs.ident("env", diags);
        let timeout_ms = attrs.duration_ms("timeout", diags).map(|x| x.0);
        let (log, log_span) = attrs.string("log", diags).unzip();
        let max_output = attrs.bytes("max_output", diags).map(|x| x.0);
        let command = attrs.string_list("command", diags);
        let run = attrs.ident("run", diags);
        let args = attrs.value("args");
        let call = attrs.value("call");
        let argv = attrs.value("argv");
        let calls = attrs.value("calls");
        let conversation = attrs.ident("conversation", diags);
        let choices = attrs.ident_list("tools", diags);
        let show = match attrs.value("show") {
            None => Show::All,
            Some(v) => parse_show(v).unwrap_or_else(|| {
                diags.push(
                    Diagnostic::error(
                        Code::RoleBadShow,
                        "`show` is `all`, `status`, `tail(N)` or `head_tail(H, T)`",
                    )
                    .label(v.span, "not understood")
                    .help("e.g. `show = tail(30)` shows pass/fail and the last 30 lines"),
                );
                Show::All
            }),
        };
        let env = env.and_then(|e| self.lookup_env(&e));
        let mut argv_spans = Vec::new();
        let conversation = conversation.and_then(|c| self.conversation_memory(&c));
        let action = match (command, run, call, calls) {
            (None, None, None, Some(calls)) => {
                self.calls_action(calls, &choices, conversation, scope)
            }
            (Some(argv), None, None, None) => {
                if argv.is_empty() {
                    self.diags.push(
                        Diagnostic::error(Code::RoleEmptyCommand, "the command is empty")
                            .label(decl.name.span, "no program to run")
                            .help("write e.g. `command = [\"python3\", \"script.py\"]`"),
                    );
                }
                let (argv, spans) = argv.into_iter().unzip();
                argv_spans = spans;
                ToolAction::Command { argv }
            }
            (None, Some(tool), None, None) => self.run_action(&tool, args, scope),
            (None, None, Some(call), None) => self.choose_action(call, args, argv, &choices, scope),
            _ if attrs.misspells(&["command", "run", "call", "calls"]) => {
                ToolAction::Command { argv: Vec::new() }
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(Code::RoleNoAction, format!("tool role `{}` must say what it runs, in one way", decl.name.name))
                        .label(decl.name.span, "needs exactly one of `command`, `run`, `call`, `calls`")
                        .help("`command = [\"prog\", \"arg\"]` runs a program; `run = tool` runs a declared tool; `call = expr` with `tools = [..]` runs the tool an LLM chose; `calls = agent.calls` runs a native reply's tool calls"),
                );
                ToolAction::Command { argv: Vec::new() }
            }
        };
        if let (Some(log), Some(span)) = (&log, log_span) {
            self.template_inputs_name_files(log, span, "the tool's log file");
        }
        ToolRole {
            env,
            action,
            timeout_ms,
            log,
            show,
            log_span: log_span.unwrap_or_default(),
            argv_spans,
            max_output,
        }
    }

    /// `calls = agent.calls` among `tools`: a native reply's calls.
    fn calls_action(
        &mut self,
        calls: &syntax::Value,
        choices: &[Ident],
        conversation: Option<MemoryId>,
        scope: &Scope,
    ) -> ToolAction {
        if choices.is_empty() {
            self.diags.push(
                Diagnostic::error(
                    Code::RoleNoChoices,
                    "`calls` runs tools among `tools`, which is missing",
                )
                .label(calls.span, "runs the model's calls")
                .help("list the tools the calls may name: `tools = [calculator, now]`"),
            );
        }
        let (calls_expr, calls_ty) = self.expr(&value_to_expr(calls), scope);
        let wanted = Type::list(call_type());
        if let Some(why) = calls_ty.strip_optional().assign_mismatch(&wanted) {
            self.diags.push(
                Diagnostic::error(
                    Code::RoleBadCalls,
                    "`calls` must give a native llm role's tool calls",
                )
                .label(calls.span, format!("this is {}: {why}", calls_ty.display()))
                .help(
                    "e.g. `calls = agent.calls`, where `agent` is an llm role with `mode = native`",
                ),
            );
        }
        ToolAction::Calls {
            choices: self.tool_list(choices),
            calls: Box::new(calls_expr),
            conversation,
        }
    }

    /// `run = tool` with `args`: a declared tool.
    fn run_action(
        &mut self,
        tool: &Ident,
        args: Option<&syntax::Value>,
        scope: &Scope,
    ) -> ToolAction {
        let tool = self.lookup_tool(tool);
        let args = match args {
            None => Vec::new(),
            Some(v) => match &v.kind {
                ValueKind::List(items) => items
                    .iter()
                    .map(|i| self.expr(&value_to_expr(i), scope).0)
                    .collect(),
                _ => vec![self.expr(&value_to_expr(v), scope).0],
            },
        };
        match tool {
            Some(tool) => {
                if let [object] = args.as_slice() {
                    self.folder_args_from_inputs(&[tool], object);
                }
                ToolAction::Tool { tool, args }
            }
            // The unknown name is reported; the role has nothing to run.
            None => ToolAction::Command { argv: Vec::new() },
        }
    }

    /// `call = expr` among `tools`, with `args` and `argv`: the tool a value names.
    fn choose_action(
        &mut self,
        call: &syntax::Value,
        args: Option<&syntax::Value>,
        argv: Option<&syntax::Value>,
        choices: &[Ident],
        scope: &Scope,
    ) -> ToolAction {
        if choices.is_empty() {
            self.diags.push(
                Diagnostic::error(
                    Code::RoleNoChoices,
                    "`call` chooses among `tools`, which is missing",
                )
                .label(call.span, "chooses a tool")
                .help("list the tools the call may name: `tools = [calculator, now]`"),
            );
        }
        let (call_expr, call_ty) = self.expr(&value_to_expr(call), scope);
        if !call_ty.is_stringy() {
            self.diags.push(
                Diagnostic::error(Code::RoleBadCall, "`call` must give a tool name (a string)")
                    .label(call.span, format!("this is {}", call_ty.display()))
                    .help("e.g. `call = planner.tool`"),
            );
        }
        let choices = self.tool_list(choices);
        let args = args.map(|a| Box::new(self.expr(&value_to_expr(a), scope).0));
        if let Some(object) = &args {
            self.folder_args_from_inputs(&choices, object);
        }
        ToolAction::Choose {
            choices,
            call: Box::new(call_expr),
            args,
            argv: argv.map(|a| Box::new(self.expr(&value_to_expr(a), scope).0)),
        }
    }
}

/// A message of a conversation, as templates and expressions read `memory.NAME`.
pub fn conversation_type() -> Type {
    let call = Type::object(vec![
        ("id", Type::String),
        ("name", Type::String),
        ("arguments", Type::Any),
    ]);
    Type::list(Type::object(vec![
        ("role", literals(&["system", "user", "assistant", "tool"])),
        ("content", Type::String),
        ("tool_call_id", Type::optional(Type::String)),
        ("tool_calls", Type::optional(Type::list(call))),
    ]))
}

/// One tool call of a native reply: `agent.calls`.
pub fn call_type() -> Type {
    Type::object(vec![
        ("id", Type::String),
        ("tool", Type::String),
        ("args", Type::Any),
    ])
}

/// What a native llm role outputs: its text (empty when it only called tools) and its calls.
pub fn native_output_type() -> Type {
    Type::object(vec![
        ("text", Type::String),
        ("calls", Type::list(call_type())),
    ])
}

/// What a `calls` tool role outputs: one result per call, in the calls' order.
pub fn calls_result_type() -> Type {
    let result = Type::object(vec![
        ("id", Type::String),
        ("tool", Type::String),
        ("args", Type::Any),
        ("ok", Type::Bool),
        ("error_kind", Type::optional(Type::String)),
        ("observation", Type::Any),
    ]);
    Type::object(vec![("ok", Type::Bool), ("results", Type::list(result))])
}

fn literals(values: &[&str]) -> Type {
    Type::Union {
        members: values
            .iter()
            .map(|v| Type::Literal { value: (*v).into() })
            .collect(),
    }
}

/// The standard result of a tool role: CatMaster's tool output plus the process facts.
pub fn tool_result_type() -> Type {
    Type::object(vec![
        (
            "status",
            Type::Union {
                members: vec![
                    Type::Literal {
                        value: "success".into(),
                    },
                    Type::Literal {
                        value: "failed".into(),
                    },
                ],
            },
        ),
        ("tool_name", Type::String),
        ("data", Type::Any),
        ("warnings", Type::list(Type::String)),
        ("error", Type::optional(Type::String)),
        ("error_kind", Type::optional(Type::String)),
        ("execution_time", Type::Float),
        ("exit_code", Type::optional(Type::Int)),
        ("ok", Type::Bool),
        ("stdout", Type::String),
        ("stderr", Type::String),
        ("shown", Type::String),
        ("log", Type::optional(Type::String)),
        ("timed_out", Type::Bool),
        ("args", Type::Any),
    ])
}

fn parse_show(v: &syntax::Value) -> Option<Show> {
    match &v.kind {
        ValueKind::Ident(s) | ValueKind::String(s) => match s.as_str() {
            "all" => Some(Show::All),
            "status" => Some(Show::Status),
            _ => None,
        },
        ValueKind::Call(name, args) => {
            let nums: Vec<u64> = args
                .iter()
                .filter_map(|a| match a.kind {
                    ValueKind::Number(n) if n >= 0.0 && n.fract() == 0.0 => Some(n as u64),
                    _ => None,
                })
                .collect();
            match (name.name.as_str(), nums.as_slice()) {
                ("tail", [n]) if args.len() == 1 => Some(Show::Tail { lines: *n }),
                ("head_tail", [h, t]) if args.len() == 2 => {
                    Some(Show::HeadTail { head: *h, tail: *t })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Attribute values that stand for expressions (`call = planner.tool`, `args = {...}`).
fn value_to_expr(v: &syntax::Value) -> syntax::Expr {
    use syntax::ExprKind as K;
    let kind = match &v.kind {
        ValueKind::String(s) => K::String(s.clone()),
        ValueKind::Number(n) => K::Number(*n),
        ValueKind::Duration(d) => K::Number(d.as_nanos() as f64 / 1e6),
        ValueKind::Bool(b) => K::Bool(*b),
        ValueKind::Null | ValueKind::Block(_) => K::Null,
        ValueKind::Ident(s) => K::Path(vec![Ident {
            name: s.clone(),
            span: v.span,
        }]),
        ValueKind::Path(parts) => K::Path(parts.clone()),
        ValueKind::List(items) => K::List(items.iter().map(value_to_expr).collect()),
        ValueKind::Map(entries) => K::Map(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), value_to_expr(v)))
                .collect(),
        ),
        ValueKind::Call(name, args) => {
            K::Call(name.clone(), args.iter().map(value_to_expr).collect())
        }
    };
    syntax::Expr { kind, span: v.span }
}

/// The `mode` an llm role declares, when it is one.
fn declared_mode(role: &syntax::RoleDecl) -> Option<ToolMode> {
    let attr = role.attrs.iter().find(|a| a.key.name == "mode")?;
    match &attr.value.kind {
        ValueKind::Ident(s) | ValueKind::String(s) => match s.as_str() {
            "json" => Some(ToolMode::Json),
            "native" => Some(ToolMode::Native),
            "auto" => Some(ToolMode::Auto),
            _ => None,
        },
        _ => None,
    }
}

/// The attributes of each role kind.
const LLM_KEYS: &[&str] = &[
    "provider",
    "prompt",
    "system",
    "reads",
    "tools",
    "retries",
    "coerce",
    "max_visits",
    "max_reply",
    "demos",
    "conversation",
    "mode",
];
const TOOL_KEYS: &[&str] = &[
    "env",
    "command",
    "run",
    "args",
    "tools",
    "call",
    "argv",
    "timeout",
    "log",
    "show",
    "reads",
    "max_visits",
    "max_output",
    "calls",
    "conversation",
];
/// Every key some role kind takes: of a role whose kind is unknown, only others are reported.
static ANY_ROLE_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut keys: Vec<&str> = LLM_KEYS.to_vec();
    keys.extend(TOOL_KEYS.iter().filter(|k| !LLM_KEYS.contains(k)));
    keys
});
