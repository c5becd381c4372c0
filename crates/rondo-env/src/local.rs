//! Processes on the host, in a run directory.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::time::sleep_until;

use crate::exec::Collector;
use crate::sandbox::{self, Launch, PrivateTmp, Protections, Sandbox};
use crate::tool::{self, InstalledTools, ToolLayout, ToolSpec};
use crate::{
    Command, EnvError, Environment, ExecOutput, ExecRequest, Redactor, StreamKind, archive,
};

/// Settings of a [`LocalEnv`].
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Commands run here unless a request names another directory; created if missing.
    pub run_dir: PathBuf,
    /// The declared variables, added to [`clean_env`] for every command (nothing else of
    /// the caller's environment is passed on).
    pub env: BTreeMap<String, String>,
    pub default_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when a command times out.
    pub kill_grace: Duration,
    pub tools: Vec<ToolSpec>,
    /// Where tools are installed, one sub-directory per content hash, reused across runs.
    /// Default: `<run_dir>/.rondo/tools`.
    pub tool_cache_dir: Option<PathBuf>,
    /// A log file per install step is written here. Default: `<cache>/<hash>/logs`.
    pub install_log_dir: Option<PathBuf>,
    /// Directory of wheels for offline pip installs.
    pub wheelhouse: String,
    pub install_timeout: Duration,
    /// Secret values replaced in every command's output and log.
    pub redactor: Redactor,
    /// Folders beneath `run_dir` that commands may read but never write (the system
    /// area of a run made in a `--workspace` folder).
    pub read_only: Vec<PathBuf>,
    /// Run commands without Landlock confinement when the kernel cannot confine them,
    /// instead of refusing to start (the user asked for it).
    pub unconfined: bool,
}

/// The caller's variables a command may see: everything else (API keys, tokens, the
/// user's own settings) stays out of a tool's environment.
const PASSED_ON: &[&str] = &["PATH", "LANG", "TZ"];

/// The environment every local command starts from: `PATH`, `LANG` and `TZ` of the
/// caller (`PATH` and `LANG` with defaults when unset), `HOME` set to `home`, the
/// directory the commands run in, and `TMPDIR` set to `tmp`.
pub fn clean_env(home: &Path, tmp: &Path) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = PASSED_ON
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
    env.insert("HOME".into(), home.to_string_lossy().into_owned());
    env.insert("TMPDIR".into(), tmp.to_string_lossy().into_owned());
    env
}

impl LocalConfig {
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        LocalConfig {
            run_dir: run_dir.into(),
            env: BTreeMap::new(),
            default_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(2),
            tools: Vec::new(),
            tool_cache_dir: None,
            install_log_dir: None,
            wheelhouse: tool::DEFAULT_WHEELHOUSE.to_string(),
            install_timeout: Duration::from_secs(600),
            redactor: Redactor::default(),
            read_only: Vec::new(),
            unconfined: false,
        }
    }
}

/// Runs commands as host processes, each in its own session and process group so that a
/// timeout kills the command and everything it started, each confined by a [`Sandbox`]:
/// it writes only beneath the run directory and its private `TMPDIR`, sees no other
/// process, and every process it starts ends with it (see `docs/tools.md`).
pub struct LocalEnv {
    config: LocalConfig,
    active: Mutex<HashSet<i32>>,
    closed: AtomicBool,
    tools: InstalledTools,
    /// `None` only when the kernel cannot confine and the user accepted that.
    sandbox: Option<Arc<Sandbox>>,
    protections: Protections,
    tmp: PrivateTmp,
}

impl LocalEnv {
    /// Create the run directory and install the configured tools (reusing a previous
    /// install with the same content hash).
    pub async fn start(config: LocalConfig) -> Result<Self, EnvError> {
        std::fs::create_dir_all(&config.run_dir).map_err(|e| EnvError::io(&config.run_dir, e))?;
        let run_dir =
            std::fs::canonicalize(&config.run_dir).map_err(|e| EnvError::io(&config.run_dir, e))?;
        let config = LocalConfig { run_dir, ..config };
        let mut env = LocalEnv {
            active: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
            tools: InstalledTools::default(),
            sandbox: None,
            protections: Protections::unconfined(),
            tmp: PrivateTmp::new()?,
            config,
        };
        // What the kernel cannot confine runs unconfined only when the user said so.
        match env.confine(None) {
            Ok(sandbox) => env.sandbox = Some(sandbox),
            Err(_) if env.config.unconfined => {}
            Err(e) => return Err(e),
        }
        if let Err(e) = env.probe().await {
            if !env.config.unconfined {
                return Err(e);
            }
            env.sandbox = None;
        }
        if let Some(sandbox) = &env.sandbox {
            env.protections = sandbox.protections().clone();
        }
        if !env.config.tools.is_empty() {
            let (root, hash) = env.tool_root()?;
            std::fs::create_dir_all(&root).map_err(|e| EnvError::io(&root, e))?;
            // Installs also write the tool cache; the commands of the run only read it.
            let run_sandbox = env.sandbox.clone();
            if run_sandbox.is_some() {
                env.sandbox = Some(env.confine(Some(&root))?);
            }
            let installed = env.install_tools(root, hash).await;
            env.sandbox = run_sandbox;
            env.tools = installed?;
        }
        Ok(env)
    }

