//! Applying a role's result to the run state: visits, output, events, memory updates.

use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::eval::{self, EvalError};
use super::events::Event;
use super::memory::{self, MemoryValue};
use super::state::RunState;
use super::{Interpreter, RoleRun, StepError};
use rondo_provider::{Message, ToolCall};

use crate::compile::{MemoryKind, MemoryOp, RoleKind, ToolAction, Update};

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
        let name: &'w str = &workflow.node(node).name;
        let mut run = run;
        self.redactor.redact_json(&mut run.output);
        if let Some(prompt) = &mut run.prompt {
            *prompt = self.redactor.redact(prompt).into_owned();
        }
        // The role's turns go into its conversation first: past its bounds the step is not
        // applied at all, and the run ends at `limit`.
        let invalid = workflow.is_json_llm(node) && eval::is_invalid_record(&run.output);
        if !invalid && let Some((memory_id, turns)) = conversation_turns(&role.kind, &run) {
            let slot = &workflow.memory[memory_id];
            memory::extend_conversation(&slot.kind, &mut state.memory[memory_id], turns).map_err(
                |e| StepError::Limit(format!("role `{name}`: conversation `{}`: {e}", slot.name)),
            )?;
        }
        state.visits[node.index()] += 1;
        state.step += 1;
        state.path.push(name.to_string());
        let visit = state.visits[node.index()];
        self.flush_buffered_events();
        self.settle(state);
        if self.wants_events() {
            self.event(Event::RoleStart {
                role: name.to_string(),
                kind: role.kind.name().to_string(),
                visit,
                step: state.step,
            });
        }
        self.record_result(state, node, name, visit, &mut run, invalid);
        store_output(state, node, &run.output, item, workflow.is_map_worker(node));
        // An invalid outcome is only routed: the role's updates and artifacts expect a valid output.
        let (updates, artifacts): (&[Update], &[crate::compile::Artifact]) = if invalid {
            (&[], &[])
        } else {
            (&role.updates, &role.artifacts)
        };
        self.apply_updates(state, node, name, updates, &run.output, item)?;
        if artifacts.is_empty() && workflow.artifacts.is_empty() {
            return self.role_end(state, name, visit);
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
        self.role_end(state, name, visit)
    }

    fn role_end(&mut self, state: &RunState, name: &str, visit: u64) -> Result<(), StepError> {
        if self.wants_events() {
            self.event(Event::RoleEnd {
                role: name.to_string(),
                visit,
                step: state.step,
                totals: Some(state.totals.clone()),
            });
        }
        Ok(())
    }

    /// The events of a role's result (its reply and how it was read, its tool call) and
    /// the tool counters.
    fn record_result(
        &mut self,
        state: &mut RunState,
        node: NodeIndex,
        name: &str,
        visit: u64,
        run: &mut RoleRun,
        invalid: bool,
    ) {
        let workflow = self.workflow;
        let Some(role) = workflow.role(node) else {
            return;
        };
        match &role.kind {
            RoleKind::Llm(_) => {
                if let Some(record) = run.record.take() {
                    let (how, coercions) = (record.parsed, record.coercions.clone());
                    self.event(Event::LlmResponse(*record));
                    self.event(Event::ParsedOutput {
                        role: name.to_string(),
                        visit,
                        how,
                        coercions,
                        output: run.output.clone(),
                    });
                } else if invalid {
                    self.event(Event::InvalidOutcome {
                        role: name.to_string(),
                        visit,
                        attempts: run.output["attempts"].as_u64().unwrap_or(0),
                        error: run.output["error"].as_str().unwrap_or("").to_string(),
                    });
                }
            }
            RoleKind::Tool(t) => {
                if let ToolAction::Calls { choices, .. } = &t.action {
                    // Each call that ran counts, as one tool role's run would.
                    for r in run.output["results"].as_array().into_iter().flatten() {
                        let ran = r["error_kind"].as_str().is_none_or(|k| {
                            !matches!(k, "validation" | "unknown_tool" | "too_many_calls")
                        });
                        if let Some(&id) = choices
                            .iter()
                            .find(|&&c| Some(workflow.tools[c].name()) == r["tool"].as_str())
                            && ran
                        {
                            state.totals.tool_calls += 1;
                            state.tools_used.insert(id);
                        }
                    }
                } else {
                    state.totals.tool_calls += 1;
                }
                if let Some(tool) = run.tool {
                    state.tools_used.insert(tool);
                }
                self.event(Event::ToolCall {
                    role: name.to_string(),
                    visit,
                    result: run.output.clone(),
                });
            }
            RoleKind::Builtin => {}
        }
    }

    /// Runs the role's updates, then writes `whiteboard.md` after every applied batch and
    /// records what changed.
    fn apply_updates(
        &mut self,
        state: &mut RunState,
        node: NodeIndex,
        name: &str,
        updates: &[Update],
        output: &Value,
        item: Option<&Value>,
    ) -> Result<(), StepError> {
        let workflow = self.workflow;
        let notes = self
            .run_updates(state, node, updates, output, item)
            .map_err(|e| {
                let message = format!("role `{name}`: {}", e.message());
                match e {
                    UpdateError::Limit(_) => StepError::Limit(message),
                    // A value a reply or a tool gave that the memory refuses: not a fault of
                    // the engine (an llm role's own reply was asked again before this).
                    UpdateError::Refused(_) => StepError::Invalid(message),
                    UpdateError::Failed(_) => StepError::Failed(message),
                }
            })?;
        for n in &notes {
            // whiteboard.md, in the system area, follows every applied batch.
            if n.op == Some(MemoryOp::Apply) {
                memory::write_whiteboard(&state.memory[n.memory], &self.run_dir).map_err(|e| {
                    StepError::Failed(format!("role `{name}`: cannot write whiteboard.md: {e}"))
                })?;
            }
        }
        if self.dir.is_some() {
            for n in notes {
                self.event(Event::Memory {
                    role: name.to_string(),
                    memory: workflow.memory[n.memory].name.clone(),
                    op: n.op.map_or("set", |o| o.name()).to_string(),
                    note: n.note,
                });
            }
        }
        Ok(())
    }
}

