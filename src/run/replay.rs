//! `rondo replay`: a run's events, step by step.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

use super::events::{Event, LlmResponse};

fn clip(text: &str, full: bool, limit: usize) -> String {
    if full || text.chars().count() <= limit {
        return text.to_string();
    }
    let cut: String = text.chars().take(limit).collect();
    format!(
        "{cut}… ({} more characters; --full shows all)",
        text.chars().count() - limit
    )
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn render(run_dir: &Path, full: bool) -> Result<String, String> {
    let info = super::rundir::read_info(run_dir)?;
    let text = std::fs::read_to_string(run_dir.join("events.jsonl"))
        .map_err(|e| format!("{}: {e}", run_dir.display()))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} of {} ({}), started {}",
        info.run_id, info.workflow, info.status, info.started_at
    );
    for line in text.lines() {
        let Some(event) = serde_json::from_str::<Value>(line)
            .ok()
            .as_ref()
            .and_then(Event::from_line)
        else {
            continue;
        };
        match event {
            Event::RoleStart {
                role,
                kind,
                visit,
                step,
            } => {
                let _ = writeln!(out, "\nstep {step} · {role} ({kind}) visit {visit}");
            }
            Event::LlmResponse(LlmResponse { call, .. }) => {
                let _ = writeln!(
                    out,
                    "  prompt ({} via {}):\n{}",
                    call.model,
                    call.profile,
                    indent(&clip(&call.prompt, full, 400))
                );
                let _ = writeln!(
                    out,
                    "  reply (attempt {}, {} tokens):\n{}",
                    call.attempt,
                    call.usage.input_tokens + call.usage.output_tokens,
                    indent(&clip(&call.raw, full, 600))
                );
            }
            Event::InvalidOutput { call, error } => {
                let _ = writeln!(out, "  invalid reply (attempt {}): {error}", call.attempt);
            }
            Event::InvalidOutcome {
                attempts, error, ..
            } => {
                let _ = writeln!(
                    out,
                    "  no valid reply after {attempts} attempt(s): routed as invalid ({error})"
                );
            }
            Event::ToolCall { result: r, .. } => {
                let _ = writeln!(
                    out,
                    "  tool {} → {} (exit {}, {:.2}s)",
                    r["tool_name"].as_str().unwrap_or(""),
                    r["status"].as_str().unwrap_or(""),
                    r["exit_code"],
                    r["execution_time"].as_f64().unwrap_or(0.0)
                );
                let shown = r["shown"].as_str().unwrap_or("");
                if !shown.is_empty() {
                    let _ = writeln!(out, "{}", indent(&clip(shown, full, 400)));
                }
            }
            Event::Memory {
                memory, op, note, ..
            } => {
                let _ = writeln!(
                    out,
                    "  memory {memory}.{op}{}",
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", clip(&note, full, 120))
                    }
                );
            }
            Event::Artifact { file, .. } => {
                let _ = writeln!(out, "  wrote {file}");
            }
            Event::Route {
                to,
                condition,
                backtrack,
                ..
            } => {
                let _ = writeln!(
                    out,
                    "  → {}{}{}",
                    to.join(", "),
                    if condition.is_empty() {
                        String::new()
                    } else {
                        format!(" when {condition}")
                    },
                    if backtrack { " (backtrack)" } else { "" }
                );
            }
            Event::RunResumed { step } => {
                let _ = writeln!(out, "\n— resumed at step {step} —");
            }
            Event::Exit {
                exit, code, reason, ..
            } => {
                let _ = writeln!(out, "\nexit `{exit}` (code {code}): {reason}");
            }
            _ => {}
        }
    }
    Ok(out)
}
