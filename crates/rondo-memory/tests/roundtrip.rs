//! Checkpoint round trip (serialize → deserialize → render is identical) and the
//! template documented in docs/memory.md.

mod common;

use common::{line_of, read, stdlib};
use rondo_memory::{CodeContext, OperationHistory, Reflection, ScoreParams, Whiteboard};
use serde::{Deserialize, Serialize};

/// The shape an interpreter checkpoint could give the memory kinds.
#[derive(Serialize, Deserialize)]
struct Checkpoint {
    code: CodeContext,
    history: OperationHistory,
    whiteboard: Whiteboard,
}

fn code_template() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/memory.md"))
        .unwrap();
    let after = doc
        .split("<!-- template: code_context -->")
        .nth(1)
        .expect("template marker in docs/memory.md");
    let body = after.split("```jinja\n").nth(1).unwrap();
    body.split("\n```").next().unwrap().to_string()
}

fn render_template(view: &rondo_memory::CodeContextView) -> String {
    let mut ctx = tera::Context::new();
    ctx.insert("code_context", view);
    tera::Tera::one_off(&code_template(), &ctx, false).unwrap()
}

#[test]
fn checkpoint_restores_every_kind_exactly() {
    let root = stdlib();
    let text = read(&root, "json/decoder.py");
    let raise = line_of(&text, "raise JSONDecodeError(\"Expecting value\"", 1);
    // γ and α chosen with long binary expansions: they must survive the JSON text.
    let mut code = CodeContext::new(ScoreParams {
        alpha: 0.1 + 0.2,
        beta: 1.0 / 3.0,
        gamma: 0.85,
        threshold: 0.2,
    })
    .unwrap();
    let mut history = OperationHistory::new();
    let mut whiteboard = Whiteboard::catmaster();
    for (i, (path, lines)) in [
        ("json/decoder.py", vec![raise]),
        ("argparse.py", vec![1400, 2000, 2001]),
    ]
    .into_iter()
    .enumerate()
    {
        code.begin_operation();
        let thought = format!(
            "Look at[1](json/decoder.py:{raise}) and[2](argparse.py:{})",
            1400 + i
        );
        code.record_citations(&root, &thought).unwrap();
        code.record_access(&root, path, &lines).unwrap();
        history.push(thought, "open", path);
        history.set_observation("…").unwrap();
        history
            .reflect(Reflection {
                bad_action: i == 0,
                summary: "s".into(),
                lessons: "l".into(),
            })
            .unwrap();
    }
    whiteboard
        .apply_json(r#"[{"op":"UPSERT","section":"Key Files","path":"json/decoder.py","text":"decoder"},{"op":"UPSERT","section":"Key Facts","text":"raw_decode raises"}]"#)
        .unwrap();

    let before_view = code.render(&root);
    let before_text = render_template(&before_view);
    let state = Checkpoint {
        code,
        history,
        whiteboard,
    };
    let json = serde_json::to_string_pretty(&state).unwrap();

    let mut restored: Checkpoint = serde_json::from_str(&json).unwrap();
    assert_eq!(restored.code, state.code);
    assert_eq!(
        restored.code.params(),
        state.code.params(),
        "floats restored bit for bit"
    );
    assert_eq!(restored.history, state.history);
    assert_eq!(restored.whiteboard, state.whiteboard);
    let after_view = restored.code.render(&root);
    assert_eq!(after_view, before_view);
    assert_eq!(render_template(&after_view), before_text);
    assert_eq!(restored.history.view(), state.history.view());
    assert_eq!(
        restored.whiteboard.render_markdown(),
        state.whiteboard.render_markdown()
    );
    assert_eq!(serde_json::to_string_pretty(&restored).unwrap(), json);

    // The documented template writes the file headings, numbered lines and gaps.
    let def = line_of(&text, "def JSONObject(", 1);
    let expected_start =
        format!("### File: `json/decoder.py`\n{def} def JSONObject(s_and_end, strict, scan_once,");
    assert!(before_text.starts_with(&expected_start), "{before_text}");
    assert!(before_text.contains("\n...\n"), "{before_text}");
    assert!(before_text.contains("### File: `argparse.py`\n"));
    assert!(before_text.contains(&format!(
        "\n{raise} {}\n",
        text.lines().nth(raise - 1).unwrap()
    )));
}
