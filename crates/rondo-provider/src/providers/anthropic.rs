//! Anthropic Messages API (`POST {base}/v1/messages`).
//!
//! A `response_schema` is sent as a tool whose input schema is the schema (forced with
//! `tool_choice` when there are no other tools); its input comes back as `content`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ProviderError;
use crate::http::{self, ApiKey, ReplyBudget};
use crate::types::{
    BoxFuture, ChatModel, ChatRequest, ChatResponse, Role, StreamCallback, ToolCall, Usage,
};

pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

pub mod wire {
    use super::*;

    #[derive(Debug, Serialize)]
    pub struct Request<'a> {
        pub model: &'a str,
        pub max_tokens: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub system: Option<String>,
        pub messages: Vec<WireMessage>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_choice: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub stop_sequences: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub stream: Option<bool>,
    }

    #[derive(Debug, Serialize)]
    pub struct WireMessage {
        pub role: &'static str,
        pub content: Vec<Block>,
    }

    #[derive(Debug, Serialize)]
    pub struct Tool {
        pub name: String,
        #[serde(skip_serializing_if = "String::is_empty")]
        pub description: String,
        pub input_schema: Value,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Block {
        Text {
            text: String,
        },
        ToolUse {
            id: String,
            name: String,
            #[serde(default)]
            input: Value,
        },
        ToolResult {
            tool_use_id: String,
            content: String,
            /// A refused or failed call (the API's `is_error`, said only when true).
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            is_error: bool,
        },
        Thinking {
            thinking: String,
            #[serde(default)]
            signature: String,
        },
        RedactedThinking {
            data: String,
        },
        #[serde(other)]
        Unknown,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Response {
        #[serde(default)]
        pub id: String,
        #[serde(rename = "type", default = "message_type")]
        pub kind: String,
        #[serde(default = "assistant")]
        pub role: String,
        pub content: Vec<Block>,
        #[serde(default)]
        pub model: String,
        #[serde(default)]
        pub stop_reason: Option<String>,
        #[serde(default)]
        pub stop_sequence: Option<String>,
        pub usage: WireUsage,
    }

    fn message_type() -> String {
        "message".into()
    }
    fn assistant() -> String {
        "assistant".into()
    }

    #[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
    pub struct WireUsage {
        #[serde(default)]
        pub input_tokens: u64,
        #[serde(default)]
        pub output_tokens: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cache_creation_input_tokens: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cache_read_input_tokens: Option<u64>,
    }

    /// Stream events (`event:` name repeated in `type`).
    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Event {
        MessageStart {
            message: Response,
        },
        ContentBlockStart {
            index: usize,
            content_block: Block,
        },
        ContentBlockDelta {
            index: usize,
            delta: BlockDelta,
        },
        ContentBlockStop {
            #[allow(dead_code)]
            index: usize,
        },
        MessageDelta {
            delta: MessageDelta,
            #[serde(default)]
            usage: Option<DeltaUsage>,
        },
        MessageStop,
        Ping,
        Error {
            error: ApiError,
        },
        #[serde(other)]
        Unknown,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum BlockDelta {
        TextDelta {
            text: String,
        },
        InputJsonDelta {
            partial_json: String,
        },
        ThinkingDelta {
            thinking: String,
        },
        SignatureDelta {
            signature: String,
        },
        #[serde(other)]
        Unknown,
    }

    #[derive(Debug, Deserialize)]
    pub struct MessageDelta {
        #[serde(default)]
        pub stop_reason: Option<String>,
        #[serde(default)]
        pub stop_sequence: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    pub struct DeltaUsage {
        #[serde(default)]
        pub output_tokens: Option<u64>,
        #[serde(default)]
        pub input_tokens: Option<u64>,
    }

    #[derive(Debug, Deserialize)]
    pub struct ApiError {
        #[serde(rename = "type", default)]
        pub kind: String,
        #[serde(default)]
        pub message: String,
    }
}

use wire::*;

impl From<ApiError> for ProviderError {
    fn from(e: ApiError) -> Self {
        let status = match e.kind.as_str() {
            "overloaded_error" => 529,
            "rate_limit_error" => 429,
            "authentication_error" => 401,
            "permission_error" => 403,
            "invalid_request_error" => 400,
            "not_found_error" => 404,
            "request_too_large" => 413,
            "timeout_error" => 504,
            _ => 500,
        };
        ProviderError::from_status(status, None, format!("{}: {}", e.kind, e.message))
    }
}

/// Converts the response; `schema_tool` names the tool that carries a `response_schema`.
struct Converted<'a>(Response, Option<&'a str>);

impl TryFrom<Converted<'_>> for ChatResponse {
    type Error = ProviderError;

    fn try_from(Converted(r, schema_tool): Converted<'_>) -> Result<Self, ProviderError> {
        let raw = serde_json::to_value(&r)
            .map_err(|e| ProviderError::MalformedResponse(e.to_string()))?;
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for block in r.content {
            match block {
                Block::Text { text } => content.push_str(&text),
                Block::ToolUse { name, input, .. } if Some(name.as_str()) == schema_tool => {
                    content = input.to_string();
                }
                Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments: input,
                }),
                _ => {}
            }
        }
        Ok(ChatResponse {
            content,
            tool_calls,
            usage: usage_of(&r.usage),
            model: r.model,
            raw,
            truncated: false,
        })
    }
}

