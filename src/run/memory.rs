//! Memory slots at run time: their typed values, the `update` operations on them, and
//! the view templates and expressions get. Structured kinds are `rondo-memory`'s types.

use std::path::Path;

use rondo_memory::{CodeContext, OperationHistory, Reflection, Whiteboard};
use serde::{Serialize, Serializer};
use serde_json::Value;

use rondo_provider::Message;

use super::value::equal;
use crate::compile::{self, MemoryKind, MemoryOp, MemorySlot, SizeBound};

/// The value of one memory slot, of the kind its declaration names. The checkpoint
/// holds each as its own JSON (a plain value as it is, a structured kind as its store);
/// [`MemoryValue::restore`] reads it back with the declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryValue {
    /// `memory NAME: TYPE`: a JSON value of that type.
    Plain(Value),
    Whiteboard(Whiteboard),
    CodeContext(CodeContext),
    History(OperationHistory),
    /// A chat, in the provider crate's message type.
    Conversation(Vec<Message>),
}

impl Serialize for MemoryValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MemoryValue::Plain(v) => v.serialize(s),
            MemoryValue::Whiteboard(w) => w.serialize(s),
            MemoryValue::CodeContext(c) => c.serialize(s),
            MemoryValue::History(h) => h.serialize(s),
            MemoryValue::Conversation(m) => m.serialize(s),
        }
    }
}

impl MemoryValue {
    /// A slot's value when the run starts.
    pub fn initial(kind: &MemoryKind) -> Result<MemoryValue, String> {
        Ok(match kind {
            MemoryKind::Value { default, ty } => {
                let mut v = default.clone();
                ty.fill_absent(&mut v);
                MemoryValue::Plain(v)
            }
            MemoryKind::Whiteboard { sections } => {
                MemoryValue::Whiteboard(compile::new_whiteboard(sections)?)
            }
            &MemoryKind::CodeContext {
                alpha,
                beta,
                gamma,
                threshold,
                ..
            } => {
                MemoryValue::CodeContext(compile::new_code_context(alpha, beta, gamma, threshold)?)
            }
            MemoryKind::History => MemoryValue::History(OperationHistory::new()),
            MemoryKind::Conversation { .. } => MemoryValue::Conversation(Vec::new()),
        })
    }

    /// A slot's value read back from a checkpoint.
    pub fn restore(kind: &MemoryKind, stored: Value) -> Result<MemoryValue, String> {
        fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| e.to_string())
        }
        Ok(match kind {
            MemoryKind::Value { .. } => MemoryValue::Plain(stored),
            MemoryKind::Whiteboard { .. } => MemoryValue::Whiteboard(typed(stored)?),
            MemoryKind::CodeContext { .. } => MemoryValue::CodeContext(typed(stored)?),
            MemoryKind::History => MemoryValue::History(typed(stored)?),
            MemoryKind::Conversation { .. } => MemoryValue::Conversation(typed(stored)?),
        })
    }

    /// The JSON value of a plain slot (`None` for a structured kind).
    pub fn plain(&self) -> Option<&Value> {
        match self {
            MemoryValue::Plain(v) => Some(v),
            _ => None,
        }
    }

    /// What `memory.NAME` is in a template or an expression: a plain value as it is;
    /// a structured kind as its view (`code.files`, `ops.chain`, `ops.lessons`,
    /// `board.sections`), within the slot's `max_len` and `max_bytes` (see
    /// [`rondo_memory::fit_json`]). A code context reads its files in the `workspace`.
    pub fn view(&self, slot: &MemorySlot, workspace: &Path) -> Value {
        let mut view = self.whole_view(&slot.kind, workspace, slot.bound);
        if !matches!(self, MemoryValue::Plain(_))
            && let Some(max) = slot.bound.max_bytes
        {
            rondo_memory::fit_json(&mut view, usize::try_from(max).unwrap_or(usize::MAX));
        }
        view
    }

    /// The view before `max_bytes`: a history keeps its latest `max_len` operations of the
    /// chain and its latest `max_len` lessons.
    fn whole_view(&self, kind: &MemoryKind, workspace: &Path, bound: SizeBound) -> Value {
        match self {
            MemoryValue::Plain(v) => v.clone(),
            // Rendering fills the parse cache; the run's value keeps the one it has.
            MemoryValue::CodeContext(code) => match code_root(kind, workspace) {
                Ok(root) => {
                    let mut view =
                        serde_json::to_value(code.clone().render(&root)).unwrap_or(Value::Null);
                    // Each chunk with its activity and score, for templates that show them.
                    view["chunks"] = serde_json::to_value(code.chunks()).unwrap_or(Value::Null);
                    view
                }
                Err(_) => Value::Null,
            },
            MemoryValue::History(history) => {
                let mut view = history.view();
                if let Some(max) = bound.max_len.and_then(|m| usize::try_from(m).ok()) {
                    let from = view.chain.len().saturating_sub(max);
                    view.chain.drain(..from);
                    let from = view.lessons.len().saturating_sub(max);
                    view.lessons.drain(..from);
                }
                serde_json::to_value(view).unwrap_or(Value::Null)
            }
            MemoryValue::Conversation(messages) => {
                serde_json::to_value(messages).unwrap_or(Value::Null)
            }
            MemoryValue::Whiteboard(board) => whiteboard_view(board),
        }
    }
}

