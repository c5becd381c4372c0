use clap::{CommandFactory, ValueEnum};
use clap_complete::Shell;

use super::{Cli, CliError, Code};

/// Print a shell completion script.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  rondo completions bash > ~/.local/share/bash-completion/completions/rondo\n  rondo completions zsh > ~/.zfunc/_rondo    # with fpath+=(~/.zfunc) before compinit\n  rondo completions fish > ~/.config/fish/completions/rondo.fish"
)]
pub struct Args {
    #[arg(value_enum)]
    shell: CompletionShell,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let shell = match args.shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "rondo", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    Ok(0)
}
