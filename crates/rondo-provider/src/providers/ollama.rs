//! Ollama's native chat API (`POST {base}/api/chat`); streams NDJSON.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ProviderError;
use crate::http::{self, ApiKey, ReplyBudget};
use crate::types::{
    BoxFuture, ChatModel, ChatRequest, ChatResponse, Role, StreamCallback, ToolCall, Usage,
};

pub mod wire {
    use super::*;

    #[derive(Debug, Serialize)]
    pub struct Request<'a> {
        pub model: &'a str,
        pub messages: Vec<WireMessage>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool>,
        /// `"json"` or a JSON Schema.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub format: Option<Value>,
        #[serde(skip_serializing_if = "Options::is_empty")]
        pub options: Options,
        pub stream: bool,
    }

    #[derive(Debug, Default, Serialize)]
    pub struct Options {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub num_predict: Option<u32>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub stop: Vec<String>,
    }

    impl Options {
        pub fn is_empty(&self) -> bool {
            self.temperature.is_none() && self.num_predict.is_none() && self.stop.is_empty()
        }
    }

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct WireMessage {
        pub role: String,
        #[serde(default)]
        pub content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub thinking: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tool_calls: Option<Vec<WireToolCall>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub tool_name: Option<String>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct WireToolCall {
        pub function: Function,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Function {
        pub name: String,
        #[serde(default)]
        pub arguments: Value,
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
        pub description: String,
        pub parameters: Value,
    }

    /// A whole reply, or one NDJSON line of a stream.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Response {
        #[serde(default)]
        pub model: String,
        #[serde(default)]
        pub created_at: String,
        #[serde(default)]
        pub message: WireMessage,
        #[serde(default)]
        pub done: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub done_reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub total_duration: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub prompt_eval_count: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub eval_count: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub error: Option<String>,
    }
}

use wire::*;

impl TryFrom<Response> for ChatResponse {
    type Error = ProviderError;

    fn try_from(r: Response) -> Result<Self, ProviderError> {
        if let Some(e) = r.error {
            return Err(ProviderError::Server {
                status: 200,
                message: e,
            });
        }
        let raw = serde_json::to_value(&r)
            .map_err(|e| ProviderError::MalformedResponse(e.to_string()))?;
        let tool_calls = r
            .message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                // Ollama gives calls no id; results are matched back by name.
                id: format!("call_{i}_{}", c.function.name),
                name: c.function.name,
                arguments: c.function.arguments,
            })
            .collect();
        Ok(ChatResponse {
            content: r.message.content,
            tool_calls,
            usage: Usage {
                input_tokens: r.prompt_eval_count.unwrap_or(0),
                output_tokens: r.eval_count.unwrap_or(0),
            },
            model: r.model,
            raw,
            truncated: false,
        })
    }
}

pub struct OllamaModel {
    client: http::HttpClient,
    url: String,
    model: String,
    /// For Ollama behind an authenticating proxy; sent as a bearer token.
    key: Option<ApiKey>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl std::fmt::Debug for OllamaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OllamaModel")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key)
            .finish()
    }
}

impl OllamaModel {
    pub fn new(
        client: impl Into<http::HttpClient>,
        base_url: &str,
        model: impl Into<String>,
        key: Option<ApiKey>,
    ) -> Self {
        OllamaModel {
            client: client.into(),
            url: format!("{}/api/chat", base_url.trim_end_matches('/')),
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
    ) -> Result<Request<'a>, ProviderError> {
        let mut names: HashMap<&str, &str> = HashMap::new();
        let mut messages = Vec::with_capacity(req.messages.len());
        for m in &req.messages {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            let tool_calls = m
                .tool_calls
                .as_ref()
                .filter(|c| !c.is_empty())
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| {
                            names.insert(&c.id, &c.name);
                            WireToolCall {
                                function: Function {
                                    name: c.name.clone(),
                                    arguments: c.arguments.clone(),
                                },
                            }
                        })
                        .collect()
                });
            let tool_name = m
                .tool_call_id
                .as_deref()
                .filter(|_| m.role == Role::Tool)
                .and_then(|id| names.get(id))
                .map(|n| n.to_string());
            messages.push(WireMessage {
                role: role.to_string(),
                content: m.content.clone(),
                thinking: None,
                tool_calls,
                tool_name,
            });
        }
        Ok(Request {
            model: &self.model,
            messages,
            tools: req
                .tools
                .iter()
                .map(|t| Tool {
                    kind: "function",
                    function: FunctionDef {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        parameters: t.parameters.clone(),
                    },
                })
                .collect(),
            format: req.response_schema.as_ref().map(|(_, s)| s.clone()),
            options: Options {
                temperature: req.temperature.or(self.temperature),
                num_predict: req.max_tokens.or(self.max_tokens),
                stop: req.stop.clone(),
            },
            stream,
        })
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
            Some((wire, _)) => ChatResponse::try_from(wire),
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
        let mut content = String::new();
        let mut thinking: Option<String> = None;
        let mut calls: Vec<WireToolCall> = Vec::new();
        let mut last: Option<Response> = None;
        let mut first: Option<Response> = None;
        let budget = ReplyBudget::new(req.max_reply);
        let truncated = http::for_each_line(resp, &budget, |line| {
            if line.trim().is_empty() || last.is_some() {
                return Ok(());
            }
            let chunk: Response = http::decode_frame(line)?;
            if let Some(e) = chunk.error {
                return Err(ProviderError::Server {
                    status: 200,
                    message: e,
                });
            }
            http::emit(Some(cb), &chunk.message.content);
            budget.add(chunk.message.content.len());
            content.push_str(&chunk.message.content);
            if let Some(t) = &chunk.message.thinking {
                budget.add(t.len());
                thinking.get_or_insert_with(String::new).push_str(t);
            }
            for call in chunk.message.tool_calls.iter().flatten() {
                budget.add(call.function.arguments.to_string().len());
                calls.push(call.clone());
            }
            if chunk.done {
                last = Some(chunk);
            } else if first.is_none() {
                first = Some(chunk);
            }
            Ok(())
        })
        .await?;
        let Some(mut r) = last.or(truncated.then_some(first).flatten()) else {
            if truncated {
                return Ok(ChatResponse::truncated(&self.model));
            }
            return Err(ProviderError::Connection(
                "stream ended before the done line".into(),
            ));
        };
        r.message.content = content;
        r.message.thinking = thinking;
        r.message.tool_calls = (!calls.is_empty()).then_some(calls);
        let mut out = ChatResponse::try_from(r)?;
        out.truncated = truncated;
        Ok(out)
    }
}

impl ChatModel for OllamaModel {
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
