use std::path::PathBuf;
use std::sync::Arc;

use super::{CliError, Code, input_problems, load_workflow, progress_mode, runtime_error};
use crate::eval::{batch, swebench};
use crate::run;

/// Run an agent workflow on SWE-bench-style instances: one run per instance, in its own
/// copy of the repository and its own container; patches, test results and costs.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "A dataset is JSON Lines, SWE-bench's rows as published: {\"instance_id\", \"repo\": \"owner/name (the image's /testbed) or a folder relative to the dataset\", \"base_commit\", \"problem_statement\", \"test_patch\", \"FAIL_TO_PASS\", \"PASS_TO_PASS\" (JSON strings or lists), and Rondo's optional \"image\", \"test_commands\", \"log_parser\", \"split\", \"subset\"}. Each instance's repository is copied to OUT/workspaces/<id> (a git repository) and the workflow runs with it as its --workspace; the patch is its git diff, evaluated as SWE-bench's harness does: in a fresh container of the instance's image, with test_patch, each test's status read from the log; resolved = every FAIL_TO_PASS and PASS_TO_PASS test passes. OUT holds results.jsonl, eval/<id>/ (the harness's report.json and test log), preds.json and report.json (the harness's counts). docs/swebench.md has the details.\n\nExamples:\n  rondo swebench tests/fixtures/swebench/instances.jsonl --provider scripted \\\n    --script tests/fixtures/swebench/fix.yaml --subset lite --out evals/swe\n  rondo swebench --resume evals/swe\n  rondo swebench tests/fixtures/swebench/instances.jsonl --provider scripted \\\n    --script tests/fixtures/swebench/fix.yaml -i calc-add --out evals/one\n  rondo swebench tests/fixtures/swebench/instances.jsonl --subset lite \\\n    --predictions evals/swe/preds.json --out evals/check\n\nExit code: 0 every selected instance finished and was resolved, 1 otherwise (or some did not finish, or an interrupt), 2 a bad dataset or workflow."
)]
pub struct Args {
    /// The instances: JSON Lines.
    #[arg(required_unless_present = "resume")]
    dataset: Option<PathBuf>,
    /// The agent (default: workflows/llm_ide.rondo).
    #[arg(long)]
    workflow: Option<PathBuf>,
    /// Only the instances whose `subset` is this.
    #[arg(long)]
    subset: Option<String>,
    /// Only the instances whose `split` is this.
    #[arg(long)]
    split: Option<String>,
    /// Only the instances whose id matches this regular expression.
    #[arg(long)]
    filter: Option<String>,
    /// START:END of the selected instances (e.g. 0:5).
    #[arg(long)]
    slice: Option<String>,
    /// Only this instance (repeatable): the single-instance mode prints its patch.
    #[arg(long = "instance", short = 'i', value_name = "ID")]
    instances: Vec<String>,
    /// Runs at a time.
    #[arg(long, short = 'c')]
    concurrency: Option<usize>,
    /// Use this provider profile for every llm role.
    #[arg(long)]
    provider: Option<String>,
    /// Call this model with every provider profile.
    #[arg(long)]
    model: Option<String>,
    /// Replies for the scripted provider (YAML), for every run.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Evaluate these predictions (SWE-bench's preds.json, a list, or JSON Lines of
    /// {instance_id, model_patch}); no agent runs.
    #[arg(long, value_name = "FILE")]
    predictions: Option<PathBuf>,
    /// The image of an instance without one: `{id}` is its id, `{hub_id}` the id as
    /// SWE-bench's Docker Hub images spell it (e.g. 'swebench/sweb.eval.x86_64.{hub_id}:latest').
    #[arg(long, value_name = "TEMPLATE")]
    image: Option<String>,
    /// Build a missing image from DIR/<instance id>/Dockerfile.
    #[arg(long, value_name = "DIR")]
    build: Option<PathBuf>,
    /// Seconds the tests of one evaluation may take; longer, they are killed.
    #[arg(long, value_name = "SECS")]
    eval_timeout: Option<u64>,
    /// The results folder (default: evals/swebench-<time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the runs of this results folder: only the instances without a result.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["dataset", "workflow", "subset", "split", "filter", "slice", "instances", "provider", "model", "script", "out", "predictions", "image", "build"])]
    resume: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
    /// Where the agents' Docker environments and the evaluations run: docker (default),
    /// process (runner processes on this machine, no isolation: benchmarks, tests),
    /// swarm, kubernetes.
    #[arg(long, value_name = "ENGINE")]
    engine: Option<rondo_env::SandboxEngine>,
}

const DEFAULT_AGENT: &str = "workflows/llm_ide.rondo";

