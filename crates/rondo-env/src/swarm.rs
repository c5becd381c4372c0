//! Sandboxes placed by Docker Swarm: each one is a one-replica service (restart `none`),
//! so Swarm chooses the node. The driver then talks to the engine of that node, as it
//! talks to the local one for [`DockerEnv`]: the same runner over an exec attach, the
//! same archive copies (`Transport::CopyInOut`), the same hardening. See docs/scale.md.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::models::{
    Limit, NetworkAttachmentConfig, NetworkCreateRequest, NodeState, ResourceObject, ServiceSpec,
    ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec, TaskSpecPlacement,
    TaskSpecResources, TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum, TaskState,
};
use bollard::query_parameters::{
    ListContainersOptions, ListImagesOptions, ListNetworksOptions, ListServicesOptions,
    ListTasksOptions, PushImageOptions, RemoveImageOptions, TagImageOptions,
};
use bollard::{API_DEFAULT_VERSION, Docker};
use futures_util::StreamExt;

use crate::docker::{
    BATCH, DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS_LIMIT, KEEPER_USER, LABEL_BATCH,
    LABEL_HOST, LABEL_MANAGED, LABEL_PID, LABEL_ROLE, LABEL_RUN, hostname, prepare_image,
};
use crate::{
    DockerConfig, DockerEnv, EnvError, Environment, ExecOutput, ExecRequest, InstalledTools,
    Transport,
};

/// The engine port of every node when the configuration names none: Docker's TLS port.
pub const DEFAULT_ENGINE_PORT: u16 = 2376;
/// The same with plain TCP (Docker's plain port).
pub const DEFAULT_PLAIN_ENGINE_PORT: u16 = 2375;
/// Rondo-built tool images no sandbox uses that a node keeps after a batch, newest first.
pub const DEFAULT_KEEP_IMAGES: usize = 2;

/// How the driver proves itself to the engines of the manager and the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineAuth {
    /// TLS with a client certificate, as `docker --tlsverify`: an engine's certificate
    /// must be signed by `ca` and name the address it is reached at, and the driver shows
    /// `cert` (signed by the CA the engines trust) with its `key`. Paths only: the files
    /// are read when an engine is connected to, and their contents never logged.
    Tls {
        ca: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    },
    /// Plain TCP: whoever reaches an engine's port controls its daemon. Only when asked
    /// for (`RONDO_SWARM_PLAIN_TCP=1`): a private network, or a tunnel.
    PlainTcp,
}

