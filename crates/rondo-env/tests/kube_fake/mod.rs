//! A fake Kubernetes API server for `KubeEnv`'s tests. It speaks the API for exactly the
//! calls `KubeEnv` makes (create, get and watch a pod, exec into it over a websocket with
//! the `v4.channel.k8s.io` channel protocol, delete it or pods by label, create and read a
//! NetworkPolicy), refuses what a careful cluster would (a pod without the hardening, an
//! exec of anything but the runner or the copy commands, a pod of a sandbox without
//! network created before its NetworkPolicy), and backs each pod by real local processes:
//! an exec starts its command on this machine, so commands really run.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc};
use tokio::task::AbortHandle;

pub const NAMESPACE: &str = "rondo-test";
pub const RUNNER: &str = include_str!("../../src/runner.py");
const POLICY: &str = "rondo-sandbox-no-network";
const TIME: &str = "2026-11-27T09:00:00Z";

/// How the fake cluster behaves.
#[derive(Clone, Default)]
pub struct Behaviour {
    /// Between a pod's creation and its running.
    pub start_delay: Duration,
    /// Pods of these images never run: `Some(reason)` leaves the container waiting for
    /// that reason (an image pull that fails), `None` leaves the pod unschedulable.
    pub never: HashMap<String, Option<String>>,
    /// Sent instead of the archive a `tar -c` exec would make: a hostile pod.
    pub hostile_tar: Option<Vec<u8>>,
}

#[derive(Default)]
pub struct Recorded {
    /// Every pod body received, as sent.
    pub created: Vec<Value>,
    pub deleted: Vec<String>,
    pub policies: Vec<Value>,
    /// The command of every exec accepted.
    pub execs: Vec<Vec<String>>,
    /// What the fake refused, and why: a test expects none unless it provokes one.
    pub refused: Vec<String>,
    /// Label selectors of deletions by label.
    pub selectors: Vec<String>,
    /// The pods deleted by label (also in `deleted`).
    pub deleted_by_label: Vec<String>,
}

struct FakePod {
    object: Value,
    /// The exec connections into the pod, aborted when it goes.
    tasks: Vec<AbortHandle>,
}

struct Inner {
    behaviour: Behaviour,
    pods: Mutex<BTreeMap<String, FakePod>>,
    recorded: Mutex<Recorded>,
    version: Mutex<u64>,
    /// Every change of a pod: `(type, object)`.
    events: broadcast::Sender<(String, Value)>,
}

type Shared = Arc<Inner>;

pub struct FakeKube {
    pub url: String,
    inner: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.server.abort();
        let mut pods = self.inner.pods.lock().unwrap();
        for pod in pods.values() {
            for task in &pod.tasks {
                task.abort();
            }
        }
        pods.clear();
    }
}

