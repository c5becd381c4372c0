/// Run the language server on standard input and output (for an editor).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The editor starts it; see docs/editors.md for VS Code, Neovim and Helix.\n\nDiagnostics are those of `rondo check` (the environment tier included unless --offline), published as each `.rondo` file or `.tera` template is edited; hover, definition, references, rename, completion, document symbols, formatting and semantic tokens are served.\n\nExamples:\n  rondo lsp            # what an editor runs\n  rondo lsp --offline  # without the API-key warnings\n\nExit code: 0 after the client's `shutdown` and `exit` (or when it closes the connection after `initialize`), 2 when it sends what is not the protocol or leaves before `initialize`."
)]
pub struct Args {
    /// Skip the environment tier (the API keys the providers need), as `rondo check --offline`.
    #[arg(long)]
    offline: bool,
    /// Speak over standard input and output (the only transport; accepted because editors pass it).
    #[arg(long)]
    stdio: bool,
}

pub fn run(args: Args) -> Result<super::Code, super::CliError> {
    let _ = args.stdio;
    let (connection, io_threads) = lsp_server::Connection::stdio();
    let served = crate::lsp::serve(
        &connection,
        crate::lsp::Options {
            offline: args.offline,
        },
    );
    // The writer thread ends once every sender is gone.
    drop(connection);
    let joined = io_threads.join();
    served.map_err(|e| super::CliError::new(format!("language server: {e}")))?;
    joined.map_err(|e| super::CliError::new(format!("language server: {e}")))?;
    Ok(0)
}
