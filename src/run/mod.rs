//! Stage 4: runs a [`Checked`](crate::check::Checked) workflow. The interpreter never sees
//! the syntax tree.
//!
//! A step is one role execution: render and call (llm), run (tool) or nothing
//! (builtin); then the output is stored, memory updated, artifacts written, exit
//! conditions checked, a route chosen, and the checkpoint written atomically.

mod apply;
mod artifacts;
pub mod bus;
pub mod clock;
pub mod code_agent;
pub mod commit;
mod context;
pub mod demos;
pub mod durable;
pub mod eval;
pub mod events;
mod llm;
pub mod memory;
pub mod output;
pub mod progress;
pub mod redact;
pub mod replay;
pub mod rundir;
pub mod scripted;
mod start;
pub mod state;
mod step;
pub mod testing;
mod tools;
pub mod value;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use petgraph::graph::NodeIndex;
use rondo_provider::ProviderPool;
use serde_json::Value;
use tokio::sync::Notify;

use crate::compile::Workflow;
use crate::prompt::Prompts;
use events::Event;
use progress::Reporter;
use rundir::{RunDir, RunInfo};
pub use state::{Position, RunState, Status};

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Folder holding run directories (`runs/` by default).
    pub runs_root: PathBuf,
    pub run_id: Option<String>,
    /// `--workspace DIR`: work in this existing folder; records go to `DIR/.rondo/runs/<id>/`.
    pub workspace: Option<PathBuf>,
    /// Relative `path` inputs resolve against this folder (default: the current one).
    pub base_dir: Option<PathBuf>,
    /// `--input key=value`; a value that parses as JSON is taken as JSON unless the input is a string.
    pub inputs: Vec<(String, String)>,
    /// Every llm role uses this profile.
    pub provider: Option<String>,
    /// Replies for the scripted provider.
    pub script: Option<PathBuf>,
    /// Replay the LLM replies recorded in this run directory.
    pub replay_from: Option<PathBuf>,
    /// Write run.json, events.jsonl and snapshots (off for benchmarks).
    pub checkpoints: bool,
    pub progress: progress::Mode,
    pub keep_env: bool,
    /// Run local tools unconfined when the kernel has no Landlock (instead of refusing).
    pub unconfined_tools: bool,
    /// A provider pool shared with other runs (`rondo eval`): its rate limits, concurrency
    /// bounds and circuit breakers hold across them. Its scripted profiles must serve the
    /// script this run would load (see [`Interpreter::provider_pool`]).
    pub pool: Option<Arc<ProviderPool>>,
    /// Run every role without its demos file (`rondo optimize`'s "before").
    pub no_demos: bool,
    /// Every Docker environment runs this image instead of its declared one (a SWE-bench
    /// instance's image). Not recorded: a resume must give it again.
    pub image: Option<String>,
    /// Where the run's Docker environments' sandboxes come from (`--engine`). Not
    /// recorded: a resume must give it again.
    pub engine: rondo_env::SandboxEngine,
}

/// An input value as `--input` (and [`RunOptions::inputs`]) takes it: a string as written,
/// anything else as its JSON text.
pub fn input_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The runtime for up to `runs_at_once` runs in flight (a server, an eval): a worker per
/// core, as many runs as it likes on each. A run holds no thread while its records sync
/// (the committer, [`commit`], does that), so runs waiting on the disk or on a model do
/// not need threads of their own.
pub fn runtime_for_runs(runs_at_once: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores.clamp(2, runs_at_once.max(2)))
        .enable_all()
        .build()
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            runs_root: PathBuf::from("runs"),
            run_id: None,
            workspace: None,
            base_dir: None,
            inputs: Vec::new(),
            provider: None,
            script: None,
            replay_from: None,
            checkpoints: true,
            progress: progress::Mode::Quiet,
            keep_env: false,
            unconfined_tools: false,
            pool: None,
            no_demos: false,
            image: None,
            engine: rondo_env::SandboxEngine::Docker,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The run's system area (`run.json`, `events.jsonl`, `state.json`).
    pub run_dir: PathBuf,
    /// The run's workspace (artifacts, logs, the tools' working directory).
    pub workspace: PathBuf,
    pub exit: String,
    pub exit_code: i32,
    pub reason: String,
    pub state: RunState,
}

