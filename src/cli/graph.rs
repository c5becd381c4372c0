use std::path::PathBuf;

use clap::ValueEnum;

use super::{CliError, Code, load_workflow};
use crate::render;

/// Draw a workflow's graph.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo graph workflows/ds_star.rondo > ds_star.dot\n  rondo graph workflows/ds_star.rondo --format svg -o ds_star.svg"
)]
pub struct Args {
    file: PathBuf,
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    format: GraphFormat,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphFormat {
    Dot,
    Mermaid,
    Svg,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let workflow = load_workflow(&args.file)?;
    let format = match args.format {
        GraphFormat::Dot => render::Format::Dot,
        GraphFormat::Mermaid => render::Format::Mermaid,
        GraphFormat::Svg => render::Format::Svg,
    };
    let text = render::render(&workflow, format)?;
    match args.output {
        Some(out) => std::fs::write(&out, text)
            .map_err(|e| CliError::new(format!("cannot write {}: {e}", out.display())))?,
        None => out!("{text}"),
    }
    Ok(0)
}
