//! OpenAI Chat Completions (`POST {base}/chat/completions`), also used for any
//! OpenAI-compatible server (vLLM, llama.cpp, LM Studio, Ollama's `/v1`...).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ProviderError;
use crate::http::{self, ApiKey, ReplyBudget};
use crate::types::{
    BoxFuture, ChatModel, ChatRequest, ChatResponse, Message, Role, StreamCallback, ToolCall,
    ToolDef, Usage,
};

/// Wire types, as in the published OpenAPI description.
pub mod wire {
    use super::*;

    #[derive(Debug, Serialize)]
    pub struct Request<'a> {
        pub model: &'a str,
        pub messages: Vec<WireMessage>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_format: Option<ResponseFormat>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        /// OpenAI proper: `max_tokens` is deprecated there and refused by reasoning models.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub max_completion_tokens: Option<u32>,
        /// Compatible servers mostly still read only `max_tokens`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub max_tokens: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub stop: Option<Vec<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub stream: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub stream_options: Option<StreamOptions>,
    }

    #[derive(Debug, Serialize)]
    pub struct StreamOptions {
        pub include_usage: bool,
    }

    #[derive(Debug, Serialize)]
    pub struct WireMessage {
        pub role: &'static str,
        /// `null` only for an assistant turn that just calls tools.
        pub content: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_calls: Option<Vec<WireToolCall>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_call_id: Option<String>,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    pub struct WireToolCall {
        pub id: String,
        #[serde(rename = "type", default = "function_type")]
        pub kind: String,
        pub function: FunctionCall,
    }

    pub fn function_type() -> String {
        "function".to_string()
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    pub struct FunctionCall {
        pub name: String,
        /// A JSON document encoded as a string.
        pub arguments: String,
    }

    #[derive(Debug, Serialize)]
    pub struct Tool {
        #[serde(rename = "type")]
        pub kind: &'static str,
        pub function: FunctionDef,
    }

    #[derive(Debug, Serialize)]
    pub struct FunctionDef {
        pub name: String,
        #[serde(skip_serializing_if = "String::is_empty")]
        pub description: String,
        pub parameters: Value,
        /// `true` when `parameters` fits strict mode (and has been made to, see
        /// [`super::strict_schema`]), else `false`: always said, never left to a default.
        pub strict: bool,
    }

    #[derive(Debug, Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum ResponseFormat {
        JsonSchema {
            json_schema: JsonSchemaFormat,
        },
        /// Plain JSON mode: any JSON object, no schema.
        JsonObject,
    }

    #[derive(Debug, Serialize)]
    pub struct JsonSchemaFormat {
        pub name: String,
        pub schema: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub strict: Option<bool>,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    pub struct Response {
        #[serde(default)]
        pub id: String,
        #[serde(default = "completion_object")]
        pub object: String,
        #[serde(default)]
        pub created: u64,
        #[serde(default)]
        pub model: String,
        pub choices: Vec<Choice>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub usage: Option<WireUsage>,
    }

    fn completion_object() -> String {
        "chat.completion".to_string()
    }

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    pub struct Choice {
        #[serde(default)]
        pub index: u32,
        pub message: ResponseMessage,
        #[serde(default)]
        pub finish_reason: Option<String>,
    }

    #[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
    pub struct ResponseMessage {
        #[serde(default = "assistant_role")]
        pub role: String,
        #[serde(default)]
        pub content: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub refusal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tool_calls: Option<Vec<WireToolCall>>,
    }

    pub fn assistant_role() -> String {
        "assistant".to_string()
    }

    #[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
    pub struct WireUsage {
        #[serde(default)]
        pub prompt_tokens: u64,
        #[serde(default)]
        pub completion_tokens: u64,
        #[serde(default)]
        pub total_tokens: u64,
    }

    /// One `chat.completion.chunk` of a stream.
    #[derive(Debug, Deserialize)]
    pub struct Chunk {
        #[serde(default)]
        pub id: String,
        #[serde(default)]
        pub created: u64,
        #[serde(default)]
        pub model: String,
        #[serde(default)]
        pub choices: Vec<ChunkChoice>,
        #[serde(default)]
        pub usage: Option<WireUsage>,
    }

    #[derive(Debug, Deserialize)]
    pub struct ChunkChoice {
        #[serde(default)]
        pub index: u32,
        #[serde(default)]
        pub delta: Delta,
        #[serde(default)]
        pub finish_reason: Option<String>,
    }

    #[derive(Debug, Default, Deserialize)]
    pub struct Delta {
        #[serde(default)]
        pub content: Option<String>,
        #[serde(default)]
        pub refusal: Option<String>,
        #[serde(default)]
        pub tool_calls: Option<Vec<ToolCallDelta>>,
    }

    #[derive(Debug, Deserialize)]
    pub struct ToolCallDelta {
        #[serde(default)]
        pub index: usize,
        #[serde(default)]
        pub id: Option<String>,
        #[serde(default)]
        pub function: Option<FunctionDelta>,
    }

    #[derive(Debug, Deserialize)]
    pub struct FunctionDelta {
        #[serde(default)]
        pub name: Option<String>,
        #[serde(default)]
        pub arguments: Option<String>,
    }
}

use wire::*;

impl TryFrom<&Message> for WireMessage {
    type Error = ProviderError;

    fn try_from(m: &Message) -> Result<Self, ProviderError> {
        let role = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let tool_calls = match (&m.role, &m.tool_calls) {
            (Role::Assistant, Some(calls)) if !calls.is_empty() => Some(
                calls
                    .iter()
                    .map(|c| WireToolCall {
                        id: c.id.clone(),
                        kind: function_type(),
                        function: FunctionCall {
                            name: c.name.clone(),
                            arguments: arguments_text(&c.arguments),
                        },
                    })
                    .collect(),
            ),
            _ => None,
        };
        let tool_call_id = if m.role == Role::Tool {
            Some(m.tool_call_id.clone().ok_or_else(|| {
                ProviderError::Config("a tool message needs tool_call_id".to_string())
            })?)
        } else {
            None
        };
        let content = if tool_calls.is_some() && m.content.is_empty() {
            None
        } else {
            Some(m.content.clone())
        };
        Ok(WireMessage {
            role,
            content,
            tool_calls,
            tool_call_id,
        })
    }
}

/// A tool with `strict: true` when strict mode can take its schema (optional fields then
/// listed in `required` and nullable), else as written with `strict: false`.
fn wire_tool(t: &ToolDef) -> Tool {
    let (parameters, strict) = match strict_schema(&t.parameters) {
        Some(strict) => (strict, true),
        None => (t.parameters.clone(), false),
    };
    Tool {
        kind: "function",
        function: FunctionDef {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters,
            strict,
        },
    }
}

/// The arguments of a call to a tool sent strict, back in the tool's own schema: a `null`
/// strict mode made the model write for a field the schema leaves optional stands for
/// "left out", and is left out.
fn unstrict_arguments(tools: &[ToolDef], calls: &mut [ToolCall]) {
    for call in calls {
        let Some(tool) = tools.iter().find(|t| t.name == call.name) else {
            continue;
        };
        if strict_schema(&tool.parameters).is_some() {
            drop_left_out(&tool.parameters, &mut call.arguments, 0);
        }
    }
}

fn drop_left_out(schema: &Value, value: &mut Value, depth: usize) {
    if depth > STRICT_MAX_DEPTH {
        return;
    }
    // An optional object or list is a union with null: its other member describes it.
    let member = |key: &str| {
        schema
            .get("anyOf")
            .and_then(Value::as_array)
            .and_then(|ms| ms.iter().find(|m| m.get(key).is_some()))
    };
    match value {
        Value::Object(fields) => {
            let Some(schema) = schema
                .get("properties")
                .map(|_| schema)
                .or(member("properties"))
            else {
                return;
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            fields.retain(|name, v| !v.is_null() || required.contains(&name.as_str()));
            for (name, v) in fields.iter_mut() {
                if let Some(s) = schema["properties"].get(name) {
                    drop_left_out(s, v, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema
                .get("items")
                .or(member("items").and_then(|m| m.get("items")))
            {
                for item in items {
                    drop_left_out(s, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Arguments go over the wire as a JSON string; a string value is already that text.
pub(crate) fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// `response_format.json_schema.name` must match `^[a-zA-Z0-9_-]{1,64}$`.
fn schema_name(name: &str) -> String {
    let cleaned: String = name
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
    if cleaned.is_empty() {
        "response".to_string()
    } else {
        cleaned
    }
}

/// The keywords OpenAI's strict mode accepts (its structured-outputs guide); a schema using
/// any other is sent unenforced.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "enum",
    "const",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// OpenAI's nesting limit for a strict schema.
const STRICT_MAX_DEPTH: usize = 10;

/// `schema` as OpenAI's strict mode requires it, or `None` when it cannot be: the root an
/// object, every object closed (`additionalProperties: false`) with every property
/// required (an optional one becomes a union with null), every schema typed (no `{}`),
/// only the keywords strict mode knows.
pub fn strict_schema(schema: &Value) -> Option<Value> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let mut out = schema.clone();
    strict_node(&mut out, 0).then_some(out)
}

fn strict_node(v: &mut Value, depth: usize) -> bool {
    if depth > STRICT_MAX_DEPTH {
        return false;
    }
    let Value::Object(map) = v else {
        return false;
    };
    if map.keys().any(|k| !STRICT_KEYWORDS.contains(&k.as_str())) {
        return false;
    }
    if let Some(members) = map.get_mut("anyOf") {
        return match members {
            Value::Array(ms) if !ms.is_empty() => ms.iter_mut().all(|m| strict_node(m, depth + 1)),
            _ => false,
        };
    }
    let types: Vec<String> = match map.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        Some(_) => return false,
        None if map.contains_key("enum") || map.contains_key("const") => Vec::new(),
        None => return false,
    };
    if types.iter().any(|t| t == "object") {
        if !matches!(
            map.get("additionalProperties"),
            None | Some(Value::Bool(false))
        ) {
            return false;
        }
        map.insert("additionalProperties".into(), Value::Bool(false));
        let required: Vec<String> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|n| n.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let Some(Value::Object(props)) = map.get_mut("properties") else {
            return false;
        };
        let mut names = Vec::new();
        for (name, prop) in props.iter_mut() {
            if !strict_node(prop, depth + 1) {
                return false;
            }
            if !required.contains(name) {
                make_nullable(prop);
            }
            names.push(Value::String(name.clone()));
        }
        map.insert("required".into(), Value::Array(names));
    }
    if types.iter().any(|t| t == "array") {
        match map.get_mut("items") {
            Some(items) => strict_node(items, depth + 1),
            None => false,
        }
    } else {
        true
    }
}

/// Let a property strict mode makes required hold null, which stands for "left out".
fn make_nullable(prop: &mut Value) {
    let null = Value::String("null".into());
    let accepts_null = |p: &Value| match p.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.contains(&null),
        _ => false,
    };
    if accepts_null(prop)
        || prop
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|ms| ms.iter().any(accepts_null))
    {
        return;
    }
    // A scalar type takes `null` in its list; an enum, an object or an array goes into a
    // union with null, as OpenAI's guide writes them.
    let constrained = prop.get("enum").is_some() || prop.get("const").is_some();
    match prop.get_mut("type") {
        Some(Value::String(t)) if !constrained && t != "object" && t != "array" => {
            let t = Value::String(std::mem::take(t));
            prop["type"] = Value::Array(vec![t, null]);
        }
        Some(Value::Array(ts))
            if !constrained && !ts.iter().any(|t| t == "object" || t == "array") =>
        {
            ts.push(null)
        }
        _ => {
            let inner = std::mem::take(prop);
            *prop = serde_json::json!({"anyOf": [inner, {"type": "null"}]});
        }
    }
}

impl TryFrom<Response> for ChatResponse {
    type Error = ProviderError;

    fn try_from(r: Response) -> Result<Self, ProviderError> {
        let raw = serde_json::to_value(&r)
            .map_err(|e| ProviderError::MalformedResponse(e.to_string()))?;
        let choice =
            r.choices.into_iter().next().ok_or_else(|| {
                ProviderError::MalformedResponse("response has no choices".into())
            })?;
        let msg = choice.message;
        let tool_calls = msg
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| ToolCall {
                id: c.id,
                name: c.function.name,
                arguments: parse_arguments(&c.function.arguments),
            })
            .collect();
        let usage = r.usage.unwrap_or_default();
        Ok(ChatResponse {
            content: msg
                .content
                .filter(|c| !c.is_empty())
                .or(msg.refusal)
                .unwrap_or_default(),
            tool_calls,
            usage: Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            },
            model: r.model,
            raw,
            truncated: false,
        })
    }
}

/// A Chat Completions endpoint.
pub struct OpenAiModel {
    client: http::HttpClient,
    url: String,
    model: String,
    key: Option<ApiKey>,
    compatible: bool,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key)
            .finish()
    }
}

impl OpenAiModel {
    /// `compatible` selects `max_tokens` (what most compatible servers read) over
    /// `max_completion_tokens`.
    pub fn new(
        client: impl Into<http::HttpClient>,
        base_url: &str,
        model: impl Into<String>,
        key: Option<ApiKey>,
        compatible: bool,
    ) -> Self {
        OpenAiModel {
            client: client.into(),
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model: model.into(),
            key,
            compatible,
            temperature: None,
            max_tokens: None,
        }
    }

    /// Defaults used when a request does not set them.
    pub fn with_defaults(mut self, temperature: Option<f32>, max_tokens: Option<u32>) -> Self {
        self.temperature = temperature;
        self.max_tokens = max_tokens;
        self
    }

    pub fn wire_request<'a>(
        &'a self,
        req: &'a ChatRequest,
        stream: bool,
    ) -> Result<Request<'a>, ProviderError> {
        if !self.compatible && req.stop.len() > 4 {
            return Err(ProviderError::Config(
                "OpenAI accepts at most 4 stop sequences".to_string(),
            ));
        }
        let messages = req
            .messages
            .iter()
            .map(WireMessage::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let max = req.max_tokens.or(self.max_tokens);
        Ok(Request {
            model: &self.model,
            messages,
            tools: req.tools.iter().map(wire_tool).collect(),
            response_format: req
                .response_schema
                .as_ref()
                .map(|(name, schema)| self.response_format(name, schema, req)),
            temperature: req.temperature.or(self.temperature),
            max_completion_tokens: if self.compatible { None } else { max },
            max_tokens: if self.compatible { max } else { None },
            stop: (!req.stop.is_empty()).then(|| req.stop.clone()),
            stream: stream.then_some(true),
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        })
    }

    /// Structured outputs with `strict: true` when the schema fits OpenAI's subset. When it
    /// does not, OpenAI itself gets plain JSON mode (which it refuses unless a message says
    /// "JSON"; then the schema goes unenforced), a compatible server the schema unenforced
    /// by OpenAI's rules (most enforce any schema by guided decoding).
    fn response_format(&self, name: &str, schema: &Value, req: &ChatRequest) -> ResponseFormat {
        let schema_format = |schema: Value, strict: Option<bool>| ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: schema_name(name),
                schema,
                strict,
            },
        };
        if let Some(strict) = strict_schema(schema) {
            return schema_format(strict, Some(true));
        }
        let says_json = req
            .messages
            .iter()
            .any(|m| m.content.to_ascii_lowercase().contains("json"));
        if !self.compatible && says_json {
            ResponseFormat::JsonObject
        } else {
            schema_format(schema.clone(), None)
        }
    }

    fn post(&self) -> Result<reqwest::RequestBuilder, ProviderError> {
        let b = self.client.get()?.post(&self.url);
        Ok(match &self.key {
            Some(k) => b.bearer_auth(k.expose()),
            None => b,
        })
    }

    async fn complete_once(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let body = self.wire_request(req, false)?;
        let resp = http::post_json(self.post()?, &body, self.key.as_ref()).await?;
        self.read_whole(resp, req).await
    }

    async fn read_whole(
        &self,
        resp: reqwest::Response,
        req: &ChatRequest,
    ) -> Result<ChatResponse, ProviderError> {
        let budget = ReplyBudget::new(req.max_reply);
        match http::read_json::<Response>(resp, self.key.as_ref(), &budget).await? {
            Some((wire, _)) => {
                let mut out = ChatResponse::try_from(wire)?;
                unstrict_arguments(&req.tools, &mut out.tool_calls);
                Ok(out)
            }
            None => Ok(ChatResponse::truncated(&self.model)),
        }
    }

    async fn complete_stream(
        &self,
        req: &ChatRequest,
        cb: StreamCallback<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = self.wire_request(req, true)?;
        let resp = http::post_json(self.post()?, &body, self.key.as_ref()).await?;
        if http::is_whole_json(&resp) {
            let out = self.read_whole(resp, req).await?;
            http::emit(Some(cb), &out.content);
            return Ok(out);
        }
        let mut acc = StreamAssembler::default();
        let budget = ReplyBudget::new(req.max_reply);
        let truncated = http::for_each_event(resp, &budget, |ev| {
            if acc.done {
                return Ok(());
            }
            acc.event(&ev.data, cb, &budget)
        })
        .await?;
        if !acc.done && !truncated {
            return Err(ProviderError::Connection(
                "stream ended before [DONE]".to_string(),
            ));
        }
        let mut out = ChatResponse::try_from(acc.finish())?;
        out.truncated = truncated;
        unstrict_arguments(&req.tools, &mut out.tool_calls);
        Ok(out)
    }
}

