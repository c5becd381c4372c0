//! Stage 4: runs a compiled [`Workflow`]. The interpreter never sees the syntax tree.
//!
//! A step is one role execution: render and call (llm), run (tool) or nothing
//! (builtin); then the output is stored, memory updated, artifacts written, exit
//! conditions checked, a route chosen, and the checkpoint written atomically.

pub mod clock;
pub mod eval;
pub mod memory;
pub mod output;
pub mod progress;
pub mod redact;
pub mod replay;
pub mod rundir;
pub mod scripted;
pub mod state;
pub mod testing;
mod tools;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use petgraph::graph::NodeIndex;
use rondo_provider::{
    AttemptRecord, CallContext, ChatRequest, Message, ProviderKind, ProviderPool,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::compile::{
    Condition, MemoryKind, NodeKind, OutputFormat, RoleKind, RouteTarget, Update, Workflow,
};
use crate::prompt::{Prompts, render_str};
use eval::Env;
use progress::Reporter;
use rundir::{RunDir, RunInfo};
use scripted::{Script, ScriptedModel};
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
    /// Write run.json, events.jsonl, state.json (off for benchmarks).
    pub checkpoints: bool,
    pub progress: progress::Mode,
    pub keep_env: bool,
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
    pool: Arc<ProviderPool>,
    prompts: Prompts,
    /// Profile name per llm role (node index), after `--provider`.
    profile_of: HashMap<usize, String>,
    envs: tools::Envs,
    interrupted: Arc<AtomicBool>,
    interrupt: Arc<Notify>,
    reporter: Reporter,
    /// Secret values, replaced in everything recorded, shown or sent.
    redactor: rondo_env::Redactor,
    started: Instant,
    /// Tokens, cost and calls of LLM attempts not yet added to the state's totals:
    /// `execute` runs with shared access, so every attempt (valid or not) lands here
    /// first and [`Self::settle`] moves it into the totals.
    spent: std::sync::Mutex<state::Totals>,
    /// Continues a run another process left (`rondo resume`).
    resumed: bool,
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
    /// The accepted LLM call (`llm_response` event).
    record: Option<Value>,
}

#[derive(Debug)]
enum StepError {
    /// Ends the run at `error` with this message.
    Failed(String),
    Interrupted,
    Limit(String),
}

impl<'w> Interpreter<'w> {
    /// Prepares a new run: inputs, providers, run directory.
    pub fn start(
        workflow: &'w Workflow,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        let inputs = resolve_inputs(workflow, &options.inputs, options.base_dir.as_deref())?;
        let (run_id, layout) = Self::layout(options)?;
        if layout.system.join("run.json").exists() {
            return Err(StartError::Setup(format!(
                "{} already holds a run; use `rondo resume {}`",
                layout.system.display(),
                layout.system.display()
            )));
        }
        let options = &RunOptions {
            script: options.script.clone().or_else(|| workflow.script.clone()),
            ..options.clone()
        };
        let script = load_script(options)?;
        Self::start_with_script_at(workflow, options, script, inputs, run_id, layout)
    }

    /// The run id (checked, or a new one) and where the run lives.
    fn layout(options: &RunOptions) -> Result<(String, rundir::Layout), StartError> {
        let run_id = options.run_id.clone().unwrap_or_else(new_run_id);
        rundir::check_run_id(&run_id).map_err(StartError::Input)?;
        if let Some(dir) = &options.workspace {
            let Ok(real) = std::fs::canonicalize(dir)
                .map_err(|_| ())
                .and_then(|d| if d.is_dir() { Ok(d) } else { Err(()) })
            else {
                return Err(StartError::Input(format!(
                    "--workspace {}: not an existing folder",
                    dir.display()
                )));
            };
            if real
                .components()
                .any(|c| c.as_os_str() == rondo_workspace::SYSTEM_DIR)
            {
                return Err(StartError::Input(format!(
                    "--workspace {}: a workspace cannot lie inside a `.rondo` folder (the runs' records)",
                    dir.display()
                )));
            }
        }
        let layout = rundir::Layout::new(&options.runs_root, options.workspace.as_deref(), &run_id);
        Ok((run_id, layout))
    }

    /// [`start`](Self::start) with replies given in code (`test` blocks).
    pub fn start_with_script(
        workflow: &'w Workflow,
        options: &RunOptions,
        script: Script,
    ) -> Result<(Self, RunState), StartError> {
        let inputs = resolve_inputs(workflow, &options.inputs, options.base_dir.as_deref())?;
        let (run_id, layout) = Self::layout(options)?;
        Self::start_with_script_at(workflow, options, script, inputs, run_id, layout)
    }

    fn start_with_script_at(
        workflow: &'w Workflow,
        options: &RunOptions,
        script: Script,
        inputs: Vec<Value>,
        run_id: String,
        layout: rundir::Layout,
    ) -> Result<(Self, RunState), StartError> {
        let mut interp = Self::build(workflow, &layout, options, script)?;
        interp.check_keys()?;
        let mut inputs = inputs;
        inputs
            .iter_mut()
            .for_each(|v| interp.redactor.redact_json(v));
        let state = RunState::new(workflow, run_id.clone(), inputs);
        interp.envs.input_paths = input_paths(workflow, &state);
        if options.checkpoints {
            let dir = RunDir::create(&interp.run_dir, interp.workspace.root()).map_err(|e| {
                StartError::Setup(format!("cannot create {}: {e}", interp.run_dir.display()))
            })?;
            let info = RunInfo {
                run_id,
                workflow: workflow.name.clone(),
                workflow_path: std::fs::canonicalize(&workflow.path)
                    .unwrap_or(workflow.path.clone()),
                workflow_hash: workflow.source_hash.clone(),
                inputs: workflow
                    .inputs
                    .iter()
                    .zip(&state.inputs)
                    .map(|(i, v)| (i.name.clone(), v.clone()))
                    .collect(),
                providers: provider_summaries(workflow),
                provider_override: options.provider.clone(),
                script: options
                    .script
                    .as_ref()
                    .map(|p| std::fs::canonicalize(p).unwrap_or(p.clone())),
                replay_from: options.replay_from.clone(),
                started_at: clock::now_rfc3339(),
                ended_at: None,
                status: "running".into(),
                exit: None,
                exit_code: None,
                reason: None,
                totals: Default::default(),
                workspace: Some(interp.workspace.root().to_path_buf()),
            };
            interp.dir = Some(dir);
            interp.event(
                "run_start",
                json!({"workflow": workflow.name, "run_dir": interp.run_dir, "workspace": interp.workspace.root()}),
            );
            // Resumable from here on: the checkpoint is durable before `run.json` says a
            // run exists, so a kill before this point leaves a run id that can be reused.
            let mut state = state;
            interp
                .dir
                .as_mut()
                .map_or(Ok(()), |d| d.checkpoint(&mut state))
                .map_err(|e| StartError::Setup(format!("cannot write the checkpoint: {e}")))?;
            if let Some(dir) = &interp.dir {
                dir.write_info(&info)
                    .map_err(|e| StartError::Setup(format!("cannot write run.json: {e}")))?;
            }
            interp.info = Some(info);
            return Ok((interp, state));
        }
        std::fs::create_dir_all(&interp.run_dir).map_err(|e| {
            StartError::Setup(format!("cannot create {}: {e}", interp.run_dir.display()))
        })?;
        interp.event(
            "run_start",
            json!({"workflow": workflow.name, "run_dir": interp.run_dir, "workspace": interp.workspace.root()}),
        );
        Ok((interp, state))
    }

