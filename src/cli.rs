//! The command line: argument parsing and dispatch only.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use crate::check::{self, CheckOptions};
use crate::diagnostics::{self, Diagnostic, Diagnostics};
use crate::eval;
use crate::render;
use crate::run::{self, Interpreter, RunOptions, progress};
use crate::source::SourceFile;

/// Standard output and error of a command-line tool: a reader that goes away early
/// (`rondo runs | head -1`) ends the process the way it ends any Unix tool, by SIGPIPE,
/// quietly, instead of a panic. (Rust ignores SIGPIPE, so a write fails with EPIPE.)
macro_rules! out {
    ($($arg:tt)*) => { write_or_end(&mut std::io::stdout().lock(), format_args!($($arg)*)) };
}
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => { out!("{}\n", format_args!($($arg)*)) };
}
macro_rules! err {
    ($($arg:tt)*) => { write_or_end(&mut std::io::stderr().lock(), format_args!($($arg)*)) };
}
macro_rules! errln {
    ($($arg:tt)*) => { err!("{}\n", format_args!($($arg)*)) };
}

fn write_or_end(stream: &mut impl std::io::Write, args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    match stream.write_fmt(args) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => end_by_closed_pipe(),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot write the output: {e}");
            std::process::exit(2)
        }
    }
}

