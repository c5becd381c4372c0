use std::path::PathBuf;

use super::{CliError, Code};
use crate::run::rundir::{self, RunStatus};

/// List runs with their status.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo runs --run-dir runs\n  rondo runs --workspace ./project"
)]
pub struct Args {
    #[arg(long, default_value = "runs")]
    run_dir: PathBuf,
    /// List the runs made with `rondo run --workspace DIR` (kept in `DIR/.rondo/runs`).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let root = args
        .workspace
        .as_deref()
        .map_or(args.run_dir, rundir::runs_in_workspace);
    let Ok(runs) = rundir::list_runs(&root) else {
        outln!("no runs in {}", root.display());
        return Ok(0);
    };
    outln!(
        "{:<28} {:<14} {:<12} {:<12} {:>6} {:>9}  started",
        "run",
        "workflow",
        "status",
        "exit",
        "steps",
        "tokens"
    );
    for run in runs {
        let info = &run.info;
        // `running` in run.json: going on now, or ended without recording its end.
        let status = if info.status == RunStatus::Running {
            "crashed?"
        } else {
            info.status.as_str()
        };
        outln!(
            "{:<28} {:<14} {:<12} {:<12} {:>6} {:>9}  {}",
            info.run_id,
            info.workflow,
            status,
            info.exit.clone().unwrap_or_default(),
            run.steps,
            info.totals.input_tokens + info.totals.output_tokens,
            info.started_at
        );
    }
    Ok(0)
}
