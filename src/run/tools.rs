//! Tool roles: environments (started on first use, shut down at the end) and turning a
//! process result into the standard tool result.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use petgraph::graph::NodeIndex;
use rondo_env::{
    Command, DockerConfig, Environment, ExecOutput, ExecRequest, LocalConfig, LocalEnv, StreamKind,
};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::events::Event;
use super::state::RunState;
use super::{Interpreter, RoleRun, StepError};
use crate::compile::{EnvKind, Show, Tool, ToolAction, ToolRole, Workflow};
use crate::prompt::render_str;

pub struct Envs {
    specs: Vec<(crate::compile::EnvSpec, Vec<rondo_env::ToolSpec>)>,
    started: Vec<OnceCell<Result<Arc<dyn Environment>, String>>>,
    branch_envs:
        tokio::sync::Mutex<std::collections::HashMap<(usize, usize), Arc<dyn Environment>>>,
    /// The system area: install logs.
    run_dir: std::path::PathBuf,
    /// The tools' working directory, and the base of relative Docker mounts.
    workspace: std::path::PathBuf,
    run_id: String,
    keep: bool,
    /// Local tools may run unconfined where the kernel cannot confine them.
    unconfined: bool,
    redactor: rondo_env::Redactor,
    /// Host paths named by `path` inputs: mounted read-only, at the same path, in Docker.
    pub input_paths: Vec<std::path::PathBuf>,
    /// The image every Docker environment runs instead of its declared one
    /// ([`super::RunOptions::image`]).
    pub image: Option<String>,
    /// Where Docker environments' sandboxes come from ([`super::RunOptions::engine`]).
    pub engine: rondo_env::SandboxEngine,
    /// Events produced while roles run concurrently, written when their result is applied.
    pub pending_events: Mutex<Vec<Event>>,
}

/// The command for a tool: through its installed environment, or its executable as is.
fn tool_command(
    environment: &dyn Environment,
    tool: &Tool,
    args: &[String],
) -> Result<ExecRequest, StepError> {
    let mut request = if !tool.spec.needs_install() {
        let mut line = tool.spec.executable.clone();
        for a in args {
            line.push(' ');
            line.push_str(&rondo_env::shell_quote(a));
        }
        ExecRequest::new(Command::Shell(line))
    } else {
        match environment.tools().get(tool.name()) {
            Some(installed) => installed.command(args),
            None => {
                return Err(StepError::Failed(format!(
                    "tool `{}` is not installed in its environment",
                    tool.name()
                )));
            }
        }
    };
    request.max_processes = tool.spec.max_processes;
    request.capabilities = tool.spec.capabilities.clone().unwrap_or_default();
    request.keep_processes = tool.spec.keep_processes;
    Ok(request)
}

/// The spec an environment installs: the source as an absolute path, and the argument
/// type as the schema shown to the tool's users.
fn install_spec(tool: &Tool) -> rondo_env::ToolSpec {
    let mut spec = tool.spec.clone();
    spec.source = spec.source.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
    if spec.input_schema.is_none() {
        spec.input_schema = tool.input_schema();
    }
    spec
}

