use std::path::PathBuf;
use std::sync::Arc;

use super::{CliError, Code, input_problems, load_workflow, progress_mode, runtime_error};
use crate::eval::{self, batch};
use crate::run;

/// Evaluate a workflow on a dataset: one run per case, scored against its expectations.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "A dataset is JSON Lines, one case a line: {\"id\": \"c1\", \"inputs\": {...}, \"expect\": {\"contains\": \"...\", \"keys\": [...], \"tools\": [...], \"checks\": [\"<rondo expression>\"]}}. The results folder holds runs/, cases.jsonl (one result a case) and summary.json (the metrics). docs/eval.md has the details.\n\nExamples:\n  rondo eval workflows/micro_agent.rondo --provider scripted \\\n    --dataset workflows/evals/micro_agent.jsonl --out evals/micro\n  rondo eval --resume evals/micro\n  rondo eval workflows/micro_agent.rondo --provider scripted -c 8 \\\n    --dataset workflows/evals/micro_agent.jsonl \\\n    --rubrics workflows/evals/micro_agent_rubrics.yaml --out evals/rubric\n\nExit code: 0 every case passed, 1 some failed or did not finish, 2 an unreadable or bad dataset, rubrics or workflow."
)]
pub struct Args {
    #[arg(required_unless_present = "resume")]
    workflow: Option<PathBuf>,
    /// The cases: JSON Lines.
    #[arg(long, required_unless_present = "resume")]
    dataset: Option<PathBuf>,
    /// Weights and expectations by default and by case (YAML).
    #[arg(long)]
    rubrics: Option<PathBuf>,
    /// Runs at a time.
    #[arg(long, short = 'c')]
    concurrency: Option<usize>,
    /// Use this provider profile for every llm role of every run.
    #[arg(long)]
    provider: Option<String>,
    /// Replies for the scripted provider (YAML), for every run.
    #[arg(long)]
    script: Option<PathBuf>,
    /// The results folder (default: evals/<workflow>-<time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the eval of this results folder: run only the cases without a result.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["workflow", "dataset", "rubrics", "provider", "script", "out"])]
    resume: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
    /// Where Docker environments run: docker (default), process (runner processes on this
    /// machine, no isolation: benchmarks, tests), swarm, kubernetes.
    #[arg(long, value_name = "ENGINE")]
    engine: Option<rondo_env::SandboxEngine>,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let progress = progress_mode(args.quiet);
    let (setup, out) = match args.resume {
        Some(dir) => {
            let mut setup: eval::Setup =
                batch::saved_setup(&dir, eval::SETUP_FILE, "an eval's results folder")?;
            if let Some(n) = args.concurrency {
                setup.concurrency = n;
            }
            setup.engine = args.engine.unwrap_or(setup.engine);
            (setup, dir)
        }
        None => {
            let (Some(workflow), Some(dataset)) = (args.workflow, args.dataset) else {
                return Err(CliError::new(
                    "give a workflow and --dataset, or --resume DIR",
                ));
            };
            let out = args.out.unwrap_or_else(|| {
                let stem = workflow
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "eval".into());
                batch::default_dir(&stem)
            });
            batch::refuse_existing(&out, eval::SETUP_FILE, "an eval", "eval")?;
            let setup = eval::Setup {
                workflow: batch::absolute(&workflow),
                dataset: batch::absolute(&dataset),
                rubrics: args.rubrics.as_deref().map(batch::absolute),
                provider: args.provider,
                script: args.script.as_deref().map(batch::absolute),
                concurrency: args.concurrency.unwrap_or(batch::DEFAULT_CONCURRENCY),
                engine: args.engine.unwrap_or_default(),
            };
            (setup, out)
        }
    };
    if setup.concurrency == 0 {
        return Err(CliError::new("--concurrency must be at least 1"));
    }
    let workflow = load_workflow(&setup.workflow).map_err(|e| e.with_code(2))?;
    let rubrics = match &setup.rubrics {
        Some(path) => eval::dataset::read_rubrics(path).map_err(|p| input_problems(&p))?,
        None => eval::Rubrics::default(),
    };
    let cases = eval::dataset::read_dataset(
        &setup.dataset,
        &workflow,
        &rubrics,
        setup.rubrics.as_deref(),
    )
    .map_err(|p| input_problems(&p))?;
    let rt = run::runtime_for_runs(setup.concurrency).map_err(runtime_error)?;
    let job = eval::Eval {
        workflow: Arc::new(workflow),
        cases,
        weights: rubrics.weights(),
        setup,
        out: out.clone(),
        progress,
        no_demos: false,
    };
    let report = rt.block_on(job.run())?;
    out!("{}", eval::render_table(&report));
    errln!("results: {}", out.display());
    let all_passed = report.unfinished == 0 && report.results.iter().all(|r| r.passed);
    Ok(Code::from(!all_passed))
}
