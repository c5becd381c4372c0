//! The run directory. A run has two areas:
//!
//! - the **workspace** (user view): the tools' working directory, artifacts, logs; what
//!   Docker mounts and `exists()` see. Every access on a workflow's behalf goes through
//!   [`rondo_workspace::Workspace`].
//! - the **system area**: `run.json`, `events.jsonl` (prompts, replies and tool calls are
//!   recorded there), `state.json`, `whiteboard.md`, install logs. Tools cannot write it.
//!
//! Without `--workspace`: `runs/<id>/` is the system area and `runs/<id>/workspace/` the
//! workspace. With `--workspace DIR`: DIR is the workspace and `DIR/.rondo/runs/<id>/` the
//! system area (`.rondo` is never reached through the workspace).
//!
//! A run folder names nothing in itself by an absolute path: its own workspace is
//! `workspace`, relative to it, so a moved or copied run folder works where it is.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::clock;
use super::commit::Job;
use super::events::{Entry, Event};
use super::memory::MemoryValue;
pub use super::state::{ARTIFACT_KEY, ROOT_KEY};
use super::state::{Position, RunState, Status, Totals};
use crate::compile::Workflow;

/// Where a run is, as `run.json` says: `queued` only in what `rondo serve` shows of a run
/// waiting for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Finished,
    Interrupted,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `run.json`: what ran, with which inputs and providers (never keys), and how it ended.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
    pub status: RunStatus,
    pub exit: Option<String>,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub totals: Totals,
    /// The run's workspace: its own, `workspace` (relative to the run folder), or the
    /// `--workspace` folder (absolute, with `outside_workspace`). Runs from before relative
    /// paths recorded an absolute path in both cases, runs from before the split nothing
    /// (their workspace was the run folder itself). Read it through [`Layout::of`].
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// The workspace is an outside folder (`--workspace`), which a moved or copied run
    /// folder does not carry with it.
    #[serde(default)]
    pub outside_workspace: bool,
    /// Unique to this run: tells it from a later run that reused its id.
    #[serde(default)]
    pub run_uid: Option<String>,
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

    /// The layout of an existing run, from its `run.json` and where its folder is now
    /// (a damaged `workspace` reads as the run's own one).
    pub fn of(system: &Path, info: &RunInfo) -> Layout {
        Self::resolve(system, info).unwrap_or_else(|_| Layout {
            system: system.to_path_buf(),
            workspace: system.join(WORKSPACE_DIR),
        })
    }

    /// Where an existing run works now. Its own workspace is inside its folder, wherever
    /// that was moved or copied to; a `--workspace` folder is the one the run folder lies
    /// in (`DIR/.rondo/runs/<id>`), else (the run folder was taken out of it) the one
    /// recorded. An absolute `workspace` of an older run that names a `workspace` folder
    /// of a run folder of the same name was its own.
    pub fn resolve(system: &Path, info: &RunInfo) -> Result<Layout, String> {
        let at = |workspace: PathBuf| Layout {
            system: system.to_path_buf(),
            workspace,
        };
        let Some(recorded) = &info.workspace else {
            return Ok(at(system.to_path_buf()));
        };
        if recorded.is_relative() {
            let plain = recorded
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
            if info.outside_workspace || !plain {
                return Err(format!(
                    "{}: damaged run.json: workspace {:?} is not a folder of the run",
                    system.display(),
                    recorded
                ));
            }
            return Ok(at(system.join(recorded)));
        }
        if !info.outside_workspace && names_own_workspace(system, recorded) {
            return Ok(at(system.join(WORKSPACE_DIR)));
        }
        Ok(at(
            enclosing_workspace(system).unwrap_or_else(|| recorded.clone())
        ))
    }
}

/// What resuming the run in `system` should tell first: that it works in an outside
/// folder (its `--workspace`), not in its run folder.
pub fn outside_workspace_note(system: &Path, info: &RunInfo) -> Option<String> {
    let workspace = Layout::of(system, info).workspace;
    (!workspace.starts_with(system)).then(|| {
        format!(
            "run {} works in the outside folder {} (its --workspace), not in its run folder",
            info.run_id,
            workspace.display()
        )
    })
}

/// A run of a runs folder, as `rondo runs` lists it.
pub struct ListedRun {
    pub dir: PathBuf,
    pub info: RunInfo,
    /// Steps taken by its last checkpoint (0 without one).
    pub steps: u64,
}

/// The runs in `root` (the folders with a readable `run.json`), oldest first.
pub fn list_runs(root: &Path) -> std::io::Result<Vec<ListedRun>> {
    let mut runs: Vec<ListedRun> = std::fs::read_dir(root)?
        .flatten()
        .filter_map(|entry| {
            let dir = entry.path();
            let info = read_info(&dir).ok()?;
            let steps = read_checkpoint(&dir)
                .ok()
                .and_then(|s| s["step"].as_u64())
                .unwrap_or(0);
            Some(ListedRun { dir, info, steps })
        })
        .collect();
    runs.sort_by(|a, b| a.info.started_at.cmp(&b.info.started_at));
    Ok(runs)
}

/// The folder whose system area holds `system` (`DIR` of `DIR/.rondo/runs/<id>`).
fn enclosing_workspace(system: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(system).ok()?;
    let runs = real.parent()?;
    let area = runs.parent()?;
    (runs.file_name()? == "runs" && area.file_name()? == rondo_workspace::SYSTEM_DIR)
        .then(|| area.parent().map(Path::to_path_buf))
        .flatten()
}

/// Whether an absolute path an older `run.json` recorded was the run's own workspace:
/// `<runs>/<name>/workspace` for a run folder named `<name>`.
fn names_own_workspace(system: &Path, recorded: &Path) -> bool {
    let name = std::fs::canonicalize(system)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_os_string()))
        .or_else(|| system.file_name().map(|n| n.to_os_string()));
    recorded.file_name().is_some_and(|n| n == WORKSPACE_DIR)
        && recorded.parent().and_then(Path::file_name) == name.as_deref()
}

