use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{CliError, Code, load_workflow, progress_mode, runtime};
use crate::check::Checked;
use crate::compile::BUILTIN_EXITS;
use crate::run::{self, Interpreter, RunOptions, progress};

/// Run a workflow.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo run workflows/ds_star.rondo -i question='Write hello.txt' --run-id hello\n  rondo run workflows/micro_agent.rondo --provider scripted -i question='6*7?'\n  rondo run workflows/ds_star.rondo -i question='Write hello.txt' \\\n    --script workflows/scripts/ds_star_hello.yaml\n  rondo run workflows/ds_star.rondo --replay-from runs/hello -i question=hi\n\nWith `--provider scripted` (or a workflow whose provider is scripted) and no `--script`, the replies are the workflow's own default set (`script = ...` in its header): the five reference workflows run so with no API key.\n\nWhen the run ends, its answer (the workflow's `answer`, else the last role output) is printed on standard output, and where its records and files are on standard error: `rondo run -q ... > answer.txt` keeps the answer alone.\n\nExit code: the exit's code (success 0), 3 limit, 2 error, 4 invalid_output, 130 interrupted."
)]
pub struct Args {
    file: PathBuf,
    /// An input value: `--input name=value` (repeatable; JSON for non-string inputs).
    #[arg(long = "input", short = 'i', value_parser = parse_key_value)]
    inputs: Vec<(String, String)>,
    /// Use this provider profile for every llm role.
    #[arg(long)]
    provider: Option<String>,
    /// Replies for the scripted provider (YAML); default: the workflow's own (`script` in its header).
    #[arg(long)]
    script: Option<PathBuf>,
    /// Re-execute offline with the LLM replies recorded in this run directory.
    #[arg(long)]
    replay_from: Option<PathBuf>,
    /// Folder holding run directories.
    #[arg(long, default_value = "runs")]
    run_dir: PathBuf,
    /// Name of the run (default: a timestamp): a plain folder name.
    #[arg(long, value_parser = parse_run_id)]
    run_id: Option<String>,
    /// Work in this existing folder (it outlives the run); the run's records go to
    /// `DIR/.rondo/runs/<run-id>/`, out of the tools' reach.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Keep Docker containers after the run, for debugging.
    #[arg(long)]
    keep_env: bool,
    /// Run local tools even where the kernel cannot confine them (no Landlock): they
    /// can then write anything you can, the run's records included.
    #[arg(long, env = "RONDO_UNCONFINED_TOOLS", value_parser = clap::builder::FalseyValueParser::new())]
    unconfined_tools: bool,
    /// Write no run directory files (benchmarks).
    #[arg(long)]
    no_checkpoint: bool,
    /// No progress output: a run that succeeds prints only its answer.
    #[arg(long, short)]
    quiet: bool,
    /// Where Docker environments run: docker (this machine's engine), process (runner
    /// processes on this machine, no isolation: benchmarks, tests), swarm, kubernetes.
    #[arg(long, default_value = "docker", value_name = "ENGINE")]
    engine: rondo_env::SandboxEngine,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let options = RunOptions {
        runs_root: args.run_dir,
        run_id: args.run_id,
        workspace: args.workspace,
        base_dir: None,
        inputs: args.inputs,
        provider: args.provider,
        script: args.script,
        replay_from: args.replay_from,
        checkpoints: !args.no_checkpoint,
        progress: progress_mode(args.quiet),
        keep_env: args.keep_env,
        unconfined_tools: args.unconfined_tools,
        pool: None,
        no_demos: false,
        image: None,
        engine: args.engine,
    };
    let workflow = load_workflow(&args.file)?;
    runtime()?.block_on(async {
        let (interp, state) = Interpreter::start(&workflow, &options).map_err(CliError::new)?;
        Ok(report_outcome(
            &drive_with_ctrl_c(interp, state).await,
            &options,
            &workflow,
        ))
    })
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("`{text}` is not `name=value`")),
    }
}

