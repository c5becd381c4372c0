//! Every name of a workflow file and where it is written: declarations, uses, and the
//! paths read by expressions (for hover and completion on fields). Built from the syntax
//! tree, which keeps the span of every name; the compiled workflow only resolves them.

use crate::source::Span;
use crate::syntax::{
    Ast, Attr, Condition, Expectation, Expr, ExprKind, MemoryShape, OutputDecl, RoleDecl,
    RouteDecl, RouteTarget, TestDecl, TypeExpr, TypeKind, UpdateStmt, Value, ValueKind,
};

/// What a name names. Roles and exits share one namespace (`Node`), as in the compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Node,
    Type,
    Memory,
    Input,
    Tool,
    Provider,
    Environment,
    /// A prompt template file, by its name relative to the prompts folder.
    Template,
    /// An expression function (`len`, `if`): hover and highlighting only.
    Function,
}

impl Kind {
    /// Names that can be renamed where they are written (a template is a file).
    pub fn renamable(self) -> bool {
        !matches!(self, Kind::Template | Kind::Function)
    }
}

/// One place a name is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    pub kind: Kind,
    pub name: String,
    /// The name itself (for a template, the string literal without its quotes).
    pub span: Span,
    pub def: bool,
}

/// A dotted path read by an expression: its words, and the role it is read in (for
/// `output`).
#[derive(Debug, Clone)]
pub struct PathRead {
    pub parts: Vec<(String, Span)>,
    pub role: Option<String>,
}

/// The names of one workflow file.
#[derive(Debug, Default, Clone)]
pub struct Index {
    /// Sorted by start.
    pub occurrences: Vec<Occurrence>,
    pub paths: Vec<PathRead>,
}

/// Roots of an expression path that are not names of the workflow.
pub const BUILTIN_ROOTS: &[&str] = &[
    "input", "memory", "output", "prompt", "item", "round", "step", "visit", "run_id", "ended",
];

/// Types every workflow has.
pub const BUILTIN_TYPES: &[&str] = &[
    "string",
    "int",
    "float",
    "bool",
    "any",
    "null",
    "path",
    "workspace_path",
];

/// Attributes whose value names something of the workflow.
fn attr_kind(key: &str) -> Option<Kind> {
    Some(match key {
        "provider" | "fallback" => Kind::Provider,
        "reads" | "durable" | "conversation" => Kind::Memory,
        "tools" | "run" => Kind::Tool,
        "env" => Kind::Environment,
        "round" | "finally" => Kind::Node,
        "prompt" | "system" => Kind::Template,
        _ => return None,
    })
}

/// Attributes whose value is an expression (`args = { path: input.file }`).
const EXPR_ATTRS: &[&str] = &["max_visits", "args", "call", "argv", "calls"];

impl Index {
    pub fn build(ast: &Ast, text: &str) -> Index {
        let mut b = Builder {
            index: Index::default(),
            text,
            bounded: Vec::new(),
        };
        b.ast(ast);
        for (kind, name, span) in std::mem::take(&mut b.bounded) {
            let declared = |k: Kind| {
                b.index
                    .occurrences
                    .iter()
                    .any(|o| o.def && o.kind == k && o.name == name)
            };
            let kind = kind.unwrap_or(if declared(Kind::Memory) {
                Kind::Memory
            } else {
                Kind::Input
            });
            b.add(kind, &name, span, false);
        }
        let mut index = b.index;
        index
            .occurrences
            .sort_by_key(|o| (o.span.start, o.span.end));
        index
            .occurrences
            .dedup_by(|a, b| a.span == b.span && a.kind == b.kind);
        index
    }

    /// The occurrence at a byte offset (its end included, so a cursor right after a name
    /// finds it).
    pub fn at(&self, offset: usize) -> Option<&Occurrence> {
        let i = self.occurrences.partition_point(|o| o.span.end < offset);
        self.occurrences[i..]
            .iter()
            .take_while(|o| o.span.start <= offset)
            .find(|o| o.span.start <= offset && offset <= o.span.end)
    }

