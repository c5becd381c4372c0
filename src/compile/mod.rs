//! Stage 2: [`Ast`] → [`Workflow`]. Resolves every name to an index, lowers routes to a
//! petgraph graph, type-checks expressions, and loads imported YAML (providers, tools).
//! Always returns a `Workflow` (possibly partial) so later passes can report more.

mod attrs;
mod expr;
mod imports;
pub mod mounts;
pub mod types;
pub mod workflow;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::diagnostics::{Diagnostic, Diagnostics, did_you_mean};
use crate::source::{SourceFile, Span};
use crate::syntax::{self, Ast, Ident, TypeExpr, TypeKind, ValueKind};
use attrs::Attrs;
pub use expr::{Scope, invalid_field_type};
use types::{Field, Type};
pub use workflow::*;

pub const BUILTIN_EXITS: &[(&str, i32)] = &[
    ("limit", 3),
    ("error", 2),
    ("interrupted", 130),
    ("invalid_output", 4),
];
/// Pseudo-fields every json llm role has: `X.invalid` and `X.invalid_reply`.
pub const INVALID_FIELDS: &[&str] = &["invalid", "invalid_reply"];
const RESERVED_ROOTS: &[&str] = &[
    "input", "memory", "output", "item", "round", "step", "visit", "run_id", "start",
];

/// Parses and compiles a file: the usual entry point.
pub fn load(file: &SourceFile) -> (Workflow, Diagnostics) {
    let (_, workflow, diagnostics) = load_keeping_ast(file);
    (workflow, diagnostics)
}

/// [`load`], also handing back the syntax tree (so a caller about to exit can skip
/// freeing it).
pub fn load_keeping_ast(file: &SourceFile) -> (Ast, Workflow, Diagnostics) {
    let (ast, mut diagnostics) = syntax::parse(file);
    let (workflow, mut more) = compile(file, &ast);
    // A file that did not parse is not "empty"; the syntax error says what is wrong.
    if diagnostics.has_errors() {
        more.retain(|d| d.code != "rondo::workflow::empty");
    }
    diagnostics.extend(more);
    (ast, workflow, diagnostics)
}

pub fn compile(file: &SourceFile, ast: &Ast) -> (Workflow, Diagnostics) {
    let mut c = Compiler::new(file);
    c.run(ast);
    (c.workflow, c.diags)
}

struct Compiler<'f> {
    file: &'f SourceFile,
    diags: Diagnostics,
    workflow: Workflow,
    types: HashMap<String, (Type, Span)>,
    memory_names: HashMap<String, MemoryId>,
    provider_names: HashMap<String, ProviderId>,
    tool_names: HashMap<String, ToolId>,
    env_names: HashMap<String, EnvId>,
    node_names: HashMap<String, NodeIndex>,
    input_names: HashMap<String, InputId>,
    pending_providers: Vec<imports::PendingProvider>,
    /// The result type of tool roles, built once and shared.
    tool_result: Option<Arc<Type>>,
    /// Llm roles with `output json`: they have the `invalid` pseudo-fields.
    json_llm: std::collections::HashSet<NodeIndex>,
    /// Nesting and size of the type being resolved: named types are expanded in place,
    /// and every later pass walks types recursively.
    type_depth: usize,
    type_nodes: usize,
}

/// Deeper types (named types within named types, lists of lists ...) are refused.
const MAX_TYPE_DEPTH: usize = 64;
/// A type expanding to more parts than this (`type B { x: A, y: A }` doubles A) is refused.
const MAX_TYPE_NODES: usize = 100_000;

impl<'f> Compiler<'f> {
    fn new(file: &'f SourceFile) -> Self {
        let mut graph = DiGraph::new();
        let start = graph.add_node(Node {
            name: "start".into(),
            kind: NodeKind::Start,
            span: Span::default(),
        });
        let hash = hex::encode(Sha256::digest(file.text.as_bytes()));
        let dir = file.dir();
        Compiler {
            type_depth: 0,
            type_nodes: 0,
            file,
            diags: Diagnostics::default(),
            workflow: Workflow {
                name: String::new(),
                description: String::new(),
                path: file.path.clone(),
                source_hash: hash,
                prompts_dir: dir.clone(),
                dir,
                inputs: Vec::new(),
                memory: Vec::new(),
                providers: Vec::new(),
                default_provider: 0,
                tools: Vec::new(),
                environments: Vec::new(),
                graph,
                start,
                routes: Vec::new(),
                outgoing: Vec::new(),
                exit_guards: Vec::new(),
                artifacts: Vec::new(),
                limits: Limits::default(),
                round_role: None,
                script: None,
                tests: Vec::new(),
            },
            types: HashMap::new(),
            memory_names: HashMap::new(),
            provider_names: HashMap::new(),
            tool_names: HashMap::new(),
            env_names: HashMap::new(),
            node_names: HashMap::new(),
            input_names: HashMap::new(),
            pending_providers: Vec::new(),
            tool_result: None,
            json_llm: Default::default(),
        }
    }

    fn run(&mut self, ast: &Ast) {
        for span in &ast.extra_headers {
            self.diags.push(
                Diagnostic::error("rondo::workflow::duplicate", "a file declares one workflow")
                    .label(*span, "second `workflow` header")
                    .help("split the file, or merge the two headers"),
            );
        }
        self.builtin_providers_and_envs();
        self.imports(ast);
        self.type_decls(ast);
        self.header_inputs(ast);
        self.memory(ast);
        self.providers(ast);
        self.tools(ast);
        self.environments(ast);
        self.declare_nodes(ast);
        self.header_attrs(ast);
        self.role_bodies(ast);
        self.exits(ast);
        self.workflow_artifacts(ast);
        self.routes(ast);
        self.tests(ast);
        if ast.workflow.is_none()
            && ast.roles.is_empty()
            && ast.routes.is_empty()
            && !self.diags.has_errors()
        {
            self.diags.push(
                Diagnostic::error("rondo::workflow::empty", "this file declares no workflow")
                    .label(Span::new(0, 0), "empty")
                    .help("start with `workflow name { ... }`, declare roles, and route `start -> first_role`"),
            );
        }
    }

    fn builtin_providers_and_envs(&mut self) {
        self.workflow.providers.push(Provider {
            profile: rondo_provider::ProviderProfile::new(
                "scripted",
                rondo_provider::ProviderKind::Scripted,
                "scripted",
            ),
            span: Span::default(),
        });
        self.provider_names.insert("scripted".into(), 0);
        self.workflow.environments.push(EnvSpec {
            name: "local".into(),
            kind: EnvKind::Local,
            image: None,
            workdir: None,
            env: BTreeMap::new(),
            network: None,
            memory: None,
            cpus: None,
            pids: None,
            tools: Vec::new(),
            mounts: Vec::new(),
            per_branch: false,
            user: None,
            read_only_root: false,
            span: Span::default(),
        });
        self.env_names.insert("local".into(), 0);
    }

    fn duplicate(&mut self, what: &str, name: &Ident, first: Option<Span>) {
        let mut d = Diagnostic::error(
            "rondo::name::duplicate",
            format!("{what} `{}` is declared twice", name.name),
        )
        .label(name.span, "declared again here");
        if let Some(first) = first.filter(|s| !s.is_empty()) {
            d = d.label(first, "first declared here");
        }
        self.diags
            .push(d.help("names must be unique; rename one of them"));
    }

    // ---------- types ----------

