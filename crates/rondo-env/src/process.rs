//! The sandbox of the `process` engine: a runner (`runner.py`) started as a child process
//! of this one, with a folder of its own under the run as its root. It talks the same
//! protocol as the runner in a container, over its standard input and output.
//!
//! It isolates nothing: its commands run as this user, on this machine's file system, and
//! see what this user sees. It exists to run many sandboxes at once where a container
//! each would cost too much (benchmarks of the driver, tests). What it does keep:
//! - the sandbox's paths: a path `/p` of the sandbox is `<root>/p`; each mount is a
//!   symbolic link `<root>/<container path>` to its host folder (read-only is not enforced);
//! - a clean environment, as local tools get (`HOME` and `TMPDIR` inside the root);
//! - copies in and out confined to the root, or to a mount's folder (no `..`, no link out);
//! - every command's process tree ends with it (the runner's shepherds), and everything
//!   ends with the environment.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::exec::{Collector, MAX_ARG_LEN};
use crate::runner::{Cancel, Message, Request, Runner};
use crate::tool::InstalledTools;
use crate::transport::refused_mount;
use crate::{Command, DockerConfig, EnvError, Environment, ExecOutput, ExecRequest, StreamKind};

/// Set on every command, as in a container: tools may read it.
const EXEC_MARKER: &str = "RONDO_EXEC_ID";

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Runners starting at once, in this process. Hundreds of interpreters started together
/// share the cores so thinly that each misses its 15 s to answer; a few at a time, each
/// starts in tens of milliseconds, and the others' wait is no longer than it was.
fn start_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::sync::Semaphore::new(cores * 2)
    })
}

/// See the module documentation.
pub struct ProcessEnv {
    config: DockerConfig,
    /// The environment's folder: `root/` and the runner's error log.
    dir: PathBuf,
    root: PathBuf,
    /// The runner's environment, which every command starts from.
    base_env: BTreeMap<String, String>,
    runner: tokio::sync::Mutex<Option<Arc<Runner>>>,
    /// Every runner started (one more each time a command killed the last): each leads a
    /// process group of its own with its shepherds. Reaped only at the end, so that no
    /// runner's pid, nor its group's, is ever someone else's when it is killed.
    children: Mutex<Vec<Started>>,
    closed: AtomicBool,
    exec_seq: AtomicU64,
    tools: InstalledTools,
}

