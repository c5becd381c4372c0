//! HTTP plumbing shared by the wire protocols: the client, the API key, error
//! classification, and SSE / NDJSON framing.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ProviderError;
use crate::types::StreamCallback;

/// An API key. Its `Debug` is redacted and it has no `Serialize` or `Display`.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

/// Remove the key from text that came from a server (some echo a bad key back).
pub(crate) fn redact(text: &str, key: Option<&ApiKey>) -> String {
    match key {
        Some(k) if k.0.len() >= 4 => text.replace(k.expose(), "[REDACTED]"),
        _ => text.to_string(),
    }
}

/// The HTTP client a model sends with: the process's shared one, built on its first
/// request (its TLS roots are most of a scripted run's start-up otherwise), or one given.
#[derive(Clone, Debug)]
pub enum HttpClient {
    Shared,
    Given(reqwest::Client),
}

impl HttpClient {
    pub fn get(&self) -> Result<reqwest::Client, ProviderError> {
        match self {
            HttpClient::Shared => shared_client(),
            HttpClient::Given(client) => Ok(client.clone()),
        }
    }
}

impl From<reqwest::Client> for HttpClient {
    fn from(client: reqwest::Client) -> Self {
        HttpClient::Given(client)
    }
}

/// One client per process: it owns the connection pool, so every provider shares it.
pub fn shared_client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // reqwest is built without a bundled crypto provider; rustls needs one installed
            // before the first client. An Err means another one is installed already: fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .connect_timeout(Duration::from_secs(10))
                .pool_idle_timeout(Duration::from_secs(90))
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| ProviderError::Config(format!("cannot build HTTP client: {e}")))
}

/// What one attempt got as far as, as the client saw it: whether the request went out and
/// an answer began, how much reply text came, and what usage the provider reported on the
/// way. The pool reads it to price an attempt that ended without a usable reply.
#[derive(Debug, Default)]
pub(crate) struct AttemptProbe {
    sent: AtomicBool,
    answered: AtomicBool,
    text_bytes: AtomicUsize,
    /// `(input, output)` tokens, each as last reported.
    reported: Mutex<(Option<u64>, Option<u64>)>,
}

tokio::task_local! {
    static PROBE: Arc<AttemptProbe>;
}

impl AttemptProbe {
    /// Runs `call` (a model's `complete`) with this probe taking its notes.
    pub(crate) async fn observe<F: Future>(self: &Arc<Self>, call: F) -> F::Output {
        PROBE.scope(self.clone(), call).await
    }

    /// The request was handed to a connection.
    pub(crate) fn sent(&self) -> bool {
        self.sent.load(Ordering::Relaxed)
    }

    /// A success status came back: the provider began answering.
    pub(crate) fn answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// Bytes of reply text (content, tool calls, reasoning) read.
    pub(crate) fn text_bytes(&self) -> usize {
        self.text_bytes.load(Ordering::Relaxed)
    }