    fn type_decls(&mut self, ast: &Ast) {
        // Declare all names first so declarations may refer to later ones.
        for decl in &ast.types {
            if let Some((_, first)) = self.types.get(&decl.name.name) {
                let first = *first;
                self.duplicate("type", &decl.name, Some(first));
                continue;
            }
            if is_builtin_type(&decl.name.name) {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::name::reserved",
                        format!("`{}` is a built-in type", decl.name.name),
                    )
                    .label(decl.name.span, "reserved name")
                    .help("choose another name for this type"),
                );
                continue;
            }
            self.types
                .insert(decl.name.name.clone(), (Type::Any, decl.name.span));
        }
        for decl in &ast.types {
            let mut visiting = vec![decl.name.name.clone()];
            self.type_nodes = 0;
            let ty = self.resolve_type_in(&decl.ty, ast, &mut visiting);
            if let Some(entry) = self.types.get_mut(&decl.name.name) {
                entry.0 = ty;
            }
        }
    }

    fn resolve_type(&mut self, ty: &TypeExpr) -> Type {
        let mut visiting = Vec::new();
        self.type_nodes = 0;
        self.resolve_type_inner(ty, None, &mut visiting)
    }

    fn resolve_type_in(&mut self, ty: &TypeExpr, ast: &Ast, visiting: &mut Vec<String>) -> Type {
        self.resolve_type_inner(ty, Some(ast), visiting)
    }

    fn resolve_type_inner(
        &mut self,
        ty: &TypeExpr,
        ast: Option<&Ast>,
        visiting: &mut Vec<String>,
    ) -> Type {
        self.type_nodes = self.type_nodes.saturating_add(1);
        if self.type_depth >= MAX_TYPE_DEPTH || self.type_nodes > MAX_TYPE_NODES {
            // Reported once per declaration: the rest of it is not resolved.
            if self.type_nodes != usize::MAX
                && !self.diags.iter().any(|d| d.code == "rondo::type::too_deep")
            {
                let message = if self.type_depth >= MAX_TYPE_DEPTH {
                    format!("this type nests more than {MAX_TYPE_DEPTH} levels deep")
                } else {
                    format!("this type expands to more than {MAX_TYPE_NODES} parts")
                };
                self.diags.push(
                    Diagnostic::error("rondo::type::too_deep", message)
                        .label(ty.span, "the limit is reached here")
                        .help("flatten the type, or use `any` for the deeply nested part"),
                );
                self.type_nodes = usize::MAX;
            }
            return Type::Any;
        }
        self.type_depth += 1;
        let t = self.resolve_type_node(ty, ast, visiting);
        self.type_depth -= 1;
        t
    }

    fn resolve_type_node(
        &mut self,
        ty: &TypeExpr,
        ast: Option<&Ast>,
        visiting: &mut Vec<String>,
    ) -> Type {
        match &ty.kind {
            TypeKind::Named(name) => match name.as_str() {
                "string" => Type::String,
                "int" => Type::Int,
                "float" | "number" => Type::Float,
                "bool" => Type::Bool,
                "any" | "json" => Type::Any,
                "null" => Type::Null,
                _ => {
                    if let Some(ast) = ast {
                        if visiting.contains(name) {
                            self.diags.push(
                                Diagnostic::error(
                                    "rondo::type::recursive",
                                    format!("type `{name}` contains itself"),
                                )
                                .label(ty.span, "refers back to the type being defined")
                                .help("types cannot be recursive; use `any` for the nested part"),
                            );
                            return Type::Any;
                        }
                        if let Some(decl) = ast.types.iter().find(|d| &d.name.name == name) {
                            visiting.push(name.clone());
                            let t = self.resolve_type_inner(&decl.ty, Some(ast), visiting);
                            visiting.pop();
                            return t;
                        }
                    } else if let Some((t, _)) = self.types.get(name) {
                        return t.clone();
                    }
                    let mut candidates: Vec<&str> = self.types.keys().map(String::as_str).collect();
                    candidates.extend(["string", "int", "float", "bool", "any"]);
                    self.diags.push(
                        Diagnostic::error("rondo::type::unknown", format!("unknown type `{name}`"))
                            .label(ty.span, "not a declared type")
                            .help(did_you_mean(name, candidates).unwrap_or_else(|| {
                                "types are string, int, float, bool, any, list[T], map[T], T?, \"a\" | \"b\", { field: T }, or a `type` declared in the file".into()
                            })),
                    );
                    Type::Any
                }
            },
            TypeKind::Literal(value) => Type::Literal {
                value: value.clone(),
            },
            TypeKind::List(item) => Type::list(self.resolve_type_inner(item, ast, visiting)),
            TypeKind::Map(value) => Type::Map {
                value: Box::new(self.resolve_type_inner(value, ast, visiting)),
            },
            TypeKind::Optional(inner) => {
                Type::optional(self.resolve_type_inner(inner, ast, visiting))
            }
            TypeKind::Union(members) => Type::Union {
                members: members
                    .iter()
                    .map(|m| self.resolve_type_inner(m, ast, visiting))
                    .collect(),
            },
            TypeKind::Object(fields) => {
                let mut out: Vec<Field> = Vec::new();
                for f in fields {
                    if let Some(prev) = fields
                        .iter()
                        .take_while(|p| !std::ptr::eq(*p, f))
                        .find(|p| p.name.name == f.name.name)
                    {
                        self.diags.push(
                            Diagnostic::error(
                                "rondo::type::duplicate_field",
                                format!("field `{}` is declared twice", f.name.name),
                            )
                            .label(f.name.span, "declared again")
                            .label(prev.name.span, "first declared here")
                            .help("remove one of the two fields"),
                        );
                        continue;
                    }
                    out.push(Field {
                        name: f.name.name.clone(),
                        ty: self.resolve_type_inner(&f.ty, ast, visiting),
                    });
                }
                Type::Object { fields: out }
            }
        }
    }

    // ---------- header ----------

    fn header_inputs(&mut self, ast: &Ast) {
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

    fn header_attrs(&mut self, ast: &Ast) {
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

    // ---------- memory ----------

    fn memory(&mut self, ast: &Ast) {
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
                                "rondo::memory::bad_default",
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

    fn memory_kind(&mut self, kind: &Ident, attrs: &[syntax::Attr]) -> MemoryKind {
        let diags = &mut self.diags;
        match kind.name.as_str() {
            "whiteboard" => {
                let mut a = Attrs::new(attrs, &["sections"], "a whiteboard");
                let sections = a.string_list("sections", diags).unwrap_or_default();
                a.finish(diags);
                if sections.is_empty() {
                    diags.push(
                        Diagnostic::error("rondo::memory::no_sections", "a whiteboard needs its allowed sections")
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
                            "rondo::memory::root_outside_workspace",
                            "a code context reads only inside the run's workspace",
                        )
                        .label(kind.span, why.to_string())
                        .help("name a folder of the workspace, e.g. `root = \"repo\"`"),
                    );
                }
                if !(0.0..=1.0).contains(&gamma) {
                    diags.push(
                        Diagnostic::error(
                            "rondo::memory::bad_gamma",
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
            _ => {
                Attrs::new(attrs, &[], "a history").finish(diags);
                MemoryKind::History
            }
        }
    }

    // ---------- roles and exits (names first, bodies later) ----------

    fn declare_nodes(&mut self, ast: &Ast) {
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
                    })),
                    span: role.name.span,
                });
                self.node_names.insert(role.name.name.clone(), index);
                if role.kind.name == "llm"
                    && matches!(role.output, Some((syntax::OutputDecl::Json(_), _)))
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
            self.diags.push(
                Diagnostic::error(
                    "rondo::name::reserved",
                    format!("`{}` is reserved", name.name),
                )
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
            "tool" => self
                .tool_result
                .get_or_insert_with(|| Arc::new(tool_result_type()))
                .clone(),
            "llm" => Arc::new(match &role.output {
                Some((syntax::OutputDecl::Json(ty), span)) => {
                    let ty = self.resolve_type(ty);
                    self.reserved_output_fields(&role.name.name, &ty, *span);
                    ty
                }
                _ => Type::String,
            }),
            _ => Arc::new(Type::Null),
        }
    }

    /// `invalid` and `invalid_reply` are the pseudo-fields of the invalid outcome.
    fn reserved_output_fields(&mut self, role: &str, ty: &Type, span: Span) {
        for name in ty.field_names() {
            if INVALID_FIELDS.contains(&name.as_str()) {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::role::reserved_output_field",
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

    fn role_bodies(&mut self, ast: &Ast) {
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
            "llm" => &[
                "provider",
                "prompt",
                "system",
                "reads",
                "tools",
                "retries",
                "coerce",
                "max_visits",
                "max_reply",
            ],
            "tool" => &[
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
            ],
            _ => &["reads", "max_visits"],
        };
        if !matches!(kind_name, "llm" | "tool" | "builtin") {
            self.diags.push(
                Diagnostic::error(
                    "rondo::role::unknown_kind",
                    format!("unknown role kind `{kind_name}`"),
                )
                .label(decl.kind.span, "not a role kind")
                .help(
                    did_you_mean(kind_name, ["llm", "tool", "builtin"])
                        .unwrap_or_else(|| "a role is `llm`, `tool` or `builtin`".into()),
                ),
            );
        }
        let mut attrs = Attrs::new(
            &decl.attrs,
            known,
            format!("{kind_name} role `{}`", decl.name.name),
        );
        let max_visits = attrs.count("max_visits", &mut self.diags).map(|x| x.0);
        if max_visits == Some(0) {
            self.diags.push(
                Diagnostic::error(
                    "rondo::role::zero_visits",
                    "`max_visits = 0` means the role can never run",
                )
                .label(decl.span, "never runs")
                .help("use a bound of at least 1, or remove the role"),
            );
        }
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
            "llm" => RoleKind::Llm(self.llm_role(decl, &mut attrs)),
            "tool" => RoleKind::Tool(Box::new(self.tool_role(decl, &mut attrs, &scope))),
            _ => RoleKind::Builtin,
        };
        if kind_name != "llm"
            && let Some((_, span)) = &decl.output
        {
            self.diags.push(
                Diagnostic::error(
                    "rondo::role::output_on_non_llm",
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
        if kind_name == "builtin" && decl.updates.is_empty() && decl.artifacts.is_empty() {
            self.diags.push(
                Diagnostic::warning(
                    "rondo::role::empty_builtin",
                    format!("builtin role `{}` does nothing", decl.name.name),
                )
                .label(decl.name.span, "no `update` block and no artifact")
                .help("a builtin role updates memory: add `update { ... }`"),
            );
        }
        Role {
            kind,
            max_visits,
            reads,
            writes,
            updates,
            artifacts,
            output_type,
        }
    }

    fn artifact(&mut self, a: &syntax::ArtifactDecl, scope: &Scope) -> Artifact {
        let (value, _) = self.expr(&a.value, scope);
        if let Err(e) = tera::Tera::default().add_raw_template("artifact", &a.name) {
            self.diags.push(
                Diagnostic::error(
                    "rondo::artifact::bad_name",
                    "the artifact name is not a valid template",
                )
                .label(a.name_span, tera_error_text(&e))
                .help("names may use `{{ round }}`, `{{ visit }}`, `{{ step }}`, `{{ run_id }}`"),
            );
        }
        // The part before the first template tag is known now: a literal name, or the
        // folders a templated one starts with.
        let fixed = match a.name.find(['{']) {
            None => Some(a.name.as_str()),
            Some(at) => a.name[..at].rfind('/').map(|slash| &a.name[..slash]),
        };
        if let Some(Err(why)) = fixed
            .filter(|f| !f.is_empty() || a.name.starts_with('/'))
            .map(|f| rondo_workspace::relative_name(if f.is_empty() { "/" } else { f }))
        {
            self.diags.push(
                Diagnostic::error(
                    "rondo::artifact::outside_workspace",
                    "the artifact would be written outside the run's workspace",
                )
                .label(a.name_span, why.to_string())
                .help("name it relative to the workspace, e.g. `reports/summary.md`; the run records stay out of reach"),
            );
        }
        Artifact {
            name: a.name.clone(),
            append: a.append,
            value,
            span: a.span,
            name_span: a.name_span,
        }
    }

    fn workflow_artifacts(&mut self, ast: &Ast) {
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
        let retries = attrs.count("retries", diags).map_or(2, |x| x.0);
        let tools = attrs.ident_list("tools", diags);
        let max_reply = attrs.bytes("max_reply", diags).map(|x| x.0);
        let provider = match provider {
            Some(p) => self
                .lookup_provider(&p)
                .unwrap_or(self.workflow.default_provider),
            None => usize::MAX,
        };
        let prompt = match prompt {
            Some((p, _)) => p.into(),
            None => {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::role::no_prompt",
                        format!("llm role `{}` has no prompt template", decl.name.name),
                    )
                    .label(decl.name.span, "no `prompt = \"...\"`")
                    .help(format!(
                        "add `prompt = \"{}.tera\"` (a file in the prompts folder)",
                        decl.name.name
                    )),
                );
                Default::default()
            }
        };
        let output = match &decl.output {
            Some((syntax::OutputDecl::Json(_), _)) => OutputFormat::Json {
                ty: self
                    .workflow
                    .node_output_type(&self.node_names, &decl.name.name),
            },
            Some((syntax::OutputDecl::Code(lang), _)) => OutputFormat::Code {
                language: lang.clone(),
            },
            _ => OutputFormat::Text,
        };
        let coerce = self.coerce_attr(attrs);
        LlmRole {
            provider,
            system: system.map(|s| s.0.into()),
            prompt,
            output,
            retries,
            tools: tools.iter().filter_map(|t| self.lookup_tool(t)).collect(),
            coerce,
            max_reply,
        }
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
                            "rondo::role::unknown_coercion",
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
        let choices = attrs.ident_list("tools", diags);
        let show = match attrs.value("show") {
            None => Show::All,
            Some(v) => parse_show(v).unwrap_or_else(|| {
                diags.push(
                    Diagnostic::error(
                        "rondo::role::bad_show",
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
        let action = match (command, run, call) {
            (Some(argv), None, None) => {
                if argv.is_empty() {
                    self.diags.push(
                        Diagnostic::error("rondo::role::empty_command", "the command is empty")
                            .label(decl.name.span, "no program to run")
                            .help("write e.g. `command = [\"python3\", \"script.py\"]`"),
                    );
                }
                let (argv, spans) = argv.into_iter().unzip();
                argv_spans = spans;
                ToolAction::Command { argv }
            }
            (None, Some(tool), None) => {
                let tool = self.lookup_tool(&tool).unwrap_or(usize::MAX);
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
                ToolAction::Tool { tool, args }
            }
            (None, None, Some(call)) => {
                if choices.is_empty() {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::role::no_choices",
                            "`call` chooses among `tools`, which is missing",
                        )
                        .label(call.span, "chooses a tool")
                        .help("list the tools the call may name: `tools = [calculator, now]`"),
                    );
                }
                let (call_expr, call_ty) = self.expr(&value_to_expr(call), scope);
                if !call_ty.is_stringy() {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::role::bad_call",
                            "`call` must give a tool name (a string)",
                        )
                        .label(call.span, format!("this is {}", call_ty.display()))
                        .help("e.g. `call = planner.tool`"),
                    );
                }
                ToolAction::Choose {
                    choices: choices.iter().filter_map(|t| self.lookup_tool(t)).collect(),
                    call: Box::new(call_expr),
                    args: args.map(|a| Box::new(self.expr(&value_to_expr(a), scope).0)),
                    argv: argv.map(|a| Box::new(self.expr(&value_to_expr(a), scope).0)),
                }
            }
            _ => {
                self.diags.push(
                    Diagnostic::error("rondo::role::no_action", format!("tool role `{}` must say what it runs, in one way", decl.name.name))
                        .label(decl.name.span, "needs exactly one of `command`, `run`, `call`")
                        .help("`command = [\"prog\", \"arg\"]` runs a program; `run = tool` runs a declared tool; `call = expr` with `tools = [..]` runs the tool an LLM chose"),
                );
                ToolAction::Command { argv: Vec::new() }
            }
        };
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

    fn update(&mut self, stmt: &syntax::UpdateStmt, scope: &Scope) -> Option<Update> {
        match stmt {
            syntax::UpdateStmt::Set {
                target,
                value,
                span,
            } => {
                let memory = self.lookup_memory(target)?;
                let (value, ty) = self.expr(value, scope);
                match &self.workflow.memory[memory].kind {
                    MemoryKind::Value { ty: slot_ty, .. } => {
                        if maybe_null_into_required(slot_ty, &ty) {
                            let slot_ty = slot_ty.clone();
                            let what = format!("`{}` holds", target.name);
                            self.optional_value(target, &what, &slot_ty, &value, &ty);
                        } else {
                            let ty = stored_type(&value, &ty);
                            if let Some(why) = ty.assign_mismatch(slot_ty) {
                                let message = format!(
                                    "`{}` holds {}, not {}",
                                    target.name,
                                    slot_ty.display(),
                                    ty.display()
                                );
                                let help = if matches!(
                                    (slot_ty.strip_optional(), ty.strip_optional()),
                                    (Type::Int, Type::Float)
                                ) {
                                    format!(
                                        "a float may have a fraction: declare `{}: float`, or store an int",
                                        target.name
                                    )
                                } else {
                                    format!(
                                        "give `{}` a value of type `{}`",
                                        target.name,
                                        slot_ty.display()
                                    )
                                };
                                self.not_assignable(message, &value, &ty, &why, help);
                            }
                        }
                    }
                    other => {
                        let kind = other.kind_name();
                        self.diags.push(
                            Diagnostic::error(
                                "rondo::update::set_structured",
                                format!(
                                    "`{}` is a {kind}; it changes only through its operations",
                                    target.name
                                ),
                            )
                            .label(target.span, format!("a {kind}"))
                            .help(format!(
                                "use {}",
                                ops_for(other)
                                    .iter()
                                    .map(|o| format!("`{}.{}(..)`", target.name, o.name()))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                        );
                    }
                }
                Some(Update::Set {
                    memory,
                    value,
                    span: *span,
                })
            }
            syntax::UpdateStmt::Call {
                target,
                op,
                args,
                span,
            } => {
                let memory = self.lookup_memory(target)?;
                let kind = self.workflow.memory[memory].kind.clone();
                let allowed = ops_for(&kind);
                let Some(memory_op) = allowed.iter().copied().find(|o| o.name() == op.name) else {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::update::unknown_op",
                            format!("a {} has no operation `{}`", kind.kind_name(), op.name),
                        )
                        .label(op.span, "unknown operation")
                        .help(
                            did_you_mean(&op.name, allowed.iter().map(|o| o.name()))
                                .unwrap_or_else(|| {
                                    format!(
                                        "operations: {}",
                                        allowed
                                            .iter()
                                            .map(|o| o.name())
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    )
                                }),
                        ),
                    );
                    return None;
                };
                let typed: Vec<(Expr, Type)> = args.iter().map(|a| self.expr(a, scope)).collect();
                let arity = match memory_op {
                    MemoryOp::Clear => 0,
                    MemoryOp::Put | MemoryOp::Patch => 2,
                    _ => 1,
                };
                if typed.len() != arity {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::update::arity",
                            format!(
                                "`{}` takes {arity} argument{}",
                                op.name,
                                if arity == 1 { "" } else { "s" }
                            ),
                        )
                        .label(*span, format!("{} given", typed.len()))
                        .help(format!(
                            "e.g. `{}.{}({})`",
                            target.name,
                            op.name,
                            ["", "value", "key, value"][arity]
                        )),
                    );
                } else if let MemoryKind::Value { ty, .. } = &kind {
                    self.check_value_op(target, memory_op, ty, &typed);
                }
                Some(Update::Op {
                    memory,
                    op: memory_op,
                    args: typed.into_iter().map(|t| t.0).collect(),
                    span: *span,
                })
            }
        }
    }

    fn check_value_op(&mut self, target: &Ident, op: MemoryOp, ty: &Type, args: &[(Expr, Type)]) {
        let base = ty.strip_optional();
        let mismatch = |this: &mut Self, what: &str| {
            this.diags.push(
                Diagnostic::error(
                    "rondo::update::type_mismatch",
                    format!(
                        "`{}` is `{}`, so `{}` does not apply",
                        target.name,
                        ty.display(),
                        op.name()
                    ),
                )
                .label(target.span, what.to_string())
                .help(format!("`{}` works on {}", op.name(), what)),
            );
        };
        match op {
            MemoryOp::Append | MemoryOp::Extend | MemoryOp::Truncate => {
                let Type::List { item } = base else {
                    if !matches!(base, Type::Any) {
                        mismatch(self, "lists");
                    }
                    return;
                };
                let (e, t) = &args[0];
                if op == MemoryOp::Append && maybe_null_into_required(item, t) {
                    let what = format!("`{}.append` takes", target.name);
                    self.optional_value(target, &what, item, e, t);
                    return;
                }
                let stored = stored_type(e, t);
                // `extend(null)` adds nothing, so an optional list is fine there.
                let fits = match op {
                    MemoryOp::Append => Some(stored.assign_mismatch(item)),
                    MemoryOp::Extend
                        if matches!(stored.strip_optional(), Type::List { .. } | Type::Any) =>
                    {
                        Some(stored.strip_optional().assign_mismatch(base))
                    }
                    MemoryOp::Truncate if t.is_numeric() => Some(None),
                    _ => None,
                };
                match fits {
                    Some(None) => {}
                    Some(Some(why)) => {
                        let expected = if op == MemoryOp::Append { item } else { base };
                        let message = format!(
                            "`{}.{}` takes {}, not {}",
                            target.name,
                            op.name(),
                            expected.display(),
                            stored.display()
                        );
                        let help = format!("`{}` is declared as `{}`", target.name, ty.display());
                        self.not_assignable(message, e, &stored, &why, help);
                    }
                    None => {
                        let expected = match op {
                            MemoryOp::Extend => base.display(),
                            _ => "a step id (a number)".into(),
                        };
                        self.diags.push(
                            Diagnostic::error(
                                "rondo::update::type_mismatch",
                                format!("`{}.{}` expects {expected}", target.name, op.name()),
                            )
                            .label(e.span, format!("this is {}", t.display()))
                            .help(format!(
                                "`{}` is declared as `{}`",
                                target.name,
                                ty.display()
                            )),
                        );
                    }
                }
            }
            MemoryOp::Put => match base {
                Type::Map { value } => {
                    let (e, t) = &args[1];
                    if maybe_null_into_required(value, t) {
                        let what = format!("`{}.put` takes", target.name);
                        self.optional_value(target, &what, value, e, t);
                        return;
                    }
                    let stored = stored_type(e, t);
                    if let Some(why) = stored.assign_mismatch(value) {
                        let message = format!(
                            "`{}.put` takes {}, not {}",
                            target.name,
                            value.display(),
                            stored.display()
                        );
                        let help = format!("`{}` is declared as `{}`", target.name, ty.display());
                        self.not_assignable(message, e, &stored, &why, help);
                    }
                }
                Type::Any => {}
                _ => mismatch(self, "maps"),
            },
            MemoryOp::Patch => {
                if !matches!(base, Type::List { .. } | Type::Any) {
                    mismatch(self, "lists");
                    return;
                }
                let mut objects = true;
                for (e, t) in args {
                    if !matches!(
                        t.strip_optional(),
                        Type::Object { .. } | Type::Map { .. } | Type::Any
                    ) {
                        self.diags.push(
                            Diagnostic::error("rondo::update::type_mismatch", format!("`{}.patch` takes two objects: which items, and the fields to change", target.name))
                                .label(e.span, format!("this is {}", t.display()))
                                .help(format!("e.g. `{}.patch({{ id: 1 }}, {{ status: \"done\" }})`", target.name)),
                        );
                        objects = false;
                    }
                }
                if let (true, Type::List { item }) = (objects, base) {
                    self.check_patch(target, ty, item, &args[1]);
                }
            }
            MemoryOp::Clear
                if !matches!(base, Type::Map { .. } | Type::List { .. } | Type::Any) =>
            {
                mismatch(self, "lists and maps")
            }
            _ => {}
        }
    }

    /// The fields `x.patch(..)` writes into each matching item must be fields of the item
    /// type, each of its type: the run stores them without validating.
    fn check_patch(&mut self, target: &Ident, ty: &Type, item: &Type, (e, t): &(Expr, Type)) {
        let changes = stored_type(e, t);
        let declared = format!("`{}` is declared as `{}`", target.name, ty.display());
        let (fields, given) = match (item.strip_optional(), changes.strip_optional()) {
            (Type::Any, _) | (_, Type::Any) => return,
            (Type::Object { fields }, Type::Object { fields: given }) => (fields, given),
            (Type::Map { value }, _) => {
                let to = Type::Map {
                    value: value.clone(),
                };
                if let Some(why) = changes.strip_optional().assign_mismatch(&to) {
                    let message = format!(
                        "`{}.patch` sets fields of {}, not {}",
                        target.name,
                        item.display(),
                        changes.display()
                    );
                    self.not_assignable(message, e, &changes, &why, declared);
                }
                return;
            }
            (Type::Object { .. }, _) => {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::update::type_mismatch",
                        format!(
                            "`{}.patch` needs the changed fields spelled out",
                            target.name
                        ),
                    )
                    .label(e.span, format!("this is {}", changes.display()))
                    .help(format!(
                        "write the fields as an object, e.g. `{{ {}: .. }}`; {declared}",
                        item.field_names().first().map_or("status", String::as_str)
                    )),
                );
                return;
            }
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::update::type_mismatch",
                        format!(
                            "`{}.patch` changes fields of object items, and its items are {}",
                            target.name,
                            item.display()
                        ),
                    )
                    .label(target.span, format!("a {}", ty.display()))
                    .help("patch a list of objects; to replace the list, use `set`"),
                );
                return;
            }
        };
        let mut written = Vec::new();
        for g in given {
            match fields.iter().find(|f| f.name == g.name) {
                Some(f) => written.push(f.clone()),
                None => {
                    let span = match &e.kind {
                        ExprKind::Map { entries } => entries
                            .iter()
                            .find(|(k, _)| *k == g.name)
                            .map_or(e.span, |(_, v)| v.span),
                        _ => e.span,
                    };
                    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::update::unknown_field",
                            format!("the items of `{}` have no field `{}`", target.name, g.name),
                        )
                        .label(span, "not a field of the item type")
                        .help(
                            did_you_mean(&g.name, names.iter().copied()).unwrap_or_else(|| {
                                format!("{}; its fields are: {}", declared, names.join(", "))
                            }),
                        ),
                    );
                    return;
                }
            }
        }
        // Only the patched fields are required: the others keep their values.
        let to = Type::Object { fields: written };
        if maybe_null_into_required(&to, t) {
            let what = format!("`{}.patch` writes", target.name);
            self.optional_value(target, &what, &to, e, t);
        } else if let Some(why) = changes.assign_mismatch(&to) {
            let message = format!(
                "`{}.patch` writes fields of {}, not {}",
                target.name,
                item.display(),
                changes.display()
            );
            self.not_assignable(message, e, &changes, &why, declared);
        }
    }

    fn not_assignable(
        &mut self,
        message: String,
        value: &Expr,
        ty: &Type,
        why: &str,
        help: String,
    ) {
        // `why` names the part that does not fit, unless that is the whole value.
        let label = if why.starts_with(&format!("{} does not fit ", ty.display())) {
            format!("this is {}", ty.display())
        } else {
            format!("this is {}; {why}", ty.display())
        };
        self.diags.push(
            Diagnostic::error("rondo::update::type_mismatch", message)
                .label(value.span, label)
                .help(help),
        );
    }

    /// A value that may be null where memory requires one: `set plan = replanner.steps`
    /// with `steps: list[string]?` and `plan: list[string]`; also a field of a map literal.
    fn optional_value(
        &mut self,
        target: &Ident,
        what: &str,
        slot_ty: &Type,
        value: &Expr,
        ty: &Type,
    ) {
        let Some(path) = null_into_required(slot_ty, ty) else {
            return;
        };
        // Descend to the field that may be null, as far as the literal spells it out.
        let (mut required, mut given, mut at) = (slot_ty, ty, value);
        for step in &path {
            let (r, g) = match (step, required, given) {
                (
                    NullStep::Field(name),
                    Type::Object { fields },
                    Type::Object { fields: given },
                ) => (
                    fields.iter().find(|f| &f.name == name).map(|f| &f.ty),
                    given.iter().find(|f| &f.name == name).map(|f| &f.ty),
                ),
                (NullStep::Item, Type::List { item }, Type::List { item: given }) => {
                    (Some(&**item), Some(&**given))
                }
                (NullStep::Item, Type::Map { value }, Type::Map { value: given }) => {
                    (Some(&**value), Some(&**given))
                }
                _ => (None, None),
            };
            let (Some(r), Some(g)) = (r, g) else { break };
            let sub = match (step, &at.kind) {
                (NullStep::Field(name), ExprKind::Map { entries }) => {
                    entries.iter().find(|(k, _)| k == name).map(|(_, e)| e)
                }
                _ => None,
            };
            let Some(sub) = sub else { break };
            (required, given, at) = (r, g, sub);
        }
        let fallback = match required.strip_optional() {
            Type::List { .. } => Some("[]"),
            Type::String => Some("\"\""),
            Type::Int => Some("0"),
            Type::Float => Some("0.0"),
            Type::Bool => Some("false"),
            Type::Map { .. } => Some("{}"),
            _ => None,
        };
        let fix = match fallback {
            Some(f) => format!(
                "write `{} ?? {f}` to store a fallback when it is null",
                at.text
            ),
            None => format!(
                "give a fallback: `{} ?? <a {}>`",
                at.text,
                required.display()
            ),
        };
        let message = if std::ptr::eq(at, value) && path.is_empty() {
            format!(
                "{what} {}, but `{}` may be null",
                slot_ty.display(),
                value.text
            )
        } else {
            let spelled: String = path
                .iter()
                .map(|s| match s {
                    NullStep::Field(name) => format!(".{name}"),
                    NullStep::Item => "[]".to_string(),
                })
                .collect();
            format!(
                "{what} a value whose `{}` is never null, but here it may be",
                spelled.trim_start_matches('.')
            )
        };
        let declared = if path.is_empty() {
            format!(", or declare `{}: {}?`", target.name, slot_ty.display())
        } else {
            String::new()
        };
        self.diags.push(
            Diagnostic::error("rondo::update::optional_value", message)
                .label(at.span, format!("this is {}", given.display()))
                .help(format!("{fix}{declared}")),
        );
    }

    fn exits(&mut self, ast: &Ast) {
        // Each user exit with where its code is written (its name when defaulted).
        let mut codes: Vec<(NodeIndex, Span)> = Vec::new();
        for exit in &ast.exits {
            let Some(&index) = self.node_names.get(&exit.name.name) else {
                continue;
            };
            if self.workflow.graph[index].span != exit.name.span {
                continue;
            }
            let mut attrs =
                Attrs::new(&exit.attrs, &["code"], format!("exit `{}`", exit.name.name));
            let mut code_at = exit.name.span;
            if let Some((code, span)) = attrs.count("code", &mut self.diags) {
                code_at = span;
                if code > 255 {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::exit::code_out_of_range",
                            format!("exit code {code} is out of range"),
                        )
                        .label(span, "more than 255")
                        .help("a process exit code is 0 to 255; choose one in that range"),
                    );
                } else if let NodeKind::Exit(spec) = &mut self.workflow.graph[index].kind {
                    spec.code = code as i32;
                }
            }
            codes.push((index, code_at));
            attrs.finish(&mut self.diags);
            if let Some(cond) = &exit.condition {
                let scope = Scope::global();
                let (expr, ty) = self.expr(cond, &scope);
                self.expect_bool(&expr, &ty, "an exit condition");
                self.workflow.exit_guards.push((index, expr));
            }
        }
        self.exit_codes(&codes);
    }

    /// A caller tells exits apart by the process exit code alone: a user exit may not
    /// take a built-in exit's code, and two user exits sharing one get a warning.
    fn exit_codes(&mut self, exits: &[(NodeIndex, Span)]) {
        let code_of = |w: &Workflow, n: NodeIndex| match &w.graph[n].kind {
            NodeKind::Exit(spec) => spec.code,
            _ => -1,
        };
        let mut taken: Vec<i32> = exits
            .iter()
            .map(|&(n, _)| code_of(&self.workflow, n))
            .collect();
        // Each suggestion is a different free code, so following them all leaves none shared.
        let mut free = || {
            let code = (1..=255)
                .find(|c| builtin_exit_with_code(*c).is_none() && !taken.contains(c))
                .unwrap_or(1);
            taken.push(code);
            code
        };
        let mut first_with: HashMap<i32, (NodeIndex, Span)> = HashMap::new();
        for &(index, at) in exits {
            let code = code_of(&self.workflow, index);
            let name = self.workflow.graph[index].name.clone();
            if let Some(builtin) = builtin_exit_with_code(code) {
                let free = free();
                self.diags.push(
                    Diagnostic::error(
                        "rondo::exit::reserved_code",
                        format!("exit `{name}` uses code {code}, the code of the built-in `{builtin}` exit"),
                    )
                    .label(at, format!("{code} means `{builtin}`"))
                    .help(format!(
                        "a caller could not tell `{name}` from `{builtin}`; codes 2, 3, 4 and 130 are the built-in exits'. Use a free code: `exit {name} {{ code = {free} }}`"
                    )),
                );
                continue;
            }
            match first_with.get(&code) {
                Some(&(other, other_at)) => {
                    let other = self.workflow.graph[other].name.clone();
                    let free = free();
                    self.diags.push(
                        Diagnostic::warning(
                            "rondo::exit::shared_code",
                            format!("exits `{other}` and `{name}` both end the run with code {code}"),
                        )
                        .label(at, format!("`{name}`: code {code}"))
                        .label(other_at, format!("`{other}`: code {code}"))
                        .help(format!(
                            "a caller tells exits apart by the code alone; give `{name}` its own, e.g. `exit {name} {{ code = {free} }}`"
                        )),
                    );
                }
                None => {
                    first_with.insert(code, (index, at));
                }
            }
        }
    }

    // ---------- routes ----------

    fn node_ref(&mut self, name: &Ident) -> Option<NodeIndex> {
        if let Some(&n) = self.node_names.get(&name.name) {
            return Some(n);
        }
        let candidates: Vec<&str> = self.node_names.keys().map(String::as_str).collect();
        let help = did_you_mean(&name.name, candidates)
            .unwrap_or_else(|| "declare it with `role NAME: kind { ... }` or `exit NAME`".into());
        self.diags.push(
            Diagnostic::error(
                "rondo::route::unknown_target",
                format!("route refers to unknown role or exit `{}`", name.name),
            )
            .label(name.span, "not declared")
            .help(help),
        );
        None
    }

    fn routes(&mut self, ast: &Ast) {
        for decl in &ast.routes {
            let from = match &decl.from {
                None => Some(self.workflow.start),
                Some(name) => self.node_ref(name),
            };
            let target = match &decl.target {
                syntax::RouteTarget::Role(name) if name.name == "start" => {
                    Some(RouteTarget::Node {
                        node: self.workflow.start,
                    })
                }
                syntax::RouteTarget::Role(name) => {
                    self.node_ref(name).map(|node| RouteTarget::Node { node })
                }
                syntax::RouteTarget::Parallel { branches, join } => {
                    let b: Vec<Option<NodeIndex>> =
                        branches.iter().map(|b| self.node_ref(b)).collect();
                    let j = self.node_ref(join);
                    match (b.into_iter().collect::<Option<Vec<_>>>(), j) {
                        (Some(branches), Some(join)) => {
                            Some(RouteTarget::Parallel { branches, join })
                        }
                        _ => None,
                    }
                }
                syntax::RouteTarget::Map { worker, over, join } => {
                    let w = self.node_ref(worker);
                    let j = self.node_ref(join);
                    let scope = Scope::global();
                    let (over_expr, ty) = self.expr(over, &scope);
                    if !matches!(ty.strip_optional(), Type::List { .. } | Type::Any) {
                        self.diags.push(
                            Diagnostic::error("rondo::route::map_not_list", "`map ... over` needs a list")
                                .label(over.span, format!("this is {}", ty.display()))
                                .help("map over a list in memory or in a role output, e.g. `memory.items`"),
                        );
                    }
                    match (w, j) {
                        (Some(worker), Some(join)) => Some(RouteTarget::Map {
                            worker,
                            over: over_expr,
                            join,
                        }),
                        _ => None,
                    }
                }
            };
            let (Some(from), Some(target)) = (from, target) else {
                continue;
            };
            if self.workflow.is_exit(from) {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::route::from_exit",
                        format!(
                            "`{}` is an exit; nothing runs after it",
                            self.workflow.graph[from].name
                        ),
                    )
                    .label(decl.from_span, "an exit")
                    .help("routes lead to exits, never out of them"),
                );
                continue;
            }
            for node in target.first_nodes() {
                if node == self.workflow.start {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::route::to_start",
                            "no route leads back to `start`",
                        )
                        .label(decl.span, "targets start")
                        .help("route to the first role instead"),
                    );
                }
            }
            let condition = match &decl.condition {
                syntax::Condition::Always => Condition::Always,
                syntax::Condition::Otherwise(_) => Condition::Otherwise,
                syntax::Condition::When(e) => {
                    let scope = match self.workflow.role(from) {
                        Some(_) => Scope::role(from),
                        None => Scope::global(),
                    };
                    let (expr, ty) = self.expr(e, &scope);
                    self.expect_bool(&expr, &ty, "a route condition");
                    Condition::When { expr }
                }
            };
            let route_id = self.workflow.routes.len();
            let edge_kind = if decl.backtrack {
                EdgeKind::Backtrack
            } else {
                EdgeKind::Normal
            };
            match &target {
                RouteTarget::Node { node } => {
                    self.workflow.graph.add_edge(
                        from,
                        *node,
                        Edge {
                            route: route_id,
                            kind: edge_kind,
                        },
                    );
                }
                RouteTarget::Parallel { join, .. } | RouteTarget::Map { join, .. } => {
                    // Each branch: a fork edge from the source and a join edge to the join role.
                    for b in target.first_nodes() {
                        let fork = Edge {
                            route: route_id,
                            kind: EdgeKind::Fork,
                        };
                        let joined = Edge {
                            route: route_id,
                            kind: EdgeKind::Join,
                        };
                        self.workflow.graph.add_edge(from, b, fork);
                        self.workflow.graph.add_edge(b, *join, joined);
                    }
                }
            }
            let on_invalid = self.json_llm.contains(&from)
                && matches!(&condition, Condition::When { expr: Expr { kind: ExprKind::Path { root: Root::Role { node }, fields }, .. } }
                    if *node == from && fields.len() == 1 && fields[0] == "invalid");
            self.workflow.routes.push(Route {
                from,
                condition,
                target,
                max: decl.max.map(|m| m.0),
                backtrack: decl.backtrack,
                on_invalid,
                span: decl.span,
            });
        }
        let mut outgoing = vec![Vec::new(); self.workflow.graph.node_count()];
        for (id, route) in self.workflow.routes.iter().enumerate() {
            outgoing[route.from.index()].push(id);
        }
        self.workflow.outgoing = outgoing;
    }

    fn expect_bool(&mut self, expr: &Expr, ty: &Type, what: &str) {
        if !ty.is_bool() {
            self.diags.push(
                Diagnostic::error(
                    "rondo::expr::not_bool",
                    format!("{what} must be true or false"),
                )
                .label(expr.span, format!("this is {}", ty.display()))
                .help("compare it, e.g. `x == \"done\"`, or test a bool field"),
            );
        }
    }

    // ---------- tests ----------

    fn tests(&mut self, ast: &Ast) {
        let mut names: HashMap<&str, Span> = HashMap::new();
        for test in &ast.tests {
            if let Some(first) = names.insert(&test.name, test.span) {
                self.diags.push(
                    Diagnostic::error(
                        "rondo::test::duplicate",
                        format!("two tests are named {:?}", test.name),
                    )
                    .label(test.span, "second test")
                    .label(first, "first test")
                    .help("give each test its own name"),
                );
            }
            Attrs::new(&test.attrs, &[], format!("test {:?}", test.name)).finish(&mut self.diags);
            let mut case = TestCase {
                name: test.name.clone(),
                inputs: Vec::new(),
                replies: Vec::new(),
                expectations: Vec::new(),
                span: test.span,
            };
            for (name, value) in &test.inputs {
                let Some(&id) = self.input_names.get(&name.name) else {
                    let candidates: Vec<&str> =
                        self.input_names.keys().map(String::as_str).collect();
                    let help = did_you_mean(&name.name, candidates).unwrap_or_else(|| {
                        "declare it in the workflow header: `input NAME: type`".into()
                    });
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::test::unknown_input",
                            format!("unknown input `{}`", name.name),
                        )
                        .label(name.span, "not an input of the workflow")
                        .help(help),
                    );
                    continue;
                };
                if let Some(v) = self.const_value(value) {
                    case.inputs.push((id, v));
                }
            }
            for reply in &test.replies {
                let Some(node) = self.node_ref(&reply.role) else {
                    continue;
                };
                if !matches!(
                    self.workflow.role(node).map(|r| &r.kind),
                    Some(RoleKind::Llm(_))
                ) {
                    self.diags.push(
                        Diagnostic::error(
                            "rondo::test::reply_not_llm",
                            format!(
                                "`{}` is not an llm role; only llm roles get scripted replies",
                                reply.role.name
                            ),
                        )
                        .label(reply.role.span, "not an llm role")
                        .help("tool roles run for real in tests; builtin roles need no reply"),
                    );
                    continue;
                }
                case.replies.push((node, reply.visit, reply.text.clone()));
            }
            for expectation in &test.expectations {
                let e = match expectation {
                    syntax::Expectation::Exit(name) => match self.node_ref(name) {
                        Some(node) if self.workflow.is_exit(node) => TestExpectation::Exit {
                            node,
                            span: name.span,
                        },
                        Some(_) => {
                            self.diags.push(
                                Diagnostic::error(
                                    "rondo::test::not_an_exit",
                                    format!("`{}` is a role, not an exit", name.name),
                                )
                                .label(name.span, "not an exit")
                                .help("`expect exit NAME` names an exit such as `success`"),
                            );
                            continue;
                        }
                        None => continue,
                    },
                    syntax::Expectation::Path(names, span) => {
                        let nodes: Option<Vec<NodeIndex>> =
                            names.iter().map(|n| self.node_ref(n)).collect();
                        match nodes {
                            Some(nodes) => TestExpectation::Path { nodes, span: *span },
                            None => continue,
                        }
                    }
                    syntax::Expectation::Artifact {
                        name,
                        contains,
                        span,
                    } => TestExpectation::Artifact {
                        name: name.clone(),
                        contains: contains.clone(),
                        span: *span,
                    },
                    syntax::Expectation::Holds(expr) => {
                        let scope = Scope::global();
                        let (expr, ty) = self.expr(expr, &scope);
                        self.expect_bool(&expr, &ty, "an expectation");
                        TestExpectation::Holds { expr }
                    }
                };
                case.expectations.push(e);
            }
            self.workflow.tests.push(case);
        }
    }

    // ---------- lookups ----------

    fn lookup_memory(&mut self, name: &Ident) -> Option<MemoryId> {
        lookup(
            &self.memory_names,
            name,
            &mut self.diags,
            "rondo::memory::unknown",
            "memory",
            "declare it in a `memory { ... }` block",
        )
    }

    fn lookup_provider(&mut self, name: &Ident) -> Option<ProviderId> {
        lookup(
            &self.provider_names,
            name,
            &mut self.diags,
            "rondo::provider::unknown",
            "provider profile",
            "declare it with `provider NAME { ... }` or import a providers file",
        )
    }

    fn lookup_tool(&mut self, name: &Ident) -> Option<ToolId> {
        lookup(
            &self.tool_names,
            name,
            &mut self.diags,
            "rondo::tool::unknown",
            "tool",
            "declare it with `tool NAME { ... }` or `import tool \"config/tools/NAME.yaml\"`",
        )
    }

    fn lookup_env(&mut self, name: &Ident) -> Option<EnvId> {
        lookup(
            &self.env_names,
            name,
            &mut self.diags,
            "rondo::environment::unknown",
            "environment",
            "declare it with `environment NAME { kind = \"docker\" ... }`",
        )
    }

    fn suggest_role(&self, name: &str) -> String {
        let roles: Vec<&str> = self
            .node_names
            .iter()
            .filter(|(_, i)| self.workflow.role(**i).is_some())
            .map(|(n, _)| n.as_str())
            .collect();
        did_you_mean(name, roles).unwrap_or_else(|| "name a declared role".into())
    }

    /// A literal expression as JSON (defaults, test inputs).
    fn const_value(&mut self, e: &syntax::Expr) -> Option<Value> {
        let v = const_eval(e);
        if v.is_none() {
            self.diags.push(
                Diagnostic::error("rondo::expr::not_constant", "this must be a constant")
                    .label(e.span, "refers to something known only at run time")
                    .help("write a literal: a string, number, bool, null, list or map"),
            );
        }
        v
    }
}