impl Envs {
    pub fn new(
        workflow: &Workflow,
        run_dir: &std::path::Path,
        workspace: &std::path::Path,
        keep: bool,
        unconfined: bool,
        redactor: rondo_env::Redactor,
    ) -> Envs {
        // Each environment installs the tools it declares plus those its tool roles run.
        let mut specs: Vec<(crate::compile::EnvSpec, Vec<usize>)> = workflow
            .environments
            .iter()
            .map(|e| (e.clone(), e.tools.clone()))
            .collect();
        for (_, role) in workflow.roles() {
            if let crate::compile::RoleKind::Tool(t) = &role.kind {
                let env = t.env.unwrap_or(0);
                let ids: Vec<usize> = match &t.action {
                    ToolAction::Tool { tool, .. } => vec![*tool],
                    ToolAction::Choose { choices, .. } | ToolAction::Calls { choices, .. } => {
                        choices.clone()
                    }
                    ToolAction::Command { .. } => Vec::new(),
                };
                for id in ids {
                    if id < workflow.tools.len() && !specs[env].1.contains(&id) {
                        specs[env].1.push(id);
                    }
                }
            }
        }
        // Tools with nothing to install run their executable as it is.
        let specs: Vec<_> = specs
            .into_iter()
            .map(|(e, ids)| {
                (
                    e,
                    ids.iter()
                        .filter(|&&i| workflow.tools[i].spec.needs_install())
                        .map(|&i| install_spec(&workflow.tools[i]))
                        .collect(),
                )
            })
            .collect();
        Envs {
            started: specs.iter().map(|_| OnceCell::new()).collect(),
            branch_envs: tokio::sync::Mutex::new(std::collections::HashMap::new()),
            specs,
            run_dir: run_dir.to_path_buf(),
            workspace: workspace.to_path_buf(),
            run_id: run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            keep,
            unconfined,
            redactor,
            input_paths: Vec::new(),
            image: None,
            engine: rondo_env::SandboxEngine::Docker,
            pending_events: Mutex::new(Vec::new()),
        }
    }

