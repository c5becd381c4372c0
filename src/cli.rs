//! The command line: argument parsing and dispatch only.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::check::{self, CheckOptions};
use crate::compile;
use crate::diagnostics::{self, Diagnostics};
use crate::render;
use crate::run::{self, Interpreter, RunOptions, progress};
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
    /// Run a workflow.
    #[command(
        after_help = "Examples:\n  rondo run workflows/ds_star.rondo --input question='Write hello.txt'\n  rondo run workflows/iter.rondo --provider scripted --script scripts/iter.yaml\n  rondo run workflows/ds_star.rondo --replay-from runs/20261122-091630-ab12\n\nExit code: the exit's code (success 0), 3 limit, 2 error, 130 interrupted."
    )]
    Run {
        file: PathBuf,
        /// An input value: `--input name=value` (repeatable; JSON for non-string inputs).
        #[arg(long = "input", short = 'i', value_parser = parse_key_value)]
        inputs: Vec<(String, String)>,
        /// Use this provider profile for every llm role.
        #[arg(long)]
        provider: Option<String>,
        /// Replies for the scripted provider (YAML).
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
            };
            cmd_run(&file, options)
        }
        Command::Resume { run, quiet } => cmd_resume(&run, progress_mode(quiet)),
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
    }
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
            eprintln!("error: cannot start the async runtime: {e}");
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

fn report_outcome(outcome: &run::Outcome) -> i32 {
    // Even with --quiet, a run that did not succeed says why.
    if outcome.exit_code != 0 {
        eprintln!("exit `{}`: {}", outcome.exit, outcome.reason);
    }
    eprintln!("run directory: {}", outcome.run_dir.display());
    eprintln!("workspace: {}", outcome.workspace.display());
    outcome.exit_code
}

fn cmd_run(path: &std::path::Path, options: RunOptions) -> i32 {
    let workflow = match compiled_or_report(path) {
        Ok(w) => w,
        Err(code) => return code,
    };
    runtime().block_on(async {
        match Interpreter::start(&workflow, &options) {
            Ok((interp, state)) => report_outcome(&drive_with_ctrl_c(interp, state).await),
            Err(e) => {
                eprintln!("error: {e}");
                2
            }
        }
    })
}

fn cmd_resume(run_path: &std::path::Path, mode: progress::Mode) -> i32 {
    let info = match run::rundir::read_info(run_path) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let workflow = match compiled_or_report(&info.workflow_path) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let options = RunOptions {
        progress: mode,
        ..RunOptions::default()
    };
    runtime().block_on(async {
        match Interpreter::resume(&workflow, run_path, &options) {
            Ok((interp, state)) => report_outcome(&drive_with_ctrl_c(interp, state).await),
            Err(e) => {
                eprintln!("error: {e}");
                2
            }
        }
    })
}

fn cmd_replay(run_path: &std::path::Path, full: bool) -> i32 {
    match run::replay::render(run_path, full) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

fn cmd_replay_record(path: &std::path::Path, index: i64) -> i32 {
    match run::replay::record(path, index) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

fn cmd_runs(root: &std::path::Path) -> i32 {
    let Ok(entries) = std::fs::read_dir(root) else {
        println!("no runs in {}", root.display());
        return 0;
    };
    let mut rows: Vec<run::rundir::RunInfo> = entries
        .flatten()
        .filter_map(|e| run::rundir::read_info(&e.path()).ok())
        .collect();
    rows.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    println!(
        "{:<28} {:<14} {:<12} {:<12} {:>6} {:>9}  started",
        "run", "workflow", "status", "exit", "steps", "tokens"
    );
    for info in rows {
        let steps = run::rundir::read_state(&root.join(&info.run_id))
            .map(|s| s.step)
            .unwrap_or(0);
        let status = if info.status == "running" {
            "crashed?".to_string()
        } else {
            info.status.clone()
        };
        println!(
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
                println!("test {}::{} ... ok", path.display(), report.name);
            } else {
                failed += 1;
                println!("test {}::{} ... FAILED", path.display(), report.name);
                for f in &report.failures {
                    println!("    {f}");
                }
                println!("    run directory: {}", report.run_dir.display());
            }
        }
    }
    println!("\n{passed} passed, {failed} failed");
    i32::from(failed > 0)
}

/// Reads, compiles and checks one file.
pub fn load_checked(
    path: &std::path::Path,
    options: &CheckOptions,
) -> Result<(SourceFile, compile::Workflow, Diagnostics, check::Summary), String> {
    let file =
        SourceFile::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let (ast, workflow, mut diags) = compile::load_keeping_ast(&file);
    // Every caller only needs the workflow; the tree is left for the process exit.
    std::mem::forget(ast);
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
            Ok((file, workflow, diags, summary)) => {
                // Freeing a large graph node by node only delays the exit: the process
                // ends right after reporting, and the OS takes the memory back at once.
                std::mem::forget(workflow);
                (file, diags, summary)
            }
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