impl Workflow {
    fn node_output_type(&self, names: &HashMap<String, NodeIndex>, name: &str) -> Type {
        names
            .get(name)
            .and_then(|&n| self.role(n))
            .map_or(Type::Any, |r| (*r.output_type).clone())
    }
}

/// Resolves a name in one namespace, or reports it with the closest declared name.
fn lookup(
    names: &HashMap<String, usize>,
    name: &Ident,
    diags: &mut Diagnostics,
    code: &'static str,
    what: &str,
    how: &str,
) -> Option<usize> {
    if let Some(&id) = names.get(&name.name) {
        return Some(id);
    }
    let help = did_you_mean(&name.name, names.keys().map(String::as_str))
        .unwrap_or_else(|| how.to_string());
    diags.push(
        Diagnostic::error(code, format!("unknown {what} `{}`", name.name))
            .label(name.span, "not declared")
            .help(help),
    );
    None
}

fn const_eval(e: &syntax::Expr) -> Option<Value> {
    use syntax::ExprKind as K;
    Some(match &e.kind {
        K::String(s) => Value::String(s.clone()),
        K::Number(n) => number_value(*n),
        K::Bool(b) => Value::Bool(*b),
        K::Null => Value::Null,
        K::List(items) => Value::Array(items.iter().map(const_eval).collect::<Option<_>>()?),
        K::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| Some((k.name.clone(), const_eval(v)?)))
                .collect::<Option<_>>()?,
        ),
        K::Get(..) => return None,
        K::Unary(syntax::UnOp::Neg, inner) => match const_eval(inner)? {
            Value::Number(n) => number_value(-n.as_f64()?),
            _ => return None,
        },
        _ => return None,
    })
}