impl ProcessEnv {
    /// Makes the root under `scratch` (its mounts linked in) and starts the runner.
    pub async fn start(config: DockerConfig, scratch: &Path) -> Result<Self, EnvError> {
        if !config.tools.is_empty() {
            return Err(EnvError::InvalidRequest(
                "the process engine installs no tools: run this environment with --engine docker"
                    .into(),
            ));
        }
        for m in &config.mounts {
            if let Some(why) = refused_mount(&m.host) {
                return Err(EnvError::InvalidRequest(why));
            }
        }
        let dir = scratch.join("sandboxes").join(format!(
            "process-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let root = dir.join("root");
        for d in [root.join("tmp"), root.join("root")] {
            std::fs::create_dir_all(&d).map_err(|e| EnvError::io(&d, e))?;
        }
        link_mounts(&config, &root)?;
        let workdir = root.join(sandbox_relative(&config.workdir)?);
        std::fs::create_dir_all(&workdir).map_err(|e| EnvError::io(&workdir, e))?;
        let mut base_env = crate::clean_env(&root.join("root"), &root.join("tmp"));
        base_env.extend(config.env.clone());
        let env = ProcessEnv {
            config,
            dir,
            root,
            base_env,
            runner: tokio::sync::Mutex::new(None),
            children: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            exec_seq: AtomicU64::new(0),
            tools: InstalledTools::default(),
        };
        env.live_runner().await?;
        Ok(env)
    }

    /// The folder `/` of the sandbox stands for.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The runner, started again if a command killed it.
    async fn live_runner(&self) -> Result<Arc<Runner>, EnvError> {
        let mut slot = self.runner.lock().await;
        if let Some(runner) = &*slot
            && runner.alive()
        {
            return Ok(runner.clone());
        }
        let _slot = start_slots().acquire().await;
        let log = self.dir.join("runner.log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| EnvError::io(&log, e))?;
        let runner = match self
            .fork_runner(stderr.try_clone().map_err(|e| EnvError::io(&log, e))?)
            .await
        {
            Some(runner) => runner,
            None => self.spawn_runner(stderr).await?,
        };
        *slot = Some(runner.clone());
        Ok(runner)
    }

    /// A runner forked by the zygote; `None` when the zygote cannot start one (the runner
    /// is then started directly).
    async fn fork_runner(&self, stderr: std::fs::File) -> Option<Arc<Runner>> {
        // `RONDO_PROCESS_ZYGOTE=0`: every runner started directly (to compare the two).
        if std::env::var("RONDO_PROCESS_ZYGOTE").is_ok_and(|v| v.trim() == "0") {
            return None;
        }
        let (input_r, input_w) = pipe().ok()?;
        let (output_r, output_w) = pipe().ok()?;
        let message = serde_json::json!({ "start": {
            "cwd": self.root.to_string_lossy(),
            "env": self.base_env,
        }})
        .to_string();
        let fds = [input_r, output_w, OwnedFd::from(stderr)];
        let (pid, generation) =
            tokio::task::spawn_blocking(move || zygote::start(message.as_bytes(), fds))
                .await
                .ok()?
                .ok()?;
        let started = async {
            let output = tokio::net::unix::pipe::Receiver::from_owned_fd(output_r)?;
            let input = tokio::net::unix::pipe::Sender::from_owned_fd(input_w)?;
            Ok::<_, io::Error>((output, input))
        };
        let runner = match started.await {
            Ok((output, input)) => Runner::over(output, input).await.ok().map(Arc::new),
            Err(_) => None,
        };
        // Recorded either way: a runner that did not answer is reaped with the others.
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Started::Forked {
                pid,
                generation,
                runner: runner.clone(),
            });
        runner
    }

    /// A runner started as a child process of this one.
    async fn spawn_runner(&self, stderr: std::fs::File) -> Result<Arc<Runner>, EnvError> {
        let argv = crate::runner::command();
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(&self.base_env)
            .current_dir(&self.root)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| EnvError::Spawn {
                program: argv[0].clone(),
                source,
            })?;
        let pipes = (child.stdout.take(), child.stdin.take());
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Started::Child(child));
        let (Some(stdout), Some(stdin)) = pipes else {
            return Err(EnvError::InvalidRequest("the runner has no pipes".into()));
        };
        Ok(Arc::new(Runner::over(stdout, stdin).await?))
    }

    /// Where sandbox path `path` is on this machine: beneath which folder (the root or a
    /// mount's), at which relative path, and whether it may be written.
    fn place(&self, path: &str) -> Result<(PathBuf, PathBuf, bool), EnvError> {
        let rel = if path.starts_with('/') {
            sandbox_relative(path)?
        } else {
            sandbox_relative(&self.config.workdir)?.join(sandbox_relative(path)?)
        };
        let mount = self
            .config
            .mounts
            .iter()
            .filter_map(|m| Some((m, sandbox_relative(&m.container).ok()?)))
            .filter(|(_, at)| rel.starts_with(at))
            .max_by_key(|(_, at)| at.components().count());
        Ok(match mount {
            Some((m, at)) => (
                m.host.clone(),
                rel.strip_prefix(&at).unwrap_or(&rel).to_path_buf(),
                m.writable,
            ),
            None => (self.root.clone(), rel, true),
        })
    }

