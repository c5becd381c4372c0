//! Applying a role's result to the run state: visits, output, events, memory updates.

use petgraph::graph::NodeIndex;
use serde_json::{Value, json};

use super::eval;
use super::memory;
use super::state::RunState;
use super::{Interpreter, RoleRun, StepError};
use crate::compile::{MemoryKind, RoleKind, Update};

impl<'w> Interpreter<'w> {
    /// Stores a role's result: visits, output, events, updates, artifacts.
    pub(super) fn apply(
        &mut self,
        state: &mut RunState,
        node: NodeIndex,
        run: RoleRun,
        item: Option<&Value>,
    ) -> Result<(), StepError> {
        let workflow = self.workflow;
        let role = workflow
            .role(node)
            .ok_or_else(|| StepError::Failed("not a role".into()))?;
        let name = workflow.node(node).name.clone();
        let mut run = run;
        self.redactor.redact_json(&mut run.output);
        if let Some(record) = &mut run.record {
            self.redactor.redact_json(record);
        }
        if let Some(prompt) = &mut run.prompt {
            *prompt = self.redactor.redact(prompt).into_owned();
        }
        state.visits[node.index()] += 1;
        state.step += 1;
        state.path.push(name.clone());
        let visit = state.visits[node.index()];
        self.flush_buffered_events();
        self.settle(state);
        let invalid = eval::is_json_llm(workflow, node) && eval::is_invalid_record(&run.output);
        if self.wants_events() {
            self.event(
                "role_start",
                json!({"role": name, "kind": role.kind.name(), "visit": visit, "step": state.step}),
            );
        }
        match &role.kind {
            RoleKind::Llm(_) => {
                if let Some(record) = run.record {
                    let how = record.get("parsed").cloned();
                    let coercions = record.get("coercions").cloned();
                    self.event("llm_response", record);
                    self.event(
                        "parsed_output",
                        json!({"role": name, "visit": visit, "how": how, "coercions": coercions, "output": run.output}),
                    );
                } else if invalid {
                    self.event(
                        "invalid_outcome",
                        json!({"role": name, "visit": visit, "attempts": run.output["attempts"], "error": run.output["error"]}),
                    );
                }
            }
            RoleKind::Tool(_) => {
                state.totals.tool_calls += 1;
                if let Some(tool) = run.tool {
                    state.tools_used.insert(tool);
                }
                self.event(
                    "tool_call",
                    json!({"role": name, "visit": visit, "result": run.output}),
                );
            }
            RoleKind::Builtin => {}
        }
        state.outputs.insert(node.index(), run.output.clone());
        // An invalid outcome is only routed: the role's updates and artifacts expect a valid output.
        let (updates, artifacts): (&[Update], &[crate::compile::Artifact]) = if invalid {
            (&[], &[])
        } else {
            (&role.updates, &role.artifacts)
        };
        for update in updates {
            let (memory_id, op, args) = match update {
                Update::Set { memory, value, .. } => {
                    let v = self
                        .env(state, Some(node), Some(&run.output), item)
                        .eval(value)
                        .map_err(|e| {
                            StepError::Failed(format!(
                                "role `{name}`: update of `{}`: {e}",
                                workflow.memory[*memory].name
                            ))
                        })?;
                    (*memory, None, vec![v])
                }
                Update::Op {
                    memory, op, args, ..
                } => {
                    let env = self.env(state, Some(node), Some(&run.output), item);
                    let values = args
                        .iter()
                        .map(|a| env.eval(a))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| {
                            StepError::Failed(format!(
                                "role `{name}`: update of `{}`: {e}",
                                workflow.memory[*memory].name
                            ))
                        })?;
                    (*memory, Some(*op), values)
                }
            };
            let slot = &workflow.memory[memory_id];
            let note = match op {
                None => {
                    let value = args.into_iter().next().unwrap_or(Value::Null);
                    let mut value = value;
                    if let MemoryKind::Value { ty, .. } = &slot.kind {
                        ty.validate(&value).map_err(|e| {
                            StepError::Failed(format!("role `{name}`: `set {}`: {e}", slot.name))
                        })?;
                        ty.fill_absent(&mut value);
                    }
                    state.memory[memory_id] = value;
                    String::new()
                }
                Some(op) => {
                    let note = memory::apply(
                        &slot.kind,
                        &mut state.memory[memory_id],
                        op,
                        args,
                        &self.run_dir,
                        self.workspace.root(),
                    )
                    .map_err(|e| {
                        StepError::Failed(format!(
                            "role `{name}`: `{}.{}`: {e}",
                            slot.name,
                            op.name()
                        ))
                    })?;
                    if let MemoryKind::Value { ty, .. } = &slot.kind {
                        ty.fill_absent(&mut state.memory[memory_id]);
                    }
                    note
                }
            };
            if self.dir.is_some() {
                self.event("memory", json!({"role": name, "memory": slot.name, "op": op.map_or("set", |o| o.name()), "note": note}));
            }
        }
        let mut appended = self.write_artifacts(
            artifacts,
            state,
            Some(node),
            Some(&run.output),
            item,
            run.prompt.as_deref(),
            visit,
        )?;
        appended.extend(self.write_artifacts(
            &workflow.artifacts,
            state,
            None,
            None,
            None,
            None,
            visit,
        )?);
        state.file_lengths.extend(appended);
        if self.wants_events() {
            self.event(
                "role_end",
                json!({"role": name, "visit": visit, "step": state.step}),
            );
        }
        Ok(())
    }
}