/// A run whose workspace is an outside folder resumes there only when that folder's
/// system area holds no other records under the run's id: another run that reused the
/// id, or the original of which this run folder is a copy (resuming the copy would work
/// on the original's files). The folder must still exist: it is never made afresh.
pub fn check_outside_workspace(
    system: &Path,
    info: &RunInfo,
    layout: &Layout,
) -> Result<(), String> {
    if layout.workspace.starts_with(system) {
        return Ok(());
    }
    let dir = layout.workspace.display();
    if !layout.workspace.is_dir() {
        return Err(format!(
            "run {} works in the outside folder {dir} (its --workspace), which is gone; \
             resuming would start over in an empty folder",
            info.run_id
        ));
    }
    let holder = runs_in_workspace(&layout.workspace).join(&info.run_id);
    if std::fs::symlink_metadata(holder.join(RUN_INFO)).is_err() || same_folder(&holder, system) {
        return Ok(());
    }
    let theirs = read_info(&holder).ok();
    let theirs_uid = theirs.as_ref().and_then(|i| i.run_uid.as_deref());
    if theirs.is_some() && theirs_uid == info.run_uid.as_deref() {
        return Err(format!(
            "{} is a copy of run {}, whose records are in {}: a copy of a run that works in \
             an outside folder ({dir}) would work on the original's files; resume the \
             original (`rondo resume {}`)",
            system.display(),
            info.run_id,
            holder.display(),
            holder.display()
        ));
    }
    let started = theirs.map_or_else(String::new, |i| format!(", started {}", i.started_at));
    Err(format!(
        "run {} works in the outside folder {dir} (its --workspace), which now holds the \
         records of another run with the same id ({}{started}): resuming would mix the two \
         runs' files. Move that run's folder away first, or leave this run as it is",
        info.run_id,
        holder.display()
    ))
}

/// Whether two paths name the same folder (same device and inode).
fn same_folder(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// A new run's unique id: 128 random bits, in hex.
pub fn new_run_uid() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    // SAFETY: `bytes` is a writable buffer of exactly the length passed.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        use std::io::Read;
        File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    }
    Ok(hex::encode(bytes))
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

/// The run's records. The journal (`events.jsonl`) is the source of truth: every step
/// appends its events and a `checkpoint` record (what the step changed in the state), then
/// one `fdatasync`. `state.json` is a snapshot the journal is replayed from, rewritten at
/// start, every [`SNAPSHOT_EVERY`] steps and when the run stops.
pub struct RunDir {
    pub path: PathBuf,
    events: BufWriter<File>,
    /// The journal's file again, for the committer to sync while the run goes on.
    journal: std::sync::Arc<File>,
    /// The run folder, held open: `state.json` and `run.json` are replaced through it, so
    /// a tool that takes the permissions of a folder above it away (`chmod 000` on a
    /// `--workspace` it owns) cannot lock the run out of its records.
    records: std::sync::Arc<rondo_workspace::Workspace>,
    seq: u64,
    /// The time written on the last line (ms since the epoch).
    last_ms: u64,
    /// The records this journal writes itself (checkpoints, append lengths), kept for
    /// the run's subscribers once they ask (see [`RunDir::keep_own_records`]).
    own_records: Option<Vec<Entry>>,
    /// The state of the last checkpoint record, to journal only what changed.
    last: Option<Last>,
    since_snapshot: u64,
    /// Opened to resume: its journal already holds records this process did not count,
    /// so a stop takes a snapshot (the next resume reads from there).
    resumed: bool,
    /// Artifacts (names in the workspace) written without fsync since the last snapshot:
    /// synced before it, through the workspace's confinement.
    unsynced: Vec<String>,
    /// The run's workspace, opened only to sync artifacts (most runs write none).
    workspace: PathBuf,
    /// `run.json` of a run whose start was not waited for (see
    /// [`announce_later`](RunDir::announce_later)), written by the first checkpoint
    /// that acknowledges a step.
    announce: Option<Job>,
}

struct Last {
    /// Every field but the four below, serialized (journal offset left out).
    small: Value,
    path_len: usize,
    memory: Vec<MemoryValue>,
    outputs: std::collections::BTreeMap<usize, Value>,
    inputs: Vec<Value>,
}

impl Last {
    fn of(state: &RunState, small: Value) -> Last {
        Last {
            small,
            path_len: state.path.len(),
            memory: state.memory.clone(),
            outputs: state.outputs.clone(),
            inputs: state.inputs.clone(),
        }
    }

    fn remember(&mut self, state: &RunState, small: Value) {
        self.small = small;
        self.path_len = state.path.len();
        if self.memory.len() != state.memory.len() {
            self.memory = state.memory.clone();
        }
        if self.inputs != state.inputs {
            self.inputs = state.inputs.clone();
        }
        for (i, v) in state.memory.iter().enumerate() {
            if self.memory.get(i) != Some(v) {
                self.memory[i] = v.clone();
            }
        }
        self.outputs.retain(|k, _| state.outputs.contains_key(k));
        for (k, v) in &state.outputs {
            if self.outputs.get(k) != Some(v) {
                self.outputs.insert(*k, v.clone());
            }
        }
    }
}

/// The state's fields but the growing and the large ones (path, memory, outputs, inputs)
/// and the journal's own length, serialized: those are compared in place, never
/// serialized whole, so a step costs what it changed, not the run's size.
fn small_fields(state: &mut RunState) -> std::io::Result<Value> {
    let path = std::mem::take(&mut state.path);
    let memory = std::mem::take(&mut state.memory);
    let outputs = std::mem::take(&mut state.outputs);
    let inputs = std::mem::take(&mut state.inputs);
    let small = serde_json::to_value(&*state);
    state.path = path;
    state.memory = memory;
    state.outputs = outputs;
    state.inputs = inputs;
    let mut small = small?;
    if let Some(fields) = small.as_object_mut() {
        for key in ["path", "memory", "outputs", "inputs"] {
            fields.remove(key);
        }
        if let Some(lengths) = fields
            .get_mut("file_lengths")
            .and_then(Value::as_object_mut)
        {
            lengths.remove(JOURNAL);
        }
    }
    Ok(small)
}