    /// Containers of crashed runs (their owner process is gone), this run's after a
    /// SIGKILL among them: removed before a resumed run does anything else.
    pub(super) async fn remove_orphans(&self) -> Vec<String> {
        if !self.specs.iter().any(|(s, _)| s.kind == EnvKind::Docker)
            || self.engine != rondo_env::SandboxEngine::Docker
        {
            return Vec::new();
        }
        match rondo_env::connect().await {
            Ok(docker) => rondo_env::cleanup_stale(&docker).await.unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Starts environment `id`: the run's, or a branch's own container.
    /// Journals what the kernel gave the local tools of `environment`, and says on the
    /// terminal when a protection is missing.
    fn report_protections(&self, environment: &str, protections: &rondo_env::Protections) {
        let missing: Vec<String> = protections
            .missing()
            .into_iter()
            .map(String::from)
            .collect();
        if self.unconfined && !protections.write_rules {
            eprintln!(
                "warning: the tools of environment `{environment}` run UNCONFINED, with all your \
                 permissions (--unconfined-tools); missing: {}",
                missing.join(", ")
            );
        } else if !missing.is_empty() {
            eprintln!(
                "warning: this kernel does not give the tools of environment `{environment}`: {}",
                missing.join(", ")
            );
        }
        if let Ok(mut events) = self.pending_events.lock() {
            events.push(Event::ToolConfinement {
                environment: environment.to_string(),
                protections: protections.clone(),
                missing,
            });
        }
    }

    async fn start(&self, id: usize) -> Result<Arc<dyn Environment>, String> {
        let (spec, tools) = self.specs.get(id).ok_or("unknown environment")?;
        // The run's workspace is made by its first write: the tools work in it.
        rondo_workspace::Workspace::deferred(&self.workspace)
            .and_then(|w| w.ensure())
            .map_err(|e| format!("workspace {}: {e}", self.workspace.display()))?;
        {
            let run_dir = std::fs::canonicalize(&self.run_dir).unwrap_or(self.run_dir.clone());
            match spec.kind {
                EnvKind::Local => {
                    let mut config = LocalConfig::new(self.workspace.clone());
                    config.tools = tools.clone();
                    config.env = spec.env.clone();
                    config.redactor = self.redactor.clone();
                    config.install_log_dir = Some(run_dir.join("install_logs"));
                    config.tool_cache_dir = Some(tool_cache_dir());
                    config.unconfined = self.unconfined;
                    // In a `--workspace` folder the records are beneath the workspace:
                    // tools see that folder read-only.
                    let workspace =
                        std::fs::canonicalize(&self.workspace).unwrap_or(self.workspace.clone());
                    if run_dir.starts_with(&workspace) {
                        config
                            .read_only
                            .push(workspace.join(rondo_workspace::SYSTEM_DIR));
                    }
                    LocalEnv::start(config)
                        .await
                        .map(|e| {
                            self.report_protections(&spec.name, e.protections());
                            Arc::new(e) as Arc<dyn Environment>
                        })
                        .map_err(|e| match e {
                            rondo_env::EnvError::Confinement(_) => format!(
                                "environment `{}`: {e}; run the tools in Docker, or pass \
                                 `--unconfined-tools` (or set RONDO_UNCONFINED_TOOLS=1) to \
                                 run them with all your permissions",
                                spec.name
                            ),
                            e => format!("environment `{}`: {e}", spec.name),
                        })
                }
                EnvKind::Docker => {
                    // Containers left by a crashed run (their owner process is gone) go first.
                    if self.engine == rondo_env::SandboxEngine::Docker
                        && let Ok(docker) = rondo_env::connect().await
                        && let Ok(removed) = rondo_env::cleanup_stale(&docker).await
                        && !removed.is_empty()
                        && let Ok(mut events) = self.pending_events.lock()
                    {
                        events.push(Event::StaleContainersRemoved {
                            containers: removed,
                        });
                    }
                    let mut config = DockerConfig::new(
                        self.image
                            .clone()
                            .or_else(|| spec.image.clone())
                            .unwrap_or_default(),
                        self.run_id.clone(),
                    );
                    if let Some(w) = &spec.workdir {
                        config.workdir = w.clone();
                    }
                    config.env = spec.env.clone();
                    config.redactor = self.redactor.clone();
                    config.network = spec.network.clone().filter(|n| n != "none");
                    config.memory_bytes = spec.memory.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
                    config.cpus = spec.cpus;
                    config.pids_limit = spec.pids.map(|p| p as i64);
                    config.keep = self.keep;
                    config.user = spec.user.clone();
                    config.read_only_root = spec.read_only_root;
                    config.tools = tools.clone();
                    (config.mounts, config.masks) =
                        docker_mounts(&spec.mounts, &self.workspace, &run_dir)?;
                    config
                        .mounts
                        .extend(self.input_paths.iter().map(|p| rondo_env::Mount {
                            host: p.clone(),
                            container: p.to_string_lossy().into_owned(),
                            writable: false,
                            replace: false,
                        }));
                    config.install_log_dir = Some(run_dir.join("install_logs"));
                    self.engine
                        .start(config, &run_dir)
                        .await
                        .map_err(|e| format!("environment `{}`: {e}", spec.name))
                }
            }
        }
    }

    /// The environment a role runs in. In a parallel or map branch, an environment
    /// declared `per_branch` is the branch's own container.
    pub async fn get(
        &self,
        id: usize,
        branch: Option<usize>,
    ) -> Result<Arc<dyn Environment>, String> {
        let per_branch = self
            .specs
            .get(id)
            .is_some_and(|(spec, _)| spec.per_branch && spec.kind == EnvKind::Docker);
        match branch {
            Some(b) if per_branch => {
                let mut branches = self.branch_envs.lock().await;
                if let Some(env) = branches.get(&(id, b)) {
                    return Ok(env.clone());
                }
                let env = self.start(id).await?;
                branches.insert((id, b), env.clone());
                Ok(env)
            }
            _ => self.started[id]
                .get_or_init(|| self.start(id))
                .await
                .clone(),
        }
    }

    /// Removes the branch containers once their branches joined.
    pub async fn release_branches(&self) {
        let envs: Vec<Arc<dyn Environment>> = self
            .branch_envs
            .lock()
            .await
            .drain()
            .map(|(_, e)| e)
            .collect();
        for env in envs {
            let _ = env.shutdown().await;
        }
    }

    pub async fn shutdown(&self) {
        self.release_branches().await;
        for cell in &self.started {
            if let Some(Ok(env)) = cell.get() {
                let _ = env.shutdown().await;
            }
        }
    }
}

/// The declared mounts (see [`crate::compile::mounts`]): a workspace folder is created if
/// missing, beneath the workspace (never through a link out of it); a host folder must
/// exist. The Docker socket is refused (here and by rondo-env). With the mounts, the
/// container paths to cover so a mounted `.rondo/` system area (`--workspace`) stays out
/// of the container.
fn docker_mounts(
    specs: &[String],
    workspace: &std::path::Path,
    run_dir: &std::path::Path,
) -> Result<(Vec<rondo_env::Mount>, Vec<String>), String> {
    use crate::compile::mounts::{MountSource, parse_mount};
    let root = rondo_workspace::Workspace::open(workspace)
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))?;
    // The records a container must never see: a `--workspace` folder's `.rondo` (every run
    // made there), or the run folder itself (which holds its workspace).
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
    let run_dir = canonical(run_dir);
    let records = if run_dir.starts_with(root.root()) {
        root.root().join(rondo_workspace::SYSTEM_DIR)
    } else {
        run_dir
    };
    let mut masks = Vec::new();
    let mut mounts = Vec::new();
    for m in specs {
        let spec = parse_mount(m).map_err(|e| format!("mount `{m}`: {e}"))?;
        let host = match &spec.source {
            MountSource::Workspace(rel) => {
                let rel = rel.to_string_lossy();
                if rel.trim_matches(['.', '/']).is_empty() {
                    root.root().to_path_buf()
                } else {
                    root.subdir(&rel, true)
                        .map_err(|e| {
                            format!(
                                "mount `{m}`: `{rel}` cannot be opened as a folder inside the \
                                 run's workspace ({e}); a link out of the workspace is refused"
                            )
                        })?
                        .root()
                        .to_path_buf()
                }
            }
            MountSource::Host(path) => {
                if !path.is_dir() && !path.is_file() {
                    return Err(format!("mount `{m}`: {} does not exist", path.display()));
                }
                path.clone()
            }
        };
        if let Some(why) = rondo_env::refused_mount(&host) {
            return Err(format!("mount `{m}`: {why}"));
        }
        let host_real = canonical(&host);
        if host_real.starts_with(&records) && !host_real.starts_with(root.root()) {
            return Err(format!(
                "mount `{m}`: {} holds the run's records, which no container may see",
                host.display()
            ));
        }
        let container = spec.container.trim_end_matches('/');
        if host.join(rondo_workspace::SYSTEM_DIR).is_dir() {
            masks.push(format!("{container}/{}", rondo_workspace::SYSTEM_DIR));
        }
        if let Ok(inside) = records.strip_prefix(&host_real)
            && !inside.as_os_str().is_empty()
        {
            let mask = format!("{container}/{}", inside.display());
            if !masks.contains(&mask) {
                masks.push(mask);
            }
        }
        mounts.push(rondo_env::Mount {
            host,
            container: spec.container,
            writable: spec.writable,
            replace: spec.replace,
        });
    }
    Ok((mounts, masks))
}

