//! The built-in scripted provider: replies keyed by role and visit, from a YAML script,
//! a `test` block, or the LLM responses recorded in another run's `events.jsonl`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rondo_provider::{
    BoxFuture, ChatModel, ChatRequest, ChatResponse, ProviderError, StreamCallback, ToolCall, Usage,
};
use serde::Deserialize;
use serde_json::Value;

use super::events::{Entry, Event, LlmResponse};
use super::rundir::JournalLine;

pub use crate::script::{RoleReplies, Script};

impl Script {
    /// Whether `role` gets a reply for some visit: its own, or the script's `default`.
    pub fn has_replies(&self, role: &str) -> bool {
        self.default.is_some()
            || self.roles.get(role).is_some_and(|r| {
                !r.sequence.is_empty()
                    || r.every.is_some()
                    || r.by_visit.values().any(|texts| !texts.is_empty())
            })
    }

    /// Whether the script says a run does not reach `role` (see [`Script::unreached`]).
    pub fn expects_unreached(&self, role: &str) -> bool {
        self.recorded || self.unreached.iter().any(|r| r == role)
    }

    /// The replies a recorded run received, so it can be re-executed offline. A reply to
    /// a request that offered tools natively replays with the calls recorded, and only
    /// those (its text is never read for calls).
    pub fn from_events(path: &Path) -> Result<Script, String> {
        let events = if path.is_dir() {
            path.join("events.jsonl")
        } else {
            path.to_path_buf()
        };
        let unreadable = |e: std::io::Error| format!("cannot read {}: {e}", events.display());
        let mut script = Script {
            recorded: true,
            ..Script::default()
        };
        for line in super::rundir::journal_lines_at(path).map_err(unreadable)? {
            // Rejected attempts too, in order, so an invalid outcome replays as one.
            let call = match line.map_err(unreadable)? {
                JournalLine::Entry(Entry {
                    event:
                        Event::LlmResponse(LlmResponse { call, .. }) | Event::InvalidOutput { call, .. },
                    ..
                }) => call,
                _ => continue,
            };
            let reply = match &call.tool_calls {
                Some(calls) => tool_call_reply(&call.raw, calls),
                None => call.raw,
            };
            script.add(&call.role, Some(call.visit), reply);
        }
        Ok(script)
    }
}

/// A reply with tool calls as a script writes it (and a run records it):
/// `{"content": "...", "tool_calls": [{"id": "...", "name": "calculator", "arguments": {...}}]}`.
pub fn tool_call_reply(content: &str, calls: &[ToolCall]) -> String {
    serde_json::json!({ "content": content, "tool_calls": calls }).to_string()
}

/// A scripted reply to a request that offers tools: the form of [`tool_call_reply`]
/// (`content` and each `id` may be left out: a call's id is then `call_<visit>_<n>`), or
/// any other text as the reply's text.
fn read_tool_call_reply(text: &str, visit: u64) -> (String, Vec<ToolCall>) {
    #[derive(Deserialize)]
    struct Call {
        #[serde(default)]
        id: Option<String>,
        name: String,
        #[serde(default)]
        arguments: Value,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Reply {
        #[serde(default)]
        content: String,
        tool_calls: Vec<Call>,
    }
    match serde_json::from_str::<Reply>(text.trim()) {
        Ok(reply) => {
            let calls = reply
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: c.id.unwrap_or_else(|| format!("call_{visit}_{}", i + 1)),
                    name: c.name,
                    arguments: if c.arguments.is_null() {
                        Value::Object(Default::default())
                    } else {
                        c.arguments
                    },
                })
                .collect();
            (reply.content, calls)
        }
        Err(_) => (text.to_string(), Vec::new()),
    }
}

/// Serves a [`Script`] through the provider interface.
pub struct ScriptedModel {
    pub script: Arc<Script>,
    /// Calls made per (run, role, visit), so a retry gets the next reply (runs of an eval
    /// share one model).
    calls: std::sync::Mutex<HashMap<(String, String, u64), usize>>,
}

impl ScriptedModel {
    pub fn new(script: Script) -> Self {
        ScriptedModel {
            script: Arc::new(script),
            calls: std::sync::Mutex::new(HashMap::new()),
        }
    }
}

impl ChatModel for ScriptedModel {
    fn complete<'a>(
        &'a self,
        req: &'a ChatRequest,
        stream: Option<StreamCallback<'a>>,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(async move {
            let role = &req.context.role;
            let visit = u64::from(req.context.visit);
            let attempt = self
                .calls
                .lock()
                .map(|mut calls| {
                    let n = calls
                        .entry((req.context.run.clone(), role.clone(), visit))
                        .or_insert(0);
                    *n += 1;
                    *n - 1
                })
                .unwrap_or(0);
            let Some(text) = self.script.reply(role, visit, attempt) else {
                return Err(ProviderError::Config(format!(
                    "the scripted provider has no reply for role `{role}` (visit {visit}); add one to the script (`replies: {{{role}: ...}}`) or the test (`reply {role} = \"...\"`)"
                )));
            };
            let (content, tool_calls) = if req.tools.is_empty() {
                (text.to_string(), Vec::new())
            } else {
                read_tool_call_reply(text, visit)
            };
            if let Some(cb) = stream {
                cb(&content);
            }
            // Roughly four characters a token, so budgets and costs behave as with a real model.
            let input: usize = req.messages.iter().map(|m| m.content.len()).sum();
            Ok(ChatResponse {
                content,
                tool_calls,
                usage: Usage {
                    input_tokens: input.div_ceil(4) as u64,
                    output_tokens: text.len().div_ceil(4) as u64,
                },
                model: "scripted".into(),
                raw: Value::Null,
                truncated: false,
            })
        })
    }
}