    /// The sandbox of the commands: writes beneath the run directory, the private
    /// `TMPDIR` and `extra`.
    fn confine(&self, extra: Option<&Path>) -> Result<Arc<Sandbox>, EnvError> {
        let mut writable = vec![self.config.run_dir.as_path(), self.tmp.path()];
        writable.extend(extra);
        Sandbox::new(&writable, &self.config.read_only, &self.tmp.shm()?).map(Arc::new)
    }

    /// What the kernel gives the commands (all `false` but the session when they run
    /// unconfined).
    pub fn protections(&self) -> &Protections {
        &self.protections
    }

    /// How a command starts: confined by the sandbox when there is one.
    fn launch(&self, workdir: &Path, req: &ExecRequest) -> Result<Arc<Launch>, EnvError> {
        let Some(sandbox) = &self.sandbox else {
            return Ok(Arc::new(Launch::unconfined()));
        };
        let capabilities = req.capabilities.iter().fold(0, |mask, c| mask | c.bit());
        let max = req
            .max_processes
            .map_or(sandbox::DEFAULT_MAX_PROCESSES, std::num::NonZeroU32::get);
        sandbox.launch(workdir, max, capabilities).map(Arc::new)
    }

    /// Start one confined command, so that a sandbox the kernel refuses (no user
    /// namespace for an ordinary user, say) is reported here, once and clearly.
    async fn probe(&self) -> Result<(), EnvError> {
        if self.sandbox.is_none() {
            return Ok(());
        }
        let launch = self.launch(&self.config.run_dir, &ExecRequest::shell(":"))?;
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.args(["-c", ":"])
            .current_dir(&self.config.run_dir)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let entered = launch.clone();
        // SAFETY: `enter` only makes system calls.
        unsafe {
            cmd.pre_exec(move || entered.enter());
        }
        let status = cmd.status().await;
        drop(cmd);
        drop(launch);
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(EnvError::Confinement(format!(
                "a confined process failed ({s})"
            ))),
            Err(e) => Err(EnvError::Confinement(format!(
                "a confined process cannot start ({e}); local tools run in a PID and mount \
                 namespace of their own{}, which needs root or unprivileged user namespaces",
                if sandbox::is_root() {
                    ""
                } else {
                    " inside a user namespace"
                }
            ))),
        }
    }

    /// The install folder of the configured tools in the cache, and their content hash.
    fn tool_root(&self) -> Result<(PathBuf, String), EnvError> {
        let cache = self
            .config
            .tool_cache_dir
            .clone()
            .unwrap_or_else(|| self.config.run_dir.join(".rondo/tools"));
        let cache = if cache.is_absolute() {
            cache
        } else {
            self.config.run_dir.join(cache)
        };
        let hash = tool::tools_hash(
            &self.config.tools,
            &format!("local:{}", self.config.wheelhouse),
        )?;
        Ok((cache.join(&hash[..16]), hash))
    }

    async fn install_tools(&self, root: PathBuf, hash: String) -> Result<InstalledTools, EnvError> {
        let specs = &self.config.tools;
        let mut layout = ToolLayout {
            tools_root: root.join("tools").to_string_lossy().into_owned(),
            envs_root: root.join("envs").to_string_lossy().into_owned(),
            python: "python3".into(),
            wheelhouse: self.config.wheelhouse.clone(),
            // Never pip-install into the host's own Python.
            always_venv: true,
            install_timeout: self.config.install_timeout,
            conda: false,
        };
        let marker = root.join(".installed");
        let mut installed = InstalledTools {
            tools: specs
                .iter()
                .map(|s| tool::installed_paths(s, &layout))
                .collect(),
            hash: Some(hash.clone()),
            cached: marker.exists(),
            image: None,
            steps: Vec::new(),
        };
        if installed.cached {
            return Ok(installed);
        }
        // Empty the folder, not replace it: the install's sandbox allows writes beneath
        // this very folder.
        for entry in std::fs::read_dir(&root).map_err(|e| EnvError::io(&root, e))? {
            let path = entry.map_err(|e| EnvError::io(&root, e))?.path();
            let removed = if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| EnvError::io(&path, e))?;
        }
        let log_dir = self
            .config
            .install_log_dir
            .clone()
            .unwrap_or_else(|| root.join("logs"));
        installed.steps = tool::install_all(self, specs, &mut layout, &log_dir).await?;
        std::fs::write(&marker, &hash).map_err(|e| EnvError::io(&marker, e))?;
        Ok(installed)
    }

    pub fn run_dir(&self) -> &Path {
        &self.config.run_dir
    }

    fn resolve(&self, path: &str) -> PathBuf {
        self.config.run_dir.join(path)
    }
}