/// A role's output as the run keeps it: a map worker's is the list of its branch outputs
/// (each branch adds its own, so its updates and artifacts see the list typed as `check`
/// does).
fn store_output(
    state: &mut RunState,
    node: NodeIndex,
    output: &Value,
    item: Option<&Value>,
    map_worker: bool,
) {
    if item.is_some() && map_worker {
        match state.outputs.get_mut(&node.index()) {
            Some(Value::Array(outputs)) => outputs.push(output.clone()),
            _ => {
                state
                    .outputs
                    .insert(node.index(), Value::Array(vec![output.clone()]));
            }
        }
    } else if let Some(stored) = state.outputs.get_mut(&node.index()) {
        stored.clone_from(output);
    } else {
        state.outputs.insert(node.index(), output.clone());
    }
}

/// What a role adds to its conversation, before its updates run: an llm role its prompt
/// (when it has one) and its reply, tool calls included; a `calls` tool role one tool
/// message per call.
fn conversation_turns(kind: &RoleKind, run: &RoleRun) -> Option<(usize, Vec<Message>)> {
    match kind {
        RoleKind::Llm(llm) => {
            let id = llm.conversation?;
            let mut turns = Vec::new();
            if let Some(prompt) = &run.prompt {
                turns.push(Message::user(prompt.clone()));
            }
            if llm.mode.native() {
                let calls: Vec<ToolCall> = run.output["calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| ToolCall {
                        id: c["id"].as_str().unwrap_or_default().to_string(),
                        name: c["tool"].as_str().unwrap_or_default().to_string(),
                        arguments: c["args"].clone(),
                    })
                    .collect();
                let text = run.output["text"].as_str().unwrap_or_default();
                turns.push(if calls.is_empty() {
                    Message::assistant(text)
                } else {
                    Message::assistant_tool_calls(text, calls)
                });
            } else {
                let text = match (&run.record, &run.output) {
                    (Some(record), _) => record.call.raw.clone(),
                    (None, Value::String(s)) => s.clone(),
                    (None, other) => other.to_string(),
                };
                turns.push(Message::assistant(text));
            }
            Some((id, turns))
        }
        RoleKind::Tool(tool) => {
            let ToolAction::Calls {
                conversation: Some(id),
                ..
            } = &tool.action
            else {
                return None;
            };
            let turns = run.output["results"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    let observation = match &r["observation"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let error = r["observation"]["error"]
                        .as_str()
                        .map_or(observation.clone(), str::to_string);
                    let content = match (r["ok"].as_bool(), r["error_kind"].as_str()) {
                        (Some(true), _) => observation,
                        (_, Some("validation" | "unknown_tool")) => {
                            format!("⛔️validation_error: {error}")
                        }
                        (_, kind) => format!("error ({}): {error}", kind.unwrap_or("tool")),
                    };
                    let id = r["id"].as_str().unwrap_or_default();
                    match r["ok"].as_bool() {
                        Some(true) => Message::tool_result(id, content),
                        _ => Message::tool_error(id, content),
                    }
                })
                .collect();
            Some((*id, turns))
        }
        RoleKind::Builtin => None,
    }
}

