//! `rondo replay`: a run's events, step by step.

use std::fmt::Write;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::events::{Event, LlmResponse};
use super::rundir::JournalLine;

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

/// The longest record `record` reads.
const MAX_RECORD: usize = 64 << 20;

/// Record `index` of a JSONL file (0 the first, -1 the last), pretty-printed under a title
/// line: `rondo replay --path traces/<id>.jsonl --index -1`. The file is read line by line;
/// only the records a negative index needs are kept.
pub fn record(path: &Path, index: i64) -> Result<String, String> {
    use std::io::BufRead;
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| fail(&e))?;
    if !file.metadata().map_err(|e| fail(&e))?.is_file() {
        return Err(fail(&"not a file"));
    }
    let mut reader = std::io::BufReader::new(file);
    let keep = usize::try_from(index.unsigned_abs()).unwrap_or(usize::MAX);
    let mut last: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let mut count: u64 = 0;
    let mut found = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_RECORD as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| fail(&e))?;
        if read == 0 {
            break;
        }
        if line.len() > MAX_RECORD {
            return Err(fail(&format_args!("record {count} is longer than 64 MiB")));
        }
        let text = String::from_utf8_lossy(&line).trim().to_string();
        if text.is_empty() {
            continue;
        }
        if index >= 0 && count == index.unsigned_abs() {
            found = Some(text);
            break;
        }
        if index < 0 {
            last.push_back(text);
            if last.len() > keep {
                last.pop_front();
            }
        }
        count += 1;
    }
    let (at, text) = match found {
        Some(text) => (index.unsigned_abs(), text),
        None if count == 0 => return Err(fail(&"no records in the file")),
        None if index < 0 && last.len() == keep => {
            (count - keep as u64, last.pop_front().unwrap_or_default())
        }
        None => {
            return Err(fail(&format_args!(
                "no record {index}: the file has {count} (0 to {}, or -1 to -{count})",
                count - 1
            )));
        }
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| fail(&format_args!("record {at} is not JSON: {e}")))?;
    let pretty = serde_json::to_string_pretty(&value).unwrap_or(text);
    Ok(format!("REPLAY {at} : {}\n{pretty}\n", path.display()))
}

pub fn render(run_dir: &Path, full: bool) -> Result<String, String> {
    let info = super::rundir::read_info(run_dir)?;
    let unreadable = |e: std::io::Error| format!("{}: {e}", run_dir.display());
    let lines = super::rundir::journal_lines(run_dir).map_err(unreadable)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} of {} ({}), started {}",
        info.run_id, info.workflow, info.status, info.started_at
    );
    for line in lines {
        let event = match line.map_err(unreadable)? {
            JournalLine::Entry(entry) => entry.event,
            JournalLine::Unread(u) => {
                let kind = u.kind.map(|k| format!(" `{k}`")).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  ? events.jsonl line {}{kind} not read: {}",
                    u.line, u.reason
                );
                continue;
            }
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