async fn read_some<R: tokio::io::AsyncRead + Unpin>(
    reader: Option<&mut R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => Ok(0),
    }
}

fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: killpg has no memory-safety preconditions; a stale pgid only yields ESRCH.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// A started process group: forgotten when the command ends, killed when the command is
/// abandoned.
struct Group<'a> {
    active: &'a Mutex<HashSet<i32>>,
    pgid: i32,
    running: bool,
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if self.running && self.pgid > 0 {
            kill_group(self.pgid, libc::SIGKILL);
        }
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.pgid);
    }
}

/// When dropped, gives the owner back search, read and write on each folder, should a call
/// have taken them away (`chmod 000 .`: Landlock does not cover `chmod`, and the folder is
/// the tool's to change; in Docker, a container user owning a writable mount): the run's
/// records in a `--workspace` folder are reached through the workspace, and the next
/// commands start in it.
pub(crate) struct KeepRootUsable(pub(crate) Vec<PathBuf>);

impl Drop for KeepRootUsable {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        for folder in &self.0 {
            let Ok(meta) = std::fs::symlink_metadata(folder) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() && mode & 0o700 != 0o700 {
                let _ =
                    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(mode | 0o700));
            }
        }
    }
}

impl LocalEnv {
    /// The process of a call, not started yet: its program (for messages) and the
    /// command, in `workdir`, with a clean environment and piped output.
    fn command(&self, req: &ExecRequest, workdir: &Path) -> (String, tokio::process::Command) {
        let (program, mut cmd) = match &req.command {
            Command::Argv(argv) => {
                let mut c = tokio::process::Command::new(&argv[0]);
                c.args(&argv[1..]);
                (argv[0].clone(), c)
            }
            Command::Shell(line) => {
                let mut c = tokio::process::Command::new("/bin/sh");
                c.arg("-c").arg(line);
                ("/bin/sh".to_string(), c)
            }
        };
        cmd.current_dir(workdir)
            .env_clear()
            .envs(clean_env(&self.config.run_dir, self.tmp.path()))
            .envs(&self.config.env)
            .envs(&req.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        (program, cmd)
    }

    /// Reads the child's output into `collector` until it has exited and both pipes are
    /// closed (children that keep the pipes open keep the command running, as with
    /// `docker exec`); past `deadline` its group gets SIGTERM, then SIGKILL after the
    /// grace, and the wait ends 2 s later. Its exit status, and whether it timed out.
    async fn collect(
        &self,
        child: &mut tokio::process::Child,
        collector: &mut Collector,
        program: &str,
        pgid: i32,
        deadline: tokio::time::Instant,
    ) -> Result<(Option<std::process::ExitStatus>, bool), EnvError> {
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let mut out_buf = vec![0u8; 16 * 1024];
        let mut err_buf = vec![0u8; 16 * 1024];
        let far = deadline + Duration::from_secs(86_400 * 365);
        let mut kill_at = far;
        let mut give_up_at = far;
        let mut timed_out = false;
        let mut status = None;
        while status.is_none() || stdout.is_some() || stderr.is_some() {
            tokio::select! {
                r = read_some(stdout.as_mut(), &mut out_buf), if stdout.is_some() => {
                    match r {
                        Ok(n) if n > 0 => collector.push(StreamKind::Stdout, &out_buf[..n]),
                        _ => stdout = None,
                    }
                }
                r = read_some(stderr.as_mut(), &mut err_buf), if stderr.is_some() => {
                    match r {
                        Ok(n) if n > 0 => collector.push(StreamKind::Stderr, &err_buf[..n]),
                        _ => stderr = None,
                    }
                }
                s = child.wait(), if status.is_none() => {
                    status = Some(s.map_err(|e| EnvError::Spawn { program: program.to_string(), source: e })?);
                }
                _ = sleep_until(deadline), if !timed_out => {
                    timed_out = true;
                    kill_group(pgid, libc::SIGTERM);
                    kill_at = tokio::time::Instant::now() + self.config.kill_grace;
                }
                _ = sleep_until(kill_at), if kill_at != far => {
                    kill_group(pgid, libc::SIGKILL);
                    kill_at = far;
                    give_up_at = tokio::time::Instant::now() + Duration::from_secs(2);
                }
                _ = sleep_until(give_up_at), if give_up_at != far => break,
            }
        }
        Ok((status, timed_out))
    }
}

#[async_trait::async_trait]
impl Environment for LocalEnv {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        req.validate()?;
        if self.closed.load(Ordering::SeqCst) {
            return Err(EnvError::ShutDown);
        }
        let workdir = match &req.workdir {
            Some(dir) => self.resolve(dir),
            None => self.config.run_dir.clone(),
        };
        // Dropped last, once the call's processes are gone (however the call ends).
        let _root = KeepRootUsable(vec![self.config.run_dir.clone()]);
        let (program, mut cmd) = self.command(&req, &workdir);
        // The call's cgroup (if any) goes when the last of these is dropped, after the
        // command has been reaped.
        let launch = self.launch(&workdir, &req)?;
        let entered = launch.clone();
        // SAFETY: `enter` only makes system calls, as required between fork and exec. It
        // starts a session of its own (hence no `process_group`): its ID is the child's.
        unsafe {
            cmd.pre_exec(move || entered.enter());
        }

