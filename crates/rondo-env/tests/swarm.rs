//! Sandboxes on a real Docker Swarm. Ignored by default: scripts/swarm-test.sh starts a
//! swarm of throwaway dockerd nodes on this machine and runs these with
//! `--include-ignored`, the swarm given by:
//! - RONDO_SWARM_MANAGER: a manager's engine (`tcp://host:port`);
//! - RONDO_SWARM_TLS_DIR: the driver's client certificate, key and the CA (every engine
//!   is reached with TLS); RONDO_SWARM_TEST_ROGUE_TLS_DIR: a client certificate of
//!   another CA, which every node must refuse;
//! - RONDO_SWARM_REGISTRY / RONDO_SWARM_PUSH_REGISTRY: the registry as the nodes and as
//!   this machine's engine reach it;
//! - RONDO_SWARM_NODES: every node's engine, comma-separated (to check what is left);
//! - RONDO_SWARM_STOP_NODE: a command that stops the daemon of the node whose address
//!   is appended (only `a_lost_node_*` uses it; run it alone, last).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions, ListServicesOptions};
use rondo_env::{
    DockerConfig, DockerEnv, EngineAuth, EnvError, Environment, ExecRequest, Mount, SwarmConfig,
    SwarmEnv,
};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run scripts/swarm-test.sh"))
}

fn auth() -> EngineAuth {
    EngineAuth::tls_dir(std::path::Path::new(&var("RONDO_SWARM_TLS_DIR")))
}

fn config(run_id: &str) -> SwarmConfig {
    let mut c = SwarmConfig::new(
        var("RONDO_SWARM_MANAGER"),
        auth(),
        DockerConfig::new(common::IMAGE, run_id),
    );
    c.registry = Some(var("RONDO_SWARM_REGISTRY"));
    c.push_registry = std::env::var("RONDO_SWARM_PUSH_REGISTRY").ok();
    c.start_timeout = Duration::from_secs(60);
    c.call_timeout = Duration::from_secs(20);
    c
}

fn nodes() -> Vec<String> {
    var("RONDO_SWARM_NODES")
        .split(',')
        .map(str::to_string)
        .collect()
}

/// What the run `run_id` left on every node that answers: containers, and on the
/// manager services and networks.
async fn leftovers(run_id: &str) -> Vec<String> {
    let label = format!("rondo.run_id={run_id}");
    let filters = std::collections::HashMap::from([("label".to_string(), vec![label.clone()])]);
    let mut left = Vec::new();
    for node in nodes() {
        let Ok(docker) = rondo_env::connect_engine(&node, &auth(), Duration::from_secs(3)).await
        else {
            continue;
        };
        let containers = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            }))
            .await
            .unwrap();
        left.extend(
            containers
                .into_iter()
                .map(|c| format!("container {c:?} on {node}")),
        );
    }
    let manager =
        rondo_env::connect_engine(&var("RONDO_SWARM_MANAGER"), &auth(), Duration::from_secs(5))
            .await
            .unwrap();
    let services = manager
        .list_services(Some(ListServicesOptions {
            filters: Some(filters.clone()),
            ..Default::default()
        }))
        .await
        .unwrap();
    left.extend(
        services
            .into_iter()
            .map(|s| format!("service {:?}", s.spec)),
    );
    let networks = manager
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
        .unwrap();
    left.extend(
        networks
            .into_iter()
            .map(|n| format!("network {:?}", n.name)),
    );
    left
}

