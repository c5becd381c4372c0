//! One Pod per sandbox on a Kubernetes cluster, driven through the API server (the `kube`
//! crate). The pod runs the tool image with a command that only sleeps; commands reach it
//! as they reach a Docker container: the runner (`runner.py`) started by one exec, whose
//! stdin and stdout carry the line-JSON protocol over the exec websocket. Files travel as
//! tar archives through execs, as `kubectl cp` does them. See docs/scale.md (Kubernetes).

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::exec::{Collector, MAX_ARG_LEN};
use crate::runner::{self, Runner};
use crate::tool::InstalledTools;
use crate::{
    Command, DockerConfig, EnvError, Environment, ExecOutput, ExecRequest, StreamKind, archive,
};

/// The one container of a sandbox pod.
pub const CONTAINER: &str = "sandbox";
const LABEL_MANAGED: &str = "rondo.managed";
const LABEL_RUN: &str = "rondo.run_id";
const LABEL_ROLE: &str = "rondo.role";
const LABEL_BATCH: &str = "rondo.batch";
const LABEL_KEEP: &str = "rondo.keep";
/// On pods that may not use the network: the NetworkPolicy [`NO_NETWORK_POLICY`] selects
/// them and allows them no traffic either way.
pub const LABEL_NETWORK: &str = "rondo.network";
/// The NetworkPolicy denying all ingress and egress to pods labelled `rondo.network=none`;
/// created in a namespace by the first sandbox without network, and left there.
pub const NO_NETWORK_POLICY: &str = "rondo-sandbox-no-network";
const DEFAULT_MEMORY_BYTES: i64 = 2 << 30;
const DEFAULT_CPUS: f64 = 2.0;
/// Bytes of a runner's standard error kept to explain why it stopped.
const STDERR_TAIL: usize = 4096;
/// Bytes of a helper command's standard error kept for its error message.
const HELPER_STDERR: u64 = 64 << 10;

/// What a Kubernetes sandbox needs beyond the [`DockerConfig`] every engine starts from.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// `None`: the kubeconfig context's namespace (`default` when it names none).
    pub namespace: Option<String>,
    /// The pod must be Running within this, or it is deleted and the start fails.
    pub start_timeout: Duration,
    /// Deadline of each API call (create, get, delete, the start of an exec).
    pub call_timeout: Duration,
    /// Deadline of one copy in or out (its exec, transfer included).
    pub copy_timeout: Duration,
    /// The most a copy out may bring back: what a pod sends is untrusted.
    pub max_copy_bytes: u64,
    /// A RuntimeClass for the pods (for example a gVisor or Kata one); `None`: the
    /// cluster's default runtime.
    pub runtime_class: Option<String>,
}

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            namespace: None,
            start_timeout: Duration::from_secs(300),
            call_timeout: Duration::from_secs(30),
            copy_timeout: Duration::from_secs(600),
            max_copy_bytes: 1 << 30,
            runtime_class: None,
        }
    }
}

impl KubeOptions {
    /// The defaults, with `RONDO_KUBE_NAMESPACE`, `RONDO_KUBE_START_TIMEOUT` (seconds) and
    /// `RONDO_KUBE_RUNTIME_CLASS` applied when set.
    pub fn from_env() -> Result<Self, EnvError> {
        let mut options = KubeOptions::default();
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        options.namespace = var("RONDO_KUBE_NAMESPACE");
        options.runtime_class = var("RONDO_KUBE_RUNTIME_CLASS");
        if let Some(text) = var("RONDO_KUBE_START_TIMEOUT") {
            let secs: u64 = text.trim().parse().map_err(|_| {
                EnvError::InvalidRequest(format!(
                    "RONDO_KUBE_START_TIMEOUT is `{text}`: a whole number of seconds"
                ))
            })?;
            options.start_timeout = Duration::from_secs(secs.max(1));
        }
        Ok(options)
    }
}

/// The cluster's client configuration from the standard places: `KUBECONFIG`, then
/// `~/.kube/config`, then the in-cluster service account.
pub async fn kube_config() -> Result<kube::Config, EnvError> {
    kube::Config::infer().await.map_err(|e| {
        EnvError::Kubernetes(format!(
            "no cluster configuration ({e}); set KUBECONFIG or write ~/.kube/config"
        ))
    })
}

fn client_of(config: &kube::Config) -> Result<kube::Client, EnvError> {
    kube::Client::try_from(config.clone()).map_err(|e| EnvError::kube("connecting", e))
}

