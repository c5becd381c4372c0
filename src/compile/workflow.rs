//! The compiled workflow: a petgraph graph whose every reference is an index. The
//! interpreter works from this alone and never sees the syntax tree.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::types::Type;
use crate::source::Span;

pub type MemoryId = usize;
pub type ToolId = usize;
pub type ProviderId = usize;
pub type EnvId = usize;
pub type RouteId = usize;
pub type InputId = usize;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workflow {
    pub name: String,
    pub description: String,
    pub path: PathBuf,
    /// SHA-256 of the source text.
    pub source_hash: String,
    /// Folder that relative paths of the file are resolved against.
    pub dir: PathBuf,
    pub prompts_dir: PathBuf,
    pub inputs: Vec<Input>,
    pub memory: Vec<MemorySlot>,
    pub providers: Vec<Provider>,
    pub default_provider: ProviderId,
    /// An environment variable that, when set and not empty, names the default profile
    /// instead (`provider_env = "LLM_PROVIDER"`); read when a run starts.
    #[serde(default)]
    pub default_provider_env: Option<String>,
    /// `secret_env = ["DB_PASSWORD"]`: variables redacted from everything the run records,
    /// beside the keys of the profiles and the names that look secret.
    #[serde(default)]
    pub secret_env: Vec<String>,
    pub tools: Vec<Tool>,
    pub environments: Vec<EnvSpec>,
    pub graph: DiGraph<Node, Edge>,
    pub start: NodeIndex,
    pub routes: Vec<Route>,
    /// Routes leaving each node, in the order they are tried (indexed by node index).
    pub outgoing: Vec<Vec<RouteId>>,
    /// Exits with a `when` condition, checked after every step.
    pub exit_guards: Vec<(NodeIndex, Expr)>,
    /// Workflow-level artifacts, rewritten after every step.
    pub artifacts: Vec<Artifact>,
    pub limits: Limits,
    pub round_role: Option<NodeIndex>,
    /// `finally = ROLE`: a builtin role applied once when the run ends, whatever the exit
    /// (built-in ones included, `interrupted` aside), with `ended` set.
    pub finally: Option<NodeIndex>,
    /// `durable = [...]`: memories that carry over from one run to the next made in the
    /// same `--workspace` folder.
    pub durable: Vec<MemoryId>,
    /// Default replies for the scripted provider (`script = "..."` in the header).
    pub script: Option<PathBuf>,
    /// `answer = EXPR`: what a run answers (`rondo eval`); without it, the output of the
    /// last role run.
    #[serde(default)]
    pub answer: Option<Expr>,
    pub tests: Vec<TestCase>,
    /// `budget = "$2.00"`: `check` fails when the proven worst-case cost of a run is higher.
    #[serde(default)]
    pub budget: Option<(f64, Span)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    pub ty: Type,
    pub default: Option<Value>,
    /// Artifacts are written in the folder it names (see [`Artifact::root`]).
    #[serde(default)]
    pub artifact_root: bool,
    /// `= env("VAR", default)`: when the input is not given, `VAR`'s value (set and not
    /// empty) is taken as if given with `--input`.
    #[serde(default)]
    pub env: Option<String>,
    /// Declared `path` (a string): a file or folder of the machine running rondo, resolved
    /// against the folder rondo was started in and shown to tools read-only.
    #[serde(default)]
    pub path: bool,
    /// The declaration, for what `check` says about the input.
    #[serde(default)]
    pub span: Span,
    /// `limits { max_bytes = { NAME: ... }, max_len = { NAME: ... } }`: a run given more
    /// does not start.
    #[serde(default, skip_serializing_if = "SizeBound::is_none")]
    pub bound: SizeBound,
}

/// A declared size bound (issue 27): the most bytes of JSON a value holds (for a
/// whiteboard, code context or history: what a template sees of it), and for a list the
/// most items. The run holds it (see `docs/memory.md`), so `check --cost` can count on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeBound {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<u64>,
    /// How deep it nests (a scalar 0, `[1]` 1): what bounds a pretty `json_encode` of `any`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
}

