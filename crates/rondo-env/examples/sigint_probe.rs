//! Starts a DockerEnv, runs a long command, and cleans up on SIGINT (exit 130).
//! Used by the tests; also shows the shutdown pattern the interpreter should follow.
//!
//! usage: sigint_probe <run-id> [image]

use std::io::Write;
use std::process::ExitCode;

use rondo_env::{DockerConfig, DockerEnv, Environment, ExecRequest};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let run_id = args.next().unwrap_or_else(|| "sigint-probe".into());
    let image = args
        .next()
        .unwrap_or_else(|| "rondo-test-base:latest".into());
    let env = match DockerEnv::start(DockerConfig::new(image, run_id)).await {
        Ok(env) => env,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    println!("READY {}", env.container_id());
    let _ = std::io::stdout().flush();
    tokio::select! {
        out = env.exec(ExecRequest::shell("sleep 300")) => {
            println!("finished: {out:?}");
            let _ = env.shutdown().await;
            ExitCode::SUCCESS
        }
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: removing {}", env.container_id());
            match env.shutdown().await {
                Ok(()) => ExitCode::from(130),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
