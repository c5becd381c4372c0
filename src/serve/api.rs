//! The HTTP routes. Every error is JSON: `{"error": CODE, "message": TEXT}`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use super::error::ApiError;
use super::events::{Feeder, Hub};
use super::{LiveRun, Server};
use crate::check::Checked;
use crate::render;
use crate::run::bus::Subscriber;
use crate::run::events::{Entry, Event};
use crate::run::rundir::RunStatus;
use crate::run::state::Totals;
use crate::run::{Interpreter, RunOptions, StartError, progress, rundir};

/// Requests larger than this are refused before they are read whole.
const MAX_BODY: usize = 1024 * 1024;

/// The API's OpenAPI document, kept in the repository.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

pub(super) fn router(server: Arc<Server>, origins: &[String]) -> axum::Router {
    let cors = CorsLayer::new()
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::HeaderName::from_static("last-event-id"),
        ]);
    let cors = if origins.is_empty() {
        cors.allow_origin(Any)
    } else {
        cors.allow_origin(AllowOrigin::list(
            origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()),
        ))
    };
    axum::Router::new()
        .route("/openapi.json", get(openapi))
        .route("/runs", post(create_run).get(list_runs))
        .route("/runs/{id}", get(run_status))
        .route("/runs/{id}/events", get(super::events::stream))
        .route("/runs/{id}/cancel", post(cancel_run))
        .route("/runs/{id}/view", get(run_view))
        .route("/workflows", get(list_workflows))
        .route("/workflows/{name}/graph", get(graph))
        .route("/ask", post(ask))
        .route("/trace/{id}", get(trace))
        .route_layer(middleware::from_fn_with_state(
            server.clone(),
            require_token,
        ))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        // The viewer page holds no data: it asks the routes above, with the token.
        .route("/", get(viewer))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(cors)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(server)
}

async fn require_token(
    State(server): State<Arc<Server>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &server.token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
            let mut response = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this server needs `Authorization: Bearer <token>`",
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    next.run(request).await
}

/// Compares without stopping at the first difference, so timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The body as a JSON object, or the error a client can act on.
fn json_object(
    body: Result<Bytes, BytesRejection>,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the request body is over {MAX_BODY} bytes"),
            )
        } else {
            ApiError::bad("unreadable_body", e.body_text())
        }
    })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad(
            "malformed_json",
            "the body must be a JSON object",
        )),
        Err(e) => Err(ApiError::bad(
            "malformed_json",
            format!("the body is not JSON: {e}"),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewRun {
    workflow: String,
    #[serde(default)]
    inputs: serde_json::Map<String, Value>,
    provider: Option<String>,
}

async fn create_run(
    State(server): State<Arc<Server>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = json_object(body)?;
    let request: NewRun = serde_json::from_value(Value::Object(body))
        .map_err(|e| ApiError::bad("bad_request", e.to_string()))?;
    let workflow = server.workflow(&request.workflow)?;
    let id = launch(&server, workflow, request.inputs, request.provider, None).await?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/runs/{id}"))],
        Json(json!({"id": id, "status": "queued"})),
    )
        .into_response())
}