/// Runs an API call under `limit`; an answer that does not come is an error, not a wait.
async fn deadline<T>(
    limit: Duration,
    action: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, EnvError> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result.map_err(|e| EnvError::kube(action, e)),
        Err(_) => Err(EnvError::Kubernetes(format!(
            "{action}: no answer from the API server within {} s",
            limit.as_secs_f64()
        ))),
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// Delete every pod matching `selector` (`key=value[,key=value]`) in `namespace`; their
/// names. Pods go at once (no grace period): a sandbox holds nothing to save.
pub async fn remove_pods(
    config: &kube::Config,
    namespace: &str,
    selector: &str,
) -> Result<Vec<String>, EnvError> {
    let pods: Api<Pod> = Api::namespaced(client_of(config)?, namespace);
    let list = ListParams::default().labels(selector);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    let limit = Duration::from_secs(60);
    let deleted = deadline(
        limit,
        "deleting pods by label",
        pods.delete_collection(&params, &list),
    )
    .await?;
    Ok(match deleted {
        either::Either::Left(list) => list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect(),
        either::Either::Right(_) => Vec::new(),
    })
}

/// Delete every pod of the batch `id` (`rondo.batch=<id>`) in `namespace`.
pub async fn remove_kube_batch(
    config: &kube::Config,
    namespace: &str,
    id: &str,
) -> Result<Vec<String>, EnvError> {
    remove_pods(
        config,
        namespace,
        &format!("{LABEL_BATCH}={}", label_value(id)),
    )
    .await
}

/// [`remove_kube_batch`] on the cluster and namespace `--engine kubernetes` uses (the
/// standard kubeconfig places, `RONDO_KUBE_NAMESPACE`); the number of pods deleted.
pub async fn reap_kube_batch(batch: &str) -> Result<usize, EnvError> {
    let config = kube_config().await?;
    let namespace = KubeOptions::from_env()?
        .namespace
        .unwrap_or_else(|| config.default_namespace.clone());
    Ok(remove_kube_batch(&config, &namespace, batch).await?.len())
}

/// A label value Kubernetes accepts (at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends) standing for `text`; the exact text goes in an annotation. A text that had to
/// change ends in a hash of it, so two texts cut to the same start (two batch folders
/// with a long common path) keep distinct labels.
fn label_value(text: &str) -> String {
    let plain = label_chars(text, 63);
    if plain == text && !plain.is_empty() {
        return plain;
    }
    let hash = hex::encode(&Sha256::digest(text.as_bytes())[..6]);
    match label_chars(text, 50).as_str() {
        "" => format!("h{hash}"),
        stem => format!("{stem}-{hash}"),
    }
}

/// The last `keep` characters of `text` (where they differ: the end of a path), with
/// what a label value cannot hold replaced and trimmed to alphanumerics at both ends.
fn label_chars(text: &str, keep: usize) -> String {
    let chars: Vec<char> = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let tail: String = chars[chars.len().saturating_sub(keep)..].iter().collect();
    tail.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// A fresh pod name: `rondo-<run id, DNS-safe>-<8 hex>`, at most 63 characters.
fn pod_name(run_id: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut hasher = Sha256::new();
    hasher.update(run_id.as_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(SEQ.fetch_add(1, Ordering::SeqCst).to_le_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.update(now.as_nanos().to_le_bytes());
    let suffix = hex::encode(&hasher.finalize()[..4]);
    let mut stem: String = run_id
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(44)
        .collect();
    while stem.ends_with('-') {
        stem.pop();
    }
    let stem = stem.trim_start_matches('-');
    if stem.is_empty() {
        format!("rondo-{suffix}")
    } else {
        format!("rondo-{stem}-{suffix}")
    }
}

/// `uid[:gid]` as numbers: a pod's security context takes no user names.
fn numeric_user(user: &str) -> Result<(i64, Option<i64>), EnvError> {
    let refuse = || {
        EnvError::InvalidRequest(format!(
            "user `{user}`: a Kubernetes pod runs as numeric ids (`uid` or `uid:gid`), not names"
        ))
    };
    let (uid, gid) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let uid: i64 = uid.trim().parse().map_err(|_| refuse())?;
    let gid = gid
        .map(|g| g.trim().parse::<i64>().map_err(|_| refuse()))
        .transpose()?;
    if uid < 0 || gid.is_some_and(|g| g < 0) {
        return Err(refuse());
    }
    Ok((uid, gid))
}

/// CPUs as a Kubernetes quantity: whole numbers as they are, others in millicores.
fn cpu_quantity(cpus: f64) -> String {
    let milli = (cpus * 1000.0).round().max(1.0) as i64;
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// The pod of a sandbox; see `docs/scale-kubernetes.md` for what each setting is for.
fn pod_manifest(name: &str, config: &DockerConfig, options: &KubeOptions) -> Result<Pod, EnvError> {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_RUN.to_string(), label_value(&config.run_id)),
        (LABEL_ROLE.to_string(), "run".to_string()),
    ]);
    if let Some(batch) = crate::docker::batch_label() {
        labels.insert(LABEL_BATCH.to_string(), label_value(batch));
    }
    if config.network.is_none() {
        labels.insert(LABEL_NETWORK.to_string(), "none".to_string());
    }
    if config.keep {
        labels.insert(LABEL_KEEP.to_string(), "true".to_string());
    }
    let mut caps = json!({ "drop": ["ALL"] });
    let add: Vec<&String> = config.cap_add.iter().filter(|c| !c.is_empty()).collect();
    if !add.is_empty() {
        caps["add"] = json!(add);
    }
    let mut security = json!({
        "allowPrivilegeEscalation": false,
        "privileged": false,
        "capabilities": caps,
        "readOnlyRootFilesystem": config.read_only_root,
    });
    if let Some(user) = &config.user {
        let (uid, gid) = numeric_user(user)?;
        security["runAsUser"] = json!(uid);
        security["runAsNonRoot"] = json!(uid != 0);
        if let Some(gid) = gid {
            security["runAsGroup"] = json!(gid);
        }
    }
    let memory = config
        .memory_bytes
        .unwrap_or(DEFAULT_MEMORY_BYTES)
        .to_string();
    let cpu = cpu_quantity(config.cpus.unwrap_or(DEFAULT_CPUS));
    let resources = json!({ "cpu": cpu, "memory": memory });
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    for (i, mask) in config.masks.iter().enumerate() {
        let volume = format!("mask-{i}");
        volumes.push(json!({ "name": volume, "emptyDir": { "sizeLimit": "4Ki" } }));
        mounts.push(json!({ "name": volume, "mountPath": mask, "readOnly": true }));
    }
    if config.read_only_root {
        volumes.push(
            json!({ "name": "tmp", "emptyDir": { "medium": "Memory", "sizeLimit": "512Mi" } }),
        );
        mounts.push(json!({ "name": "tmp", "mountPath": "/tmp" }));
    }
    let env: Vec<_> = config
        .env
        .iter()
        .map(|(k, v)| json!({ "name": k, "value": v }))
        .collect();
    let mut spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "hostNetwork": false,
        "hostPID": false,
        "hostIPC": false,
        "terminationGracePeriodSeconds": 1,
        "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } },
        "containers": [{
            "name": CONTAINER,
            "image": config.image,
            "command": ["sleep", "infinity"],
            "workingDir": config.workdir,
            "env": env,
            "securityContext": security,
            "resources": { "requests": resources, "limits": resources },
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    });
    if let Some(class) = &options.runtime_class {
        spec["runtimeClassName"] = json!(class);
    }
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": { "rondo.run_id": config.run_id },
        },
        "spec": spec,
    });
    serde_json::from_value(pod)
        .map_err(|e| EnvError::InvalidRequest(format!("building the pod manifest: {e}")))
}

