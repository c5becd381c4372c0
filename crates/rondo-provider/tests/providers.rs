//! Anthropic, Gemini and Ollama clients against fake servers that check requests the way
//! the real APIs do and answer in each API's documented wire format.

mod common;

use std::sync::Mutex;

use common::{FakeServer, Recorded, Reply, check, pieces, sse};
use rondo_provider::http::shared_client;
use rondo_provider::providers::{
    anthropic::AnthropicModel, gemini::GeminiModel, ollama::OllamaModel,
};
use rondo_provider::*;
use serde_json::{Value, json};

const KEY: &str = "test-key-abcdef0123456789";

fn tool() -> ToolDef {
    ToolDef {
        name: "get_weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"},
            "unit": {"type": ["string", "null"]}}, "required": ["city"], "additionalProperties": false}),
    }
}

fn requests() -> Vec<ChatRequest> {
    let mut plain = ChatRequest::new(vec![Message::system("Be brief."), Message::user("hello")]);
    plain.temperature = Some(0.3);
    plain.max_tokens = Some(64);
    plain.stop = vec!["END".into()];
    let mut tools = ChatRequest::new(vec![Message::user("weather?")]);
    tools.tools = vec![tool()];
    let mut follow = tools.clone();
    follow.messages.push(Message::assistant_tool_calls(
        "Checking.",
        vec![ToolCall {
            id: "call_9".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Oslo"}),
        }],
    ));
    follow
        .messages
        .push(Message::tool_result("call_9", "{\"temp\": 4}"));
    let mut schema = ChatRequest::new(vec![Message::user("verdict?")]);
    schema.response_schema = Some((
        "verdict".into(),
        json!({"type": "object",
        "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}),
    ));
    vec![plain, tools, follow, schema]
}

/// Whole and streamed replies must be equal, and the deltas must spell the content.
async fn assert_stream_matches(m: &dyn ChatModel, reqs: &[ChatRequest]) -> Vec<ChatResponse> {
    let mut out = Vec::new();
    for req in reqs {
        let whole = m.complete(req, None).await.expect("whole");
        let text = Mutex::new(String::new());
        let cb = |d: &str| text.lock().unwrap().push_str(d);
        let streamed = m.complete(req, Some(&cb)).await.expect("streamed");
        assert_eq!(whole, streamed);
        if req.response_schema.is_none() {
            assert_eq!(*text.lock().unwrap(), whole.content);
        }
        assert!(whole.usage.input_tokens > 0 && whole.usage.output_tokens > 0);
        out.push(whole);
    }
    out
}

// ---------------------------------------------------------------- Anthropic

fn anthropic_validate(r: &Recorded) -> Result<(), String> {
    check(r.path == "/v1/messages", format!("path {}", r.path))?;
    check(r.header("x-api-key") == Some(KEY), "x-api-key")?;
    check(
        r.header("anthropic-version") == Some("2023-06-01"),
        "anthropic-version",
    )?;
    check(
        r.header("authorization").is_none(),
        "no bearer auth on Anthropic",
    )?;
    let b = r.json();
    check(b["model"].is_string(), "model")?;
    check(
        b["max_tokens"].as_u64().is_some_and(|n| n > 0),
        "max_tokens is required",
    )?;
    let msgs = b["messages"].as_array().ok_or("messages")?;
    check(
        !msgs.is_empty() && msgs[0]["role"] == "user",
        "first message must be user",
    )?;
    for (i, m) in msgs.iter().enumerate() {
        check(
            m["role"] == "user" || m["role"] == "assistant",
            format!("role {} (system is a top-level field)", m["role"]),
        )?;
        if i > 0 {
            check(m["role"] != msgs[i - 1]["role"], "roles must alternate")?;
        }
        for block in m["content"].as_array().ok_or("content blocks")? {
            match block["type"].as_str() {
                Some("text") => check(block["text"].is_string(), "text")?,
                Some("tool_use") => check(
                    block["id"].is_string() && block["input"].is_object(),
                    "tool_use",
                )?,
                Some("tool_result") => check(
                    block["tool_use_id"].is_string()
                        && m["role"] == "user"
                        && block.get("is_error").is_none_or(Value::is_boolean),
                    "tool_result",
                )?,
                t => return Err(format!("unknown block {t:?}")),
            }
        }
    }
    for t in b["tools"].as_array().into_iter().flatten() {
        check(
            t["name"].is_string() && t["input_schema"]["type"] == "object",
            "tool shape",
        )?;
    }
    if let Some(s) = b.get("system") {
        check(s.is_string(), "system")?;
    }
    Ok(())
}

fn anthropic_respond(r: &Recorded) -> Reply {
    let b = r.json();
    let last = b["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let forced = b["tool_choice"]["name"].as_str().map(str::to_string);
    let mut blocks = Vec::new();
    if let Some(name) = forced {
        blocks.push(
            json!({"type": "tool_use", "id": "toolu_2", "name": name, "input": {"ok": true}}),
        );
    } else if b["tools"].is_array() && last["content"][0]["type"] == "text" {
        blocks.push(json!({"type": "text", "text": "Let me check."}));
        blocks.push(json!({"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}));
    } else {
        let text = last["content"][0]["text"]
            .as_str()
            .or(last["content"][0]["content"].as_str())
            .unwrap_or("");
        blocks.push(json!({"type": "text", "text": format!("echo: {text}")}));
    }
    let model = b["model"].clone();
    let usage = json!({"input_tokens": 12, "output_tokens": 9});
    if b["stream"] != true {
        return Reply::Json(
            200,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "content": blocks,
            "model": model, "stop_reason": "end_turn", "stop_sequence": null, "usage": usage}),
        );
    }
    let mut ev = vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "content": [], "model": model, "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    ];
    for (i, blk) in blocks.iter().enumerate() {
        if blk["type"] == "text" {
            ev.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}));
            ev.push(json!({"type": "ping"}));
            for p in pieces(blk["text"].as_str().unwrap_or("")) {
                ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": p}}));
            }
        } else {
            ev.push(
                json!({"type": "content_block_start", "index": i, "content_block":
                {"type": "tool_use", "id": blk["id"], "name": blk["name"], "input": {}}}),
            );
            for p in pieces(&blk["input"].to_string()) {
                ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}));
            }
        }
        ev.push(json!({"type": "content_block_stop", "index": i}));
    }
    ev.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 9}}));
    ev.push(json!({"type": "message_stop"}));
    // Real streams name each event too.
    let frames = ev
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    Reply::Stream {
        content_type: "text/event-stream",
        frames,
        cut: false,
    }
}

