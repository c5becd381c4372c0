//! The command line: argument parsing and dispatch only.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::check::{self, CheckOptions};
use crate::compile;
use crate::diagnostics::{self, Diagnostics};
use crate::render;
use crate::source::SourceFile;

#[derive(Parser, Debug)]
#[command(
    name = "rondo",
    version,
    about = "A workflow engine for LLM-agent systems: check, draw and run .rondo workflows",
    after_help = "Examples:\n  rondo check workflows/ds_star.rondo\n  rondo graph workflows/iter.rondo --format mermaid\n  rondo run workflows/ds_star.rondo --input question='write hello.txt'\n  rondo test workflows/*.rondo"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check workflow files: names, types, routing, loops, templates, tools.
    #[command(
        after_help = "Examples:\n  rondo check workflows/*.rondo\n  rondo check --format json --offline workflows/iter.rondo\n\nExit code: 0 clean, 1 errors (or warnings with --deny-warnings), 2 unreadable file."
    )]
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
        format: OutputFormat,
        /// Treat warnings as errors.
        #[arg(long)]
        deny_warnings: bool,
        /// Skip the environment tier (provider API keys present).
        #[arg(long)]
        offline: bool,
    },
    /// Draw a workflow's graph.
    #[command(
        after_help = "Examples:\n  rondo graph workflows/ds_star.rondo > ds_star.dot\n  rondo graph workflows/ds_star.rondo --format svg -o ds_star.svg"
    )]
    Graph {
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
        format: GraphFormat,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Print the compiled workflow.
    #[command(
        after_help = "Example:\n  rondo dump workflows/iter.rondo --format json | jq '.routes | length'"
    )]
    Dump {
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = DumpFormat::Json)]
        format: DumpFormat,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Human,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphFormat {
    Dot,
    Mermaid,
    Svg,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpFormat {
    Json,
}

pub fn main_entry() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            files,
            format,
            deny_warnings,
            offline,
        } => cmd_check(&files, format, deny_warnings, offline),
        Command::Graph {
            file,
            format,
            output,
        } => cmd_graph(&file, format, output),
        Command::Dump { file, .. } => cmd_dump(&file),
    }
}

/// Reads, compiles and checks one file.
pub fn load_checked(
    path: &std::path::Path,
    options: &CheckOptions,
) -> Result<(SourceFile, compile::Workflow, Diagnostics, check::Summary), String> {
    let file =
        SourceFile::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let (workflow, mut diags) = compile::load(&file);
    let (more, summary) = check::check(&workflow, diags.has_errors(), options);
    diags.extend(more);
    Ok((file, workflow, diags, summary))
}

fn cmd_check(files: &[PathBuf], format: OutputFormat, deny_warnings: bool, offline: bool) -> i32 {
    let options = CheckOptions { offline };
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut code = 0;
    let mut json_out = Vec::new();
    for path in files {
        let (file, diags, summary) = match load_checked(path, &options) {
            Ok((file, _, diags, summary)) => (file, diags, summary),
            Err(e) => {
                eprintln!("error: {e}");
                code = code.max(2);
                continue;
            }
        };
        let sorted = diags.sorted();
        let failed = diags.has_errors() || (deny_warnings && diags.warning_count() > 0);
        if failed {
            code = code.max(1);
        }
        match format {
            OutputFormat::Human => {
                if !sorted.is_empty() {
                    eprint!("{}", diagnostics::render_human(&file, &sorted, color, 100));
                }
                if diags.has_errors() {
                    eprintln!(
                        "x {}: {} error(s), {} warning(s)",
                        path.display(),
                        diags.error_count(),
                        diags.warning_count()
                    );
                } else {
                    let mark = if diags.warning_count() > 0 {
                        "~"
                    } else {
                        "√"
                    };
                    println!("{mark} {}: {}", path.display(), summary.line());
                }
            }
            OutputFormat::Json => {
                json_out.push(serde_json::json!({
                    "file": path.display().to_string(),
                    "ok": !failed,
                    "errors": diags.error_count(),
                    "warnings": diags.warning_count(),
                    "diagnostics": diagnostics::to_json(&file, &sorted),
                    "summary": summary,
                }));
            }
        }
    }
    if format == OutputFormat::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json_out).unwrap_or_default()
        );
    }
    code
}

fn compiled_or_report(path: &std::path::Path) -> Result<compile::Workflow, i32> {
    let options = CheckOptions { offline: true };
    match load_checked(path, &options) {
        Ok((file, workflow, diags, _)) => {
            if diags.has_errors() {
                let color = std::io::stderr().is_terminal();
                eprint!(
                    "{}",
                    diagnostics::render_human(&file, &diags.sorted(), color, 100)
                );
                eprintln!(
                    "x {}: fix the errors above first (rondo check)",
                    path.display()
                );
                return Err(1);
            }
            Ok(workflow)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(2)
        }
    }
}

fn cmd_graph(path: &std::path::Path, format: GraphFormat, output: Option<PathBuf>) -> i32 {
    let workflow = match compiled_or_report(path) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let format = match format {
        GraphFormat::Dot => render::Format::Dot,
        GraphFormat::Mermaid => render::Format::Mermaid,
        GraphFormat::Svg => render::Format::Svg,
    };
    match render::render(&workflow, format) {
        Ok(text) => match output {
            Some(out) => match std::fs::write(&out, text) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: cannot write {}: {e}", out.display());
                    2
                }
            },
            None => {
                print!("{text}");
                0
            }
        },
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

fn cmd_dump(path: &std::path::Path) -> i32 {
    match compiled_or_report(path) {
        Ok(workflow) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&workflow).unwrap_or_default()
            );
            0
        }
        Err(code) => code,
    }
}