impl FakeKube {
    pub async fn start(behaviour: Behaviour) -> FakeKube {
        let (events, _) = broadcast::channel(256);
        let inner = Arc::new(Inner {
            behaviour,
            pods: Mutex::default(),
            recorded: Mutex::default(),
            version: Mutex::new(100),
            events,
        });
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{ns}/pods",
                get(list_or_watch).post(create_pod).delete(delete_by_label),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(get_pod).delete(delete_pod),
            )
            .route("/api/v1/namespaces/{ns}/pods/{name}/exec", get(exec))
            .route(
                "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
                axum::routing::post(create_policy),
            )
            .route(
                "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}",
                get(get_policy),
            )
            .fallback(unexpected)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // As the API server (Go) does on every connection.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeKube { url, inner, server }
    }

    /// A client configuration for this server, namespace [`NAMESPACE`].
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_namespace = NAMESPACE.to_string();
        config
    }

    pub fn recorded<T>(&self, f: impl FnOnce(&Recorded) -> T) -> T {
        f(&self.inner.recorded.lock().unwrap())
    }

    /// The names of the pods that exist.
    pub fn pods(&self) -> Vec<String> {
        self.inner.pods.lock().unwrap().keys().cloned().collect()
    }

    /// Breaks every exec connection off at once, as a network failure would: no close
    /// message, no exit status. Their processes are killed.
    pub fn drop_connections(&self) {
        let mut pods = self.inner.pods.lock().unwrap();
        for pod in pods.values_mut() {
            for task in pod.tasks.drain(..) {
                task.abort();
            }
        }
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok_json(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn refuse(inner: &Inner, code: u16, reason: &str, why: String) -> Response {
    inner.recorded.lock().unwrap().refused.push(why.clone());
    status(code, reason, &why)
}

async fn unexpected(State(inner): State<Shared>, req: axum::extract::Request) -> Response {
    let why = format!("unexpected call {} {}", req.method(), req.uri());
    refuse(&inner, 404, "NotFound", why)
}

fn wrong_namespace(inner: &Inner, ns: &str) -> Option<Response> {
    (ns != NAMESPACE).then(|| {
        refuse(
            inner,
            403,
            "Forbidden",
            format!("namespace {ns} is not {NAMESPACE}"),
        )
    })
}

fn query_pairs(query: &Option<String>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn query_get(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn label_value_ok(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && (value.is_empty()
            || (value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

fn quantity_ok(q: &Value) -> bool {
    q.as_str().is_some_and(|s| {
        let digits = s.strip_suffix('m').unwrap_or(s);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    })
}

/// What a careful cluster (admission policies of the restricted kind, plus rondo's own
/// rules) would refuse in a sandbox pod.
fn check_pod(pod: &Value, policy_exists: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let mut want = |ok: bool, what: &str| {
        if !ok {
            problems.push(what.to_string());
        }
    };
    want(
        pod["apiVersion"] == "v1" && pod["kind"] == "Pod",
        "apiVersion v1, kind Pod",
    );
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    want(dns_label(name), "metadata.name a DNS-1123 label");
    let labels = &pod["metadata"]["labels"];
    want(
        labels["rondo.managed"] == "true",
        "label rondo.managed=true",
    );
    want(labels["rondo.role"] == "run", "label rondo.role=run");
    want(
        labels["rondo.run_id"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "label rondo.run_id",
    );
    for (key, value) in labels.as_object().into_iter().flatten() {
        want(
            value.as_str().is_some_and(label_value_ok),
            &format!("label {key} a valid label value"),
        );
    }
    if labels["rondo.network"] == "none" {
        want(
            policy_exists,
            "the NetworkPolicy before a pod without network",
        );
    }
    let spec = &pod["spec"];
    want(spec["restartPolicy"] == "Never", "spec.restartPolicy Never");
    want(
        spec["automountServiceAccountToken"] == false,
        "spec.automountServiceAccountToken false",
    );
    want(
        spec["enableServiceLinks"] == false,
        "spec.enableServiceLinks false",
    );
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        want(spec[host] != true, &format!("spec.{host} not true"));
    }
    want(
        spec["serviceAccountName"].is_null() && spec["nodeName"].is_null(),
        "no service account or node chosen",
    );
    want(
        spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault",
        "pod seccompProfile RuntimeDefault",
    );
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let keys: Vec<&String> = volume.as_object().unwrap().keys().collect();
        want(
            keys.iter().all(|k| *k == "name" || *k == "emptyDir"),
            "only emptyDir volumes",
        );
    }
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    want(containers.len() == 1, "exactly one container");
    want(spec["initContainers"].is_null(), "no init containers");
    let Some(c) = containers.first() else {
        return problems;
    };
    want(c["name"] == "sandbox", "container named sandbox");
    want(
        c["command"] == json!(["sleep", "infinity"]),
        "container command sleep infinity",
    );
    want(
        c["image"].as_str().is_some_and(|i| !i.is_empty()),
        "an image",
    );
    let sc = &c["securityContext"];
    want(
        sc["allowPrivilegeEscalation"] == false,
        "allowPrivilegeEscalation false",
    );
    want(sc["privileged"] != true, "not privileged");
    want(
        sc["capabilities"]["drop"] == json!(["ALL"]),
        "capabilities drop ALL",
    );
    want(
        sc["readOnlyRootFilesystem"].is_boolean(),
        "readOnlyRootFilesystem said",
    );
    if sc["runAsUser"].as_i64().is_some_and(|u| u != 0) {
        want(
            sc["runAsNonRoot"] == true,
            "runAsNonRoot with a non-root user",
        );
    }
    let res = &c["resources"];
    want(
        res["requests"] == res["limits"],
        "resource requests equal to limits",
    );
    want(
        quantity_ok(&res["limits"]["cpu"]) && quantity_ok(&res["limits"]["memory"]),
        "cpu and memory limits",
    );
    problems
}

fn next_version(inner: &Inner) -> String {
    let mut v = inner.version.lock().unwrap();
    *v += 1;
    v.to_string()
}

/// Sets a pod's status (bumping its version) and tells the watchers.
fn set_status(inner: &Inner, name: &str, status: Value) {
    let object = {
        let mut pods = inner.pods.lock().unwrap();
        let Some(pod) = pods.get_mut(name) else {
            return;
        };
        pod.object["status"] = status;
        pod.object["metadata"]["resourceVersion"] = json!(next_version(inner));
        pod.object.clone()
    };
    let _ = inner.events.send(("MODIFIED".into(), object));
}

async fn create_pod(State(inner): State<Shared>, Path(ns): Path<String>, body: Bytes) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    let Ok(mut pod) = serde_json::from_slice::<Value>(&body) else {
        return refuse(
            &inner,
            400,
            "BadRequest",
            "a pod body that is not JSON".into(),
        );
    };
    inner.recorded.lock().unwrap().created.push(pod.clone());
    let policy_exists = inner
        .recorded
        .lock()
        .unwrap()
        .policies
        .iter()
        .any(|p| p["metadata"]["name"] == POLICY);
    let problems = check_pod(&pod, policy_exists);
    if !problems.is_empty() {
        let why = format!("pod refused: {}", problems.join("; "));
        return refuse(&inner, 422, "Invalid", why);
    }
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    if inner.pods.lock().unwrap().contains_key(&name) {
        return status(
            409,
            "AlreadyExists",
            &format!("pods \"{name}\" already exists"),
        );
    }
    pod["metadata"]["namespace"] = json!(NAMESPACE);
    pod["metadata"]["uid"] = json!(format!("uid-{name}"));
    pod["metadata"]["creationTimestamp"] = json!(TIME);
    pod["metadata"]["resourceVersion"] = json!(next_version(&inner));
    pod["status"] = json!({ "phase": "Pending" });
    inner.pods.lock().unwrap().insert(
        name.clone(),
        FakePod {
            object: pod.clone(),
            tasks: Vec::new(),
        },
    );
    let image = pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let later = inner.clone();
    tokio::spawn(async move {
        tokio::time::sleep(later.behaviour.start_delay).await;
        let status = match later.behaviour.never.get(&image) {
            Some(Some(reason)) => json!({
                "phase": "Pending",
                "containerStatuses": [{
                    "name": "sandbox", "image": image, "imageID": "", "ready": false,
                    "restartCount": 0,
                    "state": { "waiting": { "reason": reason,
                        "message": format!("Back-off pulling image \"{image}\"") } },
                }],
            }),
            Some(None) => json!({
                "phase": "Pending",
                "conditions": [{ "type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient cpu." }],
            }),
            None => json!({
                "phase": "Running",
                "startTime": TIME,
                "containerStatuses": [{
                    "name": "sandbox", "image": image, "imageID": "", "ready": true,
                    "restartCount": 0, "started": true,
                    "state": { "running": { "startedAt": TIME } },
                }],
            }),
        };
        set_status(&later, &name, status);
    });
    ok_json(StatusCode::CREATED, &pod)
}

async fn get_pod(
    State(inner): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    match inner.pods.lock().unwrap().get(&name) {
        Some(pod) => ok_json(StatusCode::OK, &pod.object),
        None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

/// Only watches of one pod by name are used.
async fn list_or_watch(
    State(inner): State<Shared>,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    let pairs = query_pairs(&query);
    let name = query_get(&pairs, "fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_string));
    let (Some("true"), Some(name)) = (query_get(&pairs, "watch").as_deref(), name) else {
        return refuse(
            &inner,
            400,
            "BadRequest",
            format!("unexpected list {query:?}"),
        );
    };
    let since: u64 = query_get(&pairs, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let limit: u64 = query_get(&pairs, "timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(290);
    let mut events = inner.events.subscribe();
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let current = inner
        .pods
        .lock()
        .unwrap()
        .get(&name)
        .map(|p| p.object.clone());
    tokio::spawn(async move {
        let line = |kind: &str, object: &Value| {
            Bytes::from(json!({ "type": kind, "object": object }).to_string() + "\n")
        };
        if let Some(pod) = &current {
            let version: u64 = pod["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if version > since && tx.send(line("MODIFIED", pod)).await.is_err() {
                return;
            }
        }
        let end = tokio::time::sleep(Duration::from_secs(limit));
        tokio::pin!(end);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok((kind, object)) if object["metadata"]["name"] == name.as_str() => {
                        if tx.send(line(&kind, &object)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return,
                },
                _ = &mut end => return,
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Removes a pod: its exec connections break and their processes are killed.
fn remove(inner: &Inner, name: &str) -> Option<Value> {
    let pod = inner.pods.lock().unwrap().remove(name)?;
    for task in &pod.tasks {
        task.abort();
    }
    inner
        .recorded
        .lock()
        .unwrap()
        .deleted
        .push(name.to_string());
    let _ = inner.events.send(("DELETED".into(), pod.object.clone()));
    Some(pod.object)
}

async fn delete_pod(
    State(inner): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    match remove(&inner, &name) {
        Some(object) => ok_json(StatusCode::OK, &object),
        None => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn delete_by_label(
    State(inner): State<Shared>,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    let pairs = query_pairs(&query);
    let Some(selector) = query_get(&pairs, "labelSelector") else {
        return refuse(
            &inner,
            400,
            "BadRequest",
            "a deletion of every pod, without a label selector".into(),
        );
    };
    inner
        .recorded
        .lock()
        .unwrap()
        .selectors
        .push(selector.clone());
    let wanted: Vec<(String, String)> = selector
        .split(',')
        .filter_map(|term| term.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let names: Vec<String> = inner
        .pods
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, pod)| {
            wanted
                .iter()
                .all(|(k, v)| pod.object["metadata"]["labels"][k] == v.as_str())
        })
        .map(|(name, _)| name.clone())
        .collect();
    let items: Vec<Value> = names.iter().filter_map(|n| remove(&inner, n)).collect();
    inner.recorded.lock().unwrap().deleted_by_label.extend(
        items
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str().map(String::from)),
    );
    ok_json(
        StatusCode::OK,
        &json!({ "apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items }),
    )
}

async fn create_policy(
    State(inner): State<Shared>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    let Ok(mut policy) = serde_json::from_slice::<Value>(&body) else {
        return refuse(
            &inner,
            400,
            "BadRequest",
            "a policy that is not JSON".into(),
        );
    };
    let wanted = json!({
        "podSelector": { "matchLabels": { "rondo.network": "none" } },
        "policyTypes": ["Ingress", "Egress"],
    });
    if policy["spec"] != wanted || policy["metadata"]["name"] != POLICY {
        let why = format!("a network policy that does not deny all: {policy}");
        return refuse(&inner, 422, "Invalid", why);
    }
    let mut recorded = inner.recorded.lock().unwrap();
    if recorded
        .policies
        .iter()
        .any(|p| p["metadata"]["name"] == POLICY)
    {
        return status(
            409,
            "AlreadyExists",
            &format!("networkpolicies.networking.k8s.io \"{POLICY}\" already exists"),
        );
    }
    policy["metadata"]["namespace"] = json!(NAMESPACE);
    policy["metadata"]["resourceVersion"] = json!(next_version(&inner));
    recorded.policies.push(policy.clone());
    ok_json(StatusCode::CREATED, &policy)
}

async fn get_policy(
    State(inner): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    let recorded = inner.recorded.lock().unwrap();
    match recorded
        .policies
        .iter()
        .find(|p| p["metadata"]["name"] == name.as_str())
    {
        Some(p) => ok_json(StatusCode::OK, p),
        None => status(
            404,
            "NotFound",
            &format!("networkpolicies \"{name}\" not found"),
        ),
    }
}

/// The commands `KubeEnv` may exec, and whether each takes standard input.
fn allowed_exec(command: &[String]) -> Option<bool> {
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["python3", "-I", "-S", "-u", "-c", script] if *script == RUNNER => Some(true),
        ["sh", "-c", script, "rondo-copy-in", dir, len]
            if script.contains("head -c \"$2\" | tar -x")
                && dir.starts_with('/')
                && len.parse::<u64>().is_ok() =>
        {
            Some(true)
        }
        ["tar", "-c", "-f", "-", "-C", dir, "--", name]
            if dir.starts_with('/') && !name.contains('/') =>
        {
            Some(false)
        }
        _ => None,
    }
}

async fn exec(
    State(inner): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    if let Some(r) = wrong_namespace(&inner, &ns) {
        return r;
    }
    let pairs = query_pairs(&query);
    let command: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let flag = |key: &str| query_get(&pairs, key).as_deref() == Some("true");
    let Some(stdin) = allowed_exec(&command) else {
        let shown: Vec<String> = command
            .iter()
            .map(|c| c.chars().take(80).collect())
            .collect();
        return refuse(&inner, 403, "Forbidden", format!("exec of {shown:?}"));
    };
    if query_get(&pairs, "container").as_deref() != Some("sandbox")
        || flag("tty")
        || !flag("stdout")
        || flag("stdin") != stdin
    {
        return refuse(
            &inner,
            400,
            "BadRequest",
            format!("exec parameters {pairs:?}"),
        );
    }
    let offered = headers
        .get("sec-websocket-protocol")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !offered.split(',').any(|p| p.trim() == "v4.channel.k8s.io") {
        return refuse(&inner, 400, "BadRequest", format!("protocols {offered:?}"));
    }
    let (workdir, env) = {
        let pods = inner.pods.lock().unwrap();
        let Some(pod) = pods.get(&name) else {
            return status(404, "NotFound", &format!("pods \"{name}\" not found"));
        };
        if pod.object["status"]["phase"] != "Running" {
            let why = format!("exec into pod {name}, which is not running");
            drop(pods);
            return refuse(&inner, 400, "BadRequest", why);
        }
        let c = &pod.object["spec"]["containers"][0];
        let env: Vec<(String, String)> = c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or("").to_string(),
                    e["value"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        (c["workingDir"].as_str().unwrap_or("/").to_string(), env)
    };
    inner.recorded.lock().unwrap().execs.push(command.clone());
    let hostile = if command[0] == "tar" {
        inner.behaviour.hostile_tar.clone()
    } else {
        None
    };
    upgrade
        .protocols(["v4.channel.k8s.io"])
        .on_upgrade(move |socket| async move {
            let task = tokio::spawn(serve_exec(socket, command, workdir, env, hostile));
            match inner.pods.lock().unwrap().get_mut(&name) {
                Some(pod) => pod.tasks.push(task.abort_handle()),
                None => task.abort(),
            }
            let _ = task.await;
        })
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

/// The status a kubelet sends on channel 3 when an exec's process ends.
fn exit_status(code: i32) -> Value {
    if code == 0 {
        return json!({ "metadata": {}, "status": "Success" });
    }
    json!({
        "metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: exit status {code}"),
        "reason": "NonZeroExitCode",
        "details": { "causes": [{ "reason": "ExitCode", "message": code.to_string() }] },
    })
}

/// One exec: the command runs here, channel 0 feeds its input, 1 and 2 carry its output,
/// 3 its exit; a connection that goes kills it.
async fn serve_exec(
    socket: WebSocket,
    command: Vec<String>,
    workdir: String,
    env: Vec<(String, String)>,
    hostile: Option<Vec<u8>>,
) {
    let (mut tx, mut rx) = socket.split();
    // A v4 server first opens each channel with an empty frame.
    for channel in [1u8, 2] {
        if tx.send(frame(channel, &[])).await.is_err() {
            return;
        }
    }
    if let Some(data) = hostile {
        for chunk in data.chunks(32 << 10) {
            let _ = tx.send(frame(1, chunk)).await;
        }
        let _ = tx
            .send(frame(3, exit_status(0).to_string().as_bytes()))
            .await;
        let _ = tx.close().await;
        return;
    }
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .current_dir(&workdir)
        .envs(env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            let failure = json!({ "metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": format!("failed to exec in container: {e}") });
            let _ = tx.send(frame(3, failure.to_string().as_bytes())).await;
            return;
        }
    };
    let mut stdin = child.stdin.take();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(16);
    for (channel, mut reader) in [
        (
            1u8,
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
        ),
        (2u8, Box::new(child.stderr.take().unwrap())),
    ] {
        let out_tx = out_tx.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n) = reader.read(&mut buf).await {
                if n == 0 || out_tx.send(frame(channel, &buf[..n])).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(out_tx);
    let mut outputs_open = true;
    let code = loop {
        tokio::select! {
            message = rx.next() => match message {
                Some(Ok(Message::Binary(b))) if b.first() == Some(&0) => {
                    if let Some(w) = stdin.as_mut()
                        && w.write_all(&b[1..]).await.is_err()
                    {
                        stdin = None;
                    }
                }
                Some(Ok(Message::Binary(b))) if b[..] == [255, 0] => stdin = None,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            out = out_rx.recv(), if outputs_open => match out {
                Some(m) => if tx.send(m).await.is_err() { return },
                None => outputs_open = false,
            },
            exit = child.wait(), if !outputs_open => {
                let status = exit.ok();
                use std::os::unix::process::ExitStatusExt;
                break status
                    .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)))
                    .unwrap_or(137);
            }
        }
    };
    let _ = tx
        .send(frame(3, exit_status(code).to_string().as_bytes()))
        .await;
    let _ = tx.close().await;
}
