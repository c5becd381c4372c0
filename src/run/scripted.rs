//! The built-in scripted provider: replies keyed by role and visit, from a YAML script,
//! a `test` block, or the LLM responses recorded in another run's `events.jsonl`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use rondo_provider::{
    BoxFuture, ChatModel, ChatRequest, ChatResponse, ProviderError, StreamCallback, ToolCall, Usage,
};
use serde::Deserialize;
use serde_json::Value;

use super::events::{Entry, Event, LlmResponse};
use super::rundir::JournalLine;

#[derive(Debug, Clone, Default)]
pub struct RoleReplies {
    /// Replies for visit 1, 2, ...; the last one repeats.
    pub sequence: Vec<String>,
    /// Replies for one visit, one per attempt (a retry after an invalid reply gets the next).
    pub by_visit: BTreeMap<u64, Vec<String>>,
    pub every: Option<String>,
}

/// Scripted replies for a whole run.
#[derive(Debug, Clone, Default)]
pub struct Script {
    pub roles: HashMap<String, RoleReplies>,
    pub default: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum YamlReplies {
    One(String),
    Sequence(Vec<String>),
    ByVisit(BTreeMap<String, YamlAttempts>),
}

/// The reply of one visit, or one per attempt (a retry after an invalid reply gets the next).
#[derive(Deserialize)]
#[serde(untagged)]
enum YamlAttempts {
    One(String),
    Each(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlScript {
    #[serde(default)]
    replies: BTreeMap<String, YamlReplies>,
    #[serde(default)]
    default: Option<String>,
}

impl Script {
    pub fn reply(&self, role: &str, visit: u64, attempt: usize) -> Option<&str> {
        if let Some(r) = self.roles.get(role) {
            if let Some(texts) = r.by_visit.get(&visit) {
                return texts.get(attempt).or(texts.last()).map(String::as_str);
            }
            if !r.sequence.is_empty() {
                let i = (visit.max(1) - 1) as usize;
                return r.sequence.get(i).or(r.sequence.last()).map(String::as_str);
            }
            if let Some(text) = &r.every {
                return Some(text);
            }
        }
        self.default.as_deref()
    }

    pub fn add(&mut self, role: &str, visit: Option<u64>, text: String) {
        let entry = self.roles.entry(role.to_string()).or_default();
        match visit {
            Some(v) => entry.by_visit.entry(v).or_default().push(text),
            None => entry.every = Some(text),
        }
    }

    /// A YAML script: `replies: {role: "text" | [visit1, visit2, ...] | {"2": "text" | [attempt1,
    /// attempt2, ...], default: "text"}}`.
    pub fn from_yaml(path: &Path) -> Result<Script, String> {
        let text = crate::source::read_regular(path, crate::source::MAX_SOURCE_BYTES)
            .map_err(|e| format!("cannot read script {}: {e}", path.display()))?;
        let parsed: YamlScript = rondo_config::yaml::from_str(&text)
            .map_err(|e| format!("script {}: {e}", path.display()))?;
        let mut script = Script {
            default: parsed.default,
            ..Script::default()
        };
        for (role, replies) in parsed.replies {
            let entry = script.roles.entry(role.clone()).or_default();
            match replies {
                YamlReplies::One(t) => entry.every = Some(t),
                YamlReplies::Sequence(s) => entry.sequence = s,
                YamlReplies::ByVisit(map) => {
                    for (k, v) in map {
                        let v = match v {
                            YamlAttempts::One(t) => vec![t],
                            YamlAttempts::Each(ts) => ts,
                        };
                        if k == "default" {
                            entry.every = v.into_iter().next_back();
                        } else {
                            let visit = k.parse::<u64>().map_err(|_| {
                                format!(
                                    "script {}: role `{role}`: `{k}` is not a visit number",
                                    path.display()
                                )
                            })?;
                            entry.by_visit.entry(visit).or_default().extend(v);
                        }
                    }
                }
            }
        }
        Ok(script)
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
        let mut script = Script::default();
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