/// Problems before a run can start (bad inputs, missing keys, unreadable script).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Setup(String),
}

pub struct Interpreter<'w> {
    workflow: &'w Workflow,
    /// The system area.
    run_dir: PathBuf,
    /// Every artifact, log and `exists()` goes through it.
    workspace: rondo_workspace::Workspace,
    dir: Option<RunDir>,
    info: Option<RunInfo>,
    /// The start's writes (first checkpoint, then `run.json`) not yet durable.
    start_jobs: Vec<commit::Job>,
    /// The start's jobs, when they run beside the first step
    /// ([`start_overlapped`](Interpreter::start_overlapped)): awaited by the first
    /// checkpoint.
    start_pending: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// Counted among the process's runs while it exists (see [`commit::InFlight`]).
    _in_flight: commit::InFlight,
    pool: Arc<ProviderPool>,
    prompts: Arc<Prompts>,
    /// Profile name per llm role (node index), after `--provider`.
    profile_of: HashMap<usize, String>,
    envs: tools::Envs,
    interrupted: Arc<AtomicBool>,
    interrupt: Arc<Notify>,
    reporter: Reporter,
    /// Where each event goes: the journal, then the run's subscribers.
    bus: bus::Bus,
    /// Secret values, replaced in everything recorded, shown or sent.
    redactor: rondo_env::Redactor,
    started: Instant,
    /// Tokens, cost and calls of LLM attempts not yet added to the state's totals:
    /// `execute` runs with shared access, so every attempt (valid or not) lands here
    /// first and [`Self::settle`] moves it into the totals.
    spent: std::sync::Mutex<rondo_provider::Spend>,
    /// Continues a run another process left (`rondo resume`).
    resumed: bool,
    /// Memory carried over between runs of a `--workspace` folder.
    durable: Option<durable::Durable>,
    /// Each demos-taking llm role's demos (node index), read when the run starts.
    demos: HashMap<usize, Value>,
    /// The first failed write to the journal: the next checkpoint ends the run with it.
    unrecorded: Option<String>,
}

enum Flow {
    Continue,
    Exit { node: NodeIndex, reason: String },
}

impl RoleRun {
    /// A result that is only an output (builtin roles, tool calls that did not run).
    fn plain(output: Value) -> Self {
        RoleRun {
            output,
            tool: None,
            prompt: None,
            record: None,
        }
    }
}

/// The result of running one role, before it is applied to the state.
struct RoleRun {
    output: Value,
    tool: Option<usize>,
    prompt: Option<String>,
    /// The accepted LLM call (boxed: it is most of the struct's size, which every step moves).
    record: Option<Box<events::LlmResponse>>,
}

#[derive(Debug)]
enum StepError {
    /// Ends the run at `error` with this message.
    Failed(String),
    Interrupted,
    Limit(String),
    /// Ends the run at `invalid_output`: a value a reply (or a tool's data) gave was not of
    /// the kind `check` could prove (it was typed `any`), or a reply no route can take.
    Invalid(String),
}

impl StepError {
    fn message(&self) -> &str {
        match self {
            StepError::Failed(m) | StepError::Limit(m) | StepError::Invalid(m) => m,
            StepError::Interrupted => "interrupted",
        }
    }
}