/// The built-in exit that owns `code`; 4 is `invalid_output` (a reply still invalid after
/// its retries).
fn builtin_exit_with_code(code: i32) -> Option<&'static str> {
    BUILTIN_EXITS
        .iter()
        .find(|(_, c)| *c == code)
        .map(|(n, _)| *n)
        .or((code == 4).then_some("invalid_output"))
}

/// One step into a value: a field of an object, or an item of a list or map.
enum NullStep {
    Field(String),
    Item,
}

/// Where a value that may be null meets a type that admits none, at the top or in a
/// field or item of it: the steps down to it (none for the value itself). `any` stays
/// unchecked. Recursion follows the types, which `Type::validate` walks the same way.
fn null_into_required(required: &Type, value: &Type) -> Option<Vec<NullStep>> {
    if required.is_optional() {
        return None;
    }
    if matches!(value, Type::Optional { .. } | Type::Null) {
        return Some(Vec::new());
    }
    let (step, mut rest) = match (required, value) {
        (Type::Object { fields }, Type::Object { fields: given }) => {
            fields.iter().find_map(|f| {
                let g = given.iter().find(|g| g.name == f.name)?;
                let rest = null_into_required(&f.ty, &g.ty)?;
                Some((NullStep::Field(f.name.clone()), rest))
            })?
        }
        (Type::List { item }, Type::List { item: given })
        | (Type::Map { value: item }, Type::Map { value: given }) => {
            (NullStep::Item, null_into_required(item, given)?)
        }
        _ => return None,
    };
    rest.insert(0, step);
    Some(rest)
}