#[tokio::test]
async fn anthropic_messages() {
    let server = FakeServer::start(anthropic_validate, anthropic_respond).await;
    let m = AnthropicModel::new(
        shared_client().expect("client"),
        &server.url(""),
        "claude-sonnet-4-5",
        Some(ApiKey::new(KEY)),
    );
    let out = assert_stream_matches(&m, &requests()).await;
    assert_eq!(out[0].content, "echo: hello");
    assert_eq!(
        out[0].usage,
        Usage {
            input_tokens: 12,
            output_tokens: 9
        }
    );
    assert_eq!(out[1].content, "Let me check.");
    assert_eq!(out[1].tool_calls[0].arguments, json!({"city": "Paris"}));
    assert_eq!(
        serde_json::from_str::<Value>(&out[3].content).ok(),
        Some(json!({"ok": true}))
    );
    assert!(
        out[3].tool_calls.is_empty(),
        "the schema tool is not a tool call"
    );
    server.assert_no_violations();
    let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(bodies[0]["system"], "Be brief.");
    assert_eq!(bodies[0]["stop_sequences"], json!(["END"]));
    assert_eq!(
        bodies[4]["messages"][2]["content"][0]["type"],
        "tool_result"
    );

    // A stream cut after message_start, and an overloaded error event.
    let frames = match anthropic_respond(&server.requests()[1]) {
        Reply::Stream { frames, .. } => frames,
        _ => unreachable!(),
    };
    server.script([
        Some(Reply::Stream {
            content_type: "text/event-stream",
            frames: frames[..3].to_vec(),
            cut: true,
        }),
        Some(Reply::Stream {
            content_type: "text/event-stream",
            frames: sse(&[json!({"type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"}})]),
            cut: false,
        }),
        Some(Reply::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )),
    ]);
    let cb = |_: &str| {};
    let e = m
        .complete(&requests()[0], Some(&cb))
        .await
        .expect_err("cut");
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    let e = m
        .complete(&requests()[0], Some(&cb))
        .await
        .expect_err("error event");
    assert_eq!((e.kind(), e.status()), (ErrorKind::Server, Some(529)));
    let e = m.complete(&requests()[0], None).await.expect_err("529");
    assert!(e.is_retryable() && e.to_string().contains("Overloaded"));
}

// ---------------------------------------------------------------- Gemini