    /// Continues a stopped or crashed run from its last checkpoint.
    pub fn resume(
        workflow: &'w Workflow,
        run_dir: &Path,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        let info = rundir::read_info(run_dir).map_err(StartError::Setup)?;
        if info.workflow_hash != workflow.source_hash {
            return Err(StartError::Setup(format!(
                "{} changed since the run started (content hash differs); resuming would mix two workflows",
                workflow.path.display()
            )));
        }
        let mut state = rundir::read_state(run_dir).map_err(StartError::Setup)?;
        // A run killed between its final checkpoint and its final `run.json` is finished
        // again (no role runs: the position is its exit) so the record is complete.
        if state.status == Status::Finished && info.ended_at.is_some() {
            return Err(StartError::Setup(format!(
                "run {} has already finished",
                info.run_id
            )));
        }
        let options = RunOptions {
            provider: info.provider_override.clone(),
            script: info.script.clone(),
            replay_from: info.replay_from.clone(),
            ..options.clone()
        };
        let script = load_script(&options)?;
        let layout = rundir::Layout::of(run_dir, &info);
        let mut interp = Self::build(workflow, &layout, &options, script)?;
        interp.check_keys()?;
        interp.envs.input_paths = input_paths(workflow, &state);
        RunDir::rewind(&layout, &state)
            .map_err(|e| StartError::Setup(format!("cannot rewind {}: {e}", run_dir.display())))?;
        let dir = RunDir::open(run_dir, &layout.workspace)
            .map_err(|e| StartError::Setup(format!("cannot open {}: {e}", run_dir.display())))?;
        interp.dir = Some(dir);
        interp.resumed = true;
        let mut info = info;
        info.status = "running".into();
        interp.info = Some(info);
        if state.status != Status::Finished {
            state.status = Status::Running;
            interp.event("run_resumed", json!({"step": state.step}));
        }
        Ok((interp, state))
    }

    fn build(
        workflow: &'w Workflow,
        layout: &rundir::Layout,
        options: &RunOptions,
        script: Script,
    ) -> Result<Self, StartError> {
        // The system area first: the workspace may be inside it (`runs/<id>/workspace`).
        std::fs::create_dir_all(&layout.system).map_err(|e| {
            StartError::Setup(format!("cannot create {}: {e}", layout.system.display()))
        })?;
        let workspace = rondo_workspace::Workspace::create(&layout.workspace).map_err(|e| {
            StartError::Setup(format!("cannot create {}: {e}", layout.workspace.display()))
        })?;
        let run_dir = layout.system.clone();
        let scripted = |p: &&crate::compile::Provider| p.profile.kind == ProviderKind::Scripted;
        let profiles = workflow
            .providers
            .iter()
            .filter(|p| !scripted(p))
            .map(|p| p.profile.clone())
            .collect();
        let mut pool = ProviderPool::new(profiles).map_err(|e| StartError::Setup(e.to_string()))?;
        let model: Arc<dyn rondo_provider::ChatModel> = Arc::new(ScriptedModel::new(script));
        for p in workflow.providers.iter().filter(scripted) {
            pool.register_model(p.name(), model.clone());
        }
        let mut profile_of = HashMap::new();
        for (index, role) in workflow.roles() {
            if let RoleKind::Llm(l) = &role.kind {
                let id = if l.provider == usize::MAX {
                    workflow.default_provider
                } else {
                    l.provider
                };
                let name = options
                    .provider
                    .clone()
                    .unwrap_or_else(|| workflow.providers[id].name().to_string());
                profile_of.insert(index.index(), name);
            }
        }
        if let Some(name) = &options.provider
            && pool.profile(name).is_none()
        {
            let known: Vec<&str> = pool.profile_names().collect();
            return Err(StartError::Setup(format!(
                "--provider `{name}` is not a profile of this workflow (profiles: {})",
                known.join(", ")
            )));
        }
        let interrupted = Arc::new(AtomicBool::new(false));
        let interrupt = Arc::new(Notify::new());
        let redactor = redact::for_workflow(workflow);
        Ok(Interpreter {
            workflow,
            envs: tools::Envs::new(
                workflow,
                &run_dir,
                workspace.root(),
                options.keep_env,
                redactor.clone(),
            ),
            run_dir,
            workspace,
            dir: None,
            info: None,
            pool: Arc::new(pool),
            prompts: Prompts::load_named(&workflow.prompts_dir, &template_names(workflow)),
            profile_of,
            interrupted,
            interrupt,
            reporter: Reporter::new(options.progress, redactor.clone()),
            redactor,
            started: Instant::now(),
            spent: Default::default(),
            resumed: false,
        })
    }

