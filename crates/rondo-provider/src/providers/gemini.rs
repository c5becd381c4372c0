//! Gemini `generateContent` / `streamGenerateContent?alt=sse` (key in `x-goog-api-key`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ProviderError;
use crate::http::{self, ApiKey, ReplyBudget};
use crate::types::{
    BoxFuture, ChatModel, ChatRequest, ChatResponse, Role, StreamCallback, ToolCall, Usage,
};

pub mod wire {
    use super::*;

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Request {
        pub contents: Vec<Content>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub system_instruction: Option<Content>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub generation_config: Option<GenerationConfig>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Content {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub role: Option<String>,
        #[serde(default)]
        pub parts: Vec<Part>,
    }

    /// A part holds exactly one of these fields.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Part {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub function_call: Option<FunctionCall>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub function_response: Option<FunctionResponse>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub thought: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub thought_signature: Option<String>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct FunctionCall {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub id: Option<String>,
        pub name: String,
        #[serde(default)]
        pub args: Value,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct FunctionResponse {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub id: Option<String>,
        pub name: String,
        pub response: Value,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Tool {
        pub function_declarations: Vec<FunctionDeclaration>,
    }

    #[derive(Debug, Serialize)]
    pub struct FunctionDeclaration {
        pub name: String,
        pub description: String,
        pub parameters: Value,
    }

    #[derive(Debug, Default, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct GenerationConfig {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub max_output_tokens: Option<u32>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub stop_sequences: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_mime_type: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_schema: Option<Value>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Response {
        #[serde(default)]
        pub candidates: Vec<Candidate>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub usage_metadata: Option<UsageMetadata>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub model_version: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub response_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub prompt_feedback: Option<Value>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Candidate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub content: Option<Content>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub finish_reason: Option<String>,
        #[serde(default)]
        pub index: u32,
    }

    #[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct UsageMetadata {
        #[serde(default)]
        pub prompt_token_count: u64,
        #[serde(default)]
        pub candidates_token_count: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub thoughts_token_count: Option<u64>,
        #[serde(default)]
        pub total_token_count: u64,
    }
}

use wire::*;

impl TryFrom<Response> for ChatResponse {
    type Error = ProviderError;

    fn try_from(r: Response) -> Result<Self, ProviderError> {
        let raw = serde_json::to_value(&r)
            .map_err(|e| ProviderError::MalformedResponse(e.to_string()))?;
        let Some(cand) = r.candidates.into_iter().next() else {
            let why = r
                .prompt_feedback
                .map(|f| f.to_string())
                .unwrap_or_else(|| "no candidates".into());
            return Err(ProviderError::BadRequest {
                status: 200,
                message: format!("no candidate returned: {why}"),
            });
        };
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for part in cand.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(t) = part.text.filter(|_| part.thought != Some(true)) {
                content.push_str(&t);
            }
            if let Some(fc) = part.function_call {
                tool_calls.push(ToolCall {
                    // Older models give calls no id; results are matched back by name.
                    id: fc
                        .id
                        .unwrap_or_else(|| format!("call_{}_{}", tool_calls.len(), fc.name)),
                    name: fc.name,
                    arguments: fc.args,
                });
            }
        }
        let u = r.usage_metadata.unwrap_or_default();
        Ok(ChatResponse {
            content,
            tool_calls,
            usage: Usage {
                input_tokens: u.prompt_token_count,
                output_tokens: u.candidates_token_count + u.thoughts_token_count.unwrap_or(0),
            },
            model: r.model_version.unwrap_or_default(),
            raw,
            truncated: false,
        })
    }
}

