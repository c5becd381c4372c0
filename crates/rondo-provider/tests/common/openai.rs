//! A fake OpenAI Chat Completions server whose request check is the published OpenAPI spec.

use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use super::{FakeServer, Recorded, Reply, check, last_user_text, pieces, sse};

pub const KEY: &str = "sk-test-0123456789abcdef";

/// The parts of OpenAI's published OpenAPI document these tests read (see its README).
pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        serde_saphyr::from_str(include_str!("../contracts/openai/openapi.yaml"))
            .expect("parse the OpenAI spec")
    })
}

/// A validator for `components.schemas.CreateChatCompletionRequest`, `$ref`s resolved
/// against the spec's own components.
pub fn request_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": "#/components/schemas/CreateChatCompletionRequest",
            "components": spec()["components"],
        });
        jsonschema::draft202012::new(&root).expect("compile the request schema")
    })
}

pub fn validate_body(body: &Value) -> Result<(), String> {
    let errors: Vec<String> = request_validator()
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    check(
        errors.is_empty(),
        format!("body violates CreateChatCompletionRequest: {errors:?}\n{body}"),
    )
}

pub fn validate(req: &Recorded, key: Option<&str>) -> Result<(), String> {
    check(req.method == "POST", format!("method {}", req.method))?;
    check(
        req.path == "/v1/chat/completions",
        format!("path {}", req.path),
    )?;
    check(
        req.header("content-type") == Some("application/json"),
        "content-type must be application/json",
    )?;
    match key {
        Some(k) => check(
            req.header("authorization") == Some(&format!("Bearer {k}")),
            "missing or wrong bearer token",
        )?,
        None => check(
            req.header("authorization").is_none(),
            "unexpected authorization",
        )?,
    }
    let body = req.json();
    validate_body(&body)?;
    if req.wants_stream() {
        check(
            body["stream_options"]["include_usage"] == true,
            "streaming without stream_options.include_usage",
        )?;
    }
    Ok(())
}

/// What the fake model says: a tool call when tools are offered and the last message is
/// the user's, JSON when a schema is asked for, else an echo.
pub fn answer(body: &Value) -> (String, Vec<Value>) {
    let last_role = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["role"].clone());
    if body["tools"].as_array().is_some_and(|t| !t.is_empty()) && last_role == Some(json!("user")) {
        let name = body["tools"][0]["function"]["name"]
            .as_str()
            .unwrap_or("f")
            .to_string();
        return (
            String::new(),
            vec![json!({"id": "call_1", "type": "function",
                "function": {"name": name, "arguments": "{\"city\": \"Paris\", \"days\": 3}"}})],
        );
    }
    if body["response_format"]["type"] == "json_schema" {
        return ("{\"answer\": \"ok\"}".into(), vec![]);
    }
    (format!("echo: {}", last_user_text(body)), vec![])
}

fn usage(body: &Value) -> Value {
    let n = body["messages"].as_array().map(|m| m.len()).unwrap_or(0) as u64;
    json!({"prompt_tokens": 10 + n, "completion_tokens": 7, "total_tokens": 17 + n})
}

pub fn respond(req: &Recorded) -> Reply {
    let body = req.json();
    let (content, calls) = answer(&body);
    let model = body["model"].as_str().unwrap_or("?").to_string();
    if !req.wants_stream() {
        let message = if calls.is_empty() {
            json!({"role": "assistant", "content": content, "refusal": null})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": calls})
        };
        return Reply::Json(
            200,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": null,
                    "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                "usage": usage(&body), "service_tier": "default"
            }),
        );
    }
    let head = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null
        })
    };
    let mut events = vec![head(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for p in pieces(&content) {
        events.push(head(json!({"content": p}), Value::Null));
    }
    for (i, c) in calls.iter().enumerate() {
        events.push(head(
            json!({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
            "function": {"name": c["function"]["name"], "arguments": ""}}]}),
            Value::Null,
        ));
        for p in pieces(c["function"]["arguments"].as_str().unwrap_or("")) {
            events.push(head(
                json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                Value::Null,
            ));
        }
    }
    events.push(head(
        json!({}),
        json!(if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }),
    ));
    events.push(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
        "model": model, "choices": [], "usage": usage(&body)}),
    );
    let mut frames = sse(&events);
    frames.push("data: [DONE]\n\n".into());
    Reply::Stream {
        content_type: "text/event-stream",
        frames,
        cut: false,
    }
}

pub async fn server(key: Option<&'static str>) -> FakeServer {
    // Compile the schema now: done lazily inside the server task it would stall the
    // single-threaded test runtime for seconds and trip the client's timeouts.
    let _ = request_validator();
    FakeServer::start(move |r| validate(r, key), respond).await
}

/// Streamed reply cut after a few frames.
pub fn cut_stream() -> Reply {
    let req_like = Recorded {
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        headers: vec![],
        body: serde_json::to_vec(&json!({"model": "m", "stream": true,
            "messages": [{"role": "user", "content": "a long answer please"}]}))
        .unwrap_or_default(),
    };
    match respond(&req_like) {
        Reply::Stream {
            content_type,
            frames,
            ..
        } => Reply::Stream {
            content_type,
            frames: frames.into_iter().take(3).collect(),
            cut: true,
        },
        other => other,
    }
}

pub fn shared(s: FakeServer) -> Arc<FakeServer> {
    Arc::new(s)
}