    /// A missing API key is a start-up error, never a failure in the middle of a run.
    fn check_keys(&self) -> Result<(), StartError> {
        let mut missing = Vec::new();
        let mut names: Vec<&String> = self.profile_of.values().collect();
        names.sort();
        names.dedup();
        for name in names {
            for link in self.pool.chain(name) {
                if let Some(p) = self.pool.profile(&link)
                    && p.key_required()
                    && let Some(var) = p.key_env()
                    && std::env::var_os(var).is_none_or(|v| v.is_empty())
                {
                    missing.push(format!(
                        "profile `{link}` needs the environment variable {var}"
                    ));
                }
            }
        }
        missing.sort();
        missing.dedup();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(StartError::Setup(format!(
                "{}; set it, or run with `--provider scripted`",
                missing.join("; ")
            )))
        }
    }

    /// A handle that stops the run at the next opportunity (Ctrl-C).
    pub fn interrupter(&self) -> (Arc<AtomicBool>, Arc<Notify>) {
        (self.interrupted.clone(), self.interrupt.clone())
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Whether anything records or shows events (not with `--no-checkpoint --quiet`).
    fn wants_events(&self) -> bool {
        self.dir.is_some() || self.reporter.shows_events()
    }

    fn event(&mut self, kind: &str, fields: Value) {
        let mut fields = fields;
        self.redactor.redact_json(&mut fields);
        self.reporter.event(kind, &fields);
        if let Some(dir) = &mut self.dir
            && let Err(e) = dir.event(kind, fields)
        {
            self.reporter
                .warn(&format!("cannot write events.jsonl: {e}"));
        }
    }

    /// Wall time the run has used: earlier sessions (before a resume) and this one.
    fn elapsed_ms(&self, state: &RunState) -> u64 {
        state.elapsed_ms + self.started.elapsed().as_millis() as u64
    }

    fn checkpoint(&mut self, state: &mut RunState) {
        let elapsed = self.elapsed_ms(state);
        if let Some(dir) = &mut self.dir {
            let saved = state.elapsed_ms;
            state.elapsed_ms = elapsed;
            let result = dir.checkpoint(state);
            state.elapsed_ms = saved;
            if let Err(e) = result {
                self.reporter.warn(&format!("checkpoint failed: {e}"));
            }
        }
    }

    /// Runs until an exit, a limit, an error or an interrupt.
    pub async fn drive(mut self, mut state: RunState) -> Outcome {
        if self.resumed {
            let removed = self.envs.remove_orphans().await;
            if !removed.is_empty() {
                self.event("stale_containers_removed", json!({"containers": removed}));
            }
        }
        let (exit, reason) = loop {
            if self.interrupted.load(Ordering::SeqCst) {
                break self.stop_interrupted(&mut state);
            }
            let position = state.position.clone();
            let flow = match position {
                Position::Exited { node, reason } => break (node, reason),
                Position::Node { node } if node == self.workflow.start => {
                    self.route(&mut state, node)
                }
                Position::Node { node } if self.workflow.is_exit(node) => Ok(Flow::Exit {
                    node,
                    reason: "reached".into(),
                }),
                Position::Node { node } => self.step(&mut state, node).await,
                Position::Fork { route, done } => self.fork(&mut state, route, done).await,
            };
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Exit { node, reason }) => {
                    state.position = Position::Exited { node, reason };
                }
                Err(StepError::Interrupted) => break self.stop_interrupted(&mut state),
                Err(StepError::Limit(reason)) => {
                    let node = self.builtin_exit("limit");
                    state.position = Position::Exited { node, reason };
                }
                Err(StepError::Failed(reason)) => break (self.builtin_exit("error"), reason),
            }
        };
        self.finish(state, exit, reason).await
    }

    fn stop_interrupted(&mut self, state: &mut RunState) -> (NodeIndex, String) {
        state.status = Status::Interrupted;
        self.checkpoint(state);
        (
            self.builtin_exit("interrupted"),
            "interrupted; `rondo resume` continues the run".into(),
        )
    }

    fn builtin_exit(&self, name: &str) -> NodeIndex {
        self.workflow.find_node(name).unwrap_or(self.workflow.start)
    }

    async fn finish(mut self, mut state: RunState, exit: NodeIndex, reason: String) -> Outcome {
        let reason = self.redactor.redact(&reason).into_owned();
        let name = self.workflow.node(exit).name.clone();
        let code = match &self.workflow.node(exit).kind {
            NodeKind::Exit(spec) => spec.code,
            _ => 2,
        };
        let already_finished = state.status == Status::Finished;
        if state.status != Status::Interrupted {
            // An error exit keeps the position of the failed step, so `resume` retries it.
            if name == "error" {
                state.status = Status::Failed;
            } else {
                state.status = Status::Finished;
                state.position = Position::Exited {
                    node: exit,
                    reason: reason.clone(),
                };
            }
        }
        if !already_finished {
            self.flush_buffered_events();
            self.settle(&mut state);
            self.event("exit", json!({"exit": name, "code": code, "reason": reason, "step": state.step, "totals": state.totals}));
            self.checkpoint(&mut state);
        }
        self.envs.shutdown().await;
        if let Some(mut info) = self.info.take() {
            info.ended_at = Some(clock::now_rfc3339());
            info.status = match state.status {
                Status::Interrupted => "interrupted".into(),
                Status::Failed => "failed".into(),
                _ => "finished".into(),
            };
            info.exit = Some(name.clone());
            info.exit_code = Some(code);
            info.reason = Some(reason.clone());
            info.totals = state.totals.clone();
            if let Some(dir) = &self.dir {
                let _ = dir.write_info(&info);
            }
        }
        if let Some(dir) = &mut self.dir {
            let _ = dir.flush();
        }
        self.reporter.finish(&name, &reason, &state);
        Outcome {
            workspace: self.workspace.root().to_path_buf(),
            run_dir: self.run_dir,
            exit: name,
            exit_code: code,
            reason,
            state,
        }
    }

    fn check_limits(&self, state: &RunState) -> Result<(), StepError> {
        let limits = &self.workflow.limits;
        if let Some(max) = limits.max_steps
            && state.step >= max
        {
            return Err(StepError::Limit(format!(
                "the run reached max_steps = {max}"
            )));
        }
        if let Some(max) = limits.max_wall_time_ms
            && self.elapsed_ms(state) >= max
        {
            return Err(StepError::Limit(format!(
                "the run reached max_wall_time ({max} ms)"
            )));
        }
        Ok(())
    }

    /// One role: execute, apply, check exits, route, checkpoint.
    async fn step(&mut self, state: &mut RunState, node: NodeIndex) -> Result<Flow, StepError> {
        self.check_limits(state)?;
        let role = self
            .workflow
            .role(node)
            .ok_or_else(|| StepError::Failed("not a role".into()))?;
        if let Some(max) = role.max_visits
            && state.visits[node.index()] >= max
        {
            return Err(StepError::Limit(format!(
                "role `{}` reached max_visits = {max}",
                self.workflow.node(node).name
            )));
        }
        let visit = state.visits[node.index()] + 1;
        let run = self.execute(state, node, visit, None, None).await?;
        self.apply(state, node, run, None)?;
        if let Some(flow) = self.exit_guards(state)? {
            mark_exit(state, &flow);
            self.checkpoint(state);
            return Ok(flow);
        }
        let flow = self.route(state, node)?;
        mark_exit(state, &flow);
        self.checkpoint(state);
        Ok(flow)
    }

    fn exit_guards(&mut self, state: &RunState) -> Result<Option<Flow>, StepError> {
        for (exit, expr) in &self.workflow.exit_guards {
            let env = self.env(state, None, None, None);
            if env.condition(expr).map_err(StepError::Failed)? {
                let reason = format!("`{}` holds", expr.text);
                return Ok(Some(Flow::Exit {
                    node: *exit,
                    reason,
                }));
            }
        }
        Ok(None)
    }

    fn env<'a>(
        &'a self,
        state: &'a RunState,
        role: Option<NodeIndex>,
        output: Option<&'a Value>,
        item: Option<&'a Value>,
    ) -> Env<'a> {
        Env {
            workflow: self.workflow,
            state,
            workspace: self.workspace.root(),
            role,
            output,
            item,
            prompt: None,
        }
    }

    fn route(&mut self, state: &mut RunState, from: NodeIndex) -> Result<Flow, StepError> {
        let mut exhausted = false;
        // An invalid outcome takes only invalid routes; a valid one never does.
        let invalid = eval::is_json_llm(self.workflow, from)
            && state
                .outputs
                .get(&from.index())
                .is_some_and(eval::is_invalid_record);
        let mut any_invalid_route = false;
        for &id in &self.workflow.outgoing[from.index()] {
            let route = &self.workflow.routes[id];
            any_invalid_route |= route.on_invalid;
            if route.on_invalid != invalid {
                continue;
            }
            if let Some(max) = route.max
                && state.route_taken[id] >= max
            {
                exhausted = true;
                continue;
            }
            let holds = match &route.condition {
                Condition::Always | Condition::Otherwise => true,
                Condition::When { expr } => self
                    .env(state, Some(from), None, None)
                    .condition(expr)
                    .map_err(|e| {
                        StepError::Failed(format!(
                            "route condition `{}` of `{}` failed: {e}",
                            expr.text,
                            self.workflow.node(from).name
                        ))
                    })?,
            };
            if !holds {
                continue;
            }
            state.route_taken[id] += 1;
            let condition = match &route.condition {
                Condition::When { expr } => expr.text.as_str(),
                Condition::Otherwise => "otherwise",
                Condition::Always => "",
            };
            let from_name = &self.workflow.node(from).name;
            // Built only when something records or shows it: this is the per-step hot path.
            if self.wants_events() {
                let targets: Vec<&str> = route
                    .target
                    .first_nodes()
                    .iter()
                    .map(|n| self.workflow.node(*n).name.as_str())
                    .collect();
                let fields = json!({"from": from_name, "to": targets, "condition": condition, "route": id, "backtrack": route.backtrack});
                self.event("route", fields);
            }
            return Ok(match &route.target {
                RouteTarget::Node { node } if self.workflow.is_exit(*node) => Flow::Exit {
                    node: *node,
                    reason: if condition.is_empty() {
                        format!("routed from `{from_name}`")
                    } else {
                        format!("`{condition}` holds")
                    },
                },
                RouteTarget::Node { node } => {
                    state.position = Position::Node { node: *node };
                    Flow::Continue
                }
                RouteTarget::Parallel { .. } | RouteTarget::Map { .. } => {
                    state.position = Position::Fork {
                        route: id,
                        done: BTreeMap::new(),
                    };
                    Flow::Continue
                }
            });
        }
        let name = &self.workflow.node(from).name;
        if invalid && !any_invalid_route {
            // Only an unchecked workflow gets here: `check` requires an invalid route.
            return Ok(Flow::Exit {
                node: self.builtin_exit("invalid_output"),
                reason: format!("`{name}` gave no valid output and has no invalid route"),
            });
        }
        if exhausted {
            Err(StepError::Limit(format!(
                "every route from `{name}` that could be taken has used its `max` bound"
            )))
        } else {
            Err(StepError::Failed(format!("no route from `{name}` holds")))
        }
    }

    /// Runs the branches of a parallel or map route concurrently, checkpointing each
    /// finished branch, then applies them in order and continues at the join.
    async fn fork(
        &mut self,
        state: &mut RunState,
        route_id: usize,
        mut done: BTreeMap<usize, state::BranchResult>,
    ) -> Result<Flow, StepError> {
        self.check_limits(state)?;
        let route = &self.workflow.routes[route_id];
        let (branches, join): (Vec<(NodeIndex, Option<Value>)>, NodeIndex) = match &route.target {
            RouteTarget::Parallel { branches, join } => {
                (branches.iter().map(|b| (*b, None)).collect(), *join)
            }
            RouteTarget::Map { worker, over, join } => {
                let items = self
                    .env(state, None, None, None)
                    .eval(over)
                    .map_err(StepError::Failed)?;
                let items = match items {
                    Value::Array(a) => a,
                    Value::Null => Vec::new(),
                    other => {
                        return Err(StepError::Failed(format!(
                            "`map ... over {}` needs a list, got {other}",
                            over.text
                        )));
                    }
                };
                if let Some(max) = route.max
                    && items.len() as u64 > max
                {
                    return Err(StepError::Limit(format!(
                        "`map` over {} items exceeds its bound of {max}",
                        items.len()
                    )));
                }
                (
                    items.into_iter().map(|i| (*worker, Some(i))).collect(),
                    *join,
                )
            }
            RouteTarget::Node { .. } => return Err(StepError::Failed("not a fork".into())),
        };
        // Branches of one role (a map) are its visits n+1, n+2, ... in item order.
        let visits: Vec<u64> = branches
            .iter()
            .enumerate()
            .map(|(i, (node, _))| {
                state.visits[node.index()]
                    + 1
                    + branches[..i].iter().filter(|(n, _)| n == node).count() as u64
            })
            .collect();
        {
            let this = &*self;
            let snapshot = &*state;
            let visits = &visits;
            let mut pending: FuturesUnordered<_> = branches
                .iter()
                .enumerate()
                .filter(|(i, _)| !done.contains_key(i))
                .map(|(i, (node, item))| async move {
                    (
                        i,
                        *node,
                        item.clone(),
                        this.execute(snapshot, *node, visits[i], item.as_ref(), Some(i))
                            .await,
                    )
                })
                .collect();
            let mut finished = Vec::new();
            while let Some((i, node, item, result)) = pending.next().await {
                let run = result?;
                finished.push((
                    i,
                    state::BranchResult {
                        node,
                        output: run.output,
                        item,
                        tool: run.tool,
                        prompt: run.prompt,
                        record: run.record,
                    },
                ));
            }
            drop(pending);
            for (i, r) in finished {
                done.insert(i, r);
                // Each finished branch is durable before the next one is applied.
            }
        }
        state.position = Position::Fork {
            route: route_id,
            done: done.clone(),
        };
        self.settle(state);
        self.checkpoint(state);
        // Every branch finished: their own containers (`per_branch`) are not needed any more.
        self.envs.release_branches().await;
        // A branch cannot route, so its invalid outcome ends the run (the join's readers
        // expect every branch's valid output).
        if let Some(r) = done.values().find(|r| {
            eval::is_json_llm(self.workflow, r.node) && eval::is_invalid_record(&r.output)
        }) {
            let name = self.workflow.node(r.node).name.clone();
            return Ok(Flow::Exit {
                node: self.builtin_exit("invalid_output"),
                reason: format!(
                    "branch `{name}` gave no valid output, and a branch cannot route it"
                ),
            });
        }
        let mut outputs = Vec::new();
        for (_, r) in done {
            let node = r.node;
            outputs.push(r.output.clone());
            let run = RoleRun {
                output: r.output,
                tool: r.tool,
                prompt: r.prompt,
                record: r.record,
            };
            self.apply(state, node, run, r.item.as_ref())?;
        }
        // A map over an empty list joins to `[]`, never to nothing.
        if let RouteTarget::Map { worker, .. } = &self.workflow.routes[route_id].target {
            state.outputs.insert(worker.index(), Value::Array(outputs));
        }
        if let Some(flow) = self.exit_guards(state)? {
            mark_exit(state, &flow);
            self.checkpoint(state);
            return Ok(flow);
        }
        state.position = Position::Node { node: join };
        self.checkpoint(state);
        Ok(Flow::Continue)
    }

    /// Executes a role without changing the state, within what is left of the run's
    /// wall time: past it, the step is abandoned (its tool processes killed) and the run
    /// ends at `limit`.
    async fn execute(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
        branch: Option<usize>,
    ) -> Result<RoleRun, StepError> {
        let run = self.execute_role(state, node, visit, item, branch);
        let Some(max) = self.workflow.limits.max_wall_time_ms else {
            return run.await;
        };
        let used = self.elapsed_ms(state);
        let left = Duration::from_millis(max.saturating_sub(used));
        match tokio::time::timeout(left, run).await {
            Ok(result) => result,
            Err(_) => Err(StepError::Limit(format!(
                "the run reached max_wall_time ({max} ms) during `{}`",
                self.workflow.node(node).name
            ))),
        }
    }

    async fn execute_role(
        &self,
        state: &RunState,
        node: NodeIndex,
        visit: u64,
        item: Option<&Value>,
        branch: Option<usize>,
    ) -> Result<RoleRun, StepError> {
        let role = self
            .workflow
            .role(node)
            .ok_or_else(|| StepError::Failed("not a role".into()))?;
        let name = &self.workflow.node(node).name;
        self.reporter.role_start(
            name,
            role.kind.name(),
            state.step + 1,
            &state.totals,
            self.started,
        );
        match &role.kind {
            RoleKind::Builtin => Ok(RoleRun::plain(Value::Null)),
            RoleKind::Llm(llm) => self.call_llm(state, node, llm, visit, item).await,
            RoleKind::Tool(tool) => {
                let run = tools::run_tool_role(self, state, node, tool, visit, item, branch);
                tokio::select! {
                    r = run => r,
                    _ = self.interrupt.notified() => Err(StepError::Interrupted),
                }
            }
        }
    }

    fn template_context(
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
                memory::template_view(&slot.kind, &state.memory[id], self.workspace.root()),
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
            tools.insert(t.name().to_string(), json!({"name": t.name(), "usage": t.spec.usage, "executable": t.spec.executable, "input_schema": t.input.as_ref().map(|ty| ty.json_schema())}));
        }
        ctx.insert("tools", &tools);
        ctx.insert("step", &(state.step + 1));
        ctx.insert("last_error", &last_error);
        ctx
    }

    async fn call_llm(
        &self,
        state: &RunState,
        node: NodeIndex,
        llm: &crate::compile::LlmRole,
        visit: u64,
        item: Option<&Value>,
    ) -> Result<RoleRun, StepError> {
        let name = self.workflow.node(node).name.clone();
        let profile = self
            .profile_of
            .get(&node.index())
            .cloned()
            .unwrap_or_else(|| "scripted".into());
        let limits = &self.workflow.limits;
        let mut last_error: Option<String> = None;
        let mut last_raw = String::new();
        let attempts = llm.retries + 1;
        for attempt in 1..=attempts {
            // A retry storm meets the wall time here even when every reply comes at once
            // (a scripted or cached provider never lets the step's timer fire).
            tokio::task::yield_now().await;
            if let Some(max) = limits.max_wall_time_ms
                && self.elapsed_ms(state) >= max
            {
                return Err(StepError::Limit(format!(
                    "the run reached max_wall_time ({max} ms) during `{name}` attempt {attempt}"
                )));
            }
            // The budget rule: an attempt starts only while what the run has spent —
            // every earlier attempt, valid or not, this role's included — is below the
            // budget, and (when the provider can estimate it) the attempt's worst case
            // stays within it.
            let spent = self.spent_so_far(state);
            if let Some(max) = limits.max_tokens
                && spent.input_tokens + spent.output_tokens >= max
            {
                return Err(StepError::Limit(format!(
                    "the run used its token budget (max_tokens = {max}) before `{name}` attempt {attempt}"
                )));
            }
            if let Some(max) = limits.max_cost
                && spent.cost >= max
            {
                return Err(StepError::Limit(format!(
                    "the run used its cost budget (max_cost = {max}) before `{name}` attempt {attempt}"
                )));
            }
            let ctx = self.template_context(state, node, visit, item, last_error.as_deref());
            let mut messages = Vec::new();
            if let Some(system) = &llm.system {
                let text = self
                    .prompts
                    .render(&system.to_string_lossy(), &ctx)
                    .map_err(|e| {
                        StepError::Failed(format!("role `{name}`: system template: {e}"))
                    })?;
                let text = self.redactor.redact(&text).into_owned();
                messages.push(Message::system(text));
            }
            let prompt = self
                .prompts
                .render(&llm.prompt.to_string_lossy(), &ctx)
                .map_err(|e| {
                    StepError::Failed(format!(
                        "role `{name}`: template {}: {e}",
                        llm.prompt.display()
                    ))
                })?;
            // A tool's output, a file or an input holding a key never reaches a provider.
            let prompt = self.redactor.redact(&prompt).into_owned();
            messages.push(Message::user(prompt.clone()));
            let mut request = ChatRequest::new(messages);
            request.context = CallContext {
                role: name.clone(),
                visit: visit as u32,
            };
            if let OutputFormat::Json { ty } = &llm.output {
                request.response_schema = Some((name.clone(), ty.json_schema()));
            }
            // Stop before a call whose worst case would exceed a budget.
            if let Some(estimate) = self.pool.estimate(&profile, &request) {
                if let Some(max) = limits.max_cost
                    && spent.cost + estimate.max_cost > max
                {
                    return Err(StepError::Limit(format!(
                        "the next call of `{name}` could cost up to ${:.4}, past max_cost = {max}",
                        estimate.max_cost
                    )));
                }
                let used = spent.input_tokens + spent.output_tokens;
                if let Some(max) = limits.max_tokens
                    && used + estimate.max_tokens() > max
                {
                    return Err(StepError::Limit(format!(
                        "the next call of `{name}` could use up to {} tokens, past max_tokens = {max} ({used} used)",
                        estimate.max_tokens()
                    )));
                }
            }
            let mut records: Vec<AttemptRecord> = Vec::new();
            let mut sink = |r: AttemptRecord| records.push(r);
            // On a terminal the reply is shown as it arrives; the parsed result is the same.
            let show_delta = |delta: &str| self.reporter.delta(&name, delta);
            let stream: Option<rondo_provider::StreamCallback> = if self.reporter.live() {
                Some(&show_delta)
            } else {
                None
            };
            let call = self.pool.complete(&profile, &request, stream, &mut sink);
            let completion = tokio::select! {
                c = call => c,
                _ = self.interrupt.notified() => return Err(StepError::Interrupted),
            };
            self.reporter.attempts(&records);
            let completion = match completion {
                Ok(c) => c,
                Err(e) => {
                    self.buffer_event("llm_failed", json!({"role": name, "visit": visit, "profile": profile, "error": e.to_string(), "attempts": records}));
                    return Err(StepError::Failed(format!(
                        "role `{name}`: the provider call failed: {e}"
                    )));
                }
            };
            let max_reply = llm.max_reply.unwrap_or(crate::compile::DEFAULT_MAX_REPLY);
            let max_reply = usize::try_from(max_reply).unwrap_or(usize::MAX);
            let oversized = completion.response.content.len() > max_reply;
            // Only a bounded reply is kept: in the record, the state and the journal.
            let raw = self
                .redactor
                .redact(&output::cut_reply(&completion.response.content, max_reply))
                .into_owned();
            let usage = completion.response.usage;
            if let Ok(mut spent) = self.spent.lock() {
                spent.llm_calls += 1;
                spent.input_tokens += usage.input_tokens;
                spent.output_tokens += usage.output_tokens;
                spent.cost += completion.cost;
            }
            let record = json!({
                "role": name, "visit": visit, "attempt": attempt, "profile": completion.profile,
                "model": completion.response.model, "prompt": prompt, "raw": raw,
                "usage": usage, "cost": completion.cost, "attempts": records,
            });
            let parsed = if oversized && matches!(llm.output, OutputFormat::Json { .. }) {
                Err(format!(
                    "the reply is {} bytes, more than max_reply = {max_reply}",
                    completion.response.content.len()
                ))
            } else {
                output::parse(&llm.output, &raw, &llm.coerce)
            };
            match parsed {
                Ok((value, how, coercions)) => {
                    let mut record = record;
                    record["parsed"] = json!(how);
                    record["coercions"] = json!(coercions);
                    return Ok(RoleRun {
                        output: value,
                        tool: None,
                        prompt: Some(prompt),
                        record: Some(record),
                    });
                }
                Err(e) => {
                    last_error = Some(e.clone());
                    last_raw = raw;
                    self.reporter.event(
                        "invalid_output",
                        &json!({"role": name, "attempt": attempt, "error": e}),
                    );
                    // Failed attempts are recorded at apply time through the run's event log;
                    // past a few, only their number (memory holds them until then).
                    if attempt <= RECORDED_INVALID_ATTEMPTS {
                        self.failed_attempts_note(&record, &e);
                    }
                }
            }
        }
        if attempts > RECORDED_INVALID_ATTEMPTS {
            self.buffer_event(
                "invalid_output_omitted",
                json!({"role": name, "visit": visit, "attempts": attempts - RECORDED_INVALID_ATTEMPTS}),
            );
        }
        // Only JSON can be invalid: the outcome is the invalid record, routed by `X.invalid`.
        Ok(RoleRun::plain(json!({
            "invalid": true,
            "raw": last_raw,
            "error": last_error.unwrap_or_default(),
            "attempts": attempts,
        })))
    }

    /// The state's totals plus the attempts not settled yet.
    fn spent_so_far(&self, state: &RunState) -> state::Totals {
        let mut t = state.totals.clone();
        if let Ok(p) = self.spent.lock() {
            t.llm_calls += p.llm_calls;
            t.input_tokens += p.input_tokens;
            t.output_tokens += p.output_tokens;
            t.cost += p.cost;
        }
        t
    }

    /// Moves the attempts' spending into the state's totals.
    fn settle(&mut self, state: &mut RunState) {
        let p = self.spent.get_mut().map(std::mem::take).unwrap_or_default();
        state.totals.llm_calls += p.llm_calls;
        state.totals.input_tokens += p.input_tokens;
        state.totals.output_tokens += p.output_tokens;
        state.totals.cost += p.cost;
    }

    fn failed_attempts_note(&self, record: &Value, error: &str) {
        let mut r = record.clone();
        r["error"] = Value::String(error.to_string());
        self.buffer_event("invalid_output", r);
    }

    /// `execute` runs with shared access (branches run concurrently), so its events
    /// are buffered and written by the next exclusive step (apply or finish).
    fn buffer_event(&self, kind: &str, fields: Value) {
        if let Ok(mut buffer) = self.envs.pending_events.lock() {
            buffer.push((kind.to_string(), fields));
        }
    }

    fn flush_buffered_events(&mut self) {
        let pending: Vec<(String, Value)> = self
            .envs
            .pending_events
            .lock()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default();
        for (kind, fields) in pending {
            self.event(&kind, fields);
        }
    }

    /// Stores a role's result: visits, output, events, updates, artifacts.
    fn apply(
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

    #[allow(clippy::too_many_arguments)]
    fn write_artifacts(
        &mut self,
        artifacts: &[crate::compile::Artifact],
        state: &RunState,
        node: Option<NodeIndex>,
        output: Option<&Value>,
        item: Option<&Value>,
        prompt: Option<&str>,
        visit: u64,
    ) -> Result<Vec<(String, u64)>, StepError> {
        if artifacts.is_empty() {
            return Ok(Vec::new());
        }
        let role_name = node.map_or_else(
            || "workflow".to_string(),
            |n| self.workflow.node(n).name.clone(),
        );
        let mut appended = Vec::new();
        for artifact in artifacts {
            let ctx = self.name_context(state, node.unwrap_or(self.workflow.start), visit, item);
            // The author's text keeps its folders; a value (a reply, an input, an item)
            // cannot add one, climb out, or name nothing.
            let raw = render_str(&artifact.name, &ctx).ok();
            let file = render_str(&artifact.name, &path_safe_context(ctx)).map_err(|e| {
                StepError::Failed(format!(
                    "`{role_name}`: artifact name `{}`: {e}",
                    artifact.name
                ))
            })?;
            let file = rundir::contained_name(&file);
            let sanitized = raw.filter(|r| *r != file);
            let prompt = prompt.map(|p| Value::String(p.to_string()));
            let mut env = self.env(state, node, output, item);
            env.prompt = prompt.as_ref();
            let value = env
                .eval(&artifact.value)
                .map_err(|e| StepError::Failed(format!("`{role_name}`: artifact `{file}`: {e}")))?;
            let bytes = match (&value, artifact.append) {
                (Value::String(s), false) => s.clone().into_bytes(),
                (other, false) => serde_json::to_vec_pretty(other).unwrap_or_default(),
                (Value::String(s), true) => format!("{}\n", s.trim_end_matches('\n')).into_bytes(),
                (other, true) => {
                    format!("{}\n", serde_json::to_string(other).unwrap_or_default()).into_bytes()
                }
            };
            let bytes = self.redactor.redact_bytes(&bytes).into_owned();
            if let Err(why) = rondo_workspace::relative_name(&file) {
                // A templated name the checker could not see: the write is skipped, the run goes on.
                self.event(
                    "artifact_rejected",
                    json!({"role": role_name, "file": file, "reason": why.to_string()}),
                );
                continue;
            }
            let key = format!("{}{file}", rundir::ARTIFACT_KEY);
            // Before the first append to a file the checkpoint does not know, its length
            // is journaled (see `RunDir::append_opened`): a resume cuts a re-run step's line.
            let opened =
                (artifact.append && self.dir.is_some() && !state.file_lengths.contains_key(&key))
                    .then(|| self.workspace.file_len(&file));
            // Without fsync: durable with the step's journal record, synced at the next
            // snapshot (see `RunDir::checkpoint`).
            let written = match opened {
                Some(Err(e)) => Err(e),
                Some(Ok(len)) => {
                    if let Some(dir) = &mut self.dir {
                        dir.append_opened(&key, len).map_err(|e| {
                            StepError::Failed(format!("cannot write events.jsonl: {e}"))
                        })?;
                    }
                    self.workspace.append_unsynced(&file, &bytes).map(Some)
                }
                None if artifact.append => self.workspace.append_unsynced(&file, &bytes).map(Some),
                None => self.workspace.write_replace(&file, &bytes).map(|()| None),
            };
            let len = match written {
                Ok(len) => len,
                // Refused by the confinement (a symbolic link out of the workspace or into
                // its system area), or a failed write: recorded, the run goes on.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::PermissionDenied
                            | std::io::ErrorKind::InvalidInput
                            | std::io::ErrorKind::NotADirectory
                            | std::io::ErrorKind::IsADirectory
                    ) =>
                {
                    self.event(
                        "artifact_rejected",
                        json!({"role": role_name, "file": file, "reason": e.to_string()}),
                    );
                    continue;
                }
                Err(e) => {
                    return Err(StepError::Failed(format!(
                        "cannot write artifact {file}: {e}"
                    )));
                }
            };
            if let Some(dir) = &mut self.dir {
                dir.written(&file);
            }
            if let Some(len) = len {
                appended.push((key, len));
            }
            if self.dir.is_some() {
                let mut fields = json!({"role": role_name, "file": file, "bytes": bytes.len(), "append": artifact.append});
                if let Some(raw) = &sanitized {
                    fields["sanitized_from"] = Value::String(raw.clone());
                }
                self.event("artifact", fields);
            }
        }
        Ok(appended)
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
            .filter(|(slot, _)| matches!(slot.kind, MemoryKind::Value { .. }))
            .map(|(slot, v)| (slot.name.clone(), v.clone()))
            .collect();
        ctx.insert("memory", &memory);
        ctx
    }

    /// What every template sees: counters, inputs, `item`, and each role's latest output.
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
        ctx.insert("item", &item.cloned().unwrap_or(Value::Null));
        let inputs: serde_json::Map<String, Value> = self
            .workflow
            .inputs
            .iter()
            .zip(&state.inputs)
            .map(|(i, v)| (i.name.clone(), v.clone()))
            .collect();
        ctx.insert("input", &inputs);
        for (index, _) in self.workflow.roles() {
            let mut value = state
                .outputs
                .get(&index.index())
                .cloned()
                .unwrap_or(Value::Null);
            if eval::is_invalid_record(&value) && eval::is_json_llm(self.workflow, index) {
                value["invalid_reply"] = eval::invalid_reply(&value);
            }
            ctx.insert(self.workflow.node(index).name.as_str(), &value);
        }
        ctx
    }
}

