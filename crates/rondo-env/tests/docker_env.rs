//! DockerEnv against the real engine (rondo-test-base:latest, built locally).
//! A missing engine fails these tests unless `RONDO_TEST_SKIP=docker` (a printed skip).

mod common;

use std::io::BufRead;
use std::time::Duration;

use bollard::Docker;
use rondo_env::{DockerConfig, DockerEnv, EnvError, Environment, ExecRequest, remove_run};

use common::IMAGE;

async fn containers_of(docker: &Docker, run_id: &str) -> Vec<String> {
    use bollard::query_parameters::ListContainersOptions;
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("rondo.run_id={run_id}")],
    )]);
    docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

async fn start(run_id: &str) -> DockerEnv {
    DockerEnv::start(DockerConfig::new(IMAGE, run_id))
        .await
        .unwrap()
}

#[tokio::test]
async fn exec_basics_and_copies() {
    if !common::docker_ready().await {
        return;
    }
    let env = start(&common::unique("basics")).await;
    let out = env
        .exec(ExecRequest::shell("echo out; echo err >&2; echo $A; pwd; exit 4").env("A", "b"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(4));
    assert_eq!(out.stdout, "out\nb\n/work\n");
    assert_eq!(out.stderr, "err\n");
    assert!(out.merged.contains("err\n"));
    let out = env
        .exec(ExecRequest::argv(["printf", "%s|", "a b", "c"]).workdir("/tmp"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "a b|c|");
    let out = env
        .exec(ExecRequest::argv(["no-such-program-xyz"]))
        .await
        .unwrap();
    // The runtime reports a missing executable itself (126, message on stdout).
    assert!(matches!(out.exit_code, Some(126 | 127)), "{out:?}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/d")).unwrap();
    std::fs::write(dir.path().join("src/d/f.txt"), "hello").unwrap();
    env.copy_in(&dir.path().join("src"), "repo").await.unwrap();
    let out = env
        .exec(ExecRequest::shell(
            "cat /work/repo/d/f.txt; echo more > /work/repo/d/g.txt",
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout, "hello", "{out:?}");
    env.copy_out("repo", &dir.path().join("back"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("back/d/g.txt")).unwrap(),
        "more\n"
    );
    env.copy_out("/work/repo/d/f.txt", &dir.path().join("one.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("one.txt")).unwrap(),
        "hello"
    );

    let log = dir.path().join("exec.log");
    let out = env
        .exec(ExecRequest::shell("seq 1 50000").log_path(&log))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("\n49999\n50000\n[exit code 0 after"),
        "{}",
        &text[text.len() - 60..]
    );
    assert!(
        out.merged_for_prompt(200, 200)
            .contains("characters elided")
    );
    env.shutdown().await.unwrap();
}

#[tokio::test]
async fn timeout_kills_the_process_and_its_children() {
    if !common::docker_ready().await {
        return;
    }
    let env = start(&common::unique("timeout")).await;
    let out = env
        .exec(
            ExecRequest::shell("sleep 301 & echo started; sleep 302; echo never")
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.stdout, "started\n");
    // Nothing of the command survives: not the shell, not the foreground or background sleep.
    let ps = env
        .exec(ExecRequest::argv(["ps", "-eo", "pid,stat,args"]))
        .await
        .unwrap();
    assert!(!ps.stdout.contains("sleep 30"), "{}", ps.stdout);
    // A process that ignores SIGTERM is killed after the grace period.
    let out = env
        .exec(ExecRequest::shell("trap '' TERM; sleep 303").timeout(Duration::from_millis(500)))
        .await
        .unwrap();
    assert!(out.timed_out);
    let ps = env
        .exec(ExecRequest::argv(["ps", "-eo", "args"]))
        .await
        .unwrap();
    assert!(!ps.stdout.contains("sleep 303"), "{}", ps.stdout);
    env.shutdown().await.unwrap();
}

#[tokio::test]
async fn network_none_is_enforced() {
    if !common::docker_ready().await {
        return;
    }
    let env = start(&common::unique("net")).await;
    let out = env
        .exec(ExecRequest::argv([
            "python3",
            "-c",
            "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3); print('connected')",
        ]))
        .await
        .unwrap();
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("connected"));
    assert!(
        out.stderr.contains("unreachable") || out.stderr.contains("Error"),
        "{out:?}"
    );
    let ifaces = env
        .exec(ExecRequest::shell("ls /sys/class/net"))
        .await
        .unwrap();
    assert_eq!(ifaces.stdout.split_whitespace().collect::<Vec<_>>(), ["lo"]);
    env.shutdown().await.unwrap();
}

#[tokio::test]
async fn limits_and_hardening_are_applied() {
    if !common::docker_ready().await {
        return;
    }
    let run_id = common::unique("limits");
    let mut config = DockerConfig::new(IMAGE, &run_id);
    config.memory_bytes = Some(256 << 20);
    config.pids_limit = Some(64);
    config.cpus = Some(0.5);
    let env = DockerEnv::start(config).await.unwrap();
    let info = env
        .docker()
        .inspect_container(env.container_id(), None)
        .await
        .unwrap();
    let hc = info.host_config.unwrap();
    assert_eq!(hc.memory, Some(256 << 20));
    assert_eq!(hc.pids_limit, Some(64));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    assert_eq!(hc.network_mode.as_deref(), Some("none"));
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(hc.security_opt, Some(vec!["no-new-privileges".to_string()]));
    assert!(hc.binds.unwrap_or_default().is_empty());
    let labels = info.config.unwrap().labels.unwrap();
    assert_eq!(labels.get("rondo.run_id"), Some(&run_id));
    // The limits are effective, not just recorded.
    let out = env.exec(ExecRequest::shell("cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; grep CapEff /proc/self/status")).await.unwrap();
    assert!(out.stdout.contains("64\n"), "{out:?}");
    assert!(out.stdout.contains("CapEff:\t0000000000000000"), "{out:?}");
    env.shutdown().await.unwrap();
}

#[tokio::test]
async fn no_container_is_left_after_normal_and_failed_runs() {
    if !common::docker_ready().await {
        return;
    }
    let docker = rondo_env::connect().await.unwrap();
    // Normal run.
    let run_id = common::unique("normal");
    let env = start(&run_id).await;
    assert_eq!(containers_of(&docker, &run_id).await.len(), 1);
    env.exec(ExecRequest::shell("true")).await.unwrap();
    env.shutdown().await.unwrap();
    assert!(containers_of(&docker, &run_id).await.is_empty());
    assert!(matches!(
        env.exec(ExecRequest::shell("true")).await,
        Err(EnvError::ShutDown)
    ));

    // A run that fails and returns early with `?`: Drop removes the container.
    let run_id = common::unique("failed");
    async fn failing_run(run_id: &str) -> Result<(), String> {
        let env = start(run_id).await;
        let out = env
            .exec(ExecRequest::shell("exit 1"))
            .await
            .map_err(|e| e.to_string())?;
        if !out.success() {
            return Err("command failed".into());
        }
        env.shutdown().await.map_err(|e| e.to_string())
    }
    assert!(failing_run(&run_id).await.is_err());
    assert!(containers_of(&docker, &run_id).await.is_empty());

    // A run that fails while starting (missing image) leaves nothing either.
    let run_id = common::unique("noimage");
    let err = DockerEnv::start(DockerConfig::new("rondo-no-such-image:latest", &run_id))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, EnvError::ImageMissing { .. }), "{err}");
    assert!(containers_of(&docker, &run_id).await.is_empty());

    // --keep-env leaves it; remove_run cleans it up.
    let run_id = common::unique("keep");
    let mut config = DockerConfig::new(IMAGE, &run_id);
    config.keep = true;
    let env = DockerEnv::start(config).await.unwrap();
    env.shutdown().await.unwrap();
    drop(env);
    assert_eq!(containers_of(&docker, &run_id).await.len(), 1);
    assert_eq!(remove_run(&docker, &run_id).await.unwrap().len(), 1);
    assert!(containers_of(&docker, &run_id).await.is_empty());
}

