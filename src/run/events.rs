//! What a run records in `events.jsonl`, one type per event. The field names are the
//! journal's: replay, `--replay-from` and resume read runs recorded before this type, so a
//! field added since the first journals has a default (their lines lack it).

use std::path::PathBuf;

use rondo_provider::{AttemptRecord, ToolCall, Usage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::output::Parsed;
use crate::compile::types::Coerced;

/// One line of `events.jsonl` (besides its `seq` and `ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStart {
        workflow: String,
        run_dir: PathBuf,
        #[serde(default)]
        workspace: PathBuf,
    },
    RunResumed {
        step: u64,
    },
    /// Memory earlier runs of the same `--workspace` left (`durable`): what was loaded,
    /// and what was not and why.
    DurableMemory {
        file: PathBuf,
        loaded: Vec<String>,
        skipped: Vec<DurableSkip>,
    },
    /// The end of a run (its `finally` role, its last artifacts) failed; the run keeps
    /// the exit it reached.
    EndFailed {
        exit: String,
        error: String,
    },
    /// What the kernel gave the local tools of an environment (`docs/tools.md`), and what
    /// is missing.
    ToolConfinement {
        environment: String,
        protections: rondo_env::Protections,
        missing: Vec<String>,
    },
    /// Containers of crashed runs, removed before this one starts its own.
    StaleContainersRemoved {
        containers: Vec<String>,
    },
    RoleStart {
        role: String,
        kind: String,
        visit: u64,
        step: u64,
    },
    /// The accepted reply of an llm role.
    LlmResponse(LlmResponse),
    ParsedOutput {
        role: String,
        visit: u64,
        how: Parsed,
        #[serde(default)]
        coercions: Vec<Coerced>,
        output: Value,
    },
    /// A reply that did not parse or fit the declared type; the call is asked again.
    InvalidOutput {
        #[serde(flatten)]
        call: LlmCall,
        error: String,
    },
    /// Rejected attempts past the ones recorded in full, counted.
    InvalidOutputOmitted {
        role: String,
        visit: u64,
        attempts: u64,
    },
    /// No valid reply after every attempt: the role's output is the invalid record.
    InvalidOutcome {
        role: String,
        visit: u64,
        attempts: u64,
        error: String,
    },
    LlmFailed {
        role: String,
        visit: u64,
        profile: String,
        error: String,
        attempts: Vec<AttemptRecord>,
    },
    ToolCall {
        role: String,
        visit: u64,
        result: Value,
    },
    Memory {
        role: String,
        memory: String,
        op: String,
        note: String,
    },
    Artifact {
        role: String,
        file: String,
        bytes: usize,
        append: bool,
        /// The folder a `path` input names, when the file is written there and not in the
        /// workspace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        folder: Option<std::path::PathBuf>,
        /// The name as rendered, when making it a safe path changed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sanitized_from: Option<String>,
    },
    /// An artifact whose name or file the workspace refused; the run goes on.
    #[serde(alias = "artifact_refused")]
    ArtifactRejected {
        role: String,
        file: String,
        reason: String,
    },
    /// A tool log whose file the workspace refused; the tool runs without it.
    LogRejected {
        role: String,
        file: String,
        reason: String,
    },
    Route {
        from: String,
        to: Vec<String>,
        condition: String,
        route: usize,
        backtrack: bool,
    },
    RoleEnd {
        role: String,
        visit: u64,
        step: u64,
        /// The run's totals after the step: what a live run has spent so far.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        totals: Option<Totals>,
    },
    Exit {
        exit: String,
        code: i32,
        reason: String,
        step: u64,
        totals: Totals,
    },
    /// What a step changed in the state (see `RunDir::checkpoint`).
    Checkpoint {
        delta: serde_json::Map<String, Value>,
    },
    /// The length of a file before its first append since the snapshot (see
    /// `RunDir::append_opened`).
    AppendOpened {
        file: String,
        len: u64,
    },
}

/// A durable memory not carried over; `memory` is null when the whole file was unread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DurableSkip {
    pub memory: Option<String>,
    pub reason: String,
}