/// What changed since `last`: the small fields' [`diff`], the roles appended to the path,
/// and the memory slots, outputs and inputs that differ.
fn delta(
    last: &Last,
    state: &RunState,
    small: &Value,
) -> serde_json::Result<serde_json::Map<String, Value>> {
    let mut delta = match diff(&last.small, small) {
        Value::Object(d) => d,
        _ => serde_json::Map::new(),
    };
    if state.path.len() > last.path_len {
        delta.insert(
            "+path".into(),
            serde_json::json!(state.path[last.path_len..]),
        );
    }
    let changed: serde_json::Map<String, Value> = state
        .memory
        .iter()
        .enumerate()
        .filter(|(i, v)| last.memory.get(*i) != Some(*v))
        .map(|(i, v)| Ok((i.to_string(), serde_json::to_value(v)?)))
        .collect::<serde_json::Result<_>>()?;
    if state.memory.len() != last.memory.len() {
        delta.insert("memory".into(), serde_json::to_value(&state.memory)?);
    } else if !changed.is_empty() {
        delta.insert("~memory".into(), Value::Object(changed));
    }
    let changed: serde_json::Map<String, Value> = state
        .outputs
        .iter()
        .filter(|(k, v)| last.outputs.get(*k) != Some(*v))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    if last.outputs.keys().any(|k| !state.outputs.contains_key(k)) {
        delta.insert("outputs".into(), serde_json::to_value(&state.outputs)?);
    } else if !changed.is_empty() {
        delta.insert("~outputs".into(), Value::Object(changed));
    }
    if state.inputs != last.inputs {
        delta.insert("inputs".into(), serde_json::to_value(&state.inputs)?);
    }
    Ok(delta)
}

/// Checkpoint records between two snapshots: bounds what a resume replays.
pub const SNAPSHOT_EVERY: u64 = 256;

const JOURNAL: &str = "events.jsonl";
const RUN_INFO: &str = "run.json";
const STATE: &str = "state.json";

/// The run's record files. None is ever reached through a symbolic link.
const RECORDS: [&str; 3] = [RUN_INFO, JOURNAL, STATE];

/// Largest `run.json` read.
const MAX_INFO_BYTES: u64 = 64 << 20;
/// Largest `state.json` read.
const MAX_STATE_BYTES: u64 = 1 << 30;

/// Opens one of the run's records: a regular file, not through a symbolic link, without
/// blocking on a FIFO.
fn open_record(dir: &Path, name: &str, write: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(name))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(e.kind(), format!("{name} {LINKED}")),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name} is not a regular file"),
        ));
    }
    Ok(file)
}

const LINKED: &str = "is a symbolic link: a run's records are never links, so it is refused";

