//! The run viewer: one static HTML page (its CSS and script inlined, nothing fetched from
//! the network) that draws a run from its journal. `rondo view RUN_DIR` writes it with the
//! run embedded as JSON; `rondo serve` serves it empty at `/`, where it lists the server's
//! runs, loads one from `/runs/{id}/view` and follows `/runs/{id}/events`.

use std::path::Path;

use serde_json::{Value, json};

use crate::compile::Workflow;
use crate::run::rundir;

/// Longest text (prompt, reply, tool output, any string of an event) embedded whole.
pub const MAX_TEXT: usize = 16 * 1024;
/// Once this much journal is embedded, the rest keeps only short texts.
pub const MAX_JOURNAL: usize = 8 << 20;
/// How long texts are after [`MAX_JOURNAL`].
const MAX_TEXT_OVER: usize = 256;
/// Events beyond this many are left out (counted in `omitted`).
pub const MAX_EVENTS: usize = 50_000;

const PAGE: &str = include_str!("assets/page.html");
const CSS: &str = include_str!("assets/view.css");
const SCRIPT: &str = include_str!("assets/view.js");

/// What the page shows of a run: `run.json`, the workflow's graph (null when the workflow
/// file cannot be read or checked any more: the page then draws what the journal shows),
/// the memory names (checkpoints name memories by index) and the bounded journal.
pub fn data(run_dir: &Path, workflow: Option<&Workflow>) -> Result<Value, String> {
    let info = rundir::read_info(run_dir)?;
    let journal = rundir::read_journal(run_dir)
        .map_err(|e| format!("{}: cannot read the journal: {e}", run_dir.display()))?;
    let workspace = rundir::Layout::of(run_dir, &info).workspace;
    let (graph, memory, note) = match workflow {
        Some(w) => (
            crate::render::graph_data(w),
            json!(w.memory.iter().map(|m| m.name.clone()).collect::<Vec<_>>()),
            (w.source_hash != info.workflow_hash).then(|| {
                "the workflow file changed since this run: the graph is today's".to_string()
            }),
        ),
        None => (
            Value::Null,
            Value::Null,
            Some(
                "the workflow file could not be checked: the graph shows what the run took".into(),
            ),
        ),
    };
    let (events, omitted) = bound_journal(journal);
    Ok(json!({
        "run": info,
        "workspace": workspace,
        "graph": graph,
        "memory": memory,
        "note": note,
        "events": events,
        "omitted": omitted,
    }))
}

/// The run's workflow, checked, when its file still checks (offline).
pub fn load_workflow(run_dir: &Path) -> Option<crate::check::Checked> {
    let info = rundir::read_info(run_dir).ok()?;
    let (_, loaded) = crate::check::load_checked(
        &info.workflow_path,
        &crate::check::CheckOptions { offline: true },
    )
    .ok()?;
    loaded.checked.ok()
}

/// The journal with every long text cut (a note at the end says how long it was), texts
/// cut shorter once [`MAX_JOURNAL`] bytes are kept, and at most [`MAX_EVENTS`] events.
fn bound_journal(journal: Vec<Value>) -> (Vec<Value>, usize) {
    let total = journal.len();
    let mut kept = Vec::with_capacity(total.min(MAX_EVENTS));
    let mut size = 0;
    for mut event in journal.into_iter().take(MAX_EVENTS) {
        let limit = if size < MAX_JOURNAL {
            MAX_TEXT
        } else {
            MAX_TEXT_OVER
        };
        cut_texts(&mut event, limit);
        size += serde_json::to_string(&event).map_or(0, |s| s.len());
        kept.push(event);
    }
    let omitted = total - kept.len();
    (kept, omitted)
}

/// Cuts every string of `value` longer than `limit` bytes; a loop with its own stack, not
/// recursion, since the value is a model's reply or a tool's output.
pub fn cut_texts(value: &mut Value, limit: usize) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) if s.len() > limit => {
                let mut end = limit;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                let whole = s.len();
                s.truncate(end);
                s.push_str(&format!("\n… [cut: {end} of {whole} bytes shown]"));
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
}

/// The page, with `data` (null: the served page, which loads runs itself) embedded so that
/// nothing in it can end the script element: every `<`, `>` and `&` is a JSON escape.
pub fn page(data: &Value) -> String {
    let json = serde_json::to_string(data)
        .unwrap_or_else(|_| "null".into())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    PAGE.replace("/*CSS*/", CSS)
        .replace("/*SCRIPT*/", SCRIPT)
        .replace("\"DATA\"", &json)
}

/// `rondo view`: the page of the run in `run_dir`.
pub fn render(run_dir: &Path) -> Result<String, String> {
    let workflow = load_workflow(run_dir);
    let data = data(run_dir, workflow.as_deref())?;
    Ok(page(&data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_on_a_character_boundary_with_their_size() {
        // 3-byte characters: the limit falls inside one.
        let mut v = json!({"a": ["€".repeat(10)], "b": "short"});
        cut_texts(&mut v, 10);
        assert_eq!(v["a"][0], "€€€\n… [cut: 9 of 30 bytes shown]");
        assert_eq!(v["b"], "short");
    }

    #[test]
    fn nested_values_deeper_than_serde_would_read_are_walked_without_recursion() {
        let mut v = json!("x".repeat(100));
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        cut_texts(&mut v, 4);
        let mut inner = &v;
        while let Value::Array(items) = inner {
            inner = &items[0];
        }
        assert!(
            inner
                .as_str()
                .unwrap()
                .starts_with("xxxx\n… [cut: 4 of 100")
        );
        // Dropping a 100,000-deep value recurses in serde_json: leak it (test only).
        std::mem::forget(v);
    }

    #[test]
    fn embedded_data_cannot_close_its_script_element() {
        let page = page(&json!({"raw": "</script><script>alert(1)</script><!-- &amp;"}));
        let data = page
            .split(r#"<script type="application/json" id="run-data">"#)
            .nth(1)
            .unwrap()
            .split("</script>")
            .next()
            .unwrap();
        assert!(!data.contains(['<', '>', '&']), "{data}");
        let back: Value = serde_json::from_str(data).unwrap();
        assert_eq!(back["raw"], "</script><script>alert(1)</script><!-- &amp;");
    }

    #[test]
    fn a_journal_past_its_budget_keeps_short_texts_and_counts_what_it_left_out() {
        // 600 replies of 20 KiB pass the 8 MiB budget; small events then fill the count.
        let big = json!({"event": "llm_response", "raw": "r".repeat(20 * 1024)});
        let mut journal = vec![big; 600];
        journal.extend(vec![json!({"event": "route"}); MAX_EVENTS - 600 + 7]);
        let (kept, omitted) = bound_journal(journal);
        assert_eq!(omitted, 7);
        assert_eq!(kept.len(), MAX_EVENTS);
        let first = kept[0]["raw"].as_str().unwrap().len();
        let last = kept[599]["raw"].as_str().unwrap().len();
        assert!(first > MAX_TEXT && first < MAX_TEXT + 64, "{first}");
        assert!(last < MAX_TEXT_OVER + 64, "{last}");
    }
}