fn gemini_validate(r: &Recorded) -> Result<(), String> {
    let stream = r.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    check(
        stream || r.path == "/v1beta/models/gemini-2.5-flash:generateContent",
        format!("path {}", r.path),
    )?;
    check(r.header("x-goog-api-key") == Some(KEY), "x-goog-api-key")?;
    check(!r.path.contains("key="), "key must not be in the URL")?;
    let b = r.json();
    for c in b["contents"].as_array().ok_or("contents")? {
        check(
            c["role"] == "user" || c["role"] == "model",
            format!("role {}", c["role"]),
        )?;
        for p in c["parts"].as_array().ok_or("parts")? {
            let fields = p.as_object().map(|o| o.len()).unwrap_or(0);
            check(fields == 1, format!("a part has exactly one field: {p}"))?;
            if let Some(fr) = p.get("functionResponse") {
                check(
                    fr["name"].is_string() && fr["response"].is_object(),
                    "functionResponse",
                )?;
            }
        }
    }
    let no_json_schema_keywords = |v: &Value| gemini_schema_problem(v).is_none();
    for t in b["tools"].as_array().into_iter().flatten() {
        for f in t["functionDeclarations"]
            .as_array()
            .ok_or("functionDeclarations")?
        {
            if let Some(problem) = gemini_schema_problem(&f["parameters"]) {
                return Err(problem);
            }
            if let Some(unit) = f["parameters"]["properties"].get("unit") {
                check(unit["nullable"] == true, "type [T, null] → nullable")?;
            }
        }
    }
    if let Some(cfg) = b.get("generationConfig") {
        for k in cfg.as_object().ok_or("generationConfig")?.keys() {
            check(
                [
                    "temperature",
                    "maxOutputTokens",
                    "stopSequences",
                    "responseMimeType",
                    "responseSchema",
                ]
                .contains(&k.as_str()),
                format!("unknown generationConfig field {k}"),
            )?;
        }
        if let Some(s) = cfg.get("responseSchema") {
            check(
                no_json_schema_keywords(s) && cfg["responseMimeType"] == "application/json",
                "responseSchema",
            )?;
        }
    }
    Ok(())
}

/// The fields of the `Schema` object the v1beta API publishes
/// (`google.ai.generativelanguage.v1beta.Schema`, googleapis/googleapis
/// `google/ai/generativelanguage/v1beta/content.proto` and its client libraries).
const GEMINI_SCHEMA_FIELDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "minimum",
    "maximum",
];

/// What in a schema Gemini's published `Schema` does not take: a field it lacks, a `type`
/// that is not one name, or null written as a member of `anyOf` instead of `nullable`.
fn gemini_schema_problem(schema: &Value) -> Option<String> {
    let o = schema.as_object()?;
    for (k, v) in o {
        if !GEMINI_SCHEMA_FIELDS.contains(&k.as_str()) {
            return Some(format!("`{k}` is not a field of Schema: {schema}"));
        }
        match k.as_str() {
            "type" if !v.is_string() => return Some(format!("type {v} is not one name")),
            "properties" => {
                for p in v.as_object()?.values() {
                    if let Some(e) = gemini_schema_problem(p) {
                        return Some(e);
                    }
                }
            }
            "items" => {
                if let Some(e) = gemini_schema_problem(v) {
                    return Some(e);
                }
            }
            "anyOf" => {
                for m in v.as_array()? {
                    if m["type"] == "null" {
                        return Some(format!("null as a member of anyOf, not nullable: {schema}"));
                    }
                    if let Some(e) = gemini_schema_problem(m) {
                        return Some(e);
                    }
                }
            }
            _ => {}
        }
    }
    None
}