pub fn run(args: Args) -> Result<Code, CliError> {
    let progress = progress_mode(args.quiet);
    let (setup, out) = match (args.resume, args.dataset) {
        (Some(dir), _) => {
            let mut setup: swebench::Setup =
                batch::saved_setup(&dir, swebench::SETUP_FILE, "a swebench results folder")?;
            if let Some(n) = args.concurrency {
                setup.concurrency = n;
            }
            if let Some(n) = args.eval_timeout {
                setup.eval_timeout_sec = n;
            }
            setup.engine = args.engine.unwrap_or(setup.engine);
            (setup, dir)
        }
        (None, Some(dataset)) => {
            let setup = swebench::Setup {
                workflow: batch::absolute(
                    &args
                        .workflow
                        .unwrap_or_else(|| PathBuf::from(DEFAULT_AGENT)),
                ),
                dataset: batch::absolute(&dataset),
                subset: args.subset,
                split: args.split,
                filter: args.filter,
                slice: args.slice,
                instances: args.instances,
                provider: args.provider,
                model: args.model,
                script: args.script.as_deref().map(batch::absolute),
                concurrency: args.concurrency.unwrap_or(batch::DEFAULT_CONCURRENCY),
                predictions: args.predictions.as_deref().map(batch::absolute),
                image: args.image,
                build: args.build.as_deref().map(batch::absolute),
                eval_timeout_sec: args
                    .eval_timeout
                    .unwrap_or(swebench::DEFAULT_EVAL_TIMEOUT_SEC),
                engine: args.engine.unwrap_or_default(),
            };
            let out = args.out.unwrap_or_else(|| batch::default_dir("swebench"));
            batch::refuse_existing(&out, swebench::SETUP_FILE, "a swebench run", "swebench")?;
            (setup, out)
        }
        (None, None) => return Err(CliError::new("give a dataset, or --resume DIR")),
    };
    if setup.concurrency == 0 {
        return Err(CliError::new("--concurrency must be at least 1"));
    }
    let workflow = load_workflow(&setup.workflow).map_err(|e| e.with_code(2))?;
    let workflow = match &setup.model {
        Some(model) => workflow.with_model(model),
        None => workflow,
    };
    let instances = swebench::read_instances(
        &setup.dataset,
        &workflow,
        setup.image.as_deref(),
        setup.predictions.is_none(),
    )
    .map_err(|p| input_problems(&p))?;
    let instances = swebench::select(instances, &setup)?;
    // The agent works where the repository is: SWE-bench's /testbed when it is the image's.
    let in_images = instances.iter().filter(|i| i.repo.is_none()).count();
    let workflow = if setup.predictions.is_none() && in_images > 0 {
        if in_images < instances.len() {
            return Err(CliError::new(
                "some instances' repositories are folders and others are their images': run them as two batches (--filter)",
            ));
        }
        workflow
            .with_workspace_at(swebench::TESTBED)
            .ok_or_else(|| {
                CliError::new(
                    "the workflow has no Docker environment that mounts its workspace (`.:/work`): the agent could not reach /testbed",
                )
                .with_code(2)
            })?
    } else {
        workflow
    };
    let single = setup.instances.len() == 1;
    let rt = run::runtime_for_runs(setup.concurrency).map_err(runtime_error)?;
    let job = swebench::Swebench {
        workflow: Arc::new(workflow),
        instances,
        setup,
        out: out.clone(),
        progress,
    };
    let report = rt.block_on(job.run())?;
    if single && let Some(r) = report.results.first() {
        out!("{}", r.patch);
    }
    out!("{}", swebench::render_table(&report));
    out!("{}", why(&report.results));
    errln!("results: {}", out.display());
    if report.interrupted {
        errln!(
            "interrupted: continue with `rondo swebench --resume {}`",
            out.display()
        );
    }
    let all = report.unfinished == 0
        && report
            .results
            .iter()
            .all(|r| r.exit_code == 0 && r.resolved == Some(true));
    Ok(Code::from(!all))
}

/// Why each instance that did not end well did not, as `results.jsonl` says it: the run's
/// exit and reason, a patch that could not be taken, tests that could not run or failed,
/// and where its run is recorded.
fn why(results: &[swebench::InstanceResult]) -> String {
    let mut out = String::new();
    for r in results {
        let id = &r.instance_id;
        let mut said = false;
        if r.exit_code != 0 {
            out.push_str(&format!(
                "{id}: exit `{}`: {}\n",
                r.exit,
                one_line(&r.reason)
            ));
            said = true;
        }
        if let Some(e) = &r.patch_error {
            out.push_str(&format!("{id}: no patch: {}\n", one_line(e)));
            said = true;
        }
        if let Some(e) = &r.eval_error {
            out.push_str(&format!("{id}: not evaluated: {}\n", one_line(e)));
            said = true;
        } else if r.resolved == Some(false) {
            let failed: Vec<&str> = r
                .report
                .tests_status
                .iter()
                .flat_map(|t| t.fail_to_pass.failure.iter().chain(&t.pass_to_pass.failure))
                .map(String::as_str)
                .collect();
            match &r.eval_note {
                Some(note) => out.push_str(&format!("{id}: unresolved: {}\n", one_line(note))),
                None => out.push_str(&format!("{id}: unresolved: failed {}\n", failed.join(", "))),
            }
            said = true;
        }
        if said {
            out.push_str(&format!(
                "{id}: its evaluation: {}\n",
                r.eval_dir.join("test_output.txt").display()
            ));
        }
        if said && let Some(ws) = &r.workspace {
            let run = ws.join(".rondo/runs").join(&r.run_id);
            out.push_str(&format!("{id}: its run: rondo replay {}\n", run.display()));
        }
    }
    if out.is_empty() {
        out
    } else {
        format!("\n{out}")
    }
}

/// A reason on one line: a multi-line one (a server's error body) keeps its first line.
fn one_line(text: &str) -> String {
    let mut lines = text.trim().lines();
    let first = lines.next().unwrap_or_default().to_string();
    match lines.count() {
        0 => first,
        n => format!("{first} (… {n} more lines in results.jsonl)"),
    }
}
