//! The process engine's zygote: every sandbox's runner is forked by one `runner.py
//! zygote`, and a runner whose environment went away, shut down or merely dropped, ends
//! and is reaped (no zombie piles up in a driver that lives long, as `rondo serve` does).

use std::path::Path;
use std::time::{Duration, Instant};

use rondo_env::{DockerConfig, ExecRequest, SandboxEngine};

/// `(state, parent)` of a process, or `None` when it is gone.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = text.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    Some((state, rest.next()?.parse().ok()?))
}

fn cmdline(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
}

/// The pid of the runner a command of `env` runs under (the command's parent is its
/// shepherd, whose parent is the runner).
async fn runner_of(env: &dyn rondo_env::Environment) -> i32 {
    let out = env
        .exec(ExecRequest::shell("cut -d' ' -f4 /proc/$PPID/stat"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    out.stdout.trim().parse().unwrap()
}

async fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if stat(pid).is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn start(run: &Path) -> std::sync::Arc<dyn rondo_env::Environment> {
    let config = DockerConfig::new("unused", "zygote-test");
    SandboxEngine::Process.start(config, run).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_are_forked_by_one_zygote_and_reaped_when_their_environment_goes() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path()).await;
    let b = start(dir.path()).await;
    let (ra, rb) = (runner_of(a.as_ref()).await, runner_of(b.as_ref()).await);
    assert_ne!(ra, rb);
    let (_, za) = stat(ra).unwrap();
    let (_, zb) = stat(rb).unwrap();
    assert_eq!(za, zb, "one zygote forks both");
    assert_ne!(za, std::process::id() as i32);
    assert!(
        cmdline(za).trim_end().ends_with("zygote"),
        "{}",
        cmdline(za)
    );

    // Shut down: the runner ends and is reaped at once.
    a.shutdown().await.unwrap();
    assert!(stat(ra).is_none(), "{:?}", stat(ra));
    // Dropped without a shutdown: its input closes, it ends, and it is reaped soon after.
    drop(b);
    assert!(gone(rb).await, "{:?}", stat(rb));
    // The zygote stays for the next sandbox.
    assert!(stat(za).is_some_and(|(s, _)| s != 'Z'));
    let c = start(dir.path()).await;
    assert_eq!(stat(runner_of(c.as_ref()).await).map(|(_, p)| p), Some(za));
    c.shutdown().await.unwrap();
}