impl EngineAuth {
    /// `ca.pem`, `cert.pem` and `key.pem` in `dir`, as Docker's `DOCKER_CERT_PATH`.
    pub fn tls_dir(dir: &Path) -> Self {
        EngineAuth::Tls {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }

    /// The port an engine listens on by Docker's conventions.
    pub fn default_port(&self) -> u16 {
        match self {
            EngineAuth::Tls { .. } => DEFAULT_ENGINE_PORT,
            EngineAuth::PlainTcp => DEFAULT_PLAIN_ENGINE_PORT,
        }
    }
}

/// Where and how sandboxes are placed on a swarm.
#[derive(Debug, Clone)]
pub struct SwarmConfig {
    /// A manager's engine API, `tcp://host:port`.
    pub manager: String,
    /// How the manager's and the nodes' engines are reached.
    pub auth: EngineAuth,
    /// The port every node's engine API listens on, at the node's swarm address.
    pub engine_port: u16,
    /// The registry the nodes pull from (`host:port`). The image (with its tools) is
    /// pushed there once per process; `None`: the image must already be on every node.
    pub registry: Option<String>,
    /// The same registry as this machine's engine pushes to, when it reaches it under
    /// another name (`127.0.0.1:port` is trusted without TLS); `None`: `registry`.
    pub push_registry: Option<String>,
    /// What Swarm reserves on a node for one sandbox (the limits are the sandbox's own).
    pub reserve_cpus: f64,
    pub reserve_memory_bytes: i64,
    /// How long a sandbox may take to run on its node before it is tried elsewhere.
    pub start_timeout: Duration,
    /// Nodes tried before a sandbox that will not start is reported.
    pub attempts: usize,
    /// Placement constraints of every sandbox (`node.role==worker`,
    /// `node.labels.rondo==yes`).
    pub constraints: Vec<String>,
    /// Deadline of every call to the manager or a node's engine that is not a command
    /// (a command's own timeout is added to it).
    pub call_timeout: Duration,
    /// Unused Rondo-built tool images a node keeps at a batch's end ([`prune_node_images`]).
    pub keep_images: usize,
    /// The sandbox: image, limits, mounts (always copied), tools.
    pub sandbox: DockerConfig,
}

impl SwarmConfig {
    pub fn new(manager: impl Into<String>, auth: EngineAuth, sandbox: DockerConfig) -> Self {
        SwarmConfig {
            manager: manager.into(),
            engine_port: auth.default_port(),
            auth,
            registry: None,
            push_registry: None,
            reserve_cpus: 0.25,
            reserve_memory_bytes: 128 << 20,
            start_timeout: Duration::from_secs(90),
            attempts: 3,
            constraints: Vec::new(),
            call_timeout: Duration::from_secs(60),
            keep_images: DEFAULT_KEEP_IMAGES,
            sandbox,
        }
    }
}

/// The settings `--engine swarm` reads, with what each means.
pub const SWARM_VARIABLES: [(&str, &str); 13] = [
    (
        "RONDO_SWARM_MANAGER",
        "a manager's engine API, tcp://host:port (required)",
    ),
    (
        "RONDO_SWARM_TLS_DIR",
        "a folder with ca.pem, cert.pem and key.pem for TLS to the engines \
         (else DOCKER_CERT_PATH)",
    ),
    (
        "RONDO_SWARM_TLS_CA",
        "the CA the engines' certificates are signed by",
    ),
    ("RONDO_SWARM_TLS_CERT", "the driver's client certificate"),
    (
        "RONDO_SWARM_TLS_KEY",
        "the path of the driver's private key",
    ),
    (
        "RONDO_SWARM_PLAIN_TCP",
        "1: reach the engines over plain TCP, no TLS (a private network only)",
    ),
    (
        "RONDO_SWARM_ENGINE_PORT",
        "the port of every node's engine API (2376 with TLS, 2375 plain)",
    ),
    (
        "RONDO_SWARM_REGISTRY",
        "the registry the nodes pull from, host:port",
    ),
    (
        "RONDO_SWARM_PUSH_REGISTRY",
        "the same registry as this machine pushes to",
    ),
    (
        "RONDO_SWARM_START_TIMEOUT",
        "seconds a sandbox may take to run on a node (90)",
    ),
    (
        "RONDO_SWARM_ATTEMPTS",
        "nodes tried before a sandbox is reported (3)",
    ),
    (
        "RONDO_SWARM_CONSTRAINTS",
        "placement constraints, comma-separated (node.role==worker)",
    ),
    (
        "RONDO_SWARM_KEEP_IMAGES",
        "unused Rondo tool images each node keeps at a batch's end (2)",
    ),
];

fn variables_help() -> String {
    SWARM_VARIABLES
        .iter()
        .map(|(n, what)| format!("{n}: {what}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl EngineAuth {
    /// TLS from `RONDO_SWARM_TLS_*` (or `DOCKER_CERT_PATH`), or plain TCP when
    /// `RONDO_SWARM_PLAIN_TCP=1` says so; neither, or both, is refused.
    fn from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let files = [
            "RONDO_SWARM_TLS_CA",
            "RONDO_SWARM_TLS_CERT",
            "RONDO_SWARM_TLS_KEY",
        ]
        .map(var);
        let dir = var("RONDO_SWARM_TLS_DIR").or_else(|| var("DOCKER_CERT_PATH"));
        let tls = match (files, dir) {
            ([Some(ca), Some(cert), Some(key)], _) => Some(EngineAuth::Tls {
                ca: ca.into(),
                cert: cert.into(),
                key: key.into(),
            }),
            ([None, None, None], Some(dir)) => Some(EngineAuth::tls_dir(Path::new(&dir))),
            ([None, None, None], None) => None,
            _ => {
                return Err(EnvError::InvalidRequest(
                    "RONDO_SWARM_TLS_CA, RONDO_SWARM_TLS_CERT and RONDO_SWARM_TLS_KEY go \
                     together: give all three, or RONDO_SWARM_TLS_DIR"
                        .into(),
                ));
            }
        };
        let plain = match var("RONDO_SWARM_PLAIN_TCP").as_deref().map(str::trim) {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(EnvError::InvalidRequest(format!(
                    "RONDO_SWARM_PLAIN_TCP={other}: 1 or 0"
                )));
            }
        };
        match (tls, plain) {
            (Some(tls), false) => Ok(tls),
            (None, true) => Ok(EngineAuth::PlainTcp),
            (Some(_), true) => Err(EnvError::InvalidRequest(
                "RONDO_SWARM_PLAIN_TCP=1 and TLS certificates are both set: choose one".into(),
            )),
            (None, false) => Err(EnvError::InvalidRequest(format!(
                "--engine swarm reaches the nodes' engines with TLS and a client certificate \
                 (dockerd --tlsverify): set RONDO_SWARM_TLS_DIR (ca.pem, cert.pem, key.pem), \
                 or RONDO_SWARM_TLS_CA, _CERT and _KEY; RONDO_SWARM_PLAIN_TCP=1 allows plain \
                 TCP, which gives whoever reaches a node's port its daemon. The settings: {}",
                variables_help()
            ))),
        }
    }
}

impl SwarmConfig {
    /// The settings of `--engine swarm`, from [`SWARM_VARIABLES`].
    pub fn from_env(sandbox: DockerConfig) -> Result<Self, EnvError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let manager = var("RONDO_SWARM_MANAGER").ok_or_else(|| {
            EnvError::InvalidRequest(format!(
                "--engine swarm needs RONDO_SWARM_MANAGER (a manager's engine API, \
                 tcp://host:port); the settings it reads: {}",
                variables_help()
            ))
        })?;
        let number = |name: &str| -> Result<Option<u64>, EnvError> {
            var(name)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        EnvError::InvalidRequest(format!("{name}={v} is not a whole number"))
                    })
                })
                .transpose()
        };
        if let Some(network) = &sandbox.network {
            return Err(EnvError::InvalidRequest(format!(
                "a Swarm sandbox has no network (each gets an internal network of its own); \
                 `network: {network}` is only for --engine docker"
            )));
        }
        let auth = EngineAuth::from_env(&var)?;
        let mut c = SwarmConfig::new(manager, auth, sandbox);
        c.registry = var("RONDO_SWARM_REGISTRY");
        c.push_registry = var("RONDO_SWARM_PUSH_REGISTRY");
        if let Some(port) = number("RONDO_SWARM_ENGINE_PORT")? {
            c.engine_port = u16::try_from(port).map_err(|_| {
                EnvError::InvalidRequest(format!("RONDO_SWARM_ENGINE_PORT={port} is no port"))
            })?;
        }
        if let Some(s) = number("RONDO_SWARM_START_TIMEOUT")? {
            c.start_timeout = Duration::from_secs(s.clamp(1, 3600));
        }
        if let Some(list) = var("RONDO_SWARM_CONSTRAINTS") {
            c.constraints = list
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect();
        }
        if let Some(n) = number("RONDO_SWARM_ATTEMPTS")? {
            c.attempts = n.clamp(1, 20) as usize;
        }
        if let Some(n) = number("RONDO_SWARM_KEEP_IMAGES")? {
            c.keep_images = n.min(1000) as usize;
        }
        Ok(c)
    }
}