impl<'w> Interpreter<'w> {
    /// A handle that stops the run at the next opportunity (Ctrl-C).
    pub fn interrupter(&self) -> (Arc<AtomicBool>, Arc<Notify>) {
        (self.interrupted.clone(), self.interrupt.clone())
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Follows the run's events from now on (a server's live stream, an eval's progress).
    /// Events before are in the journal, flushed to its file here.
    pub fn subscribe(&mut self, subscriber: Box<dyn bus::Subscriber>) {
        self.bus.join(subscriber, self.dir.as_mut());
    }

    /// Whether anything records or shows events (not with `--no-checkpoint --quiet`).
    fn wants_events(&self) -> bool {
        self.dir.is_some() || self.bus.has_subscribers()
    }

    /// Records an event in `events.jsonl`, secrets replaced, then publishes it.
    fn event(&mut self, event: Event) {
        let written = self.bus.publish(self.dir.as_mut(), &self.redactor, event);
        if let Err(e) = written
            && self.dir.is_some()
        {
            self.reporter
                .warn(&format!("cannot write events.jsonl: {e}"));
            self.unrecorded.get_or_insert(format!("events.jsonl: {e}"));
        }
    }

    /// Wall time the run has used: earlier sessions (before a resume) and this one.
    fn elapsed_ms(&self, state: &RunState) -> u64 {
        elapsed_since(self.started, state)
    }

    /// Makes the step durable. A record that cannot be written ends the run at `error`
    /// at once: going on would run steps no resume knows about.
    async fn checkpoint(&mut self, state: &mut RunState) -> Result<(), StepError> {
        self.checkpoint_then(state, true).await
    }

    /// Whether a checkpoint has anything to do: a run without records (`checkpoints:
    /// false`) or durable memory skips it, and its step stays a few hundred instructions.
    fn checkpoints_anything(&self) -> bool {
        self.dir.is_some() || self.durable.is_some() || self.start_pending.is_some()
    }

    /// [`checkpoint`](Self::checkpoint); without `wait`, a journal record is written but
    /// its sync is left to the next checkpoint (a snapshot is still waited for): for a
    /// step that ends the run, whose end's checkpoint follows at once and syncs both.
    async fn checkpoint_then(&mut self, state: &mut RunState, wait: bool) -> Result<(), StepError> {
        let started = match self.start_pending.take() {
            Some(pending) => pending
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
                .map_err(|e| format!("the run's start: {e}")),
            None => Ok(()),
        };
        if let Some(dir) = &mut self.dir {
            // Read only when recorded: the clock is a tenth of a builtin step.
            let saved = state.elapsed_ms;
            state.elapsed_ms = elapsed_since(self.started, state);
            let recorded = match (started, self.unrecorded.take()) {
                (Err(e), _) | (Ok(()), Some(e)) => Err(e),
                (Ok(()), None) => dir.checkpoint(state).map_err(|e| e.to_string()),
            };
            state.elapsed_ms = saved;
            let (result, synced) = match recorded {
                Ok(commit::Job::SyncData(_)) if !wait => (Ok(()), false),
                Ok(job) => (job.commit().await.map_err(|e| e.to_string()), true),
                Err(e) => (Err(e), false),
            };
            // Subscribers hear of records once they are durable.
            if let Some(dir) = &mut self.dir
                && result.is_ok()
                && synced
            {
                self.bus.written(dir);
            }
            if let Err(e) = result {
                return Err(StepError::Failed(format!(
                    "the run's records cannot be written in {} ({e}); the run stopped at its \
                     last checkpoint: once they can, `rondo resume {}` continues it",
                    self.run_dir.display(),
                    self.run_dir.display()
                )));
            }
        }
        if let Some(durable) = &mut self.durable
            && let Err(e) = durable.save(self.workflow, state)
        {
            let file = durable.file().display().to_string();
            self.reporter
                .warn(&format!("cannot save the durable memory to {file}: {e}"));
        }
        Ok(())
    }

    /// `execute` runs with shared access (branches run concurrently), so its events
    /// are buffered and written by the next exclusive step (apply or finish).
    fn buffer_event(&self, event: Event) {
        if let Ok(mut buffer) = self.envs.pending_events.lock() {
            buffer.push(event);
        }
    }

    fn flush_buffered_events(&mut self) {
        // Exclusive access: no lock to take, and most steps have nothing buffered.
        let pending = match self.envs.pending_events.get_mut() {
            Ok(buffer) if !buffer.is_empty() => std::mem::take(buffer),
            _ => return,
        };
        for event in pending {
            self.event(event);
        }
    }
}

/// The run's time so far: what earlier sessions of it recorded, and this one's.
fn elapsed_since(started: Instant, state: &RunState) -> u64 {
    state.elapsed_ms + started.elapsed().as_millis() as u64
}