/// Ends the process as the default action of SIGPIPE would: the shell sees status 141.
fn end_by_closed_pipe() -> ! {
    // SAFETY: restoring a signal's default action and raising it in this thread touch no
    // memory; the process ends there.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(128 + libc::SIGPIPE)
}

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
    /// Check workflow files: names, types, routing, loops, templates, tools, and (unless
    /// --offline) the environment.
    #[command(
        after_help = "The environment tier checks that the API keys the providers need are set. A key that is not set is a warning: the file is sound, but `rondo run` will not start without the key.\n\nExamples:\n  rondo check workflows/*.rondo                        # keys not set: warnings\n  rondo check --offline workflows/*.rondo              # no environment tier\n  rondo check --deny-warnings workflows/ds_star.rondo  # CI: warnings fail too\n  rondo check --format json --offline workflows/iter.rondo\n\nExit code: 0 clean or warnings only, 1 errors (or warnings with --deny-warnings), 2 unreadable file."
    )]
    Check {
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
    /// Run a workflow.
    #[command(
        after_help = "Examples:\n  rondo run workflows/ds_star.rondo -i question='Write hello.txt' --run-id hello\n  rondo run workflows/micro_agent.rondo --provider scripted -i question='6*7?'\n  rondo run workflows/ds_star.rondo -i question='Write hello.txt' \\\n    --script workflows/scripts/ds_star_hello.yaml\n  rondo run workflows/ds_star.rondo --replay-from runs/hello -i question=hi\n\nWith `--provider scripted` (or a workflow whose provider is scripted) and no `--script`, the replies are the workflow's own default set (`script = ...` in its header): the five reference workflows run so with no API key.\n\nExit code: the exit's code (success 0), 3 limit, 2 error, 4 invalid_output, 130 interrupted."
    )]
    Run {
        file: PathBuf,
        /// An input value: `--input name=value` (repeatable; JSON for non-string inputs).
        #[arg(long = "input", short = 'i', value_parser = parse_key_value)]
        inputs: Vec<(String, String)>,
        /// Use this provider profile for every llm role.
        #[arg(long)]
        provider: Option<String>,
        /// Replies for the scripted provider (YAML); default: the workflow's own (`script` in its header).
        #[arg(long)]
        script: Option<PathBuf>,
        /// Re-execute offline with the LLM replies recorded in this run directory.
        #[arg(long)]
        replay_from: Option<PathBuf>,
        /// Folder holding run directories.
        #[arg(long, default_value = "runs")]
        run_dir: PathBuf,
        /// Name of the run (default: a timestamp): a plain folder name.
        #[arg(long, value_parser = parse_run_id)]
        run_id: Option<String>,
        /// Work in this existing folder (it outlives the run); the run's records go to
        /// `DIR/.rondo/runs/<run-id>/`, out of the tools' reach.
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Keep Docker containers after the run, for debugging.
        #[arg(long)]
        keep_env: bool,
        /// Run local tools even where the kernel cannot confine them (no Landlock): they
        /// can then write anything you can, the run's records included.
        #[arg(long, env = "RONDO_UNCONFINED_TOOLS", value_parser = clap::builder::FalseyValueParser::new())]
        unconfined_tools: bool,
        /// Write no run directory files (benchmarks).
        #[arg(long)]
        no_checkpoint: bool,
        /// No progress output.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Continue a stopped or crashed run from its last checkpoint.
    #[command(after_help = "Example:\n  rondo resume runs/20261122-091630-ab12")]
    Resume {
        run: PathBuf,
        #[arg(long, short)]
        quiet: bool,
        /// Run local tools even where the kernel cannot confine them (see `rondo run --help`).
        #[arg(long, env = "RONDO_UNCONFINED_TOOLS", value_parser = clap::builder::FalseyValueParser::new())]
        unconfined_tools: bool,
    },
    /// Show a finished or stopped run step by step, or one record of a JSONL file.
    #[command(
        after_help = "Examples:\n  rondo replay runs/20261122-091630-ab12\n  rondo replay runs/20261122-091630-ab12 --full\n  rondo replay --path traces/20261122-091630-ab12.jsonl --index -1"
    )]
    Replay {
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
    },
    /// Write a run as one self-contained HTML page: its graph with the path taken, a step
    /// timeline, prompts, replies, tool calls and totals. It opens from disk, offline.
    #[command(
        after_help = "Examples:\n  rondo run workflows/ds_star.rondo -i question='Write hello.txt' --run-id hello\n  rondo view runs/hello -o hello.html\n\nWithout -o the page is written to view.html in the run directory. `rondo serve` serves the same page at /, live."
    )]
    View {
        run: PathBuf,
        /// Where to write the page.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// List runs with their status.
    #[command(
        after_help = "Examples:\n  rondo runs --run-dir runs\n  rondo runs --workspace ./project"
    )]
    Runs {
        #[arg(long, default_value = "runs")]
        run_dir: PathBuf,
        /// List the runs made with `rondo run --workspace DIR` (kept in `DIR/.rondo/runs`).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Run the `test` blocks of workflow files.
    #[command(
        after_help = "Examples:\n  rondo test workflows/*.rondo\n  rondo test workflows/ds_star.rondo --filter hello"
    )]
    Test {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Only tests whose name contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Where test runs are written (kept for inspection).
        #[arg(long)]
        run_dir: Option<PathBuf>,
    },
    /// Serve workflows over HTTP: runs on request, their status, live events and graphs.
    #[command(
        after_help = "Routes: GET / (the run viewer), POST /runs, GET /runs, GET /runs/{id},\n  GET /runs/{id}/events (SSE), GET /runs/{id}/view, POST /runs/{id}/cancel, GET /workflows, GET /workflows/{name}/graph?format=dot|mermaid|svg,\n  POST /ask, GET /trace/{id}, GET /openapi.json, GET /health (docs/serve.md)\n\nExamples:\n  rondo serve workflows/micro_agent.rondo --provider scripted --port 8080\n  RONDO_TOKEN=s3cret rondo serve workflows/*.rondo --token-env RONDO_TOKEN --concurrency 8"
    )]
    Serve {
        #[arg(required = true)]
        workflows: Vec<PathBuf>,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Runs driven at once; more wait in line, none is dropped.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Every route but /health needs `Authorization: Bearer <the value of VAR>`.
        #[arg(long, value_name = "VAR")]
        token_env: Option<String>,
        /// Where runs are written (as `rondo run --run-dir`).
        #[arg(long, default_value = "runs")]
        run_dir: PathBuf,
        /// An origin CORS allows (repeatable); any origin when none is given.
        #[arg(long = "cors-origin", value_name = "ORIGIN")]
        cors_origins: Vec<String>,
        /// The workflow `POST /ask` runs, by its declared name (default: the first file's).
        #[arg(long, value_name = "NAME")]
        ask: Option<String>,
        /// Every run uses this provider profile unless its request names one.
        #[arg(long, value_name = "PROFILE")]
        provider: Option<String>,
        /// Run local tools unconfined when the kernel has no Landlock.
        #[arg(long)]
        unconfined_tools: bool,
    },
    /// Evaluate a workflow on a dataset: one run per case, scored against its expectations.
    #[command(
        after_help = "A dataset is JSON Lines, one case a line: {\"id\": \"c1\", \"inputs\": {...}, \"expect\": {\"contains\": \"...\", \"keys\": [...], \"tools\": [...], \"checks\": [\"<rondo expression>\"]}}. The results folder holds runs/, cases.jsonl (one result a case) and summary.json (the metrics). docs/eval.md has the details.\n\nExamples:\n  rondo eval workflows/micro_agent.rondo --provider scripted \\\n    --dataset workflows/evals/micro_agent.jsonl --out evals/micro\n  rondo eval --resume evals/micro\n  rondo eval workflows/micro_agent.rondo --provider scripted -c 8 \\\n    --dataset workflows/evals/micro_agent.jsonl \\\n    --rubrics workflows/evals/micro_agent_rubrics.yaml --out evals/rubric\n\nExit code: 0 every case passed, 1 some failed or did not finish, 2 an unreadable or bad dataset, rubrics or workflow."
    )]
    Eval {
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
    },
    /// Run an agent workflow on SWE-bench-style instances: one run per instance, in its own
    /// copy of the repository and its own container; patches, test results and costs.
    #[command(
        after_help = "A dataset is JSON Lines, one instance a line: {\"instance_id\": \"...\", \"repo\": \"folder, relative to the dataset\", \"problem_statement\": \"...\", \"test_commands\": [\"...\"], \"image\": \"optional\", \"split\": \"optional\", \"subset\": \"optional\"}. Each instance's repository is copied to OUT/workspaces/<id> (a git repository) and the workflow runs with it as its --workspace; the patch is its git diff, then the test commands run in a fresh container. OUT holds results.jsonl (exit, patch, tests, resolved, cost an instance), preds.json (SWE-bench's predictions) and report.json. docs/swebench.md has the details.\n\nExamples:\n  rondo swebench tests/fixtures/swebench/instances.jsonl --provider scripted \\\n    --script tests/fixtures/swebench/fix.yaml --subset lite --out evals/swe\n  rondo swebench --resume evals/swe\n  rondo swebench tests/fixtures/swebench/instances.jsonl --provider scripted \\\n    --script tests/fixtures/swebench/fix.yaml -i calc-add --out evals/one\n\nExit code: 0 every run ended at a success exit and no tests failed, 1 otherwise (or some did not finish), 2 a bad dataset or workflow."
    )]
    Swebench {
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
        /// The results folder (default: evals/swebench-<time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Continue the runs of this results folder: only the instances without a result.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["dataset", "workflow", "subset", "split", "filter", "slice", "instances", "provider", "model", "script", "out"])]
        resume: Option<PathBuf>,
        /// No progress output.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Bootstrap few-shot demos for an llm role from the cases of a training set that pass.
    #[command(
        after_help = "Runs the dataset as `rondo eval` does, without demos (OUT/before); of the cases that passed, the role's first accepted reply with the run's inputs is a demo; a seeded choice keeps at most --max-demos; they are written to --out (default: the role's `demos` file) and the dataset runs again with them (OUT/after). docs/optimize.md has the details.\n\nExample:\n  rondo optimize tests/fixtures/optimize/qa.rondo --provider scripted \\\n    --dataset tests/fixtures/optimize/train.jsonl --role answer \\\n    --max-demos 2 --out evals/qa_demos.json --runs evals/qa-optimize"
    )]
    Optimize {
        workflow: PathBuf,
        /// The training cases: JSON Lines, as for `rondo eval`.
        #[arg(long)]
        dataset: PathBuf,
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
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  rondo completions bash > ~/.local/share/bash-completion/completions/rondo\n  rondo completions zsh > ~/.zfunc/_rondo    # with fpath+=(~/.zfunc) before compinit\n  rondo completions fish > ~/.config/fish/completions/rondo.fish"
    )]
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
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
        Command::Completions { shell } => cmd_completions(shell),
        Command::Run {
            file,
            inputs,
            provider,
            script,
            replay_from,
            run_dir,
            run_id,
            workspace,
            keep_env,
            unconfined_tools,
            no_checkpoint,
            quiet,
        } => {
            let options = RunOptions {
                runs_root: run_dir,
                run_id,
                workspace,
                base_dir: None,
                inputs,
                provider,
                script,
                replay_from,
                checkpoints: !no_checkpoint,
                progress: progress_mode(quiet),
                keep_env,
                unconfined_tools,
                pool: None,
                no_demos: false,
                image: None,
            };
            cmd_run(&file, options)
        }
        Command::Resume {
            run,
            quiet,
            unconfined_tools,
        } => cmd_resume(
            &run,
            RunOptions {
                progress: progress_mode(quiet),
                unconfined_tools,
                ..RunOptions::default()
            },
        ),
        Command::Replay {
            run,
            full,
            path,
            index,
        } => match (run, path) {
            (_, Some(path)) => cmd_replay_record(&path, index),
            (Some(run), None) => cmd_replay(&run, full),
            (None, None) => 2,
        },
        Command::View { run, output } => cmd_view(&run, output),
        Command::Runs { run_dir, workspace } => cmd_runs(
            &workspace
                .as_deref()
                .map_or(run_dir, run::rundir::runs_in_workspace),
        ),
        Command::Test {
            files,
            filter,
            run_dir,
        } => cmd_test(&files, filter.as_deref(), run_dir),
        Command::Serve {
            workflows,
            port,
            host,
            concurrency,
            token_env,
            run_dir,
            cors_origins,
            ask,
            provider,
            unconfined_tools,
        } => cmd_serve(
            crate::serve::ServeOptions {
                workflows,
                host,
                port,
                concurrency,
                token: None,
                runs_root: run_dir,
                cors_origins,
                ask,
                provider,
                unconfined_tools,
            },
            token_env,
        ),
        Command::Eval {
            workflow,
            dataset,
            rubrics,
            concurrency,
            provider,
            script,
            out,
            resume,
            quiet,
        } => {
            let args = EvalArgs {
                workflow,
                dataset,
                rubrics,
                concurrency,
                provider,
                script,
                out,
            };
            cmd_eval(args, resume, progress_mode(quiet))
        }
        Command::Swebench {
            dataset,
            workflow,
            subset,
            split,
            filter,
            slice,
            instances,
            concurrency,
            provider,
            model,
            script,
            out,
            resume,
            quiet,
        } => {
            let setup = dataset.map(|dataset| eval::swebench::Setup {
                workflow: absolute(
                    &workflow.unwrap_or_else(|| PathBuf::from("workflows/llm_ide.rondo")),
                ),
                dataset: absolute(&dataset),
                subset,
                split,
                filter,
                slice,
                instances,
                provider,
                model,
                script: script.as_deref().map(absolute),
                concurrency: concurrency.unwrap_or(DEFAULT_EVAL_CONCURRENCY),
            });
            cmd_swebench(setup, out, resume, concurrency, progress_mode(quiet))
        }
        Command::Optimize {
            workflow,
            dataset,
            role,
            max_demos,
            seed,
            out,
            runs,
            provider,
            script,
            concurrency,
            quiet,
        } => cmd_optimize(
            EvalArgs {
                workflow: Some(workflow),
                dataset: Some(dataset),
                rubrics: None,
                concurrency,
                provider,
                script,
                out: runs,
            },
            (role, max_demos, seed, out),
            progress_mode(quiet),
        ),
    }
}