/// The namespaces (of a cluster) this process has made sure hold [`NO_NETWORK_POLICY`].
fn policies_done() -> &'static Mutex<HashSet<String>> {
    static DONE: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    DONE.get_or_init(Mutex::default)
}

/// Makes sure `namespace` holds the policy that keeps pods labelled `rondo.network=none`
/// off the network; one that exists with other rules is an error, not overwritten.
async fn ensure_no_network_policy(
    client: &kube::Client,
    cluster: &str,
    namespace: &str,
    limit: Duration,
) -> Result<(), EnvError> {
    let key = format!("{cluster} {namespace}");
    if policies_done()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&key)
    {
        return Ok(());
    }
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    let wanted = json!({
        "podSelector": { "matchLabels": { LABEL_NETWORK: "none" } },
        "policyTypes": ["Ingress", "Egress"],
    });
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": { "name": NO_NETWORK_POLICY, "labels": { LABEL_MANAGED: "true" } },
        "spec": wanted,
    }))
    .map_err(|e| EnvError::InvalidRequest(format!("building the network policy: {e}")))?;
    let action = "creating the NetworkPolicy that keeps sandboxes off the network";
    match tokio::time::timeout(limit, api.create(&PostParams::default(), &policy)).await {
        Err(_) => {
            return Err(EnvError::Kubernetes(format!(
                "{action}: no answer from the API server within {} s",
                limit.as_secs_f64()
            )));
        }
        Ok(Ok(_)) => {}
        Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
            let found = deadline(
                limit,
                "reading the NetworkPolicy",
                api.get(NO_NETWORK_POLICY),
            )
            .await?;
            let spec = serde_json::to_value(found.spec).unwrap_or_default();
            if spec != wanted {
                return Err(EnvError::Kubernetes(format!(
                    "the NetworkPolicy {NO_NETWORK_POLICY} in namespace {namespace} is not \
                     rondo's (its spec is {spec}): sandboxes would not be kept off the network; \
                     delete it and run again"
                )));
            }
        }
        Ok(Err(e)) => return Err(EnvError::kube(action, e)),
    }
    policies_done()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key);
    Ok(())
}

/// Why a pod will not run, when it will never run as it is: an image that cannot be
/// pulled, a container that ended.
fn hopeless(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if let Some(phase @ ("Failed" | "Succeeded")) = status.phase.as_deref() {
        return Some(format!("the pod ended ({phase})"));
    }
    for c in status.container_statuses.iter().flatten() {
        let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = waiting.reason.as_deref().unwrap_or("");
        if matches!(
            reason,
            "ErrImagePull"
                | "ImagePullBackOff"
                | "InvalidImageName"
                | "ErrImageNeverPull"
                | "CreateContainerConfigError"
                | "CreateContainerError"
                | "RunContainerError"
        ) {
            let message = waiting.message.as_deref().unwrap_or("");
            return Some(format!("{reason}: {message}"));
        }
    }
    None
}

fn running(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == CONTAINER && c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// What the pod's status says while it is not running, for the error when it never does.
fn describe(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "no status yet".into();
    };
    let mut parts = vec![format!(
        "phase {}",
        status.phase.as_deref().unwrap_or("unknown")
    )];
    for c in status.conditions.iter().flatten() {
        if c.status != "True"
            && let Some(reason) = &c.reason
        {
            parts.push(format!(
                "{} {reason}: {}",
                c.type_,
                c.message.as_deref().unwrap_or("")
            ));
        }
    }
    for c in status.container_statuses.iter().flatten() {
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            parts.push(format!(
                "container waiting: {} {}",
                w.reason.as_deref().unwrap_or(""),
                w.message.as_deref().unwrap_or("")
            ));
        }
    }
    parts.join("; ")
}

