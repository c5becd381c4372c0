use std::path::PathBuf;
use std::sync::Arc;

use super::{CliError, Code, load_workflow, progress_mode, render_problems, runtime_error};
use crate::eval::{self, batch, optimize};
use crate::run;

/// Bootstrap few-shot demos for an llm role from the cases of a training set that pass.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Runs the dataset as `rondo eval` does, without demos (OUT/before); of the cases that passed, the role's first accepted reply with the run's inputs is a demo; a seeded choice keeps at most --max-demos; they are written to --out (default: the role's `demos` file) and the dataset runs again with them (OUT/after). docs/optimize.md has the details.\n\nExample:\n  rondo optimize tests/fixtures/optimize/qa.rondo --provider scripted \\\n    --dataset tests/fixtures/optimize/train.jsonl --role answer \\\n    --max-demos 2 --out evals/qa_demos.json --runs evals/qa-optimize"
)]
pub struct Args {
    workflow: PathBuf,
    /// The training cases: JSON Lines, as for `rondo eval`.
    #[arg(long)]
    dataset: PathBuf,
    /// Held-out cases the before and after scores are measured on (default: the training set).
    #[arg(long)]
    dev: Option<PathBuf>,
    /// The llm role whose replies become demos.
    #[arg(long)]
    role: String,
    /// Keep at most this many demos.
    #[arg(long, default_value_t = 4)]
    max_demos: usize,
    /// Seed of the choice among the passing cases.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The demos file to write (default: the role's `demos` file).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The results folder of the two evals (default: evals/<workflow>-optimize-<time>).
    #[arg(long)]
    runs: Option<PathBuf>,
    /// Use this provider profile for every llm role of every run.
    #[arg(long)]
    provider: Option<String>,
    /// Replies for the scripted provider (YAML), for every run.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Runs at a time.
    #[arg(long, short = 'c')]
    concurrency: Option<usize>,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let workflow = load_workflow(&args.workflow).map_err(|e| e.with_code(2))?;
    let demos = optimize::demos_file(&workflow, &args.role, args.out)?;
    let cases = eval::dataset::read_dataset(&args.dataset, &workflow, &Default::default(), None)
        .map_err(|p| CliError::shown(render_problems(&p), 2))?;
    let dev = match &args.dev {
        Some(path) => Some(
            eval::dataset::read_dataset(path, &workflow, &Default::default(), None)
                .map_err(|p| CliError::shown(render_problems(&p), 2))?,
        ),
        None => None,
    };
    let out = args
        .runs
        .unwrap_or_else(|| batch::default_optimize_dir(&args.workflow));
    batch::refuse_existing_optimize(&out)?;
    let concurrency = args
        .concurrency
        .unwrap_or(batch::DEFAULT_CONCURRENCY)
        .max(1);
    let job = eval::Eval {
        workflow: Arc::new(workflow),
        cases,
        weights: eval::Rubrics::default().weights(),
        setup: eval::Setup {
            workflow: batch::absolute(&args.workflow),
            dataset: batch::absolute(&args.dataset),
            rubrics: None,
            provider: args.provider,
            script: args.script.as_deref().map(batch::absolute),
            concurrency,
            engine: rondo_env::SandboxEngine::default(),
        },
        out: out.clone(),
        progress: progress_mode(args.quiet),
        no_demos: true,
    };
    let rt = run::runtime_for_runs(concurrency).map_err(runtime_error)?;
    let outcome = rt.block_on(optimize::optimize(
        job,
        dev,
        &args.role,
        args.max_demos,
        args.seed,
        &demos,
    ))?;
    out!("{}", optimize::render(&outcome));
    errln!("demos: {}\nresults: {}", demos.display(), out.display());
    Ok(0)
}
