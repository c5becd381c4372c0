//! Benchmark client for `bench/providers/run.sh`, against `fake_llm.py`.
//!
//! `bench_fanout [--port 8765] [--fanout 200] [--seq 50] [--repeats 3] [--workloads fanout,llm_seq]`
//! prints one JSON line per workload, like the LangGraph suite: `fanout` sends `--fanout`
//! parallel calls through one `ProviderPool` to the server on `--port`; `llm_seq` makes
//! `--seq` sequential calls to the one on `--port + 1`.

use std::sync::Arc;
use std::time::Instant;

use rondo_provider::{
    ChatRequest, Message, ProviderKind, ProviderPool, ProviderProfile, RetryPolicy,
};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// User + system CPU seconds of this process (clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the `(comm)` part; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    match (f.get(11), f.get(12)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => 0.0,
    }
}

fn profile(name: &str, port: u16) -> ProviderProfile {
    let mut p = ProviderProfile::new(name, ProviderKind::OpenAiCompatible, "fake-model");
    p.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
    p.retry = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    };
    p
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

async fn fanout(pool: &Arc<ProviderPool>, n: usize) -> Result<f64, String> {
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let req = ChatRequest::new(vec![Message::user(format!("branch {i}"))]);
                pool.complete("fan", &req, None, &mut |_| {}).await
            })
        })
        .collect();
    for t in tasks {
        t.await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

async fn seq(pool: &Arc<ProviderPool>, n: usize) -> Result<f64, String> {
    let t0 = Instant::now();
    for i in 0..n {
        let req = ChatRequest::new(vec![Message::user(format!("step {i}"))]);
        pool.complete("seq", &req, None, &mut |_| {})
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = arg(&args, "--port", "8765")
        .parse()
        .map_err(|_| "bad --port")?;
    let n_fan: usize = arg(&args, "--fanout", "200")
        .parse()
        .map_err(|_| "bad --fanout")?;
    let n_seq: usize = arg(&args, "--seq", "50").parse().map_err(|_| "bad --seq")?;
    let repeats: usize = arg(&args, "--repeats", "3")
        .parse()
        .map_err(|_| "bad --repeats")?;
    let workloads = arg(&args, "--workloads", "fanout,llm_seq");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let pool = Arc::new(
            ProviderPool::new(vec![profile("fan", port), profile("seq", port + 1)])
                .map_err(|e| e.to_string())?,
        );
        for w in workloads.split(',') {
            let (n, first, runs, cpu0) = match w {
                "fanout" => {
                    let first = fanout(&pool, n_fan).await?;
                    let cpu0 = cpu_seconds();
                    let mut runs = Vec::new();
                    for _ in 0..repeats {
                        runs.push(fanout(&pool, n_fan).await?);
                    }
                    (n_fan, first, runs, cpu0)
                }
                "llm_seq" => {
                    let first = seq(&pool, n_seq).await?;
                    let cpu0 = cpu_seconds();
                    let mut runs = Vec::new();
                    for _ in 0..repeats {
                        runs.push(seq(&pool, n_seq).await?);
                    }
                    (n_seq, first, runs, cpu0)
                }
                other => return Err(format!("unknown workload {other}")),
            };
            let cpu_ms_per_call = (cpu_seconds() - cpu0) * 1000.0 / (n * runs.len().max(1)) as f64;
            let med = median(&runs);
            let line = serde_json::json!({
                "impl": "rondo-provider", "workload": w, "steps": n,
                "min_s": runs.iter().copied().fold(f64::INFINITY, f64::min),
                "median_s": med, "seconds": med, "runs_s": runs, "first_s": first,
                "per_step_us": med / n as f64 * 1e6, "peak_rss_mb": peak_rss_mb(),
                "client_cpu_ms_per_call": cpu_ms_per_call,
            });
            println!("{line}");
        }
        Ok(())
    })
}
