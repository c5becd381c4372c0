//! `rondo replay`: a run's events, step by step.

use std::fmt::Write;
use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::events::{Event, LlmCall, LlmResponse};
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
    indent_by(text, 6)
}

fn indent_by(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool role's step: what it ran (the tool and its arguments), how it ended (status,
/// exit code or why it has none, time) and what it printed, as the role's prompts see it.
fn tool_run(out: &mut String, r: &Value, full: bool) {
    let args = match &r["args"] {
        Value::Null => String::new(),
        Value::Array(a) if a.is_empty() => String::new(),
        Value::Array(a) => {
            let words: Vec<String> = a
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            format!(" {}", clip(&words.join(" "), full, 200))
        }
        other => format!(" {}", clip(&other.to_string(), full, 200)),
    };
    let ended = match (&r["exit_code"], r["timed_out"].as_bool()) {
        (_, Some(true)) => "timed out".to_string(),
        (Value::Null, _) => match r["error_kind"].as_str() {
            Some(kind) => format!("did not run: {kind}"),
            None => "no exit code".to_string(),
        },
        (code, _) => format!("exit {code}"),
    };
    let _ = writeln!(
        out,
        "  tool {}{args} → {} ({ended}, {:.2}s)",
        r["tool_name"].as_str().unwrap_or(""),
        r["status"].as_str().unwrap_or(""),
        r["execution_time"].as_f64().unwrap_or(0.0)
    );
    if let Some(error) = r["error"].as_str() {
        let _ = writeln!(out, "    error: {}", clip(error, full, 400));
    }
    if let Some(log) = r["log"].as_str() {
        let _ = writeln!(out, "    log: {log}");
    }
    let shown = r["shown"].as_str().unwrap_or("");
    if !shown.is_empty() {
        let _ = writeln!(out, "{}", indent(&clip(shown, full, 400)));
    }
}

/// One call of a native reply, as the `calls` tool role recorded it: the tool and its
/// arguments, whether it ran and ended well, and what went back to the model.
fn tool_call(out: &mut String, c: &Value, full: bool) {
    let kind = c["error_kind"].as_str();
    // A refused call is recorded under `⛔️validation_error`; its observation names the tool.
    let refused = matches!(kind, Some("validation" | "unknown_tool" | "too_many_calls"));
    let tool = if refused {
        c["observation"]["tool"].as_str()
    } else {
        c["tool"].as_str()
    }
    .unwrap_or("");
    let how = match (c["ok"].as_bool(), kind) {
        (Some(true), _) => "ok".to_string(),
        (_, Some(kind)) if refused => format!("not run ({kind})"),
        (_, Some(kind)) => format!("failed ({kind})"),
        _ => "failed".to_string(),
    };
    let _ = writeln!(
        out,
        "    {tool} {} → {how}",
        clip(&c["args"].to_string(), full, 200)
    );
    let observation = match &c["observation"] {
        Value::String(s) => s.clone(),
        v if refused => v["error"].as_str().unwrap_or_default().to_string(),
        v => v.to_string(),
    };
    if !observation.trim().is_empty() {
        let _ = writeln!(out, "{}", indent_by(&clip(&observation, full, 400), 8));
    }
}

/// Milliseconds since the epoch of a journal timestamp (`2026-11-22T09:16:30.123Z`).
fn epoch_ms(ts: &str) -> Option<u64> {
    let b = ts.as_bytes();
    if b.len() < 23 || b[4] != b'-' || b[10] != b'T' || b[19] != b'.' {
        return None;
    }
    let num = |from: usize, to: usize| ts.get(from..to)?.parse::<i64>().ok();
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, min, sec, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    // Days from the civil date (Howard Hinnant's algorithm), the inverse of clock::civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total = ((days * 24 + h) * 60 + min) * 60 + sec;
    u64::try_from(total * 1000 + ms).ok()
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
    // A step's events are journaled when it ends, so it began when the checkpoint before
    // them was written (the run's start for the first): the time of a step its events do
    // not time.
    let mut step_started: Option<u64> = None;
    let mut last_boundary: Option<u64> = None;
    for line in lines {
        let (event, at) = match line.map_err(unreadable)? {
            JournalLine::Entry(entry) => {
                let at = epoch_ms(&entry.ts);
                if matches!(
                    entry.event,
                    Event::Checkpoint { .. } | Event::RunStart { .. } | Event::RunResumed { .. }
                ) {
                    last_boundary = at;
                }
                (entry.event, at)
            }
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
        if matches!(event, Event::RoleStart { .. }) {
            step_started = last_boundary;
        }
        let took = step_started
            .zip(at)
            .map(|(from, to)| to.saturating_sub(from));
        event_lines(&mut out, event, took, full);
    }
    Ok(out)
}

/// What one journaled event shows; `took` is how long its step has run when it was
/// written, if known.
fn event_lines(out: &mut String, event: Event, took: Option<u64>, full: bool) {
    match event {
        Event::RoleStart {
            role,
            kind,
            visit,
            step,
        } => {
            let _ = writeln!(out, "\nstep {step} · {role} ({kind}) visit {visit}");
        }
        Event::LlmResponse(LlmResponse { call, .. }) => llm_call(out, &call, full),
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
        Event::ToolCall { result, .. } => {
            tool_step(out, &result, took, full);
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

/// A model call: the prompt sent (or that the conversation was), the reply and its tool
/// calls.
fn llm_call(out: &mut String, call: &LlmCall, full: bool) {
    if call.prompt.is_empty() {
        // A role with a conversation sends it, and a prompt only if it has one.
        let _ = writeln!(
            out,
            "  sent ({} via {}): its conversation, with no prompt of its own",
            call.model, call.profile
        );
    } else {
        let _ = writeln!(
            out,
            "  prompt ({} via {}):\n{}",
            call.model,
            call.profile,
            indent(&clip(&call.prompt, full, 400))
        );
    }
    let calls = call.tool_calls.as_deref().unwrap_or_default();
    let _ = writeln!(
        out,
        "  reply (attempt {}, {} tokens){}",
        call.attempt,
        call.usage.input_tokens + call.usage.output_tokens,
        match calls.len() {
            0 => String::from(":"),
            1 => String::from(", 1 tool call:"),
            n => format!(", {n} tool calls:"),
        }
    );
    if !call.raw.is_empty() || calls.is_empty() {
        let _ = writeln!(out, "{}", indent(&clip(&call.raw, full, 600)));
    }
    for c in calls {
        let _ = writeln!(
            out,
            "      {} {}",
            c.name,
            clip(&c.arguments.to_string(), full, 200)
        );
    }
}

/// A tool role's step: one tool run, or the reply's tool calls run at once (with the
/// step's time, `took` ms, when the journal gives it).
fn tool_step(out: &mut String, result: &Value, took: Option<u64>, full: bool) {
    match result["results"].as_array() {
        Some(calls) => {
            let took = took
                .map(|ms| format!(" in {:.2}s", ms as f64 / 1000.0))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  ran the reply's {} at once{took}:",
                match calls.len() {
                    1 => "tool call".to_string(),
                    n => format!("{n} tool calls"),
                }
            );
            for c in calls {
                tool_call(out, c, full);
            }
        }
        None => tool_run(out, result, full),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn journal_timestamps_read_back_to_their_instant() {
        for ms in [
            0,
            951_782_400_123,
            1_795_305_600_000,
            4_102_444_800_001,
            1_795_343_999_999,
        ] {
            let ts = super::super::clock::rfc3339(ms);
            assert_eq!(super::epoch_ms(&ts), Some(ms), "{ts}");
        }
        assert_eq!(super::epoch_ms("yesterday"), None);
    }
}