/// Cache tokens count as input.
fn usage_of(u: &WireUsage) -> Usage {
    Usage {
        input_tokens: u.input_tokens
            + u.cache_creation_input_tokens.unwrap_or(0)
            + u.cache_read_input_tokens.unwrap_or(0),
        output_tokens: u.output_tokens,
    }
}

/// A stream's usage so far, reported for an attempt the stream may not finish.
fn note_usage(u: &WireUsage) {
    let u = usage_of(u);
    http::note_usage(Some(u.input_tokens), Some(u.output_tokens));
}

pub struct AnthropicModel {
    client: http::HttpClient,
    url: String,
    model: String,
    key: Option<ApiKey>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl std::fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key)
            .finish()
    }
}

fn schema_tool_name(name: &str) -> String {
    let n: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if n.is_empty() { "respond".into() } else { n }
}

impl AnthropicModel {
    pub fn new(
        client: impl Into<http::HttpClient>,
        base_url: &str,
        model: impl Into<String>,
        key: Option<ApiKey>,
    ) -> Self {
        AnthropicModel {
            client: client.into(),
            url: format!("{}/v1/messages", base_url.trim_end_matches('/')),
            model: model.into(),
            key,
            temperature: None,
            max_tokens: None,
        }
    }

    pub fn with_defaults(mut self, temperature: Option<f32>, max_tokens: Option<u32>) -> Self {
        self.temperature = temperature;
        self.max_tokens = max_tokens;
        self
    }