/// Installed local tools are reused across runs.
fn tool_cache_dir() -> std::path::PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("rondo").join("tools")
}

fn arg_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn failed(tool_name: &str, kind: &str, error: String, args: Value) -> Value {
    json!({
        "status": "failed", "tool_name": tool_name, "data": Value::Null, "warnings": [],
        "error": error, "error_kind": kind, "execution_time": 0.0, "exit_code": Value::Null, "ok": false,
        "stdout": "", "stderr": "", "shown": format!("{kind}: {error}"), "log": Value::Null,
        "timed_out": false, "args": args,
    })
}

/// What a tool role's call needs to be made: the run, the role, its environment.
struct ToolCall<'a, 'w> {
    interp: &'a Interpreter<'w>,
    state: &'a RunState,
    node: NodeIndex,
    item: Option<&'a Value>,
    name: &'a str,
    environment: &'a dyn Environment,
}

/// A call ready to run: the request, the tool (none for a bare command), the name the
/// result records, and the arguments as given.
type Prepared = (ExecRequest, Option<usize>, String, Value);

pub(super) async fn run_tool_role(
    interp: &Interpreter<'_>,
    state: &RunState,
    node: NodeIndex,
    role: &ToolRole,
    visit: u64,
    item: Option<&Value>,
    branch: Option<usize>,
) -> Result<RoleRun, StepError> {
    let workflow = interp.workflow;
    let name = &workflow.node(node).name;
    let env_id = role.env.unwrap_or(0);
    let environment = interp
        .envs
        .get(env_id, branch)
        .await
        .map_err(StepError::Failed)?;
    if let ToolAction::Calls { choices, calls, .. } = &role.action {
        let calls = interp
            .env(state, Some(node), None, item)
            .value(calls)
            .map_err(|e| e.step(format_args!("role `{name}`: `calls`")))?;
        let step_id = step_id(state, branch);
        let output = run_calls(
            workflow,
            environment.as_ref(),
            role,
            choices,
            &calls,
            &step_id,
        )
        .await?;
        return Ok(RoleRun::plain(output));
    }
    let names = interp.name_context(state, node, visit, item);
    let cx = ToolCall {
        interp,
        state,
        node,
        item,
        name,
        environment: environment.as_ref(),
    };
    let (mut request, tool_id, tool_name, args) = match &role.action {
        ToolAction::Command { argv } => cx.command(argv, &names)?,
        ToolAction::Tool { tool, args } => cx.tool(*tool, args)?,
        ToolAction::Choose {
            choices,
            call,
            args,
            argv,
        } => match cx.chosen(choices, call, args.as_deref(), argv.as_deref())? {
            Ok(prepared) => prepared,
            Err(failed) => return Ok(RoleRun::plain(failed)),
        },
        ToolAction::Calls { .. } => {
            return Err(StepError::Failed(format!("role `{name}`: calls run apart")));
        }
    };
    let timeout = role
        .timeout_ms
        .map(Duration::from_millis)
        .or_else(|| tool_id.and_then(|t| workflow.tools[t].spec.timeout))
        .unwrap_or(Duration::from_secs(300));
    request.timeout = Some(timeout);
    request
        .env
        .insert("RONDO_STEP_ID".into(), step_id(state, branch));
    request.max_output = role
        .max_output
        .or_else(|| tool_id.and_then(|t| workflow.tools[t].spec.max_output))
        .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    let log = match &role.log {
        Some(template) => cx.open_log(template, &names, &mut request)?,
        None => None,
    };
    if let Some(show) = interp.reporter.line_printer(name) {
        // A tool's result record is data for the workflow, summed up by the step line; the
        // terminal shows the lines it prints along the way.
        request = request.on_line(move |kind, line| {
            if !(kind == StreamKind::Stdout && is_result_record(line)) {
                show(line)
            }
        });
    }
    let out = environment
        .exec(request)
        .await
        .map_err(|e| exec_failed(format_args!("role `{name}`"), e))?;
    Ok(RoleRun {
        output: tool_result(&tool_name, &out, role.show, log, args, timeout),
        tool: tool_id,
        prompt: None,
        record: None,
    })
}

