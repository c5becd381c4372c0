//! The journal read back as typed events: runs recorded by earlier versions (lines of a
//! kind since renamed, lines before a field was added, lines of a later version, a
//! damaged line) are still replayed, re-executed and viewed; a native reply's tool calls
//! are recorded as calls, and a re-execution replays exactly those.

mod common;

use std::path::Path;

use serde_json::{Value, json};

const ASK: &str = r#"workflow ask {
  prompts = "prompts"
  input question: string = "Which city?"
}
role ask: llm {
  prompt = "ask.tera"
  output json { answer: string, note: string? }
  artifact "answer.txt" = output.answer
}
start -> ask
ask -> invalid_output when ask.invalid
ask -> done
exit done
"#;

/// The journal's lines, each a JSON value.
fn lines(run_dir: &Path) -> Vec<Value> {
    common::events(run_dir)
}

fn write_lines(run_dir: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(run_dir.join("events.jsonl"), text).unwrap();
}

/// The data `rondo view` embeds in its page.
fn page_data(run_dir: &Path, dir: &Path) -> Value {
    let page = dir.join("page.html");
    let out = common::rondo(&[
        "view",
        run_dir.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    common::assert_success(&out);
    let html = std::fs::read_to_string(page).unwrap();
    let data = html
        .split(r#"<script type="application/json" id="run-data">"#)
        .nth(1)
        .unwrap()
        .split("</script>")
        .next()
        .unwrap();
    serde_json::from_str(data).unwrap()
}

/// A run whose journal is made to look as older versions wrote it, with a line from a
/// later version and a damaged one, is replayed, re-executed with `--replay-from` and
/// viewed: the old lines read as their events, the others are named with their place.
#[test]
fn an_older_journal_is_replayed_re_executed_and_viewed() {
    let tmp = tempfile::tempdir().unwrap();
    let wf = common::project(
        tmp.path(),
        ASK,
        &[("ask.tera", "Q: {{ input.question }}")],
        "replies:\n  ask: '{\"answer\": \"Oslo\"}'\n",
    );
    let script = tmp.path().join("script.yaml");
    let (out, run_dir) = common::run_with(&wf, "old", &["--script", script.to_str().unwrap()]);
    common::assert_success(&out);

    // As the first journals wrote them: no `coercions` on replies and parsed outputs, no
    // `workspace` on run_start, no totals on role_end, `artifact_refused` for a refused
    // artifact. Then a line of a kind this version does not know, and a damaged line.
    let mut old: Vec<String> = Vec::new();
    let mut seq = 0;
    for mut line in lines(&run_dir) {
        let fields = line.as_object_mut().unwrap();
        seq = fields["seq"].as_u64().unwrap();
        match fields["event"].as_str().unwrap() {
            "llm_response" | "parsed_output" => {
                fields.remove("coercions");
            }
            "run_start" => {
                fields.remove("workspace");
            }
            "role_end" => {
                fields.remove("totals");
                old.push(line.to_string());
                seq += 1;
                old.push(
                    json!({"seq": seq, "ts": "2026-01-01T00:00:00.000Z", "event": "artifact_refused",
                        "role": "ask", "file": "../escape.txt", "reason": "outside the workspace"})
                    .to_string(),
                );
                continue;
            }
            _ => {}
        }
        fields.insert("seq".into(), json!(seq));
        old.push(line.to_string());
    }
    let damaged_line = old.len() + 1;
    old.push(format!(
        r#"{{"seq":{},"ts":"2026-01-01T00:00:00.000Z","event":"rou"#,
        seq + 1
    ));
    old.push(
        json!({"seq": seq + 2, "ts": "2026-01-01T00:00:00.000Z", "event": "from_a_later_version", "x": 1})
            .to_string(),
    );
    write_lines(&run_dir, &old);
    let replies: Vec<&String> = old.iter().filter(|l| l.contains("llm_response")).collect();
    assert!(
        replies.len() == 1 && !replies[0].contains("coercions"),
        "{replies:?}"
    );

    // Replay shows the old reply, and says which lines it did not read.
    let out = common::rondo(&["replay", run_dir.to_str().unwrap()]);
    common::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Q: Which city?"), "{text}");
    assert!(text.contains(r#"{"answer": "Oslo"}"#), "{text}");
    assert!(
        text.contains(&format!("line {damaged_line} not read: not JSON")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "line {} `from_a_later_version` not read",
            damaged_line + 1
        )),
        "{text}"
    );

    // Re-executed from the old journal, the run gets the reply it recorded.
    let (out, again) =
        common::run_with(&wf, "again", &["--replay-from", run_dir.to_str().unwrap()]);
    common::assert_success(&out);
    assert_eq!(
        std::fs::read_to_string(again.join("workspace/answer.txt")).unwrap(),
        "Oslo"
    );

    // The page has every old line as its event, and names the two it does not read.
    let data = page_data(&run_dir, tmp.path());
    let events = data["events"].as_array().unwrap();
    assert_eq!(events.len(), old.len() - 2);
    let response = events
        .iter()
        .find(|e| e["event"] == "llm_response")
        .unwrap();
    assert_eq!(response["coercions"], json!([]));
    assert!(events.iter().any(|e| e["event"] == "artifact_rejected"));
    assert_eq!(data["unread_total"], 2);
    let unread = &data["unread"];
    assert_eq!(unread[0]["line"], damaged_line);
    assert_eq!(unread[1]["line"], damaged_line + 1);
    assert_eq!(unread[1]["kind"], "from_a_later_version");
    let validator = jsonschema::validator_for(&rondo::view::data_schema()).unwrap();
    if let Err(e) = validator.validate(&data) {
        panic!("{e}");
    }
}

const NATIVE_SCRIPT: &str = r#"replies:
  agent:
    "1": '{"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Oslo"}}]}'
    "2": '{"content": "{\"content\": \"\", \"tool_calls\": [{\"name\": \"lookup\", \"arguments\": {\"city\": \"Bergen\"}}]}", "tool_calls": []}'
"#;

/// A native reply's calls are recorded as calls, apart from its text. Re-executing the run
/// replays those calls, and a reply whose text only looks like calls as that text: the
/// re-execution takes the path the run took.
#[test]
fn native_tool_calls_are_recorded_as_calls_and_replayed_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = common::root().join("tests/fixtures/native");
    std::fs::create_dir_all(tmp.path().join("prompts")).unwrap();
    std::fs::copy(
        fixtures.join("prompts/system.tera"),
        tmp.path().join("prompts/system.tera"),
    )
    .unwrap();
    let wf = tmp.path().join("agent.rondo");
    std::fs::copy(fixtures.join("agent.rondo"), &wf).unwrap();
    std::fs::write(tmp.path().join("script.yaml"), NATIVE_SCRIPT).unwrap();
    let script = tmp.path().join("script.yaml");

    let (out, run_dir) = common::run_with(&wf, "first", &["--script", script.to_str().unwrap()]);
    common::assert_success(&out);
    let journal = lines(&run_dir);
    let replies = common::of_kind(&journal, "llm_response");
    assert_eq!(
        replies[0]["tool_calls"],
        json!([{"id": "c1", "name": "lookup", "arguments": {"city": "Oslo"}}])
    );
    assert_eq!(replies[0]["raw"], "");
    let looks_like_calls =
        r#"{"content": "", "tool_calls": [{"name": "lookup", "arguments": {"city": "Bergen"}}]}"#;
    assert_eq!(replies[1]["raw"], looks_like_calls);
    assert_eq!(replies[1]["tool_calls"], json!([]));
    let path = |run: &Path| common::state(run)["path"].clone();
    assert_eq!(
        path(&run_dir),
        json!(["begin", "agent", "run_tools", "agent"])
    );

    let (out, again) =
        common::run_with(&wf, "again", &["--replay-from", run_dir.to_str().unwrap()]);
    common::assert_success(&out);
    assert_eq!(path(&again), path(&run_dir));
    let replayed = common::of_kind(&lines(&again), "llm_response");
    for (a, b) in replies.iter().zip(&replayed) {
        assert_eq!((&a["raw"], &a["tool_calls"]), (&b["raw"], &b["tool_calls"]));
    }
}