/// One applied update, for the `memory` event.
pub(super) struct UpdateNote {
    pub memory: usize,
    /// `None`: a `set`.
    pub op: Option<MemoryOp>,
    pub note: String,
}

/// Which bound a value memory's JSON passes, if any: `limits.max_memory_bytes`, or the
/// slot's own `max_bytes`/`max_len`.
pub(super) fn memory_over_limit(
    workflow: &crate::compile::Workflow,
    slot: &crate::compile::MemorySlot,
    value: &super::memory::MemoryValue,
) -> Option<String> {
    let plain = value.plain()?;
    if let Some(why) = crate::compile::memory_over(plain, slot.bound) {
        return Some(why);
    }
    let (limit, _) = workflow.limits.max_memory_bytes?;
    let bytes = serde_json::to_string(plain).map_or(0, |s| s.len()) as u64;
    (bytes > limit).then(|| format!("{bytes} bytes of JSON, past max_memory_bytes = {limit}"))
}

/// Why a role's updates could not be applied.
#[derive(Debug)]
pub(super) enum UpdateError {
    /// The output's content was refused (a whiteboard batch, a value of the wrong type
    /// where `check` accepted it typed `any`, an expression that cannot take such a value):
    /// an llm role's reply is sent back to the model with this reason; elsewhere the run
    /// ends at `invalid_output`.
    Refused(String),
    /// Anything else (an expression that cannot be evaluated, a damaged checkpoint).
    Failed(String),
    /// A memory's declared bound would be passed: the run ends at `limit`.
    Limit(String),
}

impl UpdateError {
    pub fn message(&self) -> &str {
        match self {
            UpdateError::Refused(m) | UpdateError::Failed(m) | UpdateError::Limit(m) => m,
        }
    }
}

/// An update with its values evaluated: the memory slot, what is stored and whether
/// `check` accepted the values only as `any`.
struct Evaluated {
    memory: usize,
    stored: Stored,
    unchecked: bool,
}

/// A `set` holds its one value without a list: it is most steps' only update.
enum Stored {
    Set(Value),
    Op(MemoryOp, Vec<Value>),
}

impl Stored {
    fn op(&self) -> Option<MemoryOp> {
        match self {
            Stored::Set(_) => None,
            Stored::Op(op, _) => Some(*op),
        }
    }
}