/// What a template sees of a whiteboard; its `max_bytes` bounds this value's JSON.
fn whiteboard_view(board: &Whiteboard) -> Value {
    serde_json::json!({
        "sections": board.sections(),
        "markdown": board.render_markdown(),
    })
}

/// Where the files of a code context are read from: the workspace, or a folder of it
/// (`root = "repo"`, created if missing) resolved beneath it, never through a symbolic
/// link out of it.
pub fn code_root(kind: &MemoryKind, workspace: &Path) -> Result<std::path::PathBuf, String> {
    match kind {
        MemoryKind::CodeContext {
            root: Some(root), ..
        } => rondo_workspace::Workspace::open(workspace)
            .and_then(|w| w.subdir(root, true))
            .map(|sub| sub.root().to_path_buf())
            .map_err(|e| format!("code context root `{root}`: {e}")),
        _ => Ok(workspace.to_path_buf()),
    }
}

/// A line number as tools and models write it: a number or a numeric string.
fn line_number(v: &Value) -> Option<usize> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .and_then(|n| usize::try_from(n).ok())
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Why an operation was not applied.
#[derive(Debug)]
pub enum MemoryError {
    /// The value given was refused (a whiteboard batch that breaks its rules, `extend`
    /// with something other than a list): the fault of whatever produced the value.
    Refused(String),
    /// The memory cannot take the operation (a damaged checkpoint, a list that is not one).
    Failed(String),
    /// The operation would take the memory past its declared bound (a conversation's
    /// `max_messages`/`max_bytes`): the run ends at `limit`.
    Limit(String),
}

impl MemoryError {
    pub fn message(&self) -> &str {
        match self {
            MemoryError::Refused(m) | MemoryError::Failed(m) | MemoryError::Limit(m) => m,
        }
    }
}

impl From<String> for MemoryError {
    fn from(message: String) -> Self {
        MemoryError::Failed(message)
    }
}

/// Applies one operation; code is read from the `workspace`. Nothing is written: the
/// caller renders a whiteboard ([`write_whiteboard`]) once the whole update is applied.
pub fn apply(
    decl: &MemorySlot,
    slot: &mut MemoryValue,
    op: MemoryOp,
    args: Vec<Value>,
    workspace: &Path,
) -> Result<String, MemoryError> {
    let kind = &decl.kind;
    match slot {
        MemoryValue::Plain(slot) => apply_plain(kind, slot, op, args),
        MemoryValue::Whiteboard(board) => apply_whiteboard(decl, board, op, args),
        MemoryValue::History(history) => apply_history(kind, history, op, args),
        MemoryValue::CodeContext(code) => apply_code_context(kind, code, op, args, workspace),
        MemoryValue::Conversation(messages) => apply_conversation(kind, messages, op, args),
    }
}