/// A route into an exit is part of the step's checkpoint: a resume after it goes
/// straight to the exit and never runs the role again.
fn mark_exit(state: &mut RunState, flow: &Flow) {
    if let Flow::Exit { node, reason } = flow {
        state.position = Position::Exited {
            node: *node,
            reason: reason.clone(),
        };
    }
}

/// `ctx` with every string in it made a safe path component (see
/// [`rundir::path_component`]), for rendering artifact names.
fn path_safe_context(ctx: tera::Context) -> tera::Context {
    let mut value = ctx.into_json();
    // Replies nest as deep as serde_json allows: walk with a stack, not recursion.
    let mut stack = vec![&mut value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                if let Some(safe) = rundir::path_component(s) {
                    *s = safe;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
    tera::Context::from_value(value).unwrap_or_default()
}

/// The templates llm roles render.
/// Invalid attempts of one call recorded in full; the rest are counted.
const RECORDED_INVALID_ATTEMPTS: u64 = 20;

fn template_names(workflow: &Workflow) -> Vec<String> {
    let mut names = Vec::new();
    for (_, role) in workflow.roles() {
        if let RoleKind::Llm(l) = &role.kind {
            names.extend(
                l.system
                    .iter()
                    .chain(std::iter::once(&l.prompt))
                    .map(|p| p.to_string_lossy().replace('\\', "/")),
            );
        }
    }
    names
}

fn load_script(options: &RunOptions) -> Result<Script, StartError> {
    let mut script = match &options.script {
        Some(path) => Script::from_yaml(path).map_err(StartError::Setup)?,
        None => Script::default(),
    };
    if let Some(from) = &options.replay_from {
        let recorded = Script::from_events(from).map_err(StartError::Setup)?;
        for (role, replies) in recorded.roles {
            script.roles.insert(role, replies);
        }
    }
    Ok(script)
}

fn resolve_inputs(
    workflow: &Workflow,
    given: &[(String, String)],
    base_dir: Option<&Path>,
) -> Result<Vec<Value>, StartError> {
    let mut values: Vec<Option<Value>> =
        workflow.inputs.iter().map(|i| i.default.clone()).collect();
    for (key, raw) in given {
        let Some(index) = workflow.inputs.iter().position(|i| &i.name == key) else {
            let names: Vec<&str> = workflow.inputs.iter().map(|i| i.name.as_str()).collect();
            let hint = crate::diagnostics::did_you_mean(key, names.iter().copied())
                .unwrap_or_else(|| format!("inputs: {}", names.join(", ")));
            return Err(StartError::Input(format!(
                "`{key}` is not an input of {} ({hint})",
                workflow.name
            )));
        };
        let ty = &workflow.inputs[index].ty;
        let value = if ty.is_stringy()
            && !matches!(ty.strip_optional(), crate::compile::types::Type::Any)
        {
            Value::String(raw.clone())
        } else {
            serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()))
        };
        ty.validate(&value)
            .map_err(|e| StartError::Input(format!("input `{key}`: {e}")))?;
        values[index] = Some(value);
    }
    workflow
        .inputs
        .iter()
        .zip(values)
        .map(|(input, v)| match v {
            Some(mut v) => {
                input.ty.fill_absent(&mut v);
                if input.path
                    && let Value::String(text) = &v
                {
                    v = Value::String(host_path(text, base_dir)?);
                }
                Ok(v)
            }
            None if input.ty.is_optional() => Ok(Value::Null),
            None => Err(StartError::Input(format!(
                "input `{}` is required: pass `--input {}=...`",
                input.name, input.name
            ))),
        })
        .collect()
}

