//! The run viewer: one static HTML page (its CSS and script inlined, nothing fetched from
//! the network) that draws a run from its journal. `rondo view RUN_DIR` writes it with the
//! run embedded as JSON; `rondo serve` serves it empty at `/`, where it lists the server's
//! runs, loads one from `/runs/{id}/view` and follows `/runs/{id}/events`.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::compile::Workflow;
use crate::run::events::Entry;
use crate::run::rundir::{self, JournalLine, RunInfo, Unread};

/// Longest text (prompt, reply, tool output, any string of an event) embedded whole.
pub const MAX_TEXT: usize = 16 * 1024;
/// Once this much journal is embedded, the rest keeps only short texts.
pub const MAX_JOURNAL: usize = 8 << 20;
/// How long texts are after [`MAX_JOURNAL`].
const MAX_TEXT_OVER: usize = 256;
/// Events beyond this many are left out (counted in `omitted`).
pub const MAX_EVENTS: usize = 50_000;
/// Unread journal lines listed (all are counted in `unread_total`).
pub const MAX_UNREAD: usize = 100;

const PAGE: &str = include_str!("assets/page.html");
const CSS: &str = include_str!("assets/view.css");
const SCRIPT: &str = include_str!("assets/view.js");

/// What the page shows of a run: the JSON `rondo view` embeds and `GET /runs/{id}/view`
/// answers. Its JSON Schema, `docs/view-data.schema.json`, is generated from this type
/// ([`data_schema`]); the viewer's script reads nothing else.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PageData {
    /// The run's `run.json` (a live run's totals are its running totals when served).
    pub run: RunInfo,
    /// The run's workspace (absolute): tool logs are named relative to it.
    pub workspace: PathBuf,
    /// The workflow's graph, laid out, as `rondo graph --format svg` draws it; when the
    /// workflow file can no longer be read or checked, the graph of what the journal shows
    /// (the roles run, the routes taken, the exit).
    pub graph: Graph,
    /// Memory names by index (checkpoints name memories by index); null without the
    /// workflow.
    pub memory: Option<Vec<String>>,
    pub note: Option<String>,
    /// The journal, one event a line, every string longer than 16 KiB cut (a note at its
    /// end says how long it was); once 8 MiB are kept, later strings are cut to 256
    /// bytes.
    #[schemars(with = "Vec<Entry>")]
    pub events: Vec<Value>,
    /// Events left out past the first 50,000.
    pub omitted: usize,
    /// The first journal lines this version does not read (at most 100).
    pub unread: Vec<Unread>,
    /// How many journal lines this version does not read.
    pub unread_total: usize,
}

pub use crate::render::scene::{
    EdgeKind, EdgeText, Graph, GraphEdge, GraphNode, LegendItem, NodeKind, Sample, SharedLabel,
};

/// The JSON Schema of [`PageData`], as `docs/view-data.schema.json` holds it.
pub fn data_schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    generator.into_root_schema_for::<PageData>().to_value()
}

/// What the page shows of a run: `run.json`, the workflow's graph (null when the workflow
/// file cannot be read or checked any more: the page then draws what the journal shows),
/// the memory names (checkpoints name memories by index) and the bounded journal.
pub fn data(run_dir: &Path, workflow: Option<&Workflow>) -> Result<PageData, String> {
    let info = rundir::read_info(run_dir)?;
    let unreadable =
        |e: std::io::Error| format!("{}: cannot read the journal: {e}", run_dir.display());
    let lines = rundir::journal_lines(run_dir).map_err(unreadable)?;
    let workspace = rundir::Layout::of(run_dir, &info).workspace;
    let mut journal = Bounded::default();
    for line in lines {
        journal.add(line.map_err(unreadable)?);
    }
    let (graph, memory, note) = match workflow {
        Some(w) => (
            crate::render::graph_data(w),
            Some(w.memory.iter().map(|m| m.name.clone()).collect()),
            (w.source_hash != info.workflow_hash).then(|| {
                "the workflow file changed since this run: the graph is today's".to_string()
            }),
        ),
        None => (
            journal_graph(&info.workflow, &journal.events),
            None,
            Some(
                "the workflow file could not be checked: the graph shows what the run took".into(),
            ),
        ),
    };
    Ok(PageData {
        run: info,
        workspace,
        graph,
        memory,
        note,
        events: journal.events,
        omitted: journal.omitted,
        unread: journal.unread,
        unread_total: journal.unread_total,
    })
}

