//! Stage 2: [`Ast`] → [`Workflow`]. Resolves every name to an index, lowers routes to a
//! petgraph graph, type-checks expressions, and loads imported YAML (providers, tools).
//! Always returns a `Workflow` (possibly partial) so later passes can report more.

mod attrs;
mod end;
mod expr;
mod header;
mod imports;
mod memory;
pub mod mounts;
mod paths;
mod roles;
mod routes;
mod test_blocks;
mod type_decls;
pub mod types;
mod updates;
pub mod workflow;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::diagnostics::{Code, Diagnostic, Diagnostics, did_you_mean};
use crate::source::{SourceFile, Span};
use crate::syntax::{self, Ast, Ident};
pub use expr::{Scope, invalid_field_type};
pub use memory::{MIN_VIEW_BYTES, new_code_context, new_whiteboard, over as memory_over};
pub use roles::{call_type, calls_result_type, conversation_type, native_output_type};
use types::Type;
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
    "input", "memory", "output", "item", "round", "step", "visit", "run_id", "ended", "start",
];

/// Parses and compiles a file: the usual entry point.
pub fn load(file: &SourceFile) -> (Workflow, Diagnostics) {
    let (_, workflow, diagnostics) = load_keeping_ast(file);
    (workflow, diagnostics)
}

/// [`load`], also handing back the syntax tree (so a caller about to exit can skip
/// freeing it).
pub fn load_keeping_ast(file: &SourceFile) -> (Ast, Workflow, Diagnostics) {
    let (ast, diagnostics) = syntax::parse(file);
    let (workflow, diagnostics) = compile_parsed(file, &ast, diagnostics);
    (ast, workflow, diagnostics)
}

/// Compiles a parsed file; `diagnostics` are the parser's, the compiler's are added.
pub fn compile_parsed(
    file: &SourceFile,
    ast: &Ast,
    mut diagnostics: Diagnostics,
) -> (Workflow, Diagnostics) {
    let (workflow, mut more) = compile(file, ast);
    // A file that did not parse is not "empty"; the syntax error says what is wrong.
    if diagnostics.has_errors() {
        more.retain(|d| d.code != Code::WorkflowEmpty);
    }
    diagnostics.extend(more);
    (workflow, diagnostics)
}

/// The prompts folder and the templates the llm roles name, read off the syntax tree as
/// the compiler resolves them (`prompts = "..."` against the file's folder, `prompt` and
/// `system` strings): `check` starts parsing them while the file compiles. Only a guess
/// to start early; the compiled workflow says which templates are checked.
pub fn named_prompts(file: &SourceFile, ast: &Ast) -> (PathBuf, Vec<String>) {
    let dir = prompts_dir(file, ast.workflow.as_ref());
    let names = ast.roles.iter().flat_map(prompts_named_by).collect();
    (dir, names)
}

/// The prompts folder a workflow header names, against the file's folder.
pub fn prompts_dir(file: &SourceFile, header: Option<&syntax::WorkflowDecl>) -> PathBuf {
    let dir = file.dir();
    match header.and_then(|w| attr_string(&w.attrs, "prompts")) {
        Some(p) => dir.join(p),
        None => dir,
    }
}

/// The templates an llm role names (`system`, `prompt`), as the folder's names.
pub fn prompts_named_by(role: &syntax::RoleDecl) -> Vec<String> {
    if role.kind.name != "llm" {
        return Vec::new();
    }
    [
        attr_string(&role.attrs, "system"),
        attr_string(&role.attrs, "prompt"),
    ]
    .into_iter()
    .flatten()
    .map(|n| n.replace('\\', "/"))
    .filter(|n| !n.is_empty())
    .collect()
}

