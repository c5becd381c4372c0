//! Engine-overhead benchmark of the interpreter, the Rondo side of
//! `bench/langgraph` (`chain` and `loop`).
//!
//! ```text
//! cargo build --release --example bench_engine
//! target/release/examples/bench_engine [--workloads chain,loop,loop_llm] [--modes off,on]
//!     [--repeats 3] [--dir bench/engine/workloads] [--tmp /tmp/rondo-bench-engine]
//! ```
//!
//! The parent re-executes itself once per (workload, mode) with `--workload NAME --mode M`,
//! so each JSON line's `peak_rss_mb` (VmHWM) is that workload's own. A child compiles the
//! workflow file once (`bench/engine/workloads/NAME/NAME.rondo`, made by `gen.py`), then does one untimed
//! warm-up run and `--repeats` timed runs in-process. Mode `off` runs with
//! `checkpoints: false` (no run directory files); mode `on` writes the run directory
//! (`run.json`, `events.jsonl`, `state.json` written atomically with fsync after every step)
//! under `--tmp`.
//!
//! A run is `Interpreter::start` + `drive` (what LangGraph's `app.invoke` covers on a
//! compiled graph); `drive_*` fields time `drive` alone. `per_step_us` = median / steps.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use rondo::run::{Interpreter, RunOptions};

// The same allocator as the `rondo` binary, so these figures are the engine's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use rondo::source::SourceFile;
use serde_json::{Value, json};

const WORKLOADS: &[&str] = &["chain", "loop", "loop_llm", "fsync_floor"];

struct Args {
    workloads: Vec<String>,
    modes: Vec<String>,
    repeats: usize,
    dir: PathBuf,
    tmp: PathBuf,
    child: Option<(String, String)>,
}

fn parse_args() -> Args {
    let mut a = Args {
        workloads: WORKLOADS.iter().map(|s| s.to_string()).collect(),
        modes: vec!["off".into(), "on".into()],
        repeats: 3,
        dir: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/bench/engine/workloads"
        )),
        tmp: std::env::temp_dir().join("rondo-bench-engine"),
        child: None,
    };
    let mut workload = None;
    let mut mode = "off".to_string();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next().unwrap_or_else(|| {
                eprintln!("{flag} needs a value");
                std::process::exit(2)
            })
        };
        let list = |v: String| v.split(',').map(str::to_string).collect::<Vec<_>>();
        match flag.as_str() {
            "--workloads" => a.workloads = list(value()),
            "--modes" => a.modes = list(value()),
            "--repeats" => a.repeats = value().parse().expect("--repeats N"),
            "--dir" => a.dir = PathBuf::from(value()),
            "--tmp" => a.tmp = PathBuf::from(value()),
            "--workload" => workload = Some(value()),
            "--mode" => mode = value(),
            "-h" | "--help" => {
                println!(
                    "bench_engine [--workloads {}] [--modes off,on] [--repeats N] [--dir DIR] [--tmp DIR]",
                    WORKLOADS.join(",")
                );
                std::process::exit(0)
            }
            other => {
                eprintln!("unknown option {other}");
                std::process::exit(2)
            }
        }
    }
    a.child = workload.map(|w| (w, mode));
    a
}

/// `VmHWM` (peak resident set) or `VmRSS` of this process, in MB.
fn status_mb(field: &str) -> f64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Expected final counter and steps of each workload.
fn expected(workload: &str) -> (i64, u64) {
    match workload {
        "chain" => (200, 200),
        _ => (1000, 3000),
    }
}

/// `steps` appends of `bytes` (newline-terminated) to a new file, each followed by `fdatasync`.
fn append_sync(path: &std::path::Path, steps: usize, bytes: usize) -> Result<(), String> {
    use std::io::Write;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| e.to_string())?;
    let mut line = vec![b'x'; bytes.max(1)];
    if let Some(last) = line.last_mut() {
        *last = b'\n';
    }
    for _ in 0..steps {
        f.write_all(&line).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?;
    }
    drop(f);
    std::fs::remove_file(path).map_err(|e| e.to_string())
}