impl<'w> Interpreter<'w> {
    /// Applies `updates` to the state's memory in order, with `output` as the role's
    /// output; stops at the first that fails.
    pub(super) fn run_updates(
        &self,
        state: &mut RunState,
        node: NodeIndex,
        updates: &[Update],
        output: &Value,
        item: Option<&Value>,
    ) -> Result<Vec<UpdateNote>, UpdateError> {
        // Kept only for their readers (`apply_updates`): the `memory` events of a recorded
        // run and whiteboard.md after a batch. Most steps have neither.
        let recorded = self.dir.is_some();
        let mut notes = Vec::new();
        for update in updates {
            let evaluated = self.update_values(state, node, update, output, item)?;
            let op = evaluated.stored.op();
            let memory = evaluated.memory;
            let slot = &self.workflow.memory[memory];
            // A value memory with a bound keeps what it held when an update would pass it:
            // the records show the bound respected.
            let bounded = matches!(slot.kind, crate::compile::MemoryKind::Value { .. })
                && (!slot.bound.is_none() || self.workflow.limits.max_memory_bytes.is_some());
            let before = bounded.then(|| state.memory[memory].clone());
            let note = self.store_update(state, evaluated)?;
            if bounded
                && let Some(why) = memory_over_limit(self.workflow, slot, &state.memory[memory])
            {
                if let Some(before) = before {
                    state.memory[memory] = before;
                }
                return Err(UpdateError::Limit(format!(
                    "memory `{}` would hold more than its bound: {why}",
                    slot.name
                )));
            }
            if recorded || op == Some(MemoryOp::Apply) {
                notes.push(UpdateNote { memory, op, note });
            }
        }
        Ok(notes)
    }