/// Waits until the pod runs, through a watch from the version last seen; the error says
/// what the pod was doing when the time ran out or why it never will run.
async fn wait_running(pods: &Api<Pod>, name: &str, options: &KubeOptions) -> Result<(), EnvError> {
    let end = tokio::time::Instant::now() + options.start_timeout;
    let mut last: Option<Pod> = None;
    let never = |pod: &Option<Pod>, why: String| {
        let state = pod.as_ref().map(describe).unwrap_or_default();
        EnvError::Kubernetes(format!("pod {name} will not run: {why} ({state})"))
    };
    let watched = async {
        loop {
            let pod = deadline(options.call_timeout, "reading the pod", pods.get(name)).await?;
            if running(&pod) {
                return Ok(());
            }
            if let Some(why) = hopeless(&pod) {
                return Err(never(&Some(pod), why));
            }
            let version = pod.metadata.resource_version.clone().unwrap_or_default();
            last = Some(pod);
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            let params = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(left.as_secs().clamp(1, 290) as u32);
            let mut events =
                match tokio::time::timeout(options.call_timeout, pods.watch(&params, &version))
                    .await
                {
                    Ok(Ok(events)) => events.boxed(),
                    // A watch refused or unanswered: read the pod again.
                    _ => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
            while let Ok(Some(event)) = events.try_next().await {
                match event {
                    WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                        if running(&pod) {
                            return Ok(());
                        }
                        if let Some(why) = hopeless(&pod) {
                            return Err(never(&Some(pod), why));
                        }
                        last = Some(pod);
                    }
                    WatchEvent::Deleted(_) => {
                        return Err(never(&last, "it was deleted".into()));
                    }
                    WatchEvent::Bookmark(_) | WatchEvent::Error(_) => {}
                }
            }
        }
    };
    match tokio::time::timeout_at(end, watched).await {
        Ok(result) => result,
        Err(_) => {
            let state = match &last {
                Some(pod) => describe(pod),
                None => "never seen".into(),
            };
            Err(EnvError::Kubernetes(format!(
                "pod {name} did not become Running within {} s ({state}); it was deleted",
                options.start_timeout.as_secs_f64()
            )))
        }
    }
}

/// The exit code an exec's status reports; an error when it reports no exit (the
/// command could not start, or the API server refused it).
fn exit_code(status: &Status) -> Result<i64, String> {
    if status.status.as_deref() == Some("Success") {
        return Ok(0);
    }
    if status.reason.as_deref() == Some("NonZeroExitCode")
        && let Some(code) = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|causes| {
                causes
                    .iter()
                    .find(|c| c.reason.as_deref() == Some("ExitCode"))
            })
            .and_then(|c| c.message.as_deref())
            .and_then(|m| m.trim().parse().ok())
    {
        return Ok(code);
    }
    Err(status
        .message
        .clone()
        .unwrap_or_else(|| "the exec failed without a message".into()))
}

/// Reads `reader` to its end, refusing more than `limit` bytes.
async fn read_bounded(
    mut reader: impl AsyncRead + Unpin,
    limit: u64,
) -> Result<Vec<u8>, std::io::Error> {
    let mut data = Vec::new();
    (&mut reader).take(limit + 1).read_to_end(&mut data).await?;
    if data.len() as u64 > limit {
        return Err(std::io::Error::other(format!("more than {limit} bytes")));
    }
    Ok(data)
}

/// Checks an archive from a pod before any of it is written: every entry a plain file,
/// folder or symbolic link under the one top entry, no absolute name, no `..`, no link
/// that leads out of the copied tree, no hard link.
fn check_untrusted_tar(data: &[u8]) -> Result<(), EnvError> {
    let refuse = |name: &Path, why: &str| {
        EnvError::InvalidRequest(format!(
            "refusing archive entry {} from the pod: {why}",
            name.display()
        ))
    };
    let mut archive = tar::Archive::new(data);
    let entries = archive
        .entries()
        .map_err(|e| EnvError::InvalidRequest(format!("unreadable archive from the pod: {e}")))?;
    let mut top: Option<PathBuf> = None;
    for entry in entries {
        let entry = entry.map_err(|e| {
            EnvError::InvalidRequest(format!("unreadable archive from the pod: {e}"))
        })?;
        let name = entry
            .path()
            .map_err(|e| EnvError::InvalidRequest(format!("unreadable entry name: {e}")))?
            .into_owned();
        let parts: Vec<Component> = name
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect();
        if parts.is_empty() || parts.iter().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(refuse(&name, "not a plain relative name"));
        }
        let first = PathBuf::from(parts[0].as_os_str());
        match &top {
            None => top = Some(first),
            Some(t) if *t != first => return Err(refuse(&name, "outside the copied path")),
            Some(_) => {}
        }
        use tar::EntryType as T;
        match entry.header().entry_type() {
            T::Regular | T::Continuous | T::Directory | T::GNULongName => {}
            T::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| EnvError::InvalidRequest(format!("unreadable link: {e}")))?
                    .unwrap_or_default();
                // Resolved from the link's folder, the target may not climb above the
                // top entry (depth counts folders below it), and climbs only first: a
                // `..` after a name could start from wherever another link leads.
                let mut depth = parts.len() as i64 - 2;
                let mut named = false;
                for c in target.components() {
                    match c {
                        Component::Normal(_) => {
                            depth += 1;
                            named = true;
                        }
                        Component::ParentDir if named => {
                            return Err(refuse(&name, "a link with `..` after a name"));
                        }
                        Component::ParentDir => depth -= 1,
                        Component::CurDir => {}
                        Component::RootDir | Component::Prefix(_) => {
                            return Err(refuse(&name, "a link to an absolute path"));
                        }
                    }
                    if depth < 0 {
                        return Err(refuse(&name, "a link that leads out of the copied tree"));
                    }
                }
            }
            T::Link => return Err(refuse(&name, "a hard link")),
            other => {
                return Err(refuse(
                    &name,
                    &format!("an entry of kind {other:?} (only files, folders and links)"),
                ));
            }
        }
    }
    Ok(())
}

