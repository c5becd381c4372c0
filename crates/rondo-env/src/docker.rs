//! One long-lived, hardened container per run, driven through the engine's API (bollard).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptions, DownloadFromContainerOptions, ListContainersOptions,
    RemoveContainerOptions, UploadToContainerOptions,
};
use futures_util::StreamExt;
use tokio::time::sleep_until;

use crate::exec::{Collector, MAX_ARG_LEN};
use crate::tool::{self, InstalledTools, ToolLayout, ToolSpec};
use crate::transport::{Mount, Transport, refused_mount};
use crate::{
    Command, EnvError, Environment, ExecOutput, ExecRequest, Redactor, StreamKind, archive,
};

pub(crate) const LABEL_MANAGED: &str = "rondo.managed";
pub(crate) const LABEL_RUN: &str = "rondo.run_id";
pub(crate) const LABEL_ROLE: &str = "rondo.role";
pub(crate) const LABEL_PID: &str = "rondo.owner_pid";
pub(crate) const LABEL_HOST: &str = "rondo.owner_host";
/// On a container kept on purpose (`--keep-env`): not stale once its owner is gone.
const LABEL_KEEP: &str = "rondo.keep";
pub(crate) const LABEL_BATCH: &str = "rondo.batch";
pub(crate) static BATCH: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Labels every container this process creates from now on `rondo.batch=<id>`: a batch
/// (`rondo swebench`) finds and removes its containers together, and the ones a crashed
/// batch left.
pub fn set_batch_label(id: &str) {
    let _ = BATCH.set(id.to_string());
}

/// The batch [`set_batch_label`] set, which the other engines label their sandboxes with.
pub(crate) fn batch_label() -> Option<&'static str> {
    BATCH.get().map(String::as_str)
}

/// Remove every container labelled `rondo.batch=<id>`.
pub async fn remove_batch(docker: &Docker, id: &str) -> Result<Vec<String>, EnvError> {
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_BATCH}={id}")])]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let list = docker
        .list_containers(Some(opts))
        .await
        .map_err(|e| EnvError::docker("listing containers", e))?;
    let mut removed = Vec::new();
    for c in list {
        if let Some(id) = c.id {
            remove(docker, &id).await?;
            removed.push(id);
        }
    }
    Ok(removed)
}

/// Set on every exec so a timed-out command and all its descendants can be found and killed.
const EXEC_MARKER: &str = "RONDO_EXEC_ID";
pub const TOOLS_REPO: &str = "rondo-tools";
/// The tool image's label saying how `py_standalone` environments were made: `conda` or `venv`.
const ENV_MANAGER_LABEL: &str = "rondo.env_manager";
/// The container's own processes (the engine's init and `sleep infinity`) run as this
/// user, which no tool runs as: without CAP_KILL a tool, root in the container or not,
/// cannot signal them and so cannot stop the container under the run.
pub(crate) const KEEPER_USER: &str = "2147483646:2147483646";
/// The limits of a container whose config leaves them unset: a container is never unbounded.
pub(crate) const DEFAULT_PIDS_LIMIT: i64 = 512;
pub(crate) const DEFAULT_MEMORY_BYTES: i64 = 2 << 30;
pub(crate) const DEFAULT_CPUS: f64 = 2.0;

/// Settings of a [`DockerEnv`]. The defaults are the hardened ones.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// Must already be in the local engine: nothing is pulled.
    pub image: String,
    /// Recorded in the `rondo.run_id` label.
    pub run_id: String,
    pub workdir: String,
    pub env: BTreeMap<String, String>,
    /// `None` means network mode `none`. Set e.g. `Some("bridge")` to allow network.
    pub network: Option<String>,
    /// `None`: 2 GiB (no swap beyond it).
    pub memory_bytes: Option<i64>,
    /// `None`: 2.
    pub cpus: Option<f64>,
    /// Processes and threads the container may hold at once; `None`: 512.
    pub pids_limit: Option<i64>,
    /// Never the Docker socket or a folder holding it, never a socket (refused at start).
    pub mounts: Vec<Mount>,
    /// How the mounts reach the container.
    pub transport: Transport,
    /// Container paths covered by an empty tmpfs: a mounted workspace's `.rondo/` system
    /// area stays out of the container.
    pub masks: Vec<String>,
    /// Capabilities added back after dropping all. Empty by default.
    pub cap_add: Vec<String>,
    /// `user[:group]` (names or ids) commands run as; `None` keeps the image's.
    pub user: Option<String>,
    /// A read-only root file system; `/tmp` is then a writable tmpfs.
    pub read_only_root: bool,
    /// Secret values replaced in every command's output and log.
    pub redactor: Redactor,
    /// `--keep-env`: leave the container running on shutdown and drop.
    pub keep: bool,
    /// Interpreter for [`Command::Shell`]: the command line is appended.
    pub shell: Vec<String>,
    pub default_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when a command times out.
    pub kill_grace: Duration,
    pub tools: Vec<ToolSpec>,
    /// A log file per install step goes here (default: a temporary directory is not used;
    /// `./rondo-install-logs`).
    pub install_log_dir: Option<PathBuf>,
    pub install_timeout: Duration,
    /// Run commands through a process kept alive in the container (default), instead of
    /// one `docker exec` per command; falls back to execs when the image has no python3.
    pub use_runner: bool,
}

