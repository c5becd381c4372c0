//! Artifact names built from values: whatever a reply (or an input) says, the file lands
//! inside the run directory under a deterministic, path-safe name, the event records the
//! sanitisation, and the run ends at its declared exit, never at `error`. The real binary
//! runs each workflow with the scripted provider.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;

use common::{events, of_kind};

/// A project whose one prompt is `r1.tera`.
fn project(dir: &Path, workflow: &str, script: &str) -> PathBuf {
    common::project(dir, workflow, &[("r1.tera", "Name a file.\n")], script)
}

/// Runs the workflow as `r`.
fn run(workflow: &Path) -> (Output, PathBuf) {
    common::run(workflow, "r")
}

/// Every file below `dir` (not following links), relative to it.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.symlink_metadata().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.push(
                    path.strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

const NAMED: &str = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
}
role r1: llm {
  prompt = "r1.tera"
  output json { name: string }
  artifact "named/{{ r1.name }}.txt" = output.name
  artifact "NAME" = "top"
}
start -> r1
r1 -> invalid_output when r1.invalid
r1 -> r1 when visits(r1) < VISITS max 20
r1 -> done otherwise
exit done
"#;

#[test]
fn hostile_names_from_a_reply_stay_inside_the_run_directory() {
    // (the name in the JSON reply, the file it becomes)
    let cases: &[(&str, &str)] = &[
        (r#""../up""#, "named/___up.txt"),
        (r#""/etc/x""#, "named/_etc_x.txt"),
        (
            r#""../../../../tmp/escape""#,
            "named/____________tmp_escape.txt",
        ),
        (r#""a\u0000b""#, "named/a_b.txt"),
        (r#""""#, "named/_.txt"),
        (r#"".."""#, "named/__.txt"),
        (r#""c\\d""#, "named/c_d.txt"),
        (r#""plain""#, "named/plain.txt"),
    ];
    let replies: Vec<String> = cases
        .iter()
        .map(|(name, _)| format!("    - '{{\"name\": {name}}}'\n"))
        .collect();
    let script = format!("replies:\n  r1:\n{}", replies.concat());
    let tmp = tempfile::tempdir().unwrap();
    let workflow = NAMED
        .replace("VISITS", &cases.len().to_string())
        .replace("NAME", "top.txt");
    let wf = project(tmp.path(), &workflow, &script);
    let (out, dir) = run(&wf);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = files(&dir.join("workspace"));
    for (reply, file) in cases {
        assert!(
            written.contains(&file.to_string()),
            "{reply}: no {file} in {written:?}"
        );
    }
    // Nothing left the run directory.
    assert!(!tmp.path().join("runs/up.txt").exists());
    assert!(!tmp.path().join("up.txt").exists());
    let artifacts = of_kind(&events(&dir), "artifact");
    let sanitized: Vec<&Value> = artifacts
        .iter()
        .filter(|e| e.get("sanitized_from").is_some())
        .collect();
    // All but `plain` were changed, and the event says from what.
    assert_eq!(sanitized.len(), cases.len() - 1, "{artifacts:?}");
    assert!(
        sanitized
            .iter()
            .any(|e| e["sanitized_from"] == "named/../up.txt" && e["file"] == "named/___up.txt"),
        "{sanitized:?}"
    );
    // The author's own `/` and a constant name are left alone.
    assert!(
        artifacts
            .iter()
            .any(|e| e["file"] == "top.txt" && e.get("sanitized_from").is_none())
    );
}

#[test]
fn a_name_that_is_only_a_value_never_reaches_the_records_or_the_workspace_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let workflow = NAMED
        .replace("named/{{ r1.name }}.txt", "{{ r1.name }}")
        .replace("VISITS", "3")
        .replace("NAME", "fixed.txt");
    let script = "replies:\n  r1:\n    - '{\"name\": \"run.json\"}'\n    - '{\"name\": \".\"}'\n    - '{\"name\": \"state.json\"}'\n";
    let wf = project(tmp.path(), &workflow, script);
    let (out, dir) = run(&wf);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["exit"], "done");
    // The records live in the system area: a workspace file of the same name is the
    // artifact, and the record beside it is intact.
    let workspace = dir.join("workspace");
    assert_eq!(
        std::fs::read_to_string(workspace.join("run.json")).unwrap(),
        "run.json"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("state.json")).unwrap(),
        "state.json"
    );
    assert_eq!(std::fs::read_to_string(workspace.join("_")).unwrap(), ".");
    let state: Value = common::state(&dir);
    assert_eq!(state["status"], "finished", "{state}");
}

#[test]
fn a_long_name_is_cut_to_fit_the_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let workflow = NAMED.replace("VISITS", "1").replace("NAME", "top.txt");
    let long = "x".repeat(1000);
    let script = format!("replies:\n  r1: '{{\"name\": \"{long}\"}}'\n");
    let wf = project(tmp.path(), &workflow, &script);
    let (out, dir) = run(&wf);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = files(&dir.join("workspace/named"));
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].len() < 255 && written[0].starts_with("xxx"));
}

#[cfg(unix)]
#[test]
fn an_artifact_is_never_written_through_a_symbolic_link_a_tool_made() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let workflow = format!(
        r#"workflow w {{
  prompts = "prompts"
  script = "script.yaml"
}}
role link: tool {{
  command = ["ln", "-s", "{}", "named"]
}}
role r1: llm {{
  prompt = "r1.tera"
  output json {{ name: string }}
  artifact "named/{{{{ r1.name }}}}.txt" = output.name
}}
start -> link
link -> r1
r1 -> invalid_output when r1.invalid
r1 -> done
exit done
"#,
        outside.display()
    );
    let wf = project(
        tmp.path(),
        &workflow,
        "replies:\n  r1: '{\"name\": \"x\"}'\n",
    );
    let (out, dir) = run(&wf);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.join("workspace/named")
            .symlink_metadata()
            .unwrap()
            .is_symlink(),
        "the tool did not run in the workspace"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    let refused = of_kind(&events(&dir), "artifact_rejected");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["file"], "named/x.txt");
}