impl Server {
    fn workflow(&self, name: &str) -> Result<Arc<Checked>, ApiError> {
        self.workflows.get(name).cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_workflow",
                format!(
                    "no workflow `{name}`; this server runs: {}",
                    self.workflows
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
    }

    pub(super) fn run_dir(&self, id: &str) -> Result<PathBuf, ApiError> {
        rundir::check_run_id(id).map_err(|_| ApiError::unknown_run(id))?;
        let dir = self.runs_root.join(id);
        if dir.join("run.json").is_file() {
            Ok(dir)
        } else {
            Err(ApiError::unknown_run(id))
        }
    }
}

/// Starts a run (its records exist when this returns) and queues it for a permit. With
/// `done`, the run's outcome is sent there when it ends.
async fn launch(
    server: &Arc<Server>,
    workflow: Arc<Checked>,
    inputs: serde_json::Map<String, Value>,
    provider: Option<String>,
    done: Option<tokio::sync::oneshot::Sender<Asked>>,
) -> Result<String, ApiError> {
    let provider = admit(server, &workflow, provider)?;
    check_inputs(&workflow, &inputs, &server.runs_root)?;
    let options = RunOptions {
        runs_root: server.runs_root.clone(),
        inputs: inputs
            .iter()
            .map(|(k, v)| (k.clone(), crate::run::input_text(v)))
            .collect(),
        provider,
        progress: progress::Mode::Quiet,
        unconfined_tools: server.unconfined_tools,
        pool: server.pools.get(&workflow.name).cloned(),
        engine: server.engine,
        ..RunOptions::default()
    };
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let task = run_live(server.clone(), workflow, options, started_tx, done);
    server
        .tasks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .spawn(task);
    match started_rx.await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(e @ StartError::Input(_))) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "bad_inputs",
            e.to_string(),
        )),
        Ok(Err(e @ StartError::Setup(_))) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot_start",
            e.to_string(),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the run could not be started",
        )),
    }
}

