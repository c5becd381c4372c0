//! The run directory: `run.json`, `events.jsonl`, `state.json` (atomic) and artifacts.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::clock;
use super::state::{RunState, Totals};

/// `run.json`: what ran, with which inputs and providers (never keys), and how it ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub workflow: String,
    pub workflow_path: PathBuf,
    pub workflow_hash: String,
    pub inputs: serde_json::Map<String, Value>,
    pub providers: Vec<Value>,
    pub provider_override: Option<String>,
    pub script: Option<PathBuf>,
    pub replay_from: Option<PathBuf>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub status: String,
    pub exit: Option<String>,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub totals: Totals,
}

pub struct RunDir {
    pub path: PathBuf,
    events: BufWriter<File>,
    seq: u64,
}

impl RunDir {
    pub fn create(path: &Path) -> std::io::Result<RunDir> {
        std::fs::create_dir_all(path)?;
        Self::open(path)
    }

    /// Opens an existing run directory to append to it (resume).
    pub fn open(path: &Path) -> std::io::Result<RunDir> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.join("events.jsonl"))?;
        let seq = std::fs::read_to_string(path.join("events.jsonl"))
            .map_or(0, |t| t.lines().count() as u64);
        Ok(RunDir {
            path: path.to_path_buf(),
            events: BufWriter::new(file),
            seq,
        })
    }

    pub fn event(&mut self, kind: &str, mut fields: Value) -> std::io::Result<()> {
        self.seq += 1;
        let mut line = serde_json::Map::new();
        line.insert("seq".into(), Value::from(self.seq));
        line.insert("ts".into(), Value::String(clock::now_rfc3339()));
        line.insert("event".into(), Value::String(kind.into()));
        if let Value::Object(extra) = fields.take() {
            line.extend(extra);
        }
        serde_json::to_writer(&mut self.events, &Value::Object(line))?;
        self.events.write_all(b"\n")
    }

    /// Events first, then the state: a state on disk never refers to a missing event.
    pub fn checkpoint(&mut self, state: &mut RunState) -> std::io::Result<()> {
        self.events.flush()?;
        self.events.get_ref().sync_data()?;
        let events_len = self.events.get_ref().metadata()?.len();
        state.file_lengths.insert("events.jsonl".into(), events_len);
        write_atomic(
            &self.path.join("state.json"),
            &serde_json::to_vec_pretty(state)?,
        )
    }

    /// Cuts `events.jsonl` and append-mode artifacts back to their checkpointed length.
    pub fn rewind(path: &Path, state: &RunState) -> std::io::Result<()> {
        for (name, len) in &state.file_lengths {
            let Some(rel) = safe_relative(name) else {
                continue;
            };
            let file = path.join(rel);
            if file.exists() {
                OpenOptions::new().write(true).open(&file)?.set_len(*len)?;
            }
        }
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.events.flush()
    }

    pub fn write_info(&self, info: &RunInfo) -> std::io::Result<()> {
        write_atomic(
            &self.path.join("run.json"),
            &serde_json::to_vec_pretty(info)?,
        )
    }

    pub fn write_artifact(&self, name: &str, content: &[u8]) -> std::io::Result<PathBuf> {
        let rel = safe_relative(name).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("artifact name `{name}` must be a relative path inside the run directory"),
            )
        })?;
        let path = self.path.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        write_atomic(&path, content)?;
        Ok(path)
    }
}

pub fn read_info(dir: &Path) -> Result<RunInfo, String> {
    let text = std::fs::read_to_string(dir.join("run.json"))
        .map_err(|e| format!("{} is not a run directory ({e})", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: damaged run.json: {e}", dir.display()))
}

pub fn read_state(dir: &Path) -> Result<RunState, String> {
    let text = std::fs::read_to_string(dir.join("state.json"))
        .map_err(|e| format!("{}: no checkpoint ({e})", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: damaged state.json: {e}", dir.display()))
}

/// A name with no absolute part and no `..`.
pub fn safe_relative(name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    let ok = !name.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    ok.then(|| path.to_path_buf())
}

/// Write to a temporary file, fsync it, rename over the target, fsync the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Appends bytes and syncs (JSONL artifacts).
pub fn append_line(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(bytes)?;
    f.sync_data()
}
