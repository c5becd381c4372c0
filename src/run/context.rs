//! What templates see: prompts (memory views, tools), and artifact names, log names and
//! command arguments (plain values).

use petgraph::graph::NodeIndex;
use serde_json::{Value, json};

use super::Interpreter;
use super::eval;
use super::state::RunState;
use crate::compile::RoleKind;

impl<'w> Interpreter<'w> {
    pub(super) fn template_context(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
        last_error: Option<&str>,
    ) -> tera::Context {
        let mut ctx = self.shared_context(state, node, visit, item);
        let role = self.workflow.role(node);
        let mut memory = serde_json::Map::new();
        for &id in role.map(|r| r.reads.as_slice()).unwrap_or(&[]) {
            let slot = &self.workflow.memory[id];
            memory.insert(
                slot.name.clone(),
                state.memory[id].view(slot, self.workspace.root()),
            );
        }
        ctx.insert("memory", &memory);
        let mut tools = serde_json::Map::new();
        let tool_ids: Vec<usize> = match role.map(|r| &r.kind) {
            Some(RoleKind::Llm(l)) => l.tools.clone(),
            _ => Vec::new(),
        };
        for id in tool_ids {
            let t = &self.workflow.tools[id];
            tools.insert(t.name().to_string(), json!({"name": t.name(), "usage": t.spec.usage, "executable": t.spec.executable, "input_schema": t.input_schema()}));
        }
        ctx.insert("tools", &tools);
        ctx.insert("step", &(state.step + 1));
        // Cut, so what a prompt renders of it has a bound (`rondo check --cost`).
        let max = crate::check::cost::MAX_LAST_ERROR as usize;
        let last_error = last_error.map(|e| match e.len() > max {
            true => format!("{}...", &e[..e.floor_char_boundary(max)]),
            false => e.to_string(),
        });
        ctx.insert("last_error", &last_error);
        let none = Value::Array(Vec::new());
        ctx.insert("demos", self.demos.get(&node.index()).unwrap_or(&none));
        ctx
    }

    /// Variables for artifact names, log names and command arguments: inputs, plain
    /// memory values, role outputs, `item` and the counters.
    pub(crate) fn name_context(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
    ) -> tera::Context {
        let mut ctx = self.shared_context(state, node, visit, item);
        // During `apply` the step is already counted.
        ctx.insert("step", &state.step);
        let memory: serde_json::Map<String, Value> = self
            .workflow
            .memory
            .iter()
            .zip(&state.memory)
            .filter_map(|(slot, v)| Some((slot.name.clone(), v.plain()?.clone())))
            .collect();
        ctx.insert("memory", &memory);
        ctx
    }

    /// What every template sees: counters, inputs, `item` (in a map branch), and each role's
    /// latest output.
    fn shared_context(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
    ) -> tera::Context {
        let mut ctx = tera::Context::new();
        ctx.insert("round", &state.round(self.workflow));
        ctx.insert("visit", &visit);
        ctx.insert("run_id", &state.run_id);
        ctx.insert("role", &self.workflow.node(node).name);
        // Only a map branch has an item: elsewhere `item` is not defined, so a partial
        // shared with a map worker can ask `{% if item is defined %}`.
        if let Some(item) = item {
            ctx.insert("item", item);
        }
        ctx.insert("input", &state.inputs_by_name(self.workflow));
        for (index, _) in self.workflow.roles() {
            let mut value = state
                .outputs
                .get(&index.index())
                .cloned()
                .unwrap_or(Value::Null);
            if eval::is_invalid_record(&value) && self.workflow.is_json_llm(index) {
                value["invalid_reply"] = eval::invalid_reply(&value);
            }
            ctx.insert(self.workflow.node(index).name.as_str(), &value);
        }
        ctx
    }
}