    pub fn definitions<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Occurrence> + 'a {
        self.occurrences
            .iter()
            .filter(move |o| o.def && o.kind == kind && o.name == name)
    }

    pub fn all<'a>(
        &'a self,
        kind: Kind,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Occurrence> + 'a {
        self.occurrences
            .iter()
            .filter(move |o| o.kind == kind && o.name == name)
    }

    pub fn declared(&self, kind: Kind) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .occurrences
            .iter()
            .filter(|o| o.def && o.kind == kind)
            .map(|o| o.name.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The path read whose word covers `offset`, and which word.
    pub fn path_at(&self, offset: usize) -> Option<(&PathRead, usize)> {
        self.paths.iter().find_map(|p| {
            p.parts
                .iter()
                .position(|(_, s)| s.start <= offset && offset <= s.end)
                .map(|i| (p, i))
        })
    }
}

struct Builder<'t> {
    index: Index,
    text: &'t str,
    /// Names `limits { max_bytes = { NAME: ... } }` bounds: an input or a memory, known once
    /// both are declared (`Some` when written `"input.NAME"` or `"memory.NAME"`).
    bounded: Vec<(Option<Kind>, String, Span)>,
}

impl Builder<'_> {
    fn add(&mut self, kind: Kind, name: &str, span: Span, def: bool) {
        if name.is_empty() {
            return;
        }
        self.index.occurrences.push(Occurrence {
            kind,
            name: name.to_string(),
            span,
            def,
        });
    }

    fn ast(&mut self, ast: &Ast) {
        if let Some(wf) = &ast.workflow {
            for input in &wf.inputs {
                self.add(Kind::Input, &input.name.name, input.name.span, true);
                self.type_expr(&input.ty);
                if let Some(d) = &input.default {
                    self.expr(d, None);
                }
            }
            self.attrs(&wf.attrs, None);
            for answer in &wf.answers {
                self.expr(answer, None);
            }
        }
        for ty in &ast.types {
            self.add(Kind::Type, &ty.name.name, ty.name.span, true);
            self.type_expr(&ty.ty);
        }
        for m in &ast.memory {
            self.add(Kind::Memory, &m.name.name, m.name.span, true);
            match &m.shape {
                MemoryShape::Plain { ty, default } => {
                    self.type_expr(ty);
                    if let Some(d) = default {
                        self.expr(d, None);
                    }
                }
                MemoryShape::Kind { attrs, .. } => self.attrs(attrs, None),
            }
        }
        for p in &ast.providers {
            self.add(Kind::Provider, &p.name.name, p.name.span, true);
            self.attrs(&p.attrs, None);
        }
        for t in &ast.tools {
            self.add(Kind::Tool, &t.name.name, t.name.span, true);
            if let Some(input) = &t.input {
                self.type_expr(input);
            }
        }
        for e in &ast.environments {
            self.add(Kind::Environment, &e.name.name, e.name.span, true);
            self.attrs(&e.attrs, None);
        }
        for role in &ast.roles {
            self.role(role);
        }
        for exit in &ast.exits {
            self.add(Kind::Node, &exit.name.name, exit.name.span, true);
            if let Some(c) = &exit.condition {
                self.expr(c, None);
            }
        }
        for route in &ast.routes {
            self.route(route);
        }
        for a in &ast.artifacts {
            self.inline(a.name_span);
            self.expr(&a.value, None);
        }
        for test in &ast.tests {
            self.test(test);
        }
    }

    fn role(&mut self, role: &RoleDecl) {
        self.add(Kind::Node, &role.name.name, role.name.span, true);
        let scope = Some(role.name.name.as_str());
        self.attrs(&role.attrs, scope);
        if let Some((output, _)) = &role.output
            && let OutputDecl::Json(ty) | OutputDecl::Tagged(ty) = output
        {
            self.type_expr(ty);
        }
        for u in &role.updates {
            match u {
                UpdateStmt::Set { target, value, .. } => {
                    self.add(Kind::Memory, &target.name, target.span, false);
                    self.expr(value, scope);
                }
                UpdateStmt::Call { target, args, .. } => {
                    self.add(Kind::Memory, &target.name, target.span, false);
                    for a in args {
                        self.expr(a, scope);
                    }
                }
            }
        }
        for a in &role.artifacts {
            self.inline(a.name_span);
            self.expr(&a.value, scope);
        }
    }

    fn route(&mut self, route: &RouteDecl) {
        let from = route.from.as_ref().map(|f| f.name.as_str());
        if let Some(f) = &route.from {
            self.add(Kind::Node, &f.name, f.span, false);
        }
        match &route.target {
            RouteTarget::Role(t) => self.add(Kind::Node, &t.name, t.span, false),
            RouteTarget::Parallel { branches, join } => {
                for b in branches {
                    self.add(Kind::Node, &b.name, b.span, false);
                }
                self.add(Kind::Node, &join.name, join.span, false);
            }
            RouteTarget::Map { worker, over, join } => {
                self.add(Kind::Node, &worker.name, worker.span, false);
                self.add(Kind::Node, &join.name, join.span, false);
                self.expr(over, from);
            }
        }
        if let Condition::When(e) = &route.condition {
            self.expr(e, from);
        }
    }

    fn test(&mut self, test: &TestDecl) {
        for (name, value) in &test.inputs {
            self.add(Kind::Input, &name.name, name.span, false);
            self.expr(value, None);
        }
        for reply in &test.replies {
            self.add(Kind::Node, &reply.role.name, reply.role.span, false);
        }
        for e in &test.expectations {
            match e {
                Expectation::Exit(id) => self.add(Kind::Node, &id.name, id.span, false),
                Expectation::Path(ids, _) => {
                    for id in ids {
                        self.add(Kind::Node, &id.name, id.span, false);
                    }
                }
                Expectation::Holds(expr) => self.expr(expr, None),
                Expectation::Artifact { .. } => {}
            }
        }
    }

    fn attrs(&mut self, attrs: &[Attr], role: Option<&str>) {
        for attr in attrs {
            let key = attr.key.name.as_str();
            if let Some(kind) = attr_kind(key) {
                self.named_values(kind, &attr.value);
            } else if EXPR_ATTRS.contains(&key) {
                self.value_expr(&attr.value, role);
            } else if let ValueKind::Block(inner) = &attr.value.kind {
                self.attrs(inner, role);
            }
            if matches!(key, "command" | "log") {
                self.strings(&attr.value);
            }
            if matches!(key, "max_bytes" | "max_len" | "max_depth")
                && let ValueKind::Map(entries) = &attr.value.kind
            {
                for (name, _) in entries {
                    let written = self.text.get(name.span.start..name.span.end).unwrap_or("");
                    let quoted = written.starts_with('"');
                    let inner_start = name.span.start + usize::from(quoted);
                    let (kind, bare, start) = match name.name.split_once('.') {
                        Some(("input", rest)) => (Some(Kind::Input), rest, inner_start + 6),
                        Some(("memory", rest)) => (Some(Kind::Memory), rest, inner_start + 7),
                        _ => (None, name.name.as_str(), inner_start),
                    };
                    let span = Span::new(start, start + bare.len());
                    if self.text.get(span.start..span.end) == Some(bare) {
                        self.bounded.push((kind, bare.to_string(), span));
                    }
                }
            }
        }
    }

    /// The names an attribute lists (`reads = [plan, code]`) or gives (`env = local`).
    fn named_values(&mut self, kind: Kind, value: &Value) {
        match &value.kind {
            ValueKind::Ident(name) => self.add(kind, name, value.span, false),
            // A quoted name (`prompt = "planner.tera"`): the text between the quotes, when
            // it is written as its value (no escapes).
            ValueKind::String(name) => {
                let inner = Span::new(value.span.start + 1, value.span.end.saturating_sub(1));
                if self.text.get(inner.start..inner.end) == Some(name.as_str()) {
                    self.add(kind, name, inner, false);
                }
            }
            ValueKind::List(items) => {
                for item in items {
                    self.named_values(kind, item);
                }
            }
            _ => {}
        }
    }

    fn strings(&mut self, value: &Value) {
        match &value.kind {
            ValueKind::String(_) => self.inline(value.span),
            ValueKind::List(items) => {
                for item in items {
                    self.strings(item);
                }
            }
            _ => {}
        }
    }

    /// The names an inline template (a command argument, a log or artifact name) reads.
    fn inline(&mut self, literal: Span) {
        let Some(text) = self.text.get(literal.start..literal.end) else {
            return;
        };
        if !text.contains("{{") && !text.contains("{%") {
            return;
        }
        for read in super::tera::reads(text) {
            let shift = |s: Span| Span::new(s.start + literal.start, s.end + literal.start);
            let parts: Vec<(String, Span)> = read
                .parts
                .iter()
                .map(|(n, s)| (n.clone(), shift(*s)))
                .collect();
            self.path(&parts, None);
        }
    }

    fn value_expr(&mut self, value: &Value, role: Option<&str>) {
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            match &v.kind {
                ValueKind::Ident(name) => self.path(&[(name.clone(), v.span)], role),
                ValueKind::Path(parts) => {
                    let parts: Vec<(String, Span)> =
                        parts.iter().map(|p| (p.name.clone(), p.span)).collect();
                    self.path(&parts, role);
                }
                ValueKind::List(items) => stack.extend(items),
                ValueKind::Map(entries) => stack.extend(entries.iter().map(|(_, v)| v)),
                ValueKind::Call(name, args) => {
                    self.add(Kind::Function, &name.name, name.span, false);
                    stack.extend(args);
                }
                _ => {}
            }
        }
    }

    /// A path read by an expression: its root names an input, a memory or a role.
    fn path(&mut self, parts: &[(String, Span)], role: Option<&str>) {
        let Some((root, root_span)) = parts.first() else {
            return;
        };
        match root.as_str() {
            "input" => {
                if let Some((name, span)) = parts.get(1) {
                    self.add(Kind::Input, name, *span, false);
                }
            }
            "memory" => {
                if let Some((name, span)) = parts.get(1) {
                    self.add(Kind::Memory, name, *span, false);
                }
            }
            r if BUILTIN_ROOTS.contains(&r) => {}
            "true" | "false" | "null" => return,
            name => self.add(Kind::Node, name, *root_span, false),
        }
        self.index.paths.push(PathRead {
            parts: parts.to_vec(),
            role: role.map(str::to_string),
        });
    }

    /// Walks an expression with a stack: a chain of 100,000 `and`s is that deep.
    fn expr(&mut self, e: &Expr, role: Option<&str>) {
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            match &e.kind {
                ExprKind::Path(parts) => {
                    let parts: Vec<(String, Span)> =
                        parts.iter().map(|p| (p.name.clone(), p.span)).collect();
                    self.path(&parts, role);
                }
                ExprKind::Call(name, args) => {
                    self.add(Kind::Function, &name.name, name.span, false);
                    let names_arg = match name.name.as_str() {
                        "visits" => Some(Kind::Node),
                        "used" => Some(Kind::Tool),
                        _ => None,
                    };
                    match (names_arg, args.as_slice()) {
                        (Some(kind), [arg]) => {
                            if let ExprKind::Path(parts) = &arg.kind
                                && let [id] = parts.as_slice()
                            {
                                self.add(kind, &id.name, id.span, false);
                            }
                        }
                        _ => stack.extend(args),
                    }
                }
                ExprKind::Get(base, _) => stack.push(base),
                ExprKind::List(items) => stack.extend(items),
                ExprKind::Map(entries) => stack.extend(entries.iter().map(|(_, v)| v)),
                ExprKind::Unary(_, operand) => stack.push(operand),
                ExprKind::Binary(_, l, r) => {
                    stack.push(r);
                    stack.push(l);
                }
                ExprKind::String(_) | ExprKind::Number(_) | ExprKind::Bool(_) | ExprKind::Null => {}
            }
        }
    }

    fn type_expr(&mut self, ty: &TypeExpr) {
        let mut stack = vec![ty];
        while let Some(t) = stack.pop() {
            match &t.kind {
                TypeKind::Named(name) if !BUILTIN_TYPES.contains(&name.as_str()) => {
                    self.add(Kind::Type, name, t.span, false);
                }
                TypeKind::Named(_) | TypeKind::Literal(_) => {}
                TypeKind::List(inner) | TypeKind::Map(inner) | TypeKind::Optional(inner) => {
                    stack.push(inner)
                }
                TypeKind::Object(fields, _) => stack.extend(fields.iter().map(|f| &f.ty)),
                TypeKind::Union(members) => stack.extend(members),
            }
        }
    }
}