/// Connects to one engine (TLS with the client certificate of `auth`, or plain TCP) and
/// checks it answers within `deadline`.
pub async fn connect_engine(
    address: &str,
    auth: &EngineAuth,
    deadline: Duration,
) -> Result<Docker, EnvError> {
    let unavailable = |source| EnvError::DockerUnavailable {
        host: address.to_string(),
        source,
    };
    let seconds = deadline.as_secs().max(1);
    let docker = match auth {
        EngineAuth::PlainTcp => {
            Docker::connect_with_http(address, seconds, API_DEFAULT_VERSION).map_err(unavailable)?
        }
        EngineAuth::Tls { ca, cert, key } => tls_engine(address, ca, cert, key, seconds)?,
    };
    let docker = within(deadline, address, docker.negotiate_version())
        .await?
        .map_err(unavailable)?;
    within(deadline, address, docker.ping())
        .await?
        .map_err(unavailable)?;
    Ok(docker)
}

/// A client of the engine at `address` over TLS: the engine's certificate checked against
/// `ca` (and no other root), `cert` and `key` shown as the client's. Not bollard's own TLS
/// connector: it leaves Nagle's algorithm on, and a handshake's last flight then waits
/// for a delayed ACK (47 ms a call here, against 2 ms with TCP_NODELAY).
fn tls_engine(
    address: &str,
    ca: &Path,
    cert: &Path,
    key: &Path,
    seconds: u64,
) -> Result<Docker, EnvError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    // Paths in messages, never the files' contents.
    let bad = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        EnvError::InvalidRequest(format!(
            "the TLS {what} for {address}, {}: {e}",
            path.display()
        ))
    };
    let read_certs = |what: &str, path: &Path| -> Result<Vec<CertificateDer<'static>>, EnvError> {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(what, path, &e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(what, path, &e))?;
        if certs.is_empty() {
            return Err(bad(what, path, &"no certificate in it"));
        }
        Ok(certs)
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs("CA", ca)? {
        roots.add(c).map_err(|e| bad("CA", ca, &e))?;
    }
    let chain = read_certs("client certificate", cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key", key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("settings", ca, &e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key_der)
        .map_err(|e| bad("client certificate and key", cert, &e))?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(seconds)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    // No idle connection kept, as bollard's own clients: a lost node leaves none behind.
    let client = Arc::new(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(https),
    );
    let host = address
        .trim_start_matches("tcp://")
        .trim_start_matches("https://");
    Docker::connect_with_custom_transport(
        move |req: bollard::BollardRequest| {
            let client = Arc::clone(&client);
            Box::pin(async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            })
        },
        Some(format!("https://{host}")),
        seconds,
        API_DEFAULT_VERSION,
    )
    .map_err(|e| EnvError::DockerUnavailable {
        host: address.to_string(),
        source: e,
    })
}

/// A call past its deadline is a lost sandbox (or manager): one wedged engine never
/// stalls the caller.
async fn within<T>(
    deadline: Duration,
    what: &str,
    call: impl std::future::Future<Output = T>,
) -> Result<T, EnvError> {
    tokio::time::timeout(deadline, call)
        .await
        .map_err(|_| EnvError::SandboxLost {
            sandbox: what.to_string(),
            reason: format!("no answer in {} s", deadline.as_secs_f64()),
        })
}

/// Nodes whose engine this process found gone, and when: no sandbox is placed there for
/// a while, though the manager may still call them ready (it sees a node down only after
/// missed heartbeats).
static LOST_NODES: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());
const LOST_NODE_AVOIDED: Duration = Duration::from_secs(600);

fn lost_nodes() -> Vec<String> {
    let mut lost = LOST_NODES.lock().unwrap_or_else(|e| e.into_inner());
    lost.retain(|(_, at)| at.elapsed() < LOST_NODE_AVOIDED);
    lost.iter().map(|(n, _)| n.clone()).collect()
}

fn mark_lost(node: &str) {
    let mut lost = LOST_NODES.lock().unwrap_or_else(|e| e.into_inner());
    lost.retain(|(n, _)| n != node);
    lost.push((node.to_string(), Instant::now()));
}

static PUSHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Images pushed by this process: local name -> the name the nodes pull.
static PUSHED: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Pushes `image` of this machine's engine to the registry once per process; the name
/// the nodes pull it by.
async fn push_once(local: &Docker, image: &str, config: &SwarmConfig) -> Result<String, EnvError> {
    let Some(registry) = &config.registry else {
        return Ok(image.to_string());
    };
    // One push at a time: concurrent pushes of the same layers make a registry fail them.
    let _pushing = PUSHING.lock().await;
    if let Some(name) = PUSHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(image)
    {
        return Ok(name.clone());
    }
    let push_to = config.push_registry.as_deref().unwrap_or(registry);
    let (repo, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (image, "latest"),
    };
    // A name already under a registry keeps its path below it.
    let path = repo
        .split_once('/')
        .filter(|(host, _)| host.contains([':', '.']))
        .map_or(repo, |(_, p)| p);
    let pushed = format!("{push_to}/{path}");
    local
        .tag_image(
            image,
            Some(TagImageOptions {
                repo: Some(pushed.clone()),
                tag: Some(tag.to_string()),
            }),
        )
        .await
        .map_err(|e| EnvError::docker(format!("tagging {image} for {push_to}"), e))?;
    let mut stream = local.push_image(
        &pushed,
        Some(PushImageOptions {
            tag: Some(tag.to_string()),
            ..Default::default()
        }),
        None,
    );
    while let Some(item) = stream.next().await {
        item.map_err(|e| EnvError::docker(format!("pushing {image} to {push_to}"), e))?;
    }
    let name = format!("{registry}/{path}:{tag}");
    PUSHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(image.to_string(), name.clone());
    Ok(name)
}

