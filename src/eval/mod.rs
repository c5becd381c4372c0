//! `rondo eval`: one run per dataset case, in parallel, each scored against its
//! expectations; micro-agent's metrics over the whole. A results folder holds `eval.json`
//! (how it was started, for `--resume`), `runs/` (every run, as `rondo run` makes it),
//! `cases.jsonl` (one result a case) and `summary.json` (the metrics).

pub mod batch;
pub mod dataset;
pub mod optimize;
pub mod swebench;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use petgraph::graph::NodeIndex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use crate::check::Checked;
use crate::run::bus::Subscriber;
use crate::run::eval::Env;
use crate::run::events::{Entry, Event};
use crate::run::rundir::RunStatus;
use crate::run::state::RunState;
use crate::run::value::truthy;
use crate::run::{Interpreter, RunOptions, progress, rundir};
pub use dataset::{Case, Rubrics, Weights};

/// How an eval was started: written to `DIR/eval.json`, read back by `--resume DIR`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setup {
    pub workflow: PathBuf,
    pub dataset: PathBuf,
    #[serde(default)]
    pub rubrics: Option<PathBuf>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub script: Option<PathBuf>,
    pub concurrency: usize,
    /// `--engine`: where the runs' Docker environments run.
    #[serde(default)]
    pub engine: rondo_env::SandboxEngine,
}

pub const SETUP_FILE: &str = "eval.json";
pub const CASES_FILE: &str = "cases.jsonl";
pub const SUMMARY_FILE: &str = "summary.json";
pub const RUNS_DIR: &str = "runs";

/// The result of one case, one line of `cases.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub run_id: String,
    pub exit: String,
    pub exit_code: i32,
    pub reason: String,
    pub passed: bool,
    /// The weighted share of expectations met (0 when the run did not end at a success exit).
    pub score: f64,
    pub answer: Value,
    pub contains_hit: bool,
    pub key_hit: bool,
    pub checks: Vec<CheckResult>,
    pub latency_sec: f64,
    pub llm_calls: u64,
    pub tool_calls: u64,
    pub steps: u64,
    pub cost_usd: f64,
}

/// One expectation of a case and whether it held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    /// `contains`, `key`, `tool` or `check`.
    pub kind: String,
    /// The expected substring, key, tool name or the check's expression.
    pub expected: String,
    pub hit: bool,
    /// Why a check could not be evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// micro-agent's metrics, in its order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub success_rate: f64,
    pub contains_hit_rate: f64,
    pub key_hit_rate: f64,
    pub avg_latency_sec: f64,
    pub avg_lm_calls: f64,
    pub avg_tool_calls: f64,
    pub avg_steps: f64,
    pub avg_cost_usd: f64,
    pub n: usize,
}

impl Summary {
    /// The metrics as the terminal table shows them, in micro-agent's order.
    pub fn rows(&self) -> [(&'static str, String); 9] {
        [
            ("success_rate", format!("{:.4}", self.success_rate)),
            (
                "contains_hit_rate",
                format!("{:.4}", self.contains_hit_rate),
            ),
            ("key_hit_rate", format!("{:.4}", self.key_hit_rate)),
            ("avg_latency_sec", format!("{:.4}", self.avg_latency_sec)),
            ("avg_lm_calls", format!("{:.4}", self.avg_lm_calls)),
            ("avg_tool_calls", format!("{:.4}", self.avg_tool_calls)),
            ("avg_steps", format!("{:.4}", self.avg_steps)),
            ("avg_cost_usd", format!("{:.6}", self.avg_cost_usd)),
            ("n", self.n.to_string()),
        ]
    }

    pub fn of(results: &[&CaseResult]) -> Summary {
        let mean = |f: &dyn Fn(&CaseResult) -> f64| {
            if results.is_empty() {
                0.0
            } else {
                results.iter().map(|r| f(r)).sum::<f64>() / results.len() as f64
            }
        };
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        Summary {
            success_rate: mean(&|r| r.score),
            contains_hit_rate: mean(&|r| flag(r.contains_hit)),
            key_hit_rate: mean(&|r| flag(r.key_hit)),
            avg_latency_sec: mean(&|r| r.latency_sec),
            avg_lm_calls: mean(&|r| r.llm_calls as f64),
            avg_tool_calls: mean(&|r| r.tool_calls as f64),
            avg_steps: mean(&|r| r.steps as f64),
            avg_cost_usd: mean(&|r| r.cost_usd),
            n: results.len(),
        }
    }
}

/// How the run ended, as scoring needs it.
struct Ending<'a> {
    exit: String,
    code: i32,
    reason: String,
    state: &'a RunState,
    run_dir: &'a Path,
    workspace: &'a Path,
    latency_sec: f64,
}

