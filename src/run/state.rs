//! Everything a run needs to continue after a crash: the checkpoint (`state.json` and the
//! journal's `checkpoint` records after it).

use std::collections::{BTreeMap, BTreeSet};

use petgraph::graph::NodeIndex;
use rondo_provider::{Spend, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::LlmResponse;
pub use super::events::Totals;
use super::memory::MemoryValue;
use crate::compile::types::Type;
use crate::compile::{MemoryKind, RouteTarget, Workflow};

/// The largest count a checkpoint may hold (steps, visits, tokens, milliseconds): far
/// beyond any run, and low enough that the engine's additions cannot overflow.
pub const MAX_COUNT: u64 = 1 << 53;

/// Key prefix of an append-mode artifact in the checkpoint's `file_lengths`.
pub const ARTIFACT_KEY: &str = "workspace/";
/// `input/<input id>/<name>`: the length of an artifact in the folder a `path` input names.
pub const ROOT_KEY: &str = "input/";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    /// Ended at a named exit (or `limit` / `error`).
    Finished,
    Interrupted,
    /// Ended at `error` (a provider or tool failure, an invalid reply); resumable.
    Failed,
    /// The process died or the run failed to checkpoint; `rondo resume` continues it.
    Crashed,
}

/// Where the run stands between steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "at", rename_all = "snake_case")]
pub enum Position {
    /// The next node to run.
    Node { node: NodeIndex },
    /// Inside a parallel or map route: the branch results already finished.
    Fork {
        route: usize,
        done: BTreeMap<usize, BranchResult>,
    },
    /// The run ended at this exit.
    Exited { node: NodeIndex, reason: String },
}

/// A finished branch of a fork whose memory updates are not applied yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BranchResult {
    pub node: NodeIndex,
    pub output: Value,
    pub item: Option<Value>,
    pub tool: Option<usize>,
    pub prompt: Option<String>,
    pub record: Option<Box<LlmResponse>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub run_id: String,
    /// Completed steps (role executions).
    pub step: u64,
    pub position: Position,
    /// Visits per node index.
    pub visits: Vec<u64>,
    /// Times each route was taken.
    pub route_taken: Vec<u64>,
    /// Latest output of each role, by node index.
    pub outputs: BTreeMap<usize, Value>,
    /// Memory slots in declaration order. Read back by [`RunState::restore`], which
    /// knows their kinds.
    #[serde(skip_deserializing)]
    pub memory: Vec<MemoryValue>,
    pub inputs: Vec<Value>,
    /// Names of the roles run, in order.
    pub path: Vec<String>,
    pub tools_used: BTreeSet<usize>,
    pub totals: Totals,
    pub status: Status,
    /// Wall time spent before the current process took over (for resumed runs).
    pub elapsed_ms: u64,
    /// Length of `events.jsonl` and of append-mode artifacts at this checkpoint: a
    /// resume cuts them back, so a step interrupted half-way leaves no trace.
    #[serde(default)]
    pub file_lengths: BTreeMap<String, u64>,
    /// How the run ended (`ended` in expressions); set when it stops, cleared on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
}

/// An ended run's exit, its code and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    pub exit: String,
    pub code: i32,
    pub reason: String,
}

impl Totals {
    /// What the LLM calls spent, as the budget checks take it.
    pub fn spend(&self) -> Spend {
        Spend {
            calls: self.llm_calls,
            usage: Usage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
            },
            cost: self.cost,
        }
    }

    pub fn add(&mut self, spend: Spend) {
        self.llm_calls += spend.calls;
        self.input_tokens += spend.usage.input_tokens;
        self.output_tokens += spend.usage.output_tokens;
        self.cost += spend.cost;
    }
}

impl RunState {
    /// The run's inputs by name, as templates and `run.json` show them.
    pub fn inputs_by_name(&self, workflow: &Workflow) -> serde_json::Map<String, Value> {
        workflow
            .inputs
            .iter()
            .zip(&self.inputs)
            .map(|(i, v)| (i.name.clone(), v.clone()))
            .collect()
    }