/// One sandbox on a swarm node; see the module documentation. The service (and its
/// network) is removed on shutdown and, best effort, on drop.
pub struct SwarmEnv {
    inner: DockerEnv,
    manager: Docker,
    node: Docker,
    service: String,
    network: String,
    /// The node's address, for reports.
    node_addr: String,
    node_id: String,
    call_timeout: Duration,
    default_timeout: Duration,
    kill_grace: Duration,
    removed: AtomicBool,
    /// Set once the sandbox was found lost: every later call fails at once.
    lost: Arc<Mutex<Option<String>>>,
}

/// Where a started task runs.
struct Placed {
    service: String,
    network: String,
    node_id: String,
    container: String,
}

impl SwarmEnv {
    /// Builds (tools) and pushes the image, then creates the service and waits for its
    /// task to run; a node on which it does not run in time is left out of the next try.
    pub async fn start(mut config: SwarmConfig) -> Result<Self, EnvError> {
        if config.sandbox.read_only_root {
            return Err(EnvError::InvalidRequest(
                "a Swarm sandbox receives its mounts by copy: it needs a writable root file system"
                    .into(),
            ));
        }
        config.sandbox.transport = Transport::CopyInOut;
        let local = crate::connect().await?;
        let prepared = prepare_image(&local, &config.sandbox).await?;
        let image = push_once(&local, &prepared.image, &config).await?;
        USED_IMAGES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(image.clone());
        let manager = connect_engine(&config.manager, &config.auth, config.call_timeout).await?;
        let user = config
            .sandbox
            .user
            .clone()
            .or(prepared.user)
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "0:0".to_string());
        // A node lost between placement and the first command: the sandbox goes elsewhere.
        let mut tries = 0;
        loop {
            tries += 1;
            let placed = place(&manager, &config, &image).await?;
            let node_id = placed.node_id.clone();
            match Self::attach(&manager, &config, placed, prepared.tools.clone(), &user).await {
                Ok(env) => return Ok(env),
                Err(EnvError::SandboxLost { .. } | EnvError::DockerUnavailable { .. })
                    if tries < config.attempts.max(1) =>
                {
                    mark_lost(&node_id)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Connects to the node of a placed task and drives its container.
    async fn attach(
        manager: &Docker,
        config: &SwarmConfig,
        placed: Placed,
        tools: InstalledTools,
        user: &str,
    ) -> Result<Self, EnvError> {
        let started = async {
            let node = within(
                config.call_timeout,
                &config.manager,
                manager.inspect_node(&placed.node_id),
            )
            .await?
            .map_err(|e| EnvError::docker("inspecting the sandbox's node", e))?;
            let addr = node_address(&node).ok_or_else(|| {
                EnvError::InvalidRequest(format!("node {} has no address", placed.node_id))
            })?;
            let address = format!("tcp://{addr}:{}", config.engine_port);
            let engine = connect_engine(&address, &config.auth, config.call_timeout).await?;
            Ok::<_, EnvError>((addr, engine))
        }
        .await;
        let (node_addr, engine) = match started {
            Ok(v) => v,
            Err(e) => {
                remove_service(
                    manager,
                    &placed.service,
                    &placed.network,
                    config.call_timeout,
                )
                .await;
                return Err(e);
            }
        };
        let env = SwarmEnv {
            default_timeout: config.sandbox.default_timeout,
            kill_grace: config.sandbox.kill_grace,
            inner: DockerEnv::adopt(
                engine.clone(),
                placed.container,
                config.sandbox.clone(),
                tools,
                user.to_string(),
            )
            .await,
            manager: manager.clone(),
            node: engine,
            service: placed.service,
            network: placed.network,
            node_addr,
            node_id: placed.node_id,
            call_timeout: config.call_timeout,
            removed: AtomicBool::new(false),
            lost: Arc::default(),
        };
        if let Err(e) = env.check_hardening().await {
            let _ = env.shutdown().await;
            return Err(e);
        }
        Ok(env)
    }

    /// The swarm id of the node the sandbox runs on.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The address of that node.
    pub fn node_addr(&self) -> &str {
        &self.node_addr
    }

    /// The service id.
    pub fn service_id(&self) -> &str {
        &self.service
    }

    /// The engine of the node the sandbox runs on.
    pub fn node_engine(&self) -> &Docker {
        &self.node
    }

    /// The node's engine applies no-new-privileges to every container (`dockerd
    /// --no-new-privileges`): API 1.41 services cannot ask for it, so it is checked.
    async fn check_hardening(&self) -> Result<(), EnvError> {
        let out = self
            .exec(ExecRequest::shell("cat /proc/self/status"))
            .await?;
        let nnp = out
            .stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["NoNewPrivs:", "1"]);
        if nnp {
            return Ok(());
        }
        Err(EnvError::InvalidRequest(format!(
            "the engine of node {} does not set no-new-privileges on its containers; rondo \
             runs no tool there: start its dockerd with --no-new-privileges \
             (\"no-new-privileges\": true in daemon.json)",
            self.node_addr
        )))
    }

    /// Why the sandbox is gone, if it is: its engine does not answer, or its container
    /// is not running.
    async fn gone(&self) -> Option<String> {
        let deadline = self.call_timeout.min(Duration::from_secs(10));
        match tokio::time::timeout(deadline, self.node.ping()).await {
            Err(_) => return Some(format!("node {} does not answer", self.node_addr)),
            Ok(Err(e)) => return Some(format!("node {}: {e}", self.node_addr)),
            Ok(Ok(_)) => {}
        }
        let id = self.inner.container_id().to_string();
        match tokio::time::timeout(deadline, self.node.inspect_container(&id, None)).await {
            Err(_) => Some(format!("node {} does not answer", self.node_addr)),
            Ok(Err(e)) => Some(format!("its container on node {}: {e}", self.node_addr)),
            Ok(Ok(info)) if info.state.as_ref().and_then(|s| s.running) != Some(true) => {
                Some(format!("its container on node {} stopped", self.node_addr))
            }
            Ok(Ok(_)) => None,
        }
    }

    /// Runs one call to the sandbox under `deadline`; a failure or a dead runner whose
    /// cause is a gone sandbox becomes [`EnvError::SandboxLost`].
    async fn guarded<T>(
        &self,
        deadline: Duration,
        call: impl std::future::Future<Output = Result<T, EnvError>>,
        runner_died: impl Fn(&T) -> bool,
    ) -> Result<T, EnvError> {
        if let Some(reason) = self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(self.lost_error(reason));
        }
        let result = tokio::time::timeout(deadline, call).await;
        let suspect = match &result {
            Err(_) => true,
            Ok(Err(EnvError::Docker { .. } | EnvError::DockerUnavailable { .. })) => true,
            Ok(Ok(value)) => runner_died(value),
            Ok(Err(_)) => false,
        };
        if suspect && let Some(reason) = self.gone().await {
            if reason.starts_with("node ") {
                mark_lost(&self.node_id);
            }
            *self.lost.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.clone());
            return Err(self.lost_error(reason));
        }
        match result {
            Ok(r) => r,
            Err(_) => Err(EnvError::SandboxLost {
                sandbox: self.service.clone(),
                reason: format!(
                    "node {} gave no answer in {} s",
                    self.node_addr,
                    deadline.as_secs_f64()
                ),
            }),
        }
    }