/// A record's bytes, at most `max`.
fn read_record_bytes(dir: &Path, name: &str, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_record(dir, name, false)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{name} is larger than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// A record's text, at most `max` bytes.
fn read_record(dir: &Path, name: &str, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_record_bytes(dir, name, max)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Refuses a run folder whose records are symbolic links (or anything but files): a
/// resume would read, cut and append to whatever they point to.
pub fn refuse_linked_records(dir: &Path) -> Result<(), String> {
    for name in RECORDS {
        match std::fs::symlink_metadata(dir.join(name)) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!("{}: {name} {LINKED}", dir.display()));
            }
            Ok(m) if !m.is_file() => {
                return Err(format!("{}: {name} is not a regular file", dir.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

impl RunDir {
    /// A new run, in a folder that exists (its system area). A journal left by a start-up
    /// that was killed before `run.json` was written belongs to no run and is discarded.
    pub fn create(path: &Path, workspace: &Path) -> std::io::Result<RunDir> {
        if std::fs::symlink_metadata(path.join(JOURNAL)).is_ok() {
            open_record(path, JOURNAL, true)?.set_len(0)?;
        }
        Self::open_at(path, workspace, Some(0))
    }

    /// Opens an existing run directory to append to it (resume).
    pub fn open(path: &Path, workspace: &Path) -> std::io::Result<RunDir> {
        Self::open_at(path, workspace, None)
    }

    /// Opens the journal; `seq` is its count of lines when known (an empty journal).
    fn open_at(path: &Path, workspace: &Path, seq: Option<u64>) -> std::io::Result<RunDir> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path.join(JOURNAL))?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{JOURNAL} is not a regular file"),
            ));
        }
        let resumed = seq.is_none();
        let seq = seq.unwrap_or_else(|| {
            read_record_bytes(path, JOURNAL, u64::MAX).map_or(0, |b| {
                let ended = b.last().is_none_or(|&c| c == b'\n');
                (b.iter().filter(|&&c| c == b'\n').count() + usize::from(!ended)) as u64
            })
        });
        Ok(RunDir {
            path: path.to_path_buf(),
            journal: std::sync::Arc::new(file.try_clone()?),
            records: std::sync::Arc::new(rondo_workspace::Workspace::open(path)?),
            events: BufWriter::with_capacity(64 * 1024, file),
            seq,
            last_ms: 0,
            own_records: None,
            last: None,
            since_snapshot: 0,
            resumed,
            unsynced: Vec::new(),
            workspace: workspace.to_path_buf(),
            announce: None,
        })
    }

    pub fn event(&mut self, event: &Event) -> std::io::Result<()> {
        self.append(serde_json::to_value(event)?)?;
        if let Some(own) = &mut self.own_records {
            own.push(Entry {
                seq: self.seq,
                ts: clock::rfc3339(self.last_ms),
                event: event.clone(),
            });
        }
        Ok(())
    }

    /// From now on, keeps each record the journal writes itself, for
    /// [`RunDir::take_own_records`].
    pub fn keep_own_records(&mut self) {
        self.own_records.get_or_insert_with(Vec::new);
    }

    /// The records the journal wrote itself since the last call.
    pub fn take_own_records(&mut self) -> Vec<Entry> {
        self.own_records
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Appends a serialized [`Event`] (secrets already replaced) as the next line: `seq`,
    /// `ts`, then its fields. Written straight out, not assembled into a map first: this
    /// runs several times a step and was a third of a durable step's CPU time.
    pub(super) fn append(&mut self, event: Value) -> std::io::Result<()> {
        self.seq += 1;
        self.last_ms = clock::unix_ms();
        let w = &mut self.events;
        write!(w, "{{\"seq\":{},\"ts\":\"", self.seq)?;
        clock::write_rfc3339(w, self.last_ms)?;
        w.write_all(b"\"")?;
        if let Value::Object(fields) = &event {
            for (key, value) in fields {
                w.write_all(b",")?;
                serde_json::to_writer(&mut *w, key)?;
                w.write_all(b":")?;
                serde_json::to_writer(&mut *w, value)?;
            }
        }
        w.write_all(b"}\n")
    }

    /// The position (`seq`) and time (ms since the epoch) of the last line appended.
    pub fn last_line(&self) -> (u64, u64) {
        (self.seq, self.last_ms)
    }

    /// An artifact written without fsync: the journal record of its step is what makes
    /// the step durable; the file is synced before the next snapshot.
    pub fn written(&mut self, name: &str) {
        if !self.unsynced.iter().any(|n| n == name) {
            self.unsynced.push(name.to_string());
        }
    }

    /// Before the first append to a file the checkpoint does not know: its length now,
    /// durable before the append, so a resume can cut a re-run step's line away.
    pub fn append_opened(&mut self, name: &str, len: u64) -> std::io::Result<()> {
        self.event(&Event::AppendOpened {
            file: name.to_string(),
            len,
        })?;
        self.events.flush()?;
        self.events.get_ref().sync_data()
    }

    /// Records the step: one append to the journal, and every [`SNAPSHOT_EVERY`] records
    /// a snapshot instead. The step is durable once the returned job is done (the
    /// journal's `fdatasync`, or the snapshot's ordered writes): see
    /// [`commit`](super::commit). A run that stops ends with a record too, not a
    /// snapshot (one file, rename and sync fewer for every run, and a batch of short
    /// runs is mostly that), but the artifacts written since the last snapshot are
    /// synced with it: a finished run's files are all durable. A resumed run that stops
    /// takes a snapshot, so that a run resumed again and again is never replayed from
    /// its start.
    pub fn checkpoint(&mut self, state: &mut RunState) -> std::io::Result<Job> {
        let small = small_fields(state)?;
        let stopping = state.status != Status::Running;
        let job = match &self.last {
            _ if self.since_snapshot >= SNAPSHOT_EVERY || (stopping && self.resumed) => {
                self.snapshot(state, small)?
            }
            None => self.full_record(state, small)?,
            Some(last) if state.path.len() >= last.path_len => {
                let delta = delta(last, state, &small)?;
                self.delta_record(state, small, delta)?
            }
            // The path got shorter (a resumed run's rewind): only a snapshot says so.
            Some(_) => self.snapshot(state, small)?,
        };
        let job = match job {
            Job::SyncData(journal) if stopping => self.artifacts_then(Job::SyncData(journal)),
            job => job,
        };
        Ok(self.announcing(state, job))
    }

    /// `then`, after the sync of the artifacts written without one since the last
    /// snapshot (most runs write none: then `then` alone).
    fn artifacts_then(&mut self, then: Job) -> Job {
        if self.unsynced.is_empty() {
            return then;
        }
        let root = self.workspace.clone();
        let unsynced = std::mem::take(&mut self.unsynced);
        Job::Ordered(Box::new(move || {
            sync_artifacts(&root, unsynced)?;
            then.run()
        }))
    }

    /// A run started without waiting for its records
    /// ([`Interpreter::start_overlapped`](super::Interpreter::start_overlapped)) has no
    /// `run.json` yet: `run_json`, the job that writes it, is done by the first
    /// checkpoint that acknowledges a step, after that step's journal sync.
    pub fn announce_later(&mut self, run_json: Job) {
        self.announce = Some(run_json);
    }

    /// `job`, followed by the start's `run.json` when it is still to be written: a step
    /// is acknowledged only once the run it belongs to exists. A run that stops writes
    /// its final `run.json` next, and a step that exits is synced by the end's
    /// checkpoint, which follows at once: neither needs the start's.
    fn announcing(&mut self, state: &RunState, job: Job) -> Job {
        if state.status != Status::Running {
            self.announce = None;
            return job;
        }
        if matches!(state.position, Position::Exited { .. }) {
            return job;
        }
        match self.announce.take() {
            Some(info) => job.then(info),
            None => job,
        }
    }

    /// A checkpoint record of what changed since the last one.
    fn delta_record(
        &mut self,
        state: &RunState,
        small: Value,
        delta: serde_json::Map<String, Value>,
    ) -> std::io::Result<Job> {
        self.event(&Event::Checkpoint { delta })
            .and_then(|()| self.events.flush())
            .map_err(|e| naming(JOURNAL, e))?;
        self.since_snapshot += 1;
        if let Some(last) = self.last.as_mut() {
            last.remember(state, small);
        }
        Ok(Job::SyncData(self.journal.clone()))
    }

    /// `state.json`, the whole state, written after the journal's sync (and the sync of
    /// the artifacts written since the last one) by the returned job.
    fn snapshot(&mut self, state: &mut RunState, small: Value) -> std::io::Result<Job> {
        self.events.flush().map_err(|e| naming(JOURNAL, e))?;
        let events_len = self.events.get_ref().metadata()?.len();
        state.file_lengths.insert(JOURNAL.into(), events_len);
        let snapshot = serde_json::to_vec_pretty(state)?;
        let journal = self.journal.clone();
        let records = self.records.clone();
        let root = self.workspace.clone();
        let unsynced = std::mem::take(&mut self.unsynced);
        // A run that stops writes `run.json` next, whose folder sync covers this rename.
        let stopping = state.status != Status::Running;
        let job = Job::Ordered(Box::new(move || {
            sync_artifacts(&root, unsynced)?;
            journal.sync_data().map_err(|e| naming(JOURNAL, e))?;
            let written = if stopping {
                records.write_atomic_folder_later(STATE, &snapshot)
            } else {
                records.write_atomic(STATE, &snapshot)
            };
            written.map_err(|e| naming(STATE, e))
        }));
        self.since_snapshot = 0;
        self.last = Some(Last::of(state, small));
        Ok(job)
    }

    /// The first checkpoint of a running run (started or resumed): the whole state as a
    /// journal record (it holds `run_id`, which no delta does). A run's start then costs
    /// one journal sync instead of a snapshot's three (its temporary file, the folder).
    fn full_record(&mut self, state: &RunState, small: Value) -> std::io::Result<Job> {
        let mut delta = match small.clone() {
            Value::Object(fields) => fields,
            _ => serde_json::Map::new(),
        };
        delta.insert("path".into(), serde_json::to_value(&state.path)?);
        delta.insert("memory".into(), serde_json::to_value(&state.memory)?);
        delta.insert("outputs".into(), serde_json::to_value(&state.outputs)?);
        delta.insert("inputs".into(), serde_json::to_value(&state.inputs)?);
        self.event(&Event::Checkpoint { delta })
            .and_then(|()| self.events.flush())
            .map_err(|e| naming(JOURNAL, e))?;
        self.since_snapshot += 1;
        self.last = Some(Last::of(state, small));
        Ok(Job::SyncData(self.journal.clone()))
    }

    /// Cuts `events.jsonl` and append-mode artifacts back to their checkpointed length.
    pub fn rewind(layout: &Layout, state: &RunState) -> std::io::Result<()> {
        let mut lengths = state.file_lengths.clone();
        let journal = layout.system.join(JOURNAL);
        // Files first appended to by the unfinished step: cut back to their length then.
        if let Some(&start) = state.file_lengths.get(JOURNAL)
            && let Ok(text) = read_record_bytes(&layout.system, JOURNAL, u64::MAX)
            && let Some(tail) = text.get(start as usize..)
        {
            for line in tail.split(|&b| b == b'\n') {
                if let Ok(e) = serde_json::from_slice::<Value>(line)
                    && let Some(Event::AppendOpened { file, len }) = Event::from_line(&e)
                {
                    lengths.entry(file).or_insert(len);
                }
            }
        }
        let workspace = rondo_workspace::Workspace::deferred(&layout.workspace)?;
        for (key, len) in &lengths {
            if let Some((root, name)) = key
                .strip_prefix(ROOT_KEY)
                .and_then(|k| k.split_once('/'))
                .and_then(|(id, name)| Some((state.inputs.get(id.parse::<usize>().ok()?)?, name)))
                .and_then(|(dir, name)| Some((artifact_root(dir.as_str()?, layout).ok()?, name)))
            {
                if root.file_len(name).is_ok_and(|now| now > *len) {
                    root.truncate(name, *len)?;
                }
                continue;
            }
            // Only ever cut: a file shorter than recorded (lost with the page cache in a
            // power failure) is not padded with zeros.
            match key.strip_prefix(ARTIFACT_KEY) {
                Some(name) if workspace.file_len(name).is_ok_and(|now| now > *len) => {
                    workspace.truncate(name, *len)?;
                }
                None if key == JOURNAL
                    && std::fs::symlink_metadata(&journal).is_ok_and(|m| m.len() > *len) =>
                {
                    open_record(&layout.system, JOURNAL, true)?.set_len(*len)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.events.flush()
    }

    /// Replaces `run.json` atomically. When the folder refuses the temporary file (its
    /// permissions changed under the run, the disk is full), the record is rewritten in
    /// place instead: a run never ends with `run.json` still saying `running`.
    pub fn write_info(&self, info: &RunInfo) -> std::io::Result<()> {
        self.info_job(info)?.run()
    }

    /// [`write_info`](Self::write_info) as a job for the committer. Its folder sync also
    /// makes the last snapshot's rename durable (see [`checkpoint`](Self::checkpoint)).
    pub fn info_job(&self, info: &RunInfo) -> std::io::Result<Job> {
        let bytes = serde_json::to_vec_pretty(info)?;
        let records = self.records.clone();
        Ok(Job::Ordered(Box::new(move || {
            let atomic = records.write_atomic(RUN_INFO, &bytes);
            let Err(e) = atomic else {
                return Ok(());
            };
            let in_place = records.rewrite(RUN_INFO, &bytes);
            in_place.map_err(|_| e)?;
            let _ = records.sync_folder();
            Ok(())
        })))
    }
}

/// Syncs the artifacts `names` of the workspace at `root`, through its confinement.
fn sync_artifacts(root: &Path, names: Vec<String>) -> std::io::Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let workspace = rondo_workspace::Workspace::deferred(root)?;
    for name in names {
        workspace
            .sync(&name)
            .map_err(|e| naming(&format!("artifact {name}"), e))?;
    }
    Ok(())
}

/// An error that says which file it was about.
fn naming(file: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{file}: {e}"))
}

/// The folder a `path` input names, as the confinement of the artifacts written there
/// (created when missing). Never the run's records: a folder inside the system area (but
/// not in the workspace it holds) or inside any `.rondo` folder is refused.
pub fn artifact_root(dir: &str, layout: &Layout) -> std::io::Result<rondo_workspace::Workspace> {
    let refused = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{dir}: {why}"),
        )
    };
    let path = Path::new(dir);
    if !path.is_absolute() {
        return Err(refused("not an absolute path"));
    }
    let workspace = rondo_workspace::Workspace::create(path)?;
    let real = workspace.root();
    let real_of = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if (real.starts_with(real_of(&layout.system)) && !real.starts_with(real_of(&layout.workspace)))
        || real
            .components()
            .any(|c| c.as_os_str() == rondo_workspace::SYSTEM_DIR)
    {
        return Err(refused("inside a run's records"));
    }
    Ok(workspace)
}

/// A run's journal as this version reads it: its events, and where the lines it does not
/// read are.
#[derive(Debug, Default)]
pub struct Journal {
    pub entries: Vec<Entry>,
    pub unread: Vec<Unread>,
}

/// A journal line this version does not read: an event of a kind it does not know (a
/// later version's), one whose fields do not fit its kind, or a damaged line.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Unread {
    /// Its line number in `events.jsonl`, 1 the first.
    pub line: u64,
    pub seq: Option<u64>,
    /// The line's `event`, when it names one.
    pub kind: Option<String>,
    /// Why it was not read (at most [`MAX_REASON`] bytes).
    pub reason: String,
}

