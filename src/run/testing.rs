//! `test` blocks: run the workflow with the scripted replies of the block and check
//! its expectations (path, exit, memory, artifacts).

use serde_json::Value;

use super::eval::Env;
use super::{Interpreter, RunOptions};
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
    let mut inputs: Vec<(String, String)> = case
        .inputs
        .iter()
        .map(|(id, v)| (workflow.inputs[*id].name.clone(), super::input_text(v)))
        .collect();
    // A test writes nothing outside its run: a folder artifacts are written to is, when
    // relative, a folder of the test's workspace.
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
    let state = &outcome.state;
    for expectation in &case.expectations {
        match expectation {
            TestExpectation::Exit { node, .. } => {
                let want = &workflow.node(*node).name;
                if &outcome.exit != want {
                    report.failures.push(format!(
                        "expected exit `{want}`, the run ended at `{}` ({})",
                        outcome.exit, outcome.reason
                    ));
                }
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
                if want != got {
                    report.failures.push(format!(
                        "expected path [{}], got [{}]",
                        want.join(", "),
                        got.join(", ")
                    ));
                }
            }
            TestExpectation::Artifact { name, contains, .. } => {
                let mut ctx = tera::Context::new();
                ctx.insert("run_id", &state.run_id);
                ctx.insert("input", &state.inputs_by_name(workflow));
                let name = &crate::prompt::render_str(name, &ctx).unwrap_or_else(|_| name.clone());
                // `{{ input.DIR }}/...`: a file of the folder a `path` input names.
                let read = if std::path::Path::new(name).is_absolute() {
                    std::fs::read(name)
                } else {
                    rondo_workspace::Workspace::open(&outcome.workspace).and_then(|w| w.read(name))
                }
                .map(|b| String::from_utf8_lossy(&b).into_owned());
                match read {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => report
                        .failures
                        .push(format!("expected artifact `{name}`, which was not written")),
                    Err(e) => report.failures.push(format!("artifact `{name}`: {e}")),
                    Ok(text) => {
                        if let Some(needle) = contains
                            && !text.contains(needle.as_str())
                        {
                            report
                                .failures
                                .push(format!("artifact `{name}` does not contain {needle:?}"));
                        }
                    }
                }
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
                    Ok(v) if super::value::truthy(&v) => {}
                    Ok(v) => report
                        .failures
                        .push(format!("expected `{}` to hold; it is {v}", expr.text)),
                    Err(e) => report
                        .failures
                        .push(format!("`{}` could not be evaluated: {e}", expr.text)),
                }
            }
        }
    }
    report
}