/// The type of a value to store, with the string literals an object or list literal
/// spells out kept as literals (the expression types widen them to `string`), so
/// `{ status: "done" }` fits a `status: "todo" | "done"` field.
fn stored_type(expr: &Expr, ty: &Type) -> Type {
    match (&expr.kind, ty) {
        (ExprKind::Literal { value }, _) => match value {
            Value::String(s) => Type::Literal { value: s.clone() },
            Value::Number(n) if n.is_i64() || n.is_u64() => Type::Int,
            Value::Number(_) => Type::Float,
            Value::Bool(_) => Type::Bool,
            Value::Null => Type::Null,
            _ => ty.clone(),
        },
        (ExprKind::Map { entries }, Type::Object { fields }) if entries.len() == fields.len() => {
            Type::Object {
                fields: entries
                    .iter()
                    .zip(fields)
                    .map(|((name, e), f)| types::Field {
                        name: name.clone(),
                        ty: stored_type(e, &f.ty),
                    })
                    .collect(),
            }
        }
        (ExprKind::List { items }, Type::List { item }) if !items.is_empty() => {
            let mut members: Vec<Type> = Vec::new();
            for i in items {
                let t = stored_type(i, item);
                if !members.contains(&t) {
                    members.push(t);
                }
            }
            Type::list(if members.len() == 1 {
                members.remove(0)
            } else {
                Type::Union { members }
            })
        }
        _ => ty.clone(),
    }
}