/// One line of the journal.
#[derive(Debug)]
pub enum JournalLine {
    Entry(Entry),
    Unread(Unread),
}

/// A journal line longer than this is not read (and not held): it is reported [`Unread`].
pub const MAX_JOURNAL_LINE: usize = 64 << 20;
/// The longest reason an [`Unread`] line gives.
pub const MAX_REASON: usize = 200;

/// A run's journal, read line by line (never whole). A last line without its newline that
/// does not parse is the torn write of a killed process: left out, not reported.
pub fn journal_lines(dir: &Path) -> std::io::Result<JournalLines> {
    Ok(JournalLines {
        reader: std::io::BufReader::new(open_record(dir, JOURNAL, false)?),
        line: 0,
        buf: Vec::new(),
        tail: false,
    })
}

/// The journal at `path`: a run folder's, or a journal file (`events.jsonl` copied
/// elsewhere).
pub fn journal_lines_at(path: &Path) -> std::io::Result<JournalLines> {
    if path.is_dir() {
        return journal_lines(path);
    }
    let (dir, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => (
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            name,
        ),
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file",
            ));
        }
    };
    Ok(JournalLines {
        reader: std::io::BufReader::new(open_record(dir, name, false)?),
        line: 0,
        buf: Vec::new(),
        tail: false,
    })
}

/// The lines of a journal, as [`journal_lines`] reads them.
pub struct JournalLines {
    reader: std::io::BufReader<File>,
    line: u64,
    buf: Vec<u8>,
    /// Following a journal that is being written: a line without its newline is not
    /// finished yet, kept and completed by the next read.
    tail: bool,
}

impl JournalLines {
    /// Reads the journal as it is written: a last line without its newline is waited for
    /// (returned once complete), never taken for a torn one.
    pub fn following(mut self) -> Self {
        self.tail = true;
        self
    }