/// The operations of a plain value (a list or a map).
fn apply_plain(
    kind: &MemoryKind,
    slot: &mut Value,
    op: MemoryOp,
    args: Vec<Value>,
) -> Result<String, MemoryError> {
    let mut args = args.into_iter();
    let mut next = || args.next().unwrap_or(Value::Null);
    match op {
        MemoryOp::Append => {
            let item = next();
            as_list(slot)?.push(item);
            Ok(String::new())
        }
        MemoryOp::Extend => match next() {
            Value::Array(items) => {
                as_list(slot)?.extend(items);
                Ok(String::new())
            }
            Value::Null => Ok(String::new()),
            other => Err(MemoryError::Refused(format!(
                "extend needs a list, got {other}"
            ))),
        },
        MemoryOp::Truncate => {
            let to = next();
            let list = as_list(slot)?;
            let before = list.len();
            // Keep the prefix up to and including the item whose `id` is `to`; with no
            // such item, `to` is a count.
            let keep = match list
                .iter()
                .position(|item| item.get("id").is_some_and(|id| equal(id, &to)))
            {
                Some(i) => i + 1,
                None => to
                    .as_f64()
                    .map_or(before, |n| (n.max(0.0) as usize).min(before)),
            };
            list.truncate(keep);
            Ok(format!("kept {keep} of {before}"))
        }
        MemoryOp::Patch => {
            let (pattern, changes) = (next(), next());
            let (Value::Object(pattern), Value::Object(changes)) = (pattern, changes) else {
                return Err(MemoryError::Failed(
                    "patch takes two objects: which items, and the fields to change".into(),
                ));
            };
            let mut patched = 0;
            for item in as_list(slot)?.iter_mut() {
                let matches = pattern
                    .iter()
                    .all(|(k, v)| item.get(k).is_some_and(|x| equal(x, v)));
                if let (true, Value::Object(fields)) = (matches, item) {
                    for (k, v) in &changes {
                        fields.insert(k.clone(), v.clone());
                    }
                    patched += 1;
                }
            }
            Ok(format!("patched {patched} item(s)"))
        }
        MemoryOp::Put => {
            let key = next();
            let value = next();
            let key = key
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| key.to_string());
            match slot {
                Value::Object(map) => {
                    map.insert(key, value);
                    Ok(String::new())
                }
                Value::Null => {
                    *slot = Value::Object([(key, value)].into_iter().collect());
                    Ok(String::new())
                }
                _ => Err(MemoryError::Failed("put needs a map".into())),
            }
        }
        MemoryOp::Clear => {
            match slot {
                Value::Array(a) => a.clear(),
                Value::Object(o) => o.clear(),
                other => *other = Value::Null,
            }
            Ok(String::new())
        }
        op => Err(no_operation(kind, op)),
    }
}

