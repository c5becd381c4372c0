//! The soundness property of `rondo check`, tested generatively: every random workflow
//! that `check` accepts runs, whatever the scripted model answers, to a declared exit,
//! `limit`, `interrupted` or `invalid_output` — never to `error`, never a panic or a
//! hang — and its records (run.json, the checkpoint, events.jsonl) agree on how it ended.
//!
//! `RONDO_SOUNDNESS_CASES=20000` runs the long mode; `RONDO_SOUNDNESS_SEED=N` picks the
//! first seed (case `i` uses seed `N + i`, printed on failure);
//! `RONDO_SOUNDNESS_FEATURES=current|final|a,b` picks the language the generator writes
//! (see `gen::Features`).

#[path = "soundness/gen.rs"]
mod generator;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::Duration;

use generator::{Case, Features};
use rondo::check::{self, CheckOptions};
use rondo::compile::{NodeKind, Workflow};
use rondo::run::scripted::Script;
use rondo::run::{Interpreter, RunOptions};
use rondo::source::SourceFile;
use serde_json::Value;

/// The language on this branch. After the issue-10 branches are merged: `Features::FINAL`.
const DEFAULT_FEATURES: Features = Features::FINAL;
const DEFAULT_CASES: u64 = 300;
const DEFAULT_SEED: u64 = 0x5EED_0000;

/// How a run ends whose replies leave out a role the workflow can reach (and the script
/// does not say it is unreached): refused at its start.
const REFUSED: &str = "refused at start (roles without replies)";

/// Exits a run may end at besides the declared ones.
const ALLOWED_BUILTIN: &[&str] = &["limit", "interrupted", "invalid_output"];

#[derive(Default)]
struct Tally {
    generated: u64,
    accepted: u64,
    rejected_by: BTreeMap<String, u64>,
    exits: BTreeMap<String, u64>,
    failures: Vec<String>,
}

enum Verdict {
    Rejected(Vec<String>, String),
    Ran(String),
    Failed(String),
}

fn write_case(dir: &Path, case: &Case) -> std::path::PathBuf {
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    for (name, text) in &case.prompts {
        std::fs::write(prompts.join(name), text).unwrap();
    }
    let path = dir.join("w.rondo");
    std::fs::write(&path, &case.source).unwrap();
    path
}

fn script(case: &Case) -> Script {
    let mut s = Script::default();
    for (role, visit, texts) in &case.replies {
        for t in texts {
            s.add(role, *visit, t.clone());
        }
    }
    s.unreached = case.unreached.clone();
    s
}

/// Checks one case and, when `check` accepts it, runs it and judges the run.
fn judge(case: &Case, dir: &Path) -> Verdict {
    let interrupt = case.seed % 50 == 7;
    let path = write_case(dir, case);
    let file = SourceFile::read(&path).unwrap();
    let loaded = check::load(&file, &CheckOptions { offline: true });
    let diags = &loaded.diagnostics;
    let Ok(workflow) = &loaded.checked else {
        let errors: Vec<_> = diags
            .sorted()
            .into_iter()
            .filter(|d| d.severity == rondo::diagnostics::Severity::Error)
            .collect();
        let codes = errors.iter().map(|d| d.code.to_string()).collect();
        let text = rondo::diagnostics::render_human(&file, &errors, false, 100);
        return Verdict::Rejected(codes, text);
    };
    let runs = dir.join("runs");
    let options = RunOptions {
        runs_root: runs.clone(),
        run_id: Some("run".into()),
        provider: Some("scripted".into()),
        ..RunOptions::default()
    };
    let script = script(case);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // As `rondo run` starts it: refused when an llm role has no reply at all.
            let (interp, state) = Interpreter::start_scripted(workflow, &options, script)
                .map_err(|e| format!("the run did not start: {e}"))?;
            if interrupt {
                // Ctrl-C before the first step: the records must say `interrupted`.
                interp
                    .interrupter()
                    .0
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            tokio::time::timeout(Duration::from_secs(60), interp.drive(state))
                .await
                .map_err(|_| "the run did not end within 60 s".to_string())
        })
    }));
    let outcome = match result {
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Verdict::Failed(format!("panicked: {msg}"));
        }
        Ok(Err(e)) => {
            // Refused only for roles left out of the replies and not said to be unreached.
            let refused = e.contains("the scripted replies have no reply for");
            let wrongly_named = case
                .replies
                .iter()
                .map(|(role, _, _)| role)
                .chain(&case.unreached)
                .any(|role| e.contains(&format!("`{role}`")));
            let undeclared = case.omitted.iter().any(|r| !case.unreached.contains(r));
            if refused && !wrongly_named && undeclared {
                return Verdict::Ran(REFUSED.into());
            }
            return Verdict::Failed(e);
        }
        Ok(Ok(o)) => o,
    };
    let declared = declared_exits(workflow);
    if !declared.iter().any(|(n, _)| n == &outcome.exit)
        && !ALLOWED_BUILTIN.contains(&outcome.exit.as_str())
    {
        return Verdict::Failed(format!(
            "ended at `{}` (code {}): {}",
            outcome.exit, outcome.exit_code, outcome.reason
        ));
    }
    if let Err(e) = records_agree(workflow, &outcome) {
        return Verdict::Failed(format!("records disagree: {e}"));
    }
    if let Err(e) = within_cost_bound(workflow, &outcome) {
        return Verdict::Failed(format!("past its proven worst case: {e}"));
    }
    Verdict::Ran(outcome.exit)
}