    /// The next line whose `seq` is past `after`; `None` at the end of what is written.
    pub fn next_after(&mut self, after: u64) -> Option<std::io::Result<JournalLine>> {
        loop {
            match self.next()? {
                Ok(JournalLine::Entry(e)) if e.seq <= after => {}
                Ok(JournalLine::Unread(u)) if u.seq.is_some_and(|s| s <= after) => {}
                other => return Some(other),
            }
        }
    }
}

impl Iterator for JournalLines {
    type Item = std::io::Result<JournalLine>;

    fn next(&mut self) -> Option<Self::Item> {
        use std::io::{BufRead, Read};
        loop {
            // `buf` holds nothing, or (following) the begun last line, completed here.
            let room = (MAX_JOURNAL_LINE as u64 + 1).saturating_sub(self.buf.len() as u64);
            if let Err(e) = (&mut self.reader)
                .take(room)
                .read_until(b'\n', &mut self.buf)
            {
                return Some(Err(e));
            }
            if self.buf.is_empty() {
                return None;
            }
            let ended = self.buf.last() == Some(&b'\n');
            let overlong = !ended && self.buf.len() > MAX_JOURNAL_LINE;
            if !ended && !overlong && self.tail {
                return None;
            }
            self.line += 1;
            if overlong {
                self.buf.clear();
                if let Err(e) = self.skip_line() {
                    return Some(Err(e));
                }
                return Some(Ok(JournalLine::Unread(Unread {
                    line: self.line,
                    seq: None,
                    kind: None,
                    reason: format!("the line is longer than {MAX_JOURNAL_LINE} bytes"),
                })));
            }
            let text = self.buf.trim_ascii();
            let read = if text.is_empty() {
                None
            } else {
                Some(match serde_json::from_slice::<Entry>(text) {
                    Ok(entry) => Some(JournalLine::Entry(entry)),
                    // A last line without its newline that does not parse: torn, left out.
                    Err(_) if !ended => None,
                    Err(e) => Some(JournalLine::Unread(unread(self.line, text, &e))),
                })
            };
            self.buf.clear();
            match read {
                None => continue,
                Some(line) => return line.map(Ok),
            }
        }
    }
}

impl JournalLines {
    /// Skips the rest of an overlong line a buffer at a time, never holding it.
    fn skip_line(&mut self) -> std::io::Result<()> {
        use std::io::BufRead;
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return Ok(());
            }
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            self.reader.consume(take);
            if done {
                return Ok(());
            }
        }
    }
}

/// Where a line that does not read as an [`Entry`] is, what it names, and why, bounded.
fn unread(line: u64, text: &[u8], error: &serde_json::Error) -> Unread {
    let value = serde_json::from_slice::<Value>(text).ok();
    let field = |name: &str| value.as_ref().and_then(|v| v.get(name));
    let kind = field("event").and_then(Value::as_str).map(bounded);
    let reason = match (&value, &kind) {
        (None, _) => format!("not JSON: {error}"),
        (Some(_), Some(k)) if !Event::KINDS.contains(&k.as_str()) => {
            "an event of a kind this version does not know".to_string()
        }
        (Some(_), Some(_)) => format!("its fields do not fit its kind: {error}"),
        (Some(_), None) => format!("not an event: {error}"),
    };
    Unread {
        line,
        seq: field("seq").and_then(Value::as_u64),
        kind,
        reason: bounded(&reason),
    }
}

/// `text` cut to [`MAX_REASON`] bytes on a character boundary.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_REASON {
        return text.to_string();
    }
    let mut end = MAX_REASON;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A run's whole journal (see [`journal_lines`]).
pub fn read_journal(dir: &Path) -> std::io::Result<Journal> {
    let mut journal = Journal::default();
    for line in journal_lines(dir)? {
        match line? {
            JournalLine::Entry(e) => journal.entries.push(e),
            JournalLine::Unread(u) => journal.unread.push(u),
        }
    }
    Ok(journal)
}

pub fn read_info(dir: &Path) -> Result<RunInfo, String> {
    let text = match read_record(dir, RUN_INFO, MAX_INFO_BYTES) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_run(dir)),
        Err(e) => return Err(format!("{}: cannot read run.json: {e}", dir.display())),
    };
    serde_json::from_str(&text).map_err(|e| format!("{}: damaged run.json: {e}", dir.display()))
}

/// What a folder without `run.json` is. One that holds only what a start-up leaves (the
/// folder claimed for the run id, a journal, a first checkpoint, the workspace) is a run
/// stopped before it began, or (an eval's case, an ask) before its first step was
/// acknowledged: nothing of it was kept.
fn no_run(dir: &Path) -> String {
    let shown = dir.display();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return format!("{shown} is not a run directory: there is no such folder");
    };
    let start_up = [
        JOURNAL,
        STATE,
        WORKSPACE_DIR,
        ".events.jsonl.tmp",
        ".state.json.tmp",
    ];
    let left_by_start_up = entries
        .flatten()
        .all(|e| start_up.iter().any(|n| e.file_name() == *n));
    if !left_by_start_up {
        return format!("{shown} is not a run directory (it has no run.json)");
    }
    let name = dir
        .file_name()
        .map_or_else(|| "ID".into(), |n| n.to_string_lossy().into_owned());
    let place = match enclosing_workspace(dir) {
        Some(workspace) => format!("--workspace {}", workspace.display()),
        None => {
            let parent = std::fs::canonicalize(dir)
                .ok()
                .and_then(|d| d.parent().map(Path::to_path_buf))
                .unwrap_or_else(|| PathBuf::from("runs"));
            format!("--run-dir {}", parent.display())
        }
    };
    format!(
        "{shown} is not a run directory: its run never started (it was stopped before \
         the run's first checkpoint and run.json were durable). No step of it was kept; \
         there is nothing to resume. Start it again with `rondo run WORKFLOW {place} --run-id {name}` (the id \
         is free), or leave `--run-id` out for a fresh one"
    )
}

/// The state at the last checkpoint, its memory typed by `workflow`'s declarations.
pub fn read_state(dir: &Path, workflow: &Workflow) -> Result<RunState, String> {
    RunState::restore(read_checkpoint(dir)?, workflow)
        .map_err(|e| format!("{}: damaged {}: {e}", dir.display(), checkpoint_files(dir)))
}

/// Where a run's checkpoint is read from, to name in a report of its damage.
pub fn checkpoint_files(dir: &Path) -> &'static str {
    if dir.join(STATE).exists() {
        "checkpoint (state.json and the journal's records after it)"
    } else {
        "checkpoint (the journal's checkpoint records)"
    }
}

