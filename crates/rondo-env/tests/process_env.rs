//! ProcessEnv (the `process` engine): commands through a runner started as a local child
//! process, copies confined to its root.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rondo_env::{DockerConfig, Environment, ExecRequest, Mount, SandboxEngine};

struct Sandbox {
    env: Arc<dyn Environment>,
    /// Mounted writable at /work.
    workspace: PathBuf,
    run: PathBuf,
    _dir: tempfile::TempDir,
}

async fn sandbox() -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    let run = dir.path().join("run");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    let mut config = DockerConfig::new("unused", "process-test");
    config.env.insert("GREETING".into(), "hi".into());
    config.mounts.push(Mount {
        host: workspace.clone(),
        container: "/work".into(),
        writable: true,
        replace: false,
    });
    let env = SandboxEngine::Process.start(config, &run).await.unwrap();
    Sandbox {
        env,
        workspace,
        run,
        _dir: dir,
    }
}

/// The sandbox's root: the one folder under the run's `sandboxes/`.
fn root_of(run: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(run.join("sandboxes"))
        .unwrap()
        .map(|e| e.unwrap().path().join("root"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

#[tokio::test]
async fn exec_runs_in_the_sandbox_root_with_a_clean_environment() {
    let s = sandbox().await;
    assert_eq!(s.env.kind(), "process");
    std::fs::create_dir_all(s.workspace.join("sub")).unwrap();
    let out = s
        .env
        .exec(
            ExecRequest::shell("echo out; echo err >&2; echo $GREETING $EXTRA; pwd -P; exit 3")
                .env("EXTRA", "there")
                .workdir("sub"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert_eq!(out.stderr, "err\n");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[..2], ["out", "hi there"]);
    let real_sub = std::fs::canonicalize(s.workspace.join("sub")).unwrap();
    assert_eq!(lines[2], real_sub.to_string_lossy());

    let out = s
        .env
        .exec(ExecRequest::argv(["printf", "%s|", "a b", "c"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "a b|c|");
    let out = s
        .env
        .exec(ExecRequest::argv(["no-such-program-xyz"]))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(127), "{out:?}");

    // Only what a local tool gets: nothing of this process's own environment.
    let out = s.env.exec(ExecRequest::argv(["env"])).await.unwrap();
    let root = root_of(&s.run);
    assert!(std::env::var("CARGO_PKG_NAME").is_ok());
    assert!(!out.stdout.contains("CARGO_PKG_NAME="), "{}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("HOME={}", root.join("root").display())),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("RONDO_EXEC_ID="), "{}", out.stdout);
    s.env.shutdown().await.unwrap();
    assert!(!root.exists(), "the sandbox folder outlived shutdown");
    let err = s.env.exec(ExecRequest::shell("true")).await.unwrap_err();
    assert!(err.to_string().contains("shut down"), "{err}");
}

#[tokio::test]
async fn a_timeout_is_observed_and_kills_the_command_tree() {
    let s = sandbox().await;
    let marker = format!("process-env-timeout-{}", std::process::id());
    let out = s
        .env
        .exec(
            ExecRequest::shell(format!(
                "sh -c 'sleep 30; echo {marker}' & echo started; sleep 30"
            ))
            .timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(!out.success());
    assert_eq!(out.stdout, "started\n");
    let left = common::processes_with(&marker);
    for pid in &left {
        // SAFETY: signalling a process has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "{left:?} survived the timeout");
    s.env.shutdown().await.unwrap();
}

#[tokio::test]
async fn output_is_bounded_in_memory_and_counted_whole() {
    let s = sandbox().await;
    let out = s
        .env
        .exec(
            ExecRequest::shell("head -c 5000000 /dev/zero | tr '\\0' x; echo; echo end")
                .max_output(64 * 1024),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert!(out.stdout.len() < 80 * 1024, "{}", out.stdout.len());
    assert!(out.total_bytes >= 5_000_000, "{}", out.total_bytes);
    assert!(out.cut_bytes > 0);
    assert!(out.stdout.ends_with("end\n"));
    s.env.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_runner_killed_mid_command_is_an_error_and_the_next_command_gets_another() {
    let s = sandbox().await;
    let marker = format!("process-env-orphan-{}", std::process::id());
    // The command's shell is the shepherd's child; the shepherd is the runner's.
    let err = s
        .env
        .exec(
            ExecRequest::shell(format!(
                "sh -c 'sleep 30; echo {marker}' & \
                 kill -9 $(cut -d' ' -f4 /proc/$PPID/stat); sleep 30"
            ))
            .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("runner died"), "{err}");
    // The shepherd killed the command's tree when its runner went.
    let mut left = common::processes_with(&marker);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = common::processes_with(&marker);
    }
    for pid in &left {
        // SAFETY: signalling a process has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "{left:?} outlived its runner");
    let out = s.env.exec(ExecRequest::shell("echo again")).await.unwrap();
    assert_eq!(out.stdout, "again\n");
    s.env.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_ends_what_commands_keep_running() {
    let s = sandbox().await;
    let marker = format!("process-env-kept-{}", std::process::id());
    let mut req = ExecRequest::shell(format!("sh -c 'sleep 30; echo {marker}' >/dev/null 2>&1 &"));
    req.keep_processes = true;
    let out = s.env.exec(req).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    // One process, or two for a moment: the outer shell's child before it execs the inner.
    assert!(!common::processes_with(&marker).is_empty());
    s.env.shutdown().await.unwrap();
    let left = common::processes_with(&marker);
    for pid in &left {
        // SAFETY: signalling a process has no memory-safety preconditions.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "{left:?} outlived the environment");
}

#[tokio::test]
async fn copies_go_in_and_out_of_the_root_and_the_mounts() {
    let s = sandbox().await;
    let host = tempfile::tempdir().unwrap();
    let tree = host.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::fs::write(tree.join("a/b/f.txt"), "deep").unwrap();
    std::fs::write(tree.join("top.txt"), "top").unwrap();
    s.env.copy_in(&tree, "/opt/tree").await.unwrap();
    s.env
        .copy_in(&tree.join("top.txt"), "in_work.txt")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("in_work.txt")).unwrap(),
        "top"
    );
    // An absolute path is the sandbox's, never this machine's.
    let root = root_of(&s.run);
    assert_eq!(
        std::fs::read_to_string(root.join("opt/tree/a/b/f.txt")).unwrap(),
        "deep"
    );
    let out = s
        .env
        .exec(ExecRequest::shell("cat opt/tree/a/b/f.txt > work/made.txt").workdir("/"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let back = host.path().join("back");
    s.env.copy_out("/opt/tree", &back).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(back.join("a/b/f.txt")).unwrap(),
        "deep"
    );
    s.env
        .copy_out("/work/made.txt", &host.path().join("made.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("made.txt")).unwrap(),
        "deep"
    );
    s.env.shutdown().await.unwrap();
}

#[tokio::test]
async fn hostile_copy_paths_are_refused() {
    let s = sandbox().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
    let file = outside.path().join("payload");
    std::fs::write(&file, "payload").unwrap();

    for path in ["../x", "/work/../../x", "a/../../x"] {
        let err = s.env.copy_in(&file, path).await.unwrap_err();
        assert!(err.to_string().contains(".."), "{path}: {err}");
        let err = s
            .env
            .copy_out(path, &outside.path().join("got"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(".."), "{path}: {err}");
    }
    // An absolute path names the sandbox's file, which is not there.
    assert!(
        s.env
            .copy_out("/etc/hostname", &outside.path().join("hostname"))
            .await
            .is_err()
    );
    assert!(!outside.path().join("hostname").exists());

    // A link a command made, leading out: neither read nor written through.
    let out = s
        .env
        .exec(
            ExecRequest::argv(["ln", "-s", &outside.path().to_string_lossy(), "opt-link"])
                .workdir("/"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let err = s
        .env
        .copy_out("/opt-link/secret", &outside.path().join("leak"))
        .await
        .unwrap_err();
    assert!(!outside.path().join("leak").exists(), "{err}");
    let err = s.env.copy_in(&file, "/opt-link/evil").await.unwrap_err();
    assert!(!outside.path().join("evil").exists(), "{err}");
    // The same in a mount: a link in the workspace leading out.
    std::os::unix::fs::symlink(outside.path(), s.workspace.join("out")).unwrap();
    assert!(s.env.copy_in(&file, "out/evil").await.is_err());
    assert!(!outside.path().join("evil").exists());
    assert!(
        s.env
            .copy_out("out/secret", &outside.path().join("leak"))
            .await
            .is_err()
    );
    assert!(!outside.path().join("leak").exists());
    s.env.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_mount_inside_another_and_the_docker_socket_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = DockerConfig::new("unused", "process-test");
    for at in ["/work", "/work/inner"] {
        config.mounts.push(Mount {
            host: dir.path().to_path_buf(),
            container: at.into(),
            writable: false,
            replace: false,
        });
    }
    let err = match SandboxEngine::Process.start(config, dir.path()).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a nested mount was accepted"),
    };
    assert!(err.contains("inside the mount"), "{err}");
    let mut config = DockerConfig::new("unused", "process-test");
    config.mounts.push(Mount {
        host: "/var/run".into(),
        container: "/sock".into(),
        writable: false,
        replace: false,
    });
    let err = match SandboxEngine::Process.start(config, dir.path()).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the docker socket's folder was accepted"),
    };
    assert!(err.contains("Docker socket"), "{err}");
}