        let mut collector = Collector::new(&req, &req.command.to_string(), &self.config.redactor)?;
        let timeout = req.timeout.unwrap_or(self.config.default_timeout);
        let start = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && workdir.is_dir() => {
                // Same observable result as a shell or `docker exec` would give.
                let msg = format!("{program}: command not found\n");
                collector.push(StreamKind::Stderr, msg.as_bytes());
                return collector.finish(Some(127), false, start.elapsed());
            }
            Err(e) if e.raw_os_error() == Some(libc::E2BIG) => {
                return collector.too_long(&program, &req.command, start.elapsed());
            }
            Err(e) => return Err(EnvError::Spawn { program, source: e }),
        };
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pgid);
        // When the caller drops this future (a run's wall time ran out mid-step), the
        // whole process group goes, not only the direct child.
        let mut group = Group {
            active: &self.active,
            pgid,
            running: true,
        };

        let deadline = tokio::time::Instant::from_std(start + timeout);
        let (status, timed_out) = self
            .collect(&mut child, &mut collector, &program, pgid, deadline)
            .await?;
        if timed_out {
            kill_group(pgid, libc::SIGKILL);
        }
        group.running = false;
        drop(group);
        drop(child);
        drop(cmd);
        drop(launch);
        let exit_code = status.and_then(|s| {
            use std::os::unix::process::ExitStatusExt;
            s.code()
                .map(i64::from)
                .or_else(|| s.signal().map(|sig| 128 + i64::from(sig)))
        });
        collector.finish(exit_code, timed_out, start.elapsed())
    }

    async fn copy_in(&self, host_path: &Path, target: &str) -> Result<(), EnvError> {
        let dest = self.resolve(target);
        let src = host_path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let data = archive::tar_of(&src, "x")?;
            archive::unpack_as(&data, &dest)
        })
        .await
        .map_err(|e| EnvError::InvalidRequest(format!("copy task failed: {e}")))?
    }

    async fn copy_out(&self, source: &str, host_path: &Path) -> Result<(), EnvError> {
        let src = self.resolve(source);
        let dest = host_path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let data = archive::tar_of(&src, "x")?;
            archive::unpack_as(&data, &dest)
        })
        .await
        .map_err(|e| EnvError::InvalidRequest(format!("copy task failed: {e}")))?
    }

    async fn shutdown(&self) -> Result<(), EnvError> {
        self.closed.store(true, Ordering::SeqCst);
        let groups: Vec<i32> = self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for pgid in groups {
            kill_group(pgid, libc::SIGKILL);
        }
        Ok(())
    }

    fn tools(&self) -> &InstalledTools {
        &self.tools
    }
}

impl Drop for LocalEnv {
    fn drop(&mut self) {
        for &pgid in self
            .active
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            kill_group(pgid, libc::SIGKILL);
        }
    }
}
