//! Where the time of one exec goes (create, start+stream, inspect), to compare with the CLI.
use std::time::Instant;

use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use rondo_env::{DockerConfig, DockerEnv, Environment};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = DockerEnv::start(DockerConfig::new("rondo-test-base:latest", "bench-phases")).await?;
    let docker = env.docker().clone();
    let id = env.container_id().to_string();
    let mut rows = Vec::new();
    for _ in 0..30 {
        let t0 = Instant::now();
        let opts = CreateExecOptions {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(vec!["true".to_string()]),
            ..Default::default()
        };
        let exec = docker.create_exec(&id, opts).await?;
        let t1 = Instant::now();
        if let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&exec.id, None).await?
        {
            while output.next().await.is_some() {}
        }
        let t2 = Instant::now();
        docker.inspect_exec(&exec.id).await?;
        let t3 = Instant::now();
        rows.push([(t1 - t0), (t2 - t1), (t3 - t2)]);
    }
    for i in 0..3 {
        let mut v: Vec<_> = rows.iter().map(|r| r[i].as_secs_f64() * 1000.0).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{} median {:.1} ms",
            ["create", "start+stream", "inspect"][i],
            v[v.len() / 2]
        );
    }
    env.shutdown().await?;
    Ok(())
}