fn gemini_respond(r: &Recorded) -> Reply {
    let b = r.json();
    let last = b["contents"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    let mut parts = Vec::new();
    if b["generationConfig"]["responseSchema"].is_object() {
        parts.push(json!({"text": "{\"ok\": true}"}));
    } else if b["tools"].is_array() && last["parts"][0]["text"].is_string() {
        parts.push(json!({"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}));
    } else {
        let t = last["parts"][0]["text"]
            .as_str()
            .unwrap_or("tool result seen");
        parts.push(json!({"text": format!("echo: {t}")}));
    }
    let usage = json!({"promptTokenCount": 8, "candidatesTokenCount": 6, "totalTokenCount": 14});
    if !r.path.contains("stream") {
        return Reply::Json(
            200,
            json!({"candidates": [{"content": {"role": "model", "parts": parts},
            "finishReason": "STOP", "index": 0}], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"}),
        );
    }
    let mut chunks = Vec::new();
    for p in &parts {
        if let Some(t) = p["text"].as_str() {
            for piece in pieces(t) {
                chunks.push(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
                    "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8}, "modelVersion": "gemini-2.5-flash"}));
            }
        } else {
            chunks.push(
                json!({"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}],
                "modelVersion": "gemini-2.5-flash"}),
            );
        }
    }
    chunks.push(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"}));
    Reply::Stream {
        content_type: "text/event-stream",
        frames: sse(&chunks),
        cut: false,
    }
}

#[tokio::test]
async fn gemini_generate_content() {
    let server = FakeServer::start(gemini_validate, gemini_respond).await;
    let m = GeminiModel::new(
        shared_client().expect("client"),
        &server.url("/v1beta"),
        "models/gemini-2.5-flash",
        Some(ApiKey::new(KEY)),
    );
    let out = assert_stream_matches(&m, &requests()).await;
    assert_eq!(out[0].content, "echo: hello");
    assert_eq!(
        out[0].usage,
        Usage {
            input_tokens: 8,
            output_tokens: 6
        }
    );
    assert_eq!(out[0].model, "gemini-2.5-flash");
    assert_eq!(out[1].tool_calls[0].name, "get_weather");
    assert_eq!(out[1].tool_calls[0].arguments, json!({"city": "Rome"}));
    assert_eq!(out[3].content, "{\"ok\": true}");
    server.assert_no_violations();
    let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(
        bodies[0]["systemInstruction"]["parts"][0]["text"],
        "Be brief."
    );
    assert_eq!(bodies[0]["generationConfig"]["maxOutputTokens"], 64);
    assert_eq!(
        bodies[4]["contents"][2]["parts"][0]["functionResponse"]["name"],
        "get_weather"
    );
    assert_eq!(
        bodies[4]["contents"][2]["parts"][0]["functionResponse"]["response"]["output"],
        json!({"temp": 4})
    );

    server.script([Some(Reply::Stream { content_type: "text/event-stream",
        frames: sse(&[json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "par"}]}, "index": 0}]})]),
        cut: true })]);
    let cb = |_: &str| {};
    assert_eq!(
        m.complete(&requests()[0], Some(&cb))
            .await
            .expect_err("cut")
            .kind(),
        ErrorKind::Connection
    );
}

// ---------------------------------------------------------------- Ollama

fn ollama_validate(r: &Recorded) -> Result<(), String> {
    check(r.path == "/api/chat", format!("path {}", r.path))?;
    check(
        r.header("authorization").is_none(),
        "no key for local Ollama",
    )?;
    let b = r.json();
    check(
        b["stream"].is_boolean(),
        "stream must be explicit (Ollama streams by default)",
    )?;
    for m in b["messages"].as_array().ok_or("messages")? {
        check(
            ["system", "user", "assistant", "tool"].contains(&m["role"].as_str().unwrap_or("")),
            "role",
        )?;
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            check(
                c["function"]["arguments"].is_object(),
                "Ollama tool arguments are objects",
            )?;
        }
        if m["role"] == "tool" {
            check(m["tool_name"].is_string(), "tool_name")?;
        }
    }
    if let Some(o) = b.get("options") {
        for k in o.as_object().ok_or("options")?.keys() {
            check(
                ["temperature", "num_predict", "stop"].contains(&k.as_str()),
                format!("option {k}"),
            )?;
        }
    }
    Ok(())
}