impl DockerConfig {
    pub fn new(image: impl Into<String>, run_id: impl Into<String>) -> Self {
        DockerConfig {
            image: image.into(),
            run_id: run_id.into(),
            workdir: "/work".into(),
            env: BTreeMap::new(),
            network: None,
            memory_bytes: Some(DEFAULT_MEMORY_BYTES),
            cpus: Some(DEFAULT_CPUS),
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
            mounts: Vec::new(),
            transport: Transport::default(),
            masks: Vec::new(),
            cap_add: Vec::new(),
            user: None,
            read_only_root: false,
            redactor: Redactor::default(),
            keep: false,
            shell: vec!["/bin/sh".into(), "-c".into()],
            default_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            tools: Vec::new(),
            install_log_dir: None,
            install_timeout: Duration::from_secs(600),
            use_runner: true,
        }
    }
}

fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string())
}

/// Connect to the engine (honouring `DOCKER_HOST`), negotiate the API version and ping.
pub async fn connect() -> Result<Docker, EnvError> {
    let unavailable = |source| EnvError::DockerUnavailable {
        host: docker_host(),
        source,
    };
    let docker = Docker::connect_with_defaults().map_err(unavailable)?;
    let docker = docker.negotiate_version().await.map_err(unavailable)?;
    docker.ping().await.map_err(unavailable)?;
    Ok(docker)
}

pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

async fn remove(docker: &Docker, id: &str) -> Result<(), EnvError> {
    let opts = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(opts)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        // A concurrent removal (e.g. Drop racing shutdown) is fine.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(EnvError::docker(format!("removing container {id}"), e)),
    }
}

/// Remove containers left by crashed runs: those labelled by rondo on this host whose
/// owning process is gone, but those kept on purpose (`--keep-env`), which only
/// [`remove_run`] removes. Returns the removed container ids.
pub async fn cleanup_stale(docker: &Docker) -> Result<Vec<String>, EnvError> {
    let me = hostname();
    let mut removed = Vec::new();
    for c in list_managed(docker, None).await? {
        let labels = c.labels.unwrap_or_default();
        let same_host = labels.get(LABEL_HOST).is_some_and(|h| *h == me);
        let owner: Option<i32> = labels.get(LABEL_PID).and_then(|p| p.parse().ok());
        let kept = labels.get(LABEL_KEEP).is_some_and(|k| k == "true");
        if same_host
            && !kept
            && owner.is_some_and(|p| !pid_alive(p))
            && let Some(id) = c.id
        {
            remove(docker, &id).await?;
            removed.push(id);
        }
    }
    Ok(removed)
}

/// Remove every container of one run (e.g. one kept with `--keep-env`).
pub async fn remove_run(docker: &Docker, run_id: &str) -> Result<Vec<String>, EnvError> {
    let mut removed = Vec::new();
    for c in list_managed(docker, Some(run_id)).await? {
        if let Some(id) = c.id {
            remove(docker, &id).await?;
            removed.push(id);
        }
    }
    Ok(removed)
}