impl ToolCall<'_, '_> {
    /// `run = [...]`: a command line, each argument a template.
    fn command(&self, argv: &[String], names: &tera::Context) -> Result<Prepared, StepError> {
        let name = self.name;
        let argv = argv
            .iter()
            .map(|a| render_str(a, names))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.step(format_args!("role `{name}`: command")))?;
        let program = argv.first().cloned().unwrap_or_default();
        Ok((
            ExecRequest::new(Command::Argv(argv)),
            None,
            program,
            Value::Null,
        ))
    }

    /// `tool = NAME(args)`: a declared tool, its arguments evaluated.
    fn tool(&self, tool: usize, args: &[crate::compile::Expr]) -> Result<Prepared, StepError> {
        let name = self.name;
        let env = self
            .interp
            .env(self.state, Some(self.node), None, self.item);
        let values = args
            .iter()
            .map(|a| env.value(a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.step(format_args!("role `{name}`: tool arguments")))?;
        let spec = &self.interp.workflow.tools[tool];
        let texts: Vec<String> = values.iter().map(arg_text).collect();
        let request = tool_command(self.environment, spec, &texts)?;
        Ok((
            request,
            Some(tool),
            spec.name().to_string(),
            Value::Array(values),
        ))
    }

    /// `call = EXPR` among `choices`: the tool a value names, with `args`; the failed
    /// result instead when it names none of them or the arguments do not fit.
    fn chosen(
        &self,
        choices: &[usize],
        call: &crate::compile::Expr,
        args: Option<&crate::compile::Expr>,
        argv: Option<&crate::compile::Expr>,
    ) -> Result<Result<Prepared, Value>, StepError> {
        let (name, workflow) = (self.name, self.interp.workflow);
        let env = self
            .interp
            .env(self.state, Some(self.node), None, self.item);
        let chosen = env
            .value(call)
            .map_err(|e| e.step(format_args!("role `{name}`: `call`")))?;
        let arguments = match args {
            Some(a) => env
                .value(a)
                .map_err(|e| e.step(format_args!("role `{name}`: `args`")))?,
            None => Value::Object(Default::default()),
        };
        let chosen_name = chosen.as_str().unwrap_or("").to_string();
        let Some(&tool) = choices
            .iter()
            .find(|&&t| workflow.tools[t].name() == chosen_name)
        else {
            let known: Vec<&str> = choices.iter().map(|&t| workflow.tools[t].name()).collect();
            return Ok(Err(failed(
                &chosen_name,
                "unknown_tool",
                format!(
                    "`{chosen_name}` is not one of the available tools ({})",
                    known.join(", ")
                ),
                arguments,
            )));
        };
        let spec = &workflow.tools[tool];
        if let Err(e) = spec.check_args(&arguments) {
            return Ok(Err(failed(
                spec.name(),
                "validation",
                format!("invalid arguments for `{}`: {e}", spec.name()),
                arguments,
            )));
        }
        // A list is spread over the command line; an object is one JSON argument.
        let passed = match argv {
            Some(a) => env
                .value(a)
                .map_err(|e| e.step(format_args!("role `{name}`: `argv`")))?,
            None => arguments.clone(),
        };
        let argv: Vec<String> = match &passed {
            Value::Array(items) => items.iter().map(arg_text).collect(),
            other => vec![arg_text(other)],
        };
        let request = tool_command(self.environment, spec, &argv)?;
        Ok(Ok((
            request,
            Some(tool),
            spec.name().to_string(),
            arguments,
        )))
    }

    /// Opens the log file `template` names in the workspace for `request`; its name. A
    /// name out of the workspace, or a link a tool planted: the tool runs without its
    /// log, and the refusal is recorded.
    fn open_log(
        &self,
        template: &str,
        names: &tera::Context,
        request: &mut ExecRequest,
    ) -> Result<Option<String>, StepError> {
        let (name, interp) = (self.name, self.interp);
        let file = render_str(template, names)
            .map_err(|e| e.step(format_args!("role `{name}`: log name")))?;
        match interp.workspace.create_file(&file) {
            Ok(log_file) => {
                request.log_file = Some(std::sync::Arc::new(log_file));
                request.log_path = Some(interp.workspace.root().join(&file));
                Ok(Some(file))
            }
            Err(e) => {
                if let Ok(mut events) = interp.envs.pending_events.lock() {
                    events.push(Event::LogRejected {
                        role: name.to_string(),
                        file,
                        reason: e.to_string(),
                    });
                }
                Ok(None)
            }
        }
    }
}