/// A `path` input as an absolute path: relative to `base` (default: the folder rondo was
/// started in), never to the run's workspace.
fn host_path(text: &str, base: Option<&Path>) -> Result<String, StartError> {
    let given = Path::new(text);
    let absolute = if given.is_absolute() {
        given.to_path_buf()
    } else {
        let base = match base {
            Some(b) => b.to_path_buf(),
            None => std::env::current_dir()
                .map_err(|e| StartError::Setup(format!("cannot read the current folder: {e}")))?,
        };
        base.join(given)
    };
    let absolute = std::fs::canonicalize(&absolute).unwrap_or(absolute);
    absolute
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| StartError::Input(format!("path `{text}` is not UTF-8")))
}

fn new_run_id() -> String {
    let ms = clock::unix_ms();
    let stamp = clock::rfc3339(ms).replace(['-', ':'], "").replace('T', "-");
    let stamp = stamp.split('.').next().unwrap_or("").to_string();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{stamp}-{:04x}", (nanos ^ std::process::id()) & 0xffff)
}

/// The host files and folders the run's `path` inputs name (mounted read-only in Docker).
fn input_paths(workflow: &Workflow, state: &RunState) -> Vec<PathBuf> {
    workflow
        .inputs
        .iter()
        .zip(&state.inputs)
        .filter(|(i, _)| i.path)
        .filter_map(|(_, v)| v.as_str().map(PathBuf::from))
        .filter(|p| p.is_absolute() && p.exists())
        .collect()
}

fn provider_summaries(workflow: &Workflow) -> Vec<Value> {
    workflow
        .providers
        .iter()
        .map(|p| &p.profile)
        .map(|p| json!({"name": p.name, "kind": p.kind, "model": p.model, "base_url": p.base_url, "api_key_env": p.api_key_env}))
        .collect()
}
