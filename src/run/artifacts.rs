//! Writing artifacts into the workspace: names rendered and confined, appends journaled.

use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::events::Event;
use super::rundir;
use super::state::RunState;
use super::{Interpreter, StepError};
use crate::prompt::render_str;

impl<'w> Interpreter<'w> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_artifacts(
        &mut self,
        artifacts: &[crate::compile::Artifact],
        state: &RunState,
        node: Option<NodeIndex>,
        output: Option<&Value>,
        item: Option<&Value>,
        prompt: Option<&str>,
        visit: u64,
    ) -> Result<Vec<(String, u64)>, StepError> {
        if artifacts.is_empty() {
            return Ok(Vec::new());
        }
        let role_name = node.map_or_else(
            || "workflow".to_string(),
            |n| self.workflow.node(n).name.clone(),
        );
        let mut appended = Vec::new();
        for artifact in artifacts {
            let ctx = self.name_context(state, node.unwrap_or(self.workflow.start), visit, item);
            // The author's text keeps its folders; a value (a reply, an input, an item)
            // cannot add one, climb out, or name nothing.
            let raw = render_str(&artifact.name, &ctx).ok();
            let file = render_str(&artifact.name, &path_safe_context(ctx)).map_err(|e| {
                e.step(format_args!(
                    "`{role_name}`: artifact name `{}`",
                    artifact.name
                ))
            })?;
            let file = rondo_workspace::contained_name(&file);
            let sanitized = raw.filter(|r| *r != file);
            let prompt = prompt.map(|p| Value::String(p.to_string()));
            let mut env = self.env(state, node, output, item);
            env.prompt = prompt.as_ref();
            let value = env
                .value(&artifact.value)
                .map_err(|e| e.step(format_args!("`{role_name}`: artifact `{file}`")))?;
            let bytes = match (&value, artifact.append) {
                (Value::String(s), false) => s.clone().into_bytes(),
                (other, false) => serde_json::to_vec_pretty(other).unwrap_or_default(),
                (Value::String(s), true) => format!("{}\n", s.trim_end_matches('\n')).into_bytes(),
                (other, true) => {
                    format!("{}\n", serde_json::to_string(other).unwrap_or_default()).into_bytes()
                }
            };
            let bytes = self.redactor.redact_bytes(&bytes).into_owned();
            if let Err(why) = rondo_workspace::relative_name(&file) {
                // A templated name the checker could not see: the write is skipped, the run goes on.
                self.event(Event::ArtifactRejected {
                    role: role_name.clone(),
                    file,
                    reason: why.to_string(),
                });
                continue;
            }
            // In the folder a `path` input names, or in the workspace.
            let root = match artifact.root {
                Some(id) => {
                    let dir = state.inputs.get(id).and_then(Value::as_str).unwrap_or("");
                    let layout = rundir::Layout {
                        system: self.run_dir.clone(),
                        workspace: self.workspace.root().to_path_buf(),
                    };
                    match rundir::artifact_root(dir, &layout) {
                        Ok(root) => Some(root),
                        Err(e) => {
                            self.event(Event::ArtifactRejected {
                                role: role_name.clone(),
                                file,
                                reason: e.to_string(),
                            });
                            continue;
                        }
                    }
                }
                None => None,
            };
            let target = root.as_ref().unwrap_or(&self.workspace);
            let key = match artifact.root {
                Some(id) => format!("{}{id}/{file}", rundir::ROOT_KEY),
                None => format!("{}{file}", rundir::ARTIFACT_KEY),
            };
            // Before the first append to a file the checkpoint does not know, its length
            // is journaled (see `RunDir::append_opened`): a resume cuts a re-run step's line.
            let opened =
                (artifact.append && self.dir.is_some() && !state.file_lengths.contains_key(&key))
                    .then(|| target.file_len(&file));
            // Without fsync: durable with the step's journal record, synced at the next
            // snapshot (see `RunDir::checkpoint`).
            let written = match opened {
                Some(Err(e)) => Err(e),
                Some(Ok(len)) => {
                    if let Some(dir) = &mut self.dir {
                        dir.append_opened(&key, len).map_err(|e| {
                            StepError::Failed(format!("cannot write events.jsonl: {e}"))
                        })?;
                    }
                    target.append_unsynced(&file, &bytes).map(Some)
                }
                None if artifact.append => target.append_unsynced(&file, &bytes).map(Some),
                None => target.write_replace(&file, &bytes).map(|()| None),
            };
            // Outside the workspace the snapshot's sync does not reach: synced now.
            let written = match (&root, written) {
                (Some(root), Ok(len)) => root.sync(&file).map(|()| len),
                (_, written) => written,
            };
            let len = match written {
                Ok(len) => len,
                // Refused by the confinement (a symbolic link out of the workspace or into
                // its system area), or a failed write: recorded, the run goes on.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::PermissionDenied
                            | std::io::ErrorKind::InvalidInput
                            | std::io::ErrorKind::NotADirectory
                            | std::io::ErrorKind::IsADirectory
                    ) =>
                {
                    self.event(Event::ArtifactRejected {
                        role: role_name.clone(),
                        file,
                        reason: e.to_string(),
                    });
                    continue;
                }
                Err(e) => {
                    return Err(StepError::Failed(format!(
                        "cannot write artifact {file}: {e}"
                    )));
                }
            };
            if let Some(dir) = &mut self.dir
                && root.is_none()
            {
                dir.written(&file);
            }
            if let Some(len) = len {
                appended.push((key, len));
            }
            if self.dir.is_some() {
                self.event(Event::Artifact {
                    role: role_name.clone(),
                    file,
                    bytes: bytes.len(),
                    append: artifact.append,
                    folder: root.as_ref().map(|r| r.root().to_path_buf()),
                    sanitized_from: sanitized,
                });
            }
        }
        Ok(appended)
    }
}

/// `ctx` with every string in it made a safe path component (see
/// [`rondo_workspace::path_component`]), for rendering artifact names.
fn path_safe_context(ctx: tera::Context) -> tera::Context {
    let mut value = ctx.into_json();
    // Replies nest as deep as serde_json allows: walk with a stack, not recursion.
    let mut stack = vec![&mut value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                if let Some(safe) = rondo_workspace::path_component(s) {
                    *s = safe;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            // A float prints all its digits (`5e-324` is 326 characters): as long a value
            // is cut like a string.
            Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
                let shown = n.as_f64().map(|f| f.to_string()).unwrap_or_default();
                if let Some(safe) = rondo_workspace::path_component(&shown)
                    && shown.len() > safe.len()
                {
                    *v = Value::String(safe);
                }
            }
            _ => {}
        }
    }
    tera::Context::from_value(value).unwrap_or_default()
}
