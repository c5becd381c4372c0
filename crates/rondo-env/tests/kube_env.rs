//! KubeEnv against a fake API server (`kube_fake`) that speaks the Kubernetes API for the
//! calls KubeEnv makes, checks every request, and runs each pod's commands as local
//! processes: the exec websocket, the runner protocol and the tar copies are real; the
//! cluster (scheduling, images, isolation) is not.

mod kube_fake;

use std::path::Path;
use std::time::{Duration, Instant};

use kube_fake::{Behaviour, FakeKube, NAMESPACE};
use rondo_env::{
    DockerConfig, EnvError, Environment, ExecRequest, KubeEnv, KubeOptions, Mount,
    remove_kube_batch, set_batch_label,
};

const BATCH: &str = "kube-tests";

fn options() -> KubeOptions {
    KubeOptions {
        start_timeout: Duration::from_secs(20),
        call_timeout: Duration::from_secs(10),
        copy_timeout: Duration::from_secs(30),
        ..KubeOptions::default()
    }
}

/// A sandbox config whose working folder is `workdir` on this machine: the fake's pods
/// share its file system.
fn config(run_id: &str, workdir: &Path) -> DockerConfig {
    let mut config = DockerConfig::new("rondo-test-base:latest", run_id);
    config.workdir = workdir.to_string_lossy().into_owned();
    config
}

async fn start(fake: &FakeKube, config: DockerConfig) -> KubeEnv {
    set_batch_label(BATCH);
    KubeEnv::start(fake.config(), config, options())
        .await
        .unwrap()
}

fn no_refusals(fake: &FakeKube) {
    let refused = fake.recorded(|r| r.refused.clone());
    assert!(refused.is_empty(), "the fake refused: {refused:#?}");
}