    /// The command in the runner: its output, or its end when the runner died under it.
    async fn run_command(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        let mut argv: Vec<String> = match &req.command {
            Command::Argv(argv) => argv.clone(),
            Command::Shell(line) => {
                let mut v = self.config.shell.clone();
                v.push(line.clone());
                v
            }
        };
        let mut collector = Collector::new(&req, &req.command.to_string(), &self.config.redactor)?;
        let start = Instant::now();
        let timeout = req.timeout.unwrap_or(self.config.default_timeout);
        let too_long = argv
            .iter()
            .chain(req.env.values())
            .any(|a| a.len() >= MAX_ARG_LEN);
        if too_long {
            let program = argv.first().cloned().unwrap_or_default();
            return collector.too_long(&program, &req.command, start.elapsed());
        }
        let workdir = req.workdir.as_deref().unwrap_or(&self.config.workdir);
        let (base, rel, _) = self.place(workdir)?;
        let mut env: HashMap<String, String> = req.env.clone().into_iter().collect();
        let marker = format!(
            "{}-process-{}",
            std::process::id(),
            self.exec_seq.fetch_add(1, Ordering::SeqCst)
        );
        env.insert(EXEC_MARKER.into(), marker);
        let runner = self.live_runner().await?;
        let request = Request {
            argv: std::mem::take(&mut argv),
            cwd: base.join(rel).to_string_lossy().into_owned(),
            env,
            timeout,
            grace: self.config.kill_grace,
            keep: req.keep_processes,
        };
        let (mut rx, cancel) = runner.send(request).await?;
        let mut in_flight = InFlight(Some(cancel));
        // The runner enforces the timeout; this is the backstop if it cannot.
        let backstop =
            tokio::time::sleep(timeout + self.config.kill_grace + Duration::from_secs(10));
        tokio::pin!(backstop);
        loop {
            tokio::select! {
                message = rx.recv() => match message {
                    Some(Message::Output(kind, bytes)) => collector.push(kind, &bytes),
                    Some(Message::Exit { code, timed_out }) => {
                        in_flight.0 = None;
                        return collector.finish(Some(code), timed_out, start.elapsed());
                    }
                    None => {
                        in_flight.0 = None;
                        return Err(EnvError::InvalidRequest(
                            "the command runner died during the command (was it killed?); \
                             its processes were killed with it, and the next command starts \
                             another runner"
                                .into(),
                        ));
                    }
                },
                _ = &mut backstop => {
                    if let Some(cancel) = in_flight.0.take() {
                        cancel.send().await;
                    }
                    collector.push(StreamKind::Stderr, b"\n[rondo: the command runner did not end this command in time]\n");
                    return collector.finish(None, true, start.elapsed());
                }
            }
        }
    }
}

/// A command in flight: when its future is dropped before it ended, the runner kills it.
struct InFlight(Option<Cancel>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(cancel.send());
        }
    }
}

/// `path` (a sandbox path) relative to the sandbox's root; a `..` is refused, since no
/// sandbox path may name anything above its root.
fn sandbox_relative(path: &str) -> Result<PathBuf, EnvError> {
    let mut rel = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => rel.push(name),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(EnvError::InvalidRequest(format!(
                    "refusing sandbox path `{path}`: `..` would lead out of the sandbox"
                )));
            }
        }
    }
    Ok(rel)
}

/// Links each mount into the root at its sandbox path. A mount inside another would be
/// made in the other's host folder: refused.
fn link_mounts(config: &DockerConfig, root: &Path) -> Result<(), EnvError> {
    let mut mounts: Vec<(PathBuf, &crate::Mount)> = config
        .mounts
        .iter()
        .map(|m| Ok((sandbox_relative(&m.container)?, m)))
        .collect::<Result<_, EnvError>>()?;
    mounts.sort_by_key(|(at, _)| at.components().count());
    for (i, (at, m)) in mounts.iter().enumerate() {
        if at.as_os_str().is_empty() {
            return Err(EnvError::InvalidRequest(format!(
                "the process engine cannot mount {} on the sandbox's root",
                m.host.display()
            )));
        }
        if let Some((outer, _)) = mounts[..i].iter().find(|(o, _)| at.starts_with(o)) {
            return Err(EnvError::InvalidRequest(format!(
                "the process engine cannot mount {} at {}: it is inside the mount at /{}",
                m.host.display(),
                m.container,
                outer.display()
            )));
        }
        let link = root.join(at);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EnvError::io(parent, e))?;
        }
        let host = std::fs::canonicalize(&m.host).map_err(|e| EnvError::io(&m.host, e))?;
        if link.symlink_metadata().is_ok() {
            std::fs::remove_dir(&link).map_err(|e| EnvError::io(&link, e))?;
        }
        std::os::unix::fs::symlink(&host, &link).map_err(|e| EnvError::io(&link, e))?;
    }
    Ok(())
}