impl SizeBound {
    pub fn is_none(&self) -> bool {
        self.max_bytes.is_none() && self.max_len.is_none() && self.max_depth.is_none()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemorySlot {
    pub name: String,
    pub kind: MemoryKind,
    pub span: Span,
    /// Its own `max_bytes`/`max_len` (in its block, or in `limits` for a value memory).
    #[serde(default, skip_serializing_if = "SizeBound::is_none")]
    pub bound: SizeBound,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemoryKind {
    Value {
        ty: Type,
        default: Value,
    },
    Whiteboard {
        sections: Vec<String>,
    },
    CodeContext {
        alpha: f64,
        beta: f64,
        gamma: f64,
        threshold: f64,
        root: Option<String>,
    },
    History,
    /// A chat: the typed message list llm roles can send whole (`conversation = NAME`).
    Conversation {
        /// Bounds; a step that would pass one ends the run at `limit`.
        max_messages: u64,
        max_bytes: u64,
    },
}

/// The bounds of a conversation that declares none.
pub const DEFAULT_CONVERSATION_MESSAGES: u64 = 200;
pub const DEFAULT_CONVERSATION_BYTES: u64 = 1 << 20;

impl MemoryKind {
    pub fn kind_name(&self) -> &'static str {
        match self {
            MemoryKind::Value { .. } => "value",
            MemoryKind::Whiteboard { .. } => "whiteboard",
            MemoryKind::CodeContext { .. } => "code_context",
            MemoryKind::History => "history",
            MemoryKind::Conversation { .. } => "conversation",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Limits {
    pub max_steps: Option<u64>,
    pub max_wall_time_ms: Option<u64>,
    /// `max_tokens` and `max_cost`, checked before every LLM attempt.
    #[serde(flatten)]
    pub budget: rondo_provider::Budget,
    /// `max_input_bytes`: the most JSON bytes one input may hold; a run given more does
    /// not start. A size bound for the proven worst-case cost (`check --cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_bytes: Option<(u64, Span)>,
    /// `max_memory_bytes`: the most JSON bytes a value memory may hold after an update;
    /// a step that would store more ends the run at `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_bytes: Option<(u64, Span)>,
}

/// A provider profile of the workflow: declared in the file, imported from YAML, or the
/// built-in `scripted`. The profile is the provider crate's own type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Provider {
    pub profile: rondo_provider::ProviderProfile,
    /// The declaration's name, or the line importing it.
    pub span: Span,
}

impl Provider {
    pub fn name(&self) -> &str {
        &self.profile.name
    }
}

/// A tool of the workflow: the environment crate's spec (the one tool model), and what the
/// workflow adds to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub spec: rondo_env::ToolSpec,
    /// The arguments' type: the `input { ... }` block, or the YAML spec's `input_schema`.
    pub input: Option<Type>,
    /// Arguments may carry fields `input` does not declare. A `tool` block's
    /// `extra_fields = "allow"`; a YAML spec whose `input_schema` does not say
    /// `additionalProperties: false`.
    #[serde(default)]
    pub allow_extra_fields: bool,
    /// The declaration's name, or the line importing it.
    pub span: Span,
}

impl Tool {
    pub fn name(&self) -> &str {
        &self.spec.tool_name
    }

    /// The arguments' JSON Schema, as prompts and providers are shown it.
    pub fn input_schema(&self) -> Option<Value> {
        self.input.as_ref().map(|ty| {
            if self.allow_extra_fields {
                ty.json_schema_open()
            } else {
                ty.json_schema()
            }
        })
    }

    /// Rondo's own check of a call's arguments, before the tool runs.
    pub fn check_args(&self, args: &Value) -> Result<(), String> {
        match &self.input {
            Some(ty) if self.allow_extra_fields => ty.validate(args),
            Some(ty) => ty.validate_closed(args),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnvSpec {
    pub name: String,
    pub kind: EnvKind,
    pub image: Option<String>,
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    pub network: Option<String>,
    /// Bytes.
    pub memory: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub tools: Vec<ToolId>,
    /// See [`super::mounts::parse_mount`].
    pub mounts: Vec<String>,
    /// Docker: each parallel or map branch gets its own container.
    pub per_branch: bool,
    /// Docker: `user[:group]` commands run as (default: the image's).
    pub user: Option<String>,
    /// Docker: a read-only root file system with a writable tmpfs `/tmp`.
    pub read_only_root: bool,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    Local,
    Docker,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "node", rename_all = "snake_case")]
pub enum NodeKind {
    Start,
    Role(Box<Role>),
    Exit(ExitSpec),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExitSpec {
    pub code: i32,
    pub builtin: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Role {
    pub kind: RoleKind,
    pub max_visits: Option<MaxVisits>,
    pub reads: Vec<MemoryId>,
    pub writes: Vec<MemoryId>,
    pub updates: Vec<Update>,
    pub artifacts: Vec<Artifact>,
    /// What `role.field` and `output` hold after the role ran.
    /// Shared: every tool role has the same (large) result type.
    pub output_type: Arc<Type>,
    /// The worker of a `map` route (set with the routes): asked at every step.
    #[serde(default)]
    pub map_worker: bool,
}

/// A role's bound on its visits: a number, or an `int` input of the run
/// (`max_visits = input.max_rounds`), so a loop bounded by an input is bounded by it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxVisits {
    Fixed(u64),
    Input(InputId),
}

impl MaxVisits {
    /// The bound in a run with these input values (validated at start: at least 1).
    pub fn in_run(self, inputs: &[Value]) -> u64 {
        match self {
            MaxVisits::Fixed(n) => n,
            MaxVisits::Input(id) => inputs.get(id).and_then(Value::as_u64).unwrap_or(0),
        }
    }

    /// The bound with the inputs' defaults: what `check` counts (`None`: no default).
    pub fn by_default(self, inputs: &[Input]) -> Option<u64> {
        match self {
            MaxVisits::Fixed(n) => Some(n),
            MaxVisits::Input(id) => inputs
                .get(id)
                .and_then(|i| i.default.as_ref())
                .and_then(Value::as_u64),
        }
    }

    /// As written: `5` or `input.max_rounds`.
    pub fn display(self, inputs: &[Input]) -> String {
        match self {
            MaxVisits::Fixed(n) => n.to_string(),
            MaxVisits::Input(id) => {
                format!("input.{}", inputs.get(id).map_or("?", |i| i.name.as_str()))
            }
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role_kind", rename_all = "snake_case")]
pub enum RoleKind {
    Llm(Box<LlmRole>),
    Tool(Box<ToolRole>),
    Builtin,
}

impl RoleKind {
    pub fn name(&self) -> &'static str {
        match self {
            RoleKind::Llm(_) => "llm",
            RoleKind::Tool(_) => "tool",
            RoleKind::Builtin => "builtin",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LlmRole {
    pub provider: ProviderId,
    /// The role names no provider: it calls the header's default, which `provider_env`
    /// may replace when a run starts.
    #[serde(default)]
    pub default_provider: bool,
    pub system: Option<PathBuf>,
    /// The user turn; a role with a `conversation` may have none.
    pub prompt: Option<PathBuf>,
    pub output: OutputFormat,
    pub retries: u64,
    /// Tools whose usage text the prompt shows.
    pub tools: Vec<ToolId>,
    /// The coercions a reply may get before it is rejected (`coerce = safe` by default).
    #[serde(default = "super::types::Coercion::safe")]
    pub coerce: Vec<super::types::Coercion>,
    /// The largest reply accepted, in bytes; a longer one is an invalid attempt.
    #[serde(default)]
    pub max_reply: Option<u64>,
    /// Few-shot demos (`rondo optimize` writes them), relative to the workflow file;
    /// a missing file is no demos.
    #[serde(default)]
    pub demos: Option<PathBuf>,
    /// `conversation = NAME`: the chat sent as the messages, which the role's turns extend.
    #[serde(default)]
    pub conversation: Option<MemoryId>,
    /// How the role's `tools` reach the model.
    #[serde(default)]
    pub mode: ToolMode,
}

/// `mode = json | native | auto` of an llm role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// The tools' usage is shown in the prompt; the reply is the declared output.
    #[default]
    Json,
    /// The tools' input schemas are sent in the provider's own form; the output is
    /// `{text, calls}`.
    Native,
    /// Native where the profile's protocol supports tool calling (every kind does).
    Auto,
}

impl ToolMode {
    /// Whether the role's output is `{text, calls}` (resolved at compile time: every
    /// protocol, the scripted provider included, takes native tools).
    pub fn native(self) -> bool {
        matches!(self, ToolMode::Native | ToolMode::Auto)
    }
}

/// At most this many tool calls of one reply are run; the rest get an error result.
pub const MAX_CALLS_PER_TURN: usize = 32;

/// A reply longer than this is an invalid attempt unless the role says otherwise.
pub const DEFAULT_MAX_REPLY: u64 = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum OutputFormat {
    /// `output json T`.
    Json {
        ty: Type,
    },
    /// `output tagged T`: one `<field>...</field>` per field of the object type `T`.
    Tagged {
        ty: Type,
    },
    Text,
    Code {
        language: Option<String>,
    },
}

impl OutputFormat {
    /// The declared type of a structured reply (`json` or `tagged`); a text or code
    /// reply has none.
    pub fn structured(&self) -> Option<&Type> {
        match self {
            OutputFormat::Json { ty } | OutputFormat::Tagged { ty } => Some(ty),
            OutputFormat::Text | OutputFormat::Code { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolRole {
    pub env: Option<EnvId>,
    pub action: ToolAction,
    pub timeout_ms: Option<u64>,
    /// Log file name template for the full output.
    pub log: Option<String>,
    pub show: Show,
    /// Where the `log` string and each `command` item are written, for `check`.
    #[serde(default)]
    pub log_span: Span,
    #[serde(default)]
    pub argv_spans: Vec<Span>,
    /// Bytes of output kept per stream (head and tail); the log gets everything.
    #[serde(default)]
    pub max_output: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ToolAction {
    /// A templated argv run as is.
    Command { argv: Vec<String> },
    /// A declared tool with argument expressions.
    Tool { tool: ToolId, args: Vec<Expr> },
    /// The tool named by an expression, among `choices`, with an arguments object.
    Choose {
        choices: Vec<ToolId>,
        call: Box<Expr>,
        /// The arguments, validated against the chosen tool's `input`.
        args: Option<Box<Expr>>,
        /// What the tool gets on its command line, when not the arguments themselves.
        argv: Option<Box<Expr>>,
    },
    /// Every tool call of a native llm reply (`calls = agent.calls`), in parallel, each
    /// validated against its tool's `input`; the results go to `conversation`.
    Calls {
        choices: Vec<ToolId>,
        calls: Box<Expr>,
        conversation: Option<MemoryId>,
    },
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "show", rename_all = "snake_case")]
pub enum Show {
    All,
    Status,
    Tail { lines: u64 },
    HeadTail { head: u64, tail: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Artifact {
    /// Written in the folder a `path` input names (`"{{ input.traces_dir }}/..."`), not in
    /// the workspace; `name` is then the part after that folder.
    #[serde(default)]
    pub root: Option<InputId>,
    pub name: String,
    /// Append one line per write (JSONL traces) instead of replacing the file.
    pub append: bool,
    pub value: Expr,
    pub span: Span,
    /// The name's string literal.
    #[serde(default)]
    pub name_span: Span,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "update", rename_all = "snake_case")]
pub enum Update {
    Set {
        memory: MemoryId,
        value: Expr,
        span: Span,
        /// The value fits the memory only through a part typed `any` (see [`Unchecked`]).
        #[serde(default, skip_serializing_if = "Unchecked::is_no")]
        unchecked: Unchecked,
    },
    Op {
        memory: MemoryId,
        op: MemoryOp,
        args: Vec<Expr>,
        span: Span,
        #[serde(default, skip_serializing_if = "Unchecked::is_no")]
        unchecked: Unchecked,
    },
}

/// Whether `check` proved an operation cannot fail on its values, or accepted it because
/// a value is typed `any` (a reply's `map[any]` field, a tool's `data`): then a value of
/// the wrong kind is the fault of what produced it, not of the engine, and the run treats
/// it as an invalid value (the reply asked again, or the `invalid_output` exit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unchecked {
    #[default]
    No,
    Yes,
}

impl Unchecked {
    pub fn is_no(&self) -> bool {
        *self == Unchecked::No
    }

    pub fn from(yes: bool) -> Self {
        if yes { Unchecked::Yes } else { Unchecked::No }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryOp {
    Append,
    Extend,
    Truncate,
    Patch,
    Put,
    Clear,
    Apply,
    Push,
    Observe,
    Reflect,
    Access,
    Cite,
    System,
    User,
    Assistant,
}

impl MemoryOp {
    pub fn name(self) -> &'static str {
        match self {
            MemoryOp::Append => "append",
            MemoryOp::Extend => "extend",
            MemoryOp::Truncate => "truncate",
            MemoryOp::Patch => "patch",
            MemoryOp::Put => "put",
            MemoryOp::Clear => "clear",
            MemoryOp::Apply => "apply",
            MemoryOp::Push => "push",
            MemoryOp::Observe => "observe",
            MemoryOp::Reflect => "reflect",
            MemoryOp::Access => "access",
            MemoryOp::Cite => "cite",
            MemoryOp::System => "system",
            MemoryOp::User => "user",
            MemoryOp::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Route {
    pub from: NodeIndex,
    pub condition: Condition,
    pub target: RouteTarget,
    /// How many times the route may be taken in a run.
    pub max: Option<u64>,
    pub backtrack: bool,
    /// Taken only when the `from` llm role's reply stayed invalid after its retries
    /// (`a -> b when a.invalid`); every other route of the role is taken only on a valid reply.
    #[serde(default)]
    pub on_invalid: bool,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "when", rename_all = "snake_case")]
pub enum Condition {
    Always,
    When { expr: Expr },
    Otherwise,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "target", rename_all = "snake_case")]
pub enum RouteTarget {
    Node {
        node: NodeIndex,
    },
    Parallel {
        branches: Vec<NodeIndex>,
        join: NodeIndex,
    },
    Map {
        worker: NodeIndex,
        over: Expr,
        join: NodeIndex,
    },
}

impl RouteTarget {
    /// The nodes a route leads to first.
    pub fn first_nodes(&self) -> Vec<NodeIndex> {
        match self {
            RouteTarget::Node { node } => vec![*node],
            RouteTarget::Parallel { branches, .. } => branches.clone(),
            RouteTarget::Map { worker, .. } => vec![*worker],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    Normal,
    Backtrack,
    Fork,
    Join,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Edge {
    pub route: RouteId,
    pub kind: EdgeKind,
}

/// A regular expression compiled once, when the workflow is; stored as its text.
#[derive(Debug, Clone)]
pub struct Pattern(regex::Regex);

impl Pattern {
    pub fn new(text: &str) -> Result<Self, regex::Error> {
        regex::Regex::new(text).map(Pattern)
    }

    pub fn is_match(&self, text: &str) -> bool {
        self.0.is_match(text)
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Serialize for Pattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Pattern::new(&text).map_err(serde::de::Error::custom)
    }
}

/// A resolved expression.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
    /// The source text, for event logs (`the condition that held`).
    pub text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "expr", rename_all = "snake_case")]
pub enum ExprKind {
    Literal {
        value: Value,
    },
    List {
        items: Vec<Expr>,
    },
    Map {
        entries: Vec<(String, Expr)>,
    },
    Path {
        root: Root,
        fields: Vec<String>,
    },
    Call {
        func: Func,
        args: Vec<Expr>,
        /// `len` of a value typed `any`.
        #[serde(default, skip_serializing_if = "Unchecked::is_no")]
        unchecked: Unchecked,
    },
    Get {
        base: Box<Expr>,
        fields: Vec<String>,
    },
    Not {
        operand: Box<Expr>,
    },
    Neg {
        operand: Box<Expr>,
        #[serde(default, skip_serializing_if = "Unchecked::is_no")]
        unchecked: Unchecked,
    },
    Binary {
        op: crate::syntax::BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        /// `+` or `-` with an operand typed `any`.
        #[serde(default, skip_serializing_if = "Unchecked::is_no")]
        unchecked: Unchecked,
    },
    /// `matches(text, "re")`: the pattern compiled once, with the workflow.
    Matches {
        text: Box<Expr>,
        pattern: Pattern,
    },
    /// `visits(role)`: how many times the role at `node` has run.
    Visits {
        node: NodeIndex,
    },
    /// `used(tool)`: whether the run has called the tool.
    Used {
        tool: ToolId,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "root", rename_all = "snake_case")]
pub enum Root {
    Input {
        id: InputId,
    },
    Memory {
        id: MemoryId,
    },
    Role {
        node: NodeIndex,
    },
    Output,
    /// The rendered user prompt of the current llm role.
    Prompt,
    Item,
    Round,
    Step,
    Visit,
    RunId,
    /// How the run ended (`{exit, code, reason}`), null while it goes on.
    Ended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Func {
    Len,
    Contains,
    Matches,
    Visits,
    Used,
    Exists,
    First,
    Last,
    At,
    Json,
    Lower,
    Now,
    If,
    All,
    Without,
    ShellReads,
    RepoPath,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestCase {
    pub name: String,
    pub inputs: Vec<(InputId, Value)>,
    /// Replies per role node; `None` visit = every visit without its own reply.
    pub replies: Vec<(NodeIndex, Option<u64>, String)>,
    pub expectations: Vec<TestExpectation>,
    pub span: Span,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "expect", rename_all = "snake_case")]
pub enum TestExpectation {
    Exit {
        node: NodeIndex,
        span: Span,
    },
    Path {
        nodes: Vec<NodeIndex>,
        span: Span,
    },
    Artifact {
        name: String,
        contains: Option<String>,
        span: Span,
    },
    Holds {
        expr: Expr,
    },
}

impl Workflow {
    pub fn node(&self, index: NodeIndex) -> &Node {
        &self.graph[index]
    }

    pub fn role(&self, index: NodeIndex) -> Option<&Role> {
        match &self.graph[index].kind {
            NodeKind::Role(role) => Some(role),
            _ => None,
        }
    }

    /// An llm role whose output is JSON: it has the `invalid` / `invalid_reply` pseudo-fields.
    pub fn is_json_llm(&self, node: NodeIndex) -> bool {
        matches!(
            self.role(node).map(|r| &r.kind),
            Some(RoleKind::Llm(l)) if l.output.structured().is_some()
        )
    }

    /// The worker of a `map` route: read by its name, it is the list of its branches'
    /// outputs (each branch adds its own as it is applied, a join sees them all).
    pub fn is_map_worker(&self, node: NodeIndex) -> bool {
        self.role(node).is_some_and(|r| r.map_worker)
    }

    /// Every map worker at once.
    pub fn map_workers(&self) -> std::collections::HashSet<NodeIndex> {
        self.graph
            .node_indices()
            .filter(|&n| self.is_map_worker(n))
            .collect()
    }

    /// The type of role `node` read by its name: its output, or for a map worker the
    /// list of its outputs.
    pub fn read_type(&self, node: NodeIndex) -> Option<Type> {
        let role = self.role(node)?;
        Some(if self.is_map_worker(node) {
            Type::list((*role.output_type).clone())
        } else {
            (*role.output_type).clone()
        })
    }

    pub fn roles(&self) -> impl Iterator<Item = (NodeIndex, &Role)> {
        self.graph
            .node_indices()
            .filter_map(|i| self.role(i).map(|r| (i, r)))
    }

    pub fn is_exit(&self, index: NodeIndex) -> bool {
        matches!(self.graph[index].kind, NodeKind::Exit(_))
    }

    pub fn provider_id(&self, name: &str) -> Option<ProviderId> {
        self.providers.iter().position(|p| p.name() == name)
    }

    pub fn find_node(&self, name: &str) -> Option<NodeIndex> {
        self.graph
            .node_indices()
            .find(|&i| self.graph[i].name == name)
    }
}
