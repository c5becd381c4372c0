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
    // A marker in the child's command line finds it from outside the tool's PID namespace.
    let marker = format!(
        "bg-child-{}-{:?}",
        std::process::id(),
        std::time::Instant::now()
    );
    let out = env
        .exec(
            ExecRequest::shell(format!(
                "python3 -c 'import time; time.sleep(30)' {marker} & echo started; sleep 30"
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
    assert!(
        left.is_empty(),
        "background child {left:?} survived the timeout"
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
    // The command says it is running through a FIFO, which the test reads: no polling.
    let ready = env.run_dir().join("ready");
    let c_path = std::ffi::CString::new(ready.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let runner = env.clone();
    let task = tokio::spawn(async move {
        runner
            .exec(ExecRequest::shell("echo $$ > ready; exec sleep 30"))
            .await
    });
    let pid = tokio::task::spawn_blocking(move || std::fs::read_to_string(ready).unwrap())
        .await
        .unwrap();
    assert!(pid.trim().parse::<u32>().is_ok(), "{pid:?}");
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

/// Runs `line` in `env` and returns (success, merged output).
async fn sh(env: &LocalEnv, line: &str) -> (bool, String) {
    let out = env.exec(ExecRequest::shell(line)).await.unwrap();
    (out.success(), out.merged)
}

/// A command writes beneath its run directory and its own `TMPDIR`, reads anywhere, and
/// can write nothing else: not a file beside the run directory (where a run keeps its
/// journal), not through a link, not the user's home.
#[tokio::test]
async fn commands_write_only_their_folder_and_their_tmpdir() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("events.jsonl"), "{\"seq\":1}\n").unwrap();
    std::fs::write(d.join("state.json"), "{}\n").unwrap();
    std::fs::create_dir(d.join("home")).unwrap();
    let env = env(d).await;

    let attacks = [
        "echo x > ../events.jsonl",
        "echo x >> ../events.jsonl",
        ": > ../events.jsonl",
        "rm ../state.json",
        "mv ../state.json ./stolen.json",
        "truncate -s 0 ../events.jsonl",
        "ln -s ../events.jsonl link; echo x > link",
        "ln ../events.jsonl hard",
        "mkdir ../sub",
        &format!("echo x > {}/home/.bashrc", d.display()),
        "echo x > /tmp/rondo-escape-test",
    ];
    for attack in attacks {
        let (ok, out) = sh(&env, attack).await;
        assert!(!ok, "`{attack}` succeeded: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(d.join("events.jsonl")).unwrap(),
        "{\"seq\":1}\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("state.json")).unwrap(),
        "{}\n"
    );
    assert!(!d.join("home/.bashrc").exists());
    assert!(!d.join("sub").exists());
    assert!(!std::path::Path::new("/tmp/rondo-escape-test").exists());

    let (ok, out) = sh(
        &env,
        "set -e; echo a > in.txt; mkdir -p deep/er; echo b > deep/er/f; rm in.txt; \
         echo t > \"$TMPDIR/t\"; mv \"$TMPDIR/t\" moved; cat moved; echo x > /dev/null; \
         cat ../events.jsonl; printf '%s' \"$TMPDIR\"",
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.starts_with("t\n{\"seq\":1}\n"), "{out}");
    let tmp = out.lines().last().unwrap().to_string();
    assert!(!tmp.starts_with(env.run_dir().to_str().unwrap()), "{tmp}");
    assert!(std::path::Path::new(&tmp).is_dir());
    assert_eq!(
        std::fs::read_to_string(env.run_dir().join("deep/er/f")).unwrap(),
        "b\n"
    );
    drop(env);
    assert!(
        !std::path::Path::new(&tmp).exists(),
        "TMPDIR is removed with the environment"
    );
}

/// A folder beneath the run directory declared read-only (the records of a run made in a
/// `--workspace` folder) cannot be written, removed, renamed or unmounted by a command.
#[tokio::test]
async fn a_read_only_folder_beneath_the_run_dir_stays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let records = run.join(".rondo/runs/r");
    std::fs::create_dir_all(&records).unwrap();
    std::fs::write(records.join("events.jsonl"), "{\"seq\":1}\n").unwrap();
    let mut config = LocalConfig::new(&run);
    config.read_only = vec![run.join(".rondo")];
    let env = LocalEnv::start(config).await.unwrap();
    for attack in [
        "echo x > .rondo/runs/r/events.jsonl",
        "rm .rondo/runs/r/events.jsonl",
        "rm -r .rondo",
        "mv .rondo elsewhere",
        "umount -l .rondo",
        "touch .rondo/runs/r/new",
    ] {
        let (ok, out) = sh(&env, attack).await;
        assert!(!ok, "`{attack}` succeeded: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(records.join("events.jsonl")).unwrap(),
        "{\"seq\":1}\n"
    );
    assert!(!records.join("new").exists());
    let (ok, out) = sh(
        &env,
        "cat .rondo/runs/r/events.jsonl && echo y > beside.txt",
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(out, "{\"seq\":1}\n");
    assert!(run.join("beside.txt").exists());
}
