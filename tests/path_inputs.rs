//! Inputs that name files (issue 21, section 6): Iter's `workdir` under `rondo serve` and
//! `rondo run`. A caller sending `"../../../"` used to have the survey tool list the
//! server's run folder, other runs included; a `workspace_path` input refuses it before a
//! run exists.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

fn iter_workflow() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/iter.rondo")
}

struct Served(Child, String);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &Path) -> Served {
    serve_workflow(dir, &iter_workflow())
}

fn serve_workflow(dir: &Path, workflow: &Path) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir)
        .arg("serve")
        .arg(workflow)
        .args(["--port", "0", "--provider", "scripted", "--run-dir", "runs"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let base = first
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"))
        .to_string();
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Served(child, base)
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    rondo_provider::http::shared_client().unwrap();
    let res = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn run_folders(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("runs"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A request whose `workdir` climbs out of the workspace, or is absolute, is refused with a
/// 422 that names the input, and no run is made: the survey tool never lists the server's
/// run folder (another run's files are planted there).
#[tokio::test(flavor = "multi_thread")]
async fn served_iter_refuses_a_workdir_out_of_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = d.join("runs/victim/workspace");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("secret_of_another_run.txt"), "not yours").unwrap();
    let served = serve(d);
    for workdir in ["../../../", "..", "/", "sub/../../x", ".rondo"] {
        let (status, body) = post(
            &served.1,
            "/runs",
            &json!({"workflow": "iter", "inputs": {"task": "list", "workdir": workdir}}),
        )
        .await;
        assert_eq!(status, 422, "{workdir}: {body}");
        assert_eq!(body["error"], "bad_input_type", "{workdir}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("workdir"),
            "{body}"
        );
        assert_eq!(run_folders(d), vec!["victim".to_string()], "{workdir}");
    }
    // A folder inside the workspace is taken.
    let (status, body) = post(
        &served.1,
        "/runs",
        &json!({"workflow": "iter", "inputs": {"task": "list", "workdir": "."}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

/// A `path` input (DS-STAR's `data_dir`, whose tool describes every file beneath it,
/// samples included) may name a folder of the server's, but not its run folder, a run
/// folder in it, a folder holding it (`.`), nor a link a run's tool planted in its
/// workspace: each is refused with a 422 and no run is made. (Confining it to the server's
/// folder alone let a caller read every other run.)
#[tokio::test(flavor = "multi_thread")]
async fn served_path_inputs_never_name_the_run_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = d.join("runs/victim/workspace");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("secret_of_another_run.txt"), "not yours").unwrap();
    std::fs::create_dir_all(d.join("data")).unwrap();
    std::os::unix::fs::symlink("../runs/victim", d.join("data/planted")).unwrap();
    let workflow = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows/ds_star.rondo");
    let served = serve_workflow(d, &workflow);
    for data_dir in [
        ".",
        "runs",
        "runs/victim",
        "./runs/victim/workspace",
        "data/planted",
        "data/planted/workspace",
    ] {
        let (status, body) = post(
            &served.1,
            "/runs",
            &json!({"workflow": "ds_star", "inputs": {"question": "q", "data_dir": data_dir}}),
        )
        .await;
        assert_eq!(status, 422, "{data_dir}: {body}");
        assert_eq!(body["error"], "path_outside", "{data_dir}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains("data_dir"),
            "{body}"
        );
        assert_eq!(run_folders(d), vec!["victim".to_string()], "{data_dir}");
    }
    // The server's own data folder is taken.
    let (status, body) = post(
        &served.1,
        "/runs",
        &json!({"workflow": "ds_star", "inputs": {"question": "q", "data_dir": "data"}}),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

/// `rondo run` refuses the same value before the run starts.
#[test]
fn run_refuses_a_workdir_out_of_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(dir.path())
        .arg("run")
        .arg(iter_workflow())
        .args(["--provider", "scripted", "--run-dir", "runs", "-q"])
        .args(["--input", "task=list", "--input", "workdir=../../.."])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("climbs out with `..`"), "{stderr}");
    assert!(run_folders(dir.path()).is_empty(), "{stderr}");
}