    /// A run's state before its first step; `Err` when a memory slot cannot be made
    /// (a code context's parameters out of range, whiteboard sections that clash).
    pub fn new(workflow: &Workflow, run_id: String, inputs: Vec<Value>) -> Result<Self, String> {
        let memory = workflow
            .memory
            .iter()
            .map(|slot| {
                MemoryValue::initial(&slot.kind).map_err(|e| format!("memory `{}`: {e}", slot.name))
            })
            .collect::<Result<_, _>>()?;
        Ok(RunState {
            run_id,
            step: 0,
            position: Position::Node {
                node: workflow.start,
            },
            visits: vec![0; workflow.graph.node_count()],
            route_taken: vec![0; workflow.routes.len()],
            outputs: BTreeMap::new(),
            memory,
            inputs,
            path: Vec::new(),
            tools_used: BTreeSet::new(),
            totals: Totals::default(),
            status: Status::Running,
            elapsed_ms: 0,
            file_lengths: BTreeMap::new(),
            ended: None,
        })
    }

    /// A checkpoint (`state.json` with the journal applied) read back for `workflow`,
    /// each memory slot typed by its declaration.
    pub fn restore(mut stored: Value, workflow: &Workflow) -> Result<Self, String> {
        let memory = match stored.get_mut("memory").map(Value::take) {
            Some(Value::Array(values)) if values.len() == workflow.memory.len() => values,
            _ => return Err("its memory does not match the workflow's".into()),
        };
        let mut state: RunState = serde_json::from_value(stored).map_err(|e| e.to_string())?;
        state.memory = workflow
            .memory
            .iter()
            .zip(memory)
            .map(|(slot, v)| {
                MemoryValue::restore(&slot.kind, v)
                    .map_err(|e| format!("memory `{}`: {e}", slot.name))
            })
            .collect::<Result<_, _>>()?;
        Ok(state)
    }

    /// Checks a restored checkpoint against `workflow` before a resume writes anything:
    /// every node, route, tool and input it names exists, each memory slot and input has
    /// its declared shape, and no count is out of bounds. A hand-edited or damaged
    /// checkpoint is an error here, never a panic later.
    pub fn validate(&self, workflow: &Workflow) -> Result<(), String> {
        self.validate_position(workflow)?;
        self.validate_counts(workflow)?;
        self.validate_names(workflow)?;
        self.validate_values(workflow)?;
        self.validate_file_lengths(workflow)
    }

    /// The position is a node of the workflow, an exit, or a fork route's branches.
    fn validate_position(&self, workflow: &Workflow) -> Result<(), String> {
        let nodes = workflow.graph.node_count();
        let node = |n: NodeIndex, what: &str| {
            if n.index() < nodes {
                Ok(())
            } else {
                Err(format!(
                    "{what} is node {}, but the workflow has {nodes}",
                    n.index()
                ))
            }
        };
        match &self.position {
            Position::Node { node: n } => node(*n, "its position")?,
            Position::Exited { node: n, .. } => {
                node(*n, "its exit")?;
                if !workflow.is_exit(*n) {
                    return Err(format!("its exit, node {}, is not an exit", n.index()));
                }
            }
            Position::Fork { route, done } => {
                let role_of = |i: usize| match workflow.routes.get(*route).map(|r| &r.target) {
                    Some(RouteTarget::Parallel { branches, .. }) => Ok(branches.get(i).copied()),
                    Some(RouteTarget::Map { worker, .. }) => Ok(Some(*worker)),
                    _ => Err(format!(
                        "its position is in route {route}, which does not fork"
                    )),
                };
                role_of(0)?;
                for (&i, branch) in done {
                    if role_of(i)? != Some(branch.node) {
                        return Err(format!("branch {i} of route {route} is not its role"));
                    }
                    if branch.tool.is_some_and(|t| t >= workflow.tools.len()) {
                        return Err(format!("branch {i} of route {route} names no tool"));
                    }
                }
            }
        }
        Ok(())
    }

    /// One visit count per node and one count per route, every count and the cost in range.
    fn validate_counts(&self, workflow: &Workflow) -> Result<(), String> {
        let nodes = workflow.graph.node_count();
        if self.visits.len() != nodes {
            return Err(format!(
                "it counts the visits of {} node(s), the workflow has {nodes}",
                self.visits.len()
            ));
        }
        if self.route_taken.len() != workflow.routes.len() {
            return Err(format!(
                "it counts {} route(s), the workflow has {}",
                self.route_taken.len(),
                workflow.routes.len()
            ));
        }
        let counts = [
            ("step", self.step),
            ("elapsed_ms", self.elapsed_ms),
            ("llm_calls", self.totals.llm_calls),
            ("input_tokens", self.totals.input_tokens),
            ("output_tokens", self.totals.output_tokens),
            ("tool_calls", self.totals.tool_calls),
        ];
        let lists = self
            .visits
            .iter()
            .chain(&self.route_taken)
            .map(|&n| ("a visit or route count", n));
        if let Some((what, n)) = counts
            .into_iter()
            .chain(lists)
            .find(|(_, n)| *n > MAX_COUNT)
        {
            return Err(format!("{what} is {n}, more than {MAX_COUNT}"));
        }
        if !(0.0..=MAX_COUNT as f64).contains(&self.totals.cost) {
            return Err(format!("its cost {} is out of range", self.totals.cost));
        }
        Ok(())
    }