fn ollama_respond(r: &Recorded) -> Reply {
    let b = r.json();
    let last = b["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let (content, calls) = if b["format"].is_object() {
        ("{\"ok\":true}".to_string(), Value::Null)
    } else if b["tools"].is_array() && last["role"] == "user" {
        (
            String::new(),
            json!([{"function": {"name": "get_weather", "arguments": {"city": "Lima"}}}]),
        )
    } else {
        (
            format!("echo: {}", last["content"].as_str().unwrap_or("")),
            Value::Null,
        )
    };
    let done = |msg: Value| {
        json!({"model": b["model"], "created_at": "2025-01-01T00:00:00Z", "message": msg,
        "done": true, "done_reason": "stop", "total_duration": 1000, "prompt_eval_count": 5, "eval_count": 4})
    };
    let mut msg = json!({"role": "assistant", "content": content});
    if !calls.is_null() {
        msg["tool_calls"] = calls.clone();
    }
    if b["stream"] != true {
        return Reply::Json(200, done(msg));
    }
    let mut lines: Vec<String> = pieces(&content).into_iter().map(|p| {
        json!({"model": b["model"], "created_at": "2025-01-01T00:00:00Z", "message": {"role": "assistant", "content": p}, "done": false}).to_string() + "\n"
    }).collect();
    if !calls.is_null() {
        lines.push(
            json!({"model": b["model"], "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "", "tool_calls": calls}, "done": false})
            .to_string()
                + "\n",
        );
    }
    lines.push(done(json!({"role": "assistant", "content": ""})).to_string() + "\n");
    Reply::Stream {
        content_type: "application/x-ndjson",
        frames: lines,
        cut: false,
    }
}

#[tokio::test]
async fn ollama_chat() {
    let server = FakeServer::start(ollama_validate, ollama_respond).await;
    let m = OllamaModel::new(
        shared_client().expect("client"),
        &server.url(""),
        "llama3.2",
        None,
    );
    let out = assert_stream_matches(&m, &requests()).await;
    assert_eq!(out[0].content, "echo: hello");
    assert_eq!(
        out[0].usage,
        Usage {
            input_tokens: 5,
            output_tokens: 4
        }
    );
    assert_eq!(out[1].tool_calls[0].arguments, json!({"city": "Lima"}));
    assert_eq!(out[3].content, "{\"ok\":true}");
    server.assert_no_violations();
    let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(
        bodies[0]["options"],
        json!({"temperature": 0.3, "num_predict": 64, "stop": ["END"]})
    );
    assert_eq!(bodies[6]["format"]["type"], "object");

    server.script([Some(Reply::Stream { content_type: "application/x-ndjson",
        frames: vec![json!({"model": "llama3.2", "message": {"role": "assistant", "content": "par"}, "done": false}).to_string() + "\n"],
        cut: true })]);
    let cb = |_: &str| {};
    assert_eq!(
        m.complete(&requests()[0], Some(&cb))
            .await
            .expect_err("cut")
            .kind(),
        ErrorKind::Connection
    );
}

// ------------------------------------------- a whole JSON reply to a streamed request

/// Calls each request whole and streamed against a server that answers every request
/// with a whole JSON body: the streamed call asked to stream, and its result (and the
/// text shown) is the whole one.
async fn whole_reply_to_stream_is_accepted(m: &dyn ChatModel, server: &FakeServer) {
    for req in requests() {
        let before = server.request_count();
        let whole = m.complete(&req, None).await.expect("whole");
        let text = Mutex::new(String::new());
        let cb = |d: &str| text.lock().unwrap().push_str(d);
        let streamed = m.complete(&req, Some(&cb)).await.expect("streamed");
        assert_eq!(whole, streamed);
        if req.response_schema.is_none() {
            assert_eq!(*text.lock().unwrap(), whole.content);
        }
        let asked: Vec<bool> = server.requests()[before..]
            .iter()
            .map(Recorded::wants_stream)
            .collect();
        assert_eq!(asked, vec![false, true]);
    }
    server.assert_no_violations();
}

#[tokio::test]
async fn anthropic_whole_reply_to_a_stream_request() {
    let server = FakeServer::start(anthropic_validate, |r| {
        anthropic_respond(&common::unstreamed(r))
    })
    .await;
    let m = AnthropicModel::new(
        shared_client().expect("client"),
        &server.url(""),
        "claude-sonnet-4-5",
        Some(ApiKey::new(KEY)),
    );
    whole_reply_to_stream_is_accepted(&m, &server).await;
}

#[tokio::test]
async fn gemini_whole_reply_to_a_stream_request() {
    let server =
        FakeServer::start(gemini_validate, |r| gemini_respond(&common::unstreamed(r))).await;
    let m = GeminiModel::new(
        shared_client().expect("client"),
        &server.url("/v1beta"),
        "models/gemini-2.5-flash",
        Some(ApiKey::new(KEY)),
    );
    whole_reply_to_stream_is_accepted(&m, &server).await;
}

#[tokio::test]
async fn gemini_array_reply_to_a_stream_request() {
    // Without `alt=sse` honoured, streamGenerateContent answers with a JSON array of chunks.
    let server = FakeServer::start(gemini_validate, |r| {
        let whole = match gemini_respond(&common::unstreamed(r)) {
            Reply::Json(200, v) if r.wants_stream() => v,
            other => return other,
        };
        let head = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "index": 0}],
            "modelVersion": "gemini-2.5-flash"});
        Reply::Json(200, json!([head, whole]))
    })
    .await;
    let m = GeminiModel::new(
        shared_client().expect("client"),
        &server.url("/v1beta"),
        "models/gemini-2.5-flash",
        Some(ApiKey::new(KEY)),
    );
    whole_reply_to_stream_is_accepted(&m, &server).await;
}