    fn lost_error(&self, reason: String) -> EnvError {
        EnvError::SandboxLost {
            sandbox: self.service.clone(),
            reason,
        }
    }
}

fn node_address(node: &bollard::models::Node) -> Option<String> {
    let addr = node.status.as_ref().and_then(|s| s.addr.clone());
    // A manager may report 0.0.0.0; its manager address then says where it is.
    match addr.as_deref() {
        Some("0.0.0.0") | Some("") | None => node
            .manager_status
            .as_ref()
            .and_then(|m| m.addr.as_deref())
            .and_then(|a| a.rsplit_once(':').map(|(h, _)| h.to_string())),
        Some(a) => Some(a.to_string()),
    }
}

/// Tries up to `config.attempts` times, each on a node not tried before.
async fn place(manager: &Docker, config: &SwarmConfig, image: &str) -> Result<Placed, EnvError> {
    let mut excluded: Vec<String> = lost_nodes();
    let mut failures: Vec<String> = Vec::new();
    for attempt in 0..config.attempts.max(1) {
        let name = service_name(&config.sandbox.run_id, attempt);
        let (service, network) = create_service(manager, config, image, &name, &excluded).await?;
        match wait_running(manager, &service, config).await {
            Ok((node_id, container)) => {
                return Ok(Placed {
                    service,
                    network,
                    node_id,
                    container,
                });
            }
            Err((node, why)) => {
                remove_service(manager, &service, &network, config.call_timeout).await;
                failures.push(match &node {
                    Some(n) => format!("on node {n}: {why}"),
                    None => why,
                });
                if let Some(n) = node {
                    excluded.push(n);
                }
            }
        }
    }
    Err(EnvError::InvalidRequest(format!(
        "the sandbox did not start on the swarm at {} after {} attempts: {}",
        config.manager,
        config.attempts.max(1),
        failures.join("; ")
    )))
}

fn service_name(run_id: &str, attempt: usize) -> String {
    let clean: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let head: String = clean.trim_matches('-').chars().take(36).collect();
    format!("rondo-{head}-{attempt}-{:06x}", nanos & 0xff_ffff)
}

fn labels(config: &SwarmConfig) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_RUN.to_string(), config.sandbox.run_id.clone()),
        (LABEL_ROLE.to_string(), "run".to_string()),
        (LABEL_PID.to_string(), std::process::id().to_string()),
        (LABEL_HOST.to_string(), hostname()),
    ]);
    if let Some(batch) = BATCH.get() {
        labels.insert(LABEL_BATCH.to_string(), batch.clone());
    }
    labels
}