    /// `(input, output)` tokens as the provider last reported them, each when it did.
    pub(crate) fn reported(&self) -> (Option<u64>, Option<u64>) {
        *self.reported.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A note on the attempt being made, if the pool observes one.
fn note(f: impl FnOnce(&AttemptProbe)) {
    let _ = PROBE.try_with(|p| f(p));
}

/// Usage the provider reported before the reply was whole (a stream's first or last
/// event); `None` leaves a figure as it was.
pub(crate) fn note_usage(input: Option<u64>, output: Option<u64>) {
    note(|p| {
        let mut r = p.reported.lock().unwrap_or_else(|p| p.into_inner());
        r.0 = input.or(r.0);
        r.1 = output.or(r.1);
    });
}

fn reqwest_error(e: reqwest::Error) -> ProviderError {
    let e = e.without_url();
    // A connection never made (refused, or its own timeout) sent nothing.
    if e.is_connect() {
        note(|p| p.sent.store(false, Ordering::Relaxed));
        ProviderError::Connection(error_chain(&e))
    } else if e.is_timeout() {
        ProviderError::Timeout(Duration::ZERO)
    } else if e.is_decode() {
        ProviderError::MalformedResponse(error_chain(&e))
    } else {
        ProviderError::Connection(error_chain(&e))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// `Retry-After` as delta-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::from_secs_f64(secs.min(86_400.0)));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Pull a human message out of an error body: `{"error":{"message":..}}`, `{"error":".."}`,
/// `{"message":..}`, or the text itself, shortened.
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        let e = v.get("error").unwrap_or(v);
        e.get("message")
            .and_then(|m| m.as_str())
            .or_else(|| e.as_str())
            .map(str::to_string)
    });
    let msg = msg.unwrap_or_else(|| body.trim().to_string());
    truncate(&msg, 400)
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// POST a JSON body; a non-success status becomes a classified error.
pub(crate) async fn post_json<B: Serialize + ?Sized>(
    builder: reqwest::RequestBuilder,
    body: &B,
    key: Option<&ApiKey>,
) -> Result<reqwest::Response, ProviderError> {
    let bytes = serde_json::to_vec(body)
        .map_err(|e| ProviderError::Config(format!("cannot encode request: {e}")))?;
    note(|p| p.sent.store(true, Ordering::Relaxed));
    let resp = builder
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(bytes)
        .send()
        .await
        .map_err(reqwest_error)?;
    let status = resp.status();
    if status.is_success() {
        note(|p| p.answered.store(true, Ordering::Relaxed));
        return Ok(resp);
    }
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    // An error body is only a message: its beginning is enough.
    let text = match read_capped(resp, ERROR_BODY_MAX).await {
        Ok(Some(bytes)) | Err((_, bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(None) => String::new(),
    };
    Err(ProviderError::from_status(
        status.as_u16(),
        retry_after,
        redact(&error_message(&text), key),
    ))
}

/// Whether a reply to a streamed request came as one JSON document instead (some proxies,
/// LiteLLM among them, answer so): `application/json` or `...+json`, not NDJSON.
pub(crate) fn is_whole_json(resp: &reqwest::Response) -> bool {
    let Some(ct) = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    media == "application/json" || media.ends_with("+json")
}

/// What is read of a reply beyond `max_reply` bytes of text: a JSON body's envelope and
/// escapes, a stream's pending line or event.
pub(crate) const BODY_SLACK: usize = 64 * 1024;

/// The most of an error body that is read.
const ERROR_BODY_MAX: usize = 64 * 1024;

/// How much reply text has been read, against a request's `max_reply`. Atomic only to
/// be shareable by reference inside a `Send` future.
pub(crate) struct ReplyBudget {
    max: Option<usize>,
    used: AtomicUsize,
}

impl ReplyBudget {
    pub(crate) fn new(max: Option<usize>) -> Self {
        ReplyBudget {
            max,
            used: AtomicUsize::new(0),
        }
    }

    /// Count `n` bytes of reply text (content, tool arguments, reasoning).
    pub(crate) fn add(&self, n: usize) {
        self.used.fetch_add(n, Ordering::Relaxed);
        note(|p| {
            p.text_bytes.fetch_add(n, Ordering::Relaxed);
        });
    }

    /// Mark the reply as past its cap (a line or event too long to hold).
    fn overflow(&self) {
        if let Some(max) = self.max {
            self.used.store(max.saturating_add(1), Ordering::Relaxed);
        }
    }

    pub(crate) fn exceeded(&self) -> bool {
        self.max
            .is_some_and(|max| self.used.load(Ordering::Relaxed) > max)
    }

    /// The most bytes a body read whole, or one line or event of a stream, may take.
    fn body_limit(&self) -> usize {
        self.max
            .map_or(usize::MAX, |max| max.saturating_add(BODY_SLACK))
    }
}

/// The body, or `None` when it is longer than `max` bytes (reading stops there; the
/// connection is dropped with the response). An interrupted body gives what had come.
async fn read_capped(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<Option<Vec<u8>>, (reqwest::Error, Vec<u8>)> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if bytes.len() + chunk.len() > max {
                    return Ok(None);
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Some(bytes)),
            Err(e) => return Err((e, bytes)),
        }
    }
}

/// Read and decode a whole JSON body; `None` when it passes the budget's cap.
pub(crate) async fn read_json<T: DeserializeOwned>(
    resp: reqwest::Response,
    key: Option<&ApiKey>,
    budget: &ReplyBudget,
) -> Result<Option<(T, serde_json::Value)>, ProviderError> {
    // A body cut off mid-transfer is a broken connection (retried), not a malformed reply.
    let bytes = match read_capped(resp, budget.body_limit()).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            // A body past the cap held at least `max_reply` bytes of reply.
            budget.add(budget.max.unwrap_or(0));
            return Ok(None);
        }
        Err((e, _)) => return Err(ProviderError::Connection(error_chain(&e.without_url()))),
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        // A whole reply that cannot be read was still made: its size stands for its text.
        budget.add(bytes.len());
        if nests_deeper_than(&bytes, MAX_JSON_DEPTH) {
            return too_deep();
        }
        ProviderError::MalformedResponse(redact(
            &format!(
                "{e} in body `{}`",
                truncate(&String::from_utf8_lossy(&bytes), 200)
            ),
            key,
        ))
    })?;
    let typed = T::deserialize(&value).map_err(|e| {
        budget.add(bytes.len());
        ProviderError::MalformedResponse(format!("unexpected body shape: {e}"))
    })?;
    Ok(Some((typed, value)))
}

