//! Memory that carries over from one run to the next made in the same `--workspace` folder
//! (the header's `durable = [...]`). It is kept in the workspace's system area,
//! `DIR/.rondo/memory/<workflow>.json`, beside the runs' records and out of the tools'
//! reach; loaded when a run starts (a resumed run has it in its checkpoint) and saved after
//! every step that changed it. Runs sharing the folder at the same time: the last save wins.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

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
    saved: Vec<Value>,
}

impl Durable {
    /// `None` when the workflow declares no durable memory, or when the run has its own
    /// workspace (no `--workspace`: no later run will share it).
    pub fn new(workflow: &Workflow, layout: &Layout) -> Option<Durable> {
        if workflow.durable.is_empty() {
            return None;
        }
        let system = layout.workspace.join(rondo_workspace::SYSTEM_DIR);
        if !layout.system.starts_with(&system) {
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
    pub fn load(&mut self, workflow: &Workflow, state: &mut RunState) -> Value {
        let mut loaded = Vec::new();
        let mut skipped = Vec::new();
        let saved = match crate::source::read_regular(&self.file, MAX_BYTES) {
            Ok(text) => serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("damaged: {e}"))
                .map(|v| v.get("memory").cloned().unwrap_or(Value::Null)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Value::Null),
            Err(e) => Err(e.to_string()),
        };
        match saved {
            Ok(saved) => {
                for &id in &workflow.durable {
                    let slot = &workflow.memory[id];
                    let Some(value) = saved.get(&slot.name) else {
                        continue;
                    };
                    match carry_over(&slot.kind, &state.memory[id], value) {
                        Ok(v) => {
                            state.memory[id] = v;
                            loaded.push(slot.name.clone());
                        }
                        Err(reason) => {
                            skipped.push(json!({"memory": slot.name, "reason": reason}));
                        }
                    }
                }
            }
            Err(reason) => skipped.push(json!({"memory": null, "reason": reason})),
        }
        self.remember(workflow, state);
        json!({"file": self.file, "loaded": loaded, "skipped": skipped})
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
            .map(|&id| (workflow.memory[id].name.clone(), state.memory[id].clone()))
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
fn carry_over(kind: &MemoryKind, fresh: &Value, saved: &Value) -> Result<Value, String> {
    match kind {
        MemoryKind::Value { ty, .. } => {
            ty.validate(saved)?;
            let mut v = saved.clone();
            ty.fill_absent(&mut v);
            Ok(v)
        }
        MemoryKind::Whiteboard { .. } => {
            let fresh: rondo_memory::Whiteboard =
                serde_json::from_value(fresh.clone()).map_err(|e| e.to_string())?;
            let earlier: rondo_memory::Whiteboard =
                serde_json::from_value(saved.clone()).map_err(|e| format!("damaged: {e}"))?;
            let board = fresh.carried_over(&earlier).map_err(|e| e.to_string())?;
            serde_json::to_value(board).map_err(|e| e.to_string())
        }
        other => Err(format!("a {} does not carry over", other.kind_name())),
    }
}