/// A network of the sandbox's own: Swarm refuses network `none` for a service, and an
/// internal overlay reaches nothing (no gateway) and no other sandbox.
async fn create_service(
    manager: &Docker,
    config: &SwarmConfig,
    image: &str,
    name: &str,
    excluded: &[String],
) -> Result<(String, String), EnvError> {
    let labels = labels(config);
    let network = within(
        config.call_timeout,
        &config.manager,
        manager.create_network(NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("overlay".into()),
            internal: Some(true),
            labels: Some(labels.clone()),
            ..Default::default()
        }),
    )
    .await?
    .map_err(|e| EnvError::docker("creating the sandbox's network", e))?
    .id;
    let sandbox = &config.sandbox;
    let memory = sandbox.memory_bytes.unwrap_or(DEFAULT_MEMORY_BYTES);
    let nano_cpus = (sandbox.cpus.unwrap_or(DEFAULT_CPUS) * 1e9) as i64;
    let mut cap_add = sandbox.cap_add.clone();
    cap_add.retain(|c| !c.is_empty());
    let spec = ServiceSpec {
        name: Some(name.to_string()),
        labels: Some(labels.clone()),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated { replicas: Some(1) }),
            ..Default::default()
        }),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_string()),
                labels: Some(labels),
                command: Some(vec!["sleep".into(), "infinity".into()]),
                env: Some(
                    sandbox
                        .env
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect(),
                ),
                dir: Some(sandbox.workdir.clone()),
                user: Some(KEEPER_USER.to_string()),
                init: Some(true),
                capability_drop: Some(vec!["ALL".into()]),
                capability_add: (!cap_add.is_empty()).then_some(cap_add),
                stop_grace_period: Some(1_000_000_000),
                ..Default::default()
            }),
            resources: Some(TaskSpecResources {
                limits: Some(Limit {
                    nano_cpus: Some(nano_cpus),
                    memory_bytes: Some(memory),
                    pids: Some(sandbox.pids_limit.unwrap_or(DEFAULT_PIDS_LIMIT)),
                }),
                reservations: Some(ResourceObject {
                    nano_cpus: Some(((config.reserve_cpus * 1e9) as i64).min(nano_cpus)),
                    memory_bytes: Some(config.reserve_memory_bytes.min(memory)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                ..Default::default()
            }),
            placement: Some(TaskSpecPlacement {
                constraints: Some(
                    config
                        .constraints
                        .iter()
                        .cloned()
                        .chain(excluded.iter().map(|n| format!("node.id!={n}")))
                        .collect(),
                ),
                ..Default::default()
            }),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some(network.clone()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = within(
        config.call_timeout,
        &config.manager,
        manager.create_service(spec, None),
    )
    .await?;
    match created {
        Ok(c) => Ok((c.id.unwrap_or_else(|| name.to_string()), network)),
        Err(e) => {
            let _ = within(
                config.call_timeout,
                &config.manager,
                manager.remove_network(&network),
            )
            .await;
            Err(EnvError::docker("creating the sandbox's service", e))
        }
    }
}

/// Waits for the service's task to run: its node and container. On failure, the node
/// it was given to (if any) and why.
async fn wait_running(
    manager: &Docker,
    service: &str,
    config: &SwarmConfig,
) -> Result<(String, String), (Option<String>, String)> {
    let deadline = Instant::now() + config.start_timeout;
    let filters = HashMap::from([("service".to_string(), vec![service.to_string()])]);
    let mut node: Option<String> = None;
    let mut last = String::from("no task yet");
    let mut last_node_check = Instant::now();
    while Instant::now() < deadline {
        let listed = tokio::time::timeout(
            config.call_timeout,
            manager.list_tasks(Some(ListTasksOptions {
                filters: Some(filters.clone()),
            })),
        )
        .await;
        if let Ok(Ok(tasks)) = listed {
            for task in tasks {
                if let Some(n) = task.node_id.clone().filter(|n| !n.is_empty()) {
                    node = Some(n);
                }
                let status = task.status.unwrap_or_default();
                let state = status.state;
                last = format!(
                    "task {}{}",
                    state.map(|s| s.to_string()).unwrap_or_default(),
                    status.err.map(|e| format!(": {e}")).unwrap_or_default()
                );
                let container = status
                    .container_status
                    .and_then(|c| c.container_id)
                    .filter(|c| !c.is_empty());
                match state {
                    Some(TaskState::RUNNING) => {
                        if let (Some(n), Some(c)) = (node.clone(), container) {
                            return Ok((n, c));
                        }
                    }
                    Some(
                        TaskState::FAILED
                        | TaskState::REJECTED
                        | TaskState::SHUTDOWN
                        | TaskState::COMPLETE
                        | TaskState::ORPHANED
                        | TaskState::REMOVE,
                    ) => return Err((node, last)),
                    _ => {}
                }
            }
        }
        // A task given to a node that went down meanwhile never runs: tried elsewhere.
        if let Some(n) = &node
            && last_node_check.elapsed() > Duration::from_secs(2)
        {
            last_node_check = Instant::now();
            if let Ok(Ok(info)) =
                tokio::time::timeout(config.call_timeout, manager.inspect_node(n)).await
            {
                let state = info.status.and_then(|s| s.state);
                if state.is_some_and(|s| s != NodeState::READY) {
                    return Err((node, format!("the node is {}", state.unwrap_or_default())));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err((
        node,
        format!(
            "not running after {} s ({last})",
            config.start_timeout.as_secs_f64()
        ),
    ))
}

async fn remove_service(manager: &Docker, service: &str, network: &str, deadline: Duration) {
    let _ = tokio::time::timeout(deadline, manager.delete_service(service)).await;
    remove_network(manager, network, deadline).await;
}

async fn remove_network(manager: &Docker, network: &str, deadline: Duration) {
    // The network goes once the task's container left it on its node; a lost node
    // never says so, and the manager then frees it when the task is gone.
    for _ in 0..50 {
        match tokio::time::timeout(deadline, manager.remove_network(network)).await {
            Ok(Ok(())) => return,
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            })) => return,
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => return,
        }
    }
}

/// Removes every service and network of the batch `batch` (by label) from the swarm:
/// what a crashed batch left, at the start of the next, and what this one left at its
/// end. Returns how many services were removed.
pub async fn reap_batch(manager: &Docker, batch: &str) -> Result<usize, EnvError> {
    let label = format!("{LABEL_BATCH}={batch}");
    let filters = HashMap::from([("label".to_string(), vec![label])]);
    let services = manager
        .list_services(Some(ListServicesOptions {
            filters: Some(filters.clone()),
            ..Default::default()
        }))
        .await
        .map_err(|e| EnvError::docker("listing the batch's services", e))?;
    for s in &services {
        if let Some(id) = &s.id {
            let _ = manager.delete_service(id).await;
        }
    }
    let networks = manager
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
        .map_err(|e| EnvError::docker("listing the batch's networks", e))?;
    for n in networks {
        if let Some(id) = n.id {
            remove_network(manager, &id, Duration::from_secs(10)).await;
        }
    }
    Ok(services.len())
}

/// [`reap_batch`] on the swarm `--engine swarm` names ([`SWARM_VARIABLES`]). Once this
/// process has placed sandboxes (at a batch's end), every node's images are pruned too
/// ([`prune_swarm_images`]); at a batch's start there is nothing of its own to keep yet.
pub async fn reap_swarm_batch(batch: &str) -> Result<usize, EnvError> {
    let config = SwarmConfig::from_env(DockerConfig::new("", ""))?;
    let manager = connect_engine(&config.manager, &config.auth, config.call_timeout).await?;
    let reaped = within(
        config.call_timeout * 4,
        &config.manager,
        reap_batch(&manager, batch),
    )
    .await??;
    let used = used_images();
    if !used.is_empty() {
        prune_swarm_images(&manager, &config, &used).await?;
    }
    Ok(reaped)
}

/// The images (as the nodes pull them) of every sandbox this process started: the
/// current batch's, which a node keeps.
static USED_IMAGES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn used_images() -> BTreeSet<String> {
    USED_IMAGES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// The label of every tool image Rondo builds (`tools = [...]`), its content hash.
const LABEL_TOOLS_HASH: &str = "rondo.tools_hash";

/// The image clean-up policy of a node: of the Rondo-built tool images on it (label
/// `rondo.tools_hash`), those no container of the node uses (a running sandbox, or any
/// other) and not in `keep` (the current batch's) are removed, but for the `newest`
/// most recently built. Layers other images share stay (the engine counts them). The
/// images removed, by tag or id.
pub async fn prune_node_images(
    engine: &Docker,
    keep: &BTreeSet<String>,
    newest: usize,
) -> Result<Vec<String>, EnvError> {
    let filters = HashMap::from([("label".to_string(), vec![LABEL_TOOLS_HASH.to_string()])]);
    let images = engine
        .list_images(Some(ListImagesOptions {
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(|e| EnvError::docker("listing the node's tool images", e))?;
    let containers = engine
        .list_containers(Some(ListContainersOptions {
            all: true,
            ..Default::default()
        }))
        .await
        .map_err(|e| EnvError::docker("listing the node's containers", e))?;
    let in_use: BTreeSet<String> = containers.into_iter().filter_map(|c| c.image_id).collect();
    let mut unused: Vec<_> = images
        .into_iter()
        .filter(|i| !in_use.contains(&i.id))
        .filter(|i| !i.repo_tags.iter().any(|t| keep.contains(t)))
        .collect();
    unused.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.id.cmp(&b.id)));
    let mut removed = Vec::new();
    for image in unused.into_iter().skip(newest) {
        // By tag, without force: an image a container took meanwhile stays.
        let names = if image.repo_tags.is_empty() {
            vec![image.id.clone()]
        } else {
            image.repo_tags.clone()
        };
        for name in names {
            match engine
                .remove_image(&name, None::<RemoveImageOptions>, None)
                .await
            {
                Ok(_) => removed.push(name),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404 | 409,
                    ..
                }) => {}
                Err(e) => return Err(EnvError::docker(format!("removing image {name}"), e)),
            }
        }
    }
    Ok(removed)
}

/// [`prune_node_images`] on every node of the swarm that answers, keeping `keep` and
/// `config.keep_images` more; the images removed, per node address. A node that does
/// not answer is skipped (it prunes at the next batch's end); a node that answers but
/// fails is reported, after every other node was pruned.
pub async fn prune_swarm_images(
    manager: &Docker,
    config: &SwarmConfig,
    keep: &BTreeSet<String>,
) -> Result<Vec<(String, Vec<String>)>, EnvError> {
    let nodes = within(
        config.call_timeout,
        &config.manager,
        manager.list_nodes(None),
    )
    .await?
    .map_err(|e| EnvError::docker("listing the swarm's nodes", e))?;
    let mut pruned = Vec::new();
    let mut failed = Vec::new();
    for node in nodes {
        let ready = node.status.as_ref().and_then(|s| s.state) == Some(NodeState::READY);
        let Some(addr) = node_address(&node).filter(|_| ready) else {
            continue;
        };
        let address = format!("tcp://{addr}:{}", config.engine_port);
        let Ok(engine) = connect_engine(&address, &config.auth, config.call_timeout).await else {
            continue;
        };
        match within(
            config.call_timeout * 2,
            &address,
            prune_node_images(&engine, keep, config.keep_images),
        )
        .await
        {
            Ok(Ok(removed)) => pruned.push((addr, removed)),
            Ok(Err(e)) | Err(e) => failed.push(format!("node {addr}: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(pruned)
    } else {
        Err(EnvError::InvalidRequest(format!(
            "pruning the nodes' tool images: {}",
            failed.join("; ")
        )))
    }
}

#[async_trait::async_trait]
impl Environment for SwarmEnv {
    fn kind(&self) -> &'static str {
        "swarm"
    }

    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        let timeout = req.timeout.unwrap_or(self.default_timeout);
        // The command's own time, its kill, and the copies around it.
        let deadline = timeout + self.kill_grace + 2 * self.call_timeout;
        self.guarded(deadline, self.inner.exec(req), |out| {
            out.exit_code.is_none() && !out.timed_out
        })
        .await
    }

    async fn copy_in(&self, host_path: &Path, target: &str) -> Result<(), EnvError> {
        self.guarded(
            self.call_timeout,
            self.inner.copy_in(host_path, target),
            |_| false,
        )
        .await
    }

    async fn copy_out(&self, source: &str, host_path: &Path) -> Result<(), EnvError> {
        self.guarded(
            self.call_timeout,
            self.inner.copy_out(source, host_path),
            |_| false,
        )
        .await
    }

    async fn shutdown(&self) -> Result<(), EnvError> {
        if self.removed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if self
            .lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            let _ = tokio::time::timeout(self.call_timeout, self.inner.shutdown()).await;
        }
        remove_service(
            &self.manager,
            &self.service,
            &self.network,
            self.call_timeout,
        )
        .await;
        Ok(())
    }

    fn tools(&self) -> &InstalledTools {
        self.inner.tools()
    }
}

impl Drop for SwarmEnv {
    fn drop(&mut self) {
        if self.removed.swap(true, Ordering::SeqCst) {
            return;
        }
        let (manager, service, network, deadline) = (
            self.manager.clone(),
            self.service.clone(),
            self.network.clone(),
            self.call_timeout,
        );
        // A fresh thread and runtime: drop may run while the caller's runtime shuts down.
        let handle = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(remove_service(&manager, &service, &network, deadline));
            }
        });
        let _ = handle.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(vars: &[(&str, &str)]) -> Result<EngineAuth, EnvError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EngineAuth::from_env(&|name| vars.get(name).cloned())
    }

    #[test]
    fn tls_is_required_unless_plain_tcp_is_asked_for() {
        let err = auth(&[]).unwrap_err().to_string();
        assert!(err.contains("RONDO_SWARM_TLS_DIR"), "{err}");
        assert!(err.contains("RONDO_SWARM_PLAIN_TCP=1"), "{err}");
        assert_eq!(
            auth(&[("RONDO_SWARM_PLAIN_TCP", "1")]).unwrap(),
            EngineAuth::PlainTcp
        );
        let err = auth(&[("RONDO_SWARM_PLAIN_TCP", "yes")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 or 0"), "{err}");
        // `0` asks for nothing: TLS is still required.
        assert!(auth(&[("RONDO_SWARM_PLAIN_TCP", "0")]).is_err());
    }

    #[test]
    fn certificates_come_from_a_folder_or_three_paths_never_half_of_them() {
        let dir = auth(&[("RONDO_SWARM_TLS_DIR", "/certs")]).unwrap();
        assert_eq!(dir, EngineAuth::tls_dir(Path::new("/certs")));
        assert_eq!(
            auth(&[("DOCKER_CERT_PATH", "/certs")]).unwrap(),
            EngineAuth::tls_dir(Path::new("/certs"))
        );
        let files = auth(&[
            ("RONDO_SWARM_TLS_CA", "/a/ca"),
            ("RONDO_SWARM_TLS_CERT", "/a/cert"),
            ("RONDO_SWARM_TLS_KEY", "/a/key"),
            ("DOCKER_CERT_PATH", "/certs"),
        ])
        .unwrap();
        assert_eq!(
            files,
            EngineAuth::Tls {
                ca: "/a/ca".into(),
                cert: "/a/cert".into(),
                key: "/a/key".into(),
            }
        );
        let err = auth(&[
            ("RONDO_SWARM_TLS_CA", "/a/ca"),
            ("RONDO_SWARM_TLS_DIR", "/certs"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("go together"), "{err}");
        let err = auth(&[
            ("RONDO_SWARM_TLS_DIR", "/certs"),
            ("RONDO_SWARM_PLAIN_TCP", "1"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("choose one"), "{err}");
    }

    #[test]
    fn the_engine_port_follows_docker_conventions() {
        let sandbox = DockerConfig::new("img", "run");
        let tls = SwarmConfig::new("tcp://m:1", EngineAuth::tls_dir(Path::new("/c")), sandbox);
        assert_eq!(tls.engine_port, 2376);
        let plain = SwarmConfig::new("tcp://m:1", EngineAuth::PlainTcp, tls.sandbox);
        assert_eq!(plain.engine_port, 2375);
    }

    #[tokio::test]
    async fn a_bad_certificate_file_is_named_before_any_connection() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "not a certificate").unwrap();
        // Port 9 of a TEST-NET address: nothing is contacted, the check comes first.
        let err = connect_engine(
            "tcp://192.0.2.1:9",
            &EngineAuth::tls_dir(dir.path()),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("TLS CA"), "{err}");
        assert!(err.contains("ca.pem: no certificate in it"), "{err}");
        std::fs::remove_file(dir.path().join("ca.pem")).unwrap();
        let err = connect_engine(
            "tcp://192.0.2.1:9",
            &EngineAuth::tls_dir(dir.path()),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("TLS CA"), "{err}");
        assert!(err.contains("ca.pem"), "{err}");
    }
}