fn parse_run_id(text: &str) -> Result<String, String> {
    run::rundir::check_run_id(text).map(|()| text.to_string())
}

/// Drives the run; Ctrl-C interrupts it (it ends at `interrupted`, its records whole).
pub(super) async fn drive_with_ctrl_c(
    interp: Interpreter<'_>,
    state: run::RunState,
) -> run::Outcome {
    let (flag, notify) = interp.interrupter();
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            notify.notify_waiters();
        }
    });
    let outcome = interp.drive(state).await;
    watcher.abort();
    outcome
}

/// What `rondo run` and `rondo resume` print when the run ends: the run's answer on
/// standard output (so `rondo run ... > answer.txt` keeps it), and on standard error where
/// its records and files are. `-q` keeps standard error quiet for a run that succeeded.
/// The run's exit code.
pub(super) fn report_outcome(
    outcome: &run::Outcome,
    options: &RunOptions,
    workflow: &Checked,
) -> Code {
    let quiet = options.progress == progress::Mode::Quiet;
    // An engine exit (limit, error, interrupted, invalid_output) is no answer: the reason is.
    let declared = !BUILTIN_EXITS.iter().any(|(name, _)| *name == outcome.exit);
    let redactor = run::redact::for_workflow(workflow);
    if declared {
        print_answer(&answer(workflow, outcome), &redactor);
    }
    if quiet && outcome.exit_code == 0 {
        return 0;
    }
    if quiet {
        errln!(
            "exit `{}`: {}",
            outcome.exit,
            redactor.redact(&outcome.reason)
        );
    }
    errln!("run directory: {}", outcome.run_dir.display());
    errln!(
        "workspace: {}{}",
        outcome.workspace.display(),
        listing(&outcome.workspace, &redactor)
    );
    outcome.exit_code
}

/// The run's answer as `rondo eval` scores it, but for a tool role's output (a workflow
/// without `answer` that ends on a tool): what the role shows (`shown`, after its `show`),
/// not the whole result record with its captured streams.
fn answer(workflow: &Checked, outcome: &run::Outcome) -> Value {
    let tool = |n: petgraph::graph::NodeIndex| {
        matches!(
            workflow.role(n).map(|r| &r.kind),
            Some(crate::compile::RoleKind::Tool(_))
        )
    };
    match crate::eval::last_output_role(workflow, &outcome.state) {
        Some(n) if workflow.answer.is_none() && tool(n) => outcome
            .state
            .outputs
            .get(&n.index())
            .map_or(Value::Null, |r| r["shown"].clone()),
        _ => crate::eval::answer(workflow, &outcome.state, &outcome.workspace),
    }
}

/// The answer as text: a string as it is, any other value as JSON, null
/// as nothing; secrets redacted as everywhere a run shows, and on a terminal, control
/// characters a model sent shown, not obeyed.
fn print_answer(answer: &Value, redactor: &rondo_env::Redactor) {
    let text = match answer {
        Value::Null => return,
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    };
    if text.trim().is_empty() {
        return;
    }
    let text = redactor.redact(&text).into_owned();
    let text = if std::io::stdout().is_terminal() {
        progress::neutralise(&text)
    } else {
        text
    };
    if text.ends_with('\n') {
        out!("{text}");
    } else {
        outln!("{text}");
    }
}

/// ` (a.md, b.json, logs/, … 4 more)`: what the workspace holds, the run's records left out;
/// a tool names the files, so the names are redacted like its output.
fn listing(workspace: &Path, redactor: &rondo_env::Redactor) -> String {
    const SHOWN: usize = 6;
    let Ok(entries) = std::fs::read_dir(workspace) else {
        return String::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != ".rondo")
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.file_type() {
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    if names.is_empty() {
        return " (empty)".to_string();
    }
    names.sort();
    let more = names.len().saturating_sub(SHOWN);
    names.truncate(SHOWN);
    let names = progress::neutralise(&redactor.redact(&names.join(", ")));
    match more {
        0 => format!(" ({names})"),
        n => format!(" ({names}, … {n} more)"),
    }
}