/// A lost sandbox (its node gone) stops the run at its last checkpoint, as an interruption:
/// resumed, the step runs again in a new sandbox (`rondo eval` does so at once).
fn exec_failed(what: std::fmt::Arguments<'_>, e: rondo_env::EnvError) -> StepError {
    match e {
        rondo_env::EnvError::SandboxLost { .. } => StepError::Interrupted,
        e => StepError::Failed(format!("{what}: {e}")),
    }
}

/// `RONDO_STEP_ID`: the same for a step run again after a crash, so a tool can make itself
/// idempotent (a native reply's calls add `.call<n>`).
fn step_id(state: &RunState, branch: Option<usize>) -> String {
    match branch {
        Some(b) => format!("{}-{}.{b}", state.run_id, state.step + 1),
        None => format!("{}-{}", state.run_id, state.step + 1),
    }
}

/// Runs every call of a native reply at once, each checked against its tool's `input`
/// first: `{ok, results: [{id, tool, args, ok, error_kind, observation}]}` in the calls'
/// order. A call that cannot run (unknown tool, bad arguments, past the per-turn bound) is a
/// result with its reason (`observation: {tool, error}`), never a failed step.
async fn run_calls(
    workflow: &Workflow,
    environment: &dyn Environment,
    role: &ToolRole,
    choices: &[usize],
    calls: &Value,
    step_id: &str,
) -> Result<Value, StepError> {
    let calls: &[Value] = calls.as_array().map_or(&[], Vec::as_slice);
    // A refused call is recorded as the reference records one: a `⛔️validation_error`
    // step whose observation names the tool and why.
    let refused = |id: &Value, tool: &str, args: &Value, kind: &str, why: String| {
        let name = match kind {
            "validation" | "unknown_tool" => "⛔️validation_error",
            _ => tool,
        };
        json!({"id": id, "tool": name, "args": args, "ok": false, "error_kind": kind,
            "observation": {"tool": tool, "error": why}})
    };
    let runs = calls.iter().enumerate().map(|(i, call)| async move {
        let id = call.get("id").cloned().unwrap_or(Value::Null);
        let chosen = call.get("tool").and_then(Value::as_str).unwrap_or("");
        let args = call.get("args").cloned().unwrap_or(Value::Null);
        if i >= crate::compile::MAX_CALLS_PER_TURN {
            let why = format!(
                "not run: at most {} tool calls are run per reply",
                crate::compile::MAX_CALLS_PER_TURN
            );
            return Ok(refused(&id, chosen, &args, "too_many_calls", why));
        }
        let Some(&tool) = choices
            .iter()
            .find(|&&t| workflow.tools[t].name() == chosen)
        else {
            let known: Vec<&str> = choices.iter().map(|&t| workflow.tools[t].name()).collect();
            let why = format!(
                "`{chosen}` is not one of the available tools ({})",
                known.join(", ")
            );
            return Ok(refused(&id, chosen, &args, "unknown_tool", why));
        };
        let spec = &workflow.tools[tool];
        if let Err(e) = spec.check_args(&args) {
            let why = format!("invalid arguments for `{chosen}`: {e}");
            return Ok(refused(&id, chosen, &args, "validation", why));
        }
        let mut request = tool_command(environment, spec, &[arg_text(&args)])?;
        let timeout = role
            .timeout_ms
            .map(Duration::from_millis)
            .or(spec.spec.timeout)
            .unwrap_or(Duration::from_secs(300));
        request.timeout = Some(timeout);
        request
            .env
            .insert("RONDO_STEP_ID".into(), format!("{step_id}.call{}", i + 1));
        request.max_output = role
            .max_output
            .or(spec.spec.max_output)
            .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
        let out = environment
            .exec(request)
            .await
            .map_err(|e| exec_failed(format_args!("tool `{chosen}`"), e))?;
        let result = tool_result(chosen, &out, role.show, None, args.clone(), timeout);
        let ok = result["ok"].as_bool().unwrap_or(false);
        let observation = match (&result["data"], &result["error"]) {
            (Value::Null, Value::Null) => result["stdout"].clone(),
            (Value::Null, error) => error.clone(),
            (data, _) => data.clone(),
        };
        Ok::<Value, StepError>(json!({
            "id": id, "tool": chosen, "args": args, "ok": ok,
            "error_kind": result["error_kind"], "observation": observation,
        }))
    });
    let results = futures::future::join_all(runs)
        .await
        .into_iter()
        .collect::<Result<Vec<Value>, StepError>>()?;
    let ok = results.iter().all(|r| r["ok"] == true);
    Ok(json!({"ok": ok, "results": results}))
}