/// The machine's own floor for a durable step, measured in the same run and the same
/// folder as the checkpointed runs: `steps` appends of `bytes` to one file, each followed
/// by `fdatasync` (what one journalled step must at least cost).
fn fsync_floor(args: &Args, steps: usize, bytes: usize) -> Result<Value, String> {
    use std::io::Write;
    std::fs::create_dir_all(&args.tmp).map_err(|e| e.to_string())?;
    let path = args.tmp.join(format!("floor-{}", std::process::id()));
    let line = vec![b'x'; bytes.saturating_sub(1)];
    let mut runs = Vec::new();
    for i in 0..=args.repeats {
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        for _ in 0..steps {
            f.write_all(&line).map_err(|e| e.to_string())?;
            f.write_all(b"\n").map_err(|e| e.to_string())?;
            f.sync_data().map_err(|e| e.to_string())?;
        }
        if i > 0 {
            runs.push(t.elapsed().as_secs_f64());
        }
    }
    let _ = std::fs::remove_file(&path);
    let med = median(&runs);
    Ok(json!({
        "workload": "fsync_floor", "engine": "machine", "steps": steps, "bytes_per_step": bytes,
        "seconds": round6(med), "median_s": round6(med),
        "min_s": round6(runs.iter().copied().fold(f64::INFINITY, f64::min)),
        "per_step_us": (med / steps as f64 * 1e6 * 100.0).round() / 100.0,
    }))
}