/// Copies host `src` (trusted) to `rel` beneath `dir`, creating its parents: nothing is
/// written through a link that leads out of `dir`.
fn copy_into(src: &Path, dir: &Dir, rel: &Path) -> io::Result<()> {
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        dir.create_dir_all(parent)?;
    }
    let mut todo = vec![(src.to_path_buf(), rel.to_path_buf())];
    while let Some((from, to)) = todo.pop() {
        let meta = std::fs::symlink_metadata(&from)?;
        if meta.file_type().is_symlink() {
            let _ = dir.remove_file(&to);
            dir.symlink_contents(std::fs::read_link(&from)?, &to)?;
        } else if meta.is_dir() {
            match dir.create_dir(&to) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !dir.symlink_metadata(&to)?.is_dir() {
                        return Err(io::Error::other(format!(
                            "{} exists and is not a folder",
                            to.display()
                        )));
                    }
                }
                other => other?,
            }
            for entry in std::fs::read_dir(&from)? {
                let name = entry?.file_name();
                todo.push((from.join(&name), to.join(&name)));
            }
        } else if meta.is_file() {
            let mut input = std::fs::File::open(&from)?;
            let mut output = dir.create(&to)?;
            io::copy(&mut input, &mut output)?;
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
            output.set_permissions(cap_std::fs::PermissionsExt::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Copies `rel` beneath `dir` (untrusted: written by the sandbox's commands) to host
/// `dest`. Links are copied as links, never followed; nothing is read through a link that
/// leads out of `dir`, and nothing written through a link at the destination.
fn copy_from(dir: &Dir, rel: &Path, dest: &Path) -> io::Result<()> {
    let mut todo = vec![(rel.to_path_buf(), dest.to_path_buf())];
    while let Some((from, to)) = todo.pop() {
        let meta = if from.as_os_str().is_empty() {
            dir.dir_metadata()?
        } else {
            dir.symlink_metadata(&from)?
        };
        let existing = std::fs::symlink_metadata(&to).ok();
        if existing
            .as_ref()
            .is_some_and(|m| m.file_type().is_symlink())
        {
            std::fs::remove_file(&to)?;
        }
        if meta.file_type().is_symlink() {
            let target = dir.read_link_contents(&from)?;
            if existing.is_some_and(|m| m.is_file()) {
                std::fs::remove_file(&to)?;
            }
            std::os::unix::fs::symlink(target, &to)?;
        } else if meta.is_dir() {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            match std::fs::create_dir(&to) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && to.is_dir() => {}
                other => other?,
            }
            let entries = if from.as_os_str().is_empty() {
                dir.entries()?
            } else {
                dir.read_dir(&from)?
            };
            for entry in entries {
                let name = entry?.file_name();
                todo.push((from.join(&name), to.join(&name)));
            }
        } else if meta.is_file() {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut input = dir.open(&from)?;
            let mut output = std::fs::File::create(&to)?;
            io::copy(&mut input, &mut output)?;
            // No set-id bit from the sandbox's files reaches this machine.
            let mode = cap_std::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
            output.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        }
    }
    Ok(())
}

fn open_dir(base: &Path) -> Result<Dir, EnvError> {
    Dir::open_ambient_dir(base, ambient_authority()).map_err(|e| EnvError::io(base, e))
}

/// An environment dropped without its shutdown: its runners' inputs close with it, so
/// they end; the forked ones are then reaped by the zygote (direct ones are killed and
/// reaped by `kill_on_drop`), lest a long-lived driver collect zombies.
impl Drop for ProcessEnv {
    fn drop(&mut self) {
        let forked: Vec<(i32, u64)> = lock(&self.children)
            .iter()
            .filter_map(|s| match s {
                Started::Forked {
                    pid, generation, ..
                } => Some((*pid, *generation)),
                Started::Child(_) => None,
            })
            .collect();
        if forked.is_empty() {
            return;
        }
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(5);
            for (pid, generation) in forked {
                // Ended (a zombie, or gone) or not, by the deadline: then the zygote reaps
                // it, killing its group if it has not ended.
                while !ended(pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                zygote::reap(pid, generation, !ended(pid));
            }
        });
    }
}

/// Whether process `pid` has ended (a zombie awaiting its parent, or gone).
fn ended(pid: i32) -> bool {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(|&b| b == b')')
            .next()
            .is_some_and(|rest| rest.trim_ascii_start().starts_with(b"Z")),
        Err(_) => true,
    }
}

