//! Starting a run (inputs, providers, API keys, the run directory) and resuming one from its
//! last checkpoint.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use rondo_provider::{ProviderKind, ProviderPool};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::bus::Bus;
use super::clock;
use super::commit::Job;
use super::events::Event;
use super::progress::{Progress, Reporter};
use super::redact;
use super::rundir::{self, RunDir, RunInfo, RunStatus};
use super::scripted::{Script, ScriptedModel};
use super::state::{RunState, Status};
use super::tools;
use super::{Interpreter, RunOptions, StartError};
use crate::check::Checked;
use crate::compile::{RoleKind, Workflow};
use crate::prompt::Prompts;

impl<'w> Interpreter<'w> {
    /// Prepares a new run: inputs, providers, run directory.
    pub fn start(
        workflow: &'w Checked,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        Self::prepare(workflow, options).and_then(recorded_here)
    }

    /// [`start`](Self::start) for a process with many runs in flight: the start's writes
    /// are made durable by the committer (see [`commit`](super::commit)), so the thread
    /// is not held while the disk syncs.
    pub async fn start_committed(
        workflow: &'w Checked,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        let (mut interp, state) = Self::prepare(workflow, options)?;
        let jobs = std::mem::take(&mut interp.start_jobs);
        if let Some(job) = jobs.into_iter().reduce(Job::then) {
            job.commit().await.map_err(start_unrecorded)?;
        }
        Ok((interp, state))
    }

    /// [`start_committed`](Self::start_committed) that waits for nothing: the start's
    /// journal record is synced with the first step's, and `run.json` is written by the
    /// first checkpoint that acknowledges a step (see [`RunDir::announce_later`]); a run
    /// that ends at its first step (one model call) writes only its final `run.json`.
    /// For callers that acknowledge nothing before the run's first step (an eval's
    /// case, a synchronous ask): a process killed before then leaves a folder without
    /// `run.json`, which holds no acknowledged step.
    pub async fn start_overlapped(
        workflow: &'w Checked,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        let (mut interp, state) = Self::prepare(workflow, options)?;
        let mut jobs = std::mem::take(&mut interp.start_jobs);
        if let (Some(run_json), Some(dir)) = (jobs.pop(), interp.dir.as_mut()) {
            dir.announce_later(run_json);
        }
        Ok((interp, state))
    }

    fn prepare(
        workflow: &'w Checked,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        let inputs = resolve_inputs(workflow, &options.inputs, options.base_dir.as_deref())?;
        let (run_id, layout) = Self::layout(options)?;
        if std::fs::symlink_metadata(layout.system.join("run.json")).is_ok() {
            return Err(StartError::Setup(id_taken(&layout.system)));
        }
        let options = &RunOptions {
            script: options.script.clone().or_else(|| workflow.script.clone()),
            ..options.clone()
        };
        let claimed = (options.run_id.is_none()).then(|| layout.system.clone());
        // A shared pool already serves the replies.
        let script = match options.pool {
            Some(_) => Ok(Script::default()),
            None => load_script(options),
        };
        let require = options.pool.is_none();
        let started = script.and_then(|script| {
            Self::start_with_script_at(workflow, options, script, inputs, run_id, layout, require)
        });
        if started.is_err()
            && let Some(dir) = claimed
        {
            // Only the empty folder claimed above; a failed start leaves nothing behind.
            let _ = std::fs::remove_dir(dir);
        }
        started
    }

