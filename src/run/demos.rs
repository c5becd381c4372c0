//! Few-shot demos a role takes (`demos = "opt/plan_demos.json"`), read once when a run
//! starts: a missing file is no demos, a bad one stops the start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::compile::{LlmRole, RoleKind, Workflow};

/// A demos file larger than this is refused: it is untrusted input that lands in a prompt.
pub const MAX_DEMOS_BYTES: u64 = 1 << 20;

/// Where a role's demos file is: relative to the workflow file.
pub fn path(workflow: &Workflow, role: &LlmRole) -> Option<PathBuf> {
    let rel = role.demos.as_ref()?;
    let base = workflow.path.parent().unwrap_or(Path::new("."));
    Some(base.join(rel))
}

/// The demos of one file: a JSON list of `{"inputs": {...}, "reply": ...}`.
pub fn read(path: &Path) -> Result<Value, String> {
    if !path.exists() && std::fs::symlink_metadata(path).is_err() {
        return Ok(Value::Array(Vec::new()));
    }
    let shown = path.display();
    let text = crate::source::read_regular(path, MAX_DEMOS_BYTES)
        .map_err(|e| format!("cannot read the demos file {shown}: {e}"))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the demos file {shown} is not JSON: {e}"))?;
    let Value::Array(items) = &value else {
        return Err(format!(
            "the demos file {shown} is not a list of {{\"inputs\": {{...}}, \"reply\": ...}}"
        ));
    };
    for (i, item) in items.iter().enumerate() {
        let ok = item.get("inputs").is_some_and(Value::is_object) && item.get("reply").is_some();
        if !ok {
            return Err(format!(
                "demo {} of {shown} is not {{\"inputs\": {{...}}, \"reply\": ...}}",
                i + 1
            ));
        }
    }
    Ok(value)
}

/// The demos of every llm role that takes some, by node index.
pub fn load(workflow: &Workflow) -> Result<HashMap<usize, Value>, String> {
    let mut out = HashMap::new();
    for (index, role) in workflow.roles() {
        if let RoleKind::Llm(l) = &role.kind
            && let Some(p) = path(workflow, l)
        {
            out.insert(index.index(), read(&p)?);
        }
    }
    Ok(out)
}