/// The containers of a removed service go away on their node a moment later.
async fn settled(run_id: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = leftovers(run_id).await;
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every node's engine answers the driver's certificate, and refuses a driver without it:
/// over plain TCP, with a certificate of another CA, with no client certificate (curl);
/// and the driver refuses an engine its CA did not sign.
#[tokio::test]
#[ignore = "needs a swarm: scripts/swarm-test.sh"]
async fn a_driver_without_the_client_certificate_is_refused_by_every_node() {
    let good = std::path::PathBuf::from(var("RONDO_SWARM_TLS_DIR"));
    let rogue = std::path::PathBuf::from(var("RONDO_SWARM_TEST_ROGUE_TLS_DIR"));
    // Each refused for its own reason: the engine's answer to plain HTTP, its TLS alert
    // on the client's certificate, rustls's verdict on the engine's.
    let refused = [
        (
            "plain TCP",
            EngineAuth::PlainTcp,
            "Client sent an HTTP request to an HTTPS server",
        ),
        (
            "a client certificate of another CA",
            EngineAuth::tls_dir(&rogue),
            "BadCertificate",
        ),
        (
            "the engine's certificate checked against another CA",
            EngineAuth::Tls {
                ca: rogue.join("../rogue-ca/ca.pem"),
                cert: good.join("cert.pem"),
                key: good.join("key.pem"),
            },
            "UnknownIssuer",
        ),
    ];
    let deadline = Duration::from_secs(10);
    for node in nodes() {
        let docker = rondo_env::connect_engine(&node, &auth(), deadline)
            .await
            .unwrap_or_else(|e| panic!("{node} with the driver's certificate: {e}"));
        // Not only a ping: the API itself answers.
        docker.info().await.unwrap();
        for (what, auth, why) in &refused {
            match rondo_env::connect_engine(&node, auth, deadline).await {
                Ok(_) => panic!("{node} answered a driver with {what}"),
                Err(EnvError::DockerUnavailable { source, .. }) => {
                    let source = format!("{source:?}");
                    assert!(source.contains(why), "{node}, {what}: {source}");
                }
                Err(e) => panic!("{node}, {what}: {e}"),
            }
        }
        // No client certificate at all: the driver always shows one, so curl asks.
        let url = format!("https://{}/_ping", node.trim_start_matches("tcp://"));
        let ca = good.join("ca.pem");
        let curl = |client: bool| {
            let mut c = std::process::Command::new("curl");
            c.args(["-sS", "--max-time", "10", "--cacert"]).arg(&ca);
            if client {
                c.arg("--cert")
                    .arg(good.join("cert.pem"))
                    .arg("--key")
                    .arg(good.join("key.pem"));
            }
            c.arg(&url).output().unwrap()
        };
        let with = curl(true);
        assert!(with.status.success(), "{with:?}");
        assert_eq!(String::from_utf8_lossy(&with.stdout), "OK");
        let without = curl(false);
        assert!(
            !without.status.success(),
            "{node} answered curl without a certificate"
        );
        let said = String::from_utf8_lossy(&without.stderr);
        assert!(said.contains("certificate"), "{node}: {said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a swarm: scripts/swarm-test.sh"]
async fn sandboxes_spread_over_nodes_and_keep_every_guarantee() {
    let run_id = common::unique("swarm-spread");
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".rondo")).unwrap();
    std::fs::write(ws.join("in.txt"), "one\n").unwrap();
    std::fs::write(ws.join(".rondo/journal"), "records\n").unwrap();
    let mut envs = Vec::new();
    for i in 0..4 {
        let mut c = config(&run_id);
        c.sandbox.mounts = vec![Mount {
            host: dir.path().join(format!("ws{i}")),
            container: "/work".into(),
            writable: true,
            replace: true,
        }];
        c.sandbox.masks = vec!["/work/.rondo".into()];
        c.sandbox.pids_limit = Some(100);
        c.sandbox.memory_bytes = Some(300 << 20);
        copy_dir(&ws, &dir.path().join(format!("ws{i}")));
        envs.push(c);
    }
    let started = futures_util::future::join_all(envs.into_iter().map(SwarmEnv::start)).await;
    let envs: Vec<SwarmEnv> = started.into_iter().map(Result::unwrap).collect();
    let on: BTreeSet<&str> = envs.iter().map(SwarmEnv::node_id).collect();
    assert!(on.len() >= 2, "four sandboxes on one node: {on:?}");
    for (i, env) in envs.iter().enumerate() {
        let out = env
            .exec(ExecRequest::shell(
                "cat in.txt; ls -a; echo two > out.txt; mkdir -p .rondo; echo forged > .rondo/journal",
            ))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        // The workspace arrived, its system area did not.
        assert!(out.stdout.starts_with("one\n"), "{out:?}");
        assert!(!out.stdout.contains(".rondo"), "{out:?}");
        let host = dir.path().join(format!("ws{i}"));
        assert_eq!(
            std::fs::read_to_string(host.join("out.txt")).unwrap(),
            "two\n"
        );
        // What the sandbox wrote there never reached the host's records.
        assert_eq!(
            std::fs::read_to_string(host.join(".rondo/journal")).unwrap(),
            "records\n"
        );
        let out = env
            .exec(ExecRequest::shell(
                "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; \
                 python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 3)' 2>&1 | tail -1; \
                 cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null",
            ))
            .await
            .unwrap();
        let text = &out.stdout;
        assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
        assert!(text.contains("CapBnd:\t0000000000000000"), "{text}");
        assert!(text.contains("NoNewPrivs:\t1"), "{text}");
        assert!(text.contains("Network is unreachable"), "{text}");
        assert!(text.contains("\n100\n"), "{text}");
        assert!(text.contains(&format!("{}\n", 300 << 20)), "{text}");
    }
    // Sandboxes do not reach each other either: each has an internal network of its own.
    let addr = envs[1]
        .exec(ExecRequest::shell(
            "python3 -c 'import socket; print(socket.gethostbyname(socket.gethostname()))'",
        ))
        .await
        .unwrap()
        .stdout;
    let probe = format!(
        "python3 -c 'import socket; socket.create_connection((\"{}\", 22), 2)' 2>&1 | tail -1",
        addr.split_whitespace().next().unwrap_or("")
    );
    let out = envs[0].exec(ExecRequest::shell(&probe)).await.unwrap();
    assert!(
        out.stdout.contains("unreachable") || out.stdout.contains("timed out"),
        "{out:?}"
    );
    for env in &envs {
        env.shutdown().await.unwrap();
    }
    assert_eq!(settled(&run_id).await, Vec::<String>::new());
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
#[ignore = "needs a swarm: scripts/swarm-test.sh"]
async fn a_sandbox_that_cannot_start_is_tried_on_other_nodes_then_reported() {
    let run_id = common::unique("swarm-nostart");
    let mut c = config(&run_id);
    // Nothing in the registry by that name: every node fails to pull it.
    c.registry = None;
    c.sandbox.image = format!("{}/rondo-no-such-image:1", var("RONDO_SWARM_REGISTRY"));
    c.attempts = 2;
    c.start_timeout = Duration::from_secs(40);
    // This machine's engine needs the image to read its user: give it one by that name.
    let local = rondo_env::connect().await.unwrap();
    local
        .tag_image(
            common::IMAGE,
            Some(bollard::query_parameters::TagImageOptions {
                repo: Some(format!(
                    "{}/rondo-no-such-image",
                    var("RONDO_SWARM_REGISTRY")
                )),
                tag: Some("1".into()),
            }),
        )
        .await
        .unwrap();
    let started = SwarmEnv::start(c.clone()).await;
    let _ = local
        .remove_image(
            &c.sandbox.image,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    let err = match started {
        Ok(_) => panic!("a sandbox started from an image no node can pull"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("after 2 attempts"), "{err}");
    // Two different nodes were tried.
    let nodes: BTreeSet<&str> = err
        .split("on node ")
        .skip(1)
        .filter_map(|s| s.split(':').next())
        .collect();
    assert_eq!(nodes.len(), 2, "{err}");
    assert_eq!(settled(&run_id).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a swarm: scripts/swarm-test.sh"]
async fn exec_round_trip_figures() {
    let n = 200;
    let local = DockerEnv::start(DockerConfig::new(common::IMAGE, common::unique("rt-local")))
        .await
        .unwrap();
    let local_ms = round_trips(&local, n).await;
    local.shutdown().await.unwrap();
    let run_id = common::unique("rt-swarm");
    let mut starts = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let env = SwarmEnv::start(config(&run_id)).await.unwrap();
        starts.push((env.node_addr().to_string(), t.elapsed().as_millis()));
        let ms = round_trips(&env, n).await;
        println!(
            "FIGURE exec round trip via node {}: median {:.2} ms, p90 {:.2} ms ({n} execs)",
            env.node_addr(),
            ms.0,
            ms.1
        );
        env.shutdown().await.unwrap();
    }
    println!(
        "FIGURE exec round trip local: median {:.2} ms, p90 {:.2} ms ({n} execs)",
        local_ms.0, local_ms.1
    );
    for (node, ms) in starts {
        println!("FIGURE sandbox start on node {node}: {ms} ms");
    }
    // An API call outside a command (a copy, an inspect) makes a connection of its own:
    // over TLS, a handshake each.
    let node = rondo_env::connect_engine(&nodes()[0], &auth(), Duration::from_secs(10))
        .await
        .unwrap();
    let local = rondo_env::connect().await.unwrap();
    for (what, docker) in [
        ("a node's engine over TLS", &node),
        ("the local engine", &local),
    ] {
        let mut times = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            docker.ping().await.unwrap();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "FIGURE engine API call (ping) to {what}: median {:.2} ms, p90 {:.2} ms ({n} calls)",
            times[n / 2],
            times[n * 9 / 10]
        );
    }
    assert_eq!(settled(&run_id).await, Vec::<String>::new());
}

async fn round_trips(env: &dyn Environment, n: usize) -> (f64, f64) {
    let mut times = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let out = env.exec(ExecRequest::shell("true")).await.unwrap();
        assert_eq!(out.exit_code, Some(0));
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[n / 2], times[n * 9 / 10])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "stops a node of the swarm: scripts/swarm-test.sh runs it alone"]
async fn a_lost_node_ends_its_sandbox_with_sandbox_lost_and_another_node_takes_over() {
    let run_id = common::unique("swarm-lost");
    let manager_addr = var("RONDO_SWARM_MANAGER");
    let manager_host = manager_addr
        .trim_start_matches("tcp://")
        .split(':')
        .next()
        .unwrap()
        .to_string();
    // A sandbox on a worker: that node is stopped, the manager stays.
    let mut on_worker = config(&run_id);
    on_worker.constraints = vec!["node.role==worker".into()];
    let env = SwarmEnv::start(on_worker).await.unwrap();
    assert_ne!(env.node_addr(), manager_host);
    let lost_node = env.node_id().to_string();
    let running = env.exec(ExecRequest::shell("sleep 600").timeout(Duration::from_secs(700)));
    let stop = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let status = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} {}",
                var("RONDO_SWARM_STOP_NODE"),
                env.node_addr()
            ))
            .status()
            .await
            .unwrap();
        assert!(status.success());
    };
    let t = Instant::now();
    let (out, ()) = tokio::join!(running, stop);
    match out {
        Err(EnvError::SandboxLost { reason, .. }) => {
            println!(
                "FIGURE node loss seen by a running command after {} ms: {reason}",
                t.elapsed().as_millis()
            )
        }
        other => panic!("a command on a stopped node: {other:?}"),
    }
    // Every later call fails at once, and the next sandbox goes elsewhere.
    assert!(matches!(
        env.exec(ExecRequest::shell("true")).await,
        Err(EnvError::SandboxLost { .. })
    ));
    env.shutdown().await.unwrap();
    let next = SwarmEnv::start(config(&run_id)).await.unwrap();
    assert_ne!(next.node_id(), lost_node);
    let out = next.exec(ExecRequest::shell("echo ok")).await.unwrap();
    assert_eq!(out.stdout, "ok\n");
    next.shutdown().await.unwrap();
    assert_eq!(settled(&run_id).await, Vec::<String>::new());
}