async fn list_managed(
    docker: &Docker,
    run_id: Option<&str>,
) -> Result<Vec<bollard::models::ContainerSummary>, EnvError> {
    let mut labels = vec![format!("{LABEL_MANAGED}=true")];
    if let Some(r) = run_id {
        labels.push(format!("{LABEL_RUN}={r}"));
    }
    let filters = HashMap::from([("label".to_string(), labels)]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    docker
        .list_containers(Some(opts))
        .await
        .map_err(|e| EnvError::docker("listing containers", e))
}

/// Commands run in one container created for the run; see [`DockerConfig`] for the
/// security defaults. The container is removed on [`Environment::shutdown`], on a failed
/// start, and (best effort) on drop, unless `keep` is set.
pub struct DockerEnv {
    docker: Docker,
    id: String,
    config: DockerConfig,
    removed: AtomicBool,
    exec_seq: AtomicU64,
    tools: InstalledTools,
    /// Starts commands without a `docker exec` each; restarted when a command killed it.
    runner: tokio::sync::Mutex<RunnerSlot>,
    /// The user commands run as (`None`: the container's, in a builder).
    exec_user: Option<String>,
    /// Markers of commands abandoned mid-way, killed again at shutdown: the kill started
    /// on abandon may not finish before the process exits.
    abandoned: Arc<Mutex<Vec<String>>>,
    /// Held shared by every command while it runs. Without the runner, the command that
    /// ends last takes it alone to clear the container of everything but the container's
    /// own processes: nothing starts meanwhile.
    gate: tokio::sync::RwLock<()>,
}

impl DockerEnv {
    /// Create and start the run container, installing `config.tools` first if needed:
    /// tools are installed once per content hash into an image `rondo-tools:<hash>`
    /// committed from a builder container; later runs start from that image.
    pub async fn start(config: DockerConfig) -> Result<Self, EnvError> {
        if config.pids_limit.is_some_and(|p| p < 1) {
            return Err(EnvError::InvalidRequest(
                "the process limit of a container is at least 1".into(),
            ));
        }
        for m in &config.mounts {
            if let Some(why) = refused_mount(&m.host) {
                return Err(EnvError::InvalidRequest(format!("refusing mount: {why}")));
            }
        }
        if config.read_only_root && config.transport == Transport::CopyInOut {
            return Err(EnvError::InvalidRequest(
                "copying mounts in needs a writable root file system (read_only_root is set)"
                    .into(),
            ));
        }
        let docker = connect().await?;
        let prepared = prepare_image(&docker, &config).await?;
        let (image, tools) = (prepared.image, prepared.tools);
        hidden_by_mounts(&docker, &config, &image).await?;
        // The container runs as the keeper: commands as the configured or image's user.
        let exec_user = config
            .user
            .clone()
            .or(prepared.user)
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "0:0".to_string());
        let id = create_container(&docker, &config, &image, "run").await?;
        let env = DockerEnv::over(docker, id, config, tools, exec_user);
        // From here Drop removes the container if starting fails.
        env.docker
            .start_container(&env.id, None)
            .await
            .map_err(|e| EnvError::docker("starting the run container", e))?;
        env.start_runner().await;
        Ok(env)
    }

    /// Drives a running container that another component created on `docker` (a Swarm
    /// task on its node's engine) and removes: shutdown and drop leave it in place.
    pub(crate) async fn adopt(
        docker: Docker,
        id: String,
        mut config: DockerConfig,
        tools: InstalledTools,
        exec_user: String,
    ) -> Self {
        config.keep = true;
        let env = DockerEnv::over(docker, id, config, tools, exec_user);
        env.start_runner().await;
        env
    }

    /// The environment of container `id` on `docker`, before its runner starts.
    fn over(
        docker: Docker,
        id: String,
        config: DockerConfig,
        tools: InstalledTools,
        exec_user: String,
    ) -> Self {
        DockerEnv {
            docker,
            id,
            config,
            removed: AtomicBool::new(false),
            exec_seq: AtomicU64::new(0),
            tools,
            runner: tokio::sync::Mutex::new(RunnerSlot::Unavailable),
            exec_user: Some(exec_user),
            abandoned: Arc::default(),
            gate: tokio::sync::RwLock::new(()),
        }
    }

    /// Starts the command runner in the running container, if the config asks for one
    /// (commands go through plain execs when the image cannot run it).
    async fn start_runner(&self) {
        if !self.config.use_runner {
            return;
        }
        let started =
            crate::runner::Runner::start(&self.docker, &self.id, self.exec_user.clone()).await;
        *self.runner.lock().await = match started {
            Some(runner) => RunnerSlot::Live(Arc::new(runner)),
            None => RunnerSlot::Unavailable,
        };
    }

    /// The container id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    fn resolve(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.config.workdir.trim_end_matches('/'))
        }
    }

    fn target(&self) -> Target {
        Target {
            docker: self.docker.clone(),
            id: self.id.clone(),
            user: self.exec_user.clone(),
        }
    }

    /// Send `signal` to every process of the exec marked `marker` (children included).
    async fn kill_marked(&self, marker: &str, signal: &str) {
        self.target().kill_marked(marker, signal, false).await;
    }

    /// Run a command to completion without timeout handling; for internal helpers.
    async fn run_simple(&self, argv: Vec<String>) -> Result<(i64, String), EnvError> {
        self.target().run_simple(argv).await
    }

    /// The runner, started again if a command killed it; `None`: plain execs.
    async fn live_runner(&self) -> Option<Arc<crate::runner::Runner>> {
        let mut slot = self.runner.lock().await;
        match &*slot {
            RunnerSlot::Unavailable => None,
            RunnerSlot::Live(runner) if runner.alive() => Some(runner.clone()),
            RunnerSlot::Live(_) => {
                let runner =
                    crate::runner::Runner::start(&self.docker, &self.id, self.exec_user.clone())
                        .await
                        .map(Arc::new)?;
                *slot = RunnerSlot::Live(runner.clone());
                Some(runner)
            }
        }
    }

    /// Best-effort synchronous removal, usable from Drop even while the async runtime is
    /// shutting down: a fresh thread, runtime and connection.
    fn remove_blocking(&self) {
        let id = self.id.clone();
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(docker) = Docker::connect_with_defaults()
                    && let Ok(docker) = docker.negotiate_version().await
                {
                    let _ = remove(&docker, &id).await;
                }
            });
        });
        let _ = handle.join();
    }
}

/// The image a sandbox starts from, once its tools are installed, and the user its
/// commands run as by default.
pub(crate) struct Prepared {
    pub image: String,
    pub tools: InstalledTools,
    pub user: Option<String>,
}