/// The fields of Gemini's `Schema` (an OpenAPI 3.0 subset), as the v1beta API publishes
/// it (`google.ai.generativelanguage.v1beta.Schema`); others are not sent.
const SCHEMA_FIELDS: &[&str] = &[
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

/// A JSON Schema as Gemini's `Schema`: only its published fields; a union with null
/// (`type: [T, "null"]`, or `anyOf` with a `{"type": "null"}` member, as Rondo writes an
/// optional field) becomes `nullable: true`, the field `Schema` has for it; a string
/// `const` becomes a one-value `enum`.
pub fn to_gemini_schema(v: &Value) -> Value {
    let Value::Object(map) = v else {
        return v.clone();
    };
    let is_null = |s: &Value| s.get("type").and_then(Value::as_str) == Some("null");
    let mut out = Map::new();
    let mut nullable = false;
    for (k, val) in map {
        match (k.as_str(), val) {
            ("type", Value::Array(types)) => {
                nullable |= types.iter().any(|t| t.as_str() == Some("null"));
                if let Some(t) = types.iter().find(|t| t.as_str() != Some("null")) {
                    out.insert("type".into(), t.clone());
                }
            }
            ("anyOf", Value::Array(members)) => {
                nullable |= members.iter().any(is_null);
                let rest: Vec<Value> = members
                    .iter()
                    .filter(|m| !is_null(m))
                    .map(to_gemini_schema)
                    .collect();
                match <[Value; 1]>::try_from(rest) {
                    // A single type and null: that type, nullable.
                    Ok([Value::Object(only)]) => {
                        for (k, v) in only {
                            if k == "nullable" {
                                nullable |= v == Value::Bool(true);
                            } else {
                                out.entry(k).or_insert(v);
                            }
                        }
                    }
                    Ok([other]) => {
                        out.insert("anyOf".into(), Value::Array(vec![other]));
                    }
                    Err(rest) if rest.is_empty() => {
                        out.insert("type".into(), Value::String("null".into()));
                    }
                    Err(rest) => {
                        out.insert("anyOf".into(), Value::Array(rest));
                    }
                }
            }
            ("const", Value::String(_)) => {
                out.insert("enum".into(), Value::Array(vec![val.clone()]));
            }
            ("properties", Value::Object(props)) => {
                let props = props
                    .iter()
                    .map(|(name, s)| (name.clone(), to_gemini_schema(s)))
                    .collect();
                out.insert(k.clone(), Value::Object(props));
            }
            ("items", _) => {
                out.insert(k.clone(), to_gemini_schema(val));
            }
            ("nullable", Value::Bool(b)) => nullable |= *b,
            (k, _) if SCHEMA_FIELDS.contains(&k) => {
                out.insert(k.to_string(), val.clone());
            }
            _ => {}
        }
    }
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    Value::Object(out)
}

pub struct GeminiModel {
    client: http::HttpClient,
    base: String,
    model: String,
    key: Option<ApiKey>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl std::fmt::Debug for GeminiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeminiModel")
            .field("base", &self.base)
            .field("model", &self.model)
            .field("key", &self.key)
            .finish()
    }
}

