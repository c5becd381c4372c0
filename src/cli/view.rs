use std::path::PathBuf;

use super::{CliError, Code};

/// Write a run as one self-contained HTML page: its graph with the path taken, a step
/// timeline, prompts, replies, tool calls and totals. It opens from disk, offline.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo run workflows/ds_star.rondo -i question='Write hello.txt' --run-id hello\n  rondo view runs/hello -o hello.html\n\nWithout -o the page is written to view.html in the run directory. `rondo serve` serves the same page at /, live."
)]
pub struct Args {
    run: PathBuf,
    /// Where to write the page.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let page = crate::view::render(&args.run)?;
    let out = args.output.unwrap_or_else(|| args.run.join("view.html"));
    std::fs::write(&out, page)
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", out.display())))?;
    outln!("wrote {}", out.display());
    Ok(0)
}