/// A whiteboard's one operation: a batch of edits, applied all or nothing; a batch that
/// would take the whiteboard past its `max_bytes` is refused whole (the model is told).
fn apply_whiteboard(
    decl: &MemorySlot,
    board: &mut Whiteboard,
    op: MemoryOp,
    args: Vec<Value>,
) -> Result<String, MemoryError> {
    let mut args = args.into_iter();
    let mut next = || args.next().unwrap_or(Value::Null);
    match op {
        MemoryOp::Apply => {
            let ops = next();
            let mut ops = match ops {
                Value::Object(ref o) if o.contains_key("ops") => o["ops"].clone(),
                other => other,
            };
            // An absent optional field reads as `null`; the whiteboard wants it absent.
            if let Value::Array(items) = &mut ops {
                for op in items.iter_mut().filter_map(Value::as_object_mut) {
                    op.retain(|_, v| !v.is_null());
                }
            }
            let json = serde_json::to_string(&ops).map_err(|e| e.to_string())?;
            // All or nothing: a refused batch changes nothing.
            let mut draft = board.clone();
            let report = draft
                .apply_json(&json)
                .map_err(|e| MemoryError::Refused(e.to_string()))?;
            if let Some(max) = decl.bound.max_bytes {
                let bytes = serde_json::to_string(&whiteboard_view(&draft)).map_or(0, |s| s.len());
                if bytes as u64 > max {
                    return Err(MemoryError::Refused(format!(
                        "the whiteboard would hold {bytes} bytes, past its max_bytes = {max}: deprecate entries that no longer hold, or write shorter ones"
                    )));
                }
            }
            *board = draft;
            Ok(serde_json::to_string(&report).unwrap_or_default())
        }
        op => Err(no_operation(&decl.kind, op)),
    }
}

/// The operations of an LLM-IDE history: a step, its observation, a reflection.
fn apply_history(
    kind: &MemoryKind,
    history: &mut OperationHistory,
    op: MemoryOp,
    args: Vec<Value>,
) -> Result<String, MemoryError> {
    let mut args = args.into_iter();
    let mut next = || args.next().unwrap_or(Value::Null);
    match op {
        MemoryOp::Push => {
            let node = next();
            let params = node.get("action_params").map(text_of).unwrap_or_default();
            history.push(
                node.get("thought").map(text_of).unwrap_or_default(),
                node.get("action_type").map(text_of).unwrap_or_default(),
                params,
            );
            Ok(String::new())
        }
        MemoryOp::Observe => {
            history
                .set_observation(text_of(&next()))
                .map_err(|e| e.to_string())?;
            Ok(String::new())
        }
        MemoryOp::Reflect => {
            let r = next();
            // The first operation has nothing to reflect on.
            if history.last().is_none() {
                return Ok("nothing to reflect on yet".into());
            }
            let bad_action = match r.get("bad_action") {
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
                _ => false,
            };
            history
                .reflect(Reflection {
                    bad_action,
                    summary: r.get("summary").map(text_of).unwrap_or_default(),
                    lessons: r.get("lessons").map(text_of).unwrap_or_default(),
                })
                .map_err(|e| e.to_string())?;
            Ok(String::new())
        }
        op => Err(no_operation(kind, op)),
    }
}

/// The operations of a code context: citations and accesses, read from the workspace.
fn apply_code_context(
    kind: &MemoryKind,
    code: &mut CodeContext,
    op: MemoryOp,
    args: Vec<Value>,
    workspace: &Path,
) -> Result<String, MemoryError> {
    let mut args = args.into_iter();
    let mut next = || args.next().unwrap_or(Value::Null);
    match op {
        MemoryOp::Cite => {
            // A root a tool turned into a link out of the workspace reads nothing; the
            // run goes on and the note says why.
            let root = match code_root(kind, workspace) {
                Ok(root) => root,
                Err(e) => return Ok(e),
            };
            code.begin_operation();
            let report = code
                .record_citations(&root, &text_of(&next()))
                .map_err(|e| e.to_string())?;
            // The stored score is the one the next rendering shows.
            code.update_scores();
            Ok(serde_json::to_string(&report).unwrap_or_default())
        }
        MemoryOp::Access => {
            let root = match code_root(kind, workspace) {
                Ok(root) => root,
                Err(e) => return Ok(e),
            };
            if code.n_operations() == 0 {
                code.begin_operation();
            }
            let accesses = match next() {
                Value::Array(items) => items,
                other => vec![other],
            };
            let mut notes = Vec::new();
            for access in accesses {
                let path = access
                    .get("file_path")
                    .or_else(|| access.get("path"))
                    .map(text_of)
                    .unwrap_or_default();
                let lines: Vec<usize> = match access.get("lines") {
                    Some(Value::Array(l)) => l.iter().filter_map(line_number).collect(),
                    _ => Vec::new(),
                };
                let start = access.get("start").and_then(line_number);
                // `show FILE START` without an end opens one line.
                let end = access.get("end").and_then(line_number).or(start);
                let result = match (start, end) {
                    (Some(s), Some(e)) if lines.is_empty() => {
                        code.record_access_range(&root, &path, s, e)
                    }
                    _ => code.record_access(&root, &path, &lines),
                };
                match result {
                    Ok(r) => notes.push(serde_json::to_string(&r).unwrap_or_default()),
                    Err(e) => notes.push(format!("{path}: {e}")),
                }
            }
            code.update_scores();
            Ok(notes.join("; "))
        }
        op => Err(no_operation(kind, op)),
    }
}