impl GeminiModel {
    pub fn new(
        client: impl Into<http::HttpClient>,
        base_url: &str,
        model: impl Into<String>,
        key: Option<ApiKey>,
    ) -> Self {
        let model: String = model.into();
        GeminiModel {
            client: client.into(),
            base: base_url.trim_end_matches('/').to_string(),
            model: model.trim_start_matches("models/").to_string(),
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

    pub fn wire_request(&self, req: &ChatRequest) -> Result<Request, ProviderError> {
        let (system, contents) = wire_contents(req)?;
        let tools = if req.tools.is_empty() {
            Vec::new()
        } else {
            vec![Tool {
                function_declarations: req
                    .tools
                    .iter()
                    .map(|t| FunctionDeclaration {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        parameters: to_gemini_schema(&t.parameters),
                    })
                    .collect(),
            }]
        };
        let config = GenerationConfig {
            temperature: req.temperature.or(self.temperature),
            max_output_tokens: req.max_tokens.or(self.max_tokens),
            stop_sequences: req.stop.clone(),
            response_mime_type: req.response_schema.as_ref().map(|_| "application/json"),
            response_schema: req
                .response_schema
                .as_ref()
                .map(|(_, s)| to_gemini_schema(s)),
        };
        let has_config = config.temperature.is_some()
            || config.max_output_tokens.is_some()
            || !config.stop_sequences.is_empty()
            || config.response_schema.is_some();
        Ok(Request {
            contents,
            system_instruction: (!system.is_empty()).then_some(Content {
                role: None,
                parts: system,
            }),
            tools,
            generation_config: has_config.then_some(config),
        })
    }

    fn post(&self, method: &str) -> Result<reqwest::RequestBuilder, ProviderError> {
        let url = format!("{}/models/{}:{method}", self.base, self.model);
        let b = self.client.get()?.post(url);
        Ok(match &self.key {
            Some(k) => b.header("x-goog-api-key", k.expose()),
            None => b,
        })
    }

    async fn complete_once(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let body = self.wire_request(req)?;
        let resp = http::post_json(self.post("generateContent")?, &body, self.key.as_ref()).await?;
        let budget = ReplyBudget::new(req.max_reply);
        let Some((wire, _)) = http::read_json::<Response>(resp, self.key.as_ref(), &budget).await?
        else {
            return Ok(ChatResponse::truncated(&self.model));
        };
        let mut out = ChatResponse::try_from(wire)?;
        if out.model.is_empty() {
            out.model = self.model.clone();
        }
        Ok(out)
    }

    async fn complete_stream(
        &self,
        req: &ChatRequest,
        cb: StreamCallback<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = self.wire_request(req)?;
        let resp = http::post_json(
            self.post("streamGenerateContent?alt=sse")?,
            &body,
            self.key.as_ref(),
        )
        .await?;
        let mut acc = Assembler::default();
        let budget = ReplyBudget::new(req.max_reply);
        let truncated = if http::is_whole_json(&resp) {
            // One response, or (when `alt=sse` is ignored) the array of all chunks.
            match http::read_json::<Value>(resp, self.key.as_ref(), &budget).await? {
                None => true,
                Some((value, _)) => {
                    let chunks = match value {
                        Value::Array(items) => items,
                        one => vec![one],
                    };
                    for chunk in chunks {
                        let r = Response::deserialize(&chunk).map_err(|e| {
                            ProviderError::MalformedResponse(format!("unexpected body shape: {e}"))
                        })?;
                        acc.chunk(r, cb, &budget)?;
                    }
                    budget.exceeded()
                }
            }
        } else {
            http::for_each_event(resp, &budget, |ev| {
                acc.chunk(http::decode_frame(&ev.data)?, cb, &budget)
            })
            .await?
        };
        // Gemini has no end-of-stream marker: the last chunk carries the finish reason.
        if acc.finish_reason.is_none() && !truncated {
            return Err(ProviderError::Connection(
                "stream ended before a finishReason".into(),
            ));
        }
        let mut out = ChatResponse::try_from(acc.finish())?;
        out.truncated = truncated;
        if out.model.is_empty() {
            out.model = self.model.clone();
        }
        Ok(out)
    }
}

/// Rebuilds one response from streamed chunks: text joined into one part (as in a
/// non-streamed reply), function calls kept in order, the last usage kept.
#[derive(Default)]
struct Assembler {
    text: Option<String>,
    calls: Vec<Part>,
    finish_reason: Option<String>,
    usage: Option<UsageMetadata>,
    model_version: Option<String>,
    response_id: Option<String>,
    prompt_feedback: Option<Value>,
}

impl Assembler {
    fn chunk(
        &mut self,
        r: Response,
        cb: StreamCallback<'_>,
        budget: &ReplyBudget,
    ) -> Result<(), ProviderError> {
        if let Some(u) = r.usage_metadata {
            let output = u.candidates_token_count + u.thoughts_token_count.unwrap_or(0);
            http::note_usage(Some(u.prompt_token_count), Some(output));
            self.usage = r.usage_metadata;
        }
        self.model_version = r.model_version.or(self.model_version.take());
        self.response_id = r.response_id.or(self.response_id.take());
        if r.prompt_feedback.is_some() {
            self.prompt_feedback = r.prompt_feedback;
            if r.candidates.is_empty() {
                self.finish_reason = Some("BLOCKED".into());
            }
        }
        for cand in r.candidates.into_iter().filter(|c| c.index == 0) {
            for part in cand.content.map(|c| c.parts).unwrap_or_default() {
                match part.text {
                    Some(t) if t.is_empty() => {}
                    Some(t) if part.thought != Some(true) => {
                        http::emit(Some(cb), &t);
                        budget.add(t.len());
                        self.text.get_or_insert_with(String::new).push_str(&t);
                    }
                    _ if part.function_call.is_some() => {
                        let call = part.function_call.as_ref();
                        budget.add(call.map_or(0, |c| c.name.len() + c.args.to_string().len()));
                        self.calls.push(part)
                    }
                    _ => {}
                }
            }
            if cand.finish_reason.is_some() {
                self.finish_reason = cand.finish_reason;
            }
        }
        Ok(())
    }

    fn finish(self) -> Response {
        let mut parts = Vec::new();
        if let Some(t) = self.text {
            parts.push(Part {
                text: Some(t),
                ..Part::default()
            });
        }
        parts.extend(self.calls);
        let blocked = self.prompt_feedback.is_some() && parts.is_empty();
        Response {
            candidates: if blocked {
                Vec::new()
            } else {
                vec![Candidate {
                    content: Some(Content {
                        role: Some("model".into()),
                        parts,
                    }),
                    finish_reason: self.finish_reason,
                    index: 0,
                }]
            },
            usage_metadata: self.usage,
            model_version: self.model_version,
            response_id: self.response_id,
            prompt_feedback: self.prompt_feedback,
        }
    }
}

impl ChatModel for GeminiModel {
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

/// The system instruction's parts, and the conversation as Gemini's contents: tool calls
/// as `functionCall` parts, each result as a `functionResponse` named after its call.
fn wire_contents(req: &ChatRequest) -> Result<(Vec<Part>, Vec<Content>), ProviderError> {
    let mut system = Vec::new();
    let mut contents: Vec<Content> = Vec::new();
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    for m in &req.messages {
        let (role, parts) = match m.role {
            Role::System => {
                system.push(Part {
                    text: Some(m.content.clone()),
                    ..Part::default()
                });
                continue;
            }
            Role::User => (
                "user",
                vec![Part {
                    text: Some(m.content.clone()),
                    ..Part::default()
                }],
            ),
            Role::Assistant => {
                let mut parts = Vec::new();
                if !m.content.is_empty() {
                    parts.push(Part {
                        text: Some(m.content.clone()),
                        ..Part::default()
                    });
                }
                for c in m.tool_calls.iter().flatten() {
                    call_names.insert(&c.id, &c.name);
                    parts.push(Part {
                        function_call: Some(FunctionCall {
                            id: None,
                            name: c.name.clone(),
                            args: c.arguments.clone(),
                        }),
                        ..Part::default()
                    });
                }
                ("model", parts)
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let name = call_names.get(id).copied().ok_or_else(|| {
                    ProviderError::Config(format!(
                        "tool result `{id}` does not answer a tool call of an earlier message"
                    ))
                })?;
                let result = serde_json::from_str::<Value>(&m.content)
                    .unwrap_or_else(|_| Value::String(m.content.clone()));
                // The keys the API documents for `response`: `output`, or `error` for
                // a call that failed.
                let key = if m.is_error { "error" } else { "output" };
                (
                    "user",
                    vec![Part {
                        function_response: Some(FunctionResponse {
                            id: None,
                            name: name.to_string(),
                            response: serde_json::json!({ key: result }),
                        }),
                        ..Part::default()
                    }],
                )
            }
        };
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some(last) if last.role.as_deref() == Some(role) => last.parts.extend(parts),
            _ => contents.push(Content {
                role: Some(role.to_string()),
                parts,
            }),
        }
    }
    Ok((system, contents))
}