#[async_trait::async_trait]
impl Environment for ProcessEnv {
    fn kind(&self) -> &'static str {
        "process"
    }

    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        req.validate()?;
        if self.closed.load(Ordering::SeqCst) {
            return Err(EnvError::ShutDown);
        }
        self.run_command(req).await
    }

    async fn copy_in(&self, host_path: &Path, target: &str) -> Result<(), EnvError> {
        let (base, rel, writable) = self.place(target)?;
        if !writable {
            return Err(EnvError::InvalidRequest(format!(
                "cannot copy onto `{target}`: its mount is read-only"
            )));
        }
        if rel.as_os_str().is_empty() {
            return Err(EnvError::InvalidRequest(format!(
                "cannot copy onto `{target}`"
            )));
        }
        let src = host_path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let dir = open_dir(&base)?;
            copy_into(&src, &dir, &rel).map_err(|e| EnvError::io(base.join(&rel), e))
        })
        .await
        .map_err(|e| EnvError::InvalidRequest(format!("copy task failed: {e}")))?
    }

    async fn copy_out(&self, source: &str, host_path: &Path) -> Result<(), EnvError> {
        let (base, rel, _) = self.place(source)?;
        let dest = host_path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let dir = open_dir(&base)?;
            copy_from(&dir, &rel, &dest).map_err(|e| EnvError::io(base.join(&rel), e))
        })
        .await
        .map_err(|e| EnvError::InvalidRequest(format!("copy task failed: {e}")))?
    }

    async fn shutdown(&self) -> Result<(), EnvError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if let Some(runner) = self.runner.lock().await.take() {
            runner.close().await;
        }
        let children =
            std::mem::take(&mut *self.children.lock().unwrap_or_else(|e| e.into_inner()));
        for started in children {
            match started {
                Started::Child(child) => end_runner(child).await,
                Started::Forked {
                    pid,
                    generation,
                    runner,
                } => end_forked(pid, generation, runner).await,
            }
        }
        // What a command left unremovable (a folder it made unreadable) stays: the sandbox
        // is over either way.
        if !self.config.keep {
            let dir = self.dir.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        }
        Ok(())
    }

    fn tools(&self) -> &InstalledTools {
        &self.tools
    }
}

/// A runner of this environment.
enum Started {
    /// Started directly: a child of this process. Dropped, it is killed (`kill_on_drop`),
    /// and its shepherds kill the commands' trees.
    Child(tokio::process::Child),
    /// Forked by the zygote (its child, which reaps it when told to). Its input closes
    /// when its [`Runner`] is dropped, and it ends.
    Forked {
        pid: i32,
        generation: u64,
        runner: Option<Arc<Runner>>,
    },
}

/// [`end_runner`] for a forked runner: its output closes when it ends; one whose output
/// is still open after 5 s has its group killed by the zygote, which then reaps it.
async fn end_forked(pid: i32, generation: u64, runner: Option<Arc<Runner>>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut alive = runner.as_ref().is_some_and(|r| r.alive());
    while alive && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        alive = runner.as_ref().is_some_and(|r| r.alive());
    }
    // Never answered: it may be running still.
    let kill = alive || runner.is_none();
    let _ = tokio::task::spawn_blocking(move || zygote::reap(pid, generation, kill)).await;
}

/// A pipe, both ends closed on exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1, -1];
    // SAFETY: pipe2 writes two descriptors into the array of two it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made, and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The zygote (`runner.py zygote`): one interpreter, started once per process, that forks
/// the runners of every process sandbox. A fork of a started interpreter costs a fraction
/// of starting one (see bench/scale/RESULTS.md). Talked to over a datagram socket, one
/// request and one answer at a time, from blocking threads.
mod zygote {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::process::Stdio;
    use std::sync::Mutex;

    struct Zygote {
        socket: OwnedFd,
        generation: u64,
        /// Never reaped while this process lives: it ends when the socket closes.
        _child: std::process::Child,
    }

    /// The most a request may be; a sandbox's environment is far smaller.
    const MAX_MESSAGE: usize = 64 << 10;

    static ZYGOTE: Mutex<(Option<Zygote>, u64)> = Mutex::new((None, 0));