/// Copies into a folder of the pod: the archive comes on standard input, its length in
/// `$2`: `head -c` takes exactly that much, so the exec ends without its input being
/// closed (which the v4 channel protocol cannot say).
const COPY_IN_SCRIPT: &str = r#"mkdir -p -- "$1" && head -c "$2" | tar -x -f - -C "$1""#;

/// The runner of a pod, and how its exec ended once it has.
struct RunnerConn {
    runner: Arc<Runner>,
    /// `Some(true)`: the exec reported an exit (the runner died); `Some(false)`: the
    /// connection closed without one.
    ended: tokio::sync::watch::Receiver<Option<bool>>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    /// Kept for the connection: dropping it ends the exec.
    _process: kube::api::AttachedProcess,
}

impl RunnerConn {
    /// `None` while the exec goes on; see `ended`.
    fn ended(&self) -> Option<bool> {
        *self.ended.borrow()
    }

    /// How the exec ended, waiting a little for the news: `false` when the connection
    /// went without a word (or nothing came in time).
    async fn exited(&self) -> bool {
        let mut ended = self.ended.clone();
        let news = tokio::time::timeout(Duration::from_secs(5), ended.wait_for(Option::is_some));
        matches!(news.await, Ok(Ok(v)) if *v == Some(true))
    }

    fn stderr(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).trim().to_string()
    }
}

/// A command in flight: dropped before it ended (the run's time ran out mid-step), it is
/// cancelled, which kills its whole tree in the pod.
struct InFlight {
    cancel: Option<runner::Cancel>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(cancel.send());
        }
    }
}

/// A sandbox in a pod; see the module documentation. The pod is deleted on
/// [`Environment::shutdown`], on a failed start and (best effort) on drop, unless `keep`.
pub struct KubeEnv {
    client: kube::Client,
    /// For the deletion on drop, which needs a client of its own runtime.
    kube_config: kube::Config,
    namespace: String,
    pod: String,
    config: DockerConfig,
    options: KubeOptions,
    removed: AtomicBool,
    tools: InstalledTools,
    runner: tokio::sync::Mutex<Option<Arc<RunnerConn>>>,
    /// Shared by commands while they run; copies of the mounts happen under it too.
    gate: tokio::sync::RwLock<()>,
}

