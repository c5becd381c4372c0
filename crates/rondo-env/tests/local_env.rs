//! LocalEnv: exec, timeouts, logs, streaming, copies, and tool installs on the host.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rondo_env::{Environment, ExecRequest, LocalConfig, LocalEnv, StreamKind};

async fn env(dir: &std::path::Path) -> LocalEnv {
    LocalEnv::start(LocalConfig::new(dir.join("run")))
        .await
        .unwrap()
}

#[tokio::test]
async fn exec_captures_streams_exit_code_env_and_workdir() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    std::fs::create_dir_all(env.run_dir().join("sub")).unwrap();
    let out = env
        .exec(
            ExecRequest::shell("echo out; echo err >&2; echo $GREETING; pwd; exit 3")
                .env("GREETING", "hi")
                .workdir("sub"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(3));
    assert!(!out.success());
    assert_eq!(out.stderr, "err\n");
    assert!(out.stdout.starts_with("out\nhi\n"), "{out:?}");
    assert!(out.stdout.trim_end().ends_with("/run/sub"), "{out:?}");
    assert!(out.merged.contains("out\n") && out.merged.contains("err\n"));
    assert!(!out.timed_out);

    let out = env
        .exec(ExecRequest::argv(["printf", "%s|", "a b", "c"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "a b|c|");
    let out = env
        .exec(ExecRequest::argv(["no-such-program-xyz"]))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(127));
    assert!(out.stderr.contains("command not found"));
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let started = std::time::Instant::now();
    let out = env
        .exec(
            ExecRequest::shell("sleep 30 & echo $! > bg.pid; echo started; sleep 30")
                .timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(!out.success());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.stdout, "started\n");
    let pid: i32 = std::fs::read_to_string(env.run_dir().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !common::process_alive(pid),
        "background child {pid} survived the timeout"
    );
}

#[tokio::test]
async fn log_file_keeps_everything_and_lines_are_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let log = dir.path().join("logs/step.log");
    let out = env
        .exec(
            ExecRequest::shell("seq 1 20000; echo oops >&2; printf tail")
                .log_path(&log)
                .on_line(move |kind, line| seen.lock().unwrap().push((kind, line.to_string()))),
        )
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("$ seq 1 20000"), "{}", &text[..40]);
    assert!(text.contains("\n19999\n20000\n"));
    assert!(text.contains("oops"));
    assert!(text.trim_end().ends_with("s]") && text.contains("[exit code 0 after"));
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 20002);
    assert!(lines.contains(&(StreamKind::Stderr, "oops".to_string())));
    assert_eq!(
        lines.last().unwrap(),
        &(StreamKind::Stdout, "tail".to_string())
    );
    let short = out.merged_for_prompt(100, 100);
    assert!(
        short.len() < 300 && short.contains("characters elided"),
        "{short}"
    );
}

#[tokio::test]
async fn copy_in_and_out() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path()).await;
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/b/f.txt"), "hello").unwrap();
    env.copy_in(&src, "copied").await.unwrap();
    let out = env
        .exec(ExecRequest::shell("cat copied/a/b/f.txt"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "hello");
    env.copy_out("copied/a", &dir.path().join("back"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("back/b/f.txt")).unwrap(),
        "hello"
    );
}

#[tokio::test]
async fn shutdown_kills_running_commands() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(env(dir.path()).await);
    let runner = env.clone();
    let task = tokio::spawn(async move {
        runner
            .exec(ExecRequest::shell("echo $$ > main.pid; exec sleep 30"))
            .await
    });
    let pid_file = env.run_dir().join("main.pid");
    while !pid_file.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.shutdown().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(out.exit_code, Some(128 + 9));
    assert!(env.exec(ExecRequest::shell("true")).await.is_err());
}

#[tokio::test]
async fn installs_the_sample_tool_and_reuses_the_install() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LocalConfig::new(dir.path().join("run"));
    config.tools = vec![common::pyfind_spec()];
    config.tool_cache_dir = Some(dir.path().join("cache"));
    config.install_log_dir = Some(dir.path().join("install-logs"));
    let env = LocalEnv::start(config.clone()).await.unwrap();
    let tools = env.tools();
    assert!(!tools.cached);
    let steps: Vec<&str> = tools.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(
        steps,
        [
            "copy-source",
            "create-env",
            "verify-env",
            "build-backend",
            "pip-install",
            "setup-script",
            "check-executable"
        ]
    );
    for s in &tools.steps {
        assert!(s.log.is_file(), "{:?}", s.log);
    }
    let setup_log = std::fs::read_to_string(&tools.steps[5].log).unwrap();
    assert!(setup_log.contains("pyfind 0.1.0 in"), "{setup_log}");

    let tool = tools.get("pyfind").unwrap();
    std::fs::write(
        env.run_dir().join("m.py"),
        "class Greeter:\n    def hello(self):\n        pass\n",
    )
    .unwrap();
    let out = env
        .exec(tool.command(&["symbol", "hello", "--defs-only"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "m.py:2: def Greeter.hello\n", "{out:?}");
    let out = env
        .exec(tool.command(&["show", "m.py", "1", "2"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "1 | class Greeter:\n2 |     def hello(self):\n");
    // The source folder in the repository is not touched by the editable install.
    assert!(
        !common::project_root()
            .join("tools/pyfind/src/pyfind.egg-info")
            .exists()
    );

    let again = LocalEnv::start(config).await.unwrap();
    assert!(again.tools().cached);
    assert!(again.tools().steps.is_empty());
    assert_eq!(again.tools().hash, tools.hash);
}

#[tokio::test]
async fn failing_setup_script_names_the_spec_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = common::pyfind_spec();
    spec.setup_script = Some("echo about to fail; exit 3".into());
    let mut config = LocalConfig::new(dir.path().join("run"));
    config.tools = vec![spec];
    config.tool_cache_dir = Some(dir.path().join("cache"));
    let err = LocalEnv::start(config)
        .await
        .err()
        .expect("install must fail")
        .to_string();
    assert!(err.contains("config/tools/pyfind.yaml:"), "{err}");
    assert!(err.contains("field `setup_script`"), "{err}");
    assert!(err.contains("step `setup-script` (exit code 3"), "{err}");
    assert!(err.contains("about to fail"), "{err}");
}