/// An artifact in the folder a `path` input names, appended once per run.
const ROOTED: &str = r#"workflow w {
  prompts = "prompts"
  script = "script.yaml"
  input out: path = "shared"
}
role r1: llm {
  prompt = "r1.tera"
  output json { name: string }
  artifact "{{ input.out }}/{{ r1.name }}.jsonl" += { name: output.name, run: run_id }
}
start -> r1
r1 -> invalid_output when r1.invalid
r1 -> success
exit success
"#;

#[test]
fn an_artifact_goes_to_the_folder_a_path_input_names_and_stays_inside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        ROOTED,
        "replies:\n  r1: '{\"name\": \"../../escape\"}'\n",
    );
    let runs = tmp.path().join("runs");
    // Relative to the folder rondo starts in; several runs share the folder.
    for id in ["a", "b"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
            .current_dir(tmp.path())
            .args(["run", "-q", wf.to_str().unwrap(), "--run-dir"])
            .arg(&runs)
            .args(["--run-id", id])
            .output()
            .unwrap();
        common::assert_success(&out);
    }
    // The reply's `../..` is one path component, inside the folder.
    assert_eq!(files(&tmp.path().join("shared")), ["______escape.jsonl"]);
    let text = std::fs::read_to_string(tmp.path().join("shared/______escape.jsonl")).unwrap();
    let runs_seen: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["run"].clone())
        .collect();
    assert_eq!(runs_seen, ["a", "b"]);
    assert!(!runs.join("a/workspace/shared").exists());
    let artifact = of_kind(&events(&runs.join("a")), "artifact");
    assert_eq!(
        artifact[0]["folder"],
        std::fs::canonicalize(tmp.path().join("shared"))
            .unwrap()
            .to_string_lossy()
            .as_ref()
    );
}

#[test]
fn a_path_input_naming_the_runs_records_is_refused_for_artifacts() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = project(
        tmp.path(),
        ROOTED,
        "replies:\n  r1: '{\"name\": \"events\"}'\n",
    );
    let runs = tmp.path().join("runs");
    let system = runs.join("r");
    let (out, dir) = common::run_with(&wf, "r", &["--input", &format!("out={}", system.display())]);
    common::assert_success(&out);
    let rejected = of_kind(&events(&dir), "artifact_rejected");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0]["reason"].as_str().unwrap().contains("records"));
    // Nothing was appended to the journal.
    assert!(events(&dir).iter().all(|e| e.get("event").is_some()));
    // Under any `.rondo` folder too.
    let hidden = tmp.path().join("w/.rondo/x");
    let (out, dir) = common::run_with(
        &wf,
        "r2",
        &["--input", &format!("out={}", hidden.display())],
    );
    common::assert_success(&out);
    assert_eq!(of_kind(&events(&dir), "artifact_rejected").len(), 1);
    assert!(!hidden.join("events.jsonl").exists());
}