impl KubeEnv {
    /// Creates the pod, waits until it runs and starts its runner. `config` is the one
    /// every engine starts from; its mounts are always copied in and out (a pod is on
    /// another machine), its tools must already be in the image.
    pub async fn start(
        kube_config: kube::Config,
        config: DockerConfig,
        options: KubeOptions,
    ) -> Result<Self, EnvError> {
        if !config.tools.is_empty() {
            return Err(EnvError::InvalidRequest(
                "Kubernetes sandboxes install no tools: build them into the image (rondo \
                 builds tool images on the local Docker engine only)"
                    .into(),
            ));
        }
        if config.read_only_root && !config.mounts.is_empty() {
            return Err(EnvError::InvalidRequest(
                "copying mounts into a pod needs a writable root file system \
                 (read_only_root is set)"
                    .into(),
            ));
        }
        let namespace = options
            .namespace
            .clone()
            .unwrap_or_else(|| kube_config.default_namespace.clone());
        let client = client_of(&kube_config)?;
        let name = pod_name(&config.run_id);
        let manifest = pod_manifest(&name, &config, &options)?;
        if config.network.is_none() {
            let cluster = kube_config.cluster_url.to_string();
            ensure_no_network_policy(&client, &cluster, &namespace, options.call_timeout).await?;
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        deadline(
            options.call_timeout,
            "creating the sandbox pod",
            pods.create(&PostParams::default(), &manifest),
        )
        .await?;
        let env = KubeEnv {
            client,
            kube_config,
            namespace,
            pod: name,
            config,
            options,
            removed: AtomicBool::new(false),
            tools: InstalledTools::default(),
            runner: tokio::sync::Mutex::new(None),
            gate: tokio::sync::RwLock::new(()),
        };
        // From here a failure deletes the pod (shutdown, or Drop for `keep`-less envs).
        let started = async {
            wait_running(&env.pods(), &env.pod, &env.options).await?;
            env.live_runner().await.map(|_| ())
        }
        .await;
        if let Err(e) = started {
            let _ = env.delete_pod().await;
            env.removed.store(true, Ordering::SeqCst);
            return Err(e);
        }
        Ok(env)
    }

    /// The pod's name.
    pub fn pod_name(&self) -> &str {
        &self.pod
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn resolve(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{path}", self.config.workdir.trim_end_matches('/'))
        }
    }

    async fn delete_pod(&self) -> Result<(), EnvError> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::background()
        };
        let limit = self.options.call_timeout;
        match tokio::time::timeout(limit, self.pods().delete(&self.pod, &params)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if not_found(&e) => Ok(()),
            Ok(Err(e)) => Err(EnvError::kube(format!("deleting pod {}", self.pod), e)),
            Err(_) => Err(EnvError::Kubernetes(format!(
                "deleting pod {}: no answer within {} s",
                self.pod,
                limit.as_secs_f64()
            ))),
        }
    }

    /// The runner, started (again, if a command killed it or its connection dropped).
    async fn live_runner(&self) -> Result<Arc<RunnerConn>, EnvError> {
        let mut slot = self.runner.lock().await;
        // A connection that broke leaves the runner's stream open on this side.
        if let Some(conn) = &*slot
            && conn.runner.alive()
            && conn.ended().is_none()
        {
            return Ok(conn.clone());
        }
        *slot = None;
        let conn = Arc::new(self.start_runner().await?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn start_runner(&self) -> Result<RunnerConn, EnvError> {
        let params = AttachParams::default()
            .container(CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .max_stdout_buf_size(256 << 10);
        let mut process = deadline(
            self.options.call_timeout,
            "starting the command runner in the pod",
            self.pods().exec(&self.pod, runner::command(), &params),
        )
        .await?;
        let (Some(stdout), Some(stdin), Some(stderr), Some(status)) = (
            process.stdout(),
            process.stdin(),
            process.stderr(),
            process.take_status(),
        ) else {
            return Err(EnvError::Kubernetes(
                "the runner's exec has no standard streams".into(),
            ));
        };
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(keep_tail(stderr, stderr_tail.clone()));
        let (tell, ended) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            let _ = tell.send(Some(status.await.is_some()));
        });
        let started = tokio::time::timeout(
            self.options.call_timeout.max(Duration::from_secs(20)),
            Runner::over(stdout, stdin),
        )
        .await;
        let tail = || {
            let tail = stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
            String::from_utf8_lossy(&tail).trim().to_string()
        };
        match started {
            Ok(Ok(runner)) => Ok(RunnerConn {
                runner: Arc::new(runner),
                ended,
                stderr_tail: stderr_tail.clone(),
                _process: process,
            }),
            Ok(Err(e)) => Err(EnvError::Kubernetes(format!(
                "the command runner did not start in pod {} ({e}; the image needs python3){}",
                self.pod,
                if tail().is_empty() {
                    String::new()
                } else {
                    format!(": {}", tail())
                }
            ))),
            Err(_) => Err(EnvError::Kubernetes(format!(
                "the command runner in pod {} did not answer in time",
                self.pod
            ))),
        }
    }

    /// Runs a helper command to its end through an exec of its own, `input` on its
    /// standard input: its exit code and standard output (at most `limit` bytes).
    async fn exec_helper(
        &self,
        argv: Vec<String>,
        input: Option<Vec<u8>>,
        limit: u64,
        action: &str,
    ) -> Result<(i64, Vec<u8>, String), EnvError> {
        let params = AttachParams::default()
            .container(CONTAINER)
            .stdin(input.is_some())
            .stdout(true)
            .stderr(true)
            .max_stdout_buf_size(256 << 10)
            .max_stdin_buf_size(256 << 10);
        let run = async {
            let mut process = deadline(
                self.options.call_timeout,
                action,
                self.pods().exec(&self.pod, argv, &params),
            )
            .await?;
            let (Some(stdout), Some(stderr), Some(status)) =
                (process.stdout(), process.stderr(), process.take_status())
            else {
                return Err(EnvError::Kubernetes(format!("{action}: no output streams")));
            };
            let stdin = process.stdin();
            // The input stays open until the exec ends: closing it would close the
            // whole connection under the v4 protocol.
            let feed = async move {
                let mut stdin = stdin;
                if let (Some(w), Some(data)) = (stdin.as_mut(), input) {
                    w.write_all(&data).await?;
                    w.flush().await?;
                }
                Ok::<_, std::io::Error>(stdin)
            };
            let transfer = async {
                tokio::join!(
                    feed,
                    read_bounded(stdout, limit),
                    read_bounded(stderr, HELPER_STDERR)
                )
            };
            tokio::pin!(transfer);
            let mut status = Box::pin(status);
            let lost = || {
                EnvError::Kubernetes(format!(
                    "{action}: the exec connection closed before the command's exit"
                ))
            };
            // A broken connection ends the status without one, and leaves the output
            // streams open on this side: the status comes first.
            let ((fed, out, err), status) = tokio::select! {
                done = &mut transfer => (done, status.await),
                status = &mut status => match status {
                    None => return Err(lost()),
                    status => (transfer.await, status),
                },
            };
            let io = |e: std::io::Error| EnvError::Kubernetes(format!("{action}: {e}"));
            let _stdin = fed.map_err(io)?;
            let out = out.map_err(io)?;
            let err = String::from_utf8_lossy(&err.map_err(io)?).into_owned();
            let Some(status) = status else {
                return Err(lost());
            };
            let code =
                exit_code(&status).map_err(|m| EnvError::Kubernetes(format!("{action}: {m}")))?;
            drop(process);
            Ok((code, out, err))
        };
        match tokio::time::timeout(self.options.copy_timeout, run).await {
            Ok(result) => result,
            Err(_) => Err(EnvError::Kubernetes(format!(
                "{action}: not done within {} s",
                self.options.copy_timeout.as_secs_f64()
            ))),
        }
    }

    /// One command through the runner, the mounts already in place.
    async fn run_command(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        let argv: Vec<String> = match &req.command {
            Command::Argv(argv) => argv.clone(),
            Command::Shell(line) => {
                let mut v = self.config.shell.clone();
                v.push(line.clone());
                v
            }
        };
        let mut collector = Collector::new(&req, &req.command.to_string(), &self.config.redactor)?;
        let timeout = req.timeout.unwrap_or(self.config.default_timeout);
        let start = Instant::now();
        if argv
            .iter()
            .chain(req.env.values())
            .any(|a| a.len() >= MAX_ARG_LEN)
        {
            let program = argv.first().map_or("", String::as_str);
            return collector.too_long(program, &req.command, start.elapsed());
        }
        let conn = self.live_runner().await?;
        let request = runner::Request {
            argv,
            cwd: req
                .workdir
                .as_deref()
                .map(|d| self.resolve(d))
                .unwrap_or_else(|| self.config.workdir.clone()),
            env: req.env.clone().into_iter().collect(),
            timeout,
            grace: self.config.kill_grace,
            keep: req.keep_processes,
        };
        let (mut rx, cancel) = conn.runner.send(request).await?;
        let mut in_flight = InFlight {
            cancel: Some(cancel),
        };
        // The runner enforces the timeout; this is the backstop if it cannot.
        let backstop =
            tokio::time::sleep(timeout + self.config.kill_grace + Duration::from_secs(10));
        tokio::pin!(backstop);
        let mut ended = conn.ended.clone();
        let mut watching = true;
        loop {
            tokio::select! {
                // A broken connection does not end the runner's output stream here (the
                // client drops it without closing it): its end is the news.
                _ = ended.changed(), if watching => {
                    watching = false;
                    if conn.ended() == Some(false) {
                        in_flight.cancel = None;
                        return Err(self.lost(&req.command, &conn));
                    }
                }
                message = rx.recv() => match message {
                    Some(runner::Message::Output(kind, bytes)) => collector.push(kind, &bytes),
                    Some(runner::Message::Exit { code, timed_out }) => {
                        in_flight.cancel = None;
                        return collector.finish(Some(code), timed_out, start.elapsed());
                    }
                    None => {
                        in_flight.cancel = None;
                        if !conn.exited().await {
                            return Err(self.lost(&req.command, &conn));
                        }
                        // A command killed the runner: this command's tree went with it.
                        collector.push(StreamKind::Stderr, b"\n[rondo: the command runner in the pod was killed, and this command with it]\n");
                        return collector.finish(None, false, start.elapsed());
                    }
                },
                _ = &mut backstop => {
                    // Dropping the guard cancels the command.
                    drop(in_flight);
                    return collector.finish(None, true, start.elapsed());
                }
            }
        }
    }

    fn lost(&self, command: &Command, conn: &RunnerConn) -> EnvError {
        EnvError::Kubernetes(format!(
            "the exec connection to pod {} was lost while `{command}` ran{}",
            self.pod,
            match conn.stderr() {
                s if s.is_empty() => String::new(),
                s => format!(" (runner: {s})"),
            }
        ))
    }

    /// Best-effort synchronous deletion, usable from Drop even while the async runtime is
    /// shutting down: a fresh thread, runtime and client.
    fn delete_blocking(&self) {
        let (config, namespace, pod) = (
            self.kube_config.clone(),
            self.namespace.clone(),
            self.pod.clone(),
        );
        let limit = self.options.call_timeout;
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let Ok(client) = client_of(&config) else {
                    return;
                };
                let pods: Api<Pod> = Api::namespaced(client, &namespace);
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::background()
                };
                let _ = tokio::time::timeout(limit, pods.delete(&pod, &params)).await;
            });
        });
        let _ = handle.join();
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes `reader` gives until it ends.
async fn keep_tail(mut reader: impl AsyncRead + Unpin, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = reader.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(&buf[..n]);
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
    }
}

