//! Applying a role's result to the run state: visits, output, events, memory updates.

use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::eval;
use super::events::Event;
use super::memory::{self, MemoryValue};
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
        if let Some(prompt) = &mut run.prompt {
            *prompt = self.redactor.redact(prompt).into_owned();
        }
        state.visits[node.index()] += 1;
        state.step += 1;
        state.path.push(name.clone());
        let visit = state.visits[node.index()];
        self.flush_buffered_events();
        self.settle(state);
        self.reporter.role_done(
            &name,
            role.kind.name(),
            state.step,
            &state.totals,
            self.started,
        );
        let invalid = eval::is_json_llm(workflow, node) && eval::is_invalid_record(&run.output);
        if self.wants_events() {
            self.event(Event::RoleStart {
                role: name.clone(),
                kind: role.kind.name().to_string(),
                visit,
                step: state.step,
            });
        }
        match &role.kind {
            RoleKind::Llm(_) => {
                if let Some(record) = run.record {
                    let (how, coercions) = (record.parsed, record.coercions.clone());
                    self.event(Event::LlmResponse(record));
                    self.event(Event::ParsedOutput {
                        role: name.clone(),
                        visit,
                        how,
                        coercions,
                        output: run.output.clone(),
                    });
                } else if invalid {
                    self.event(Event::InvalidOutcome {
                        role: name.clone(),
                        visit,
                        attempts: run.output["attempts"].as_u64().unwrap_or(0),
                        error: run.output["error"].as_str().unwrap_or("").to_string(),
                    });
                }
            }
            RoleKind::Tool(_) => {
                state.totals.tool_calls += 1;
                if let Some(tool) = run.tool {
                    state.tools_used.insert(tool);
                }
                self.event(Event::ToolCall {
                    role: name.clone(),
                    visit,
                    result: run.output.clone(),
                });
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
                    let mut value = args.into_iter().next().unwrap_or(Value::Null);
                    let set_failed = |e: String| {
                        StepError::Failed(format!("role `{name}`: `set {}`: {e}", slot.name))
                    };
                    let MemoryKind::Value { ty, .. } = &slot.kind else {
                        return Err(set_failed(format!(
                            "a {} cannot be set",
                            slot.kind.kind_name()
                        )));
                    };
                    ty.validate(&value).map_err(set_failed)?;
                    ty.fill_absent(&mut value);
                    state.memory[memory_id] = MemoryValue::Plain(value);
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
                    if let (MemoryKind::Value { ty, .. }, MemoryValue::Plain(v)) =
                        (&slot.kind, &mut state.memory[memory_id])
                    {
                        ty.fill_absent(v);
                    }
                    note
                }
            };
            if self.dir.is_some() {
                self.event(Event::Memory {
                    role: name.clone(),
                    memory: slot.name.clone(),
                    op: op.map_or("set", |o| o.name()).to_string(),
                    note,
                });
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
            self.event(Event::RoleEnd {
                role: name,
                visit,
                step: state.step,
            });
        }
        Ok(())
    }
}
