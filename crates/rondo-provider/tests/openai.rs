//! The OpenAI client against a fake server that validates every request body with the
//! published OpenAPI schema.

mod common;

use std::sync::Mutex;

use common::openai::{self as fake, KEY};
use rondo_provider::http::shared_client;
use rondo_provider::providers::openai::{OpenAiModel, wire};
use rondo_provider::*;
use serde_json::{Value, json};

fn model(server: &common::FakeServer, key: Option<&str>, compatible: bool) -> OpenAiModel {
    OpenAiModel::new(
        shared_client().expect("client"),
        &server.url("/v1"),
        "gpt-4o-mini",
        key.map(ApiKey::new),
        compatible,
    )
}

fn weather_tool() -> ToolDef {
    ToolDef {
        name: "get_weather".into(),
        description: "Weather forecast for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer"}}, "required": ["city"]}),
    }
}

fn requests() -> Vec<ChatRequest> {
    let mut plain = ChatRequest::new(vec![Message::system("Be brief."), Message::user("hello")]);
    plain.temperature = Some(0.2);
    plain.max_tokens = Some(100);
    plain.stop = vec!["END".into()];
    let mut tools = ChatRequest::new(vec![Message::user("weather in Paris?")]);
    tools.tools = vec![weather_tool()];
    let mut followup = tools.clone();
    followup.messages.push(Message::assistant_tool_calls(
        "",
        vec![ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        }],
    ));
    followup
        .messages
        .push(Message::tool_result("call_1", "sunny, 21C"));
    let mut schema = ChatRequest::new(vec![Message::user("verdict?")]);
    schema.response_schema = Some((
        "verdict schema".into(),
        json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
            "additionalProperties": false}),
    ));
    vec![plain, tools, followup, schema]
}

#[test]
fn the_validator_rejects_bad_bodies() {
    assert!(
        fake::validate_body(&json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
            .is_ok()
    );
    assert!(
        fake::validate_body(
            &json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]})
        )
        .is_err()
    );
    assert!(fake::validate_body(&json!({"model": "m", "messages": []})).is_err());
    assert!(
        fake::validate_body(&json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}))
            .is_err(),
        "a tool message without tool_call_id"
    );
    assert!(
        fake::validate_body(
            &json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "stop": ["a", "b", "c", "d", "e"]})
        )
        .is_err()
    );
}

#[test]
fn spec_response_examples_parse_with_the_wire_types() {
    let examples = fake::spec()["paths"]["/chat/completions"]["post"]["x-oaiMeta"]["examples"]
        .as_array()
        .expect("examples");
    let (mut whole, mut chunks) = (0, 0);
    for ex in examples {
        let text = ex["response"].as_str().unwrap_or_default();
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            let w: wire::Response = serde_json::from_value(v).expect("example parses");
            let r = ChatResponse::try_from(w).expect("example converts");
            assert!(r.usage.input_tokens > 0, "{}", ex["title"]);
            assert!(!r.content.is_empty() || !r.tool_calls.is_empty());
            whole += 1;
        } else {
            for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
                let _: wire::Chunk = serde_json::from_str(line).expect("chunk example parses");
                chunks += 1;
            }
        }
    }
    assert!(
        whole >= 3 && chunks >= 3,
        "{whole} responses, {chunks} chunks"
    );
    // The Functions example: arguments arrive as a JSON string and are parsed.
    let f = examples
        .iter()
        .find(|e| e["title"] == "Functions")
        .expect("Functions example");
    let w: wire::Response =
        serde_json::from_str(f["response"].as_str().unwrap_or_default()).expect("parse");
    let r = ChatResponse::try_from(w).expect("convert");
    assert_eq!(r.tool_calls[0].arguments, json!({"location": "Boston, MA"}));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 82,
            output_tokens: 17
        }
    );
}

