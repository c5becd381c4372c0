//! The syntax tree of one `.rondo` file. Every node carries the byte span it came from;
//! names are still strings here (the compiler resolves them).

use serde::{Deserialize, Serialize};

use crate::source::Span;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Ast {
    pub workflow: Option<WorkflowDecl>,
    pub imports: Vec<ImportDecl>,
    pub types: Vec<TypeDecl>,
    pub memory: Vec<MemoryEntry>,
    pub providers: Vec<BlockDecl>,
    pub tools: Vec<ToolDecl>,
    pub environments: Vec<BlockDecl>,
    pub roles: Vec<RoleDecl>,
    pub exits: Vec<ExitDecl>,
    pub routes: Vec<RouteDecl>,
    /// Workflow-level artifacts, written after every step.
    pub artifacts: Vec<ArtifactDecl>,
    pub tests: Vec<TestDecl>,
    /// Duplicate `workflow` or `memory` headers, kept so the checker can point at them.
    pub extra_headers: Vec<Span>,
    /// Names of `role` and `exit` declarations that did not parse (reported there): their
    /// uses are not reported again as undeclared.
    pub broken_nodes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkflowDecl {
    pub name: Ident,
    pub inputs: Vec<InputDecl>,
    pub attrs: Vec<Attr>,
    /// `answer = EXPR`, each one written (a second is reported).
    pub answers: Vec<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub default: Option<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ImportKind {
    Providers,
    Tool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImportDecl {
    pub kind: ImportKind,
    pub path: String,
    pub path_span: Span,
    pub span: Span,
}

/// An attribute `key = value` or a nested block `key { ... }`.
#[derive(Debug, Clone, Serialize)]
pub struct Attr {
    pub key: Ident,
    pub value: Value,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub enum ValueKind {
    String(String),
    Number(f64),
    Duration(std::time::Duration),
    Bool(bool),
    Null,
    Ident(String),
    Path(Vec<Ident>),
    List(Vec<Value>),
    Map(Vec<(Ident, Value)>),
    Call(Ident, Vec<Value>),
    Block(Vec<Attr>),
}

#[derive(Debug, Clone, Serialize)]
pub struct Value {
    pub kind: ValueKind,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct BlockDecl {
    pub name: Ident,
    pub attrs: Vec<Attr>,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolDecl {
    pub name: Ident,
    pub attrs: Vec<Attr>,
    pub input: Option<TypeExpr>,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct TypeDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub enum TypeKind {
    Named(String),
    Literal(String),
    List(Box<TypeExpr>),
    Map(Box<TypeExpr>),
    /// The fields, and the attributes of the object itself (`extra = ignore`).
    Object(Vec<FieldDecl>, Vec<Attr>),
    Union(Vec<TypeExpr>),
    Optional(Box<TypeExpr>),
}

#[derive(Debug, Clone, Serialize)]
pub struct TypeExpr {
    pub kind: TypeKind,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct FieldDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub enum MemoryShape {
    Plain { ty: TypeExpr, default: Option<Expr> },
    Kind { kind: Ident, attrs: Vec<Attr> },
}

#[derive(Debug, Clone, Serialize)]
pub struct MemoryEntry {
    pub name: Ident,
    pub shape: MemoryShape,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub enum OutputDecl {
    Json(TypeExpr),
    /// `output tagged T`: `<field>...</field>` per field of the object type `T`.
    Tagged(TypeExpr),
    Text,
    Code(Option<String>),
}

#[derive(Debug, Clone, Serialize)]
pub struct RoleDecl {
    pub name: Ident,
    pub kind: Ident,
    pub attrs: Vec<Attr>,
    pub output: Option<(OutputDecl, Span)>,
    pub updates: Vec<UpdateStmt>,
    pub artifacts: Vec<ArtifactDecl>,
    pub span: Span,
}

impl RoleDecl {
    /// A role with nothing in its body yet.
    pub fn new(name: Ident, kind: Ident, span: Span) -> Self {
        RoleDecl {
            name,
            kind,
            attrs: Vec::new(),
            output: None,
            updates: Vec::new(),
            artifacts: Vec::new(),
            span,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub enum UpdateStmt {
    Set {
        target: Ident,
        value: Expr,
        span: Span,
    },
    Call {
        target: Ident,
        op: Ident,
        args: Vec<Expr>,
        span: Span,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct ArtifactDecl {
    pub name: String,
    pub name_span: Span,
    /// `+=`: append a line instead of writing the file.
    pub append: bool,
    pub value: Expr,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExitDecl {
    pub name: Ident,
    pub attrs: Vec<Attr>,
    pub condition: Option<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub enum RouteTarget {
    Role(Ident),
    Parallel {
        branches: Vec<Ident>,
        join: Ident,
    },
    Map {
        worker: Ident,
        over: Expr,
        join: Ident,
    },
}

#[derive(Debug, Clone, Serialize)]
pub enum Condition {
    Always,
    When(Expr),
    Otherwise(Span),
}

#[derive(Debug, Clone, Serialize)]
pub struct RouteDecl {
    /// `None` is the `start` node.
    pub from: Option<Ident>,
    pub from_span: Span,
    pub target: RouteTarget,
    pub condition: Condition,
    pub max: Option<(u64, Span)>,
    pub backtrack: bool,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub struct TestDecl {
    pub name: String,
    pub inputs: Vec<(Ident, Expr)>,
    pub replies: Vec<TestReply>,
    pub expectations: Vec<Expectation>,
    pub attrs: Vec<Attr>,
    pub span: Span,
}

impl TestDecl {
    /// A test with nothing in its body yet.
    pub fn new(name: String, span: Span) -> Self {
        TestDecl {
            name,
            inputs: Vec::new(),
            replies: Vec::new(),
            expectations: Vec::new(),
            attrs: Vec::new(),
            span,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TestReply {
    pub role: Ident,
    pub visit: Option<u64>,
    pub text: String,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize)]
pub enum Expectation {
    Exit(Ident),
    Path(Vec<Ident>, Span),
    Artifact {
        name: String,
        contains: Option<String>,
        span: Span,
    },
    Holds(Expr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    /// `a ?? b`: `a` unless it is null, then `b`.
    Coalesce,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Coalesce => "??",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum UnOp {
    Not,
    Neg,
}

#[derive(Debug, Clone, Serialize)]
pub enum ExprKind {
    String(String),
    Number(f64),
    Bool(bool),
    Null,
    List(Vec<Expr>),
    Map(Vec<(Ident, Expr)>),
    /// `root.field.field`
    Path(Vec<Ident>),
    Call(Ident, Vec<Expr>),
    /// Fields of a computed value: `first(x).title`.
    Get(Box<Expr>, Vec<Ident>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Serialize)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}