    pub fn wire_request<'a>(
        &'a self,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<(Request<'a>, Option<String>), ProviderError> {
        let (system, messages) = wire_messages(req)?;
        let mut tools: Vec<Tool> = req
            .tools
            .iter()
            .map(|t| Tool {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.parameters.clone(),
            })
            .collect();
        let mut tool_choice = None;
        let schema_tool = req.response_schema.as_ref().map(|(name, schema)| {
            let name = schema_tool_name(name);
            if tools.is_empty() {
                tool_choice = Some(serde_json::json!({"type": "tool", "name": name}));
            }
            tools.push(Tool {
                name: name.clone(),
                description: "Give the final answer as this tool's input.".into(),
                input_schema: schema.clone(),
            });
            name
        });
        Ok((
            Request {
                model: &self.model,
                max_tokens: req
                    .max_tokens
                    .or(self.max_tokens)
                    .unwrap_or(DEFAULT_MAX_TOKENS),
                system: (!system.is_empty()).then(|| system.join("\n\n")),
                messages,
                tools,
                tool_choice,
                temperature: req.temperature.or(self.temperature),
                stop_sequences: req.stop.clone(),
                stream: stream.then_some(true),
            },
            schema_tool,
        ))
    }

    fn post(&self) -> Result<reqwest::RequestBuilder, ProviderError> {
        let b = self
            .client
            .get()?
            .post(&self.url)
            .header("anthropic-version", API_VERSION);
        Ok(match &self.key {
            Some(k) => b.header("x-api-key", k.expose()),
            None => b,
        })
    }

    async fn complete_once(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let (body, schema_tool) = self.wire_request(req, false)?;
        let resp = http::post_json(self.post()?, &body, self.key.as_ref()).await?;
        self.read_whole(resp, req, schema_tool.as_deref()).await
    }

    async fn read_whole(
        &self,
        resp: reqwest::Response,
        req: &ChatRequest,
        schema_tool: Option<&str>,
    ) -> Result<ChatResponse, ProviderError> {
        let budget = ReplyBudget::new(req.max_reply);
        match http::read_json::<Response>(resp, self.key.as_ref(), &budget).await? {
            Some((wire, _)) => ChatResponse::try_from(Converted(wire, schema_tool)),
            None => Ok(ChatResponse::truncated(&self.model)),
        }
    }

    async fn complete_stream(
        &self,
        req: &ChatRequest,
        cb: StreamCallback<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let (body, schema_tool) = self.wire_request(req, true)?;
        let resp = http::post_json(self.post()?, &body, self.key.as_ref()).await?;
        if http::is_whole_json(&resp) {
            let out = self.read_whole(resp, req, schema_tool.as_deref()).await?;
            if schema_tool.is_none() {
                http::emit(Some(cb), &out.content);
            }
            return Ok(out);
        }
        let mut streamed = Streamed::default();
        let budget = ReplyBudget::new(req.max_reply);
        let truncated = http::for_each_event(resp, &budget, |ev| {
            if streamed.done {
                return Ok(());
            }
            streamed.event(http::decode_frame(&ev.data)?, cb, &budget)
        })
        .await?;
        match (streamed.done || truncated, streamed.message) {
            (true, Some(m)) => {
                let mut out = ChatResponse::try_from(Converted(m, schema_tool.as_deref()))?;
                out.truncated = truncated;
                Ok(out)
            }
            (true, None) => Ok(ChatResponse::truncated(&self.model)),
            _ => Err(ProviderError::Connection(
                "stream ended before message_stop".into(),
            )),
        }
    }
}

/// The system prompts, and the conversation as Anthropic's turns: tool calls as
/// `tool_use` blocks, their results as `tool_result` blocks in the user turn after them.
fn wire_messages(req: &ChatRequest) -> Result<(Vec<&str>, Vec<WireMessage>), ProviderError> {
    let mut system: Vec<&str> = Vec::new();
    let mut messages: Vec<WireMessage> = Vec::new();
    for m in &req.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                system.push(&m.content);
                continue;
            }
            Role::User => (
                "user",
                vec![Block::Text {
                    text: m.content.clone(),
                }],
            ),
            Role::Assistant => {
                let mut b = Vec::new();
                if !m.content.is_empty() {
                    b.push(Block::Text {
                        text: m.content.clone(),
                    });
                }
                for c in m.tool_calls.iter().flatten() {
                    b.push(Block::ToolUse {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        input: object_arguments(&c.arguments),
                    });
                }
                ("assistant", b)
            }
            Role::Tool => {
                let id = m.tool_call_id.clone().ok_or_else(|| {
                    ProviderError::Config("a tool message needs tool_call_id".into())
                })?;
                (
                    "user",
                    vec![Block::ToolResult {
                        tool_use_id: id,
                        content: m.content.clone(),
                        is_error: m.is_error,
                    }],
                )
            }
        };
        if blocks.is_empty() {
            continue;
        }
        // Tool results must sit together in the user turn after the tool calls.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    Ok((system, messages))
}

/// A streamed message as its events build it.
#[derive(Default)]
struct Streamed {
    message: Option<Response>,
    /// The input of each tool-use block as its JSON arrives, by block.
    partial_json: Vec<String>,
    /// `message_stop` came.
    done: bool,
}