#[tokio::test]
async fn ollama_whole_reply_to_a_stream_request() {
    let server =
        FakeServer::start(ollama_validate, |r| ollama_respond(&common::unstreamed(r))).await;
    let m = OllamaModel::new(
        shared_client().expect("client"),
        &server.url(""),
        "llama3.2",
        None,
    );
    whole_reply_to_stream_is_accepted(&m, &server).await;
}

// ------------------------------------------- the vendors' base-URL variables

/// `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`, `GOOGLE_GEMINI_BASE_URL` and `OLLAMA_HOST`, as
/// a user with a proxy sets them for the vendors' own SDKs, send every profile of the
/// shipped `config/providers.yaml` that calls a vendor there, unedited: each fake server
/// receives its vendor's requests and checks them. A local server's profile stays put.
#[tokio::test]
async fn the_vendors_base_url_variables_move_the_shipped_profiles() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/providers.yaml");
    let shipped = load_profiles(path.as_ref()).expect("config/providers.yaml loads");
    let openai = common::openai::server(Some(KEY)).await;
    let anthropic = FakeServer::start(anthropic_validate, anthropic_respond).await;
    let gemini = FakeServer::start(gemini_validate, gemini_respond).await;
    let ollama = FakeServer::start(ollama_validate, ollama_respond).await;
    let vars = [
        ("OPENAI_API_KEY", KEY.to_string()),
        ("ANTHROPIC_API_KEY", KEY.to_string()),
        ("GEMINI_API_KEY", KEY.to_string()),
        ("OPENAI_BASE_URL", openai.url("/v1")),
        ("ANTHROPIC_BASE_URL", anthropic.url("")),
        // Google's SDKs add the API version to this prefix.
        ("GOOGLE_GEMINI_BASE_URL", gemini.url("")),
        // Ollama's clients take a host and port without a scheme.
        ("OLLAMA_HOST", ollama.addr.to_string()),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    };
    let pool = ProviderPool::with_env(shipped.clone(), &lookup).expect("pool");
    let req = ChatRequest::new(vec![Message::user("hello")]);
    for (name, server) in [
        ("openai", &openai),
        ("anthropic", &anthropic),
        ("gemini", &gemini),
        ("ollama", &ollama),
    ] {
        let done = pool
            .complete(name, &req, None, &mut |_| {})
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(done.profile, name, "served without falling back");
        assert!(done.response.content.contains("hello"), "{name}");
        server.assert_no_violations();
        assert_eq!(server.request_count(), 1, "{name}");
    }
    assert_eq!(
        pool.profile("local").and_then(|p| p.base_url()),
        Some("http://127.0.0.1:8000/v1"),
        "OPENAI_BASE_URL is OpenAI's address, not a local server's"
    );

    // Unset, each profile keeps the vendor's address.
    let keys_only = |name: &str| name.ends_with("_API_KEY").then(|| KEY.to_string());
    let pool = ProviderPool::with_env(shipped, &keys_only).expect("pool");
    let endpoints: Vec<Option<String>> = ["openai", "anthropic", "gemini", "ollama"]
        .iter()
        .map(|n| pool.profile(n).and_then(|p| p.endpoint()))
        .collect();
    assert_eq!(
        endpoints,
        [
            Some("https://api.openai.com/v1/chat/completions".to_string()),
            Some("https://api.anthropic.com/v1/messages".to_string()),
            Some(
                "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
                    .to_string()
            ),
            Some("http://127.0.0.1:11434/api/chat".to_string()),
        ]
    );
}

// ------------------------------------------- refused calls, and Gemini's schemas

/// A conversation in which one call succeeded and one was refused (the interpreter's
/// `⛔️validation_error`).
fn with_a_refused_call() -> ChatRequest {
    let mut req = ChatRequest::new(vec![Message::user("weather?")]);
    req.tools = vec![tool()];
    req.messages.push(Message::assistant_tool_calls(
        "",
        vec![
            ToolCall {
                id: "call_ok".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Oslo"}),
            },
            ToolCall {
                id: "call_bad".into(),
                name: "get_weather".into(),
                arguments: json!({"town": "Oslo"}),
            },
        ],
    ));
    req.messages
        .push(Message::tool_result("call_ok", "{\"temp\": 4}"));
    req.messages.push(Message::tool_error(
        "call_bad",
        "⛔️validation_error: invalid arguments for `get_weather`: no field `city`",
    ));
    req
}

