//! The run directory. A run has two areas:
//!
//! - the **workspace** (user view): the tools' working directory, artifacts, logs; what
//!   Docker mounts and `exists()` see. Every access on a workflow's behalf goes through
//!   [`rondo_workspace::Workspace`].
//! - the **system area**: `run.json`, `events.jsonl` (prompts, replies and tool calls are
//!   recorded there), `state.json`, `whiteboard.md`, install logs. Tools never see it.
//!
//! Without `--workspace`: `runs/<id>/` is the system area and `runs/<id>/workspace/` the
//! workspace. With `--workspace DIR`: DIR is the workspace and `DIR/.rondo/runs/<id>/` the
//! system area (`.rondo` is never reached through the workspace).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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
    /// The run's workspace (absolute). Absent in runs from before the split, whose
    /// workspace was the run directory itself.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
}

/// Where a run keeps its records and where its tools work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub system: PathBuf,
    pub workspace: PathBuf,
}

/// The subfolder of a run directory that is its workspace (without `--workspace`).
pub const WORKSPACE_DIR: &str = "workspace";

impl Layout {
    pub fn new(runs_root: &Path, workspace: Option<&Path>, run_id: &str) -> Layout {
        match workspace {
            Some(dir) => Layout {
                system: runs_in_workspace(dir).join(run_id),
                workspace: dir.to_path_buf(),
            },
            None => {
                let system = runs_root.join(run_id);
                Layout {
                    workspace: system.join(WORKSPACE_DIR),
                    system,
                }
            }
        }
    }

    /// The layout of an existing run, from its `run.json`.
    pub fn of(system: &Path, info: &RunInfo) -> Layout {
        Layout {
            system: system.to_path_buf(),
            workspace: info
                .workspace
                .clone()
                .unwrap_or_else(|| system.to_path_buf()),
        }
    }
}

/// Where `rondo run --workspace DIR` keeps its runs.
pub fn runs_in_workspace(dir: &Path) -> PathBuf {
    dir.join(rondo_workspace::SYSTEM_DIR).join("runs")
}

/// Longest run id accepted.
pub const MAX_RUN_ID: usize = 128;

/// A run id names one folder: not empty, no `/` or `\`, not `.` or `..`, no NUL or
/// control character, at most [`MAX_RUN_ID`] bytes.
pub fn check_run_id(id: &str) -> Result<(), String> {
    let why = if id.is_empty() {
        "it is empty"
    } else if id.len() > MAX_RUN_ID {
        "it is longer than 128 bytes"
    } else if id.contains(['/', '\\']) {
        "it contains a path separator"
    } else if id == "." || id == ".." {
        "it names a parent or current folder"
    } else if id.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(format!(
        "run id {id:?} is not a plain name ({why}); use letters, digits, `-`, `_` and `.`"
    ))
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
    pub fn rewind(layout: &Layout, state: &RunState) -> std::io::Result<()> {
        let workspace = rondo_workspace::Workspace::open(&layout.workspace)?;
        for (key, len) in &state.file_lengths {
            match key.strip_prefix(ARTIFACT_KEY) {
                Some(name) => workspace.truncate(name, *len)?,
                None if key == "events.jsonl" => {
                    let file = layout.system.join(key);
                    if file.exists() {
                        OpenOptions::new().write(true).open(&file)?.set_len(*len)?;
                    }
                }
                None => {}
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
}

/// Key prefix of an append-mode artifact in the checkpoint's `file_lengths`.
pub const ARTIFACT_KEY: &str = "workspace/";

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

/// A value interpolated into an artifact name, made one safe path component: no `/`,
/// backslash, NUL or `..`, not empty, not longer than a file name may be. `None` when it
/// already is one.
pub fn path_component(value: &str) -> Option<String> {
    const MAX: usize = 120;
    let mut out: String = value
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | '\0') {
                '_'
            } else {
                c
            }
        })
        .collect();
    out = out.replace("..", "__");
    if out.len() > MAX {
        let mut end = MAX;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    if out.is_empty() {
        out.push('_');
    }
    (out != value).then_some(out)
}

/// An artifact name made a relative path inside the workspace whatever its parts
/// are: empty and `.` components dropped, `..` made `__`, NUL made `_`, each component
/// short enough for the file system.
pub fn contained_name(name: &str) -> String {
    const MAX: usize = 240;
    let mut parts: Vec<String> = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => parts.push("__".into()),
            other => {
                let mut part = other.replace('\0', "_");
                if part.len() > MAX {
                    let mut end = MAX;
                    while !part.is_char_boundary(end) {
                        end -= 1;
                    }
                    part.truncate(end);
                }
                parts.push(part);
            }
        }
    }
    match parts.as_slice() {
        [] => "_".into(),
        _ => parts.join("/"),
    }
}

/// Write to a temporary file, fsync it, rename over the target, fsync the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    {
        // A leftover (or planted) temporary file, possibly a link, is replaced, not followed.
        let _ = std::fs::remove_file(&tmp);
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