/// One call of an llm role: what was sent, what came back, what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LlmCall {
    pub role: String,
    pub visit: u64,
    pub attempt: u64,
    pub profile: String,
    pub model: String,
    pub prompt: String,
    /// The reply's text, cut to `max_reply`. (Before `tool_calls`, a native reply with
    /// calls was recorded here as `{"content", "tool_calls"}`, the scripted form.)
    pub raw: String,
    /// The calls of a reply to a request that offered tools natively (none: the request
    /// offered none). Absent when the reply was longer than `max_reply`: `raw` then holds
    /// the reply cut, calls included, in the scripted form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    pub usage: Usage,
    pub cost: f64,
    /// The provider attempts behind it (retries, fallbacks).
    pub attempts: Vec<AttemptRecord>,
}

/// A call whose reply was accepted, and how it was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LlmResponse {
    #[serde(flatten)]
    pub call: LlmCall,
    pub parsed: Parsed,
    #[serde(default)]
    pub coercions: Vec<Coerced>,
}

/// A journal line: its position (1 the first line), when it was written, and its event.
/// Serialized, it is the line as the journal holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Entry {
    pub seq: u64,
    /// RFC 3339, UTC, milliseconds.
    pub ts: String,
    #[serde(flatten)]
    pub event: Event,
}

impl Event {
    /// Every kind this version reads (see [`Event::kind`]).
    pub const KINDS: &[&str] = &[
        "run_start",
        "run_resumed",
        "durable_memory",
        "end_failed",
        "tool_confinement",
        "stale_containers_removed",
        "role_start",
        "llm_response",
        "parsed_output",
        "invalid_output",
        "invalid_output_omitted",
        "invalid_outcome",
        "llm_failed",
        "tool_call",
        "memory",
        "artifact",
        "artifact_rejected",
        "log_rejected",
        "route",
        "role_end",
        "exit",
        "checkpoint",
        "append_opened",
    ];

    /// The event of a journal line, when it is one this version knows.
    pub fn from_line(line: &Value) -> Option<Event> {
        Event::deserialize(line).ok()
    }

    /// The name a journal line gives it (its `event` field).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStart { .. } => "run_start",
            Event::RunResumed { .. } => "run_resumed",
            Event::DurableMemory { .. } => "durable_memory",
            Event::EndFailed { .. } => "end_failed",
            Event::ToolConfinement { .. } => "tool_confinement",
            Event::StaleContainersRemoved { .. } => "stale_containers_removed",
            Event::RoleStart { .. } => "role_start",
            Event::LlmResponse(_) => "llm_response",
            Event::ParsedOutput { .. } => "parsed_output",
            Event::InvalidOutput { .. } => "invalid_output",
            Event::InvalidOutputOmitted { .. } => "invalid_output_omitted",
            Event::InvalidOutcome { .. } => "invalid_outcome",
            Event::LlmFailed { .. } => "llm_failed",
            Event::ToolCall { .. } => "tool_call",
            Event::Memory { .. } => "memory",
            Event::Artifact { .. } => "artifact",
            Event::ArtifactRejected { .. } => "artifact_rejected",
            Event::LogRejected { .. } => "log_rejected",
            Event::Route { .. } => "route",
            Event::RoleEnd { .. } => "role_end",
            Event::Exit { .. } => "exit",
            Event::Checkpoint { .. } => "checkpoint",
            Event::AppendOpened { .. } => "append_opened",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the journal has always written them read back as their events, and
    /// write back with the same fields in the same order.
    #[test]
    fn journal_lines_read_back_as_typed_events_and_write_the_same_fields() {
        let lines = [
            r#"{"event":"llm_response","role":"r","visit":1,"attempt":2,"profile":"scripted","model":"m","prompt":"p","raw":"{}","usage":{"input_tokens":3,"output_tokens":4},"cost":0.5,"attempts":[],"parsed":"strict","coercions":[{"flag":"missing_optional","path":"$.x"}]}"#,
            r#"{"event":"invalid_output","role":"r","visit":1,"attempt":1,"profile":"scripted","model":"m","prompt":"p","raw":"no","usage":{"input_tokens":0,"output_tokens":0},"cost":0.0,"attempts":[],"error":"not JSON"}"#,
            r#"{"event":"route","from":"a","to":["b","c"],"condition":"otherwise","route":3,"backtrack":false}"#,
            r#"{"event":"artifact","role":"a","file":"out.txt","bytes":5,"append":true,"sanitized_from":"../out.txt"}"#,
            r#"{"event":"artifact","role":"a","file":"out.txt","bytes":5,"append":false}"#,
            r#"{"event":"checkpoint","delta":{"step":4,"+path":["a"]}}"#,
            r#"{"event":"exit","exit":"done","code":0,"reason":"reached","step":2,"totals":{"llm_calls":1,"input_tokens":2,"output_tokens":3,"cost":0.25,"tool_calls":0}}"#,
            r#"{"event":"memory","role":"a","memory":"notes","op":"append","note":""}"#,
            r#"{"event":"durable_memory","file":"ws/.rondo/memory/keep.json","loaded":["notes"],"skipped":[{"memory":"board","reason":"damaged"},{"memory":null,"reason":"unread"}]}"#,
            r#"{"event":"end_failed","exit":"limit","error":"role `record`: boom"}"#,
        ];
        for line in lines {
            let value: Value = serde_json::from_str(line).unwrap();
            let event = Event::from_line(&value).unwrap_or_else(|| panic!("unread: {line}"));
            assert_eq!(serde_json::to_string(&event).unwrap(), line);
        }
        let Some(Event::LlmResponse(r)) =
            Event::from_line(&serde_json::from_str(lines[0]).unwrap())
        else {
            panic!("not an llm_response");
        };
        assert_eq!((r.call.attempt, r.call.usage.output_tokens), (2, 4));
    }