/// Whether a new run is taken (not while stopping), and the provider it uses: the
/// request's, or the server's; one the workflow lacks is refused.
fn admit(
    server: &Server,
    workflow: &Checked,
    provider: Option<String>,
) -> Result<Option<String>, ApiError> {
    if server.stopping.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            "the server is stopping",
        ));
    }
    let provider = provider.or_else(|| server.provider.clone());
    if let Some(p) = &provider
        && !workflow.providers.iter().any(|x| x.name() == p)
    {
        return Err(ApiError::bad(
            "unknown_provider",
            format!(
                "no provider `{p}` in `{}`; it has: {}",
                workflow.name,
                workflow
                    .providers
                    .iter()
                    .map(|x| x.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(provider)
}

/// A run from its start to its end: known to the server as live (its events published
/// to the stream's hub) from the start, driven once a run slot is free.
async fn run_live(
    server: Arc<Server>,
    workflow: Arc<Checked>,
    options: RunOptions,
    started: tokio::sync::oneshot::Sender<Result<String, StartError>>,
    done: Option<tokio::sync::oneshot::Sender<Asked>>,
) {
    // An ask acknowledges nothing before its run's end: its start overlaps the first step.
    let begun = if done.is_some() {
        Interpreter::start_overlapped(&workflow, &options).await
    } else {
        Interpreter::start_committed(&workflow, &options).await
    };
    let (mut interp, state) = match begun {
        Ok(x) => x,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let id = state.run_id.clone();
    let (interrupt, wake) = interp.interrupter();
    let hub = Hub::new();
    interp.subscribe(Box::new(Feeder(hub.clone())));
    let trace = Arc::new(std::sync::Mutex::new(None));
    if done.is_some() {
        interp.subscribe(Box::new(TraceFile {
            name: format!("{id}.jsonl"),
            found: trace.clone(),
        }));
    }
    if let Ok(mut live) = server.live.lock() {
        live.insert(
            id.clone(),
            LiveRun {
                interrupt: interrupt.clone(),
                wake,
                started: false,
                hub: hub.clone(),
            },
        );
    }
    let _ = started.send(Ok(id.clone()));
    // Queued: a stop or a cancel before the permit still makes a clean, resumable end.
    let permit = tokio::select! {
        p = server.permits.clone().acquire_owned() => p.ok(),
        _ = server.stop.notified() => None,
    };
    if let Ok(mut live) = server.live.lock()
        && let Some(run) = live.get_mut(&id)
    {
        run.started = true;
    }
    if permit.is_none() || server.stopping.load(Ordering::SeqCst) {
        interrupt.store(true, Ordering::SeqCst);
    }
    let outcome =
        super::lost::drive_resuming(&server, &workflow, &options, &id, interp, state, &hub).await;
    drop(permit);
    if let Ok(mut live) = server.live.lock() {
        live.remove(&id);
    }
    hub.close();
    if let Some(done) = done {
        let trace = trace.lock().ok().and_then(|mut t| t.take());
        let _ = done.send(Asked { outcome, trace });
    }
}

/// How an ask's run ended, and where its trace record is.
struct Asked {
    outcome: crate::run::Outcome,
    trace: Option<TraceAt>,
}

/// Where a run wrote its `<id>.jsonl` artifact: the folder a `path` input names, else
/// the workspace; and the file's name there.
type TraceAt = (Option<PathBuf>, String);

/// Notes the last `<id>.jsonl` artifact a run writes as it publishes it: the ask's
/// answer then needs no second read of the journal.
struct TraceFile {
    name: String,
    found: Arc<std::sync::Mutex<Option<TraceAt>>>,
}

impl Subscriber for TraceFile {
    fn event(&mut self, entry: &Arc<Entry>) {
        if let Event::Artifact { file, folder, .. } = &entry.event
            && std::path::Path::new(file)
                .file_name()
                .is_some_and(|n| n == self.name.as_str())
            && let Ok(mut found) = self.found.lock()
        {
            *found = Some((folder.clone(), file.clone()));
        }
    }
}

/// Inputs of a request are JSON of the declared types (no text-to-number guessing), and a
/// `path` input names a place beneath the folder the server was started in, neither in
/// nor holding the server's run folder `runs_root` (other runs' records and workspaces).
fn check_inputs(
    workflow: &Checked,
    inputs: &serde_json::Map<String, Value>,
    runs_root: &std::path::Path,
) -> Result<(), ApiError> {
    for (name, value) in inputs {
        let Some(input) = workflow.inputs.iter().find(|i| &i.name == name) else {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_input",
                format!(
                    "`{}` has no input `{name}`; its inputs: {}",
                    workflow.name,
                    workflow
                        .inputs
                        .iter()
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if let Err(e) = input.ty.validate(value) {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "bad_input_type",
                format!("input `{name}` is {}: {e}", input.ty.display()),
            ));
        }
        if input.path
            && let Some(text) = value.as_str()
        {
            let path = std::path::Path::new(text);
            let climbs = path.components().any(|c| {
                !matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            });
            if climbs {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "path_outside",
                    format!(
                        "input `{name}` must be a relative path beneath the server's folder, without `..`"
                    ),
                ));
            }
            if names_the_runs(path, runs_root) {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "path_outside",
                    format!(
                        "input `{name}` names the server's run folder or a folder holding it: \
                         other runs' records and workspaces are not an input"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `path` (relative to the server's folder) is in `runs_root` or holds it, or is
/// in a `.rondo` system area, once its links are followed: a run's tool may plant a link
/// in its workspace, which is in `runs_root`.
fn names_the_runs(path: &std::path::Path, runs_root: &std::path::Path) -> bool {
    let Ok(here) = std::env::current_dir() else {
        return true;
    };
    let (Some(runs), Some(place)) = (
        real_place(&here.join(runs_root)),
        real_place(&here.join(path)),
    ) else {
        return true;
    };
    place.starts_with(&runs)
        || runs.starts_with(&place)
        || place
            .components()
            .any(|c| c.as_os_str() == rondo_workspace::SYSTEM_DIR)
}

/// `path` with its links followed as far as it exists, the rest appended as written.
fn real_place(path: &std::path::Path) -> Option<std::path::PathBuf> {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return Some(rest.iter().rev().fold(real, |p, c| p.join(c)));
        }
        rest.push(existing.file_name()?.to_os_string());
        existing = existing.parent()?;
    }
}

/// Where a run stands in this server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    No,
    Queued,
    Driven,
}

/// A run's record as the API shows it: a run this server drives with its running totals.
fn run_summary(dir: &std::path::Path, held: Held, live: Option<Totals>) -> Option<Value> {
    let mut info = rundir::read_info(dir).ok()?;
    let status = match held {
        Held::Queued => RunStatus::Queued,
        // Its sandbox was lost and the server resumes it (`lost.rs`).
        Held::Driven if info.status == RunStatus::Interrupted => RunStatus::Running,
        _ => info.status,
    };
    if let Some(totals) = live {
        info.totals = totals;
    }
    Some(json!({
        "id": info.run_id,
        "workflow": info.workflow,
        "status": status,
        "exit": info.exit,
        "exit_code": info.exit_code,
        "reason": info.reason,
        "started_at": info.started_at,
        "ended_at": info.ended_at,
        "totals": info.totals,
    }))
}

impl Server {
    /// Whether this server holds the run `id`: queued for a slot, or driving it (an
    /// `interrupted` in its record is then a lost sandbox being replaced, not its end).
    fn held(&self, id: &str) -> Held {
        let started = self
            .live
            .lock()
            .ok()
            .and_then(|l| l.get(id).map(|r| r.started));
        match started {
            None => Held::No,
            Some(false) => Held::Queued,
            Some(true) => Held::Driven,
        }
    }

    /// The running totals of a run this server drives, once it has taken a step.
    fn live_totals(&self, id: &str) -> Option<Totals> {
        self.hub(id).and_then(|h| h.totals())
    }
}

async fn list_runs(State(server): State<Arc<Server>>) -> Result<Json<Value>, ApiError> {
    let mut ids: Vec<String> = std::fs::read_dir(&server.runs_root)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort();
    let runs: Vec<Value> = ids
        .iter()
        .filter_map(|id| {
            run_summary(
                &server.runs_root.join(id),
                server.held(id),
                server.live_totals(id),
            )
        })
        .collect();
    Ok(Json(json!({"runs": runs})))
}

async fn run_status(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let dir = server.run_dir(&id)?;
    run_summary(&dir, server.held(&id), server.live_totals(&id))
        .map(Json)
        .ok_or_else(|| ApiError::unknown_run(&id))
}

async fn viewer() -> Response {
    axum::response::Html(crate::view::page(&Value::Null)).into_response()
}

/// What the viewer shows of a run: its record, graph and bounded journal.
async fn run_view(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
) -> Result<Json<crate::view::PageData>, ApiError> {
    let dir = server.run_dir(&id)?;
    let served = rundir::read_info(&dir).ok().and_then(|info| {
        server
            .workflows
            .get(&info.workflow)
            .filter(|w| w.source_hash == info.workflow_hash)
            .cloned()
    });
    // Reading the journal (and checking a workflow the server does not serve) blocks.
    let data = tokio::task::spawn_blocking(move || {
        let loaded;
        let workflow: Option<&crate::compile::Workflow> = match &served {
            Some(w) => Some(w),
            None => {
                loaded = crate::view::load_workflow(&dir);
                loaded.as_deref()
            }
        };
        crate::view::data(&dir, workflow)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    let mut data =
        data.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?;
    if server.held(&id) == Held::Queued {
        data.run.status = RunStatus::Queued;
    }
    if let Some(totals) = server.live_totals(&id) {
        data.run.totals = totals;
    }
    Ok(Json(data))
}

async fn cancel_run(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    server.run_dir(&id)?;
    let live = server
        .live
        .lock()
        .ok()
        .and_then(|l| l.get(&id).map(|r| (r.interrupt.clone(), r.wake.clone())));
    match live {
        Some((interrupt, wake)) => {
            interrupt.store(true, Ordering::SeqCst);
            wake.notify_waiters();
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"id": id, "status": "cancelling"})),
            )
                .into_response())
        }
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_running",
            format!("run `{id}` is not running in this server"),
        )),
    }
}

async fn list_workflows(State(server): State<Arc<Server>>) -> Json<Value> {
    let workflows: Vec<Value> = server
        .workflows
        .values()
        .map(|w| {
            json!({
                "name": w.name,
                "description": w.description,
                "inputs": w.inputs.iter().map(|i| i.name.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(json!({"workflows": workflows, "ask": server.ask}))
}

#[derive(Deserialize)]
struct GraphQuery {
    format: Option<String>,
}

async fn graph(
    State(server): State<Arc<Server>>,
    Path(name): Path<String>,
    Query(query): Query<GraphQuery>,
) -> Result<Response, ApiError> {
    let workflow = server.workflow(&name)?;
    let (format, content_type) = match query.format.as_deref().unwrap_or("dot") {
        "dot" => (render::Format::Dot, "text/vnd.graphviz"),
        "mermaid" => (render::Format::Mermaid, "text/plain; charset=utf-8"),
        "svg" => (render::Format::Svg, "image/svg+xml"),
        other => {
            return Err(ApiError::bad(
                "bad_format",
                format!("format `{other}` is not one of dot, mermaid, svg"),
            ));
        }
    };
    let text = render::render(&workflow, format)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "render_failed", e))?;
    Ok(([(header::CONTENT_TYPE, content_type)], text).into_response())
}

/// micro-agent's `POST /ask`: `{"question": ..., other inputs}` runs the ask workflow and
/// answers when it ends.
async fn ask(
    State(server): State<Arc<Server>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let inputs = json_object(body)?;
    if !inputs.get("question").is_some_and(Value::is_string) {
        return Err(ApiError::bad(
            "missing_question",
            "the body needs `question`, a string",
        ));
    }
    let workflow = server.workflow(&server.ask)?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let id = launch(&server, workflow.clone(), inputs, None, Some(done_tx)).await?;
    let Asked { outcome, trace } = done_rx.await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the run was lost",
        )
    })?;
    let record = trace.and_then(|at| read_trace(at, &outcome.workspace));
    // The workflow's declared `answer = EXPR` (else its last role's output), as `rondo eval`
    // scores it.
    let answer = crate::eval::answer(&workflow, &outcome.state, &outcome.workspace);
    let steps = record
        .as_ref()
        .and_then(|r| r.get("steps").cloned())
        .unwrap_or_else(|| json!(outcome.state.path));
    Ok(Json(json!({
        "id": id,
        "exit": outcome.exit,
        "exit_code": outcome.exit_code,
        "answer": answer,
        "steps": steps,
        "usage": outcome.state.totals,
    }))
    .into_response())
}

/// The record a workflow wrote for a run into a `<id>.jsonl` artifact (micro-agent's
/// `traces/<id>.jsonl`): the last line of the last such file the journal names.
fn trace_record(run_dir: &std::path::Path, workspace: &std::path::Path, id: &str) -> Option<Value> {
    let name = format!("{id}.jsonl");
    let at = rundir::read_journal(run_dir)
        .ok()?
        .entries
        .into_iter()
        .rev()
        .filter_map(|e| match e.event {
            Event::Artifact { file, folder, .. } => Some((folder, file)),
            _ => None,
        })
        .find(|(_, f)| {
            std::path::Path::new(f)
                .file_name()
                .is_some_and(|n| n == name.as_str())
        })?;
    read_trace(at, workspace)
}

/// The last line of the trace file at `at`, as JSON.
fn read_trace((folder, file): TraceAt, workspace: &std::path::Path) -> Option<Value> {
    // A file in a `path` input's folder (micro-agent's TRACES_DIR), else in the workspace.
    let path = folder
        .unwrap_or_else(|| workspace.to_path_buf())
        .join(&file);
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    serde_json::from_str(line).ok()
}

async fn trace(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let dir = server.run_dir(&id)?;
    let info = rundir::read_info(&dir).map_err(|_| ApiError::unknown_run(&id))?;
    let workspace = rundir::Layout::of(&dir, &info).workspace;
    trace_record(&dir, &workspace, &id)
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_trace",
                format!("run `{id}` wrote no trace record (traces/{id}.jsonl)"),
            )
        })
}
