//! Memory that carries over from one run to the next made in the same `--workspace` folder
//! (the header's `durable = [...]`). It is kept in the workspace's system area,
//! `DIR/.rondo/memory/<workflow>.json`, beside the runs' records and out of the tools'
//! reach; loaded when a run starts (a resumed run has it in its checkpoint) and saved after
//! every step that changed it. Runs sharing the folder at the same time: the last save wins.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::events::{DurableSkip, Event};
use super::memory::MemoryValue;
use super::rundir::Layout;
use super::state::RunState;
use crate::compile::{MemoryKind, Workflow};

/// Folder of the saved memories inside the workspace's `.rondo/`.
pub const MEMORY_DIR: &str = "memory";

/// Largest saved-memory file read back.
const MAX_BYTES: u64 = 64 << 20;

pub struct Durable {
    file: PathBuf,
    /// What was last saved (or loaded), per durable slot: a step that changes none of
    /// them writes nothing.
    saved: Vec<MemoryValue>,
}

impl Durable {
    /// `None` when the workflow declares no durable memory, or when the run has its own
    /// workspace (no `--workspace`: no later run will share it).
    pub fn new(workflow: &Workflow, layout: &Layout) -> Option<Durable> {
        if workflow.durable.is_empty() {
            return None;
        }
        let system = layout.workspace.join(rondo_workspace::SYSTEM_DIR);
        // Compared as the kernel resolves them: the run folder may be named relatively or
        // through a link, and a resumed run's workspace is found from where it lies.
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if !real(&layout.system).starts_with(real(&system)) {
            return None;
        }
        Some(Durable {
            file: system
                .join(MEMORY_DIR)
                .join(format!("{}.json", workflow.name)),
            saved: Vec::new(),
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Puts into `state` what earlier runs left. Each slot is checked as if a step had
    /// written it (its type; a whiteboard's rules entry by entry); one that does not fit
    /// starts empty and the returned `durable_memory` event says why.
    pub fn load(&mut self, workflow: &Workflow, state: &mut RunState) -> Event {
        let mut loaded = Vec::new();
        let mut skipped = Vec::new();
        let saved = match crate::source::read_regular(&self.file, MAX_BYTES) {
            Ok(text) => serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("damaged: {e}"))
                .map(|v| v.get("memory").cloned().unwrap_or(Value::Null)),
            Err(crate::source::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Value::Null)
            }
            Err(e) => Err(e.to_string()),
        };
        match saved {
            Ok(saved) => {
                for &id in &workflow.durable {
                    let slot = &workflow.memory[id];
                    let Some(value) = saved.get(&slot.name) else {
                        continue;
                    };
                    let carried = carry_over(&slot.kind, &state.memory[id], value).and_then(|v| {
                        match super::apply::memory_over_limit(workflow, slot, &v) {
                            Some(why) => Err(format!("holds more than its bound: {why}")),
                            None => Ok(v),
                        }
                    });
                    match carried {
                        Ok(v) => {
                            state.memory[id] = v;
                            loaded.push(slot.name.clone());
                        }
                        Err(reason) => skipped.push(DurableSkip {
                            memory: Some(slot.name.clone()),
                            reason,
                        }),
                    }
                }
            }
            Err(reason) => skipped.push(DurableSkip {
                memory: None,
                reason,
            }),
        }
        self.remember(workflow, state);
        Event::DurableMemory {
            file: self.file.clone(),
            loaded,
            skipped,
        }
    }

    /// Takes the state's durable slots as saved (a resumed run: nothing to write yet).
    pub fn remember(&mut self, workflow: &Workflow, state: &RunState) {
        self.saved = workflow
            .durable
            .iter()
            .map(|&id| state.memory[id].clone())
            .collect();
    }

    /// Saves the durable slots when they changed since the last save: a temporary file
    /// of this process, synced, renamed over the file.
    pub fn save(&mut self, workflow: &Workflow, state: &RunState) -> std::io::Result<()> {
        let unchanged = self.saved.len() == workflow.durable.len()
            && workflow
                .durable
                .iter()
                .zip(&self.saved)
                .all(|(&id, saved)| state.memory[id] == *saved);
        if unchanged {
            return Ok(());
        }
        let memory: serde_json::Map<String, Value> = workflow
            .durable
            .iter()
            .map(|&id| {
                let value = serde_json::to_value(&state.memory[id]).unwrap_or(Value::Null);
                (workflow.memory[id].name.clone(), value)
            })
            .collect();
        let doc = json!({"workflow": workflow.name, "run_id": state.run_id, "memory": memory});
        let dir = self.file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".{}.{}.tmp", workflow.name, std::process::id()));
        {
            let _ = std::fs::remove_file(&tmp);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(&doc)?)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.file)?;
        self.remember(workflow, state);
        Ok(())
    }
}

/// A saved value for a slot of `kind` whose fresh value is `fresh`, checked.
fn carry_over(
    kind: &MemoryKind,
    fresh: &MemoryValue,
    saved: &Value,
) -> Result<MemoryValue, String> {
    match (kind, fresh) {
        (MemoryKind::Value { ty, .. }, _) => {
            ty.validate(saved)?;
            let mut v = saved.clone();
            ty.fill_absent(&mut v);
            Ok(MemoryValue::Plain(v))
        }
        (MemoryKind::Whiteboard { .. }, MemoryValue::Whiteboard(fresh)) => {
            let earlier: rondo_memory::Whiteboard =
                serde_json::from_value(saved.clone()).map_err(|e| format!("damaged: {e}"))?;
            let board = fresh.carried_over(&earlier).map_err(|e| e.to_string())?;
            Ok(MemoryValue::Whiteboard(board))
        }
        (other, _) => Err(format!("a {} does not carry over", other.kind_name())),
    }
}