fn cmd_completions(shell: CompletionShell) -> i32 {
    use clap::CommandFactory;
    use clap_complete::Shell;
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "rondo", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    0
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("`{text}` is not `name=value`")),
    }
}

fn parse_run_id(text: &str) -> Result<String, String> {
    run::rundir::check_run_id(text).map(|()| text.to_string())
}

fn progress_mode(quiet: bool) -> progress::Mode {
    if quiet {
        progress::Mode::Quiet
    } else if std::io::stderr().is_terminal() {
        progress::Mode::Live
    } else {
        progress::Mode::Plain
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            errln!("error: cannot start the async runtime: {e}");
            std::process::exit(2)
        })
}

async fn drive_with_ctrl_c(interp: Interpreter<'_>, state: run::RunState) -> run::Outcome {
    let (flag, notify) = interp.interrupter();
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            notify.notify_waiters();
        }
    });
    let outcome = interp.drive(state).await;
    watcher.abort();
    outcome
}

fn report_outcome(outcome: &run::Outcome, quiet: bool) -> i32 {
    // --quiet prints nothing for a run that succeeded; one that did not says why and where.
    if quiet && outcome.exit_code == 0 {
        return 0;
    }
    if quiet {
        errln!("exit `{}`: {}", outcome.exit, outcome.reason);
    }
    errln!("run directory: {}", outcome.run_dir.display());
    errln!("workspace: {}", outcome.workspace.display());
    outcome.exit_code
}

