//! `rondo eval --engine kubernetes` end to end: the real binary runs a small dataset
//! whose sandboxes are pods of the fake Kubernetes API server of rondo-env's tests (it
//! speaks the API for the calls `KubeEnv` makes, checks every request, and runs each
//! pod's commands as local processes). The driver finds the cluster as it would a real
//! one, through `KUBECONFIG`.

#[path = "../crates/rondo-env/tests/kube_fake/mod.rs"]
mod kube_fake;

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use kube_fake::{Behaviour, FakeKube, NAMESPACE};
use serde_json::Value;

/// A tool step in the run's sandbox, then a scripted reply. The sandbox's working folder
/// is a folder of this machine (`{POD}`): the fake's pods share its file system.
const WORKFLOW: &str = r#"
workflow pods {
  prompts = "prompts"
  script = "script.yaml"
  provider = mock
  input word: string
}
provider mock {
  kind = "scripted"
}
environment sandbox {
  kind = "docker"
  image = "rondo-test-base:latest"
  workdir = "{POD}"
}
role shout: tool {
  env = sandbox
  command = ["sh", "-c", "printf %s \"$1\" > \"$1.txt\"; printf %s \"$1\" | tr a-z A-Z", "shout", "{{ input.word }}"]
  timeout = 30s
}
role reply: llm {
  prompt = "reply.tera"
  output text
}
start -> shout
shout -> reply
reply -> done
exit done
"#;

const CASES: &str = r#"{"id": "alpha", "inputs": {"word": "alpha"}, "expect": {"contains": "42", "checks": ["shout.stdout == \"ALPHA\""]}}
{"id": "beta", "inputs": {"word": "beta"}, "expect": {"contains": "42", "checks": ["shout.stdout == \"BETA\""]}}
{"id": "gamma", "inputs": {"word": "gamma"}, "expect": {"contains": "42", "checks": ["shout.stdout == \"GAMMA\""]}}
{"id": "delta", "inputs": {"word": "delta"}, "expect": {"contains": "42", "checks": ["shout.stdout == \"nope\""]}}
"#;

fn kubeconfig(fake: &FakeKube, path: &Path) {
    let text = format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: fake\n  cluster:\n    server: {}\n\
         users:\n- name: fake\n  user: {{}}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {NAMESPACE}\n\
         current-context: fake\n",
        fake.url
    );
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eval_runs_its_cases_in_pods_and_deletes_every_pod() {
    let fake = FakeKube::start(Behaviour::default()).await;
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pods");
    std::fs::create_dir(&pod_dir).unwrap();
    let workflow = WORKFLOW.replace("{POD}", pod_dir.to_str().unwrap());
    let wf = common::project(
        tmp.path(),
        &workflow,
        &[("reply.tera", "Answer about {{ input.word }}.\n")],
        "replies:\n  reply: 'The answer is 42.'\n",
    );
    std::fs::write(tmp.path().join("cases.jsonl"), CASES).unwrap();
    let config = tmp.path().join("kubeconfig");
    kubeconfig(&fake, &config);

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(tmp.path())
        .arg("eval")
        .arg(&wf)
        .args(["--dataset", "cases.jsonl", "--out", "res", "-c", "3"])
        .args(["--engine", "kubernetes"])
        .env("KUBECONFIG", &config)
        .env_remove("RONDO_KUBE_NAMESPACE")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // `delta` expects what its sandbox does not print: exit 1, the others pass.
    assert_eq!(out.status.code(), Some(1), "{stderr}");

    let refused = fake.recorded(|r| r.refused.clone());
    assert!(
        refused.is_empty(),
        "the fake refused: {refused:#?}\n{stderr}"
    );
    let results: Vec<Value> = std::fs::read_to_string(tmp.path().join("res/cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(&str, &str, bool)> = results
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap(),
                r["exit"].as_str().unwrap_or(""),
                r["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("alpha", "done", true),
            ("beta", "done", true),
            ("gamma", "done", true),
            ("delta", "done", false),
        ],
        "{results:#?}"
    );
    // The commands ran in the pods (here: in their working folder on this machine).
    for word in ["alpha", "beta", "gamma", "delta"] {
        let written = std::fs::read_to_string(pod_dir.join(format!("{word}.txt"))).unwrap();
        assert_eq!(written, word);
    }

    // One pod a run, each labelled with the batch, each deleted by its own run; the
    // batch's reaps (at its start and end) found none left.
    let created: Vec<Value> = fake.recorded(|r| r.created.clone());
    assert_eq!(created.len(), 4, "{created:#?}");
    let names: BTreeSet<String> = created
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 4);
    let batches: BTreeSet<&str> = created
        .iter()
        .map(|p| {
            p["metadata"]["labels"]["rondo.batch"]
                .as_str()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(batches.len(), 1, "{batches:?}");
    let deleted: BTreeSet<String> = fake.recorded(|r| r.deleted.iter().cloned().collect());
    assert_eq!(deleted, names);
    assert!(fake.recorded(|r| r.deleted_by_label.is_empty()));
    let selectors = fake.recorded(|r| r.selectors.clone());
    assert_eq!(selectors.len(), 2, "{selectors:?}");
    assert!(
        selectors.iter().all(|s| s.contains("rondo.batch=")),
        "{selectors:?}"
    );
    assert!(fake.pods().is_empty(), "pods left: {:?}", fake.pods());
    // Every command the pods ran was the runner (one a pod, none started again).
    let runners = fake.recorded(|r| r.execs.iter().filter(|c| c[0] == "python3").count());
    assert_eq!(runners, 4);
}