#[async_trait::async_trait]
impl Environment for KubeEnv {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, EnvError> {
        req.validate()?;
        if self.removed.load(Ordering::SeqCst) {
            return Err(EnvError::ShutDown);
        }
        let _running = self.gate.read().await;
        // A pod is on another machine: every mount is copied, whatever the transport.
        for m in &self.config.mounts {
            self.copy_in(&m.host, &m.container).await?;
        }
        let out = self.run_command(req).await?;
        for m in self.config.mounts.iter().filter(|m| m.writable) {
            self.copy_out(&m.container, &m.host).await?;
        }
        Ok(out)
    }

    async fn copy_in(&self, host_path: &Path, target: &str) -> Result<(), EnvError> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(EnvError::ShutDown);
        }
        let target = self.resolve(target);
        let trimmed = target.trim_end_matches('/');
        let (parent, name) = match trimmed.rsplit_once('/') {
            Some((p, n)) if !n.is_empty() && n != ".." && n != "." => {
                (if p.is_empty() { "/" } else { p }, n)
            }
            _ => {
                return Err(EnvError::InvalidRequest(format!(
                    "cannot copy onto `{target}`"
                )));
            }
        };
        let src = host_path.to_path_buf();
        let entry = name.to_string();
        let data = tokio::task::spawn_blocking(move || archive::tar_of(&src, &entry))
            .await
            .map_err(|e| EnvError::InvalidRequest(format!("archive task failed: {e}")))??;
        let argv = vec![
            "sh".to_string(),
            "-c".into(),
            COPY_IN_SCRIPT.into(),
            "rondo-copy-in".into(),
            parent.to_string(),
            data.len().to_string(),
        ];
        let action = format!(
            "copying {} to {target} in pod {}",
            host_path.display(),
            self.pod
        );
        let (code, _, err) = self
            .exec_helper(argv, Some(data), HELPER_STDERR, &action)
            .await?;
        if code != 0 {
            return Err(EnvError::Kubernetes(format!(
                "{action}: exit code {code}: {}",
                err.trim()
            )));
        }
        Ok(())
    }

    async fn copy_out(&self, source: &str, host_path: &Path) -> Result<(), EnvError> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(EnvError::ShutDown);
        }
        let source = self.resolve(source);
        let trimmed = source.trim_end_matches('/');
        let (parent, name) = match trimmed.rsplit_once('/') {
            Some((p, n)) if !n.is_empty() && n != ".." && n != "." => {
                (if p.is_empty() { "/" } else { p }, n)
            }
            _ => {
                return Err(EnvError::InvalidRequest(format!(
                    "cannot copy `{source}` out"
                )));
            }
        };
        let argv = vec![
            "tar".to_string(),
            "-c".into(),
            "-f".into(),
            "-".into(),
            "-C".into(),
            parent.to_string(),
            "--".into(),
            name.to_string(),
        ];
        let action = format!("copying {source} out of pod {}", self.pod);
        let (code, data, err) = self
            .exec_helper(argv, None, self.options.max_copy_bytes, &action)
            .await?;
        if code != 0 {
            return Err(EnvError::Kubernetes(format!(
                "{action}: exit code {code}: {}",
                err.trim()
            )));
        }
        let dest = host_path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            check_untrusted_tar(&data)?;
            archive::unpack_as(&data, &dest)
        })
        .await
        .map_err(|e| EnvError::InvalidRequest(format!("unpack task failed: {e}")))?
    }

    async fn shutdown(&self) -> Result<(), EnvError> {
        // Ends the runner's exec: what it still runs is killed with it.
        *self.runner.lock().await = None;
        if self.config.keep || self.removed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.delete_pod().await
    }

    fn tools(&self) -> &InstalledTools {
        &self.tools
    }
}