fn cmd_run(path: &std::path::Path, options: RunOptions) -> i32 {
    let workflow = match compiled_or_report(path) {
        Ok(w) => w,
        Err(code) => return code,
    };
    runtime().block_on(async {
        match Interpreter::start(&workflow, &options) {
            Ok((interp, state)) => report_outcome(
                &drive_with_ctrl_c(interp, state).await,
                options.progress == progress::Mode::Quiet,
            ),
            Err(e) => {
                errln!("error: {e}");
                2
            }
        }
    })
}

fn cmd_resume(run_path: &std::path::Path, options: RunOptions) -> i32 {
    let info = match run::rundir::read_info(run_path) {
        Ok(i) => i,
        Err(e) => {
            errln!("error: {e}");
            return 2;
        }
    };
    let workflow = match compiled_or_report(&info.workflow_path) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let workspace = run::rundir::Layout::of(run_path, &info).workspace;
    if !workspace.starts_with(run_path) {
        errln!(
            "note: run {} works in the outside folder {} (its --workspace), not in its run folder",
            info.run_id,
            workspace.display()
        );
    }
    runtime().block_on(async {
        match Interpreter::resume(&workflow, run_path, &options) {
            Ok((interp, state)) => report_outcome(
                &drive_with_ctrl_c(interp, state).await,
                options.progress == progress::Mode::Quiet,
            ),
            Err(e) => {
                errln!("error: {e}");
                2
            }
        }
    })
}