    /// Outputs, used tools and the path name nodes, tools and roles of the workflow.
    fn validate_names(&self, workflow: &Workflow) -> Result<(), String> {
        let nodes = workflow.graph.node_count();
        if let Some(&k) = self.outputs.keys().find(|&&k| k >= nodes) {
            return Err(format!(
                "it holds an output of node {k}, but the workflow has {nodes}"
            ));
        }
        if let Some(&t) = self.tools_used.iter().find(|&&t| t >= workflow.tools.len()) {
            return Err(format!(
                "it names tool {t}, but the workflow has {}",
                workflow.tools.len()
            ));
        }
        let roles: BTreeSet<&str> = workflow
            .roles()
            .map(|(n, _)| workflow.node(n).name.as_str())
            .collect();
        if let Some(name) = self.path.iter().find(|name| !roles.contains(name.as_str())) {
            return Err(format!(
                "its path names `{name}`, which is not a role of the workflow"
            ));
        }
        Ok(())
    }

    /// Each input and plain memory slot has its declared shape.
    fn validate_values(&self, workflow: &Workflow) -> Result<(), String> {
        if self.inputs.len() != workflow.inputs.len() {
            return Err(format!(
                "it holds {} inputs, the workflow declares {}",
                self.inputs.len(),
                workflow.inputs.len()
            ));
        }
        for (input, value) in workflow.inputs.iter().zip(&self.inputs) {
            if !has_shape(&input.ty, value) {
                return Err(format!(
                    "input `{}` is not a {}",
                    input.name,
                    input.ty.display()
                ));
            }
        }
        for (slot, value) in workflow.memory.iter().zip(&self.memory) {
            if let (MemoryKind::Value { ty, .. }, MemoryValue::Plain(v)) = (&slot.kind, value)
                && !has_shape(ty, v)
            {
                return Err(format!("memory `{}` is not a {}", slot.name, ty.display()));
            }
        }
        Ok(())
    }

    /// Recorded file lengths are of the run's own files: its events, artifacts, roots.
    fn validate_file_lengths(&self, workflow: &Workflow) -> Result<(), String> {
        for key in self.file_lengths.keys() {
            let known = key == "events.jsonl"
                || key
                    .strip_prefix(ARTIFACT_KEY)
                    .is_some_and(|name| rondo_workspace::relative_name(name).is_ok())
                || key
                    .strip_prefix(ROOT_KEY)
                    .and_then(|k| k.split_once('/'))
                    .and_then(|(id, _)| id.parse::<usize>().ok())
                    .and_then(|id| workflow.inputs.get(id))
                    .is_some_and(|input| input.artifact_root);
            if !known {
                return Err(format!(
                    "it records the length of {key:?}, which is no file of the run"
                ));
            }
        }
        Ok(())
    }

    /// `round`: how many times the workflow's round role has completed (0 in the first
    /// round); without a round role, the number of completed steps.
    pub fn round(&self, workflow: &Workflow) -> u64 {
        match workflow.round_role {
            Some(r) => self.visits[r.index()],
            None => self.step,
        }
    }
}

/// Whether `value` is of the kind of JSON value `ty` is (a list, a map, a string, ...):
/// what a step could have left in a slot. Items and fields are not checked, since
/// updates such as `append` and `patch` do not check them either; null fits any type.
fn has_shape(ty: &Type, value: &Value) -> bool {
    match (ty.strip_optional(), value) {
        (_, Value::Null) | (Type::Any, _) => true,
        (Type::String | Type::Literal { .. }, Value::String(_)) => true,
        (Type::Int | Type::Float, Value::Number(_)) => true,
        (Type::Bool, Value::Bool(_)) => true,
        (Type::List { .. }, Value::Array(_)) => true,
        (Type::Map { .. } | Type::Object { .. }, Value::Object(_)) => true,
        (Type::Union { members }, v) => members.iter().any(|m| has_shape(m, v)),
        _ => false,
    }
}