/// Checks `config.image` is in `docker`'s engine and installs `config.tools` into an image
/// `rondo-tools:<hash>` committed from a builder container, unless one is there already.
pub(crate) async fn prepare_image(
    docker: &Docker,
    config: &DockerConfig,
) -> Result<Prepared, EnvError> {
    let base = docker
        .inspect_image(&config.image)
        .await
        .map_err(|e| match e {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => EnvError::ImageMissing {
                image: config.image.clone(),
                hint: if config.image.starts_with("rondo-test-base") {
                    "; build it with scripts/build-test-image.sh".into()
                } else {
                    String::new()
                },
            },
            e => EnvError::docker(format!("inspecting image {}", config.image), e),
        })?;
    let mut tools = InstalledTools::default();
    let mut image = config.image.clone();
    if !config.tools.is_empty() {
        for spec in &config.tools {
            spec.validate()?;
        }
        let mut layout = ToolLayout::container(config.install_timeout);
        let base_id = base.id.unwrap_or_default();
        let hash = tool::tools_hash(&config.tools, &format!("docker:{base_id}"))?;
        let tag = format!("{TOOLS_REPO}:{}", &hash[..16]);
        tools.hash = Some(hash.clone());
        match docker.inspect_image(&tag).await {
            Ok(cached) => {
                tools.cached = true;
                layout.conda = cached
                    .config
                    .and_then(|c| c.labels)
                    .and_then(|l| l.get(ENV_MANAGER_LABEL).cloned())
                    .is_some_and(|m| m == "conda");
            }
            Err(_) => {
                tools.steps = build_tools_image(docker, config, &mut layout, &hash).await?;
            }
        }
        tools.tools = config
            .tools
            .iter()
            .map(|s| tool::installed_paths(s, &layout))
            .collect();
        tools.image = Some(tag.clone());
        image = tag;
    }
    let user = base.config.and_then(|c| c.user);
    Ok(Prepared { image, tools, user })
}

/// Refuses a mount (not marked `replace`) onto a path where `image` has something: a file,
/// or a folder with entries. A probe container (created, never started) is read through
/// the archive API, and only the first entries of each path.
async fn hidden_by_mounts(
    docker: &Docker,
    config: &DockerConfig,
    image: &str,
) -> Result<(), EnvError> {
    let covering: Vec<&Mount> = config.mounts.iter().filter(|m| !m.replace).collect();
    if covering.is_empty() {
        return Ok(());
    }
    let probe_config = DockerConfig {
        mounts: Vec::new(),
        masks: Vec::new(),
        read_only_root: false,
        ..config.clone()
    };
    let probe = create_container(docker, &probe_config, image, "probe").await?;
    let mut refused = None;
    for m in covering {
        let names = image_entries(docker, &probe, &m.container).await;
        if !names.is_empty() {
            refused = Some(format!(
                "refusing mount {} -> {}: the image {image} has {} there ({}{}), which the mount \
                 would hide; mount elsewhere, or mark the mount `:replace` to cover it on purpose",
                m.host.display(),
                m.container,
                if names.len() == 1 && names[0] == "." {
                    "a file"
                } else {
                    "files"
                },
                names
                    .iter()
                    .take(PROBE_NAMES)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                if names.len() > PROBE_NAMES {
                    ", ..."
                } else {
                    ""
                },
            ));
            break;
        }
    }
    let _ = remove(docker, &probe).await;
    match refused {
        Some(why) => Err(EnvError::InvalidRequest(why)),
        None => Ok(()),
    }
}

/// How many names of a covered path a refusal shows.
const PROBE_NAMES: usize = 3;
/// At most this much of a path's archive is read to find its first entries.
const PROBE_BYTES: usize = 256 * 1024;

/// The first names under `path` in the container's file system (`.` alone: `path` is a
/// file); empty when it is missing or an empty folder.
async fn image_entries(docker: &Docker, id: &str, path: &str) -> Vec<String> {
    let opts = DownloadFromContainerOptions {
        path: path.to_string(),
    };
    let mut stream = docker.download_from_container(id, Some(opts));
    let mut data = Vec::new();
    let mut names = Vec::new();
    while let Some(Ok(chunk)) = stream.next().await {
        data.extend_from_slice(&chunk);
        names = tar_names(&data);
        if names.len() > PROBE_NAMES || data.len() >= PROBE_BYTES {
            break;
        }
    }
    names
}

/// The names in a (possibly cut) tar of one path, below its top entry; `.` for a top entry
/// that is not a folder.
fn tar_names(data: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut archive = tar::Archive::new(data);
    let Ok(entries) = archive.entries() else {
        return names;
    };
    for (i, entry) in entries.enumerate() {
        let Ok(entry) = entry else { break };
        if i == 0 {
            if entry.header().entry_type() != tar::EntryType::Directory {
                names.push(".".to_string());
            }
            continue;
        }
        let Ok(path) = entry.path() else { break };
        let rest: PathBuf = path.components().skip(1).collect();
        names.push(rest.to_string_lossy().into_owned());
    }
    names
}

