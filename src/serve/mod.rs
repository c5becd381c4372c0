//! `rondo serve`: runs checked workflows on HTTP requests. Every run is made exactly as
//! `rondo run` makes it (run directory, journal, checkpoints), so a run the server started
//! can be listed, replayed and resumed from the command line.

/// A line on standard error; a server whose stderr is gone goes on serving.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod api;
mod error;
mod events;
mod lost;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, Semaphore};

use rondo_provider::ProviderPool;

use crate::check::Checked;
use crate::run::{Interpreter, RunOptions};

/// What `rondo serve` was asked to do.
pub struct ServeOptions {
    pub workflows: Vec<PathBuf>,
    pub host: String,
    pub port: u16,
    /// Runs driven at once; the others wait in line.
    pub concurrency: usize,
    /// The bearer token every route but `/health` requires (read from the environment).
    pub token: Option<String>,
    pub runs_root: PathBuf,
    /// Origins allowed by CORS; empty means any.
    pub cors_origins: Vec<String>,
    /// The workflow `POST /ask` runs (default: the first one).
    pub ask: Option<String>,
    /// The profile runs use unless a request names one.
    pub provider: Option<String>,
    pub unconfined_tools: bool,
    /// Where the runs' Docker environments run.
    pub engine: rondo_env::SandboxEngine,
}

/// A run this server process started: what cancelling it needs, whether it still goes,
/// and what it has published.
struct LiveRun {
    interrupt: Arc<AtomicBool>,
    wake: Arc<Notify>,
    started: bool,
    hub: Arc<events::Hub>,
}

pub(crate) struct Server {
    workflows: BTreeMap<String, Arc<Checked>>,
    /// One provider pool per workflow, shared by its runs: rate limits, concurrency bounds
    /// and circuit breakers hold across every run the server makes.
    pools: BTreeMap<String, Arc<ProviderPool>>,
    ask: String,
    runs_root: PathBuf,
    token: Option<String>,
    permits: Arc<Semaphore>,
    live: Mutex<HashMap<String, LiveRun>>,
    /// Set on SIGTERM or Ctrl-C: queued runs stop before they start.
    stopping: AtomicBool,
    stop: Notify,
    provider: Option<String>,
    unconfined_tools: bool,
    engine: rondo_env::SandboxEngine,
    /// Tasks that drive runs, awaited before the process exits.
    tasks: Mutex<tokio::task::JoinSet<()>>,
}

impl Server {
    /// What the run `id`, while this server drives it, has published.
    fn hub(&self, id: &str) -> Option<Arc<events::Hub>> {
        self.live
            .lock()
            .ok()
            .and_then(|l| l.get(id).map(|r| r.hub.clone()))
    }

    fn interrupt_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop.notify_waiters();
        if let Ok(live) = self.live.lock() {
            for run in live.values() {
                run.interrupt.store(true, Ordering::SeqCst);
                run.wake.notify_waiters();
            }
        }
    }
}

/// Serves until SIGTERM or Ctrl-C; returns the process exit status.
pub fn serve(workflows: Vec<(PathBuf, Checked)>, options: ServeOptions) -> i32 {
    match prepare(workflows, &options) {
        Ok((runtime, server)) => runtime.block_on(listen(server, options)),
        Err(message) => {
            say!("error: {message}");
            2
        }
    }
}

/// The workflows by name (two of one name refused), the asked one, the runs' folder,
/// the runtime and each workflow's provider pool.
fn prepare(
    workflows: Vec<(PathBuf, Checked)>,
    options: &ServeOptions,
) -> Result<(tokio::runtime::Runtime, Arc<Server>), String> {
    let mut by_name: BTreeMap<String, Arc<Checked>> = BTreeMap::new();
    for (path, workflow) in workflows {
        if let Some(first) = by_name.get(&workflow.name) {
            return Err(format!(
                "two workflows are named `{}`: {} and {}",
                workflow.name,
                first.path.display(),
                path.display()
            ));
        }
        by_name.insert(workflow.name.clone(), Arc::new(workflow));
    }
    let ask = match &options.ask {
        Some(name) if by_name.contains_key(name) => name.clone(),
        Some(name) => {
            return Err(format!(
                "--ask names `{name}`, which is not one of the served workflows ({})",
                by_name.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        None => match options.workflows.first() {
            Some(_) => by_name
                .values()
                .find(|w| Some(&w.path) == options.workflows.first())
                .map(|w| w.name.clone())
                .unwrap_or_else(|| by_name.keys().next().cloned().unwrap_or_default()),
            None => String::new(),
        },
    };
    std::fs::create_dir_all(&options.runs_root)
        .map_err(|e| format!("cannot create {}: {e}", options.runs_root.display()))?;
    let runtime = crate::run::runtime_for_runs(options.concurrency)
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let mut pools = BTreeMap::new();
    {
        let _context = runtime.enter();
        for (name, workflow) in &by_name {
            let pool = Interpreter::script_for(workflow, &RunOptions::default())
                .and_then(|script| Interpreter::provider_pool(workflow, script))
                .map_err(|e| format!("workflow `{name}`: {e}"))?;
            pools.insert(name.clone(), Arc::new(pool));
        }
    }
    let server = Arc::new(Server {
        workflows: by_name,
        pools,
        ask,
        runs_root: options.runs_root.clone(),
        token: options.token.clone(),
        permits: Arc::new(Semaphore::new(options.concurrency.max(1))),
        live: Mutex::new(HashMap::new()),
        stopping: AtomicBool::new(false),
        stop: Notify::new(),
        provider: options.provider.clone(),
        unconfined_tools: options.unconfined_tools,
        engine: options.engine,
        tasks: Mutex::new(tokio::task::JoinSet::new()),
    });
    Ok((runtime, server))
}

/// Answers on the address until a stop signal; then every run reaches a checkpoint.
async fn listen(server: Arc<Server>, options: ServeOptions) -> i32 {
    let addr = format!("{}:{}", options.host, options.port);
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            say!("error: cannot listen on {addr}: {e}");
            return 2;
        }
    };
    let local: SocketAddr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            say!("error: {e}");
            return 2;
        }
    };
    say!(
        "listening on http://{local} (workflows: {}; runs in {})",
        server
            .workflows
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        server.runs_root.display()
    );
    let app = api::router(server.clone(), &options.cors_origins);
    let shutdown = {
        let server = server.clone();
        async move {
            stop_signal().await;
            say!("stopping: running steps reach a checkpoint; resume them with `rondo resume`");
            server.interrupt_all();
        }
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    let mut tasks = std::mem::take(&mut *server.tasks.lock().unwrap_or_else(|e| e.into_inner()));
    while tasks.join_next().await.is_some() {}
    match served {
        Ok(()) => 0,
        Err(e) => {
            say!("error: {e}");
            2
        }
    }
}

async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