/// The operations of a conversation: cleared, or a message appended within its bounds.
fn apply_conversation(
    kind: &MemoryKind,
    messages: &mut Vec<Message>,
    op: MemoryOp,
    args: Vec<Value>,
) -> Result<String, MemoryError> {
    let mut args = args.into_iter();
    let mut next = || args.next().unwrap_or(Value::Null);
    match op {
        MemoryOp::Clear => {
            messages.clear();
            Ok(String::new())
        }
        op @ (MemoryOp::System | MemoryOp::User | MemoryOp::Assistant) => {
            let text = text_of(&next());
            let message = match op {
                MemoryOp::System => Message::system(text),
                MemoryOp::User => Message::user(text),
                _ => Message::assistant(text),
            };
            push_bounded(kind, messages, vec![message]).map_err(MemoryError::Limit)?;
            Ok(String::new())
        }
        op => Err(no_operation(kind, op)),
    }
}

fn no_operation(kind: &MemoryKind, op: MemoryOp) -> MemoryError {
    MemoryError::Failed(format!(
        "a {} has no operation `{}`",
        kind.kind_name(),
        op.name()
    ))
}

/// Appends `messages` to a conversation within its bounds; past them nothing is appended.
pub fn extend_conversation(
    kind: &MemoryKind,
    slot: &mut MemoryValue,
    messages: Vec<Message>,
) -> Result<(), String> {
    match slot {
        MemoryValue::Conversation(list) => push_bounded(kind, list, messages),
        _ => Err("this memory is not a conversation".into()),
    }
}

fn push_bounded(
    kind: &MemoryKind,
    list: &mut Vec<Message>,
    messages: Vec<Message>,
) -> Result<(), String> {
    let MemoryKind::Conversation {
        max_messages,
        max_bytes,
    } = kind
    else {
        return Err("this memory is not a conversation".into());
    };
    let count = list.len() + messages.len();
    if count as u64 > *max_messages {
        return Err(format!(
            "the conversation would hold {count} messages, past its max_messages = {max_messages}"
        ));
    }
    let bytes: usize = list.iter().chain(&messages).map(message_bytes).sum();
    if bytes as u64 > *max_bytes {
        return Err(format!(
            "the conversation would hold {bytes} bytes, past its max_bytes = {max_bytes}"
        ));
    }
    list.extend(messages);
    Ok(())
}

/// What a message weighs against `max_bytes`: its text and its calls' arguments.
fn message_bytes(m: &Message) -> usize {
    m.content.len()
        + m.tool_calls
            .iter()
            .flatten()
            .map(|c| c.name.len() + c.arguments.to_string().len())
            .sum::<usize>()
}

/// Renders a whiteboard memory to `whiteboard.md` in `run_dir` (the system area).
pub fn write_whiteboard(slot: &MemoryValue, run_dir: &Path) -> Result<(), String> {
    match slot {
        MemoryValue::Whiteboard(board) => board
            .write_markdown(run_dir)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        _ => Ok(()),
    }
}

fn as_list(slot: &mut Value) -> Result<&mut Vec<Value>, String> {
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut()
        .ok_or_else(|| "this memory value is not a list".to_string())
}
