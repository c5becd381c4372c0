//! The provider-neutral chat API: what the interpreter sends and gets back.

use std::future::Future;
use std::ops::{Add, AddAssign};
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ProviderError;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message. `tool_call_id` is set on `Tool` messages (the result of a call);
/// `tool_calls` on `Assistant` messages that asked for calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// On a `Tool` message: the call was refused or failed, and `content` says why
    /// (Anthropic's `is_error`, Gemini's `error` key).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl Message {
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_call_id: None,
            tool_calls: None,
            is_error: false,
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content)
    }
    /// An assistant turn that requested tool calls.
    pub fn assistant_tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Message {
            tool_calls: Some(calls),
            ..Self::plain(Role::Assistant, content)
        }
    }
    /// The result of the tool call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }
    /// The tool call `tool_call_id` was refused or failed; `content` says why.
    pub fn tool_error(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            is_error: true,
            ..Self::tool_result(tool_call_id, content)
        }
    }
}

/// A tool the model may call; `parameters` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub parameters: Value,
}

/// A tool call requested by the model. `arguments` is parsed JSON; when the model wrote
/// arguments that are not valid JSON they are kept as a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// Which workflow role and visit made the call (for records and budgets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallContext {
    pub role: String,
    pub visit: u32,
    /// Which run made the call, when runs share one pool (`rondo eval`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
}

/// A provider-neutral chat request. `temperature` and `max_tokens` override the profile's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    /// `(name, JSON Schema)`: ask for a JSON reply that matches the schema.
    #[serde(default)]
    pub response_schema: Option<(String, Value)>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub context: CallContext,
    /// The longest reply wanted, in bytes of text: the provider stops reading a reply
    /// (and its HTTP body) soon after it passes this, and marks it
    /// [`ChatResponse::truncated`]. `None` reads every reply whole.
    #[serde(default)]
    pub max_reply: Option<usize>,
}

impl ChatRequest {
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            ..Default::default()
        }
    }
}

/// Token counts as reported by the provider.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

impl Add for Usage {
    type Output = Usage;
    fn add(self, o: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens + o.input_tokens,
            output_tokens: self.output_tokens + o.output_tokens,
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        *self = *self + o;
    }
}

/// The normalized reply. `raw` is the provider's response body (for streamed calls, the
/// body assembled from the stream, in the same shape as the non-streamed one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub model: String,
    pub raw: Value,
    /// Reading stopped at the request's `max_reply`: `content` is the reply's beginning
    /// (empty when the body was not streamed and so could not be decoded), tool calls and
    /// usage what had arrived.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl ChatResponse {
    /// A reply whose body passed the cap before it could be decoded.
    pub fn truncated(model: &str) -> Self {
        ChatResponse {
            content: String::new(),
            tool_calls: Vec::new(),
            usage: Usage::default(),
            model: model.to_string(),
            raw: Value::Null,
            truncated: true,
        }
    }
}

/// Receives each text delta of a streamed reply.
pub type StreamCallback<'a> = &'a (dyn Fn(&str) + Send + Sync);

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One chat backend. Implemented per wire protocol here, and by the interpreter for its
/// scripted provider. With `stream` set, the implementation streams and calls it with each
/// text delta; the returned response is the same as without streaming.
pub trait ChatModel: Send + Sync {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
        stream: Option<StreamCallback<'a>>,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>>;
}