    /// The values an update stores, evaluated on the state as it is.
    fn update_values(
        &self,
        state: &RunState,
        node: NodeIndex,
        update: &Update,
        output: &Value,
        item: Option<&Value>,
    ) -> Result<Evaluated, UpdateError> {
        let workflow = self.workflow;
        let evaluated = |e: EvalError, memory: usize| {
            let message = format!("update of `{}`: {e}", workflow.memory[memory].name);
            if e.unchecked {
                UpdateError::Refused(message)
            } else {
                UpdateError::Failed(message)
            }
        };
        let env = self.env(state, Some(node), Some(output), item);
        Ok(match update {
            Update::Set {
                memory,
                value,
                unchecked,
                ..
            } => Evaluated {
                memory: *memory,
                stored: Stored::Set(env.value(value).map_err(|e| evaluated(e, *memory))?),
                unchecked: !unchecked.is_no(),
            },
            Update::Op {
                memory,
                op,
                args,
                unchecked,
                ..
            } => Evaluated {
                memory: *memory,
                stored: Stored::Op(
                    *op,
                    args.iter()
                        .map(|a| env.value(a))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| evaluated(e, *memory))?,
                ),
                unchecked: !unchecked.is_no(),
            },
        })
    }

    /// Stores an evaluated update in its memory slot; the note says what changed.
    fn store_update(&self, state: &mut RunState, update: Evaluated) -> Result<String, UpdateError> {
        let Evaluated {
            memory: memory_id,
            stored,
            unchecked,
        } = update;
        // A value `check` accepted only as `any` and that does not fit is the fault of
        // what produced it; one `check` proved fits and does not is the engine's.
        let refused = |message: String| {
            if unchecked {
                UpdateError::Refused(message)
            } else {
                UpdateError::Failed(message)
            }
        };
        let slot = &self.workflow.memory[memory_id];
        let (op, args) = match stored {
            Stored::Op(op, args) => (op, args),
            Stored::Set(mut value) => {
                let MemoryKind::Value { ty, .. } = &slot.kind else {
                    return Err(UpdateError::Failed(format!(
                        "`set {}`: a {} cannot be set",
                        slot.name,
                        slot.kind.kind_name()
                    )));
                };
                ty.validate(&value)
                    .map_err(|e| refused(format!("`set {}`: {e}", slot.name)))?;
                ty.fill_absent(&mut value);
                state.memory[memory_id] = MemoryValue::Plain(value);
                return Ok(String::new());
            }
        };
        if let MemoryKind::Value { ty, .. } = &slot.kind {
            stored_fits(ty, op, &args)
                .map_err(|e| refused(format!("`{}.{}`: {e}", slot.name, op.name())))?;
        }
        let note = memory::apply(
            slot,
            &mut state.memory[memory_id],
            op,
            args,
            self.workspace.root(),
        )
        .map_err(|e| {
            let message = format!("`{}.{}`: {}", slot.name, op.name(), e.message());
            match e {
                memory::MemoryError::Refused(_) => UpdateError::Refused(message),
                memory::MemoryError::Failed(_) => UpdateError::Failed(message),
                memory::MemoryError::Limit(_) => UpdateError::Limit(message),
            }
        })?;
        if let (MemoryKind::Value { ty, .. }, MemoryValue::Plain(v)) =
            (&slot.kind, &mut state.memory[memory_id])
        {
            ty.fill_absent(v);
        }
        Ok(note)
    }

    /// Whether an llm role's parsed reply can be applied: its updates are tried on a copy
    /// of the state. A refusal is the reason the reply is invalid; any other failure is
    /// left to the real application, which reports it.
    pub(super) fn refused_updates(
        &self,
        state: &RunState,
        node: NodeIndex,
        output: &Value,
        item: Option<&Value>,
    ) -> Option<String> {
        let updates = &self.workflow.role(node)?.updates;
        if updates.is_empty() {
            return None;
        }
        // What expressions read, without the run's history (path, file lengths): a copy
        // per llm call must not grow with the run.
        let mut draft = RunState {
            run_id: state.run_id.clone(),
            step: state.step + 1,
            position: state.position.clone(),
            visits: state.visits.clone(),
            route_taken: Vec::new(),
            outputs: state.outputs.clone(),
            memory: state.memory.clone(),
            inputs: state.inputs.clone(),
            path: Vec::new(),
            tools_used: state.tools_used.clone(),
            totals: state.totals.clone(),
            status: state.status,
            elapsed_ms: state.elapsed_ms,
            file_lengths: Default::default(),
            ended: state.ended.clone(),
        };
        // As `apply` will: a map worker read by name is the list of its outputs (the other
        // branches of this map are not applied yet).
        let read = if item.is_some() && self.workflow.is_map_worker(node) {
            Value::Array(vec![output.clone()])
        } else {
            output.clone()
        };
        draft.outputs.insert(node.index(), read);
        draft.visits[node.index()] += 1;
        match self.run_updates(&mut draft, node, updates, output, item) {
            Err(UpdateError::Refused(reason)) => Some(reason),
            _ => None,
        }
    }
}

/// What `append`, `extend`, `put` and `patch` add to a value memory fits its declared type, so
/// memory always holds what `check` typed it as (a later template reads its fields).
fn stored_fits(
    ty: &crate::compile::types::Type,
    op: MemoryOp,
    args: &[Value],
) -> Result<(), String> {
    use crate::compile::types::Type;
    match (op, ty.strip_optional(), args) {
        (MemoryOp::Append, Type::List { item }, [value, ..]) => item.validate(value),
        (MemoryOp::Extend, Type::List { .. }, [Value::Array(_), ..]) => ty.validate(&args[0]),
        (MemoryOp::Put, Type::Map { value: v }, [_, value, ..]) => v.validate(value),
        (MemoryOp::Patch, Type::List { item }, [_, Value::Object(changes), ..]) => {
            for (field, value) in changes {
                if let Some(t) = item.strip_optional().field(field) {
                    t.validate(value).map_err(|e| format!("`{field}`: {e}"))?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