/// Rebuilds the non-streamed response from the chunks.
#[derive(Default)]
struct StreamAssembler {
    id: String,
    created: u64,
    model: String,
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Vec<WireToolCall>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
    done: bool,
}

impl StreamAssembler {
    fn event(
        &mut self,
        data: &str,
        cb: StreamCallback<'_>,
        budget: &ReplyBudget,
    ) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Chunk = http::decode_frame(data)?;
        if self.id.is_empty() {
            self.id = chunk.id;
            self.created = chunk.created;
        }
        if !chunk.model.is_empty() {
            self.model = chunk.model;
        }
        if let Some(u) = chunk.usage {
            http::note_usage(Some(u.prompt_tokens), Some(u.completion_tokens));
            self.usage = chunk.usage;
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(text) = choice.delta.content {
                http::emit(Some(cb), &text);
                budget.add(text.len());
                self.content.get_or_insert_with(String::new).push_str(&text);
            }
            if let Some(text) = choice.delta.refusal {
                budget.add(text.len());
                self.refusal.get_or_insert_with(String::new).push_str(&text);
            }
            for d in choice.delta.tool_calls.unwrap_or_default() {
                // Deltas carry the call's index; id and name come once, arguments in pieces.
                if d.index > 1024 {
                    return Err(ProviderError::MalformedResponse(
                        "tool call index out of range".into(),
                    ));
                }
                while self.tool_calls.len() <= d.index {
                    self.tool_calls.push(WireToolCall {
                        id: String::new(),
                        kind: function_type(),
                        function: FunctionCall {
                            name: String::new(),
                            arguments: String::new(),
                        },
                    });
                }
                let call = &mut self.tool_calls[d.index];
                if let Some(id) = d.id {
                    call.id = id;
                }
                if let Some(f) = d.function {
                    if let Some(n) = f.name {
                        budget.add(n.len());
                        call.function.name.push_str(&n);
                    }
                    if let Some(a) = f.arguments {
                        budget.add(a.len());
                        call.function.arguments.push_str(&a);
                    }
                }
            }
            if choice.finish_reason.is_some() {
                self.finish_reason = choice.finish_reason;
            }
        }
        Ok(())
    }

    fn finish(self) -> Response {
        // The first delta often carries `content: ""`; a whole reply that only calls tools
        // has `content: null`.
        let content = match self.content {
            Some(c) if c.is_empty() && !self.tool_calls.is_empty() => None,
            None if self.tool_calls.is_empty() => Some(String::new()),
            other => other,
        };
        Response {
            id: self.id,
            object: "chat.completion".to_string(),
            created: self.created,
            model: self.model,
            choices: vec![Choice {
                index: 0,
                message: ResponseMessage {
                    role: assistant_role(),
                    content,
                    refusal: self.refusal,
                    tool_calls: (!self.tool_calls.is_empty()).then_some(self.tool_calls),
                },
                finish_reason: self.finish_reason,
            }],
            usage: self.usage,
        }
    }
}

impl ChatModel for OpenAiModel {
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
