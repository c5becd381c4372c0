//! Built-in functions for code-agent workflows (the LLM-IDE's): which lines of which files
//! a shell command read, and a path made relative to the repository. The core evaluator
//! ([`super::eval`]) only dispatches to them; the reading itself is `rondo_memory`'s.

use serde_json::Value;

/// `shell_reads(command, output, dir)`: the reads of `command` run against the repository
/// at `dir`, as a list of `{path, start, end, lines}`.
pub fn shell_reads(command: &Value, output: &Value, dir: &Value) -> Value {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    serde_json::to_value(rondo_memory::shell_reads(
        &text(command),
        &text(output),
        &text(dir),
    ))
    .unwrap_or(Value::Null)
}

/// `repo_path(path, dir)`: `path` relative to the repository at `dir`, or `null` when it
/// is not a string or lies outside.
pub fn repo_path(path: &Value, dir: &Value) -> Value {
    let dir = dir.as_str().unwrap_or("");
    match path {
        Value::String(p) => {
            rondo_memory::repo_relative(p, dir, dir).map_or(Value::Null, Value::String)
        }
        _ => Value::Null,
    }
}