/// Whether a process is gone (or a zombie), waiting a little for it to go.
async fn gone(pid: u32) -> bool {
    for _ in 0..50 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty()
            || stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_spec_exec_round_trip_and_shutdown() {
    let fake = FakeKube::start(Behaviour {
        start_delay: Duration::from_millis(300),
        ..Behaviour::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("round trip/1", dir.path());
    cfg.user = Some("1000:1000".into());
    cfg.cpus = Some(1.5);
    cfg.memory_bytes = Some(512 << 20);
    cfg.cap_add = vec!["NET_BIND_SERVICE".into()];
    cfg.masks = vec![format!("{}/.rondo", dir.path().display())];
    cfg.env.insert("FROM_POD".into(), "pod-env".into());
    let started = Instant::now();
    let env = start(&fake, cfg).await;
    let start_time = started.elapsed();
    assert_eq!(env.kind(), "kubernetes");

    // What the cluster received, field by field.
    let pod = fake.recorded(|r| r.created[0].clone());
    let c = &pod["spec"]["containers"][0];
    assert_eq!(pod["metadata"]["name"], env.pod_name());
    let run_label = pod["metadata"]["labels"]["rondo.run_id"].as_str().unwrap();
    assert!(run_label.starts_with("round_trip_1-"), "{run_label}");
    assert_eq!(
        pod["metadata"]["annotations"]["rondo.run_id"],
        "round trip/1"
    );
    assert_eq!(pod["metadata"]["labels"]["rondo.batch"], BATCH);
    assert_eq!(pod["metadata"]["labels"]["rondo.network"], "none");
    assert_eq!(c["image"], "rondo-test-base:latest");
    assert_eq!(c["securityContext"]["runAsUser"], 1000);
    assert_eq!(c["securityContext"]["runAsGroup"], 1000);
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], false);
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        serde_json::json!(["NET_BIND_SERVICE"])
    );
    assert_eq!(c["resources"]["limits"]["cpu"], "1500m");
    assert_eq!(
        c["resources"]["limits"]["memory"],
        (512u64 << 20).to_string()
    );
    assert_eq!(c["volumeMounts"][0]["readOnly"], true);
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    let policies = fake.recorded(|r| r.policies.clone());
    assert_eq!(policies.len(), 1, "{policies:?}");

    let out = env
        .exec(
            ExecRequest::shell("echo out; echo err >&2; echo $A $FROM_POD; pwd; exit 4")
                .env("A", "b"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(4), "{out:?}");
    assert_eq!(
        out.stdout,
        format!("out\nb pod-env\n{}\n", dir.path().display())
    );
    assert_eq!(out.stderr, "err\n");
    let out = env
        .exec(ExecRequest::argv(["printf", "%s|", "a b", "c"]).workdir("/tmp"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "a b|c|");
    let out = env
        .exec(ExecRequest::argv(["no-such-program-xyz"]))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(127), "{out:?}");
    // Bytes that are not UTF-8 and a large output cross the channel protocol intact.
    let out = env
        .exec(ExecRequest::shell(
            "head -c 300000 /dev/zero | tr '\\0' 'x'",
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), 300_000);

    let rounds = 20;
    let t = Instant::now();
    for _ in 0..rounds {
        let out = env.exec(ExecRequest::argv(["true"])).await.unwrap();
        assert_eq!(out.exit_code, Some(0));
    }
    eprintln!(
        "figures: pod start {:.0} ms (fake start delay 300 ms); exec round trip {:.2} ms",
        start_time.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3 / rounds as f64
    );

    // One runner exec served every command.
    let runners = fake.recorded(|r| r.execs.iter().filter(|e| e[0] == "python3").count());
    assert_eq!(runners, 1);
    // A second sandbox of the batch makes no second policy.
    let other = start(&fake, config("round-trip-2", dir.path())).await;
    assert_eq!(fake.recorded(|r| r.policies.len()), 1);
    assert_eq!(fake.pods().len(), 2);

    env.shutdown().await.unwrap();
    env.shutdown().await.unwrap();
    assert!(matches!(
        env.exec(ExecRequest::argv(["true"])).await,
        Err(EnvError::ShutDown)
    ));
    assert_eq!(fake.pods(), vec![other.pod_name().to_string()]);
    drop(other);
    assert!(fake.pods().is_empty(), "a dropped env deletes its pod");
    no_refusals(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_and_user_settings_reach_the_pod() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config("net", dir.path());
    cfg.network = Some("bridge".into());
    cfg.read_only_root = true;
    let env = start(&fake, cfg).await;
    let pod = fake.recorded(|r| r.created[0].clone());
    let c = &pod["spec"]["containers"][0];
    assert!(pod["metadata"]["labels"]["rondo.network"].is_null());
    assert!(c["securityContext"]["runAsNonRoot"].is_null());
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/tmp");
    // A sandbox with network needs no policy.
    assert!(fake.recorded(|r| r.policies.is_empty()));
    env.shutdown().await.unwrap();

    let mut cfg = config("named-user", dir.path());
    cfg.user = Some("nobody".into());
    let err = KubeEnv::start(fake.config(), cfg, options())
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("numeric ids"), "{err}");
    assert_eq!(fake.recorded(|r| r.created.len()), 1, "nothing was sent");
    no_refusals(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_observed_and_the_command_killed() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let env = start(&fake, config("timeout", dir.path())).await;
    let out = env
        .exec(
            ExecRequest::shell("echo $$ > pid; echo started; exec sleep 30")
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.stdout, "started\n");
    let pid: u32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid).await, "the timed-out command {pid} still runs");
    let out = env
        .exec(ExecRequest::argv(["echo", "after"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "after\n");
    env.shutdown().await.unwrap();
    no_refusals(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_in_and_out_and_copied_mounts() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let pod_root = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(host.path().join("src/d")).unwrap();
    std::fs::write(host.path().join("src/d/f.txt"), "hello").unwrap();
    std::fs::create_dir_all(host.path().join("mnt")).unwrap();
    std::fs::write(host.path().join("mnt/seen.txt"), "from host").unwrap();
    let mut cfg = config("copies", pod_root.path());
    cfg.mounts = vec![Mount {
        host: host.path().join("mnt"),
        container: format!("{}/mnt", pod_root.path().display()),
        writable: true,
        replace: false,
    }];
    let env = start(&fake, cfg).await;

    env.copy_in(&host.path().join("src"), "repo").await.unwrap();
    let out = env
        .exec(ExecRequest::shell(
            "cat repo/d/f.txt; echo more > repo/d/g.txt; cat mnt/seen.txt; echo made > mnt/new.txt",
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout, "hellofrom host", "{out:?}");
    // The writable mount came back after the command.
    assert_eq!(
        std::fs::read_to_string(host.path().join("mnt/new.txt")).unwrap(),
        "made\n"
    );
    env.copy_out("repo", &host.path().join("back"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("back/d/g.txt")).unwrap(),
        "more\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("back/d/f.txt")).unwrap(),
        "hello"
    );
    // A single file, and a path that is not there.
    env.copy_out("repo/d/f.txt", &host.path().join("one.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("one.txt")).unwrap(),
        "hello"
    );
    let err = env
        .copy_out("no-such", &host.path().join("x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exit code"), "{err}");
    // A link inside the tree is fine; one out of it is refused, and nothing is written.
    std::fs::create_dir_all(pod_root.path().join("links")).unwrap();
    std::os::unix::fs::symlink("sub/a", pod_root.path().join("links/inside")).unwrap();
    env.copy_out("links", &host.path().join("links-ok"))
        .await
        .unwrap();
    std::os::unix::fs::symlink("/etc/hostname", pod_root.path().join("links/out")).unwrap();
    let err = env
        .copy_out("links", &host.path().join("links-out"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("absolute path"), "{err}");
    assert!(!host.path().join("links-out").exists());
    env.shutdown().await.unwrap();
    no_refusals(&fake);
}

/// A tar entry with a name the `tar` crate's builder would not write: a pod's tar can
/// hold anything.
fn raw_entry(name: &str, kind: tar::EntryType, link: Option<&str>, data: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_old();
    {
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
    }
    header.set_entry_type(kind);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_archives_from_a_pod_are_refused() {
    let host = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            [
                raw_entry("d/", tar::EntryType::Directory, None, b""),
                raw_entry("d/../../escaped", tar::EntryType::Regular, None, b"x"),
            ]
            .concat(),
            "not a plain relative name",
        ),
        (
            raw_entry("/etc/evil", tar::EntryType::Regular, None, b"x"),
            "not a plain relative name",
        ),
        (
            raw_entry("d/h", tar::EntryType::Link, Some("/etc/shadow"), b""),
            "hard link",
        ),
        (
            [
                raw_entry("d/l", tar::EntryType::Symlink, Some(".."), b""),
                raw_entry("d/l/escaped", tar::EntryType::Regular, None, b"x"),
            ]
            .concat(),
            "leads out",
        ),
    ];
    for (mut data, why) in cases {
        data.extend_from_slice(&[0u8; 1024]);
        let fake = FakeKube::start(Behaviour {
            hostile_tar: Some(data),
            ..Behaviour::default()
        })
        .await;
        let pod_root = tempfile::tempdir().unwrap();
        let env = start(&fake, config("hostile", pod_root.path())).await;
        let dest = host.path().join("out/d");
        let err = env.copy_out("d", &dest).await.unwrap_err();
        assert!(err.to_string().contains(why), "{why}: {err}");
        assert!(!host.path().join("escaped").exists());
        assert!(!dest.exists(), "nothing written for {why}");
        env.shutdown().await.unwrap();
        no_refusals(&fake);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_never_runs_is_reported_and_deleted() {
    let fake = FakeKube::start(Behaviour {
        start_delay: Duration::from_millis(100),
        never: [
            (
                "registry.invalid/pull:1".to_string(),
                Some("ImagePullBackOff".to_string()),
            ),
            ("too-big:1".to_string(), None),
        ]
        .into(),
        ..Behaviour::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    set_batch_label(BATCH);

    let mut cfg = config("no-pull", dir.path());
    cfg.image = "registry.invalid/pull:1".into();
    let err = KubeEnv::start(fake.config(), cfg, options())
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("ImagePullBackOff"), "{text}");
    assert!(fake.pods().is_empty(), "the pod was deleted");

    let mut cfg = config("no-room", dir.path());
    cfg.image = "too-big:1".into();
    let opts = KubeOptions {
        start_timeout: Duration::from_secs(2),
        ..options()
    };
    let started = Instant::now();
    let err = KubeEnv::start(fake.config(), cfg, opts)
        .await
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("did not become Running within 2 s"), "{text}");
    assert!(text.contains("Unschedulable"), "{text}");
    assert!(fake.pods().is_empty(), "the pod was deleted");
    assert_eq!(fake.recorded(|r| r.deleted.len()), 2);
    eprintln!(
        "figures: an unschedulable pod reported after {:.2} s (deadline 2 s)",
        started.elapsed().as_secs_f64()
    );
    no_refusals(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_exec_connection_is_an_error_not_a_hang() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let env = std::sync::Arc::new(start(&fake, config("dropped", dir.path())).await);
    let running = {
        let env = env.clone();
        tokio::spawn(async move {
            env.exec(ExecRequest::shell("echo $$ > pid; exec sleep 60"))
                .await
        })
    };
    while !dir.path().join("pid").exists() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.drop_connections();
    // The guard only keeps a broken build from hanging the suite.
    let result = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the exec hangs")
        .unwrap();
    let err = result.unwrap_err();
    assert!(matches!(err, EnvError::Kubernetes(_)), "{err:?}");
    assert!(err.to_string().contains("lost"), "{err}");
    // The next command gets a new runner.
    let out = env
        .exec(ExecRequest::argv(["echo", "again"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "again\n");
    assert_eq!(
        fake.recorded(|r| r.execs.iter().filter(|e| e[0] == "python3").count()),
        2
    );
    env.shutdown().await.unwrap();
    no_refusals(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_reaped_by_its_label() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut kept = config("reap-1", dir.path());
    kept.keep = true;
    let a = start(&fake, kept).await;
    let b = std::sync::Arc::new(start(&fake, config("reap-2", dir.path())).await);
    let running = {
        let b = b.clone();
        tokio::spawn(async move {
            b.exec(ExecRequest::shell("echo $$ > pid; exec sleep 60"))
                .await
        })
    };
    while !dir.path().join("pid").exists() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid: u32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(fake.pods().len(), 2);
    let mut removed = remove_kube_batch(&fake.config(), NAMESPACE, BATCH)
        .await
        .unwrap();
    removed.sort();
    let mut names = vec![a.pod_name().to_string(), b.pod_name().to_string()];
    names.sort();
    assert_eq!(removed, names);
    assert!(fake.pods().is_empty());
    assert_eq!(
        fake.recorded(|r| r.selectors.clone()),
        vec![format!("rondo.batch={BATCH}")]
    );
    // What ran in a reaped pod is gone, and its command says the connection went.
    assert!(gone(pid).await, "{pid} outlived its pod");
    let result = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the exec hangs")
        .unwrap();
    assert!(result.is_err(), "{result:?}");
    // A sandbox whose pod is gone says so.
    let err = b.exec(ExecRequest::argv(["true"])).await.unwrap_err();
    assert!(
        matches!(err, EnvError::Kubernetes(_) | EnvError::Kube { .. }),
        "{err:?}"
    );
    no_refusals(&fake);
}

/// The engine arm as `--engine kubernetes` uses it: the cluster from `KUBECONFIG`, the
/// namespace from its context. Runs in a child test process, which alone gets the
/// variable (setting it here would race the other tests' threads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_arm_finds_the_cluster_through_kubeconfig() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\n    namespace: {NAMESPACE}\n\
             users:\n- name: tester\n  user: {{}}\n",
            fake.url
        ),
    )
    .unwrap();
    let status = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "engine_arm_child", "--ignored", "--nocapture"])
        .env("KUBECONFIG", &kubeconfig)
        .env("KUBE_ENV_CHILD_WORKDIR", dir.path())
        .env_remove("RONDO_KUBE_NAMESPACE")
        .status()
        .await
        .unwrap();
    assert!(status.success(), "the child test failed");
    assert_eq!(fake.recorded(|r| r.created.len()), 1);
    assert!(fake.pods().is_empty(), "shut down, the pod is deleted");
    no_refusals(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the_engine_arm_finds_the_cluster_through_kubeconfig"]
async fn engine_arm_child() {
    let workdir = std::env::var("KUBE_ENV_CHILD_WORKDIR").expect("run by its parent test");
    let env = rondo_env::SandboxEngine::Kubernetes
        .start(
            config("engine-arm", Path::new(&workdir)),
            Path::new(&workdir),
        )
        .await
        .unwrap();
    assert_eq!(env.kind(), "kubernetes");
    let out = env
        .exec(ExecRequest::argv(["echo", "via kubeconfig"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, "via kubeconfig\n");
    env.shutdown().await.unwrap();
}