fn cmd_replay(run_path: &std::path::Path, full: bool) -> i32 {
    match run::replay::render(run_path, full) {
        Ok(text) => {
            out!("{text}");
            0
        }
        Err(e) => {
            errln!("error: {e}");
            2
        }
    }
}

fn cmd_view(run_path: &std::path::Path, output: Option<PathBuf>) -> i32 {
    let page = match crate::view::render(run_path) {
        Ok(page) => page,
        Err(e) => {
            errln!("error: {e}");
            return 2;
        }
    };
    let out = output.unwrap_or_else(|| run_path.join("view.html"));
    match std::fs::write(&out, page) {
        Ok(()) => {
            outln!("wrote {}", out.display());
            0
        }
        Err(e) => {
            errln!("error: cannot write {}: {e}", out.display());
            2
        }
    }
}

fn cmd_replay_record(path: &std::path::Path, index: i64) -> i32 {
    match run::replay::record(path, index) {
        Ok(text) => {
            out!("{text}");
            0
        }
        Err(e) => {
            errln!("error: {e}");
            2
        }
    }
}

fn cmd_runs(root: &std::path::Path) -> i32 {
    let Ok(entries) = std::fs::read_dir(root) else {
        outln!("no runs in {}", root.display());
        return 0;
    };
    let mut rows: Vec<(PathBuf, run::rundir::RunInfo)> = entries
        .flatten()
        .filter_map(|e| Some((e.path(), run::rundir::read_info(&e.path()).ok()?)))
        .collect();
    rows.sort_by(|a, b| a.1.started_at.cmp(&b.1.started_at));
    outln!(
        "{:<28} {:<14} {:<12} {:<12} {:>6} {:>9}  started",
        "run",
        "workflow",
        "status",
        "exit",
        "steps",
        "tokens"
    );
    for (dir, info) in rows {
        let steps = run::rundir::read_checkpoint(&dir)
            .ok()
            .and_then(|s| s["step"].as_u64())
            .unwrap_or(0);
        let status = if info.status == "running" {
            "crashed?".to_string()
        } else {
            info.status.clone()
        };
        outln!(
            "{:<28} {:<14} {:<12} {:<12} {:>6} {:>9}  {}",
            info.run_id,
            info.workflow,
            status,
            info.exit.clone().unwrap_or_default(),
            steps,
            info.totals.input_tokens + info.totals.output_tokens,
            info.started_at
        );
    }
    0
}

