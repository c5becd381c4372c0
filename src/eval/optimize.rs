//! `rondo optimize`: bootstrap few-shot demos (DSPy's `BootstrapFewShot`). The training
//! set runs as an eval without demos; of the cases that passed, the role's first accepted
//! reply and the run's inputs are demos; a seeded choice keeps at most N; the held-out
//! cases (`--dev`, else the training set) are scored without and with them.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Eval, RUNS_DIR, Report};
use crate::compile::{RoleKind, Workflow};
use crate::run::demos;
use crate::run::events::Event;
use crate::run::rundir;

/// The demos the passing cases of `report` give, in dataset order: the run's inputs and
/// `role`'s first accepted reply. `path` inputs are left out: they name folders of this
/// machine (a traces folder, the demos file itself), which a demo must not carry.
pub fn candidates(report: &Report, out: &Path, role: &str, workflow: &Workflow) -> Vec<Value> {
    let host_paths: Vec<&str> = workflow
        .inputs
        .iter()
        .filter(|i| i.path)
        .map(|i| i.name.as_str())
        .collect();
    report
        .results
        .iter()
        .filter(|r| r.passed)
        .filter_map(|r| {
            let dir = out.join(RUNS_DIR).join(&r.run_id);
            let info = rundir::read_info(&dir).ok()?;
            let journal = rundir::read_journal(&dir).ok()?;
            let reply = journal.entries.into_iter().find_map(|e| match e.event {
                Event::LlmResponse(r) if r.call.role == role => Some(r.call.raw),
                _ => None,
            })?;
            let mut inputs = info.inputs;
            inputs.retain(|name, _| !host_paths.contains(&name.as_str()));
            Some(json!({"inputs": inputs, "reply": reply}))
        })
        .collect()
}

/// At most `max` of `items`, chosen by a seeded shuffle, kept in their first order: the
/// same items and seed give the same choice on every machine.
pub fn choose(items: Vec<Value>, max: usize, seed: u64) -> Vec<Value> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    let mut state = seed;
    // Fisher-Yates with splitmix64: fixed, unlike a library's default generator.
    for i in (1..order.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        order.swap(i, (z % (i as u64 + 1)) as usize);
    }
    let mut kept: Vec<usize> = order.into_iter().take(max).collect();
    kept.sort_unstable();
    kept.into_iter().map(|i| items[i].clone()).collect()
}

/// Writes the demos as a JSON list, making the folders it needs.
pub fn write(path: &Path, demos: &[Value]) -> Result<(), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(demos).unwrap_or_default() + "\n";
    rundir::write_atomic(path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// What `rondo optimize` did.
pub struct Outcome {
    pub before: Report,
    pub after: Report,
    pub candidates: usize,
    pub chosen: usize,
    /// The scores are of held-out cases (`--dev`), not of the training set.
    pub held_out: bool,
}

/// Runs the training set without demos in `OUT/train`, writes the demos chosen from its
/// passing cases to `demos`, then scores the held-out cases `dev` without demos in
/// `OUT/before` and with them in `OUT/after` (which reads them when `demos` is the role's
/// file). Without `dev` the training set's own runs are the "before", and it runs again.
pub async fn optimize(
    train: Eval,
    dev: Option<Vec<super::dataset::Case>>,
    role: &str,
    max: usize,
    seed: u64,
    demos: &Path,
) -> Result<Outcome, String> {
    let out: PathBuf = train.out.clone();
    let held_out = dev.is_some();
    let scored = dev.unwrap_or_else(|| train.cases.clone());
    let after = Eval {
        workflow: train.workflow.clone(),
        cases: scored.clone(),
        weights: train.weights,
        setup: train.setup.clone(),
        out: out.join("after"),
        progress: train.progress,
        no_demos: false,
    };
    let before_dev = held_out.then(|| Eval {
        workflow: train.workflow.clone(),
        cases: scored,
        weights: train.weights,
        setup: train.setup.clone(),
        out: out.join("before"),
        progress: train.progress,
        no_demos: true,
    });
    let workflow = train.workflow.clone();
    let train = Eval {
        out: out.join(if held_out { "train" } else { "before" }),
        no_demos: true,
        ..train
    };
    let train_out = train.out.clone();
    let trained = train.run().await?;
    let found = candidates(&trained, &train_out, role, &workflow);
    let candidates = found.len();
    let chosen = choose(found, max, seed);
    write(demos, &chosen)?;
    let before = match before_dev {
        Some(eval) => eval.run().await?,
        None => trained,
    };
    let after = after.run().await?;
    Ok(Outcome {
        before,
        after,
        candidates,
        chosen: chosen.len(),
        held_out,
    })
}

/// The metrics before and after, side by side.
pub fn render(outcome: &Outcome) -> String {
    let mut out = format!("{:<18} {:>12} {:>12}\n", "metric", "before", "after");
    for ((name, b), (_, a)) in outcome
        .before
        .summary
        .rows()
        .into_iter()
        .zip(outcome.after.summary.rows())
    {
        out.push_str(&format!("{name:<18} {b:>12} {a:>12}\n"));
    }
    out.push_str(&format!(
        "\n{} demos chosen of {} passing cases; scored on {}\n",
        outcome.chosen,
        outcome.candidates,
        if outcome.held_out {
            "the held-out cases (--dev)"
        } else {
            "the training set itself (give --dev for held-out cases)"
        }
    ));
    out
}

/// The file the demos of `role` go to: `given`, else the role's own `demos` file.
pub fn demos_file(
    workflow: &Workflow,
    role: &str,
    given: Option<PathBuf>,
) -> Result<PathBuf, String> {
    let llm = workflow.roles().find_map(|(i, r)| match &r.kind {
        RoleKind::Llm(l) if workflow.node(i).name == role => Some(l),
        _ => None,
    });
    let Some(llm) = llm else {
        return Err(format!(
            "`{role}` is not an llm role of {}",
            workflow.path.display()
        ));
    };
    given.or_else(|| demos::path(workflow, llm)).ok_or_else(|| {
        format!(
            "role `{role}` takes no demos: give it `demos = \"opt/{role}_demos.json\"` or pass --out"
        )
    })
}