fn declared_exits(workflow: &Workflow) -> Vec<(String, i32)> {
    workflow
        .graph
        .node_indices()
        .filter_map(|i| match &workflow.node(i).kind {
            NodeKind::Exit(spec) => Some((workflow.node(i).name.clone(), spec.code)),
            _ => None,
        })
        .filter(|(n, _)| !["limit", "error", "interrupted", "invalid_output"].contains(&n.as_str()))
        .collect()
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// run.json, the checkpoint and the last event all say how the run ended.
fn records_agree(workflow: &Workflow, outcome: &rondo::run::Outcome) -> Result<(), String> {
    let dir = &outcome.run_dir;
    let info = read_json(&dir.join("run.json"))?;
    let want_status = if outcome.exit == "interrupted" {
        "interrupted"
    } else {
        "finished"
    };
    if info["status"] != want_status {
        return Err(format!(
            "run.json status {} for exit `{}`",
            info["status"], outcome.exit
        ));
    }
    if info["exit"] != outcome.exit.as_str() || info["exit_code"] != outcome.exit_code {
        return Err(format!(
            "run.json says {} ({}), the run ended at {} ({})",
            info["exit"], info["exit_code"], outcome.exit, outcome.exit_code
        ));
    }
    let code = workflow
        .find_node(&outcome.exit)
        .and_then(|n| match &workflow.node(n).kind {
            NodeKind::Exit(spec) => Some(spec.code),
            _ => None,
        });
    if code != Some(outcome.exit_code) {
        return Err(format!(
            "exit `{}` has code {:?}, the run reported {}",
            outcome.exit, code, outcome.exit_code
        ));
    }
    let state = rondo::run::rundir::read_checkpoint(dir)?;
    if state["status"] != want_status {
        return Err(format!("checkpoint status {}", state["status"]));
    }
    let events = std::fs::read_to_string(dir.join("events.jsonl")).map_err(|e| e.to_string())?;
    // The last event but a checkpoint record (a run's final one follows its `exit`).
    let last: Value = events
        .lines()
        .rev()
        .find(|l| !l.contains("\"event\":\"checkpoint\""))
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| e.to_string())?
        .ok_or("events.jsonl is empty")?;
    if last["event"] != "exit" || last["exit"] != outcome.exit.as_str() {
        return Err(format!("the last event is {last}"));
    }
    let llm_calls = events
        .lines()
        .filter(|l| l.contains("\"event\":\"llm_response\""))
        .count() as u64;
    if info["totals"]["llm_calls"]
        .as_u64()
        .is_some_and(|n| n < llm_calls)
    {
        return Err(format!(
            "run.json counts {} llm calls, events.jsonl records {llm_calls} accepted replies",
            info["totals"]["llm_calls"]
        ));
    }
    Ok(())
}

/// Prompts compared with their proven bound, and those whose bound needed no cap.
static PROMPTS_COMPARED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static PROMPTS_UNCAPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Issue 27 §4: no run spends more than `rondo check --cost` proves (each figure it
/// proves: the scripted provider's replies have no length bound, so output tokens have
/// none, and its price is 0).
fn within_cost_bound(workflow: &Workflow, outcome: &rondo::run::Outcome) -> Result<(), String> {
    let bound = check::cost::analyse(workflow);
    let info = read_json(&outcome.run_dir.join("run.json"))?;
    let totals = &info["totals"];
    let spent = |k: &str| totals[k].as_u64().unwrap_or(0);
    if let Some(max) = bound.input_tokens
        && spent("input_tokens") > max
    {
        return Err(format!(
            "{} input tokens, proven at most {max}",
            spent("input_tokens")
        ));
    }
    if let Some(max) = bound.output_tokens
        && spent("output_tokens") > max
    {
        return Err(format!(
            "{} output tokens, proven at most {max}",
            spent("output_tokens")
        ));
    }
    let cost = totals["cost"].as_f64().unwrap_or(0.0);
    if let Some(max) = bound.max_cost
        && cost > max
    {
        return Err(format!("${cost}, proven at most ${max}"));
    }
    // The figure per role: its spend in the records against its own bound.
    let events =
        std::fs::read_to_string(outcome.run_dir.join("events.jsonl")).map_err(|e| e.to_string())?;
    let mut by_role: BTreeMap<String, u64> = BTreeMap::new();
    for line in events.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        // The call is flattened into the event.
        let call = match e["event"].as_str() {
            Some("llm_response" | "invalid_output") => &e,
            _ => continue,
        };
        if let (Some(role), Some(n)) = (
            call["role"].as_str(),
            call["usage"]["input_tokens"].as_u64(),
        ) {
            *by_role.entry(role.to_string()).or_insert(0) += n;
            // The template walk itself: the prompt sent against the bound proven for it.
            let sent = call["prompt"].as_str().map_or(0, str::len) as u64;
            if let Some(r) = bound.role(role) {
                PROMPTS_COMPARED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if !r.prompt_capped {
                    PROMPTS_UNCAPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if sent > r.max_prompt_bytes {
                    return Err(format!(
                        "role `{role}` sent a prompt of {sent} bytes, proven at most {}",
                        r.max_prompt_bytes
                    ));
                }
            }
        }
    }
    for (role, n) in by_role {
        if let Some(max) = bound.role(&role).and_then(|r| r.input_tokens)
            && n > max
        {
            return Err(format!(
                "role `{role}`: {n} input tokens, proven at most {max}"
            ));
        }
    }
    Ok(())
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Cases run on this many threads at once (`RONDO_SOUNDNESS_THREADS`): a case spends most
/// of its time waiting for its records to reach the disk, so runs overlap well.
fn threads() -> u64 {
    env_u64("RONDO_SOUNDNESS_THREADS").unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        4 * cores as u64
    })
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.generated += other.generated;
        self.accepted += other.accepted;
        for (k, v) in other.rejected_by {
            *self.rejected_by.entry(k).or_insert(0) += v;
        }
        for (k, v) in other.exits {
            *self.exits.entry(k).or_insert(0) += v;
        }
        self.failures.extend(other.failures);
    }
}