fn cmd_test(files: &[PathBuf], filter: Option<&str>, run_dir: Option<PathBuf>) -> i32 {
    let root = run_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("rondo-test-{}", std::process::id())));
    let (mut passed, mut failed) = (0, 0);
    let rt = runtime();
    for path in files {
        let workflow = match compiled_or_report(path) {
            Ok(w) => w,
            Err(_) => {
                failed += 1;
                continue;
            }
        };
        for case in workflow
            .tests
            .iter()
            .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
        {
            let report = rt.block_on(run::testing::run_test(&workflow, case, &root));
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
    i32::from(failed > 0)
}

/// Reads, compiles and checks one file.
pub fn load_checked(
    path: &std::path::Path,
    options: &CheckOptions,
) -> Result<(SourceFile, check::Loaded), String> {
    let file = match SourceFile::read(path) {
        Ok(file) => file,
        Err(e) => {
            let Some((text, span, label)) = e.bad_byte() else {
                return Err(format!("cannot read {}: {e}", path.display()));
            };
            let mut diags = Diagnostics::default();
            diags.push(
                Diagnostic::not_utf8(format_args!("`{}`", path.display())).label(span, label),
            );
            return Ok((SourceFile::new(path, text), check::unreadable(diags)));
        }
    };
    let loaded = check::load(&file, options);
    Ok((file, loaded))
}

fn cmd_check(files: &[PathBuf], format: OutputFormat, deny_warnings: bool, offline: bool) -> i32 {
    let options = CheckOptions { offline };
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut code = 0;
    let mut json_out = Vec::new();
    for path in files {
        let (file, diags, summary) = match load_checked(path, &options) {
            Ok((file, loaded)) => {
                // Freeing a large tree and graph node by node only delays the exit: the
                // process ends right after reporting, and the OS takes the memory back at once.
                std::mem::forget(loaded.ast);
                std::mem::forget(loaded.checked);
                (file, loaded.diagnostics, loaded.summary)
            }
            Err(e) => {
                errln!("error: {e}");
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
    if format == OutputFormat::Json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json_out).unwrap_or_default()
        );
    }
    code
}

fn compiled_or_report(path: &std::path::Path) -> Result<check::Checked, i32> {
    let options = CheckOptions { offline: true };
    match load_checked(path, &options) {
        Ok((file, loaded)) => {
            // Every caller only needs the workflow; the tree is left for the process exit.
            std::mem::forget(loaded.ast);
            loaded.checked.map_err(|_| {
                let color = std::io::stderr().is_terminal();
                err!(
                    "{}",
                    diagnostics::render_human(&file, &loaded.diagnostics.sorted(), color, 100)
                );
                errln!(
                    "x {}: fix the errors above first (rondo check)",
                    path.display()
                );
                1
            })
        }
        Err(e) => {
            errln!("error: {e}");
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
                    errln!("error: cannot write {}: {e}", out.display());
                    2
                }
            },
            None => {
                out!("{text}");
                0
            }
        },
        Err(e) => {
            errln!("error: {e}");
            2
        }
    }
}

fn cmd_serve(mut options: crate::serve::ServeOptions, token_env: Option<String>) -> i32 {
    if let Some(var) = token_env {
        match std::env::var(&var) {
            Ok(token) if !token.is_empty() => options.token = Some(token),
            _ => {
                errln!("error: --token-env names `{var}`, which is not set (or empty)");
                return 2;
            }
        }
    }
    let mut workflows = Vec::new();
    for path in &options.workflows {
        match compiled_or_report(path) {
            Ok(w) => workflows.push((path.clone(), w)),
            Err(code) => return code,
        }
    }
    crate::serve::serve(workflows, options)
}

fn cmd_dump(path: &std::path::Path) -> i32 {
    match compiled_or_report(path) {
        Ok(workflow) => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&*workflow).unwrap_or_default()
            );
            0
        }
        Err(code) => code,
    }
}

struct EvalArgs {
    workflow: Option<PathBuf>,
    dataset: Option<PathBuf>,
    rubrics: Option<PathBuf>,
    concurrency: Option<usize>,
    provider: Option<String>,
    script: Option<PathBuf>,
    out: Option<PathBuf>,
}

const DEFAULT_EVAL_CONCURRENCY: usize = 4;

fn absolute(path: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or(path.to_path_buf())
    })
}

/// `evals/<name>-<time>`: the default results folder of a batch.
fn evals_dir(name: &str) -> PathBuf {
    let stamp = run::clock::rfc3339(run::clock::unix_ms())
        .replace(['-', ':'], "")
        .replace('T', "-");
    let stamp = stamp.split('.').next().unwrap_or("").to_string();
    PathBuf::from("evals").join(format!("{name}-{stamp}"))
}