async fn create_container(
    docker: &Docker,
    config: &DockerConfig,
    image: &str,
    role: &str,
) -> Result<String, EnvError> {
    let mut labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_RUN.to_string(), config.run_id.clone()),
        (LABEL_ROLE.to_string(), role.to_string()),
        (LABEL_PID.to_string(), std::process::id().to_string()),
        (LABEL_HOST.to_string(), hostname()),
    ]);
    if config.keep {
        labels.insert(LABEL_KEEP.to_string(), "true".to_string());
    }
    if let Some(batch) = BATCH.get() {
        labels.insert(LABEL_BATCH.to_string(), batch.clone());
    }
    let binds = config.transport.binds(&config.mounts);
    // Only the run container gets the root file system read-only: the tool builder
    // installs into it.
    let read_only = config.read_only_root && role == "run";
    let mut cap_add = config.cap_add.clone();
    cap_add.retain(|c| !c.is_empty());
    let memory = config.memory_bytes.unwrap_or(DEFAULT_MEMORY_BYTES);
    let host_config = HostConfig {
        network_mode: Some(config.network.clone().unwrap_or_else(|| "none".into())),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!cap_add.is_empty()).then_some(cap_add),
        security_opt: Some(vec!["no-new-privileges".into()]),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((config.cpus.unwrap_or(DEFAULT_CPUS) * 1e9) as i64),
        pids_limit: Some(config.pids_limit.unwrap_or(DEFAULT_PIDS_LIMIT)),
        // An init reaps the orphans of killed commands, so they do not eat the pid limit.
        init: Some(true),
        binds: (!binds.is_empty()).then_some(binds),
        readonly_rootfs: read_only.then_some(true),
        tmpfs: {
            let mut tmpfs: HashMap<String, String> = config
                .masks
                .iter()
                .map(|m| (m.clone(), "ro,size=4k,mode=0555".to_string()))
                .collect();
            if read_only {
                tmpfs.insert(
                    "/tmp".to_string(),
                    "rw,nosuid,nodev,exec,size=512m,mode=1777".to_string(),
                );
            }
            (!tmpfs.is_empty()).then_some(tmpfs)
        },
        ..Default::default()
    };
    let env: Vec<String> = if role == "run" {
        config.env.iter().map(|(k, v)| format!("{k}={v}")).collect()
    } else {
        Vec::new()
    };
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(vec!["sleep".into(), "infinity".into()]),
        entrypoint: Some(Vec::new()),
        working_dir: Some(config.workdir.clone()),
        env: Some(env),
        labels: Some(labels),
        user: if role == "run" {
            Some(KEEPER_USER.to_string())
        } else {
            config.user.clone()
        },
        host_config: Some(host_config),
        ..Default::default()
    };
    let created = docker
        .create_container(None, body)
        .await
        .map_err(|e| EnvError::docker(format!("creating a container from {image}"), e))?;
    // A probe never starts; anything else runs commands and must be bounded.
    if role != "probe"
        && let Err(e) = limits_hold(docker, &created.id, &created.warnings).await
    {
        let _ = remove(docker, &created.id).await;
        return Err(e);
    }
    Ok(created.id)
}

/// An engine whose kernel lacks a cgroup controller creates the container anyway, the
/// limit dropped with a warning: such a container is refused.
async fn limits_hold(docker: &Docker, id: &str, warnings: &[String]) -> Result<(), EnvError> {
    let info = docker
        .inspect_container(id, None)
        .await
        .map_err(|e| EnvError::docker("inspecting the new container", e))?;
    let host = info.host_config.unwrap_or_default();
    let mut missing = Vec::new();
    if host.pids_limit.unwrap_or(0) <= 0 {
        missing.push("processes");
    }
    if host.memory.unwrap_or(0) <= 0 {
        missing.push("memory");
    }
    if missing.is_empty() {
        return Ok(());
    }
    let said = if warnings.is_empty() {
        String::new()
    } else {
        format!(" (the engine said: {})", warnings.join(" "))
    };
    Err(EnvError::InvalidRequest(format!(
        "the Docker engine cannot limit the {} of a container{said}; rondo runs no tool \
         in an unbounded container: enable the cgroup controllers (pids, memory) on the \
         Docker host",
        missing.join(" and ")
    )))
}