/// Cases `first_seed..first_seed + cases`, each thread taking the next seed not yet taken;
/// failures are reported in seed order, whatever thread found them.
fn run_cases(first_seed: u64, cases: u64, features: Features) -> Tally {
    let root = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicU64::new(0);
    let done = std::sync::atomic::AtomicU64::new(0);
    let total = std::sync::Mutex::new(Tally::default());
    std::thread::scope(|s| {
        for _ in 0..threads().clamp(1, cases.max(1)) {
            s.spawn(|| {
                let mut tally = Tally::default();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= cases {
                        break;
                    }
                    run_case(
                        first_seed.wrapping_add(i),
                        features,
                        root.path(),
                        &mut tally,
                    );
                    let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    if n.is_multiple_of(1000) {
                        println!("soundness: {n} cases done");
                    }
                }
                total.lock().unwrap().add(tally);
            });
        }
    });
    let mut tally = total.into_inner().unwrap();
    tally.failures.sort();
    tally.failures.truncate(20);
    tally
}

fn run_case(seed: u64, features: Features, root: &Path, tally: &mut Tally) {
    let case = generator::generate(seed, features);
    tally.generated += 1;
    let dir = root.join(format!("{seed:x}"));
    match judge(&case, &dir) {
        Verdict::Rejected(codes, text) => {
            if std::env::var_os("RONDO_SOUNDNESS_VERBOSE").is_some() {
                println!("seed {seed:#x} rejected:\n{text}\n{}", case.source);
            }
            for c in codes {
                *tally.rejected_by.entry(c).or_insert(0) += 1;
            }
        }
        Verdict::Ran(exit) => {
            tally.accepted += 1;
            *tally.exits.entry(exit).or_insert(0) += 1;
        }
        Verdict::Failed(why) => {
            tally.accepted += 1;
            *tally.exits.entry("FAILED".into()).or_insert(0) += 1;
            if tally.failures.len() < 20 {
                tally.failures.push(format!(
                    "seed {seed:#x}: {why}\n  reproduce: RONDO_SOUNDNESS_SEED={seed:#x} RONDO_SOUNDNESS_CASES=1 cargo test --test soundness -- --nocapture\n--- workflow ---\n{}",
                    case.source
                ));
            }
            // Kept for inspection when asked.
            if std::env::var_os("RONDO_SOUNDNESS_KEEP").is_some() {
                let keep = Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join("soundness")
                    .join(format!("{seed:x}"));
                let _ = std::fs::remove_dir_all(&keep);
                let _ = copy_dir(&dir, &keep);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[test]
fn every_checked_workflow_runs_to_an_exit_whatever_the_model_answers() {
    let cases = env_u64("RONDO_SOUNDNESS_CASES").unwrap_or(DEFAULT_CASES);
    let seed = env_u64("RONDO_SOUNDNESS_SEED").unwrap_or(DEFAULT_SEED);
    let features = match std::env::var("RONDO_SOUNDNESS_FEATURES") {
        Ok(text) => Features::parse(&text).unwrap(),
        Err(_) => DEFAULT_FEATURES,
    };
    let started = std::time::Instant::now();
    let tally = run_cases(seed, cases, features);
    println!(
        "soundness: features {features:?}, seeds {seed:#x}..{:#x}, {} threads, {:.0} s",
        seed.wrapping_add(cases),
        threads(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "soundness: {} workflows generated, {} accepted by check, runs by exit: {:?}",
        tally.generated, tally.accepted, tally.exits
    );
    println!(
        "soundness: rejections by diagnostic: {:?}",
        tally.rejected_by
    );
    println!(
        "soundness: cost: every run within its proven worst case; {} prompts compared with their bound, {} of them bounded without the template cap",
        PROMPTS_COMPARED.load(std::sync::atomic::Ordering::Relaxed),
        PROMPTS_UNCAPPED.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        tally.failures.is_empty(),
        "{} of {} checked workflows broke the promise:\n{}",
        tally.exits.get("FAILED").copied().unwrap_or(0),
        tally.accepted,
        tally.failures.join("\n")
    );
    // A generator that check mostly rejects proves nothing.
    assert!(
        tally.accepted * 2 >= tally.generated,
        "check accepted only {} of {} generated workflows: {:?}",
        tally.accepted,
        tally.generated,
        tally.rejected_by
    );
}

// ---- regression tests for the bugs the generator found (see /work/notes/generative-findings.md)

/// Checks and runs a hand-written case; `replies` are (role, every-visit reply).
fn judge_text(source: &str, prompts: &[(&str, &str)], replies: &[(&str, &str)]) -> Verdict {
    let case = Case {
        seed: 0,
        source: source.to_string(),
        prompts: prompts
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect(),
        replies: replies
            .iter()
            .map(|(r, t)| (r.to_string(), None, vec![t.to_string()]))
            .collect(),
        omitted: Vec::new(),
        unreached: Vec::new(),
    };
    let tmp = tempfile::tempdir().unwrap();
    judge(&case, tmp.path())
}

/// Generator finding 2: `set` accepted any value whose type is *comparable* with the
/// memory item's, so a float reached an int item and the run ended at `error`.
#[test]
fn a_float_set_into_an_int_memory_item_is_a_check_error() {
    let source = r#"workflow w {
  prompts = "prompts"
}
memory { counter: int = 0 }
role r1: llm {
  prompt = "r1.tera"
  output json { x: float }
}
role b: builtin { update { set counter = r1.x } }
start -> r1
r1 -> b
b -> done
exit done
"#;
    match judge_text(source, &[("r1.tera", "x?\n")], &[("r1", r#"{"x": 0.5}"#)]) {
        Verdict::Rejected(codes, _) => {
            assert!(codes.iter().any(|c| c.starts_with("rondo::update::")))
        }
        Verdict::Ran(exit) => panic!("check accepted it and the run ended at {exit}"),
        Verdict::Failed(why) => panic!("check accepted it and the run failed: {why}"),
    }
}

/// Seed 0x5eed0034 (features holes_fixed): a list reply between prose was repaired into
/// an object and rejected, so a valid reply ended the run at `error`.
#[test]
fn a_json_list_between_prose_is_read_as_the_list() {
    let raw = "Here you go:\n[\"{{ not a template }}\",\"hello world\"]\nHope that helps.";
    let (value, _) = rondo::run::output::parse_json(raw).unwrap();
    assert_eq!(
        value,
        serde_json::json!(["{{ not a template }}", "hello world"])
    );
}

/// Generator finding 4: an artifact name rendered from model output (`../up`) left the
/// run directory, and the run ended at `error`; values in names are now made path-safe.
#[test]
fn an_artifact_name_from_model_output_never_ends_the_run_at_error() {
    let source = r#"workflow w {
  prompts = "prompts"
}
role r1: llm {
  prompt = "r1.tera"
  output json { name: string }
  artifact "named/{{ r1.name }}.txt" = output
}
start -> r1
r1 -> invalid_output when r1.invalid
r1 -> done
exit done
"#;
    for name in ["../up", "/etc/x", "", "a\\u0000b"] {
        let reply = format!(r#"{{"name": "{name}"}}"#);
        match judge_text(source, &[("r1.tera", "name?\n")], &[("r1", &reply)]) {
            Verdict::Ran(exit) => assert_eq!(exit, "done", "{reply}"),
            Verdict::Rejected(codes, _) => panic!("check rejected it: {codes:?}"),
            Verdict::Failed(why) => panic!("check accepted it and the run failed: {why}"),
        }
    }
}

// ---- issue 22 §3: workflows `check` accepted that then ended at `error`

/// The map join: a map worker read by its name is the list of its branch outputs, as the
/// runtime makes it. `append` of it was accepted (typed as one output) and every run
/// ended at `error` when the join's template read a summary's field; now `append` is a
/// type error and `extend` runs, for an empty map too. In the worker's own update its
/// name is the list so far (the reply is tried against it before it is applied).
#[test]
fn a_map_worker_read_at_its_join_is_the_list_of_its_branch_outputs() {
    let source = |items: &str, op: &str| {
        format!(
            r#"workflow w {{
  prompts = "prompts"
}}
type Summary {{ summary: string }}
memory {{
  items: list[string] = {items}
  sums: list[Summary] = []
  seen: list[Summary] = []
}}
role dispatch: builtin {{ update {{ seen.clear() }} }}
role worker: llm {{
  prompt = "worker.tera"
  output json Summary
  update {{ seen.extend(worker) }}
}}
role collect: builtin {{ update {{ sums.{op}(worker) }} }}
role report: llm {{
  prompt = "report.tera"
  reads = [sums]
  output text
}}
start -> dispatch
dispatch -> map worker over memory.items -> collect max 10
collect -> report
report -> done
exit done
"#
        )
    };
    let prompts = [
        ("worker.tera", "Summarize {{ item }}.\n"),
        (
            "report.tera",
            "{% for s in memory.sums %}- {{ s.summary }}\n{% endfor %}{% for w in worker %}{{ w.summary }}{% endfor %}\n",
        ),
    ];
    let replies = [("worker", r#"{"summary": "ok"}"#), ("report", "fine")];
    match judge_text(&source(r#"["a", "b"]"#, "append"), &prompts, &replies) {
        Verdict::Rejected(codes, _) => {
            assert_eq!(codes, ["rondo::update::type_mismatch"], "{codes:?}")
        }
        Verdict::Ran(exit) => panic!("check accepted `append` and the run ended at {exit}"),
        Verdict::Failed(why) => panic!("check accepted `append` and the run failed: {why}"),
    }
    for items in ["[]", r#"["a"]"#, r#"["a", "b", "c"]"#] {
        match judge_text(&source(items, "extend"), &prompts, &replies) {
            Verdict::Ran(exit) => assert_eq!(exit, "done", "items {items}"),
            Verdict::Rejected(_, text) => panic!("check rejected `extend`: {text}"),
            Verdict::Failed(why) => panic!("items {items}: {why}"),
        }
    }
}

/// Template names that exist only sometimes: `item` outside a map worker rendered as
/// empty, and a `set` made in one branch of an `{% if %}` ended the run at `error` on the
/// other path. Both are check errors now; the guarded forms run, the partial shared by a
/// map worker and another role included.
#[test]
fn a_template_name_that_exists_only_sometimes_must_be_guarded() {
    let source = r#"workflow w {
  prompts = "prompts"
}
memory { items: list[string] = ["a", "b"] }
role ask: llm {
  prompt = "ask.tera"
  output text
}
role worker: llm {
  prompt = "worker.tera"
  output text
}
start -> ask
ask -> map worker over memory.items -> done max 5
exit done
"#;
    let replies = [("ask", "ok"), ("worker", "done")];
    let shared = "{% if item is defined %}Item: {{ item }}{% else %}No item.{% endif %}\n";
    let cases: [(&str, &str, Option<&str>); 4] = [
        (
            "Item: {{ item }}\n",
            "",
            Some("rondo::template::unknown_variable"),
        ),
        (
            "{% if visit > 1 %}{% set hint = \"again\" %}{% endif %}{{ hint }}\n",
            "",
            Some("rondo::template::unknown_variable"),
        ),
        (
            "{% if visit > 1 %}{% set hint = \"again\" %}{% else %}{% set hint = \"first\" %}{% endif %}{{ hint }}\n{% include \"_item.tera\" %}",
            "{% include \"_item.tera\" %}",
            None,
        ),
        (
            "{{ item | default(value=\"none\") }}{% if item %}{{ item }}{% endif %}\n",
            "{{ item }}",
            None,
        ),
    ];
    for (ask, worker, refused) in cases {
        let prompts = [
            ("ask.tera", ask),
            (
                "worker.tera",
                if worker.is_empty() {
                    "{{ item }}\n"
                } else {
                    worker
                },
            ),
            ("_item.tera", shared),
        ];
        match (judge_text(source, &prompts, &replies), refused) {
            (Verdict::Rejected(codes, _), Some(code)) => assert_eq!(codes, [code], "{ask}"),
            (Verdict::Ran(exit), None) => assert_eq!(exit, "done", "{ask}"),
            (Verdict::Rejected(_, text), None) => panic!("{ask}: check rejected it: {text}"),
            (Verdict::Ran(exit), Some(_)) => panic!("{ask}: accepted, and ended at {exit}"),
            (Verdict::Failed(why), _) => panic!("{ask}: accepted, and {why}"),
        }
    }
}

/// `item` in an expression of a role that is not a map worker was null.
#[test]
fn item_outside_a_map_worker_is_a_check_error() {
    let source = r#"workflow w {}
memory {
  items: list[string] = ["a"]
  seen: list[any] = []
}
role each: builtin { update { seen.append(item) } }
role after: builtin { update { seen.append(item) } }
start -> map each over memory.items -> after max 5
after -> done
exit done
"#;
    match judge_text(source, &[], &[]) {
        Verdict::Rejected(codes, _) => assert_eq!(codes, ["rondo::expr::item_outside_map"]),
        Verdict::Ran(exit) => panic!("accepted, and ended at {exit}"),
        Verdict::Failed(why) => panic!("accepted, and {why}"),
    }
}

/// Checks and runs a hand-written case whose replies are given per visit and attempt:
/// (role, visit, replies of attempt 1, 2, ...).
fn judge_attempts(
    source: &str,
    prompts: &[(&str, &str)],
    replies: &[(&str, Option<u64>, &[&str])],
) -> Verdict {
    let case = Case {
        seed: 0,
        source: source.to_string(),
        prompts: prompts
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect(),
        replies: replies
            .iter()
            .map(|(r, v, t)| (r.to_string(), *v, t.iter().map(|s| s.to_string()).collect()))
            .collect(),
        omitted: Vec::new(),
        unreached: Vec::new(),
    };
    let tmp = tempfile::tempdir().unwrap();
    judge(&case, tmp.path())
}

/// Values from a reply in list arithmetic (the LLM-IDE agent's `[command] + args` with
/// `args` a string): in the replying role's own update the reply is asked again with the
/// reason, then takes its invalid route; read later, by a builtin, the run ends at
/// `invalid_output`. Never `error`.
#[test]
fn a_reply_value_of_the_wrong_kind_is_an_invalid_attempt_or_invalid_output() {
    let source = |later: &str| {
        format!(
            r#"workflow w {{
  prompts = "prompts"
}}
type Action {{
  thought: string
  action_params: map[any]
}}
memory {{
  action: Action? = null
  argv: list[any] = []
  names: list[string] = []
}}
role act: llm {{
  prompt = "act.tera"
  output json Action
  update {{
    set action = output
    set argv = [output.action_params.command] + output.action_params.args
  }}
}}
role later: builtin {{ update {{ {later} }} }}
start -> act
act -> invalid_output when act.invalid
act -> later
later -> done
exit done
"#
        )
    };
    let prompts = [(
        "act.tera",
        "Act.{% if last_error %} Rejected: {{ last_error }}{% endif %}\n",
    )];
    let bad = r#"{"thought": "t", "action_params": {"command": "defs", "args": "calc.py"}}"#;
    let good = r#"{"thought": "t", "action_params": {"command": "defs", "args": ["calc.py"]}}"#;
    let quiet = "set argv = [\"ok\"]";
    // Asked again with the reason, then applied.
    match judge_attempts(&source(quiet), &prompts, &[("act", Some(1), &[bad, good])]) {
        Verdict::Ran(exit) => assert_eq!(exit, "done"),
        Verdict::Rejected(_, text) => panic!("rejected: {text}"),
        Verdict::Failed(why) => panic!("{why}"),
    }
    // Every attempt wrong: the invalid route.
    match judge_attempts(&source(quiet), &prompts, &[("act", None, &[bad])]) {
        Verdict::Ran(exit) => assert_eq!(exit, "invalid_output"),
        Verdict::Rejected(_, text) => panic!("rejected: {text}"),
        Verdict::Failed(why) => panic!("{why}"),
    }
    // A valid reply whose `any` value a later builtin cannot add, subtract, measure or store.
    let with_command = r#"{"thought": "t", "action_params": {"command": "defs", "args": [], "n": "three", "name": 7}}"#;
    for later in [
        "set argv = [\"x\"] + memory.action.action_params.n",
        "set argv = [len(memory.action.action_params.name)]",
        "set argv = [1 - memory.action.action_params.n]",
        "names.append(memory.action.action_params.name)",
        "names.extend(memory.action.action_params.n)",
        "set names = memory.action.action_params.args + [memory.action.action_params.name]",
    ] {
        match judge_attempts(&source(later), &prompts, &[("act", None, &[with_command])]) {
            Verdict::Ran(exit) => assert_eq!(exit, "invalid_output", "{later}"),
            Verdict::Rejected(_, text) => panic!("{later}: rejected: {text}"),
            Verdict::Failed(why) => panic!("{later}: {why}"),
        }
    }
}

/// A text role has no invalid route: a reply its update cannot apply, after its retries,
/// ends the run at `invalid_output` (it ended at `error`).
#[test]
fn a_text_reply_its_update_cannot_apply_ends_at_invalid_output() {
    let source = r#"workflow w {
  prompts = "prompts"
}
memory {
  seen: any = "three"
  n: int = 0
}
role say: llm {
  prompt = "say.tera"
  output text
  update { set seen = memory.seen + 1 }
}
start -> say
say -> done
exit done
"#;
    match judge_text(source, &[("say.tera", "Say.\n")], &[("say", "hi")]) {
        Verdict::Ran(exit) => assert_eq!(exit, "invalid_output"),
        Verdict::Rejected(_, text) => panic!("rejected: {text}"),
        Verdict::Failed(why) => panic!("{why}"),
    }
}

/// A template read through a reply's `any` value: the reply may lack the field, and the
/// run ended at `error` ("Variable `act.meta.x` not found"). Unguarded, it is a check
/// error; guarded, the run ends at its exit whatever the reply holds.
#[test]
fn a_template_read_through_a_reply_value_typed_any_must_be_guarded() {
    let source = r#"workflow w {
  prompts = "prompts"
}
role act: llm {
  prompt = "act.tera"
  output json { meta: any }
}
role next: llm {
  prompt = "next.tera"
  output text
}
start -> act
act -> invalid_output when act.invalid
act -> next
next -> done
exit done
"#;
    for (next, refused) in [
        ("Meta: {{ act.meta.x }}\n", true),
        (
            "{% if act.meta.x %}Meta: {{ act.meta.x }}{% endif %}{{ act.meta.y | default(value=\"-\") }}\n",
            false,
        ),
    ] {
        for meta in [
            r#"{"meta": 5}"#,
            r#"{"meta": {"x": "y"}}"#,
            r#"{"meta": {}}"#,
        ] {
            let verdict = judge_text(
                source,
                &[("act.tera", "Act.\n"), ("next.tera", next)],
                &[("act", meta), ("next", "ok")],
            );
            match (verdict, refused) {
                (Verdict::Rejected(codes, _), true) => {
                    assert_eq!(codes, ["rondo::template::maybe_null"])
                }
                (Verdict::Ran(exit), false) => assert_eq!(exit, "done", "{meta}"),
                (Verdict::Rejected(_, text), false) => panic!("rejected: {text}"),
                (Verdict::Ran(exit), true) => panic!("{next}: accepted, ended at {exit}"),
                (Verdict::Failed(why), _) => panic!("{next} {meta}: {why}"),
            }
        }
    }
}

/// Found by the long mode (seeds 0x5eed14f1, 0x5eed1e68): a float from a reply in an
/// artifact name prints all its digits (`5e-324` is 326 characters); cut only to the
/// 240 bytes of a path component, its temporary file's name passed the system's 255 and
/// the write failed ("File name too long") depending on the process id's digits. It is cut
/// to 120 bytes like a string value.
#[test]
fn a_long_float_from_a_reply_in_an_artifact_name_is_cut() {
    let source = r#"workflow w {
  prompts = "prompts"
}
role r1: llm {
  prompt = "r1.tera"
  output json { score: float }
  artifact "named/{{ r1.score }}.txt" = output
}
start -> r1
r1 -> invalid_output when r1.invalid
r1 -> done
exit done
"#;
    for score in ["5e-324", "-1e300", "0.5"] {
        let case = Case {
            seed: 0,
            source: source.to_string(),
            prompts: vec![("r1.tera".into(), "score?\n".into())],
            replies: vec![("r1".into(), None, vec![format!(r#"{{"score": {score}}}"#)])],
            omitted: Vec::new(),
            unreached: Vec::new(),
        };
        let tmp = tempfile::tempdir().unwrap();
        match judge(&case, tmp.path()) {
            Verdict::Ran(exit) => assert_eq!(exit, "done", "{score}"),
            Verdict::Rejected(codes, _) => panic!("check rejected it: {codes:?}"),
            Verdict::Failed(why) => panic!("{score}: {why}"),
        }
        let named = tmp.path().join("runs/run/workspace/named");
        let names: Vec<String> = std::fs::read_dir(&named)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].ends_with(".txt"), "{names:?}");
        assert!(names[0].len() <= 124, "{score}: {} bytes", names[0].len());
    }
}

// ---- issue 22 §3, what the first pass left open

/// Expects `check` to refuse `source` with exactly `codes`.
fn assert_rejected(
    source: &str,
    prompts: &[(&str, &str)],
    replies: &[(&str, &str)],
    codes: &[&str],
) {
    match judge_text(source, prompts, replies) {
        Verdict::Rejected(got, text) => assert_eq!(got, codes, "{text}"),
        Verdict::Ran(exit) => panic!("check accepted it and the run ended at {exit}"),
        Verdict::Failed(why) => panic!("check accepted it and the run failed: {why}"),
    }
}

/// Expects `check` to accept `source` and the run to end at `exit`.
fn assert_ends(source: &str, prompts: &[(&str, &str)], replies: &[(&str, &str)], exit: &str) {
    match judge_text(source, prompts, replies) {
        Verdict::Ran(got) => assert_eq!(got, exit, "{prompts:?} {replies:?}"),
        Verdict::Rejected(_, text) => panic!("check rejected it: {text}"),
        Verdict::Failed(why) => panic!("{prompts:?} {replies:?}: {why}"),
    }
}

const ACT_THEN_NEXT: &str = r#"workflow w {
  prompts = "prompts"
}
role act: llm {
  prompt = "act.tera"
  output json { params: map[any], name: string, count: int, maybe: string?, items: list[string] }
}
role next: llm {
  prompt = "next.tera"
  output text
}
start -> act
act -> invalid_output when act.invalid
act -> next
next -> done
exit done
"#;

/// A template that loops over, filters, computes with, compares or joins a reply's value
/// typed `any` (`params: map[any]`) of another kind than it needs: the run ended at `error`
/// (tera's "Tried to iterate on a container ... unsupported type", "Filter `upper` was
/// called on an incorrect value", ...). It ends at `invalid_output` now, as an update of
/// such a value does; with values of the right kind it ends at its exit.
#[test]
fn a_template_given_a_reply_value_of_the_wrong_kind_ends_at_invalid_output() {
    let reply = |params: &str| {
        format!(r#"{{"params": {params}, "name": "n", "count": 2, "items": ["a"]}}"#)
    };
    let cases: [(&str, &str, &str); 8] = [
        (
            "{% if act.params.args %}{% for a in act.params.args %}- {{ a }}\n{% endfor %}{% endif %}",
            r#"{"args": 5}"#,
            r#"{"args": ["calc.py"]}"#,
        ),
        (
            "{% if act.params.args %}{% for k, v in act.params.args %}{{ k }}{% endfor %}{% endif %}",
            r#"{"args": ["a"]}"#,
            r#"{"args": {"a": 1}}"#,
        ),
        (
            "{{ act.params.text | default(value=\"\") | upper }}",
            r#"{"text": 7}"#,
            r#"{"text": "seven"}"#,
        ),
        (
            "{% if act.params.n %}{{ act.params.n + 1 }}{% endif %}",
            r#"{"n": "three"}"#,
            r#"{"n": 3}"#,
        ),
        (
            "{% if act.params.n %}{% if act.params.n > 2 %}big{% endif %}{% endif %}",
            r#"{"n": [3]}"#,
            r#"{"n": 3}"#,
        ),
        (
            "{% if act.params.text %}{{ \"T: \" ~ act.params.text }}{% endif %}",
            r#"{"text": {"nested": true}}"#,
            r#"{"text": "t"}"#,
        ),
        (
            "{{ act.params.extra | default(value=[]) | join(sep=\", \") }}",
            r#"{"extra": "calc.py"}"#,
            r#"{"extra": ["calc.py"]}"#,
        ),
        (
            "{% if act.params.n %}{% if act.params.n is odd %}odd{% endif %}{{ act.params.n | abs }}{% endif %}",
            r#"{"n": true}"#,
            r#"{"n": -3}"#,
        ),
    ];
    for (next, wrong, right) in cases {
        let prompts = [("act.tera", "Act.\n"), ("next.tera", next)];
        for (params, exit) in [(wrong, "invalid_output"), (right, "done")] {
            let reply = reply(params);
            assert_ends(
                ACT_THEN_NEXT,
                &prompts,
                &[("act", &reply), ("next", "ok")],
                exit,
            );
        }
    }
}

/// What tera evaluates on some kinds only — `+ - * / %`, `< > <= >=`, `~`, `in`, the
/// tests `odd`, `starting_with`, `containing`..., and filters missing a required argument
/// — was accepted on values of declared types, and every run ended at `error`. Each is a
/// check error now; written right, the run ends at its exit.
#[test]
fn a_template_operator_on_a_declared_type_it_cannot_take_is_a_check_error() {
    let reply = r#"{"params": {}, "name": "n", "count": 2, "items": ["a"]}"#;
    let operand = "rondo::template::operand";
    let null = "rondo::template::maybe_null";
    let filter = "rondo::template::filter_input";
    let cases: [(&str, Option<&str>); 16] = [
        ("{{ act.name + 1 }}", Some(operand)),
        ("{{ act.count * 2 }}{{ act.count % 2 }}", None),
        ("{% if act.name > 3 %}big{% endif %}", Some(operand)),
        ("{% if act.name < \"m\" %}early{% endif %}", Some(operand)),
        (
            "{% if act.count >= 2 %}two{% endif %}{% if act.name == \"n\" %}n{% endif %}",
            None,
        ),
        ("{{ \"Maybe: \" ~ act.maybe }}", Some(null)),
        (
            "{% if act.maybe %}{{ \"Maybe: \" ~ act.maybe }}{% endif %}",
            None,
        ),
        ("{{ \"Items: \" ~ act.items }}", Some(operand)),
        ("{{ \"Name: \" ~ act.name ~ act.count }}", None),
        ("{% if act.count is odd %}odd{% endif %}", None),
        ("{% if act.name is odd %}odd{% endif %}", Some(operand)),
        (
            "{% if act.count is starting_with(\"1\") %}1{% endif %}",
            Some(operand),
        ),
        ("{% if \"a\" in act.count %}a{% endif %}", Some(operand)),
        (
            "{% if \"a\" in act.items %}a{% endif %}{% if \"n\" in act.name %}n{% endif %}",
            None,
        ),
        ("{{ act.items | nth }}", Some(filter)),
        (
            "{{ act.items | nth(n=0) }}{{ act.name | replace(from=\"n\", to=\"m\") }}",
            None,
        ),
    ];
    for (next, refused) in cases {
        let prompts = [("act.tera", "Act.\n"), ("next.tera", next)];
        let replies = [("act", reply), ("next", "ok")];
        match refused {
            Some(code) => assert_rejected(ACT_THEN_NEXT, &prompts, &replies, &[code]),
            None => assert_ends(ACT_THEN_NEXT, &prompts, &replies, "done"),
        }
    }
}

/// A map the workflow fills itself (`counts: map[int]`), read by key in a template: the
/// key is absent until an update puts it, and the run ended at `error` ("Variable
/// `memory.counts.alpha` not found"); so did a computed index past a list's end and `get`
/// of a missing key. Unguarded, each is a check error; guarded, or with a default, the run
/// ends at its exit. In expressions a map's value is already optional.
#[test]
fn a_map_key_read_from_memory_must_be_guarded() {
    let source = r#"workflow w {
  prompts = "prompts"
}
memory {
  counts: map[int] = {}
  items: list[string] = ["a"]
  at: int = 3
}
role ask: llm {
  prompt = "ask.tera"
  reads = [counts, items, at]
  output text
}
role tally: builtin { update { counts.put(ask, 1) } }
start -> ask
ask -> tally
tally -> done
exit done
"#;
    let null = "rondo::template::maybe_null";
    let cases: [(&str, Option<&str>); 8] = [
        ("Count: {{ memory.counts.alpha }}", Some(null)),
        ("Count: {{ memory.counts[\"alpha\"] }}", Some(null)),
        (
            "Count: {{ memory.counts | get(key=\"alpha\") }}",
            Some(null),
        ),
        ("Item: {{ memory.items[memory.at] }}", Some(null)),
        (
            "{% if memory.counts.alpha %}{{ memory.counts.alpha }}{% endif %}{{ memory.counts.beta | default(value=0) }}",
            None,
        ),
        ("{{ memory.counts | get(key=\"alpha\", default=0) }}", None),
        (
            "{% if memory.items[memory.at] %}{{ memory.items[memory.at] }}{% endif %}",
            None,
        ),
        (
            "{% for k, v in memory.counts %}{{ k }}={{ v + 1 }}{% endfor %}",
            None,
        ),
    ];
    for (ask, refused) in cases {
        let prompts = [("ask.tera", ask)];
        let replies = [("ask", "alpha")];
        match refused {
            Some(code) => assert_rejected(source, &prompts, &replies, &[code]),
            None => assert_ends(source, &prompts, &replies, "done"),
        }
    }
    // The same read in an expression is optional: arithmetic on it needs a fallback.
    let expr = source.replace(
        "role tally: builtin { update { counts.put(ask, 1) } }",
        "role tally: builtin { update { counts.put(ask, memory.counts.alpha + 1) } }",
    );
    assert_rejected(
        &expr,
        &[("ask.tera", "Ask.\n")],
        &[("ask", "alpha")],
        &["rondo::expr::optional_operand"],
    );
    let fallback = source.replace(
        "role tally: builtin { update { counts.put(ask, 1) } }",
        "role tally: builtin { update { counts.put(ask, (memory.counts.alpha ?? 0) + 1) } }",
    );
    assert_ends(
        &fallback,
        &[("ask.tera", "Ask.\n")],
        &[("ask", "alpha")],
        "done",
    );
}

/// `item` in an expression was typed `any`, so `check` let a map worker over a list of
/// strings add 1 to it or store it as a number, and the run ended at `invalid_output`,
/// blaming the model for the workflow's fault. It has the type of the list's items now.
#[test]
fn item_in_an_expression_has_the_type_of_the_list_mapped_over() {
    let source = |update: &str| {
        format!(
            r#"workflow w {{}}
type Task {{ title: string, size: int }}
memory {{
  items: list[string] = ["a", "b"]
  tasks: list[Task] = [{{ title: "t", size: 2 }}]
  total: int = 0
  titles: list[string] = []
}}
role each: builtin {{ update {{ {update} }} }}
role task: builtin {{ update {{ set total = memory.total + item.size }} }}
role after: builtin {{}}
start -> map each over memory.items -> after max 5
after -> map task over memory.tasks -> done max 5
exit done
"#
        )
    };
    let mismatch = "rondo::expr::type_mismatch";
    for (update, refused) in [
        ("set total = item + 1", Some(mismatch)),
        ("set total = item", Some("rondo::update::type_mismatch")),
        ("set total = len(item)", None),
        ("titles.append(item)", None),
        ("set total = item.size", Some("rondo::expr::unknown_field")),
    ] {
        let text = source(update);
        match refused {
            Some(code) => assert_rejected(&text, &[], &[], &[code]),
            None => assert_ends(&text, &[], &[], "done"),
        }
    }
}