/// The setup a batch (`rondo eval`, `rondo swebench`) saved in its results folder, read
/// back to resume it.
fn saved_setup<T: serde::de::DeserializeOwned>(
    dir: &Path,
    file: &str,
    what: &str,
) -> Result<T, String> {
    let file = dir.join(file);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{} is not {what}: {e}", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Whether `out` already holds a batch (its saved setup): said, with how to continue it, so
/// a new batch never mixes with an old one.
fn holds_batch(out: &Path, setup_file: &str, what: &str, command: &str) -> bool {
    let holds = out.join(setup_file).exists();
    if holds {
        errln!(
            "error: {} already holds {what}; continue it with `rondo {command} --resume {}`",
            out.display(),
            out.display()
        );
    }
    holds
}

fn cmd_swebench(
    setup: Option<eval::swebench::Setup>,
    out: Option<PathBuf>,
    resume: Option<PathBuf>,
    concurrency: Option<usize>,
    progress: progress::Mode,
) -> i32 {
    use eval::swebench;
    let (setup, out) = match (setup, resume) {
        (_, Some(dir)) => {
            match saved_setup::<swebench::Setup>(
                &dir,
                swebench::SETUP_FILE,
                "a swebench results folder",
            ) {
                Ok(mut setup) => {
                    if let Some(n) = concurrency {
                        setup.concurrency = n;
                    }
                    (setup, dir)
                }
                Err(e) => {
                    errln!("error: {e}");
                    return 2;
                }
            }
        }
        (Some(setup), None) => {
            let out = out.unwrap_or_else(|| evals_dir("swebench"));
            if holds_batch(&out, swebench::SETUP_FILE, "a swebench run", "swebench") {
                return 2;
            }
            (setup, out)
        }
        (None, None) => {
            errln!("error: give a dataset, or --resume DIR");
            return 2;
        }
    };
    if setup.concurrency == 0 {
        errln!("error: --concurrency must be at least 1");
        return 2;
    }
    let workflow = match compiled_or_report(&setup.workflow) {
        Ok(w) => w,
        Err(_) => return 2,
    };
    let workflow = match &setup.model {
        Some(model) => workflow.with_model(model),
        None => workflow,
    };
    let instances = match swebench::read_instances(&setup.dataset, &workflow) {
        Ok(i) => i,
        Err(problems) => {
            let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            err!(
                "{}",
                diagnostics::render_human(
                    &problems.file,
                    &problems.diagnostics.sorted(),
                    color,
                    100
                )
            );
            errln!(
                "x {}: {} error(s); nothing ran",
                problems.file.path.display(),
                problems.diagnostics.error_count()
            );
            return 2;
        }
    };
    let instances = match swebench::select(instances, &setup) {
        Ok(i) => i,
        Err(e) => {
            errln!("error: {e}");
            return 2;
        }
    };
    let single = setup.instances.len() == 1;
    // Every run's task borrows the workflow for the rest of the process.
    let workflow: &'static check::Checked = Box::leak(Box::new(workflow));
    let rt = match run::runtime_for_runs(setup.concurrency) {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return 2;
        }
    };
    let job = swebench::Swebench {
        workflow,
        instances,
        setup,
        out: out.clone(),
        progress,
    };
    match rt.block_on(job.run()) {
        Ok(report) => {
            if single && let Some(r) = report.results.first() {
                out!("{}", r.patch);
            }
            out!("{}", swebench::render_table(&report));
            errln!("results: {}", out.display());
            let all = report.unfinished == 0
                && report
                    .results
                    .iter()
                    .all(|r| r.exit_code == 0 && r.resolved != Some(false));
            i32::from(!all)
        }
        Err(e) => {
            errln!("error: {e}");
            2
        }
    }
}

fn cmd_optimize(
    args: EvalArgs,
    (role, max_demos, seed, demos_out): (String, usize, u64, Option<PathBuf>),
    progress: progress::Mode,
) -> i32 {
    use crate::eval;
    let (Some(path), Some(dataset)) = (args.workflow, args.dataset) else {
        return 2;
    };
    let Ok(workflow) = compiled_or_report(&path) else {
        return 2;
    };
    let llm = workflow.roles().find_map(|(i, r)| match &r.kind {
        crate::compile::RoleKind::Llm(l) if workflow.node(i).name == role => Some(l),
        _ => None,
    });
    let Some(llm) = llm else {
        errln!("error: `{role}` is not an llm role of {}", path.display());
        return 2;
    };
    let Some(demos) = demos_out.or_else(|| run::demos::path(&workflow, llm)) else {
        errln!(
            "error: role `{role}` takes no demos: give it `demos = \"opt/{role}_demos.json\"` or pass --out"
        );
        return 2;
    };
    let cases = match eval::dataset::read_dataset(&dataset, &workflow, &Default::default(), None) {
        Ok(c) => c,
        Err(p) => {
            let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            err!(
                "{}",
                diagnostics::render_human(&p.file, &p.diagnostics.sorted(), color, 100)
            );
            return 2;
        }
    };
    let out = args.out.unwrap_or_else(|| {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stamp = run::clock::rfc3339(run::clock::unix_ms()).replace(['-', ':', '.'], "");
        PathBuf::from("evals").join(format!("{stem}-optimize-{stamp}"))
    });
    if out.join("before").exists() {
        errln!(
            "error: {} already holds an optimize run; give another --runs folder",
            out.display()
        );
        return 2;
    }
    let concurrency = args.concurrency.unwrap_or(DEFAULT_EVAL_CONCURRENCY).max(1);
    let workflow: &'static check::Checked = Box::leak(Box::new(workflow));
    let job = eval::Eval {
        workflow,
        cases,
        weights: eval::Rubrics::default().weights(),
        setup: eval::Setup {
            workflow: absolute(&path),
            dataset: absolute(&dataset),
            rubrics: None,
            provider: args.provider,
            script: args.script.as_deref().map(absolute),
            concurrency,
        },
        out: out.clone(),
        progress,
        no_demos: true,
    };
    let rt = match run::runtime_for_runs(concurrency) {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return 2;
        }
    };
    match rt.block_on(eval::optimize::optimize(
        job, &role, max_demos, seed, &demos,
    )) {
        Ok(outcome) => {
            out!("{}", eval::optimize::render(&outcome));
            errln!("demos: {}\nresults: {}", demos.display(), out.display());
            0
        }
        Err(e) => {
            errln!("error: {e}");
            2
        }
    }
}

