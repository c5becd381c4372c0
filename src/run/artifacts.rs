//! Writing artifacts into the workspace: names rendered and confined, appends journaled.

use petgraph::graph::NodeIndex;
use serde_json::Value;

use super::events::Event;
use super::rundir;
use super::state::RunState;
use super::{Interpreter, StepError};
use crate::prompt::render_str;

impl<'w> Interpreter<'w> {
    /// Writes `artifacts` (a role's, with its output, item, prompt and visit; or the
    /// workflow's, with none); returns the new lengths of the files appended to.
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
        let prompt = prompt.map(|p| Value::String(p.to_string()));
        let from = Source {
            node,
            output,
            item,
            prompt: prompt.as_ref(),
            visit,
            role: &role_name,
        };
        let mut appended = Vec::new();
        for artifact in artifacts {
            let Some(content) = self.render_artifact(artifact, state, &from)? else {
                continue;
            };
            if let Some(len) = self.write_artifact(artifact, state, &from, content)? {
                appended.push(len);
            }
        }
        Ok(appended)
    }

    /// The artifact's file name (rendered and confined) and its bytes (secrets
    /// replaced); `None` when the name is refused (recorded, the run goes on).
    fn render_artifact(
        &mut self,
        artifact: &crate::compile::Artifact,
        state: &RunState,
        from: &Source,
    ) -> Result<Option<Content>, StepError> {
        let role_name = from.role;
        let ctx = self.name_context(
            state,
            from.node.unwrap_or(self.workflow.start),
            from.visit,
            from.item,
        );
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
        let mut env = self.env(state, from.node, from.output, from.item);
        env.prompt = from.prompt;
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
                role: role_name.to_string(),
                file,
                reason: why.to_string(),
            });
            return Ok(None);
        }
        Ok(Some(Content {
            file,
            sanitized,
            bytes,
        }))
    }

    /// Writes one rendered artifact in the folder a `path` input names, or in the
    /// workspace; returns the file's checkpoint key and new length when appended to.
    fn write_artifact(
        &mut self,
        artifact: &crate::compile::Artifact,
        state: &RunState,
        from: &Source,
        content: Content,
    ) -> Result<Option<(String, u64)>, StepError> {
        let Content {
            file,
            sanitized,
            bytes,
        } = content;
        let role_name = from.role;
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
                            role: role_name.to_string(),
                            file,
                            reason: e.to_string(),
                        });
                        return Ok(None);
                    }
                }
            }
            None => None,
        };
        let key = match artifact.root {
            Some(id) => format!("{}{id}/{file}", rundir::ROOT_KEY),
            None => format!("{}{file}", rundir::ARTIFACT_KEY),
        };
        let written = self.store_artifact(artifact, state, root.as_ref(), &key, &file, &bytes)?;
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
                    role: role_name.to_string(),
                    file,
                    reason: e.to_string(),
                });
                return Ok(None);
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
        if self.dir.is_some() {
            self.event(Event::Artifact {
                role: role_name.to_string(),
                file,
                bytes: bytes.len(),
                append: artifact.append,
                folder: root.as_ref().map(|r| r.root().to_path_buf()),
                sanitized_from: sanitized,
            });
        }
        Ok(len.map(|len| (key, len)))
    }

    /// The write itself: replaced, or appended to (its length before the first append
    /// journaled); without fsync in the workspace (durable with the step's journal
    /// record, synced at the next snapshot or at the run's end), synced at once in a `path` input's folder,
    /// which the snapshot's sync does not reach. The new length when appended to; the
    /// outer error is a journal that cannot be written, which ends the run.
    fn store_artifact(
        &mut self,
        artifact: &crate::compile::Artifact,
        state: &RunState,
        root: Option<&rondo_workspace::Workspace>,
        key: &str,
        file: &str,
        bytes: &[u8],
    ) -> Result<std::io::Result<Option<u64>>, StepError> {
        let target = root.unwrap_or(&self.workspace);
        // Before the first append to a file the checkpoint does not know, its length
        // is journaled (see `RunDir::append_opened`): a resume cuts a re-run step's line.
        let opened =
            (artifact.append && self.dir.is_some() && !state.file_lengths.contains_key(key))
                .then(|| target.file_len(file));
        let written = match opened {
            Some(Err(e)) => Err(e),
            Some(Ok(len)) => {
                if let Some(dir) = &mut self.dir {
                    dir.append_opened(key, len).map_err(|e| {
                        StepError::Failed(format!("cannot write events.jsonl: {e}"))
                    })?;
                }
                target.append_unsynced(file, bytes).map(Some)
            }
            None if artifact.append => target.append_unsynced(file, bytes).map(Some),
            None => target.write_replace(file, bytes).map(|()| None),
        };
        Ok(match (root, written) {
            (Some(root), Ok(len)) => root.sync(file).map(|()| len),
            (_, written) => written,
        })
    }
}

/// Where artifacts come from: the role (none for the workflow's own), its output, map
/// item, prompt and visit.
struct Source<'a> {
    node: Option<NodeIndex>,
    output: Option<&'a Value>,
    item: Option<&'a Value>,
    prompt: Option<&'a Value>,
    visit: u64,
    role: &'a str,
}

/// A rendered artifact: its confined file name, the name before confinement when that
/// differed, and its bytes.
struct Content {
    file: String,
    sanitized: Option<String>,
    bytes: Vec<u8>,
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