/// The standard tool result. A tool that prints CatMaster's shape
/// (`{status, tool_name, data, warnings, error}`) is taken at its word.
/// The standard result record a tool prints (`{"status": ..., "tool_name": ...}`).
fn is_result_record(line: &str) -> bool {
    line.trim_start().starts_with('{')
        && serde_json::from_str::<Value>(line)
            .is_ok_and(|v| v.get("status").is_some() && v.get("tool_name").is_some())
}

fn tool_result(
    tool_name: &str,
    out: &ExecOutput,
    show: Show,
    log: Option<String>,
    args: Value,
    timeout: Duration,
) -> Value {
    let ok = out.success();
    let parsed: Option<Value> = serde_json::from_str(out.stdout.trim()).ok();
    let standard = parsed
        .as_ref()
        .filter(|v| v.get("status").is_some() && v.get("tool_name").is_some());
    let (status, data, warnings, error) = match standard {
        Some(v) => (
            v["status"]
                .as_str()
                .unwrap_or(if ok { "success" } else { "failed" })
                .to_string(),
            v.get("data").cloned().unwrap_or(Value::Null),
            v.get("warnings").cloned().unwrap_or(json!([])),
            v.get("error").cloned().unwrap_or(Value::Null),
        ),
        None => (
            if ok { "success" } else { "failed" }.to_string(),
            parsed.clone().unwrap_or(Value::Null),
            json!([]),
            if ok {
                Value::Null
            } else if out.timed_out {
                Value::String(format!(
                    "timed out after {:.1} s",
                    out.duration.as_secs_f64()
                ))
            } else {
                Value::String(format!("exit code {}", out.exit_code.unwrap_or(-1)))
            },
        ),
    };
    let verdict = if ok {
        "PASS".to_string()
    } else if out.timed_out {
        "FAIL (timed out)".to_string()
    } else {
        format!("FAIL (exit {})", out.exit_code.unwrap_or(-1))
    };
    let shown = match show {
        Show::All => out.merged.clone(),
        Show::Status => verdict,
        Show::Tail { lines } => {
            if ok {
                verdict
            } else {
                let all: Vec<&str> = out.merged.lines().collect();
                let start = all.len().saturating_sub(lines as usize);
                format!("{verdict}\n{}", all[start..].join("\n"))
            }
        }
        Show::HeadTail { head, tail } => {
            rondo_env::head_tail_lines(&out.merged, head as usize, tail as usize)
        }
    };
    // A command killed at its timeout says so, whatever it printed (often nothing).
    let shown = if out.timed_out {
        let note = format!("timed out after {} seconds", timeout.as_secs());
        if shown.trim().is_empty() {
            note
        } else {
            format!("{shown}\n{note}")
        }
    } else {
        shown
    };
    let error_kind = if ok {
        Value::Null
    } else if out.timed_out {
        json!("timeout")
    } else if standard.is_some() {
        json!("tool")
    } else {
        json!("exit")
    };
    json!({
        "status": status,
        "tool_name": tool_name,
        "data": data,
        "warnings": warnings,
        "error": error,
        "error_kind": error_kind,
        "execution_time": out.duration.as_secs_f64(),
        "exit_code": out.exit_code,
        "ok": ok && status == "success",
        "stdout": out.stdout,
        "stderr": out.stderr,
        "shown": shown,
        "log": log,
        "timed_out": out.timed_out,
        "args": args,
    })
}
