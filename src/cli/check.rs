use std::path::PathBuf;

use clap::ValueEnum;

use super::{CliError, Code, stderr_color};
use crate::check::{CheckOptions, load_checked};
use crate::diagnostics;

/// Check workflow files: names, types, routing, loops, templates, tools, and (unless
/// --offline) the environment.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The environment tier checks that the API keys the providers need are set. A key that is not set is a warning: the file is sound, but `rondo run` will not start without the key.\n\nExamples:\n  rondo check workflows/*.rondo                        # keys not set: warnings\n  rondo check --offline workflows/*.rondo              # no environment tier\n  rondo check --deny-warnings workflows/ds_star.rondo  # CI: warnings fail too\n  rondo check --format json --offline workflows/iter.rondo\n\nExit code: 0 clean or warnings only, 1 errors (or warnings with --deny-warnings), 2 unreadable file."
)]
pub struct Args {
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
    format: OutputFormat,
    /// Fail (exit 1) on warnings too, such as an API key that is not set.
    #[arg(long)]
    deny_warnings: bool,
    /// Skip the environment tier (the API keys the providers need are set).
    #[arg(long)]
    offline: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Human,
    Json,
}

/// Every file is checked, whatever the others gave: the worst result is the exit code.
pub fn run(args: Args) -> Result<Code, CliError> {
    let options = CheckOptions {
        offline: args.offline,
    };
    let color = stderr_color();
    let mut code = 0;
    let mut json_out = Vec::new();
    for path in &args.files {
        let (file, diags, summary) = match load_checked(path, &options) {
            Ok((file, loaded)) => {
                // Freeing a large tree and graph node by node only delays the exit: the
                // process ends right after reporting, and the OS takes the memory back at once.
                std::mem::forget(loaded.ast);
                std::mem::forget(loaded.checked);
                (file, loaded.diagnostics, loaded.summary)
            }
            Err(e) => {
                code = code.max(CliError::new(e).report());
                continue;
            }
        };
        let sorted = diags.sorted();
        let failed = diags.has_errors() || (args.deny_warnings && diags.warning_count() > 0);
        if failed {
            code = code.max(1);
        }
        match args.format {
            OutputFormat::Human => {
                if !sorted.is_empty() {
                    err!("{}", diagnostics::render_human(&file, &sorted, color, 100));
                }
                if diags.has_errors() {
                    errln!(
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
                    outln!("{mark} {}: {}", path.display(), summary.line());
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
    if args.format == OutputFormat::Json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json_out).unwrap_or_default()
        );
    }
    Ok(code)
}