fn maybe_null_into_required(required: &Type, value: &Type) -> bool {
    null_into_required(required, value).is_some()
}

pub fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
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

fn is_builtin_type(name: &str) -> bool {
    matches!(
        name,
        "string" | "int" | "float" | "number" | "bool" | "any" | "json" | "null" | "list" | "map"
    )
}

fn ops_for(kind: &MemoryKind) -> &'static [MemoryOp] {
    match kind {
        MemoryKind::Value { .. } => &[
            MemoryOp::Append,
            MemoryOp::Extend,
            MemoryOp::Truncate,
            MemoryOp::Put,
            MemoryOp::Patch,
            MemoryOp::Clear,
        ],
        MemoryKind::Whiteboard { .. } => &[MemoryOp::Apply],
        MemoryKind::CodeContext { .. } => &[MemoryOp::Access, MemoryOp::Cite],
        MemoryKind::History => &[MemoryOp::Push, MemoryOp::Observe, MemoryOp::Reflect],
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
        ValueKind::Duration(ms) => K::Number(*ms as f64),
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

pub(crate) fn relative_to(dir: &Path, path: &str) -> std::path::PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// The innermost cause of a tera error, which carries the useful text.
pub fn tera_error_text(e: &tera::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = s.to_string();
        source = s.source();
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `input NAME: path` (or `path?`): a string naming a file or folder of the host.
fn is_path_type(ty: &TypeExpr) -> bool {
    match &ty.kind {
        TypeKind::Named(name) => name == "path",
        TypeKind::Optional(inner) => matches!(&inner.kind, TypeKind::Named(name) if name == "path"),
        _ => false,
    }
}
