use std::path::PathBuf;

use super::run::{drive_with_ctrl_c, report_outcome};
use super::{CliError, Code, load_workflow, progress_mode, runtime};
use crate::run::{Interpreter, RunOptions, rundir};

/// Continue a stopped or crashed run from its last checkpoint.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  rondo resume runs/20261122-091630-ab12")]
pub struct Args {
    run: PathBuf,
    /// No progress output: a run that succeeds prints only its answer.
    #[arg(long, short)]
    quiet: bool,
    /// Run local tools even where the kernel cannot confine them (see `rondo run --help`).
    #[arg(long, env = "RONDO_UNCONFINED_TOOLS", value_parser = clap::builder::FalseyValueParser::new())]
    unconfined_tools: bool,
    /// Where Docker environments run, as for `rondo run` (a run stopped because its Swarm
    /// node was lost goes on in a new sandbox on another node).
    #[arg(long, default_value = "docker", value_name = "ENGINE")]
    engine: rondo_env::SandboxEngine,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let options = RunOptions {
        progress: progress_mode(args.quiet),
        unconfined_tools: args.unconfined_tools,
        engine: args.engine,
        ..RunOptions::default()
    };
    let info = rundir::read_info(&args.run)?;
    let workflow = load_workflow(&info.workflow_path)?;
    if let Some(note) = rundir::outside_workspace_note(&args.run, &info) {
        errln!("note: {note}");
    }
    runtime()?.block_on(async {
        let (interp, state) =
            Interpreter::resume(&workflow, &args.run, &options).map_err(CliError::new)?;
        Ok(report_outcome(
            &drive_with_ctrl_c(interp, state).await,
            &options,
            &workflow,
        ))
    })
}