/// Feed every line of the body to `on_line` as it arrives (for NDJSON). Stops reading,
/// returning `true`, as soon as the reply passes the budget (`on_line` counts the text it
/// takes) or a line grows longer than the budget's cap.
pub(crate) async fn for_each_line(
    mut resp: reqwest::Response,
    budget: &ReplyBudget,
    mut on_line: impl FnMut(&str) -> Result<(), ProviderError>,
) -> Result<bool, ProviderError> {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|e| {
            ProviderError::Connection(format!(
                "stream interrupted: {}",
                error_chain(&e.without_url())
            ))
        })?;
        let Some(chunk) = chunk else { break };
        // Only the new bytes can end the pending line: a long line is scanned once.
        let scanned = buf.len();
        buf.extend_from_slice(&chunk);
        let (mut start, mut from) = (0, scanned);
        while let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
            let end = from + i;
            let line = &buf[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            on_line(&String::from_utf8_lossy(line))?;
            if budget.exceeded() {
                return Ok(true);
            }
            (start, from) = (end + 1, end + 1);
        }
        buf.drain(..start);
        if buf.len() > budget.body_limit() {
            return Ok(true);
        }
    }
    if !buf.is_empty() {
        on_line(&String::from_utf8_lossy(&buf))?;
    }
    on_line("")?;
    Ok(budget.exceeded())
}

/// Feed every server-sent event of the body to `on_event` as it arrives; stops like
/// [`for_each_line`], also when one event's data grows past the budget's cap.
pub(crate) async fn for_each_event(
    resp: reqwest::Response,
    budget: &ReplyBudget,
    mut on_event: impl FnMut(SseEvent) -> Result<(), ProviderError>,
) -> Result<bool, ProviderError> {
    let mut sse = SseDecoder::default();
    let limit = budget.body_limit();
    for_each_line(resp, budget, |line| {
        if let Some(event) = sse.line(line) {
            on_event(event)?;
        }
        if sse.data.len() > limit {
            budget.overflow();
        }
        Ok(())
    })
    .await
}

/// Server-sent events: collects `event:` and `data:` lines and hands each event over at
/// the blank line that ends it.
#[derive(Default)]
struct SseDecoder {
    data: String,
    has_data: bool,
}

/// The `event:` name is not kept: every protocol here repeats it in the JSON data.
pub(crate) struct SseEvent {
    pub data: String,
}

impl SseDecoder {
    pub fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_data {
                return None;
            }
            self.has_data = false;
            return Some(SseEvent {
                data: std::mem::take(&mut self.data),
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
        None
    }
}

/// JSON nested deeper than this is not read (serde_json's own limit, which stops its
/// recursion): a reply that does is the model's bad answer, [`ProviderError::UnreadableReply`].
pub const MAX_JSON_DEPTH: usize = 128;

/// Whether `json` opens more than `max` arrays and objects inside one another, strings
/// skipped. One pass, no recursion, whatever the text.
pub fn nests_deeper_than(json: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

pub(crate) fn too_deep() -> ProviderError {
    ProviderError::UnreadableReply(format!(
        "its JSON nests deeper than {MAX_JSON_DEPTH} levels"
    ))
}

/// Decode one streamed JSON frame.
pub(crate) fn decode_frame<T: DeserializeOwned>(data: &str) -> Result<T, ProviderError> {
    serde_json::from_str(data).map_err(|e| {
        if nests_deeper_than(data.as_bytes(), MAX_JSON_DEPTH) {
            return too_deep();
        }
        ProviderError::MalformedResponse(format!(
            "bad stream frame ({e}): `{}`",
            truncate(data, 200)
        ))
    })
}

pub(crate) fn emit(cb: Option<StreamCallback<'_>>, text: &str) {
    if let (Some(cb), false) = (cb, text.is_empty()) {
        cb(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        let d = parse_retry_after(&later).unwrap_or_default();
        assert!(
            d > Duration::from_secs(28) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn sse_events() {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for l in [
            "event: a",
            "data: {\"x\":1}",
            "",
            ": comment",
            "data: 1",
            "data: 2",
            "",
        ] {
            if let Some(e) = d.line(l) {
                out.push(e.data);
            }
        }
        assert_eq!(out, vec!["{\"x\":1}".to_string(), "1\n2".to_string()]);
    }

    #[test]
    fn error_messages_are_extracted_and_redacted() {
        let key = ApiKey::new("sk-secret-123");
        let body = r#"{"error":{"message":"Incorrect API key provided: sk-secret-123"}}"#;
        let m = redact(&error_message(body), Some(&key));
        assert_eq!(m, "Incorrect API key provided: [REDACTED]");
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(format!("{key:?}"), "ApiKey([REDACTED])");
    }
}