/// Install the tools in a throw-away builder container (no run env vars, network none)
/// and commit it as `rondo-tools:<hash>`.
async fn build_tools_image(
    docker: &Docker,
    config: &DockerConfig,
    layout: &mut ToolLayout,
    hash: &str,
) -> Result<Vec<tool::StepRecord>, EnvError> {
    let mut builder_config = DockerConfig::new(config.image.clone(), config.run_id.clone());
    builder_config.workdir = "/".into();
    builder_config.shell = config.shell.clone();
    builder_config.keep = false;
    let id = create_container(docker, &builder_config, &config.image, "builder").await?;
    let builder = DockerEnv {
        docker: docker.clone(),
        id,
        config: builder_config,
        removed: AtomicBool::new(false),
        exec_seq: AtomicU64::new(0),
        tools: InstalledTools::default(),
        // Installs are few and long; plain execs keep the committed image clean.
        runner: tokio::sync::Mutex::new(RunnerSlot::Unavailable),
        exec_user: None,
        abandoned: Arc::default(),
        gate: tokio::sync::RwLock::new(()),
    };
    let result = async {
        docker
            .start_container(&builder.id, None)
            .await
            .map_err(|e| EnvError::docker("starting the tool builder container", e))?;
        let log_dir = config
            .install_log_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("rondo-install-logs"));
        let steps = tool::install_all(&builder, &config.tools, layout, &log_dir).await?;
        let names: Vec<&str> = config.tools.iter().map(|t| t.tool_name.as_str()).collect();
        let image_config = ContainerConfig {
            labels: Some(HashMap::from([
                ("rondo.tools_hash".to_string(), hash.to_string()),
                ("rondo.tools".to_string(), names.join(",")),
                (
                    ENV_MANAGER_LABEL.to_string(),
                    if layout.conda { "conda" } else { "venv" }.to_string(),
                ),
            ])),
            ..Default::default()
        };
        let opts = CommitContainerOptions {
            container: Some(builder.id.clone()),
            repo: Some(TOOLS_REPO.into()),
            tag: Some(hash[..16].to_string()),
            comment: Some(format!("rondo tools: {}", names.join(", "))),
            pause: true,
            ..Default::default()
        };
        docker
            .commit_container(opts, image_config)
            .await
            .map_err(|e| EnvError::docker("committing the tool image", e))?;
        Ok::<_, EnvError>(steps)
    }
    .await;
    let removed = builder.shutdown().await;
    let steps = result?;
    removed?;
    Ok(steps)
}

/// Finds processes in the container through /proc and signals them: those whose
/// environment holds the exec's marker, or with `sweep` every process but the engine's
/// init, the container's own first process and this script. Each round stops them all,
/// signals, continues (signalling one by one lets a shell whose child just died run its
/// next command before its own turn); KILL repeats until none is found, catching what
/// forked meanwhile. The script forks nothing while it scans (`read` is a builtin).
const KILL_SCRIPT: &str = r#"
marker=$1 sig=$2 sweep=$3 me=$$ round=0
while [ $round -lt 20 ]; do
  round=$((round + 1)) pids= main= first=
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    case $pid in 1|$me) continue ;; esac
    read -r stat 2>/dev/null < "$p/stat" || continue
    set -- ${stat##*") "}
    if [ "$1" = Z ] || [ "$2" = "$me" ]; then continue; fi
    if [ -n "$sweep" ]; then
      if [ "$2" = 1 ] && { [ -z "$main" ] || [ "${20}" -lt "$first" ]; }; then
        [ -z "$main" ] || pids="$pids $main"
        main=$pid first=${20}
        continue
      fi
      pids="$pids $pid"
    elif tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qx "RONDO_EXEC_ID=$marker"; then
      pids="$pids $pid"
    fi
  done
  [ -n "$pids" ] || exit 0
  kill -s STOP $pids 2>/dev/null; kill -s "$sig" $pids 2>/dev/null; kill -s CONT $pids 2>/dev/null
  [ "$sig" = KILL ] || exit 0
done
"#;

/// Where helper commands run: a container, as the user its commands run as.
#[derive(Clone)]
struct Target {
    docker: Docker,
    id: String,
    user: Option<String>,
}

impl Target {
    async fn kill_marked(&self, marker: &str, signal: &str, sweep: bool) {
        let argv = vec![
            "/bin/sh".to_string(),
            "-c".into(),
            KILL_SCRIPT.into(),
            "rondo-kill".into(),
            marker.to_string(),
            signal.to_string(),
            if sweep { "sweep" } else { "" }.to_string(),
        ];
        // Best effort: if it fails the exec simply runs on until the give-up deadline.
        let _ = self.run_simple(argv).await;
    }

    /// Run a command to completion without timeout handling; for internal helpers.
    async fn run_simple(&self, argv: Vec<String>) -> Result<(i64, String), EnvError> {
        let opts = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv),
            user: self.user.clone(),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(&self.id, opts)
            .await
            .map_err(|e| EnvError::docker("creating an exec", e))?;
        let mut text = String::new();
        if let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| EnvError::docker("starting an exec", e))?
        {
            while let Some(Ok(chunk)) = output.next().await {
                text.push_str(&String::from_utf8_lossy(chunk.as_ref()));
            }
        }
        let code = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| EnvError::docker("inspecting an exec", e))?
            .exit_code
            .unwrap_or(-1);
        Ok((code, text))
    }
}

/// The run container's command runner.
enum RunnerSlot {
    /// Not wanted, or the image cannot run it: plain execs.
    Unavailable,
    /// Started; when it died (a command killed it) the next command starts another.
    Live(Arc<crate::runner::Runner>),
}

/// A command in flight: when its future is dropped before it ended (the run's wall time
/// ran out mid-step), its processes are killed in the background.
struct InFlight {
    target: Target,
    marker: String,
    running: bool,
    abandoned: Arc<Mutex<Vec<String>>>,
    /// Through the runner, which kills the command's whole tree.
    cancel: Option<crate::runner::Cancel>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.running {
            return;
        }
        self.abandoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.marker.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (target, marker, cancel) = (
                self.target.clone(),
                std::mem::take(&mut self.marker),
                self.cancel.take(),
            );
            handle.spawn(async move {
                if let Some(cancel) = cancel {
                    cancel.send().await;
                }
                target.kill_marked(&marker, "KILL", false).await
            });
        }
    }
}