impl Drop for KubeEnv {
    fn drop(&mut self) {
        if !self.config.keep && !self.removed.swap(true, Ordering::SeqCst) {
            self.delete_blocking();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_label_values_are_what_kubernetes_accepts() {
        let name = pod_name("Run_2026/11:27 with spaces and a very long tail that goes on");
        assert!(name.len() <= 63, "{name}");
        assert!(name.starts_with("rondo-run-2026-11-27-with"), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(pod_name("a"), pod_name("a"));
        assert!(pod_name("///").starts_with("rondo-"));
        assert_eq!(label_value("run-1.x"), "run-1.x");
        assert!(label_value("run/1:x").starts_with("run_1_x-"));
        assert!(label_value("--a--").starts_with("a-"));
        assert!(label_value("///").starts_with('h'));
        assert_eq!(
            label_value(""),
            format!("h{}", &hex::encode(Sha256::digest(b""))[..12])
        );
        let long = |end: &str| format!("/work/{}/eval-out-{end}", "deep/".repeat(20));
        let (a, b) = (label_value(&long("1")), label_value(&long("2")));
        assert_ne!(a, b);
        for value in [&a, &b, &label_value(&"y".repeat(80))] {
            assert!(value.len() <= 63, "{value}");
            assert!(value.ends_with(|c: char| c.is_ascii_alphanumeric()));
            assert!(
                value.starts_with(|c: char| c.is_ascii_alphanumeric()),
                "{value}"
            );
        }
        assert!(a.contains("eval-out-1"), "{a}");
    }

    #[test]
    fn users_are_numeric_ids() {
        assert_eq!(numeric_user("1000").unwrap(), (1000, None));
        assert_eq!(numeric_user("1000:100").unwrap(), (1000, Some(100)));
        assert!(numeric_user("nobody").is_err());
        assert!(numeric_user("1:staff").is_err());
        assert!(numeric_user("-1").is_err());
    }

    #[test]
    fn cpu_quantities() {
        assert_eq!(cpu_quantity(2.0), "2");
        assert_eq!(cpu_quantity(0.5), "500m");
        assert_eq!(cpu_quantity(1.25), "1250m");
        assert_eq!(cpu_quantity(0.0), "1m");
    }

    fn tar_with(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn header(kind: tar::EntryType) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o644);
        h
    }

    #[test]
    fn archives_from_a_pod_stay_in_their_tree() {
        let good = tar_with(|b| {
            b.append_data(
                &mut header(tar::EntryType::Directory),
                "d",
                std::io::empty(),
            )
            .unwrap();
            b.append_link(&mut header(tar::EntryType::Symlink), "d/l", "x/y")
                .unwrap();
            b.append_link(&mut header(tar::EntryType::Symlink), "d/e/l", "../x")
                .unwrap();
        });
        check_untrusted_tar(&good).unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                tar_with(|b| {
                    b.append_link(&mut header(tar::EntryType::Symlink), "d/l", "/etc/passwd")
                        .unwrap()
                }),
                "absolute",
            ),
            (
                tar_with(|b| {
                    b.append_link(&mut header(tar::EntryType::Symlink), "d/l", "../../x")
                        .unwrap()
                }),
                "leads out",
            ),
            (
                tar_with(|b| {
                    b.append_link(&mut header(tar::EntryType::Symlink), "d/l", "e/../../x")
                        .unwrap()
                }),
                "after a name",
            ),
            (
                tar_with(|b| {
                    b.append_link(&mut header(tar::EntryType::Link), "d/l", "/etc/shadow")
                        .unwrap()
                }),
                "hard link",
            ),
            (
                tar_with(|b| {
                    b.append_data(&mut header(tar::EntryType::Fifo), "d/f", std::io::empty())
                        .unwrap()
                }),
                "kind",
            ),
            (
                tar_with(|b| {
                    b.append_data(
                        &mut header(tar::EntryType::Regular),
                        "d/a",
                        std::io::empty(),
                    )
                    .unwrap();
                    b.append_data(
                        &mut header(tar::EntryType::Regular),
                        "e/a",
                        std::io::empty(),
                    )
                    .unwrap();
                }),
                "outside the copied path",
            ),
        ];
        for (data, why) in cases {
            let err = check_untrusted_tar(&data).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
