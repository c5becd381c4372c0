use std::path::PathBuf;

use super::{CliError, Code, load_workflow};
use crate::serve::{self, ServeOptions};

/// Serve workflows over HTTP: runs on request, their status, live events and graphs.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Routes: GET / (the run viewer), POST /runs, GET /runs, GET /runs/{id},\n  GET /runs/{id}/events (SSE), GET /runs/{id}/view, POST /runs/{id}/cancel, GET /workflows, GET /workflows/{name}/graph?format=dot|mermaid|svg,\n  POST /ask, GET /trace/{id}, GET /openapi.json, GET /health (docs/serve.md)\n\nExamples:\n  rondo serve workflows/micro_agent.rondo --provider scripted --port 8080\n  RONDO_TOKEN=s3cret rondo serve workflows/*.rondo --token-env RONDO_TOKEN --concurrency 8"
)]
pub struct Args {
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
    /// Where Docker environments run: docker (this machine's engine), process (runner
    /// processes on this machine, no isolation: benchmarks, tests), swarm, kubernetes.
    #[arg(long, default_value = "docker", value_name = "ENGINE")]
    engine: rondo_env::SandboxEngine,
}

pub fn run(args: Args) -> Result<Code, CliError> {
    let token = match args.token_env {
        Some(var) => match std::env::var(&var) {
            Ok(token) if !token.is_empty() => Some(token),
            _ => {
                return Err(CliError::new(format!(
                    "--token-env names `{var}`, which is not set (or empty)"
                )));
            }
        },
        None => None,
    };
    let workflows = args
        .workflows
        .iter()
        .map(|path| Ok((path.clone(), load_workflow(path)?)))
        .collect::<Result<Vec<_>, CliError>>()?;
    Ok(serve::serve(
        workflows,
        ServeOptions {
            workflows: args.workflows,
            host: args.host,
            port: args.port,
            concurrency: args.concurrency,
            token,
            runs_root: args.run_dir,
            cors_origins: args.cors_origins,
            ask: args.ask,
            provider: args.provider,
            unconfined_tools: args.unconfined_tools,
            engine: args.engine,
        },
    ))
}