impl Streamed {
    /// Applies one event of the stream, showing text to `cb` and counting it in `budget`.
    fn event(
        &mut self,
        event: Event,
        cb: StreamCallback<'_>,
        budget: &ReplyBudget,
    ) -> Result<(), ProviderError> {
        if let Event::MessageStart { message: m } = event {
            note_usage(&m.usage);
            self.message = Some(m);
            return Ok(());
        }
        if let Event::Error { error } = event {
            return Err(error.into());
        }
        let msg = self.message.as_mut().ok_or_else(|| {
            ProviderError::MalformedResponse("stream event before message_start".into())
        })?;
        match event {
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                if index != msg.content.len() {
                    return Err(ProviderError::MalformedResponse(
                        "content blocks out of order".into(),
                    ));
                }
                if let Block::Text { text } = &content_block {
                    http::emit(Some(cb), text);
                    budget.add(text.len());
                }
                msg.content.push(content_block);
                self.partial_json.push(String::new());
            }
            Event::ContentBlockDelta { index, delta } => {
                add_delta(msg, &mut self.partial_json, index, delta, cb, budget)?
            }
            Event::ContentBlockStop { index } => {
                if let (Some(Block::ToolUse { input, .. }), Some(p)) =
                    (msg.content.get_mut(index), self.partial_json.get(index))
                    && !p.trim().is_empty()
                {
                    *input = serde_json::from_str(p).map_err(|e| {
                        if http::nests_deeper_than(p.as_bytes(), http::MAX_JSON_DEPTH) {
                            return http::too_deep();
                        }
                        ProviderError::MalformedResponse(format!("tool input is not JSON: {e}"))
                    })?;
                }
            }
            Event::MessageDelta { delta, usage } => {
                msg.stop_reason = delta.stop_reason.or(msg.stop_reason.take());
                msg.stop_sequence = delta.stop_sequence.or(msg.stop_sequence.take());
                if let Some(u) = usage {
                    if let Some(o) = u.output_tokens {
                        msg.usage.output_tokens = o;
                    }
                    if let Some(i) = u.input_tokens {
                        msg.usage.input_tokens = i;
                    }
                    note_usage(&msg.usage);
                }
            }
            Event::MessageStop => self.done = true,
            _ => {}
        }
        Ok(())
    }
}

/// Adds a content block's delta to block `index` of `msg`.
fn add_delta(
    msg: &mut Response,
    partial_json: &mut [String],
    index: usize,
    delta: BlockDelta,
    cb: StreamCallback<'_>,
    budget: &ReplyBudget,
) -> Result<(), ProviderError> {
    let block = msg
        .content
        .get_mut(index)
        .ok_or_else(|| ProviderError::MalformedResponse("delta for unknown block".into()))?;
    match (block, delta) {
        (Block::Text { text }, BlockDelta::TextDelta { text: d }) => {
            http::emit(Some(cb), &d);
            budget.add(d.len());
            text.push_str(&d);
        }
        (Block::ToolUse { .. }, BlockDelta::InputJsonDelta { partial_json: d }) => {
            budget.add(d.len());
            if let Some(p) = partial_json.get_mut(index) {
                p.push_str(&d);
            }
        }
        (Block::Thinking { thinking, .. }, BlockDelta::ThinkingDelta { thinking: d }) => {
            budget.add(d.len());
            thinking.push_str(&d)
        }
        (Block::Thinking { signature, .. }, BlockDelta::SignatureDelta { signature: d }) => {
            budget.add(d.len());
            signature.push_str(&d)
        }
        _ => {}
    }
    Ok(())
}

/// Anthropic wants `input` as an object; arguments kept as text are parsed when possible.
fn object_arguments(v: &Value) -> Value {
    match v {
        Value::Object(_) => v.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(o @ Value::Object(_)) => o,
            _ => serde_json::json!({ "value": s }),
        },
        other => serde_json::json!({ "value": other }),
    }
}

impl ChatModel for AnthropicModel {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
        stream: Option<StreamCallback<'a>>,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            match stream {
                Some(cb) => self.complete_stream(req, cb).await,
                None => self.complete_once(req).await,
            }
        })
    }
}