/// Anthropic's `tool_result` of a refused or failed call says `is_error: true`; Gemini's
/// `functionResponse` puts it under `error`, a success under `output` (the keys its
/// `response` documents).
#[tokio::test]
async fn refused_calls_are_errors_in_each_protocol() {
    let anthropic = FakeServer::start(anthropic_validate, anthropic_respond).await;
    let m = AnthropicModel::new(
        shared_client().expect("client"),
        &anthropic.url(""),
        "claude-sonnet-4-5",
        Some(ApiKey::new(KEY)),
    );
    m.complete(&with_a_refused_call(), None)
        .await
        .expect("anthropic");
    anthropic.assert_no_violations();
    let body = anthropic.requests()[0].json();
    let results = &body["messages"][2]["content"];
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "call_ok");
    assert!(results[0].get("is_error").is_none(), "{results}");
    assert_eq!(results[1]["tool_use_id"], "call_bad");
    assert_eq!(results[1]["is_error"], true);
    assert!(
        results[1]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("⛔️validation_error"))
    );

    let gemini = FakeServer::start(gemini_validate, gemini_respond).await;
    let m = GeminiModel::new(
        shared_client().expect("client"),
        &gemini.url("/v1beta"),
        "gemini-2.5-flash",
        Some(ApiKey::new(KEY)),
    );
    m.complete(&with_a_refused_call(), None)
        .await
        .expect("gemini");
    gemini.assert_no_violations();
    let body = gemini.requests()[0].json();
    let parts = &body["contents"][2]["parts"];
    assert_eq!(
        parts[0]["functionResponse"]["response"],
        json!({"output": {"temp": 4}})
    );
    assert_eq!(
        parts[1]["functionResponse"]["response"],
        json!({"error": "⛔️validation_error: invalid arguments for `get_weather`: no field `city`"})
    );
}

/// An optional field as Rondo writes it (a union with null) reaches Gemini as its
/// published `Schema` says one: `nullable: true`, in tools and in a response schema alike,
/// with nothing `Schema` lacks.
#[tokio::test]
async fn gemini_schemas_say_nullable_as_the_published_schema_does() {
    let written = json!({"type": "object", "properties": {
        "city": {"type": "string"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "where": {"anyOf": [{"type": "object", "properties": {"lat": {"type": "number"}},
            "required": ["lat"], "additionalProperties": false}, {"type": "null"}]},
        "kind": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        "unit": {"type": ["string", "null"], "description": "C or F"},
        "fixed": {"type": "string", "const": "x"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}}
    }, "required": ["city"], "additionalProperties": false});
    let expected = json!({"type": "object", "properties": {
        "city": {"type": "string"},
        "note": {"type": "string", "nullable": true},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}},
            "required": ["lat"], "nullable": true},
        "kind": {"type": "string", "enum": ["a", "b"], "nullable": true},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": true},
        "unit": {"type": "string", "description": "C or F", "nullable": true},
        "fixed": {"type": "string", "enum": ["x"]},
        "counts": {"type": "object"}
    }, "required": ["city"]});
    assert_eq!(
        rondo_provider::providers::gemini::to_gemini_schema(&written),
        expected
    );
    let server = FakeServer::start(gemini_validate, gemini_respond).await;
    let m = GeminiModel::new(
        shared_client().expect("client"),
        &server.url("/v1beta"),
        "gemini-2.5-flash",
        Some(ApiKey::new(KEY)),
    );
    let mut req = ChatRequest::new(vec![Message::user("where?")]);
    req.tools = vec![ToolDef {
        name: "locate".into(),
        description: "Find a place".into(),
        parameters: written.clone(),
    }];
    m.complete(&req, None).await.expect("tools");
    let mut req = ChatRequest::new(vec![Message::user("where?")]);
    req.response_schema = Some(("place".into(), written));
    m.complete(&req, None).await.expect("response schema");
    server.assert_no_violations();
    let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(
        bodies[0]["tools"][0]["functionDeclarations"][0]["parameters"],
        expected
    );
    assert_eq!(bodies[1]["generationConfig"]["responseSchema"], expected);
}

// ------------------------------------------- what a cut stream cost