    fn start_zygote(generation: u64) -> io::Result<Zygote> {
        let mut fds: [RawFd; 2] = [-1, -1];
        // SAFETY: socketpair writes two descriptors into the array of two it is given.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just made, and nothing else owns them.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // An answer that does not come within this is a zygote gone wrong.
        let timeout = libc::timeval {
            tv_sec: 30,
            tv_usec: 0,
        };
        // SAFETY: the option's value is a timeval of the size given.
        unsafe {
            libc::setsockopt(
                ours.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        let argv = crate::runner::command();
        let child = std::os::unix::process::CommandExt::process_group(
            std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .arg("zygote")
                .env_clear()
                .current_dir("/")
                .stdin(Stdio::from(theirs))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            0,
        )
        .spawn()?;
        Ok(Zygote {
            socket: ours,
            generation,
            _child: child,
        })
    }

    fn send(socket: &OwnedFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
        if data.len() > MAX_MESSAGE {
            return Err(io::Error::other("request too long for the zygote"));
        }
        let mut iov = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        };
        let fd_bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
        // u64s: the control buffer must be aligned for cmsghdr.
        let mut control = vec![0u64; space.div_ceil(8)];
        // SAFETY: msghdr is plain data; all-zero is a valid (empty) value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            // SAFETY: the control buffer holds one header and `fds`' data (CMSG_SPACE),
            // aligned; CMSG_FIRSTHDR points into it, CMSG_DATA past its header.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr(),
                    libc::CMSG_DATA(cmsg).cast::<RawFd>(),
                    fds.len(),
                );
            }
        }
        // SAFETY: msg points at live buffers (iov, control) for the call's duration.
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn receive(socket: &OwnedFd) -> io::Result<serde_json::Value> {
        let mut buf = vec![0u8; 4096];
        // SAFETY: recv writes at most buf.len() bytes into buf.
        let n = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the zygote ended",
            ));
        }
        buf.truncate(n as usize);
        serde_json::from_slice(&buf).map_err(io::Error::other)
    }

    /// One request and its answer, starting the zygote if there is none; a zygote that
    /// fails is dropped (its socket closes, and it ends), and the next request starts
    /// another.
    fn call(
        data: &[u8],
        fds: &[RawFd],
        generation: Option<u64>,
    ) -> io::Result<(serde_json::Value, u64)> {
        let mut guard = super::lock(&ZYGOTE);
        let (zygote, count) = &mut *guard;
        if zygote.is_none() {
            if generation.is_some() {
                return Err(io::Error::other("no zygote"));
            }
            *count += 1;
            *zygote = Some(start_zygote(*count)?);
        }
        let Some(z) = zygote.as_ref() else {
            return Err(io::Error::other("no zygote"));
        };
        if generation.is_some_and(|g| g != z.generation) {
            // Its runners went with the zygote that forked them.
            return Err(io::Error::other("another zygote"));
        }
        let answer = send(&z.socket, data, fds).and_then(|()| receive(&z.socket));
        match answer {
            Ok(a) => Ok((a, z.generation)),
            Err(e) => {
                *zygote = None;
                Err(e)
            }
        }
    }

    /// Forks a runner whose standard input, output and error are `fds`; its pid and the
    /// zygote's generation.
    pub(super) fn start(message: &[u8], fds: [OwnedFd; 3]) -> io::Result<(i32, u64)> {
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let (answer, generation) = call(message, &raw, None)?;
        drop(fds);
        let pid = answer["pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                io::Error::other(format!("the zygote did not start a runner: {answer}"))
            })?;
        Ok((pid, generation))
    }

    /// Reaps a runner, killing its group first when `kill`.
    pub(super) fn reap(pid: i32, generation: u64, kill: bool) {
        let message = serde_json::json!({ "reap": pid, "kill": kill }).to_string();
        let _ = call(message.as_bytes(), &[], Some(generation));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits for a runner whose input closed to end (it ends once its commands' trees are
/// gone). One that does not within 5 s has its group killed while it is still alive (so
/// the group's id is still its own), then is reaped.
async fn end_runner(mut child: tokio::process::Child) {
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(None) => break,
            _ => return,
        }
    }
    if let Some(pid) = pid {
        // SAFETY: kill only sends a signal; the group is the runner's own
        // (`process_group(0)`), and the runner is not reaped yet.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.wait().await;
}