fn child(workload: &str, mode: &str, args: &Args) -> Result<Value, String> {
    if workload == "fsync_floor" {
        // The loop's journal: about 600 bytes a step (5 lines), measured in `loop_ckpt`.
        return fsync_floor(args, 3000, 640);
    }
    let rss_start = status_mb("VmHWM:");
    let path = args.dir.join(workload).join(format!("{workload}.rondo"));
    let source = SourceFile::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = Instant::now();
    let compiled = rondo::compile::load(&source);
    let compile_s = t.elapsed().as_secs_f64();
    if compiled.1.has_errors() {
        return Err(format!("{} does not compile", path.display()));
    }
    drop(compiled);
    // What runs is a checked workflow; its compile time is the figure above.
    let options = rondo::check::CheckOptions { offline: true };
    let workflow = rondo::check::load(&source, &options)
        .checked
        .map_err(|_| format!("{} does not pass check", path.display()))?;
    let counter = workflow
        .memory
        .iter()
        .position(|m| m.name == "counter")
        .ok_or("no `counter` memory")?;
    let checkpoints = match mode {
        "off" => false,
        "on" => true,
        other => return Err(format!("unknown mode {other}")),
    };
    let root = args
        .tmp
        .join(format!("{workload}-{mode}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    let rss_after_compile = status_mb("VmHWM:");
    // The same runtime as `rondo run` (src/cli/mod.rs).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (want_counter, want_steps) = expected(workload);
    let mut runs = Vec::new();
    let mut drives = Vec::new();
    let mut steps = 0;
    let mut first = 0.0;
    let mut journal_bytes = 0;
    let mut floors = Vec::new();
    for i in 0..=args.repeats {
        let options = RunOptions {
            runs_root: root.clone(),
            run_id: Some(format!("run{i}")),
            checkpoints,
            ..RunOptions::default()
        };
        let (total, drive, outcome) = rt.block_on(async {
            let t = Instant::now();
            let (interp, state) =
                Interpreter::start(&workflow, &options).map_err(|e| e.to_string())?;
            let d = Instant::now();
            let outcome = interp.drive(state).await;
            Ok::<_, String>((
                t.elapsed().as_secs_f64(),
                d.elapsed().as_secs_f64(),
                outcome,
            ))
        })?;
        let got = outcome.state.memory[counter]
            .plain()
            .and_then(Value::as_i64);
        if checkpoints && i == 0 {
            let journal = root.join(format!("run{i}")).join("events.jsonl");
            journal_bytes = std::fs::metadata(journal).map_or(0, |m| m.len());
        }
        if outcome.exit != "done" || got != Some(want_counter) || outcome.state.step != want_steps {
            return Err(format!(
                "{workload}: run ended at `{}` ({}) with counter {got:?} after {} steps",
                outcome.exit, outcome.reason, outcome.state.step
            ));
        }
        steps = outcome.state.step;
        if i == 0 {
            first = total;
        } else {
            runs.push(total);
            drives.push(drive);
            if checkpoints {
                // Paired with this run, in the same folder: the machine's floor for as
                // many durable appends of the journal's bytes per step.
                let t = Instant::now();
                append_sync(
                    &root.join("floor"),
                    steps as usize,
                    journal_bytes as usize / steps.max(1) as usize,
                )?;
                floors.push(t.elapsed().as_secs_f64());
            }
        }
        drop(outcome);
        // Keep the disk footprint of checkpointed runs to one run directory.
        let _ = std::fs::remove_dir_all(root.join(format!("run{i}")));
    }
    let _ = std::fs::remove_dir_all(&root);
    let med = median(&runs);
    let min = runs.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(json!({
        "workload": if checkpoints { format!("{workload}_ckpt") } else { workload.to_string() },
        "engine": "rondo",
        "checkpoints": checkpoints,
        "steps": steps,
        "journal_bytes_per_step": journal_bytes / steps.max(1),
        "paired_floor_per_step_us": (median(&floors) / steps.max(1) as f64 * 1e6 * 100.0).round() / 100.0,
        "paired_floor_ratio": if floors.is_empty() { Value::Null } else {
            let ratios: Vec<f64> = runs.iter().zip(&floors).map(|(r, f)| r / f).collect();
            json!((median(&ratios) * 100.0).round() / 100.0)
        },
        "seconds": round6(med),
        "min_s": round6(min),
        "median_s": round6(med),
        "runs_s": runs.iter().map(|&r| round6(r)).collect::<Vec<_>>(),
        "first_s": round6(first),
        "per_step_us": (med / steps as f64 * 1e6 * 100.0).round() / 100.0,
        "drive_median_s": round6(median(&drives)),
        "drive_per_step_us": (median(&drives) / steps as f64 * 1e6 * 100.0).round() / 100.0,
        "compile_s": round6(compile_s),
        "peak_rss_mb": (status_mb("VmHWM:") * 10.0).round() / 10.0,
        "rss_at_start_mb": (rss_start * 10.0).round() / 10.0,
        "rss_after_compile_mb": (rss_after_compile * 10.0).round() / 10.0,
        "file": path.display().to_string(),
    }))
}

fn main() {
    let args = parse_args();
    if let Some((workload, mode)) = &args.child {
        match child(workload, mode, &args) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1)
            }
        }
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    println!(
        "{}",
        json!({"meta": true, "engine": "rondo", "version": env!("CARGO_PKG_VERSION"),
               "nproc": std::thread::available_parallelism().map_or(0, |n| n.get()),
               "repeats": args.repeats, "tmp": args.tmp})
    );
    let mut failed = false;
    for workload in &args.workloads {
        let modes = if workload == "fsync_floor" {
            vec!["on".to_string()]
        } else {
            args.modes.clone()
        };
        for mode in &modes {
            let out = Command::new(&exe)
                .args(["--workload", workload, "--mode", mode])
                .args(["--repeats", &args.repeats.to_string()])
                .arg("--dir")
                .arg(&args.dir)
                .arg("--tmp")
                .arg(&args.tmp)
                .output()
                .expect("re-executing bench_engine");
            let stdout = String::from_utf8_lossy(&out.stdout);
            match stdout.lines().last() {
                Some(line) if out.status.success() => println!("{line}"),
                _ => {
                    eprint!("{}", String::from_utf8_lossy(&out.stderr));
                    eprintln!("workload {workload} (checkpoints {mode}) failed");
                    failed = true;
                }
            }
        }
    }
    if failed {
        std::process::exit(1)
    }
}