/// The graph of what a journal shows: start, the roles run, the routes taken, the exit.
fn journal_graph(name: &str, events: &[Value]) -> Graph {
    use crate::render::scene::{EdgeIn, NodeIn, lay_out};
    use std::collections::{HashMap, HashSet};
    let mut nodes: Vec<NodeIn> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut add = |nodes: &mut Vec<NodeIn>, name: &str, kind: NodeKind, sub: String| {
        if let Some(&i) = at.get(name) {
            return i;
        }
        at.insert(name.to_string(), nodes.len());
        nodes.push(NodeIn {
            id: name.to_string(),
            name: name.to_string(),
            kind,
            detail: Vec::new(),
            exit_code: None,
            sub,
        });
        nodes.len() - 1
    };
    add(&mut nodes, "start", NodeKind::Start, String::new());
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    // (from, to, route, condition, backtrack), each once.
    let mut edges: Vec<(String, String, Option<usize>, String, bool)> = Vec::new();
    let mut seen = HashSet::new();
    for e in events {
        match e.get("event").and_then(Value::as_str) {
            Some("role_start") => {
                let kind = match text(e, "kind").as_str() {
                    "llm" => NodeKind::Llm,
                    "tool" => NodeKind::Tool,
                    _ => NodeKind::Builtin,
                };
                add(&mut nodes, &text(e, "role"), kind, text(e, "kind"));
            }
            Some("exit") => {
                let code = e.get("code").and_then(Value::as_i64).map(|c| c as i32);
                let i = add(
                    &mut nodes,
                    &text(e, "exit"),
                    NodeKind::Exit,
                    code.map(|c| format!("exit {c}")).unwrap_or_default(),
                );
                nodes[i].exit_code = code;
            }
            Some("route") => {
                let from = text(e, "from");
                let route = e.get("route").and_then(Value::as_u64).map(|r| r as usize);
                let backtrack = e.get("backtrack").and_then(Value::as_bool) == Some(true);
                for to in e.get("to").and_then(Value::as_array).into_iter().flatten() {
                    let to = to.as_str().unwrap_or("").to_string();
                    if seen.insert((route, from.clone(), to.clone())) {
                        edges.push((from.clone(), to, route, text(e, "condition"), backtrack));
                    }
                }
            }
            _ => {}
        }
    }
    let mut laid = Vec::new();
    for (from, to, route, label, backtrack) in edges.drain(..) {
        let f = add(&mut nodes, &from, NodeKind::Builtin, String::new());
        let t = add(&mut nodes, &to, NodeKind::Builtin, String::new());
        laid.push(EdgeIn {
            from: f,
            to: t,
            route,
            label,
            kind: if backtrack {
                EdgeKind::Backtrack
            } else {
                EdgeKind::Route
            },
        });
    }
    lay_out(name, nodes, laid)
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
/// cut shorter once [`MAX_JOURNAL`] bytes are kept, and at most [`MAX_EVENTS`] events;
/// read a line at a time, so what is left out is never held.
#[derive(Default)]
struct Bounded {
    events: Vec<Value>,
    size: usize,
    omitted: usize,
    unread: Vec<Unread>,
    unread_total: usize,
}

impl Bounded {
    fn add(&mut self, line: JournalLine) {
        let entry = match line {
            JournalLine::Entry(entry) => entry,
            JournalLine::Unread(u) => {
                self.unread_total += 1;
                if self.unread.len() < MAX_UNREAD {
                    self.unread.push(u);
                }
                return;
            }
        };
        if self.events.len() >= MAX_EVENTS {
            self.omitted += 1;
            return;
        }
        let Ok(mut event) = serde_json::to_value(&entry) else {
            return;
        };
        let limit = if self.size < MAX_JOURNAL {
            MAX_TEXT
        } else {
            MAX_TEXT_OVER
        };
        cut_texts(&mut event, limit);
        self.size += serde_json::to_string(&event).map_or(0, |s| s.len());
        self.events.push(event);
    }
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
pub fn page(data: &impl Serialize) -> String {
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
    use serde_json::json;

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
        let big: Entry = serde_json::from_value(json!({
            "seq": 1, "ts": "2026-01-01T00:00:00.000Z", "event": "invalid_output",
            "role": "r", "visit": 1, "attempt": 1, "profile": "p", "model": "m",
            "prompt": "", "raw": "r".repeat(20 * 1024),
            "usage": {"input_tokens": 0, "output_tokens": 0}, "cost": 0.0,
            "attempts": [], "error": "e"
        }))
        .unwrap();
        let small: Entry = serde_json::from_value(json!({
            "seq": 2, "ts": "2026-01-01T00:00:00.000Z", "event": "run_resumed", "step": 1
        }))
        .unwrap();
        let mut journal = Bounded::default();
        for _ in 0..600 {
            journal.add(JournalLine::Entry(big.clone()));
        }
        for _ in 0..MAX_EVENTS - 600 + 7 {
            journal.add(JournalLine::Entry(small.clone()));
        }
        assert_eq!(journal.omitted, 7);
        assert_eq!(journal.events.len(), MAX_EVENTS);
        let first = journal.events[0]["raw"].as_str().unwrap().len();
        let last = journal.events[599]["raw"].as_str().unwrap().len();
        assert!(first > MAX_TEXT && first < MAX_TEXT + 64, "{first}");
        assert!(last < MAX_TEXT_OVER + 64, "{last}");
    }
}