impl DockerEnv {
    /// One command in the container, the mounts already in place; `running` is its share
    /// of the gate.
    async fn run_command(
        &self,
        req: ExecRequest,
        running: tokio::sync::RwLockReadGuard<'_, ()>,
    ) -> Result<ExecOutput, EnvError> {
        let marker = format!(
            "{}-{}-{}",
            std::process::id(),
            &self.id[..12.min(self.id.len())],
            self.exec_seq.fetch_add(1, Ordering::SeqCst)
        );
        let cmd: Vec<String> = match &req.command {
            Command::Argv(argv) => argv.clone(),
            Command::Shell(line) => {
                let mut v = self.config.shell.clone();
                v.push(line.clone());
                v
            }
        };
        let mut env: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!("{EXEC_MARKER}={marker}"));
        let opts = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(cmd),
            env: Some(env),
            working_dir: req.workdir.as_deref().map(|d| self.resolve(d)),
            user: self.exec_user.clone(),
            ..Default::default()
        };
        let mut collector = Collector::new(&req, &req.command.to_string(), &self.config.redactor)?;
        let timeout = req.timeout.unwrap_or(self.config.default_timeout);
        let start = Instant::now();
        // The same failure as on the host, whichever way the container would report it.
        let argv = opts.cmd.as_deref().unwrap_or_default();
        let vars = opts.env.as_deref().unwrap_or_default();
        if argv.iter().chain(vars).any(|a| a.len() >= MAX_ARG_LEN) {
            let program = argv.first().map_or("", String::as_str);
            return collector.too_long(program, &req.command, start.elapsed());
        }
        let mut in_flight = InFlight {
            target: self.target(),
            marker: marker.clone(),
            running: true,
            abandoned: self.abandoned.clone(),
            cancel: None,
        };
        if let Some(runner) = self.live_runner().await {
            let mut env: HashMap<String, String> = req.env.clone().into_iter().collect();
            env.insert(EXEC_MARKER.to_string(), marker.clone());
            let request = crate::runner::Request {
                argv: opts.cmd.clone().unwrap_or_default(),
                cwd: opts
                    .working_dir
                    .clone()
                    .unwrap_or_else(|| self.config.workdir.clone()),
                env,
                timeout,
                grace: self.config.kill_grace,
                keep: req.keep_processes,
            };
            let (mut rx, cancel) = runner.send(request).await?;
            in_flight.cancel = Some(cancel);
            // The runner enforces the timeout; this is the backstop if it cannot.
            let backstop =
                tokio::time::sleep(timeout + self.config.kill_grace + Duration::from_secs(10));
            tokio::pin!(backstop);
            loop {
                tokio::select! {
                    message = rx.recv() => match message {
                        Some(crate::runner::Message::Output(kind, bytes)) => collector.push(kind, &bytes),
                        // The runner killed whatever the command left.
                        Some(crate::runner::Message::Exit { code, timed_out }) => {
                            in_flight.running = false;
                            return collector.finish(Some(code), timed_out, start.elapsed());
                        }
                        // A command killed the runner: this command's tree went with it.
                        None => {
                            in_flight.running = false;
                            collector.push(StreamKind::Stderr, b"\n[rondo: the command runner in the container was killed, and this command with it]\n");
                            return collector.finish(None, false, start.elapsed());
                        }
                    },
                    _ = &mut backstop => {
                        self.kill_marked(&marker, "KILL").await;
                        return collector.finish(None, true, start.elapsed());
                    }
                }
            }
        }
        let exec = self
            .docker
            .create_exec(&self.id, opts)
            .await
            .map_err(|e| EnvError::docker("creating an exec", e))?;
        let started = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| EnvError::docker("starting an exec", e))?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(EnvError::InvalidRequest("exec started detached".into()));
        };

        let deadline = tokio::time::Instant::from_std(start + timeout);
        let far = deadline + Duration::from_secs(86_400 * 365);
        let (mut kill_at, mut give_up_at) = (far, far);
        let mut timed_out = false;
        loop {
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(LogOutput::StdErr { message })) => collector.push(StreamKind::Stderr, &message),
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                        collector.push(StreamKind::Stdout, &message)
                    }
                    Some(Ok(LogOutput::StdIn { .. })) => {}
                    Some(Err(e)) => return Err(EnvError::docker("reading exec output", e)),
                    None => break,
                },
                _ = sleep_until(deadline), if !timed_out => {
                    timed_out = true;
                    self.kill_marked(&marker, "TERM").await;
                    kill_at = tokio::time::Instant::now() + self.config.kill_grace;
                }
                _ = sleep_until(kill_at), if kill_at != far => {
                    self.kill_marked(&marker, "KILL").await;
                    kill_at = far;
                    give_up_at = tokio::time::Instant::now() + Duration::from_secs(5);
                }
                _ = sleep_until(give_up_at), if give_up_at != far => break,
            }
        }
        // What the command left running: stragglers that ignored TERM, daemons. Those that
        // cleared their environment lost the marker: the last command to end clears them.
        drop(running);
        let alone = self.gate.try_write();
        self.target()
            .kill_marked(&marker, "KILL", alone.is_ok())
            .await;
        drop(alone);
        in_flight.running = false;
        let exit_code = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| EnvError::docker("inspecting an exec", e))?
            .exit_code;
        collector.finish(exit_code, timed_out, start.elapsed())
    }
}

