//! The command line: one module a command, each holding its arguments and the call into
//! the library. A command returns its exit code, or a [`CliError`] that knows its own.

use std::io::IsTerminal;
use std::path::Path;

use clap::{Parser, Subcommand};

use crate::check::{CheckOptions, Checked};
use crate::diagnostics;
use crate::eval::dataset::Problems;
use crate::run::progress;

/// Standard output and error of a command-line tool: a reader that goes away early
/// (`rondo runs | head -1`) ends the process the way it ends any Unix tool, by SIGPIPE,
/// quietly, instead of a panic. (Rust ignores SIGPIPE, so a write fails with EPIPE.)
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_or_end(&mut std::io::stdout().lock(), format_args!($($arg)*)) };
}
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => { out!("{}\n", format_args!($($arg)*)) };
}
macro_rules! err {
    ($($arg:tt)*) => { $crate::cli::write_or_end(&mut std::io::stderr().lock(), format_args!($($arg)*)) };
}
macro_rules! errln {
    ($($arg:tt)*) => { err!("{}\n", format_args!($($arg)*)) };
}

mod check;
mod completions;
mod dump;
mod error;
mod eval;
mod fmt;
mod graph;
mod lsp;
mod optimize;
mod replay;
mod resume;
mod run;
mod runs;
mod serve;
mod swebench;
mod test;
mod view;

pub use error::CliError;

/// What a command ends with when it did its work: the process's exit code.
pub type Code = i32;

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
    Check(check::Args),
    Fmt(fmt::Args),
    Graph(graph::Args),
    Lsp(lsp::Args),
    Run(run::Args),
    Resume(resume::Args),
    Replay(replay::Args),
    View(view::Args),
    Runs(runs::Args),
    Test(test::Args),
    Serve(serve::Args),
    Eval(eval::Args),
    Swebench(swebench::Args),
    Optimize(optimize::Args),
    Dump(dump::Args),
    Completions(completions::Args),
}

impl Command {
    pub fn run(self) -> Result<Code, CliError> {
        match self {
            Command::Check(args) => check::run(args),
            Command::Fmt(args) => fmt::run(args),
            Command::Graph(args) => graph::run(args),
            Command::Lsp(args) => lsp::run(args),
            Command::Run(args) => run::run(args),
            Command::Resume(args) => resume::run(args),
            Command::Replay(args) => replay::run(args),
            Command::View(args) => view::run(args),
            Command::Runs(args) => runs::run(args),
            Command::Test(args) => test::run(args),
            Command::Serve(args) => serve::run(args),
            Command::Eval(args) => eval::run(args),
            Command::Swebench(args) => swebench::run(args),
            Command::Optimize(args) => optimize::run(args),
            Command::Dump(args) => dump::run(args),
            Command::Completions(args) => completions::run(args),
        }
    }
}

/// Parses the arguments, runs the command and says why it failed, if it did: the
/// process's exit code.
pub fn main_entry() -> Code {
    match Cli::parse().command.run() {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}

/// The checked workflow of `path`; else its diagnostics on standard error (exit 1), or
/// why it could not be read (exit 2).
fn load_workflow(path: &Path) -> Result<Checked, CliError> {
    let options = CheckOptions { offline: true };
    let (file, loaded) = crate::check::load_checked(path, &options)?;
    // Every caller only needs the workflow; the tree is left for the process exit.
    std::mem::forget(loaded.ast);
    loaded.checked.map_err(|_| {
        CliError::shown(
            format!(
                "{}x {}: fix the errors above first (rondo check)\n",
                diagnostics::render_human(&file, &loaded.diagnostics.sorted(), stderr_color(), 100),
                path.display()
            ),
            1,
        )
    })
}

/// Problems of an input file (a dataset, rubrics) and the closing line: nothing ran (exit 2).
fn input_problems(problems: &Problems) -> CliError {
    CliError::shown(
        format!(
            "{}x {}: {} error(s); nothing ran\n",
            render_problems(problems),
            problems.file.path.display(),
            problems.diagnostics.error_count()
        ),
        2,
    )
}

fn render_problems(problems: &Problems) -> String {
    diagnostics::render_human(
        &problems.file,
        &problems.diagnostics.sorted(),
        stderr_color(),
        100,
    )
}

/// Whether diagnostics on standard error are drawn in colour.
fn stderr_color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// `-q`: nothing; else a live line on a terminal, plain lines otherwise.
fn progress_mode(quiet: bool) -> progress::Mode {
    if quiet {
        progress::Mode::Quiet
    } else if std::io::stderr().is_terminal() {
        progress::Mode::Live
    } else {
        progress::Mode::Plain
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(runtime_error)
}

fn runtime_error(e: std::io::Error) -> CliError {
    CliError::new(format!("cannot start the async runtime: {e}"))
}
