//! Everything a run needs to continue after a crash: the checkpoint (`state.json`).

use std::collections::{BTreeMap, BTreeSet};

use petgraph::graph::NodeIndex;
use rondo_provider::{Spend, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::LlmResponse;
use super::memory::MemoryValue;
use crate::compile::Workflow;

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
    pub record: Option<LlmResponse>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub llm_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub tool_calls: u64,
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

    /// `round`: how many times the workflow's round role has completed (0 in the first
    /// round); without a round role, the number of completed steps.
    pub fn round(&self, workflow: &Workflow) -> u64 {
        match workflow.round_role {
            Some(r) => self.visits[r.index()],
            None => self.step,
        }
    }
}