#[tokio::test]
async fn every_request_shape_is_valid_and_streaming_matches() {
    let server = fake::server(Some(KEY)).await;
    let m = model(&server, Some(KEY), false);
    for req in requests() {
        let once = m.complete(&req, None).await.expect("complete");
        let deltas = Mutex::new(String::new());
        let cb = |d: &str| deltas.lock().unwrap().push_str(d);
        let streamed = m.complete(&req, Some(&cb)).await.expect("stream");
        assert_eq!(once, streamed, "streamed and whole replies differ");
        assert_eq!(*deltas.lock().unwrap(), once.content);
        assert!(once.usage.input_tokens > 10 && once.usage.output_tokens == 7);
        assert_eq!(once.model, "gpt-4o-mini");
    }
    server.assert_no_violations();
    let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(bodies[0]["max_completion_tokens"], 100);
    assert_eq!(bodies[0]["messages"][0]["role"], "system");
    assert_eq!(bodies[0]["stop"], json!(["END"]));
    assert_eq!(
        bodies[4]["messages"][1]["content"],
        Value::Null,
        "tool-call turn has null content"
    );
    assert_eq!(
        bodies[4]["messages"][1]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(
        bodies[6]["response_format"]["json_schema"]["name"],
        "verdict_schema"
    );
}

#[tokio::test]
async fn tool_calls_and_schema_replies_are_parsed() {
    let server = fake::server(Some(KEY)).await;
    let m = model(&server, Some(KEY), false);
    let reqs = requests();
    let r = m.complete(&reqs[1], None).await.expect("tools");
    assert_eq!(
        r.tool_calls,
        vec![ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Paris", "days": 3})
        }]
    );
    assert_eq!(r.content, "");
    let r = m.complete(&reqs[3], None).await.expect("schema");
    assert_eq!(
        serde_json::from_str::<Value>(&r.content).ok(),
        Some(json!({"answer": "ok"}))
    );
    server.assert_no_violations();
}

#[tokio::test]
async fn compatible_servers_need_no_key_and_get_max_tokens() {
    let server = fake::server(None).await;
    let m = model(&server, None, true);
    let mut req = ChatRequest::new(vec![Message::user("hi")]);
    req.max_tokens = Some(50);
    let r = m.complete(&req, None).await.expect("complete");
    assert_eq!(r.content, "echo: hi");
    server.assert_no_violations();
    let body = server.requests()[0].json();
    assert_eq!(body["max_tokens"], 50);
    assert!(body.get("max_completion_tokens").is_none());
}

#[tokio::test]
async fn misbehaving_server_errors_are_classified() {
    let server = fake::server(Some(KEY)).await;
    let m = model(&server, Some(KEY), false);
    let req = ChatRequest::new(vec![Message::user("hi")]);
    server.script([
        Some(common::Reply::rate_limited("3")),
        Some(common::Reply::status(503, "upstream down")),
        Some(common::Reply::status(400, r#"{"error":{"message":"bad"}}"#)),
        Some(common::Reply::malformed_json()),
        Some(common::Reply::truncated_json()),
        Some(fake::cut_stream()),
    ]);
    let e = m.complete(&req, None).await.expect_err("429");
    assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(3)));
    assert_eq!(
        m.complete(&req, None).await.expect_err("503").kind(),
        ErrorKind::Server
    );
    let e = m.complete(&req, None).await.expect_err("400");
    assert_eq!(e.kind(), ErrorKind::BadRequest);
    assert!(e.to_string().contains("bad"));
    assert_eq!(
        m.complete(&req, None).await.expect_err("malformed").kind(),
        ErrorKind::MalformedResponse
    );
    let e = m.complete(&req, None).await.expect_err("truncated");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Connection | ErrorKind::MalformedResponse
        ),
        "{e}"
    );
    let cb = |_: &str| {};
    let e = m.complete(&req, Some(&cb)).await.expect_err("cut stream");
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    // Works again afterwards.
    assert_eq!(
        m.complete(&req, None).await.expect("ok").content,
        "echo: hi"
    );
}

