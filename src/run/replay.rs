//! `rondo replay`: a run's events, step by step.

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

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
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match s("event").as_str() {
            "role_start" => {
                let _ = writeln!(
                    out,
                    "\nstep {} · {} ({}) visit {}",
                    e["step"],
                    s("role"),
                    s("kind"),
                    e["visit"]
                );
            }
            "llm_response" => {
                let _ = writeln!(
                    out,
                    "  prompt ({} via {}):\n{}",
                    s("model"),
                    s("profile"),
                    indent(&clip(&s("prompt"), full, 400))
                );
                let _ = writeln!(
                    out,
                    "  reply (attempt {}, {} tokens):\n{}",
                    e["attempt"],
                    e["usage"]["input_tokens"].as_u64().unwrap_or(0)
                        + e["usage"]["output_tokens"].as_u64().unwrap_or(0),
                    indent(&clip(&s("raw"), full, 600))
                );
            }
            "invalid_output" => {
                let _ = writeln!(
                    out,
                    "  invalid reply (attempt {}): {}",
                    e["attempt"],
                    s("error")
                );
            }
            "invalid_outcome" => {
                let _ = writeln!(
                    out,
                    "  no valid reply after {} attempt(s): routed as invalid ({})",
                    e["attempts"],
                    s("error")
                );
            }
            "tool_call" => {
                let r = &e["result"];
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
            "memory" => {
                let note = s("note");
                let _ = writeln!(
                    out,
                    "  memory {}.{}{}",
                    s("memory"),
                    s("op"),
                    if note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", clip(&note, full, 120))
                    }
                );
            }
            "artifact" => {
                let _ = writeln!(out, "  wrote {}", s("file"));
            }
            "route" => {
                let to: Vec<&str> = e["to"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let cond = s("condition");
                let _ = writeln!(
                    out,
                    "  → {}{}{}",
                    to.join(", "),
                    if cond.is_empty() {
                        String::new()
                    } else {
                        format!(" when {cond}")
                    },
                    if e["backtrack"].as_bool() == Some(true) {
                        " (backtrack)"
                    } else {
                        ""
                    }
                );
            }
            "run_resumed" => {
                let _ = writeln!(out, "\n— resumed at step {} —", e["step"]);
            }
            "exit" => {
                let _ = writeln!(
                    out,
                    "\nexit `{}` (code {}): {}",
                    s("exit"),
                    e["code"],
                    s("reason")
                );
            }
            _ => {}
        }
    }
    Ok(out)
}