/// A run's answer: the workflow's `answer = EXPR`, else the output of the last role run
/// that has one (a builtin role, the `finally` one included, has none).
pub fn answer(workflow: &Checked, state: &RunState, workspace: &Path) -> Value {
    match &workflow.answer {
        Some(expr) => env(workflow, state, workspace)
            .eval(expr)
            .unwrap_or(Value::Null),
        None => last_output_role(workflow, state)
            .and_then(|n| state.outputs.get(&n.index()).cloned())
            .unwrap_or(Value::Null),
    }
}

/// The role whose output is the answer of a workflow that declares none: the last role
/// run that has an output.
pub fn last_output_role(workflow: &Checked, state: &RunState) -> Option<NodeIndex> {
    state
        .path
        .iter()
        .rev()
        .filter_map(|name| {
            workflow
                .graph
                .node_indices()
                .find(|&n| &workflow.graph[n].name == name)
        })
        .find(|n| state.outputs.get(&n.index()).is_some_and(|v| !v.is_null()))
}

fn env<'a>(workflow: &'a Checked, state: &'a RunState, workspace: &'a Path) -> Env<'a> {
    Env {
        workflow,
        state,
        workspace,
        role: None,
        output: None,
        item: None,
        prompt: None,
    }
}

fn as_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What the run's journal shows as observations: each tool call's result data (the
/// result itself when it has no object data) and each parsed role output.
fn observations(journal: &[Entry]) -> Vec<&Value> {
    let mut out = Vec::new();
    for entry in journal {
        match &entry.event {
            Event::ToolCall { result, .. } => match result.get("data") {
                Some(data @ Value::Object(_)) => out.push(data),
                _ => out.push(result),
            },
            Event::ParsedOutput { output, .. } => out.push(output),
            _ => {}
        }
    }
    out
}

/// What micro-agent's evals count (`avg_steps`, `avg_tool_calls`): the agent's decisions (the
/// visits of llm roles) and the tool calls a model asked for (a tool role whose tool is chosen
/// by an expression, `call = planner.tool.name`, one call a visit; or `calls = agent.calls`,
/// every call of the reply, refused ones included). Engine roles and helper tools a workflow
/// calls by name (`call = "compose_answer"`, `run = ...`, a command) are not decisions.
fn agent_counts(workflow: &Checked, state: &RunState, journal: &[Entry]) -> (u64, u64) {
    use crate::compile::{ExprKind, RoleKind, ToolAction};
    let mut steps = 0;
    let mut asked: Vec<&str> = Vec::new();
    let mut natively: Vec<&str> = Vec::new();
    for (index, role) in workflow.roles() {
        let name = workflow.node(index).name.as_str();
        match &role.kind {
            RoleKind::Llm(_) => steps += state.visits.get(index.index()).copied().unwrap_or(0),
            RoleKind::Tool(t) => match &t.action {
                ToolAction::Choose { call, .. }
                    if !matches!(call.kind, ExprKind::Literal { .. }) =>
                {
                    asked.push(name)
                }
                ToolAction::Calls { .. } => natively.push(name),
                _ => {}
            },
            RoleKind::Builtin => {}
        }
    }
    let mut calls = 0;
    for entry in journal {
        if let Event::ToolCall { role, result, .. } = &entry.event {
            if asked.contains(&role.as_str()) {
                calls += 1;
            } else if natively.contains(&role.as_str()) {
                calls += result["results"].as_array().map_or(0, |r| r.len() as u64);
            }
        }
    }
    (steps, calls)
}

/// The names of the tools a run called: its `used()` set and the tool results' names.
fn tools_called(workflow: &Checked, state: &RunState, journal: &[Entry]) -> Vec<String> {
    let mut names: Vec<String> = state
        .tools_used
        .iter()
        .filter_map(|&id| workflow.tools.get(id).map(|t| t.name().to_string()))
        .collect();
    for entry in journal {
        if let Event::ToolCall { result, .. } = &entry.event
            && let Some(name) = result.get("tool_name").and_then(Value::as_str)
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    names.dedup();
    names
}

fn score(workflow: &Checked, case: &Case, weights: Weights, end: Ending<'_>) -> CaseResult {
    let state = end.state;
    let answer = answer(workflow, state, end.workspace);
    let text = as_text(&answer);
    let mut checks = Vec::new();
    let contains_hit = match &case.expect.contains {
        Some(needle) => {
            let hit = text.contains(needle.as_str());
            checks.push(CheckResult {
                kind: "contains".into(),
                expected: needle.clone(),
                hit,
                error: None,
            });
            hit
        }
        None => true,
    };
    // Read once: the counts and the expectations look at it.
    let journal = rundir::read_journal(end.run_dir)
        .unwrap_or_default()
        .entries;
    let (steps, tool_calls) = agent_counts(workflow, state, &journal);
    let observed = observations(&journal);
    let mut key_hit = true;
    for key in &case.expect.keys {
        let hit = observed
            .iter()
            .any(|o| o.as_object().is_some_and(|m| m.contains_key(key)));
        key_hit &= hit;
        checks.push(CheckResult {
            kind: "key".into(),
            expected: key.clone(),
            hit,
            error: None,
        });
    }
    let called = tools_called(workflow, state, &journal);
    let mut tools_hit = true;
    for tool in &case.expect.tools {
        let hit = called.contains(tool);
        tools_hit &= hit;
        checks.push(CheckResult {
            kind: "tool".into(),
            expected: tool.clone(),
            hit,
            error: None,
        });
    }
    let mut checks_hit = true;
    let env = env(workflow, state, end.workspace);
    for check in &case.expect.checks {
        let (hit, error) = match env.eval(&check.expr) {
            Ok(v) => (truthy(&v), None),
            Err(e) => (false, Some(e)),
        };
        checks_hit &= hit;
        checks.push(CheckResult {
            kind: "check".into(),
            expected: check.text.clone(),
            hit,
            error,
        });
    }
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let total = weights.contains + weights.keys + weights.tools + weights.checks;
    let success = end.code == 0;
    let score = if success {
        (weights.contains * flag(contains_hit)
            + weights.keys * flag(key_hit)
            + weights.tools * flag(tools_hit)
            + weights.checks * flag(checks_hit))
            / total.max(1e-9)
    } else {
        0.0
    };
    CaseResult {
        id: case.id.clone(),
        run_id: case.run_id.clone(),
        exit: end.exit,
        exit_code: end.code,
        reason: end.reason,
        passed: success && contains_hit && key_hit && tools_hit && checks_hit,
        score,
        answer,
        contains_hit,
        key_hit,
        checks,
        latency_sec: end.latency_sec,
        llm_calls: state.totals.llm_calls,
        tool_calls,
        steps,
        cost_usd: state.totals.cost,
    }
}

/// A case whose run could not start (bad inputs for this workflow, a missing key).
fn not_started(case: &Case, why: String) -> CaseResult {
    CaseResult {
        id: case.id.clone(),
        run_id: case.run_id.clone(),
        exit: "error".into(),
        exit_code: 2,
        reason: why,
        passed: false,
        score: 0.0,
        answer: Value::Null,
        contains_hit: false,
        key_hit: case.expect.keys.is_empty(),
        checks: Vec::new(),
        latency_sec: 0.0,
        llm_calls: 0,
        tool_calls: 0,
        steps: 0,
        cost_usd: 0.0,
    }
}

/// Everything an eval runs with.
pub struct Eval {
    pub workflow: Arc<Checked>,
    pub cases: Vec<Case>,
    pub weights: Weights,
    pub setup: Setup,
    pub out: PathBuf,
    pub progress: progress::Mode,
    /// Run without the roles' demos files (`rondo optimize`'s "before").
    pub no_demos: bool,
}

/// The interrupters of the runs going on, and whether to start more.
#[derive(Default)]
struct Stop {
    stopping: AtomicBool,
    running: Mutex<Vec<(Arc<AtomicBool>, Arc<Notify>)>>,
}

impl Stop {
    fn all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Ok(running) = self.running.lock() {
            for (flag, notify) in running.iter() {
                flag.store(true, Ordering::SeqCst);
                notify.notify_waiters();
            }
        }
    }
}

/// Results already in `DIR/cases.jsonl` (a resumed eval), by case id.
pub fn read_results(out: &Path) -> BTreeMap<String, CaseResult> {
    read_jsonl(&out.join(CASES_FILE), |r: &CaseResult| r.id.clone())
}

/// The lines of a results file that parse, by key (a line cut by a crash does not).
pub(crate) fn read_jsonl<T: serde::de::DeserializeOwned>(
    path: &Path,
    key: impl Fn(&T) -> String,
) -> BTreeMap<String, T> {
    let mut done = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(path) {
        for line in text.lines() {
            if let Ok(r) = serde_json::from_str::<T>(line) {
                done.insert(key(&r), r);
            }
        }
    }
    done
}

/// Replaces a results file with one line a result, atomically.
pub(crate) fn write_jsonl<T: Serialize>(path: &Path, results: &[T]) -> Result<(), String> {
    let mut text = String::new();
    for r in results {
        text.push_str(&serde_json::to_string(r).unwrap_or_default());
        text.push('\n');
    }
    rundir::write_atomic(path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The outcome of an eval.
pub struct Report {
    pub results: Vec<CaseResult>,
    pub summary: Summary,
    /// Cases left without a result (interrupted).
    pub unfinished: usize,
    pub ran: usize,
}

impl Eval {
    /// Runs every case without a result yet, then writes `cases.jsonl` (in dataset order)
    /// and `summary.json`.
    pub async fn run(self) -> Result<Report, String> {
        let out = self.out.clone();
        self.write_setup(&out)?;
        let engine = self.setup.engine;
        let reaped_batch = self.reap_batch(&out).await?;
        let mut done = read_results(&out);
        done.retain(|id, r| {
            self.cases
                .iter()
                .any(|c| &c.id == id && c.run_id == r.run_id)
        });
        let todo: Vec<Case> = self
            .cases
            .iter()
            .filter(|c| !done.contains_key(&c.id))
            .cloned()
            .collect();
        let total = self.cases.len();
        let ran = todo.len();
        let bar = Arc::new(Bar::new(self.progress, total, done.values()));
        let results_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.join(CASES_FILE))
            .map_err(|e| format!("cannot open {}: {e}", out.join(CASES_FILE).display()))?;
        let stop = Arc::new(Stop::default());
        let watcher = {
            let stop = stop.clone();
            tokio::spawn(async move {
                if batch::interrupted().await {
                    stop.all();
                }
            })
        };
        let shared = self.shared(&out, bar.clone())?;
        let concurrency = self.setup.concurrency;
        run_cases(todo, shared, concurrency, &stop, results_file, &mut done).await;
        watcher.abort();
        bar.end();
        if let Some(batch) = &reaped_batch
            && let Err(e) = engine.reap_batch(batch).await
        {
            eprintln!("warning: removing the batch's {engine} sandboxes: {e}");
        }
        let results: Vec<CaseResult> = self
            .cases
            .iter()
            .filter_map(|c| done.get(&c.id).cloned())
            .collect();
        let summary = write_outcome(&out, &results)?;
        Ok(Report {
            unfinished: total - results.len(),
            results,
            summary,
            ran,
        })
    }

    /// The batch's folder with its runs' folder, and `setup.json`.
    fn write_setup(&self, out: &Path) -> Result<(), String> {
        std::fs::create_dir_all(out.join(RUNS_DIR))
            .map_err(|e| format!("cannot create {}: {e}", out.join(RUNS_DIR).display()))?;
        let setup_text = serde_json::to_string_pretty(&self.setup).unwrap_or_default();
        rundir::write_atomic(&out.join(SETUP_FILE), setup_text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.join(SETUP_FILE).display()))
    }

    /// The batch's sandboxes carry its folder as their label: what a crashed batch of this
    /// folder left goes first, and what this one leaves goes at its end. The label, when
    /// the engine reaps batches.
    async fn reap_batch(&self, out: &Path) -> Result<Option<String>, String> {
        let engine = self.setup.engine;
        let reaped_batch = engine.reaps_batches().then(|| {
            let batch = std::path::absolute(out)
                .unwrap_or(out.to_path_buf())
                .to_string_lossy()
                .into_owned();
            rondo_env::set_batch_label(&batch);
            batch
        });
        if let Some(batch) = &reaped_batch {
            engine
                .reap_batch(batch)
                .await
                .map_err(|e| format!("--engine {engine}: {e}"))?;
        }
        Ok(reaped_batch)
    }

    /// What every case's task reads. One pool for every run: rate limits, concurrency
    /// bounds and circuit breakers hold across the runs, and each HTTP client is made once.
    fn shared(&self, out: &Path, bar: Arc<Bar>) -> Result<Arc<Shared>, String> {
        let base = RunOptions {
            runs_root: out.join(RUNS_DIR),
            provider: self.setup.provider.clone(),
            script: self.setup.script.clone(),
            progress: progress::Mode::Quiet,
            no_demos: self.no_demos,
            engine: self.setup.engine,
            ..RunOptions::default()
        };
        let script = Interpreter::script_for(&self.workflow, &base).map_err(|e| e.to_string())?;
        let pool = Interpreter::provider_pool(&self.workflow, script).map_err(|e| e.to_string())?;
        Ok(Arc::new(Shared {
            workflow: self.workflow.clone(),
            weights: self.weights,
            bar,
            base: RunOptions {
                pool: Some(Arc::new(pool)),
                ..base
            },
        }))
    }
}

/// Runs `todo`, `concurrency` at a time until `stop`; each result is appended to
/// `results_file` as it comes and put in `done`.
async fn run_cases(
    todo: Vec<Case>,
    shared: Arc<Shared>,
    concurrency: usize,
    stop: &Arc<Stop>,
    mut results_file: std::fs::File,
    done: &mut BTreeMap<String, CaseResult>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<CaseResult>();
    let mut tasks = tokio::task::JoinSet::new();
    let bar = shared.bar.clone();
    for case in todo {
        let permits = permits.clone();
        let stop = stop.clone();
        let shared = shared.clone();
        let tx = tx.clone();
        tasks.spawn(async move {
            let Ok(_permit) = permits.acquire_owned().await else {
                return;
            };
            if stop.stopping.load(Ordering::SeqCst) {
                return;
            }
            if let Some(result) = shared.run_case(&case, &stop).await {
                let _ = tx.send(result);
            }
        });
    }
    drop(tx);
    while let Some(result) = rx.recv().await {
        let line = serde_json::to_string(&result).unwrap_or_default();
        if let Err(e) = writeln!(results_file, "{line}").and_then(|()| results_file.flush()) {
            bar.warn(&format!("cannot write {CASES_FILE}: {e}"));
        }
        bar.finished(&result);
        done.insert(result.id.clone(), result);
    }
    while tasks.join_next().await.is_some() {}
}

/// `cases.jsonl` rewritten in dataset order, and `summary.json`.
fn write_outcome(out: &Path, results: &[CaseResult]) -> Result<Summary, String> {
    write_jsonl(&out.join(CASES_FILE), results)?;
    let refs: Vec<&CaseResult> = results.iter().collect();
    let summary = Summary::of(&refs);
    let summary_text = serde_json::to_string_pretty(&summary).unwrap_or_default();
    rundir::write_atomic(&out.join(SUMMARY_FILE), summary_text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", out.join(SUMMARY_FILE).display()))?;
    Ok(summary)
}

/// Sandboxes a case's run may lose (their node gone) and still go on in a new one.
const MAX_SANDBOX_LOSSES: usize = 3;

/// What every case's task reads.
struct Shared {
    workflow: Arc<Checked>,
    weights: Weights,
    bar: Arc<Bar>,
    /// The options of every run (the shared pool among them), less its id and inputs.
    base: RunOptions,
}

impl Shared {
    /// Runs one case (or continues its run, or scores its finished run) and scores it;
    /// `None` when the run was interrupted.
    async fn run_case(&self, case: &Case, stop: &Stop) -> Option<CaseResult> {
        let workflow = &*self.workflow;
        let run_dir = match &case.workspace {
            Some(ws) => rundir::runs_in_workspace(ws).join(&case.run_id),
            None => self.base.runs_root.join(&case.run_id),
        };
        let options = RunOptions {
            run_id: Some(case.run_id.clone()),
            inputs: case.inputs.clone(),
            workspace: case.workspace.clone(),
            image: case.image.clone(),
            ..self.base.clone()
        };
        let started = Instant::now();
        let exists = run_dir.join("run.json").exists();
        if exists && let Some(result) = self.finished(case, &run_dir) {
            return Some(result);
        }
        let mut resume = exists;
        let mut lost = 0;
        let outcome = loop {
            let begun = if resume {
                Interpreter::resume(workflow, &run_dir, &options)
            } else {
                // A run killed before its `run.json` left nothing to continue.
                let _ = std::fs::remove_dir_all(&run_dir);
                Interpreter::start_overlapped(workflow, &options).await
            };
            let (mut interp, state) = match begun {
                Ok(x) => x,
                Err(e) => return Some(not_started(case, e.to_string())),
            };
            if self.bar.bar.is_some() {
                interp.subscribe(Box::new(CaseProgress {
                    bar: self.bar.clone(),
                    case: case.id.clone(),
                }));
            }
            let handle = interp.interrupter();
            if let Ok(mut running) = stop.running.lock() {
                running.push(handle.clone());
            }
            if stop.stopping.load(Ordering::SeqCst) {
                handle.0.store(true, Ordering::SeqCst);
            }
            let outcome = interp.drive(state).await;
            if let Ok(mut running) = stop.running.lock() {
                running.retain(|(flag, _)| !Arc::ptr_eq(flag, &handle.0));
            }
            if outcome.exit != "interrupted" {
                break outcome;
            }
            // Not stopped by the batch: its sandbox was lost (a node gone). The run goes on
            // from its last checkpoint in a new sandbox, its tool step run again.
            if stop.stopping.load(Ordering::SeqCst) || lost >= MAX_SANDBOX_LOSSES {
                return None;
            }
            lost += 1;
            resume = true;
            self.bar.warn(&format!(
                "case {}: its sandbox was lost; resuming its run from its last checkpoint \
                 in a new one ({lost} of at most {MAX_SANDBOX_LOSSES})",
                case.id
            ));
        };
        let previous_ms = outcome.state.elapsed_ms;
        Some(score(
            workflow,
            case,
            self.weights,
            Ending {
                exit: outcome.exit.clone(),
                code: outcome.exit_code,
                reason: outcome.reason.clone(),
                state: &outcome.state,
                run_dir: &outcome.run_dir,
                workspace: &outcome.workspace,
                latency_sec: previous_ms as f64 / 1000.0 + started.elapsed().as_secs_f64(),
            },
        ))
    }

    /// The result of a run that finished before its result was written.
    fn finished(&self, case: &Case, run_dir: &Path) -> Option<CaseResult> {
        let info = rundir::read_info(run_dir).ok()?;
        info.ended_at.as_ref()?;
        if info.status == RunStatus::Interrupted {
            return None;
        }
        let state = rundir::read_state(run_dir, &self.workflow).ok()?;
        let ended = state.ended.clone()?;
        let layout = rundir::Layout::of(run_dir, &info);
        Some(score(
            &self.workflow,
            case,
            self.weights,
            Ending {
                exit: ended.exit,
                code: ended.code,
                reason: ended.reason,
                state: &state,
                run_dir,
                workspace: &layout.workspace,
                latency_sec: state.elapsed_ms as f64 / 1000.0,
            },
        ))
    }
}

/// Progress on standard error: a bar with the live success rate and cost on a terminal,
/// one line a case otherwise.
struct Bar {
    mode: progress::Mode,
    bar: Option<indicatif::ProgressBar>,
    tally: Mutex<(usize, f64, f64)>,
    /// What the cases still running have spent so far, by case.
    running: Mutex<BTreeMap<String, f64>>,
    total: usize,
}

/// A case's run, followed for the bar: its cost after each step.
struct CaseProgress {
    bar: Arc<Bar>,
    case: String,
}

impl Subscriber for CaseProgress {
    fn event(&mut self, entry: &Arc<Entry>) {
        if let Event::RoleEnd {
            totals: Some(t), ..
        } = &entry.event
        {
            self.bar.running(&self.case, t.cost);
        }
    }
}

impl Bar {
    fn new<'a>(
        mode: progress::Mode,
        total: usize,
        done: impl Iterator<Item = &'a CaseResult>,
    ) -> Bar {
        let mut tally = (0usize, 0.0f64, 0.0f64);
        for r in done {
            tally.0 += 1;
            tally.1 += r.score;
            tally.2 += r.cost_usd;
        }
        let bar = (mode == progress::Mode::Live).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            let style = indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} {elapsed_precise} eta {eta}  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_position(tally.0 as u64);
            bar
        });
        let b = Bar {
            mode,
            bar,
            tally: Mutex::new(tally),
            running: Mutex::new(BTreeMap::new()),
            total,
        };
        b.show_message();
        b
    }

    fn show_message(&self) {
        let Some(bar) = &self.bar else { return };
        let running: f64 = self.running.lock().map_or(0.0, |r| r.values().sum());
        if let Ok(t) = self.tally.lock() {
            let rate = if t.0 == 0 { 0.0 } else { t.1 / t.0 as f64 };
            bar.set_message(format!(
                "success {:.1}%  cost ${:.4}",
                rate * 100.0,
                t.2 + running
            ));
        }
    }

    /// A running case has spent `cost` so far.
    fn running(&self, case: &str, cost: f64) {
        if let Ok(mut running) = self.running.lock() {
            running.insert(case.to_string(), cost);
        }
        self.show_message();
    }

    fn finished(&self, r: &CaseResult) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&r.id);
        }
        let (n, rate, cost) = match self.tally.lock() {
            Ok(mut t) => {
                t.0 += 1;
                t.1 += r.score;
                t.2 += r.cost_usd;
                (t.0, t.1 / t.0 as f64, t.2)
            }
            Err(_) => return,
        };
        match (&self.bar, self.mode) {
            (Some(bar), _) => {
                bar.inc(1);
                self.show_message();
            }
            (None, progress::Mode::Plain) => {
                let mark = if r.passed { "ok" } else { "FAILED" };
                // A reader that went away (`2>&1 | head`) does not stop the eval.
                let _ = writeln!(
                    std::io::stderr(),
                    "[{n}/{}] {} {mark} (exit {}, {:.2}s)  success {:.1}%  cost ${cost:.4}",
                    self.total,
                    r.id,
                    r.exit,
                    r.latency_sec,
                    rate * 100.0
                );
            }
            _ => {}
        }
    }

    fn warn(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("warning: {text}")),
            None => {
                let _ = writeln!(std::io::stderr(), "warning: {text}");
            }
        }
    }

    fn end(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The results as the terminal shows them: the cases that did not pass, then the metrics.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let failed: Vec<&CaseResult> = report.results.iter().filter(|r| !r.passed).collect();
    if !failed.is_empty() {
        out.push_str(&format!(
            "{:<24} {:<16} {:>6}  what failed\n",
            "case", "exit", "score"
        ));
        for r in &failed {
            let mut why: Vec<String> = r
                .checks
                .iter()
                .filter(|c| !c.hit)
                .map(|c| match &c.error {
                    Some(e) => format!("{} `{}`: {e}", c.kind, c.expected),
                    None => format!("{} {:?}", c.kind, c.expected),
                })
                .collect();
            if r.exit_code != 0 {
                why.insert(0, r.reason.clone());
            }
            out.push_str(&format!(
                "{:<24} {:<16} {:>6.3}  {}\n",
                r.id,
                r.exit,
                r.score,
                why.join("; ")
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:<18} {:>12}\n", "metric", "value"));
    for (name, value) in report.summary.rows() {
        out.push_str(&format!("{name:<18} {value:>12}\n"));
    }
    let passed = report.results.iter().filter(|r| r.passed).count();
    out.push_str(&format!(
        "\n{passed} passed, {} failed",
        report.results.len() - passed
    ));
    if report.unfinished > 0 {
        out.push_str(&format!(
            ", {} unfinished (continue with --resume)",
            report.unfinished
        ));
    }
    out.push('\n');
    out
}