fn attr_string(attrs: &[syntax::Attr], key: &str) -> Option<String> {
    attrs.iter().find_map(|a| match &a.value.kind {
        syntax::ValueKind::String(s) if a.key.name == key => Some(s.clone()),
        _ => None,
    })
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
    /// The tools `plugins_env` named (`None` without `plugins_env`).
    plugin_tools: Option<Vec<ToolId>>,
    env_names: HashMap<String, EnvId>,
    node_names: HashMap<String, NodeIndex>,
    /// Role and exit names whose declaration was refused (reserved): their uses are not
    /// reported again.
    refused_nodes: std::collections::HashSet<String>,
    /// Roles and exits whose declaration did not parse (reported by the parser).
    broken_nodes: std::collections::HashSet<String>,
    /// Role and exit names declared twice: uses resolve to the first declaration, but what
    /// they read of it is not checked (the author may mean the second).
    twice_declared: std::collections::HashSet<String>,
    input_names: HashMap<String, InputId>,
    pending_providers: Vec<imports::PendingProvider>,
    /// The result type of tool roles, built once and shared.
    tool_result: Option<Arc<Type>>,
    /// Llm roles with `output json`: they have the `invalid` pseudo-fields.
    json_llm: std::collections::HashSet<NodeIndex>,
    /// Roles that are the worker of a `map` route: read by name, the list of their outputs.
    /// Known from the syntax before routes are compiled, since role bodies read them.
    map_workers: std::collections::HashSet<String>,
    /// Each map route's worker and the list it goes over, for the type of `item`.
    map_over: Vec<(String, syntax::Expr)>,
    /// Where the header names the `finally` role.
    finally_span: Span,
    /// Nesting and size of the type being resolved: named types are expanded in place,
    /// and every later pass walks types recursively.
    type_depth: usize,
    type_nodes: usize,
}

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
                default_provider_env: None,
                secret_env: Vec::new(),
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
                finally: None,
                durable: Vec::new(),
                script: None,
                answer: None,
                tests: Vec::new(),
                budget: None,
            },
            types: HashMap::new(),
            memory_names: HashMap::new(),
            provider_names: HashMap::new(),
            tool_names: HashMap::new(),
            plugin_tools: None,
            env_names: HashMap::new(),
            node_names: HashMap::new(),
            refused_nodes: Default::default(),
            broken_nodes: Default::default(),
            twice_declared: Default::default(),
            input_names: HashMap::new(),
            pending_providers: Vec::new(),
            tool_result: None,
            json_llm: Default::default(),
            map_workers: Default::default(),
            map_over: Vec::new(),
            finally_span: Span::default(),
        }
    }

    fn run(&mut self, ast: &Ast) {
        self.broken_nodes = ast.broken_nodes.iter().cloned().collect();
        self.refused_nodes.extend(self.broken_nodes.iter().cloned());
        self.map_workers = ast
            .routes
            .iter()
            .filter_map(|r| match &r.target {
                syntax::RouteTarget::Map { worker, .. } => Some(worker.name.clone()),
                _ => None,
            })
            .collect();
        self.map_over = ast
            .routes
            .iter()
            .filter_map(|r| match &r.target {
                syntax::RouteTarget::Map { worker, over, .. } => {
                    Some((worker.name.clone(), over.clone()))
                }
                _ => None,
            })
            .collect();
        for span in &ast.extra_headers {
            self.diags.push(
                Diagnostic::error(Code::WorkflowDuplicate, "a file declares one workflow")
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
        self.plugin_tools(ast);
        self.environments(ast);
        self.declare_nodes(ast);
        self.header_attrs(ast);
        self.role_bodies(ast);
        self.finally_is_builtin();
        self.exits(ast);
        self.workflow_artifacts(ast);
        self.routes(ast);
        self.empty_builtins(ast);
        self.header_answer(ast);
        self.tests(ast);
        if ast.workflow.is_none()
            && ast.roles.is_empty()
            && ast.routes.is_empty()
            && !self.diags.has_errors()
        {
            self.diags.push(
                Diagnostic::error(Code::WorkflowEmpty, "this file declares no workflow")
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
            Code::NameDuplicate,
            format!("{what} `{}` is declared twice", name.name),
        )
        .label(name.span, "declared again here");
        if let Some(first) = first.filter(|s| !s.is_empty()) {
            d = d.label(first, "first declared here");
        }
        self.diags
            .push(d.help("names must be unique; rename one of them"));
    }

    fn lookup_memory(&mut self, name: &Ident) -> Option<MemoryId> {
        lookup(
            &self.memory_names,
            name,
            &mut self.diags,
            Code::MemoryUnknown,
            "memory",
            "declare it in a `memory { ... }` block",
        )
    }

    fn lookup_provider(&mut self, name: &Ident) -> Option<ProviderId> {
        lookup(
            &self.provider_names,
            name,
            &mut self.diags,
            Code::ProviderUnknown,
            "provider profile",
            "declare it with `provider NAME { ... }` or import a providers file",
        )
    }

    /// A role's `tools` list; `plugins` stands for the tools `plugins_env` names.
    fn tool_list(&mut self, names: &[Ident]) -> Vec<ToolId> {
        let mut out = Vec::new();
        for name in names {
            match &self.plugin_tools {
                Some(plugins)
                    if name.name == "plugins" && !self.tool_names.contains_key("plugins") =>
                {
                    out.extend(plugins.iter().copied())
                }
                _ => out.extend(self.lookup_tool(name)),
            }
        }
        out
    }

    fn lookup_tool(&mut self, name: &Ident) -> Option<ToolId> {
        lookup(
            &self.tool_names,
            name,
            &mut self.diags,
            Code::ToolUnknown,
            "tool",
            "declare it with `tool NAME { ... }` or `import tool \"config/tools/NAME.yaml\"`",
        )
    }

    fn lookup_env(&mut self, name: &Ident) -> Option<EnvId> {
        lookup(
            &self.env_names,
            name,
            &mut self.diags,
            Code::EnvironmentUnknown,
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
                Diagnostic::error(Code::ExprNotConstant, "this must be a constant")
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
    code: Code,
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

/// Compiles one expression over an already compiled workflow, as a `test` block's `expect`
/// is (the whole run in scope, no current role) and type-checked as a condition:
/// `rondo eval`'s checks. Spans are offsets into `text`.
pub fn condition_over(workflow: &Workflow, text: &str) -> Result<Expr, Diagnostics> {
    let parsed = syntax::parse_expr(text).map_err(|d| {
        let mut diags = Diagnostics::default();
        diags.push(d);
        diags
    })?;
    let file = SourceFile::new(workflow.path.clone(), text);
    let mut c = Compiler::new(&file);
    c.workflow = workflow.clone();
    let workers = workflow.map_workers();
    for index in workflow.graph.node_indices() {
        c.node_names
            .insert(workflow.graph[index].name.clone(), index);
        if workflow.is_json_llm(index) {
            c.json_llm.insert(index);
        }
        if workers.contains(&index) {
            c.map_workers.insert(workflow.graph[index].name.clone());
        }
    }
    for (id, input) in workflow.inputs.iter().enumerate() {
        c.input_names.insert(input.name.clone(), id);
    }
    for (id, slot) in workflow.memory.iter().enumerate() {
        c.memory_names.insert(slot.name.clone(), id);
    }
    for (id, tool) in workflow.tools.iter().enumerate() {
        c.tool_names.insert(tool.name().to_string(), id);
    }
    let (expr, ty) = c.expr(&parsed, &Scope::global());
    c.expect_bool(&expr, &ty, "a check");
    if c.diags.has_errors() {
        Err(c.diags)
    } else {
        Ok(expr)
    }
}

pub fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

pub(crate) fn relative_to(dir: &Path, path: &str) -> std::path::PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// Templates parsed already in this process, by text: compile validates artifact names,
/// check reads them again with commands and log names (`prompt::parse_inline`), a run
/// renders them at every step, and tera's parser costs far more than a copy of its tree.
/// Shared by the threads: `check` parses them ahead on another thread while the file
/// compiles.
const MAX_TEMPLATES_CACHED: usize = 4096;

static PARSED: std::sync::LazyLock<std::sync::Mutex<HashMap<String, tera::Template>>> =
    std::sync::LazyLock::new(Default::default);

/// `text` parsed by tera, from the cache when it was parsed before; only what parses is
/// kept.
pub fn parse_template(text: &str) -> Result<tera::Template, tera::Error> {
    let cached = PARSED
        .lock()
        .ok()
        .and_then(|cache| cache.get(text).cloned());
    if let Some(template) = cached {
        return Ok(template);
    }
    let template = tera::Template::new("inline", None, text)?;
    if let Ok(mut cache) = PARSED.lock() {
        if cache.len() >= MAX_TEMPLATES_CACHED {
            cache.clear();
        }
        cache.insert(text.to_string(), template.clone());
    }
    Ok(template)
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