fn cmd_eval(args: EvalArgs, resume: Option<PathBuf>, progress: progress::Mode) -> i32 {
    use crate::eval;
    let (setup, out) = match resume {
        Some(dir) => {
            match saved_setup::<eval::Setup>(&dir, eval::SETUP_FILE, "an eval's results folder") {
                Ok(mut setup) => {
                    if let Some(n) = args.concurrency {
                        setup.concurrency = n;
                    }
                    (setup, dir)
                }
                Err(e) => {
                    errln!("error: {e}");
                    return 2;
                }
            }
        }
        None => {
            let (Some(workflow), Some(dataset)) = (args.workflow, args.dataset) else {
                errln!("error: give a workflow and --dataset, or --resume DIR");
                return 2;
            };
            let out = args.out.unwrap_or_else(|| {
                let stem = workflow
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "eval".into());
                evals_dir(&stem)
            });
            if holds_batch(&out, eval::SETUP_FILE, "an eval", "eval") {
                return 2;
            }
            let setup = eval::Setup {
                workflow: absolute(&workflow),
                dataset: absolute(&dataset),
                rubrics: args.rubrics.as_deref().map(absolute),
                provider: args.provider,
                script: args.script.as_deref().map(absolute),
                concurrency: args.concurrency.unwrap_or(DEFAULT_EVAL_CONCURRENCY),
            };
            (setup, out)
        }
    };
    if setup.concurrency == 0 {
        errln!("error: --concurrency must be at least 1");
        return 2;
    }
    let workflow = match compiled_or_report(&setup.workflow) {
        Ok(w) => w,
        Err(_) => return 2,
    };
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let show = |problems: Box<eval::dataset::Problems>| {
        err!(
            "{}",
            diagnostics::render_human(&problems.file, &problems.diagnostics.sorted(), color, 100)
        );
        errln!(
            "x {}: {} error(s); nothing ran",
            problems.file.path.display(),
            problems.diagnostics.error_count()
        );
        2
    };
    let rubrics = match &setup.rubrics {
        Some(path) => match eval::dataset::read_rubrics(path) {
            Ok(r) => r,
            Err(p) => return show(p),
        },
        None => eval::Rubrics::default(),
    };
    let cases = match eval::dataset::read_dataset(
        &setup.dataset,
        &workflow,
        &rubrics,
        setup.rubrics.as_deref(),
    ) {
        Ok(c) => c,
        Err(p) => return show(p),
    };
    // Every run's task borrows the workflow for the rest of the process.
    let workflow: &'static check::Checked = Box::leak(Box::new(workflow));
    let job = eval::Eval {
        workflow,
        cases,
        weights: rubrics.weights(),
        setup,
        out: out.clone(),
        progress,
        no_demos: false,
    };
    let rt = match run::runtime_for_runs(job.setup.concurrency) {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return 2;
        }
    };
    match rt.block_on(job.run()) {
        Ok(report) => {
            out!("{}", eval::render_table(&report));
            errln!("results: {}", out.display());
            let all_passed = report.unfinished == 0 && report.results.iter().all(|r| r.passed);
            i32::from(!all_passed)
        }
        Err(e) => {
            errln!("error: {e}");
            2
        }
    }
}