    /// Lines as the first journals wrote them (before a field was added, or under a name
    /// since changed) read as this version's events.
    #[test]
    fn lines_of_older_journals_read_as_events() {
        let lines = [
            r#"{"event":"llm_response","role":"r","visit":1,"attempt":1,"profile":"scripted","model":"m","prompt":"p","raw":"hi","usage":{"input_tokens":1,"output_tokens":1},"cost":0.0,"attempts":[],"parsed":"text"}"#,
            r#"{"event":"parsed_output","role":"r","visit":1,"how":"text","output":"hi"}"#,
            r#"{"event":"artifact_refused","role":"a","file":"../x","reason":"outside"}"#,
            r#"{"event":"run_start","workflow":"w","run_dir":"runs/x"}"#,
            r#"{"event":"role_end","role":"r","visit":1,"step":1}"#,
        ];
        for line in lines {
            let value: Value = serde_json::from_str(line).unwrap();
            assert!(Event::from_line(&value).is_some(), "unread: {line}");
        }
        let value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(
            Event::from_line(&value).unwrap().kind(),
            "artifact_rejected"
        );
    }

    /// `kind` names each event as its line does, and `KINDS` is every kind the journal's
    /// schema has.
    #[test]
    fn kinds_are_the_journal_lines_names() {
        let schema = schemars::schema_for!(Event).to_value();
        let mut tags: Vec<&str> = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["properties"]["event"]["const"].as_str().unwrap())
            .collect();
        tags.sort();
        let mut kinds = Event::KINDS.to_vec();
        kinds.sort();
        assert_eq!(tags, kinds);
        let samples = [
            r#"{"event":"route","from":"a","to":["b"],"condition":"","route":0,"backtrack":false}"#,
            r#"{"event":"checkpoint","delta":{}}"#,
            r#"{"event":"append_opened","file":"f","len":0}"#,
            r#"{"event":"role_end","role":"r","visit":1,"step":1,"totals":{"llm_calls":0,"input_tokens":0,"output_tokens":0,"cost":0.0,"tool_calls":0}}"#,
        ];
        for line in samples {
            let event = Event::from_line(&serde_json::from_str(line).unwrap()).unwrap();
            assert_eq!(serde_json::to_value(&event).unwrap()["event"], event.kind());
        }
    }

    /// A journal line read as an entry writes back as the same line.
    #[test]
    fn an_entry_is_its_journal_line() {
        let line = r#"{"seq":7,"ts":"2026-01-02T03:04:05.678Z","event":"role_start","role":"a","kind":"llm","visit":1,"step":3}"#;
        let entry: Entry = serde_json::from_str(line).unwrap();
        assert_eq!((entry.seq, entry.event.kind()), (7, "role_start"));
        assert_eq!(serde_json::to_string(&entry).unwrap(), line);
    }

    #[test]
    fn a_line_of_an_unknown_or_damaged_event_is_none() {
        for line in [
            r#"{"event":"from_a_later_version","x":1}"#,
            r#"{"event":"route","from":"a"}"#,
            r#"{"seq":1}"#,
        ] {
            assert_eq!(Event::from_line(&serde_json::from_str(line).unwrap()), None);
        }
    }
}

/// What a run has used so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    pub llm_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
    pub tool_calls: u64,
}
