//! Benchmark for bench/docker: round trip of `true` in a warm container through the API
//! (this crate) versus the `docker exec` CLI, and the time from environment start to the
//! first tool command with a cached tool image.
//!
//! usage: exec_bench [iterations] [starts]

use std::path::Path;
use std::time::{Duration, Instant};

use rondo_env::{DockerConfig, DockerEnv, Environment, ExecRequest, ToolSpec};

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pct = |p: f64| ms(v[((v.len() - 1) as f64 * p).round() as usize]);
    (pct(0.5), pct(0.1), pct(0.9))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let starts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let image =
        std::env::var("RONDO_TEST_IMAGE").unwrap_or_else(|_| "rondo-test-base:latest".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()?;
    let spec = ToolSpec::from_file(&root.join("config/tools/pyfind.yaml"), &root)?;
    let logs = std::env::temp_dir().join("rondo-bench-install-logs");

    // 1. Start to first tool command. The first start may have to build the tool image.
    let mut config = DockerConfig::new(&image, "bench");
    config.tools = vec![spec];
    config.install_log_dir = Some(logs);
    let mut first_cmd = Vec::new();
    let mut start_only = Vec::new();
    for i in 0..=starts {
        let t0 = Instant::now();
        let env = DockerEnv::start(config.clone()).await?;
        let started = t0.elapsed();
        let tool = env.tools().get("pyfind").ok_or("pyfind missing")?;
        let out = env.exec(tool.command(&["--version"])).await?;
        let total = t0.elapsed();
        assert!(out.success(), "{out:?}");
        if i == 0 {
            println!(
                "initial start: {:.0} ms (tool image {}: {})",
                total.as_secs_f64() * 1000.0,
                env.tools().image.as_deref().unwrap_or("?"),
                if env.tools().cached {
                    "cached"
                } else {
                    "built now"
                }
            );
        } else {
            start_only.push(started);
            first_cmd.push(total);
        }
        env.shutdown().await?;
    }

    // 2. Warm round trips.
    let env = DockerEnv::start(DockerConfig::new(&image, "bench-exec")).await?;
    let id = env.container_id().to_string();
    for _ in 0..5 {
        env.exec(ExecRequest::argv(["true"])).await?;
        std::process::Command::new("docker")
            .args(["exec", &id, "true"])
            .status()?;
    }
    let (mut api, mut cli) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // Interleaved so both see the same engine conditions.
    for _ in 0..n {
        let t = Instant::now();
        let out = env.exec(ExecRequest::argv(["true"])).await?;
        api.push(t.elapsed());
        assert_eq!(out.exit_code, Some(0));
        let t = Instant::now();
        let status = std::process::Command::new("docker")
            .args(["exec", &id, "true"])
            .status()?;
        cli.push(t.elapsed());
        assert!(status.success());
    }
    env.shutdown().await?;

    let (a50, a10, a90) = stats(api);
    let (c50, c10, c90) = stats(cli);
    let (s50, s10, s90) = stats(start_only);
    let (f50, f10, f90) = stats(first_cmd);
    println!("| measurement | median ms | p10 ms | p90 ms |");
    println!("|---|---|---|---|");
    println!("| exec `true`, API (bollard), n={n} | {a50:.1} | {a10:.1} | {a90:.1} |");
    println!("| exec `true`, `docker exec` CLI, n={n} | {c50:.1} | {c10:.1} | {c90:.1} |");
    println!("| start with cached tool image, n={starts} | {s50:.0} | {s10:.0} | {s90:.0} |");
    println!(
        "| start + first tool command (`pyfind --version`), n={starts} | {f50:.0} | {f10:.0} | {f90:.0} |"
    );
    println!("API/CLI median ratio: {:.2}", a50 / c50);
    Ok(())
}