#[async_trait::async_trait]
impl Environment for DockerEnv {
    fn kind(&self) -> &'static str {
        "docker"
    }

    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        req.validate()?;
        if self.removed.load(Ordering::SeqCst) {
            return Err(EnvError::ShutDown);
        }
        let running = self.gate.read().await;
        // The writable folders of the host the command may `chmod 000` (dropped last).
        let _folders = crate::local::KeepRootUsable(
            self.config
                .mounts
                .iter()
                .filter(|m| m.writable)
                .map(|m| m.host.clone())
                .collect(),
        );
        let transport = self.config.transport;
        for m in transport.before_exec(&self.config.mounts) {
            self.upload(&m.host, &m.container, self.masked(m)).await?;
        }
        let out = self.run_command(req, running).await?;
        for m in transport.after_exec(&self.config.mounts) {
            self.download(&m.container, &m.host, self.masked(m)).await?;
        }
        Ok(out)
    }

    async fn copy_in(&self, host_path: &Path, target: &str) -> Result<(), EnvError> {
        self.upload(host_path, target, Vec::new()).await
    }

    async fn copy_out(&self, source: &str, host_path: &Path) -> Result<(), EnvError> {
        self.download(source, host_path, Vec::new()).await
    }

    async fn shutdown(&self) -> Result<(), EnvError> {
        if self.config.keep {
            // A kept container outlives the run, so must no abandoned command.
            let abandoned =
                std::mem::take(&mut *self.abandoned.lock().unwrap_or_else(|e| e.into_inner()));
            for marker in abandoned {
                self.kill_marked(&marker, "KILL").await;
            }
            return Ok(());
        }
        if self.removed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        remove(&self.docker, &self.id).await
    }

    fn tools(&self) -> &InstalledTools {
        &self.tools
    }
}

impl DockerEnv {
    /// The masked paths under a copied mount, relative to it: they are neither copied in
    /// nor back (the tmpfs that covers them under bind mounts has no copy to cover).
    fn masked(&self, m: &Mount) -> Vec<PathBuf> {
        let root = m.container.trim_end_matches('/');
        self.config
            .masks
            .iter()
            .filter_map(|mask| mask.strip_prefix(root)?.strip_prefix('/'))
            .filter(|rel| !rel.is_empty())
            .map(PathBuf::from)
            .collect()
    }

    async fn upload(
        &self,
        host_path: &Path,
        target: &str,
        skip: Vec<PathBuf>,
    ) -> Result<(), EnvError> {
        let target = self.resolve(target);
        let trimmed = target.trim_end_matches('/');
        let (parent, name) = match trimmed.rsplit_once('/') {
            Some((p, n)) if !n.is_empty() => (if p.is_empty() { "/" } else { p }, n),
            _ => {
                return Err(EnvError::InvalidRequest(format!(
                    "cannot copy onto `{target}`"
                )));
            }
        };
        let (code, text) = self
            .run_simple(vec!["mkdir".into(), "-p".into(), parent.into()])
            .await?;
        if code != 0 {
            return Err(EnvError::InvalidRequest(format!(
                "cannot create {parent} in the container: {text}"
            )));
        }
        let src = host_path.to_path_buf();
        let name = name.to_string();
        let data = tokio::task::spawn_blocking(move || archive::tar_skipping(&src, &name, &skip))
            .await
            .map_err(|e| EnvError::InvalidRequest(format!("archive task failed: {e}")))??;
        let opts = UploadToContainerOptions {
            path: parent.to_string(),
            ..Default::default()
        };
        self.docker
            .upload_to_container(&self.id, Some(opts), bollard::body_full(data.into()))
            .await
            .map_err(|e| {
                EnvError::docker(format!("copying {} to {target}", host_path.display()), e)
            })
    }

    async fn download(
        &self,
        source: &str,
        host_path: &Path,
        skip: Vec<PathBuf>,
    ) -> Result<(), EnvError> {
        let source = self.resolve(source);
        let opts = DownloadFromContainerOptions {
            path: source.clone(),
        };
        let mut stream = self.docker.download_from_container(&self.id, Some(opts));
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| EnvError::docker(format!("copying {source} out"), e))?;
            data.extend_from_slice(&chunk);
        }
        let dest = host_path.to_path_buf();
        tokio::task::spawn_blocking(move || archive::unpack_skipping(&data, &dest, &skip))
            .await
            .map_err(|e| EnvError::InvalidRequest(format!("unpack task failed: {e}")))?
    }
}

impl Drop for DockerEnv {
    fn drop(&mut self) {
        if !self.config.keep && !self.removed.swap(true, Ordering::SeqCst) {
            self.remove_blocking();
        }
    }
}