    /// The run id (checked, or a new one) and where the run lives.
    pub(super) fn layout(options: &RunOptions) -> Result<(String, rundir::Layout), StartError> {
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
        if options.run_id.is_some() {
            return Ok((run_id, layout));
        }
        // A new id is claimed by creating its folder, which only one caller can do: runs
        // started in the same second (a server, an eval, two shells) never share records.
        let mut attempt = (run_id, layout);
        for _ in 0..1000 {
            let system = &attempt.1.system;
            let mut created = std::fs::create_dir(system);
            if let (Err(e), Some(parent)) = (&created, system.parent())
                && e.kind() == std::io::ErrorKind::NotFound
            {
                std::fs::create_dir_all(parent).map_err(|e| {
                    StartError::Setup(format!("cannot create {}: {e}", parent.display()))
                })?;
                created = std::fs::create_dir(system);
            }
            match created {
                Ok(()) => return Ok(attempt),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let id = new_run_id();
                    let layout =
                        rundir::Layout::new(&options.runs_root, options.workspace.as_deref(), &id);
                    attempt = (id, layout);
                }
                Err(e) => {
                    return Err(StartError::Setup(format!(
                        "cannot create {}: {e}",
                        system.display()
                    )));
                }
            }
        }
        Err(StartError::Setup(format!(
            "no free run id in {}",
            options.runs_root.display()
        )))
    }

    /// [`start`](Self::start) with replies given in code (`test` blocks): a role the
    /// replies leave out ends the run at `limit` if the run reaches it (a test gives the
    /// replies of the path it tests).
    pub fn start_with_script(
        workflow: &'w Checked,
        options: &RunOptions,
        script: Script,
    ) -> Result<(Self, RunState), StartError> {
        let inputs = resolve_inputs(workflow, &options.inputs, options.base_dir.as_deref())?;
        let (run_id, layout) = Self::layout(options)?;
        Self::start_with_script_at(workflow, options, script, inputs, run_id, layout, false)
            .and_then(recorded_here)
    }

    /// [`start`](Self::start) with replies given in code, refused as `rondo run` refuses a
    /// script that has no reply for an llm role the scripted provider serves.
    pub fn start_scripted(
        workflow: &'w Checked,
        options: &RunOptions,
        script: Script,
    ) -> Result<(Self, RunState), StartError> {
        let inputs = resolve_inputs(workflow, &options.inputs, options.base_dir.as_deref())?;
        let (run_id, layout) = Self::layout(options)?;
        Self::start_with_script_at(workflow, options, script, inputs, run_id, layout, true)
            .and_then(recorded_here)
    }

    fn start_with_script_at(
        workflow: &'w Workflow,
        options: &RunOptions,
        script: Script,
        inputs: Vec<Value>,
        run_id: String,
        layout: rundir::Layout,
        require_replies: bool,
    ) -> Result<(Self, RunState), StartError> {
        let replies = require_replies.then(|| script.clone());
        let mut interp = Self::build(workflow, &layout, options, script)?;
        interp.check_keys()?;
        if let Some(script) = &replies {
            interp.check_replies(script)?;
        }
        let mut inputs = inputs;
        inputs
            .iter_mut()
            .for_each(|v| interp.redactor.redact_json(v));
        let mut state =
            RunState::new(workflow, run_id.clone(), inputs).map_err(StartError::Setup)?;
        let carried = interp
            .durable
            .as_mut()
            .map(|d| d.load(workflow, &mut state));
        interp.envs.input_paths = input_paths(workflow, &state);
        interp.envs.image = options.image.clone();
        interp.envs.engine = options.engine;
        if options.checkpoints {
            let dir = RunDir::create(&interp.run_dir, interp.workspace.root()).map_err(|e| {
                StartError::Setup(format!("cannot create {}: {e}", interp.run_dir.display()))
            })?;
            let outside = options.workspace.is_some();
            let run_uid = rundir::new_run_uid()
                .map_err(|e| StartError::Setup(format!("cannot draw the run's unique id: {e}")))?;
            let info = RunInfo {
                run_id,
                workflow: workflow.name.clone(),
                workflow_path: std::fs::canonicalize(&workflow.path)
                    .unwrap_or(workflow.path.clone()),
                workflow_hash: workflow.source_hash.clone(),
                inputs: state.inputs_by_name(workflow),
                providers: provider_summaries(workflow, &interp.pool),
                provider_override: options.provider.clone(),
                script: options
                    .script
                    .as_ref()
                    .map(|p| std::fs::canonicalize(p).unwrap_or(p.clone())),
                replay_from: options.replay_from.clone(),
                started_at: clock::now_rfc3339(),
                ended_at: None,
                status: RunStatus::Running,
                exit: None,
                exit_code: None,
                reason: None,
                totals: Default::default(),
                workspace: Some(if outside {
                    interp.workspace.root().to_path_buf()
                } else {
                    PathBuf::from(rundir::WORKSPACE_DIR)
                }),
                outside_workspace: outside,
                run_uid: Some(run_uid),
            };
            interp.dir = Some(dir);
            interp.event(interp.run_start());
            if let Some(note) = carried {
                interp.carried_over(&state, note);
            }
            // Resumable from here on: the checkpoint is durable before `run.json` says a
            // run exists, so a kill before this point leaves a run id that can be reused.
            let mut state = state;
            if let Some(dir) = interp.dir.as_mut() {
                let checkpoint = dir
                    .checkpoint(&mut state)
                    .map_err(|e| StartError::Setup(format!("cannot write the checkpoint: {e}")))?;
                let run_json = dir
                    .info_job(&info)
                    .map_err(|e| StartError::Setup(format!("cannot write run.json: {e}")))?;
                // In this order: the first checkpoint's, then `run.json`.
                interp.start_jobs = vec![checkpoint, run_json];
            }
            interp.info = Some(info);
            return Ok((interp, state));
        }
        std::fs::create_dir_all(&interp.run_dir).map_err(|e| {
            StartError::Setup(format!("cannot create {}: {e}", interp.run_dir.display()))
        })?;
        interp.event(interp.run_start());
        if let Some(note) = carried {
            interp.carried_over(&state, note);
        }
        Ok((interp, state))
    }

    fn run_start(&self) -> Event {
        Event::RunStart {
            workflow: self.workflow.name.clone(),
            run_dir: self.run_dir.clone(),
            workspace: self.workspace.root().to_path_buf(),
        }
    }

    /// Records what earlier runs' durable memory brought in, and renders a whiteboard
    /// among it to the system area as a step would.
    fn carried_over(&mut self, state: &RunState, note: Event) {
        if let Event::DurableMemory { loaded, .. } = &note {
            for name in loaded {
                let Some(id) = self.workflow.memory.iter().position(|m| m.name == *name) else {
                    continue;
                };
                if let Err(e) = super::memory::write_whiteboard(&state.memory[id], &self.run_dir) {
                    self.reporter
                        .warn(&format!("cannot write whiteboard.md: {e}"));
                }
            }
        }
        self.event(note);
    }

    /// Continues a stopped or crashed run from its last checkpoint.
    pub fn resume(
        workflow: &'w Checked,
        run_dir: &Path,
        options: &RunOptions,
    ) -> Result<(Self, RunState), StartError> {
        // Everything is read and checked before anything is written: a resume refused
        // leaves the run folder as it was, byte for byte.
        rundir::refuse_linked_records(run_dir).map_err(StartError::Setup)?;
        let info = rundir::read_info(run_dir).map_err(StartError::Setup)?;
        if info.workflow_hash != workflow.source_hash {
            return Err(StartError::Setup(format!(
                "{} changed since the run started (content hash differs); resuming would mix two workflows",
                workflow.path.display()
            )));
        }
        let mut state = rundir::read_state(run_dir, workflow).map_err(StartError::Setup)?;
        let damaged = |why: String| {
            StartError::Setup(format!(
                "{}: damaged {}: {why}",
                run_dir.display(),
                rundir::checkpoint_files(run_dir)
            ))
        };
        state.validate(workflow).map_err(damaged)?;
        if state.run_id != info.run_id {
            return Err(damaged(format!(
                "it is the state of run {:?}, run.json is run {:?}",
                state.run_id, info.run_id
            )));
        }
        if state.inputs_by_name(workflow) != info.inputs {
            return Err(damaged("its inputs differ from run.json's".into()));
        }
        // A run killed between its final checkpoint and its final `run.json` is finished
        // again (no role runs: the position is its exit) so the record is complete.
        if state.status == Status::Finished && info.ended_at.is_some() {
            return Err(StartError::Setup(format!(
                "run {} has already finished at `{}`: there is nothing to resume. `rondo replay {}` \
                 shows it; `rondo run {}` starts a new run (leave `--run-id` out for a fresh id)",
                info.run_id,
                info.exit.as_deref().unwrap_or("?"),
                run_dir.display(),
                info.workflow_path.display()
            )));
        }
        let layout = rundir::Layout::resolve(run_dir, &info).map_err(StartError::Setup)?;
        rundir::check_outside_workspace(run_dir, &info, &layout).map_err(StartError::Setup)?;
        let options = RunOptions {
            provider: info.provider_override.clone(),
            script: info.script.clone(),
            replay_from: info.replay_from.clone(),
            ..options.clone()
        };
        let script = load_script(&options)?;
        let mut interp = Self::build(workflow, &layout, &options, script)?;
        interp.check_keys()?;
        interp.envs.input_paths = input_paths(workflow, &state);
        interp.envs.image = options.image.clone();
        interp.envs.engine = options.engine;
        RunDir::rewind(&layout, &state)
            .map_err(|e| StartError::Setup(format!("cannot rewind {}: {e}", run_dir.display())))?;
        let dir = RunDir::open(run_dir, &layout.workspace)
            .map_err(|e| StartError::Setup(format!("cannot open {}: {e}", run_dir.display())))?;
        interp.dir = Some(dir);
        interp.resumed = true;
        let mut info = info;
        info.status = RunStatus::Running;
        interp.info = Some(info);
        if let Some(durable) = &mut interp.durable {
            durable.remember(workflow, &state);
        }
        if state.status != Status::Finished {
            state.status = Status::Running;
            state.ended = None;
            interp.event(Event::RunResumed { step: state.step });
        }
        Ok((interp, state))
    }

    pub(super) fn build(
        workflow: &'w Workflow,
        layout: &rundir::Layout,
        options: &RunOptions,
        script: Script,
    ) -> Result<Self, StartError> {
        // The system area first: the workspace may be inside it (`runs/<id>/workspace`).
        ensure_folder(&layout.system).map_err(|e| {
            StartError::Setup(format!("cannot create {}: {e}", layout.system.display()))
        })?;
        let workspace = workspace_of(workflow, layout)?;
        let run_dir = layout.system.clone();
        let pool = match &options.pool {
            Some(pool) => pool.clone(),
            None => Arc::new(Self::provider_pool(workflow, script)?),
        };
        let profile_of = profiles_of_roles(workflow, &pool, options.provider.as_deref())?;
        let demos = if options.no_demos {
            HashMap::new()
        } else {
            super::demos::load(workflow).map_err(StartError::Setup)?
        };
        let interrupted = Arc::new(AtomicBool::new(false));
        let interrupt = Arc::new(Notify::new());
        let redactor = redact::for_workflow(workflow);
        let reporter = Reporter::new(options.progress, redactor.clone());
        let started = Instant::now();
        let mut bus = Bus::default();
        if reporter.shows_events() {
            bus.subscribe(Box::new(Progress::new(reporter.clone(), started)));
        }
        Ok(Interpreter {
            workflow,
            envs: tools::Envs::new(
                workflow,
                &run_dir,
                workspace.root(),
                options.keep_env,
                options.unconfined_tools,
                redactor.clone(),
            ),
            run_dir,
            workspace,
            dir: None,
            info: None,
            start_jobs: Vec::new(),
            _in_flight: super::commit::InFlight::new(),
            start_pending: None,
            pool,
            prompts: prompts_of(workflow),
            profile_of,
            interrupted,
            interrupt,
            reporter,
            bus,
            redactor,
            started,
            spent: Default::default(),
            resumed: false,
            durable: super::durable::Durable::new(workflow, layout),
            demos,
            unrecorded: None,
        })
    }

    /// The workflow's provider profiles, its scripted ones serving `script`.
    pub fn provider_pool(workflow: &Workflow, script: Script) -> Result<ProviderPool, StartError> {
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
        Ok(pool)
    }

    /// The replies a run with these options gets from the scripted provider: `--script`,
    /// else the workflow's own, with `--replay-from`'s recorded ones over them.
    pub fn script_for(workflow: &Workflow, options: &RunOptions) -> Result<Script, StartError> {
        load_script(&RunOptions {
            script: options.script.clone().or_else(|| workflow.script.clone()),
            ..options.clone()
        })
    }

    /// An llm role the scripted provider answers with no reply in the script: a run that
    /// can reach one (a way from `start` leads to it) is refused before it starts, naming
    /// them all, unless the script says it is written not to reach it (`unreached:`); a run
    /// that reaches such a role anyway ends at `limit`, as when a role's replies for some
    /// visits only run out.
    fn check_replies(&self, script: &Script) -> Result<(), StartError> {
        let llm_roles: Vec<&str> = self
            .workflow
            .roles()
            .filter(|(_, r)| matches!(r.kind, RoleKind::Llm(_)))
            .map(|(i, _)| self.workflow.node(i).name.as_str())
            .collect();
        if let Some(stray) = script
            .unreached
            .iter()
            .find(|r| !llm_roles.contains(&r.as_str()))
        {
            let hint = crate::diagnostics::did_you_mean(stray, llm_roles.iter().copied())
                .unwrap_or_else(|| format!("its llm roles: {}", llm_roles.join(", ")));
            return Err(StartError::Setup(format!(
                "the script's `unreached` names `{stray}`, which is not an llm role of {} ({hint})",
                self.workflow.name
            )));
        }
        let reachable = reachable(self.workflow);
        let mut refused = Vec::new();
        // A scripted answer the environment chose (`provider_env`) or a chain fell back to is
        // never silent: the user may believe a model answered. `--provider scripted` and a
        // workflow whose own default is its demo say so themselves.
        let from_env = self
            .workflow
            .default_provider_env
            .as_deref()
            .and_then(|var| {
                std::env::var(var)
                    .ok()
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
            });
        let mut scripted: Vec<&str> = Vec::new();
        for (index, role) in self.workflow.roles() {
            if !matches!(role.kind, RoleKind::Llm(_)) || !reachable[index.index()] {
                continue;
            }
            let Some(profile) = self.profile_of.get(&index.index()) else {
                continue;
            };
            let name = &self.workflow.node(index).name;
            let unasked =
                !self.is_scripted_profile(profile) || from_env.as_deref() == Some(profile.as_str());
            if unasked && self.answers_scripted(profile) && !scripted.contains(&profile.as_str()) {
                scripted.push(profile);
            }
            if !self.answers_scripted(profile)
                || script.has_replies(name)
                || script.expects_unreached(name)
            {
                continue;
            }
            refused.push(name.clone());
        }
        if !scripted.is_empty() {
            self.reporter.warn(&format!(
                "replies from the script, not a model (profile `{}` is scripted or its chain ends in a scripted one)",
                scripted.join("`, `")
            ));
        }
        if refused.is_empty() {
            return Ok(());
        }
        let quoted: Vec<String> = refused.iter().map(|n| format!("`{n}`")).collect();
        Err(StartError::Setup(format!(
            "the scripted replies have no reply for {} {}, which the workflow can reach; add {} to the script (`replies: {{{}: \"...\"}}`, a list of replies for visits 1, 2, ..., or a `default:` reply for every role), or, for a script written for runs that never get there, say so: `unreached: [{}]` (a run that reaches one then ends at `limit`)",
            if refused.len() == 1 { "role" } else { "roles" },
            quoted.join(", "),
            if refused.len() == 1 { "it" } else { "them" },
            refused[0],
            refused.join(", "),
        )))
    }

    /// Whether a profile's calls go to the scripted provider: the first profile of its
    /// fallback chain that can be called (its key set) is a scripted one.
    fn answers_scripted(&self, profile: &str) -> bool {
        for link in self.pool.chain(profile) {
            if self.is_scripted_profile(&link) {
                return true;
            }
            let keyless = self.pool.profile(&link).is_some_and(|p| {
                p.key_env()
                    .filter(|_| p.key_required())
                    .is_some_and(|var| std::env::var_os(var).is_none_or(|v| v.is_empty()))
            });
            if !keyless {
                return false;
            }
        }
        false
    }

    /// A fallback chain with no profile that can be called (every one lacks its API key)
    /// is a start-up error, never a failure in the middle of a run. A profile whose key is
    /// missing is skipped for its fallbacks (docs/providers.md).
    fn check_keys(&self) -> Result<(), StartError> {
        let mut missing = Vec::new();
        let mut names: Vec<&String> = self.profile_of.values().collect();
        names.sort();
        names.dedup();
        for name in names {
            let chain = self.pool.chain(name);
            let lacking: Vec<String> = chain
                .iter()
                .filter_map(|link| {
                    let p = self.pool.profile(link)?;
                    let var = p.key_env().filter(|_| p.key_required())?;
                    std::env::var_os(var)
                        .is_none_or(|v| v.is_empty())
                        .then(|| format!("profile `{link}` needs the environment variable {var}"))
                })
                .collect();
            if lacking.len() == chain.len() {
                missing.extend(lacking);
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
}

/// The profile of llm roles that name none: the one `provider_env` names when it is set,
/// else the header's `provider`.
fn default_profile(workflow: &Workflow, pool: &ProviderPool) -> Result<String, StartError> {
    let chosen = workflow.default_provider_env.as_deref().and_then(|var| {
        let name = std::env::var(var).ok()?;
        let name = name.trim();
        (!name.is_empty()).then(|| (var, name.to_string()))
    });
    match chosen {
        None => Ok(workflow.providers[workflow.default_provider]
            .name()
            .to_string()),
        Some((_, name)) if pool.profile(&name).is_some() => Ok(name),
        Some((var, name)) => {
            let mut known: Vec<&str> = pool.profile_names().collect();
            known.sort();
            let shown: String = name.chars().take(40).collect();
            Err(StartError::Input(format!(
                "{var}={shown:?} is not a provider profile of {} (profiles: {})",
                workflow.name,
                known.join(", ")
            )))
        }
    }
}

/// The templates llm roles render.
fn template_names(workflow: &Workflow) -> Vec<String> {
    let mut names = Vec::new();
    for (_, role) in workflow.roles() {
        if let RoleKind::Llm(l) = &role.kind {
            names.extend(
                l.system
                    .iter()
                    .chain(l.prompt.iter())
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
        script.recorded = true;
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
    // An input not given takes its `env("VAR", ...)` variable's value, as if given.
    let from_env: Vec<(String, String)> = workflow
        .inputs
        .iter()
        .filter(|i| !given.iter().any(|(key, _)| key == &i.name))
        .filter_map(|i| {
            let var = i.env.as_deref()?;
            let value = std::env::var(var).ok().filter(|v| !v.trim().is_empty())?;
            Some((i.name.clone(), value))
        })
        .collect();
    for (key, raw) in given.iter().chain(&from_env) {
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
        ty.validate(&value).map_err(|e| {
            let from = match &workflow.inputs[index].env {
                Some(var) if from_env.iter().any(|(k, _)| k == key) => format!(" (from {var})"),
                _ => String::new(),
            };
            StartError::Input(format!("input `{key}`{from}: {e}"))
        })?;
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
        .collect::<Result<Vec<Value>, StartError>>()
        .and_then(|values| inputs_within_limit(workflow, values))
        .and_then(|values| visit_bounds_given(workflow, values))
}

/// Each input's JSON within `limits.max_input_bytes` and its own `max_bytes`/`max_len`
/// (a path as resolved): the bounds the proven worst-case cost counts on.
pub(crate) fn inputs_within_limit(
    workflow: &Workflow,
    values: Vec<Value>,
) -> Result<Vec<Value>, StartError> {
    for (input, v) in workflow.inputs.iter().zip(&values) {
        if let Some(why) = crate::compile::memory_over(v, input.bound) {
            return Err(StartError::Input(format!(
                "input `{}` holds {why}",
                input.name
            )));
        }
    }
    if let Some((limit, _)) = workflow.limits.max_input_bytes {
        for (input, v) in workflow.inputs.iter().zip(&values) {
            let bytes = serde_json::to_string(v).map_or(0, |s| s.len()) as u64;
            if bytes > limit {
                return Err(StartError::Input(format!(
                    "input `{}` holds {bytes} bytes, more than max_input_bytes = {limit}",
                    input.name
                )));
            }
        }
    }
    Ok(values)
}

/// An input that bounds a role's visits (`max_visits = input.N`) must let it run once.
fn visit_bounds_given(workflow: &Workflow, values: Vec<Value>) -> Result<Vec<Value>, StartError> {
    for (node, role) in workflow.roles() {
        if let Some(crate::compile::MaxVisits::Input(id)) = role.max_visits
            && values
                .get(id)
                .and_then(Value::as_u64)
                .is_none_or(|n| n == 0)
        {
            let name = &workflow.inputs[id].name;
            return Err(StartError::Input(format!(
                "input `{name}` is {}, but it bounds the visits of role `{}` (`max_visits = input.{name}`): give at least 1",
                values
                    .get(id)
                    .map_or_else(|| "absent".to_string(), Value::to_string),
                workflow.node(node).name
            )));
        }
    }
    Ok(values)
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

/// Why `rondo run --run-id ID` refuses a run folder that holds a run, and what to do
/// instead.
fn id_taken(system: &Path) -> String {
    let shown = system.display();
    let fresh = "choose another `--run-id`, or leave it out for a fresh id";
    match rundir::read_info(system) {
        Ok(info) if info.ended_at.is_some() && info.status == RunStatus::Finished => format!(
            "{shown} already holds run {}, which finished at `{}`: {fresh}; `rondo replay {shown}` shows that run",
            info.run_id,
            info.exit.as_deref().unwrap_or("?")
        ),
        Ok(info) => format!(
            "{shown} already holds run {} ({}, not finished): `rondo resume {shown}` continues it; or {fresh}",
            info.run_id, info.status
        ),
        Err(e) => format!("{shown} already holds a run ({e}): {fresh}"),
    }
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
pub(super) fn input_paths(workflow: &Workflow, state: &RunState) -> Vec<PathBuf> {
    workflow
        .inputs
        .iter()
        .zip(&state.inputs)
        .filter(|(i, _)| i.path)
        .filter_map(|(_, v)| v.as_str().map(PathBuf::from))
        .filter(|p| p.is_absolute() && p.exists())
        .collect()
}

/// The profiles as written, with the model the run calls (`model_env` read); a URL from
/// `base_url_env` is not recorded (it may carry credentials).
fn provider_summaries(workflow: &Workflow, pool: &ProviderPool) -> Vec<Value> {
    workflow
        .providers
        .iter()
        .map(|p| &p.profile)
        .map(|p| {
            let model = pool.profile(&p.name).map_or(p.model.clone(), |r| r.model.clone());
            json!({"name": p.name, "kind": p.kind, "model": model, "base_url": p.base_url, "base_url_env": p.base_url_env, "api_key_env": p.api_key_env})
        })
        .collect()
}

/// Which nodes a run can reach: every target of every route from `start` on (parallel
/// branches and map workers included), and the `finally` role, which every run ends with.
fn reachable(workflow: &Workflow) -> Vec<bool> {
    use crate::compile::RouteTarget;
    let mut seen = vec![false; workflow.graph.node_count()];
    let mut stack = vec![workflow.start];
    stack.extend(workflow.finally);
    while let Some(node) = stack.pop() {
        if std::mem::replace(&mut seen[node.index()], true) {
            continue;
        }
        for &id in &workflow.outgoing[node.index()] {
            match &workflow.routes[id].target {
                RouteTarget::Node { node } => stack.push(*node),
                RouteTarget::Parallel { branches, join } => {
                    stack.extend(branches.iter().copied());
                    stack.push(*join);
                }
                RouteTarget::Map { worker, join, .. } => {
                    stack.push(*worker);
                    stack.push(*join);
                }
            }
        }
    }
    seen
}

/// A start whose first checkpoint or `run.json` could not be made durable.
fn start_unrecorded(e: std::io::Error) -> StartError {
    StartError::Setup(format!("cannot write the run's records: {e}"))
}

/// A prepared start whose writes (the first checkpoint, then `run.json`) are made durable
/// on the calling thread.
fn recorded_here(
    (mut interp, state): (Interpreter<'_>, RunState),
) -> Result<(Interpreter<'_>, RunState), StartError> {
    for job in std::mem::take(&mut interp.start_jobs) {
        job.run().map_err(start_unrecorded)?;
    }
    Ok((interp, state))
}

/// Makes `dir` (and its parents) unless it exists: one call when it does (something
/// else in its place fails the first open beneath it).
fn ensure_folder(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir),
        Err(e) => Err(e),
    }
}

/// A workflow's templates, read and parsed once per process while their files do not
/// change: a server or an eval starts many runs of one workflow, and parsing its templates
/// was most of a run's start-up (tera's parser is slow).
fn prompts_of(workflow: &Workflow) -> Arc<Prompts> {
    use std::sync::{Mutex, OnceLock};
    /// Workflows whose templates are kept; more (a process that loads many) start afresh.
    const KEPT: usize = 64;
    type Key = (PathBuf, Vec<String>);
    type Kept = HashMap<Key, (Vec<FileStamp>, Arc<Prompts>)>;
    static LOADED: OnceLock<Mutex<Kept>> = OnceLock::new();
    let names = template_names(workflow);
    let key = (workflow.prompts_dir.clone(), names);
    let loaded = LOADED.get_or_init(Default::default);
    if let Ok(kept) = loaded.lock()
        && let Some((stamps, prompts)) = kept.get(&key)
        && stamps.iter().all(FileStamp::unchanged)
    {
        return prompts.clone();
    }
    let prompts = Arc::new(Prompts::load_named(&key.0, &key.1));
    // Every file it read or looked for: one that appears, changes or goes is read again.
    let stamps = key
        .1
        .iter()
        .chain(prompts.sources.keys())
        .chain(prompts.errors.keys())
        .map(|name| FileStamp::of(key.0.join(name)))
        .collect();
    if let Ok(mut kept) = loaded.lock() {
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(key, (stamps, prompts.clone()));
    }
    prompts
}

/// A file's identity and last change (none when it does not exist).
struct FileStamp {
    path: PathBuf,
    seen: Option<(u64, u64, u64, std::time::SystemTime)>,
}

impl FileStamp {
    fn of(path: PathBuf) -> FileStamp {
        let seen = Self::look(&path);
        FileStamp { path, seen }
    }

    fn look(path: &Path) -> Option<(u64, u64, u64, std::time::SystemTime)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
    }

    fn unchanged(&self) -> bool {
        Self::look(&self.path) == self.seen
    }
}

/// The run's workspace. It is made by the first write to it (a tool's start, an artifact): a
/// run that writes nothing there (one model call) leaves no empty folder behind. A code
/// context reads its folders beneath it as it is, so then it is made now.
fn workspace_of(
    workflow: &Workflow,
    layout: &rundir::Layout,
) -> Result<rondo_workspace::Workspace, StartError> {
    let code = workflow
        .memory
        .iter()
        .any(|m| matches!(m.kind, crate::compile::MemoryKind::CodeContext { .. }));
    rondo_workspace::Workspace::deferred(&layout.workspace)
        .and_then(|w| {
            if code {
                w.ensure()?;
            }
            Ok(w)
        })
        .map_err(|e| {
            StartError::Setup(format!("cannot create {}: {e}", layout.workspace.display()))
        })
}

/// The profile each llm role calls: `--provider` for all, else the role's own or the default.
fn profiles_of_roles(
    workflow: &Workflow,
    pool: &ProviderPool,
    chosen: Option<&str>,
) -> Result<HashMap<usize, String>, StartError> {
    let default = default_profile(workflow, pool)?;
    if let Some(name) = chosen
        && pool.profile(name).is_none()
    {
        let known: Vec<&str> = pool.profile_names().collect();
        return Err(StartError::Setup(format!(
            "--provider `{name}` is not a profile of this workflow (profiles: {})",
            known.join(", ")
        )));
    }
    let mut profile_of = HashMap::new();
    for (index, role) in workflow.roles() {
        if let RoleKind::Llm(l) = &role.kind {
            let name = match chosen {
                Some(name) => name.to_string(),
                None if l.default_provider => default.clone(),
                None => workflow.providers[l.provider].name().to_string(),
            };
            profile_of.insert(index.index(), name);
        }
    }
    Ok(profile_of)
}
