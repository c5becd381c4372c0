use std::path::PathBuf;

use super::{CliError, Code};
use crate::run::replay;

/// Show a finished or stopped run step by step, or one record of a JSONL file.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo replay runs/20261122-091630-ab12\n  rondo replay runs/20261122-091630-ab12 --full\n  rondo replay --path traces/20261122-091630-ab12.jsonl --index -1"
)]
pub struct Args {
    #[arg(required_unless_present = "path", conflicts_with = "path")]
    run: Option<PathBuf>,
    /// Print prompts and replies in full.
    #[arg(long)]
    full: bool,
    /// A JSONL file (a trace written with `artifact ... +=`): print one record.
    #[arg(long, value_name = "FILE")]
    path: Option<PathBuf>,
    /// Which record of `--path`: 0 is the first, -1 the last.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true, requires = "path")]
    index: i64,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let text = match (args.run, args.path) {
        (_, Some(path)) => replay::record(&path, args.index)?,
        (Some(run), None) => replay::render(&run, args.full)?,
        (None, None) => return Err(CliError::new("give a run folder, or --path FILE")),
    };
    out!("{text}");
    Ok(0)
}
