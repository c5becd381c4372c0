use std::path::PathBuf;

use super::{CliError, Code, load_workflow, runtime};
use crate::run::testing;

/// Run the `test` blocks of workflow files.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo test workflows/*.rondo\n  rondo test workflows/ds_star.rondo --filter hello"
)]
pub struct Args {
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Only tests whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Where test runs are written (kept for inspection).
    #[arg(long)]
    run_dir: Option<PathBuf>,
}

/// A file that does not check counts as one failure; the others still run.
pub fn run(args: Args) -> Result<Code, CliError> {
    let root = args
        .run_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("rondo-test-{}", std::process::id())));
    let (mut passed, mut failed) = (0, 0);
    let rt = runtime()?;
    for path in &args.files {
        let workflow = match load_workflow(path) {
            Ok(w) => w,
            Err(e) => {
                e.report();
                failed += 1;
                continue;
            }
        };
        for case in workflow
            .tests
            .iter()
            .filter(|c| args.filter.as_deref().is_none_or(|f| c.name.contains(f)))
        {
            let report = rt.block_on(testing::run_test(&workflow, case, &root));
            if report.passed() {
                passed += 1;
                outln!("test {}::{} ... ok", path.display(), report.name);
            } else {
                failed += 1;
                outln!("test {}::{} ... FAILED", path.display(), report.name);
                for f in &report.failures {
                    outln!("    {f}");
                }
                outln!("    run directory: {}", report.run_dir.display());
            }
        }
    }
    outln!("\n{passed} passed, {failed} failed");
    Ok(Code::from(failed > 0))
}