/// A stream cut after the provider reported its input (Anthropic's `message_start`,
/// Gemini's `usageMetadata` on each chunk) is priced with that figure, the output estimated
/// from the text that came (and marked so): it is not free.
#[tokio::test]
async fn a_stream_cut_after_usage_was_reported_is_priced() {
    let anthropic = FakeServer::start(anthropic_validate, anthropic_respond).await;
    let gemini = FakeServer::start(gemini_validate, gemini_respond).await;
    let profile = |name: &str, kind, model: &str, url: String| {
        let mut p = ProviderProfile::new(name, kind, model);
        p.base_url = Some(url);
        p.api_key_env = Some("TEST_KEY".into());
        p.retry.max_attempts = 1;
        p.price = Some(Price {
            input_per_1k: 1.0,
            output_per_1k: 2.0,
        });
        p
    };
    let pool = ProviderPool::with_env(
        vec![
            profile(
                "anthropic",
                ProviderKind::Anthropic,
                "claude-sonnet-4-5",
                anthropic.url(""),
            ),
            profile(
                "gemini",
                ProviderKind::Gemini,
                "gemini-2.5-flash",
                gemini.url("/v1beta"),
            ),
        ],
        &|name: &str| (name == "TEST_KEY").then(|| KEY.to_string()),
    )
    .expect("pool");
    let req = ChatRequest::new(vec![Message::user("a long answer please")]);
    let frames = |reply: Reply| match reply {
        Reply::Stream { frames, .. } => frames,
        other => panic!("{other:?}"),
    };
    let streamed = common::Recorded {
        method: "POST".into(),
        path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse".into(),
        headers: vec![],
        body: serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "stream": true,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a long answer please"}]}],
            "contents": [{"role": "user", "parts": [{"text": "a long answer please"}]}]}))
        .unwrap_or_default(),
    };
    // message_start (input 12, output 1), the text block, a ping, four text deltas.
    let cut = |frames: Vec<String>, n: usize| Reply::Stream {
        content_type: "text/event-stream",
        frames: frames[..n].to_vec(),
        cut: true,
    };
    anthropic.script([Some(cut(frames(anthropic_respond(&streamed)), 7))]);
    gemini.script([Some(cut(frames(gemini_respond(&streamed)), 4))]);
    for (name, reported_input) in [("anthropic", 12), ("gemini", 8)] {
        let shown = std::sync::Mutex::new(String::new());
        let cb = |d: &str| shown.lock().unwrap().push_str(d);
        let mut recs = Vec::new();
        let e = pool
            .complete(name, &req, Some(&cb), &mut |a| recs.push(a))
            .await
            .expect_err("cut");
        assert_eq!(e.kind(), ErrorKind::Connection, "{name}: {e}");
        let text = shown.lock().unwrap().clone();
        assert!(text.len() > 4, "{name}: {text:?}");
        let usage = recs[0].usage.unwrap_or_else(|| panic!("{name}: {recs:?}"));
        assert_eq!(usage.input_tokens, reported_input, "{name}");
        assert_eq!(
            usage.output_tokens,
            (text.len() as u64).div_ceil(4),
            "{name}"
        );
        assert!(recs[0].usage_estimated, "{name}");
        let cost = reported_input as f64 / 1000.0 + usage.output_tokens as f64 / 1000.0 * 2.0;
        assert_eq!(recs[0].cost, Some(cost), "{name}");
    }

    // An error event of the provider's own: billed once usage was reported, not before.
    let error_event =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let mut after_start = frames(anthropic_respond(&streamed))[..3].to_vec();
    after_start.extend(sse(std::slice::from_ref(&error_event)));
    anthropic.script([
        Some(Reply::Stream {
            content_type: "text/event-stream",
            frames: sse(&[error_event]),
            cut: false,
        }),
        Some(Reply::Stream {
            content_type: "text/event-stream",
            frames: after_start,
            cut: false,
        }),
    ]);
    let mut usages = Vec::new();
    for _ in 0..2 {
        let mut recs = Vec::new();
        let cb = |_: &str| {};
        let e = pool
            .complete("anthropic", &req, Some(&cb), &mut |a| recs.push(a))
            .await
            .expect_err("overloaded");
        assert_eq!(e.kind(), ErrorKind::Server);
        usages.push(recs[0].usage.map(|u| u.input_tokens));
    }
    assert_eq!(usages, [None, Some(12)]);
    anthropic.assert_no_violations();
    gemini.assert_no_violations();
}
