//! `test` blocks: run the workflow with the scripted replies of the block and check
//! its expectations (path, exit, memory, artifacts).

use serde_json::Value;

use super::eval::Env;
use super::{Interpreter, Outcome, RunOptions};
use crate::check::Checked;
use crate::compile::{TestCase, TestExpectation};

pub struct TestReport {
    pub name: String,
    pub failures: Vec<String>,
    pub run_dir: std::path::PathBuf,
}

impl TestReport {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

pub async fn run_test(
    workflow: &Checked,
    case: &TestCase,
    runs_root: &std::path::Path,
) -> TestReport {
    let mut script = super::scripted::Script::default();
    for (node, visit, text) in &case.replies {
        script.add(&workflow.node(*node).name, *visit, text.clone());
    }
    let slug: String = case
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let run_id = format!("{}-{slug}", workflow.name);
    let run_dir = runs_root.join(&run_id);
    let inputs = test_inputs(workflow, case, &run_dir);
    let options = RunOptions {
        runs_root: runs_root.to_path_buf(),
        run_id: Some(run_id),
        inputs,
        provider: Some("scripted".into()),
        // A test's relative `path` inputs name files beside the workflow.
        base_dir: std::fs::canonicalize(&workflow.path)
            .ok()
            .and_then(|p| p.parent().map(std::path::Path::to_path_buf)),
        ..RunOptions::default()
    };
    let _ = std::fs::remove_dir_all(&run_dir);
    let mut report = TestReport {
        name: case.name.clone(),
        failures: Vec::new(),
        run_dir: run_dir.clone(),
    };
    let started = Interpreter::start_with_script(workflow, &options, script);
    let (interp, state) = match started {
        Ok(x) => x,
        Err(e) => {
            report.failures.push(format!("the run did not start: {e}"));
            return report;
        }
    };
    let outcome = interp.drive(state).await;
    for expectation in &case.expectations {
        if let Some(failure) = unmet(workflow, &outcome, expectation) {
            report.failures.push(failure);
        }
    }
    report
}

/// The inputs a test runs with, by name. A test writes nothing outside its run: a folder
/// artifacts are written to is, when relative, a folder of the test's workspace.
fn test_inputs(
    workflow: &Checked,
    case: &TestCase,
    run_dir: &std::path::Path,
) -> Vec<(String, String)> {
    let mut inputs: Vec<(String, String)> = case
        .inputs
        .iter()
        .map(|(id, v)| (workflow.inputs[*id].name.clone(), super::input_text(v)))
        .collect();
    for input in workflow.inputs.iter().filter(|i| i.artifact_root) {
        let given = inputs.iter().position(|(name, _)| name == &input.name);
        let value = match given {
            Some(at) => Some(inputs[at].1.clone()),
            None => input
                .default
                .as_ref()
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        if let Some(value) = value.filter(|v| !std::path::Path::new(v).is_absolute()) {
            let inside = run_dir
                .join(super::rundir::WORKSPACE_DIR)
                .join(&value)
                .to_string_lossy()
                .into_owned();
            match given {
                Some(at) => inputs[at].1 = inside,
                None => inputs.push((input.name.clone(), inside)),
            }
        }
    }
    inputs
}

/// How the run missed `expectation`, if it did.
fn unmet(workflow: &Checked, outcome: &Outcome, expectation: &TestExpectation) -> Option<String> {
    let state = &outcome.state;
    match expectation {
        TestExpectation::Exit { node, .. } => {
            let want = &workflow.node(*node).name;
            (&outcome.exit != want).then(|| {
                format!(
                    "expected exit `{want}`, the run ended at `{}` ({})",
                    outcome.exit, outcome.reason
                )
            })
        }
        TestExpectation::Path { nodes, .. } => {
            let want: Vec<&str> = nodes
                .iter()
                .map(|n| workflow.node(*n).name.as_str())
                .collect();
            let mut got: Vec<&str> = state.path.iter().map(String::as_str).collect();
            if want.last().is_some_and(|w| *w == outcome.exit) {
                got.push(&outcome.exit);
            }
            (want != got).then(|| {
                format!(
                    "expected path [{}], got [{}]",
                    want.join(", "),
                    got.join(", ")
                )
            })
        }
        TestExpectation::Artifact { name, contains, .. } => {
            unmet_artifact(workflow, outcome, name, contains.as_deref())
        }
        TestExpectation::Holds { expr } => {
            let env = Env {
                workflow,
                state,
                workspace: &outcome.workspace,
                role: None,
                output: None,
                item: None,
                prompt: None,
            };
            match env.eval(expr) {
                Ok(v) if super::value::truthy(&v) => None,
                Ok(v) => Some(format!("expected `{}` to hold; it is {v}", expr.text)),
                Err(e) => Some(format!("`{}` could not be evaluated: {e}", expr.text)),
            }
        }
    }
}

/// How artifact `name` (a template) misses: not written, unreadable, or without
/// `contains`.
fn unmet_artifact(
    workflow: &Checked,
    outcome: &Outcome,
    name: &str,
    contains: Option<&str>,
) -> Option<String> {
    let state = &outcome.state;
    let mut ctx = tera::Context::new();
    ctx.insert("run_id", &state.run_id);
    ctx.insert("input", &state.inputs_by_name(workflow));
    let name = &crate::prompt::render_str(name, &ctx).unwrap_or_else(|_| name.to_string());
    // `{{ input.DIR }}/...`: a file of the folder a `path` input names.
    let read = if std::path::Path::new(name).is_absolute() {
        std::fs::read(name)
    } else {
        rondo_workspace::Workspace::open(&outcome.workspace).and_then(|w| w.read(name))
    }
    .map(|b| String::from_utf8_lossy(&b).into_owned());
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(format!("expected artifact `{name}`, which was not written"))
        }
        Err(e) => Some(format!("artifact `{name}`: {e}")),
        Ok(text) => contains
            .filter(|needle| !text.contains(needle))
            .map(|needle| format!("artifact `{name}` does not contain {needle:?}")),
    }
}