static PROBE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The `sigint_probe` example; a full `cargo test` builds it, `--test docker_env` does not.
fn probe() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/sigint_probe");
    let _guard = PROBE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-p", "rondo-env", "--example", "sigint_probe"])
            .status()
            .unwrap();
        assert!(
            status.success() && path.is_file(),
            "cannot build {}",
            path.display()
        );
    }
    path
}

#[tokio::test]
async fn sigint_removes_the_container() {
    if !common::docker_ready().await {
        return;
    }
    let docker = rondo_env::connect().await.unwrap();
    let run_id = common::unique("sigint");
    let mut child = std::process::Command::new(probe())
        .args([&run_id, IMAGE])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("READY "), "{line}");
    let containers = containers_of(&docker, &run_id).await;
    assert_eq!(containers.len(), 1);
    wait_for_process(&docker, &containers[0], "sleep 300").await;
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(containers_of(&docker, &run_id).await.is_empty());
}

/// Waits until a process whose command line contains `needle` runs in the container
/// (bounded: 30 s), so a signal is sent while the command is in flight, not before it.
async fn wait_for_process(docker: &Docker, container: &str, needle: &str) {
    use bollard::query_parameters::TopOptions;
    for _ in 0..300 {
        let top = docker
            .top_processes(container, Some(TopOptions::default()))
            .await
            .unwrap();
        let running = top
            .processes
            .unwrap_or_default()
            .iter()
            .any(|row| row.iter().any(|field| field.contains(needle)));
        if running {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{needle}` never ran in {container}");
}

#[tokio::test]
async fn crashed_runs_are_cleaned_up_and_docker_unavailable_is_an_error() {
    if !common::docker_ready().await {
        return;
    }
    let docker = rondo_env::connect().await.unwrap();
    // SIGKILL gives no chance to clean up: cleanup_stale finds the orphan by its labels.
    let run_id = common::unique("crash");
    let mut child = std::process::Command::new(probe())
        .args([&run_id, IMAGE])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let left = containers_of(&docker, &run_id).await;
    assert_eq!(left.len(), 1);
    let removed = rondo_env::cleanup_stale(&docker).await.unwrap();
    assert!(removed.contains(&left[0]), "{removed:?}");
    assert!(containers_of(&docker, &run_id).await.is_empty());

    let out = std::process::Command::new(probe())
        .args(["unavailable", IMAGE])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Docker unavailable at unix:///nonexistent/docker.sock"),
        "{stderr}"
    );
}

#[tokio::test]
async fn installs_the_sample_tool_once_then_reuses_the_image() {
    if !common::docker_ready().await {
        return;
    }
    let docker = rondo_env::connect().await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    // A unique setup script gives a fresh content hash, so the install really runs.
    let mut spec = common::pyfind_spec();
    let nonce = common::unique("nonce");
    spec.setup_script = Some(format!("{}\n# {nonce}\n", spec.setup_script.unwrap()));
    let run_id = common::unique("tools");
    let mut config = DockerConfig::new(IMAGE, &run_id);
    config.tools = vec![spec];
    config.install_log_dir = Some(logs.path().to_path_buf());
    let env = DockerEnv::start(config.clone()).await.unwrap();
    let tools = env.tools().clone();
    assert!(!tools.cached);
    let steps: Vec<&str> = tools.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(
        steps,
        [
            // without conda in the image, a venv (the log says so)
            "env-manager",
            "copy-source",
            "create-env",
            "verify-env",
            "build-backend",
            "pip-install",
            "setup-script",
            "check-executable"
        ]
    );
    let manager = std::fs::read_to_string(&tools.steps[0].log).unwrap();
    assert!(manager.contains("no conda in this image"), "{manager}");
    let verify = std::fs::read_to_string(&tools.steps[3].log).unwrap();
    assert!(
        verify.contains("/opt/envs/pyfind/bin/python 3.11"),
        "{verify}"
    );
    let tag = tools.image.clone().unwrap();
    assert!(tag.starts_with("rondo-tools:"));

    let tool = tools.get("pyfind").unwrap();
    let out = env
        .exec(tool.command(&["defs", "/tools/pyfind/src/pyfind/cli.py"]))
        .await
        .unwrap();
    assert!(out.stdout.contains(": def cmd_show"), "{out:?}");
    let out = env
        .exec(tool.command(&[
            "symbol",
            "python_defs",
            "--root",
            "/tools/pyfind",
            "--defs-only",
        ]))
        .await
        .unwrap();
    assert_eq!(
        out.stdout, "src/pyfind/cli.py:28: def python_defs\n",
        "{out:?}"
    );
    env.shutdown().await.unwrap();

    let image_id = docker.inspect_image(&tag).await.unwrap().id;
    let again = DockerEnv::start(config).await.unwrap();
    assert!(again.tools().cached);
    assert!(again.tools().steps.is_empty());
    assert_eq!(again.tools().image.as_deref(), Some(tag.as_str()));
    let info = docker
        .inspect_container(again.container_id(), None)
        .await
        .unwrap();
    assert_eq!(info.image, image_id);
    let out = again
        .exec(again.tools().get("pyfind").unwrap().command(&["--version"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "pyfind 0.1.0\n");
    again.shutdown().await.unwrap();
    // Only builder and run containers of this run existed; none is left.
    assert!(containers_of(&docker, &run_id).await.is_empty());
    docker
        .remove_image(
            &tag,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn failing_setup_script_fails_the_start_cleanly() {
    if !common::docker_ready().await {
        return;
    }
    let docker = rondo_env::connect().await.unwrap();
    let mut spec = common::pyfind_spec();
    spec.setup_script = Some(format!(
        "echo about to fail # {}\nexit 3",
        common::unique("n")
    ));
    let run_id = common::unique("badsetup");
    let logs = tempfile::tempdir().unwrap();
    let mut config = DockerConfig::new(IMAGE, &run_id);
    config.tools = vec![spec];
    config.install_log_dir = Some(logs.path().to_path_buf());
    let err = DockerEnv::start(config)
        .await
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("config/tools/pyfind.yaml:"), "{err}");
    assert!(err.contains("field `setup_script`"), "{err}");
    assert!(err.contains("step `setup-script` (exit code 3"), "{err}");
    assert!(err.contains("about to fail"), "{err}");
    assert!(containers_of(&docker, &run_id).await.is_empty());

    // Missing source folder and unknown method are rejected before any container exists.
    let mut spec = common::pyfind_spec();
    spec.source = Some("/nonexistent/pyfind".into());
    let mut config = DockerConfig::new(IMAGE, &run_id);
    config.tools = vec![spec];
    let err = DockerEnv::start(config).await.err().unwrap().to_string();
    assert!(
        err.contains(
            "pyfind.yaml:4:9: field `source` names `/nonexistent/pyfind`, which is not a folder"
        ),
        "{err}"
    );
    assert!(containers_of(&docker, &run_id).await.is_empty());
}

#[tokio::test]
async fn both_transports_give_the_same_workspace_contract() {
    use rondo_env::{Mount, Transport};
    if !common::docker_ready().await {
        return;
    }
    for transport in [Transport::BindMount, Transport::CopyInOut] {
        let dir = tempfile::tempdir().unwrap();
        let (ws, data) = (dir.path().join("ws"), dir.path().join("data"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(ws.join("in.txt"), "one\n").unwrap();
        std::fs::write(data.join("d.txt"), "data\n").unwrap();
        let mut config = DockerConfig::new(IMAGE, common::unique("transport"));
        config.transport = transport;
        config.mounts = vec![
            Mount {
                host: ws.clone(),
                container: "/work".into(),
                writable: true,
                replace: false,
            },
            Mount {
                host: data.clone(),
                container: "/data".into(),
                writable: false,
                replace: false,
            },
        ];
        let env = DockerEnv::start(config).await.unwrap();
        let out = env
            .exec(ExecRequest::shell(
                "cat in.txt /data/d.txt; echo two > out.txt; mkdir -p sub; echo three > sub/s.txt",
            ))
            .await
            .unwrap();
        assert_eq!(out.stdout, "one\ndata\n", "{transport:?}: {out:?}");
        // What the command wrote is on the host when exec returns.
        assert_eq!(
            std::fs::read_to_string(ws.join("out.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("sub/s.txt")).unwrap(),
            "three\n"
        );
        // And what the host changes is there for the next command.
        std::fs::write(ws.join("in.txt"), "changed\n").unwrap();
        let out = env.exec(ExecRequest::shell("cat in.txt")).await.unwrap();
        assert_eq!(out.stdout, "changed\n", "{transport:?}");
        // A read-only mount is never written back.
        env.exec(ExecRequest::shell(
            "echo x > /data/new.txt 2>/dev/null; true",
        ))
        .await
        .unwrap();
        assert!(!data.join("new.txt").exists(), "{transport:?}");
        env.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn the_docker_socket_is_never_mounted() {
    use rondo_env::Mount;
    for host in ["/var/run/docker.sock", "/run", "/var/run", "/"] {
        let mut config = DockerConfig::new(IMAGE, common::unique("socket"));
        config.mounts = vec![Mount {
            host: host.into(),
            container: "/x".into(),
            writable: false,
            replace: false,
        }];
        let err = DockerEnv::start(config)
            .await
            .err()
            .unwrap_or_else(|| panic!("{host} was mounted"));
        assert!(err.to_string().contains("Docker socket"), "{host}: {err}");
    }
}

/// An argument past the OS limit (one argument over 128 KiB on Linux) is a failed command
/// (exit 126, the reason in `stderr`), through the runner and through a plain exec alike.
#[tokio::test]
async fn an_over_long_argument_is_a_failed_command() {
    if !common::docker_ready().await {
        return;
    }
    for use_runner in [true, false] {
        let mut config = DockerConfig::new(IMAGE, common::unique("e2big"));
        config.use_runner = use_runner;
        let env = DockerEnv::start(config).await.unwrap();
        let long = "x".repeat(200_000);
        let out = env
            .exec(ExecRequest::argv(["echo", long.as_str()]))
            .await
            .unwrap_or_else(|e| panic!("runner {use_runner}: {e}"));
        assert_eq!(out.exit_code, Some(126), "runner {use_runner}: {out:?}");
        assert!(
            out.stderr.contains("rgument list too long"),
            "runner {use_runner}: {}",
            out.stderr
        );
        // The environment still works.
        let ok = env.exec(ExecRequest::argv(["echo", "fine"])).await.unwrap();
        assert_eq!(ok.stdout, "fine\n");
        env.shutdown().await.unwrap();
    }
}

const PROCS_PY: &str = include_str!("procs.py");

/// The processes of the container but its init, the listing's own and the runner.
async fn leftovers(env: &DockerEnv) -> String {
    let out = env
        .exec(ExecRequest::argv(["python3", "-c", PROCS_PY]))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    out.stdout
}

/// [`leftovers`] once processes that are already dying are gone: a command whose runner it
/// killed is no one's child, so nothing waits for its end (bounded: 10 s).
async fn leftovers_when_settled(env: &DockerEnv, expected: &str) -> String {
    let mut seen = leftovers(env).await;
    for _ in 0..100 {
        if seen == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = leftovers(env).await;
    }
    seen
}

/// Leaves processes behind every way a shell can: a new session, `nohup`, a double fork,
/// a cleared environment (no marker), all with their output elsewhere so the command ends.
const ESCAPES: &str = "setsid sleep 1001 >/dev/null 2>&1 </dev/null & \
     nohup sleep 1002 >/dev/null 2>&1 & \
     ( sleep 1003 >/dev/null 2>&1 & ) ; \
     env -i /bin/sleep 1004 >/dev/null 2>&1 & \
     echo spawned";

fn config(run: &str, use_runner: bool) -> DockerConfig {
    let mut config = DockerConfig::new(IMAGE, common::unique(run));
    config.use_runner = use_runner;
    config
}

/// What a command starts ends with it, through the runner and through plain execs, as
/// root in the container and as another user.
#[tokio::test]
async fn a_command_leaves_no_process_behind() {
    if !common::docker_ready().await {
        return;
    }
    for use_runner in [true, false] {
        for user in [None, Some("65534:65534")] {
            let mut config = config("leftovers", use_runner);
            config.user = user.map(str::to_string);
            let env = DockerEnv::start(config).await.unwrap();
            let out = env.exec(ExecRequest::shell(ESCAPES)).await.unwrap();
            assert_eq!(out.stdout, "spawned\n", "{use_runner} {user:?}: {out:?}");
            assert!(!out.timed_out);
            assert_eq!(
                leftovers(&env).await,
                "sleep infinity\n",
                "runner {use_runner}, user {user:?}"
            );
            env.shutdown().await.unwrap();
        }
    }
}

/// Two commands at once in one container: when the first ends, its daemon goes and the
/// second's child stays. Without the runner a daemon that cleared its environment cannot
/// be told apart, so it goes when the last command running ends.
#[tokio::test]
async fn a_command_ending_spares_the_commands_running_beside_it() {
    if !common::docker_ready().await {
        return;
    }
    let first = "setsid sleep 2001 >/dev/null 2>&1 </dev/null & \
         echo $! > /tmp/first.tmp && mv /tmp/first.tmp /tmp/first.pid; \
         env -i /bin/sleep 2002 >/dev/null 2>&1 & \
         while [ ! -e /tmp/second.started ]; do sleep 0.05; done; echo first done";
    let second = "sleep 3001 >/dev/null 2>&1 & mine=$!; touch /tmp/second.started; \
         while [ ! -s /tmp/first.pid ]; do sleep 0.05; done; theirs=$(cat /tmp/first.pid); \
         while kill -0 $theirs 2>/dev/null; do sleep 0.05; done; \
         kill -0 $mine && echo mine alive";
    for use_runner in [true, false] {
        let env = DockerEnv::start(config("beside", use_runner))
            .await
            .unwrap();
        let (a, b) = tokio::join!(
            env.exec(ExecRequest::shell(first).timeout(Duration::from_secs(60))),
            env.exec(ExecRequest::shell(second).timeout(Duration::from_secs(60)))
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.stdout, "first done\n", "runner {use_runner}: {a:?}");
        assert_eq!(b.stdout, "mine alive\n", "runner {use_runner}: {b:?}");
        assert!(b.success(), "runner {use_runner}: {b:?}");
        assert_eq!(
            leftovers(&env).await,
            "sleep infinity\n",
            "runner {use_runner}"
        );
        env.shutdown().await.unwrap();
    }
}

/// A command that kills the process watching over it (its parent) does not get away:
/// its whole tree is killed at once and the runner serves the next command.
#[tokio::test]
async fn a_command_that_kills_its_watcher_takes_its_tree_down() {
    if !common::docker_ready().await {
        return;
    }
    let env = DockerEnv::start(config("watcher", true)).await.unwrap();
    let out = env
        .exec(
            ExecRequest::shell(
                "setsid sleep 4001 >/dev/null 2>&1 </dev/null & kill -9 $PPID; sleep 4002",
            )
            .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(137), "{out:?}");
    assert!(!out.timed_out, "{out:?}");
    assert_eq!(leftovers(&env).await, "sleep infinity\n");
    env.shutdown().await.unwrap();
}

/// A command given up mid-way (the run's wall time ran out) is killed whole, also the
/// processes that cleared their environment.
#[tokio::test]
async fn a_dropped_command_is_killed_whole() {
    if !common::docker_ready().await {
        return;
    }
    let env = DockerEnv::start(config("dropped", true)).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let req = ExecRequest::shell(
        "env -i /bin/sleep 5001 >/dev/null 2>&1 & setsid sleep 5002 >/dev/null 2>&1 & \
         echo ready; sleep 5003",
    )
    .on_line(move |_, line| {
        let _ = tx.send(line.to_string());
    });
    tokio::select! {
        out = env.exec(req) => panic!("the command ended: {out:?}"),
        line = rx.recv() => assert_eq!(line.as_deref(), Some("ready")),
    }
    // The kill runs in the background: look until it is done.
    let mut left = String::new();
    for _ in 0..200 {
        left = leftovers(&env).await;
        if left == "sleep infinity\n" {
            break;
        }
    }
    assert_eq!(left, "sleep infinity\n");
    env.shutdown().await.unwrap();
}

/// Unset limits are the defaults, never none; a process limit below 1 is refused.
#[tokio::test]
async fn unset_limits_are_the_defaults() {
    if !common::docker_ready().await {
        return;
    }
    let mut config = config("unset", true);
    config.pids_limit = None;
    config.memory_bytes = None;
    config.cpus = None;
    let env = DockerEnv::start(config.clone()).await.unwrap();
    let info = env
        .docker()
        .inspect_container(env.container_id(), None)
        .await
        .unwrap();
    let hc = info.host_config.unwrap();
    assert_eq!(hc.pids_limit, Some(512));
    assert_eq!(hc.memory, Some(2 << 30));
    assert_eq!(hc.nano_cpus, Some(2_000_000_000));
    env.shutdown().await.unwrap();
    config.pids_limit = Some(0);
    let err = DockerEnv::start(config).await.err().unwrap();
    assert!(err.to_string().contains("at least 1"), "{err}");
}

/// A command cannot reach the runner's own input (to start a command of its own outside
/// its tree, or cancel another's), its environment or its memory, as root in the container
/// or as another user.
#[tokio::test]
async fn a_command_cannot_reach_the_runner() {
    if !common::docker_ready().await {
        return;
    }
    let script = r#"
import os
def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
runner = os.getpid()
while parent(runner) != 0:
    runner = parent(runner)
request = b'{"id": 999999, "argv": ["sleep", "6001"], "cwd": "/", "env": {}, "timeout": 100000, "grace": 1}\n'
for what, mode in (("fd/0", os.O_WRONLY), ("environ", os.O_RDONLY), ("mem", os.O_RDONLY)):
    try:
        fd = os.open(f"/proc/{runner}/{what}", mode)
        if what == "fd/0":
            os.write(fd, request)
        print(what, "open")
    except OSError as e:
        print(what, "refused")
"#;
    for user in [None, Some("65534:65534")] {
        let mut config = config("runner", true);
        config.user = user.map(str::to_string);
        let env = DockerEnv::start(config).await.unwrap();
        let out = env
            .exec(ExecRequest::argv(["python3", "-c", script]))
            .await
            .unwrap();
        assert_eq!(
            out.stdout, "fd/0 refused\nenviron refused\nmem refused\n",
            "{user:?}: {out:?}"
        );
        assert_eq!(leftovers(&env).await, "sleep infinity\n", "{user:?}");
        env.shutdown().await.unwrap();
    }
}

/// A command that signals everything it can (the container's init, its `sleep infinity`,
/// every process of its user, the runner included) does not stop the container: the
/// commands after it run, through a new runner, as root in the container or not.
#[tokio::test]
async fn a_command_cannot_stop_the_container() {
    if !common::docker_ready().await {
        return;
    }
    let vandal = "kill -TERM 1; kill -KILL 1; pkill -KILL -x sleep; pkill -KILL python3; \
                  kill -KILL -1; echo survived";
    for use_runner in [true, false] {
        for user in [None, Some("65534:65534")] {
            let mut config = config("vandal", use_runner);
            config.user = user.map(str::to_string);
            let env = DockerEnv::start(config).await.unwrap();
            let out = env.exec(ExecRequest::shell(vandal)).await.unwrap();
            if use_runner {
                // It killed the runner, and so itself: a failed command, not an error.
                assert_eq!(out.exit_code, None, "{user:?}: {out:?}");
                assert!(out.stderr.contains("runner in the container was killed"));
            }
            let state = env
                .docker()
                .inspect_container(env.container_id(), None)
                .await
                .unwrap()
                .state
                .unwrap();
            assert_eq!(state.running, Some(true), "{use_runner} {user:?}");
            let next = env.exec(ExecRequest::shell("echo next")).await.unwrap();
            assert_eq!(next.stdout, "next\n", "{use_runner} {user:?}: {next:?}");
            assert_eq!(
                leftovers_when_settled(&env, "sleep infinity\n").await,
                "sleep infinity\n",
                "{use_runner} {user:?}"
            );
            env.shutdown().await.unwrap();
        }
    }
}