#[tokio::test]
async fn more_than_four_stop_sequences_are_refused_before_sending() {
    let server = fake::server(Some(KEY)).await;
    let m = model(&server, Some(KEY), false);
    let mut req = ChatRequest::new(vec![Message::user("hi")]);
    req.stop = (0..5).map(|i| i.to_string()).collect();
    assert_eq!(
        m.complete(&req, None).await.expect_err("stop").kind(),
        ErrorKind::Config
    );
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn a_whole_json_reply_to_a_stream_request_is_accepted() {
    let _ = fake::request_validator();
    let server = common::FakeServer::start(
        |r| fake::validate(r, Some(KEY)),
        |r| fake::respond(&common::unstreamed(r)),
    )
    .await;
    let m = model(&server, Some(KEY), false);
    for req in requests() {
        let whole = m.complete(&req, None).await.expect("whole");
        let deltas = Mutex::new(String::new());
        let cb = |d: &str| deltas.lock().unwrap().push_str(d);
        let streamed = m.complete(&req, Some(&cb)).await.expect("streamed");
        assert_eq!(whole, streamed);
        assert_eq!(*deltas.lock().unwrap(), whole.content);
    }
    server.assert_no_violations();
    let asked: Vec<Option<bool>> = server
        .requests()
        .iter()
        .map(|r| r.json()["stream"].as_bool())
        .collect();
    assert_eq!(asked, [None, Some(true)].repeat(4));
}

fn schema_request(text: &str, schema: Value) -> ChatRequest {
    let mut req = ChatRequest::new(vec![Message::user(text)]);
    req.response_schema = Some(("reply".into(), schema));
    req
}

#[tokio::test]
async fn structured_outputs_are_strict_where_the_schema_allows() {
    let server = fake::server(Some(KEY)).await;
    let m = model(&server, Some(KEY), false);
    // As Rondo writes a type with an optional field and a nested object.
    let schema = json!({"type": "object", "properties": {
        "answer": {"type": "string"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "score": {"type": "integer"},
        "where": {"type": "object", "properties": {"city": {"type": "string"}}, "required": []},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "kind": {"type": "string", "enum": ["x", "y"]}
    }, "required": ["answer", "tags"], "additionalProperties": false});
    m.complete(&schema_request("verdict?", schema), None)
        .await
        .expect("strict");
    server.assert_no_violations();
    let body = server.requests()[0].json();
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["strict"], true);
    let s = &format["json_schema"]["schema"];
    let mut required: Vec<&str> = s["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        ["answer", "kind", "note", "score", "tags", "where"]
    );
    assert_eq!(s["additionalProperties"], false);
    assert_eq!(
        s["properties"]["note"],
        json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
    );
    assert_eq!(s["properties"]["score"]["type"], json!(["integer", "null"]));
    assert_eq!(
        s["properties"]["where"],
        json!({"anyOf": [{"type": "object", "properties": {"city": {"type": ["string", "null"]}},
            "required": ["city"], "additionalProperties": false}, {"type": "null"}]})
    );
    assert_eq!(
        s["properties"]["kind"],
        json!({"anyOf": [{"type": "string", "enum": ["x", "y"]}, {"type": "null"}]})
    );
    assert_eq!(s["properties"]["tags"]["items"]["enum"], json!(["a", "b"]));
}

#[tokio::test]
async fn schemas_strict_mode_cannot_express_get_plain_json_mode() {
    let server = fake::server(Some(KEY)).await;
    let openai = model(&server, Some(KEY), false);
    let compatible = model(&server, Some(KEY), true);
    let map = json!({"type": "object", "additionalProperties": {"type": "integer"}});
    let any_field = json!({"type": "object", "properties": {"x": {}}, "required": ["x"],
        "additionalProperties": false});
    let not_object = json!({"type": "array", "items": {"type": "string"}});
    for schema in [map.clone(), any_field, not_object] {
        openai
            .complete(&schema_request("Answer in JSON.", schema), None)
            .await
            .expect("json mode");
    }
    // OpenAI refuses JSON mode unless a message says "JSON": the schema goes unenforced.
    openai
        .complete(&schema_request("counts?", map.clone()), None)
        .await
        .expect("unenforced");
    compatible
        .complete(&schema_request("Answer in JSON.", map.clone()), None)
        .await
        .expect("compatible");
    server.assert_no_violations();
    let formats: Vec<Value> = server
        .requests()
        .iter()
        .map(|r| r.json()["response_format"].clone())
        .collect();
    for f in &formats[..3] {
        assert_eq!(*f, json!({"type": "json_object"}));
    }
    for f in &formats[3..] {
        assert_eq!(f["type"], "json_schema");
        assert!(f["json_schema"].get("strict").is_none(), "{f}");
        assert_eq!(f["json_schema"]["schema"], map);
    }
}

/// Whether `schema` takes `null`: `type` lists it, or a member of `anyOf` does.
fn takes_null(schema: &Value) -> bool {
    let null = |s: &Value| {
        s["type"] == "null"
            || s["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("null")))
    };
    null(schema)
        || schema["anyOf"]
            .as_array()
            .is_some_and(|m| m.iter().any(null))
}

/// What strict mode asks of a schema (OpenAI's structured-outputs guide): every object
/// closed and listing every property in `required`, nesting at most 10 deep.
fn assert_strict_shape(schema: &Value, depth: usize, at: &str) {
    assert!(depth <= 10, "{at}: nested deeper than strict mode allows");
    for member in schema["anyOf"].as_array().into_iter().flatten() {
        assert_strict_shape(member, depth + 1, at);
    }
    let is = |t: &str| {
        schema["type"] == t
            || schema["type"]
                .as_array()
                .is_some_and(|ts| ts.contains(&json!(t)))
    };
    if is("object") {
        assert_eq!(schema["additionalProperties"], false, "{at}: {schema}");
        let props = schema["properties"].as_object().expect("properties");
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(required, names, "{at}: every property is required");
        for (name, p) in props {
            assert_strict_shape(p, depth + 1, &format!("{at}.{name}"));
        }
    }
    if is("array") {
        assert_strict_shape(&schema["items"], depth + 1, &format!("{at}[]"));
    }
}

/// Tools go with `strict: true` where strict mode can take their schema: optional fields
/// nullable and listed in `required`; a schema it cannot take (a map, an `any` field, an
/// object open to other fields) goes as written with `strict: false`. Every tool is checked
/// field by field against `FunctionObject` of the published contract, and a call's `null`
/// for an optional field comes back left out, as the tool's own schema has it.
#[tokio::test]
async fn tools_are_strict_where_the_schema_allows() {
    // As Rondo writes a tool's input (optional fields a union with null, not required),
    // plus an optional field another writer left not nullable.
    let search = ToolDef {
        name: "search".into(),
        description: "Search the docs".into(),
        parameters: json!({"type": "object", "properties": {
            "query": {"type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "lang": {"type": "string", "enum": ["en", "fr"]},
            "filter": {"anyOf": [{"type": "object", "properties": {
                "site": {"type": "string"}, "year": {"type": "integer"}},
                "required": ["site"], "additionalProperties": false}, {"type": "null"}]},
            "tags": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "weight": {"type": "number"}},
                "required": ["name"], "additionalProperties": false}}
        }, "required": ["query", "tags"], "additionalProperties": false}),
    };
    let not_strict = [
        json!({"type": "object", "properties": {"vars": {"type": "object",
            "additionalProperties": {"type": "string"}}}, "required": ["vars"],
            "additionalProperties": false}),
        json!({"type": "object", "properties": {"value": {}}, "required": ["value"],
            "additionalProperties": false}),
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": [],
            "additionalProperties": true}),
    ];
    let mut tools = vec![search.clone()];
    for (i, parameters) in not_strict.iter().enumerate() {
        tools.push(ToolDef {
            name: format!("loose_{i}"),
            description: String::new(),
            parameters: parameters.clone(),
        });
    }
    let args = r#"{"query": "rust", "limit": null, "lang": null, "filter": {"site": "docs.rs", "year": null}, "tags": [{"name": "a", "weight": null}]}"#;
    let server = common::FakeServer::start(
        |r| fake::validate(r, Some(KEY)),
        move |r| {
            let call = json!({"id": "call_7", "type": "function",
                "function": {"name": "search", "arguments": args}});
            let chunk = |delta: Value, finish: Value, usage: Value| {
                json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": if usage.is_null() { json!([{"index": 0, "delta": delta, "finish_reason": finish}]) } else { json!([]) },
                    "usage": usage})
            };
            let usage = json!({"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14});
            if !r.wants_stream() {
                return common::Reply::Json(200, json!({"id": "c", "object": "chat.completion",
                    "created": 1, "model": "m", "choices": [{"index": 0, "message":
                    {"role": "assistant", "content": null, "tool_calls": [call]},
                    "logprobs": null, "finish_reason": "tool_calls"}], "usage": usage}));
            }
            let mut frames = common::sse(&[
                chunk(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"index": 0, "id": "call_7", "type": "function",
                     "function": {"name": "search", "arguments": ""}}]}), Value::Null, Value::Null),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}), Value::Null, Value::Null),
                chunk(json!({}), json!("tool_calls"), Value::Null),
                chunk(json!({}), Value::Null, usage),
            ]);
            frames.push("data: [DONE]\n\n".into());
            common::Reply::Stream { content_type: "text/event-stream", frames, cut: false }
        },
    )
    .await;
    let mut req = ChatRequest::new(vec![Message::user("find rust docs")]);
    req.tools = tools;
    for compatible in [false, true] {
        let m = model(&server, Some(KEY), compatible);
        let whole = m.complete(&req, None).await.expect("whole");
        let cb = |_: &str| {};
        let streamed = m.complete(&req, Some(&cb)).await.expect("streamed");
        assert_eq!(whole, streamed);
        assert_eq!(
            whole.tool_calls[0].arguments,
            json!({"query": "rust", "filter": {"site": "docs.rs"}, "tags": [{"name": "a"}]}),
            "the nulls strict mode asked for are left out"
        );
    }
    server.assert_no_violations();

    let function_object = &fake::spec()["components"]["schemas"]["FunctionObject"];
    let known: Vec<&str> = function_object["properties"]
        .as_object()
        .expect("FunctionObject.properties")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(known.len(), 4, "the contract's fields: {known:?}");
    let tool_object = &fake::spec()["components"]["schemas"]["ChatCompletionTool"];
    for r in server.requests() {
        let body = r.json();
        let sent = body["tools"].as_array().expect("tools");
        assert_eq!(sent.len(), 4);
        for (tool, def) in sent.iter().zip(&req.tools) {
            // ChatCompletionTool: `type` (its one enum value) and `function`, both required.
            assert_eq!(tool["type"], tool_object["properties"]["type"]["enum"][0]);
            assert_eq!(tool.as_object().map(|o| o.len()), Some(2), "{tool}");
            let f = tool["function"].as_object().expect("function");
            for field in f.keys() {
                assert!(
                    known.contains(&field.as_str()),
                    "{field} is not in FunctionObject"
                );
            }
            for field in function_object["required"].as_array().expect("required") {
                assert!(f.contains_key(field.as_str().unwrap_or_default()));
            }
            // `name`: a-z, A-Z, 0-9, underscores and dashes, at most 64.
            let name = f["name"].as_str().expect("name");
            assert!(
                !name.is_empty()
                    && name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            );
            assert_eq!(name, def.name);
            // `description`: a string, left out when there is none.
            assert_eq!(
                f.get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                def.description
            );
            // `parameters`: a JSON Schema object (FunctionParameters).
            assert!(f["parameters"].is_object());
            // `strict`: a boolean, said every time.
            let strict = f["strict"].as_bool().expect("strict is a boolean");
            assert_eq!(strict, def.name == "search", "{name}");
            if strict {
                assert_strict_shape(&f["parameters"], 0, name);
                let props = &f["parameters"]["properties"];
                for optional in ["limit", "lang", "filter"] {
                    assert!(
                        takes_null(&props[optional]),
                        "{optional}: {}",
                        props[optional]
                    );
                }
                assert!(!takes_null(&props["query"]) && !takes_null(&props["tags"]));
                let filter = &props["filter"]["anyOf"][0];
                assert!(takes_null(&filter["properties"]["year"]));
                assert!(takes_null(&props["tags"]["items"]["properties"]["weight"]));
            } else {
                assert_eq!(f["parameters"], def.parameters, "sent as written");
            }
        }
    }
}
