use std::path::PathBuf;

use clap::ValueEnum;

use super::{CliError, Code, load_workflow};

/// Print the compiled workflow.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  rondo dump workflows/iter.rondo --format json | jq '.routes | length'"
)]
pub struct Args {
    file: PathBuf,
    #[arg(long, value_enum, default_value_t = DumpFormat::Json)]
    format: DumpFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpFormat {
    Json,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let workflow = load_workflow(&args.file)?;
    outln!(
        "{}",
        serde_json::to_string_pretty(&*workflow).unwrap_or_default()
    );
    Ok(0)
}