/// The state at the last checkpoint as JSON: the snapshot (`state.json`) with the
/// journal's checkpoint records after it applied. Its `events.jsonl` length is the end
/// of the last complete checkpoint record; anything after it belongs to an unfinished
/// step.
///
/// A run that has taken no snapshot yet has no `state.json`: its journal is replayed from
/// the start, where its first checkpoint record holds the whole state.
pub fn read_checkpoint(dir: &Path) -> Result<Value, String> {
    let no_checkpoint =
        |e: &dyn std::fmt::Display| format!("{}: no checkpoint ({e})", dir.display());
    let (mut state, start, snapshot) = match read_record(dir, STATE, MAX_STATE_BYTES) {
        Ok(text) => {
            let damaged =
                |e: serde_json::Error| format!("{}: damaged state.json: {e}", dir.display());
            let state: Value = serde_json::from_str(&text).map_err(damaged)?;
            let start = state["file_lengths"][JOURNAL].as_u64();
            (state, start, true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (Value::Object(Default::default()), Some(0), false)
        }
        Err(e) => return Err(no_checkpoint(&e)),
    };
    if let Some(start) = start {
        let end = replay_checkpoints(dir, start, &mut state)?;
        if !snapshot && state.get("run_id").is_none() {
            return Err(no_checkpoint(
                &"no state.json, and no whole checkpoint in the journal",
            ));
        }
        state["file_lengths"][JOURNAL] = Value::from(end);
    }
    Ok(state)
}

/// Applies the journal's checkpoint records after `start` to `state`; returns the end
/// of the last one. The journal is read a line at a time, each at most
/// [`MAX_JOURNAL_LINE`] bytes. A last line that does not read is the torn write of a
/// killed process (or what a power failure left) and belongs to the unfinished step; one
/// that does not read with a complete record after it is damage, and the run is refused
/// rather than replayed past it.
fn replay_checkpoints(dir: &Path, start: u64, state: &mut Value) -> Result<u64, String> {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let Ok(mut file) = open_record(dir, JOURNAL, false) else {
        return Ok(start);
    };
    let unreadable = |e: std::io::Error| format!("{}: cannot read the journal: {e}", dir.display());
    file.seek(SeekFrom::Start(start)).map_err(unreadable)?;
    let mut reader = std::io::BufReader::new(file);
    let mut end = start;
    let mut at = start;
    let mut line = Vec::new();
    // A line that did not read, kept until it is known not to be the last.
    let mut bad: Option<(u64, String)> = None;
    loop {
        line.clear();
        (&mut reader)
            .take(MAX_JOURNAL_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(unreadable)?;
        if line.is_empty() {
            return Ok(end);
        }
        let ended = line.last() == Some(&b'\n');
        if !ended && line.len() > MAX_JOURNAL_LINE {
            return Err(damaged_journal(
                dir,
                at,
                "a line longer than the journal's limit",
            ));
        }
        let line_at = at;
        at += line.len() as u64;
        let record = match serde_json::from_slice::<Value>(&line) {
            Ok(record) => record,
            Err(e) => {
                if let Some((offset, why)) = bad.take() {
                    return Err(damaged_journal(dir, offset, &why));
                }
                bad = Some((line_at, e.to_string()));
                continue;
            }
        };
        if let Some((offset, why)) = bad.take() {
            return Err(damaged_journal(dir, offset, &why));
        }
        if let Some(Event::Checkpoint { delta }) = Event::from_line(&record) {
            if delta.contains_key("run_id") {
                *state = Value::Object(delta);
            } else {
                apply_delta(state, &delta);
            }
            end = at;
        }
    }
}

fn damaged_journal(dir: &Path, offset: u64, why: &str) -> String {
    format!(
        "{}: events.jsonl is damaged at byte {offset} ({}), with records after it: the run \
         cannot be resumed past it, and nothing was changed",
        dir.display(),
        bounded(why)
    )
}

/// What changed between two states, field by field; a field that is a map or a list
/// of the same length records only its changed entries (`~field`), and the path only
/// the roles appended to it (`+path`).
fn diff(old: &Value, new: &Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return new.clone();
    };
    let mut delta = serde_json::Map::new();
    for (key, now) in new {
        let Some(before) = old.get(key) else {
            delta.insert(key.clone(), now.clone());
            continue;
        };
        if before == now {
            continue;
        }
        match (before, now) {
            (Value::Array(a), Value::Array(b)) if key == "path" && b.starts_with(a) => {
                delta.insert("+path".into(), Value::Array(b[a.len()..].to_vec()));
            }
            (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
                let changed: serde_json::Map<String, Value> = a
                    .iter()
                    .zip(b)
                    .enumerate()
                    .filter(|(_, (x, y))| x != y)
                    .map(|(i, (_, y))| (i.to_string(), y.clone()))
                    .collect();
                delta.insert(format!("~{key}"), Value::Object(changed));
            }
            (Value::Object(a), Value::Object(b)) if a.keys().all(|k| b.contains_key(k)) => {
                let changed: serde_json::Map<String, Value> = b
                    .iter()
                    .filter(|(k, v)| a.get(*k) != Some(*v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                delta.insert(format!("~{key}"), Value::Object(changed));
            }
            _ => {
                delta.insert(key.clone(), now.clone());
            }
        }
    }
    Value::Object(delta)
}

fn apply_delta(state: &mut Value, delta: &serde_json::Map<String, Value>) {
    let Value::Object(state) = state else {
        return;
    };
    for (key, change) in delta {
        if let Some(field) = key.strip_prefix('+') {
            if let (Some(Value::Array(list)), Value::Array(more)) = (state.get_mut(field), change) {
                list.extend(more.iter().cloned());
            }
        } else if let Some(field) = key.strip_prefix('~') {
            let Value::Object(entries) = change else {
                continue;
            };
            match state.get_mut(field) {
                Some(Value::Array(list)) => {
                    for (i, v) in entries {
                        if let Some(slot) = i.parse::<usize>().ok().and_then(|i| list.get_mut(i)) {
                            *slot = v.clone();
                        }
                    }
                }
                Some(Value::Object(map)) => {
                    for (k, v) in entries {
                        map.insert(k.clone(), v.clone());
                    }
                }
                _ => {}
            }
        } else {
            state.insert(key.clone(), change.clone());
        }
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

#[cfg(test)]
mod journal_tests {
    use super::*;

    fn journal(text: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(JOURNAL), text).unwrap();
        dir
    }

    const LINE: &str =
        r#"{"seq":1,"ts":"2026-01-01T00:00:00.000Z","event":"run_resumed","step":0}"#;

    fn checkpoint_line(seq: u64, step: u64) -> String {
        format!(
            r#"{{"seq":{seq},"ts":"2026-01-01T00:00:00.000Z","event":"checkpoint","delta":{{"step":{step}}}}}"#
        )
    }

    /// Without `state.json` the journal is read from its start: its whole-state record
    /// (the run's first checkpoint) is the base, the deltas after it apply, and a
    /// journal that has deltas only holds no checkpoint.
    #[test]
    fn without_a_snapshot_the_journal_from_its_first_whole_record_is_the_checkpoint() {
        let whole = r#"{"seq":2,"ts":"2026-01-01T00:00:00.000Z","event":"checkpoint","delta":{"run_id":"r","step":0,"path":[],"file_lengths":{}}}"#;
        let text = format!("{LINE}\n{whole}\n{}\n", checkpoint_line(3, 1));
        let dir = journal(text.as_bytes());
        let state = read_checkpoint(dir.path()).unwrap();
        assert_eq!(state["run_id"], "r");
        assert_eq!(state["step"], 1);
        assert_eq!(state["file_lengths"][JOURNAL], text.len() as u64);

        // A whole record after deltas (a resumed run's first checkpoint) replaces the state.
        let again = whole.replace("\"step\":0", "\"step\":7");
        let text = format!("{}\n{again}\n", checkpoint_line(1, 5));
        let dir = journal(text.as_bytes());
        std::fs::write(
            dir.path().join(STATE),
            r#"{"run_id": "r", "step": 0, "file_lengths": {"events.jsonl": 0}}"#,
        )
        .unwrap();
        assert_eq!(read_checkpoint(dir.path()).unwrap()["step"], 7);

        let dir = journal(format!("{}\n", checkpoint_line(1, 1)).as_bytes());
        let e = read_checkpoint(dir.path()).unwrap_err();
        assert!(e.contains("no checkpoint"), "{e}");
    }

    /// A record that does not read with complete records after it is damage: the run is
    /// refused, where a torn last line is the unfinished step's and left out.
    #[test]
    fn a_damaged_record_in_the_middle_of_the_journal_is_refused() {
        let torn = format!(
            "{}\n{}\n{{\"seq\":3,\"ev",
            checkpoint_line(1, 1),
            checkpoint_line(2, 2)
        );
        let damaged = format!(
            "{}\n{{not json}}\n{}\n",
            checkpoint_line(1, 1),
            checkpoint_line(3, 3)
        );
        for (text, expected) in [(torn, Ok(2)), (damaged, Err("damaged at byte"))] {
            let dir = journal(text.as_bytes());
            std::fs::write(
                dir.path().join(STATE),
                r#"{"step": 0, "file_lengths": {"events.jsonl": 0}}"#,
            )
            .unwrap();
            let read = read_checkpoint(dir.path());
            match (read, expected) {
                (Ok(state), Ok(step)) => assert_eq!(state["step"], step),
                (Err(e), Err(why)) => {
                    assert!(e.contains(why), "{e}");
                    let after = std::fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
                    assert_eq!(after, text, "the journal is left as it was");
                }
                (read, expected) => panic!("{read:?}, expected {expected:?}"),
            }
        }
    }

    /// Lines of a later version, lines whose fields do not fit, and lines that are not
    /// JSON are reported where they are, with a short reason; the lines around them read.
    #[test]
    fn unread_lines_are_located_and_their_reasons_bounded() {
        let long = "x".repeat(10_000);
        let text = format!(
            "{LINE}\n{{\"seq\":2,\"ts\":\"t\",\"event\":\"from_a_later_version\"}}\n\
             {{\"seq\":3,\"ts\":\"t\",\"event\":\"route\",\"from\":\"{long}\"}}\n\
             {long}\n\n{}\n",
            LINE.replace("\"seq\":1", "\"seq\":4")
        );
        let dir = journal(text.as_bytes());
        let read = read_journal(dir.path()).unwrap();
        assert_eq!(
            read.entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 4]
        );
        let at: Vec<(u64, Option<u64>, Option<&str>)> = read
            .unread
            .iter()
            .map(|u| (u.line, u.seq, u.kind.as_deref()))
            .collect();
        assert_eq!(
            at,
            [
                (2, Some(2), Some("from_a_later_version")),
                (3, Some(3), Some("route")),
                (4, None, None)
            ]
        );
        assert!(read.unread[0].reason.contains("does not know"));
        assert!(read.unread.iter().all(|u| u.reason.len() <= MAX_REASON + 4));
    }

    /// A last line without its newline is a torn write when it does not parse (left out),
    /// a line when it does; following a journal, it is waited for until it is whole.
    #[test]
    fn a_torn_last_line_is_left_out_and_a_followed_one_completed() {
        let dir = journal(format!("{LINE}\n{{\"seq\":2,\"ts").as_bytes());
        let read = read_journal(dir.path()).unwrap();
        assert_eq!((read.entries.len(), read.unread.len()), (1, 0));

        let mut lines = journal_lines(dir.path()).unwrap().following();
        assert!(matches!(lines.next(), Some(Ok(JournalLine::Entry(_)))));
        assert!(lines.next().is_none());
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL))
            .unwrap();
        file.write_all(b"\":\"t\",\"event\":\"run_resumed\",\"step\":1}\n")
            .unwrap();
        match lines.next() {
            Some(Ok(JournalLine::Entry(e))) => assert_eq!(e.seq, 2),
            other => panic!("{other:?}"),
        }
    }

    /// A line longer than the bound is skipped without being held, and reported.
    #[test]
    fn an_overlong_line_is_skipped() {
        let mut text = Vec::with_capacity(MAX_JOURNAL_LINE + 200);
        text.extend_from_slice(b"{\"seq\":1,\"ts\":\"");
        text.resize(MAX_JOURNAL_LINE + 100, b'a');
        text.extend_from_slice(b"\"}\n");
        text.extend_from_slice(LINE.replace("\"seq\":1", "\"seq\":2").as_bytes());
        text.push(b'\n');
        let dir = journal(&text);
        let read = read_journal(dir.path()).unwrap();
        assert_eq!(read.entries.iter().map(|e| e.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(read.unread.len(), 1);
        assert_eq!(read.unread[0].line, 1);
    }
}
