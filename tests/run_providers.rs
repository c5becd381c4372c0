//! Issue 6: the LLM providers exercised through real `rondo run` executions.
//!
//! Each test starts in-process HTTP servers on 127.0.0.1 that speak one provider's wire
//! format (OpenAI, OpenAI-compatible, Anthropic, Gemini, Ollama) and check every request
//! they receive (method, path, auth headers, body shape). A small workflow from
//! `tests/fixtures/run_providers/` is written to a temporary folder with provider blocks
//! pointing at those servers, and the real binary runs it. The servers misbehave on cue
//! (429 with Retry-After, 5xx, slow replies, malformed or truncated bodies) and the tests
//! read the outcome the way a user would: the exit code, `run.json`, `events.jsonl` (the
//! `attempts` records), the artifacts, and `rondo resume`.
//!
//! The API key is a random value in a variable `RONDO_TEST_KEY_<random>` set only in the
//! child's environment; after every command the whole temporary folder and the captured
//! output are searched for it.
//!
//! Timing: assertions are on the number and order of attempts, not on wall time, except
//! lower bounds (a Retry-After wait, a timeout), which cannot be hit early on a slow machine.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/run_providers");
const QUESTION: &str = "Question: What is the capital of Norway?";
const SYSTEM: &str = "You answer in one word.";
/// Every process gets at most this long; a hang fails the test instead of blocking CI.
const PROCESS_LIMIT: Duration = Duration::from_secs(180);

// ====================================================================== fake servers
// Adapted from crates/rondo-provider/tests/common/mod.rs: a tiny HTTP/1.1 server that
// records and validates each request, then answers from a script.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    OpenAi,
    Compatible,
    Anthropic,
    Gemini,
    Ollama,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::OpenAi => "openai",
            Kind::Compatible => "openai-compatible",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Ollama => "ollama",
        }
    }

    fn model(self) -> &'static str {
        match self {
            Kind::OpenAi => "gpt-4o-mini",
            Kind::Compatible => "qwen2.5-coder-7b-instruct",
            Kind::Anthropic => "claude-sonnet-4-5",
            Kind::Gemini => "gemini-2.5-flash",
            Kind::Ollama => "llama3.2",
        }
    }

    /// The `base_url` a profile gives for a server at `addr` (as each API documents it).
    fn base_url(self, addr: SocketAddr) -> String {
        match self {
            Kind::OpenAi | Kind::Compatible => format!("http://{addr}/v1"),
            Kind::Anthropic | Kind::Ollama => format!("http://{addr}"),
            Kind::Gemini => format!("http://{addr}/v1beta"),
        }
    }

    /// What the fake model answers.
    fn answer(self) -> String {
        format!("{} says: Oslo", self.name())
    }
}

#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    at: Instant,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Debug, Clone)]
enum Reply {
    /// The provider's normal answer.
    Normal,
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Wait, then answer normally (the client has usually given up by then).
    Slow(Duration),
    /// These bytes as they are, then the connection is closed.
    Raw(Vec<u8>),
}

impl Reply {
    fn status(status: u16, body: &str) -> Reply {
        Reply::Status {
            status,
            headers: vec![],
            body: body.to_string(),
        }
    }
    fn server_error(status: u16) -> Reply {
        Reply::status(
            status,
            &json!({"error": {"message": format!("scripted failure {status}"), "type": "server_error"}})
                .to_string(),
        )
    }
    fn rate_limited(retry_after: &str) -> Reply {
        Reply::Status {
            status: 429,
            headers: vec![("retry-after".into(), retry_after.into())],
            body: r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#.into(),
        }
    }
    /// A 200 whose JSON body is cut: `content-length` promises more than is sent.
    fn truncated() -> Reply {
        Reply::Raw(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"id\":\"x\",\"choi"
                .to_vec(),
        )
    }
    /// A complete 200 whose body is not JSON.
    fn malformed() -> Reply {
        let body = "{this is not json";
        Reply::Raw(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }
}

/// What a server expects of the requests it receives.
#[derive(Debug, Clone)]
struct Expect {
    kind: Kind,
    /// The API key the client must send; `None`: no auth header at all.
    key: Option<String>,
    /// The profile's `max_tokens`, sent in each kind's own field.
    max_tokens: u64,
    /// A native tool conversation (`native.rondo.tmpl`): requests are checked and answered
    /// by [`validate_native`] and [`respond_native`].
    native: bool,
}

struct Shared {
    expect: Expect,
    /// (input tokens, output tokens) reported by a normal answer.
    usage: (u64, u64),
    script: Mutex<VecDeque<Reply>>,
    /// Used when the script is empty; `None` = normal answers.
    sticky: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    violations: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Server {
    async fn start(expect: Expect, usage: (u64, u64)) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            expect,
            usage,
            script: Mutex::new(VecDeque::new()),
            sticky: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        });
        let st = shared.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = serve(sock, st).await;
                });
            }
        });
        Server { addr, shared }
    }

    fn kind(&self) -> Kind {
        self.shared.expect.kind
    }

    fn base_url(&self) -> String {
        self.kind().base_url(self.addr)
    }

    /// Replies for the next requests, in order; then `sticky`, then normal answers.
    fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        lock(&self.shared.script).extend(replies);
    }

    fn always(&self, reply: Option<Reply>) {
        *lock(&self.shared.sticky) = reply;
    }

    fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    fn count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// Every request had the documented shape.
    fn assert_valid(&self) {
        let v = lock(&self.shared.violations).clone();
        assert!(
            v.is_empty(),
            "the fake {} server rejected requests: {v:#?}",
            self.kind().name()
        );
    }
}

async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let mut chunk = [0u8; 8192];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buf.len() < body_start + len {
        let mut chunk = [0u8; 8192];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[body_start..body_start + len].to_vec();
    buf.drain(..body_start + len);
    Some(Recorded {
        method,
        path,
        headers,
        body,
        at,
    })
}

async fn serve(mut sock: TcpStream, st: Arc<Shared>) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        lock(&st.requests).push(req.clone());
        let reply = match validate(&st.expect, &req) {
            Err(v) => {
                lock(&st.violations).push(v.clone());
                Reply::status(400, &json!({"error": {"message": v}}).to_string())
            }
            Ok(()) => {
                let scripted = lock(&st.script).pop_front();
                scripted
                    .or_else(|| lock(&st.sticky).clone())
                    .unwrap_or(Reply::Normal)
            }
        };
        let (status, headers, body) = match reply {
            Reply::Normal => (200, vec![], respond(&st.expect, st.usage, &req)),
            Reply::Slow(d) => {
                tokio::time::sleep(d).await;
                (200, vec![], respond(&st.expect, st.usage, &req))
            }
            Reply::Status {
                status,
                headers,
                body,
            } => (status, headers, body),
            Reply::Raw(bytes) => {
                sock.write_all(&bytes).await?;
                sock.flush().await?;
                let _ = sock.shutdown().await;
                return Ok(());
            }
        };
        let mut head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        sock.write_all(head.as_bytes()).await?;
        sock.write_all(body.as_bytes()).await?;
        sock.flush().await?;
    }
    Ok(())
}

fn check(cond: bool, what: impl Into<String>) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what.into()) }
}

fn only_keys(v: &Value, allowed: &[&str], what: &str) -> Result<(), String> {
    let obj = v.as_object().ok_or(format!("{what} is not an object"))?;
    for k in obj.keys() {
        check(
            allowed.contains(&k.as_str()),
            format!("unexpected field `{k}` in {what}"),
        )?;
    }
    Ok(())
}

/// The checks each API makes of a request (only non-streamed calls: the interpreter does
/// not stream).
fn validate(e: &Expect, r: &Recorded) -> Result<(), String> {
    if e.native {
        return validate_native(e, r);
    }
    check(r.method == "POST", format!("method {}", r.method))?;
    check(
        r.header("content-type") == Some("application/json"),
        "content-type must be application/json",
    )?;
    let b = r.json();
    check(b.is_object(), "the body is not a JSON object")?;
    let text = b.to_string();
    check(
        text.contains(QUESTION) && text.contains(SYSTEM),
        "the rendered prompt and system prompt are not in the body",
    )?;
    let bearer = |key: &Option<String>| match key {
        Some(k) => check(
            r.header("authorization") == Some(format!("Bearer {k}").as_str()),
            "missing or wrong bearer token",
        ),
        None => check(
            r.header("authorization").is_none(),
            "unexpected authorization header",
        ),
    };
    match e.kind {
        Kind::OpenAi | Kind::Compatible => {
            check(r.path == "/v1/chat/completions", format!("path {}", r.path))?;
            bearer(&e.key)?;
            only_keys(
                &b,
                &[
                    "model",
                    "messages",
                    "temperature",
                    "max_tokens",
                    "max_completion_tokens",
                    "stop",
                    "tools",
                    "tool_choice",
                    "response_format",
                    "stream",
                    "stream_options",
                ],
                "the chat completion request",
            )?;
            check(
                b["model"] == e.kind.model(),
                format!("model {}", b["model"]),
            )?;
            check(
                b.get("stream").is_none_or(|s| s == false),
                "a non-streamed call",
            )?;
            let msgs = b["messages"].as_array().ok_or("messages")?;
            check(msgs.len() == 2, "a system and a user message")?;
            check(
                msgs[0]["role"] == "system" && msgs[0]["content"].is_string(),
                "system message",
            )?;
            check(
                msgs[1]["role"] == "user" && msgs[1]["content"].is_string(),
                "user message",
            )?;
            if e.kind == Kind::OpenAi {
                check(
                    b["max_completion_tokens"] == e.max_tokens && b.get("max_tokens").is_none(),
                    "OpenAI takes max_completion_tokens (max_tokens is deprecated)",
                )?;
            } else {
                check(
                    b["max_tokens"] == e.max_tokens && b.get("max_completion_tokens").is_none(),
                    "compatible servers read max_tokens",
                )?;
            }
        }
        Kind::Anthropic => {
            check(r.path == "/v1/messages", format!("path {}", r.path))?;
            check(
                r.header("x-api-key") == e.key.as_deref(),
                "missing or wrong x-api-key",
            )?;
            check(
                r.header("anthropic-version") == Some("2023-06-01"),
                "anthropic-version",
            )?;
            check(
                r.header("authorization").is_none(),
                "no bearer auth on Anthropic",
            )?;
            only_keys(
                &b,
                &[
                    "model",
                    "messages",
                    "system",
                    "max_tokens",
                    "temperature",
                    "stop_sequences",
                    "tools",
                    "tool_choice",
                    "stream",
                ],
                "the messages request",
            )?;
            check(
                b["model"] == e.kind.model(),
                format!("model {}", b["model"]),
            )?;
            check(b["max_tokens"] == e.max_tokens, "max_tokens is required")?;
            check(
                b["system"].as_str().is_some_and(|s| s.contains(SYSTEM)),
                "system is a top-level string",
            )?;
            let msgs = b["messages"].as_array().ok_or("messages")?;
            check(
                msgs.len() == 1 && msgs[0]["role"] == "user",
                "one user message (system is not a message)",
            )?;
            let content = &msgs[0]["content"];
            let ok = content.is_string()
                || content.as_array().is_some_and(|blocks| {
                    blocks
                        .iter()
                        .all(|bl| bl["type"] == "text" && bl["text"].is_string())
                });
            check(ok, "content is a string or text blocks")?;
        }
        Kind::Gemini => {
            check(
                r.path == format!("/v1beta/models/{}:generateContent", e.kind.model()),
                format!("path {}", r.path),
            )?;
            check(!r.path.contains("key="), "the key must not be in the URL")?;
            check(
                r.header("x-goog-api-key") == e.key.as_deref(),
                "missing or wrong x-goog-api-key",
            )?;
            check(r.header("authorization").is_none(), "no bearer on Gemini")?;
            only_keys(
                &b,
                &[
                    "contents",
                    "systemInstruction",
                    "generationConfig",
                    "tools",
                    "toolConfig",
                ],
                "the generateContent request",
            )?;
            let contents = b["contents"].as_array().ok_or("contents")?;
            check(
                contents.len() == 1 && contents[0]["role"] == "user",
                "one user content",
            )?;
            for p in contents[0]["parts"].as_array().ok_or("parts")? {
                check(
                    p.as_object().is_some_and(|o| o.len() == 1) && p["text"].is_string(),
                    format!("a part has exactly one field: {p}"),
                )?;
            }
            check(
                b["systemInstruction"]["parts"][0]["text"].is_string(),
                "systemInstruction",
            )?;
            only_keys(
                &b["generationConfig"],
                &[
                    "temperature",
                    "maxOutputTokens",
                    "stopSequences",
                    "responseMimeType",
                    "responseSchema",
                ],
                "generationConfig",
            )?;
            check(
                b["generationConfig"]["maxOutputTokens"] == e.max_tokens,
                "maxOutputTokens",
            )?;
        }
        Kind::Ollama => {
            check(r.path == "/api/chat", format!("path {}", r.path))?;
            bearer(&e.key)?;
            only_keys(
                &b,
                &[
                    "model",
                    "messages",
                    "stream",
                    "options",
                    "tools",
                    "format",
                    "keep_alive",
                ],
                "the chat request",
            )?;
            check(
                b["model"] == e.kind.model(),
                format!("model {}", b["model"]),
            )?;
            check(
                b["stream"] == false,
                "stream must be explicitly false (Ollama streams by default)",
            )?;
            let msgs = b["messages"].as_array().ok_or("messages")?;
            check(
                msgs.len() == 2 && msgs[0]["role"] == "system" && msgs[1]["role"] == "user",
                "a system and a user message",
            )?;
            only_keys(
                &b["options"],
                &["temperature", "num_predict", "stop"],
                "options",
            )?;
            check(b["options"]["num_predict"] == e.max_tokens, "num_predict")?;
        }
    }
    Ok(())
}

/// A normal answer in the kind's documented format. Anthropic reports part of the input
/// as cache tokens and Gemini part of the output as thinking tokens: both count.
fn respond(e: &Expect, (input, output): (u64, u64), r: &Recorded) -> String {
    if e.native {
        return respond_native(e, (input, output), r);
    }
    let b = r.json();
    let text = e.kind.answer();
    match e.kind {
        Kind::OpenAi | Kind::Compatible => json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
            "model": b["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
        }),
        Kind::Anthropic => json!({
            "id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "model": b["model"], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": input - 150, "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 50, "output_tokens": output},
        }),
        Kind::Gemini => json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": input, "candidatesTokenCount": output - 20,
                "thoughtsTokenCount": 20, "totalTokenCount": input + output},
            "modelVersion": e.kind.model(),
        }),
        Kind::Ollama => json!({
            "model": b["model"], "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": text},
            "done": true, "done_reason": "stop", "total_duration": 1000,
            "prompt_eval_count": input, "eval_count": output,
        }),
    }
    .to_string()
}

/// A port with nothing listening (connections are refused).
async fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    l.local_addr().expect("addr").port()
}

// ====================================================================== runs

/// A random key in a random variable, set only in the child's environment.
struct Secret {
    var: String,
    value: String,
}

impl Secret {
    fn new() -> Secret {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mix = nanos
            ^ (u64::from(std::process::id()) << 32)
            ^ N.fetch_add(1, Ordering::SeqCst)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let tag = format!("{mix:016x}");
        Secret {
            var: format!("RONDO_TEST_KEY_{}", tag.to_uppercase()),
            value: format!("sk-rondo-SECRET-{tag}-{:x}", mix.rotate_left(17)),
        }
    }
}

#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn assert_no_panic(&self) {
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "rondo panicked:\n{}",
            self.stderr
        );
    }
}

/// A workflow in a temporary folder; runs go to `<tmp>/runs/<id>`.
struct Case {
    tmp: tempfile::TempDir,
    file: PathBuf,
    secret: Secret,
}

impl Case {
    /// `template`: a file of the fixtures folder; `providers` and `limits` replace its
    /// `@PROVIDERS@` and `@LIMITS@` lines.
    fn new(template: &str, secret: Secret, providers: &str, limits: &str) -> Case {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fixtures = Path::new(FIXTURES);
        let text = std::fs::read_to_string(fixtures.join(template)).expect("read template");
        assert!(text.contains("@PROVIDERS@") && text.contains("@LIMITS@"));
        let text = text
            .replace("@PROVIDERS@", providers)
            .replace("@LIMITS@", limits);
        let file = tmp.path().join("wf.rondo");
        std::fs::write(&file, text).expect("write workflow");
        std::fs::create_dir_all(tmp.path().join("prompts")).expect("mkdir");
        for name in ["system.tera", "ask.tera"] {
            std::fs::copy(
                fixtures.join("prompts").join(name),
                tmp.path().join("prompts").join(name),
            )
            .expect("copy prompt");
        }
        Case { tmp, file, secret }
    }

    fn one(secret: Secret, providers: &str) -> Case {
        Case::new("one_role.rondo.tmpl", secret, providers, "")
    }

    fn run_dir(&self, id: &str) -> PathBuf {
        self.tmp.path().join("runs").join(id)
    }

    async fn rondo(&self, args: &[&str], with_key: bool) -> Out {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_rondo"));
        cmd.args(args)
            .current_dir(self.tmp.path())
            .env("NO_COLOR", "1")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("GEMINI_API_KEY")
            .env_remove("RUST_BACKTRACE")
            .env_remove(&self.secret.var)
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null());
        if with_key {
            cmd.env(&self.secret.var, &self.secret.value);
        }
        let output = tokio::time::timeout(PROCESS_LIMIT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("rondo {args:?} did not finish in {PROCESS_LIMIT:?}"))
            .expect("spawn rondo");
        let out = Out {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        out.assert_no_panic();
        self.assert_no_secret(&out);
        out
    }

    async fn run(&self, id: &str, extra: &[&str]) -> Out {
        let runs = self.tmp.path().join("runs");
        let mut args = vec![
            "run",
            self.file.to_str().expect("utf-8 path"),
            "--run-dir",
            runs.to_str().expect("utf-8 path"),
            "--run-id",
            id,
        ];
        args.extend_from_slice(extra);
        self.rondo(&args, true).await
    }

    async fn resume(&self, id: &str) -> Out {
        let dir = self.run_dir(id);
        self.rondo(&["resume", dir.to_str().expect("utf-8 path")], true)
            .await
    }

    fn run_json(&self, id: &str) -> Value {
        let path = self.run_dir(id).join("run.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        serde_json::from_str(&text).expect("run.json is JSON")
    }

    fn events(&self, id: &str) -> Vec<Value> {
        let path = self.run_dir(id).join("events.jsonl");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l}: {e}")))
            .collect()
    }

    fn events_of(&self, id: &str, kind: &str) -> Vec<Value> {
        self.events(id)
            .into_iter()
            .filter(|e| e["event"] == kind)
            .collect()
    }

    /// The one `llm_response` of role `role` (the first if there are several).
    fn response(&self, id: &str, role: &str) -> Value {
        self.events_of(id, "llm_response")
            .into_iter()
            .find(|e| e["role"] == role)
            .unwrap_or_else(|| panic!("no llm_response for `{role}` in {:#?}", self.events(id)))
    }

    fn artifact(&self, id: &str, name: &str) -> String {
        std::fs::read_to_string(self.run_dir(id).join("workspace").join(name))
            .unwrap_or_else(|e| panic!("artifact {name}: {e}"))
    }

    /// The key appears in no file under the temporary folder (run directories included)
    /// and in none of the process's output.
    fn assert_no_secret(&self, out: &Out) {
        let secret = &self.secret.value;
        assert!(
            !out.stdout.contains(secret) && !out.stderr.contains(secret),
            "the API key leaked to the output:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        let mut stack = vec![self.tmp.path().to_path_buf()];
        let mut files = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                files += 1;
                let bytes = std::fs::read(&path).unwrap_or_default();
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "the API key leaked into {}",
                    path.display()
                );
            }
        }
        assert!(files >= 3, "the scan saw the workflow and its prompts");
    }
}

/// A provider block. `extra` holds more attribute lines.
fn provider(name: &str, kind: &str, model: &str, base_url: &str, extra: &str) -> String {
    format!(
        "provider {name} {{\n  kind = \"{kind}\"\n  model = \"{model}\"\n  base_url = \"{base_url}\"\n{extra}\n}}\n"
    )
}

/// The block of a profile served by `server`, keyed by the test's secret.
fn provider_for(name: &str, server: &Server, secret: &Secret, extra: &str) -> String {
    let kind = server.kind();
    let key = match &server.shared.expect.key {
        Some(_) => format!("  api_key_env = \"{}\"\n", secret.var),
        None => String::new(),
    };
    provider(
        name,
        kind.name(),
        kind.model(),
        &server.base_url(),
        &format!(
            "{key}  max_tokens = {}\n{extra}",
            server.shared.expect.max_tokens
        ),
    )
}

async fn server(kind: Kind, secret: &Secret, usage: (u64, u64)) -> Server {
    Server::start(
        Expect {
            kind,
            key: Some(secret.value.clone()),
            max_tokens: 256,
            native: false,
        },
        usage,
    )
    .await
}

fn approx(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// `attempts` as (profile, attempt, outcome, error_kind) for order assertions.
fn shape(attempts: &Value) -> Vec<(String, u64, String, String)> {
    attempts
        .as_array()
        .unwrap_or_else(|| panic!("attempts is not a list: {attempts}"))
        .iter()
        .map(|a| {
            (
                a["profile"].as_str().unwrap_or("?").to_string(),
                a["attempt"].as_u64().unwrap_or(0),
                a["outcome"].as_str().unwrap_or("?").to_string(),
                a["error_kind"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn att(profile: &str, attempt: u64, outcome: &str, kind: &str) -> (String, u64, String, String) {
    (
        profile.to_string(),
        attempt,
        outcome.to_string(),
        kind.to_string(),
    )
}

/// What the failed attempts of `attempts` were probably billed (input, output, cost):
/// each was sent and got no usable reply, so each carries an estimate, marked so.
fn billed(attempts: &Value) -> (u64, u64, f64) {
    let mut sum = (0, 0, 0.0);
    for a in attempts.as_array().into_iter().flatten() {
        if a["outcome"] == "success" {
            continue;
        }
        assert_eq!(a["usage_estimated"], true, "{a}");
        sum.0 += u(&a["usage"]["input_tokens"]);
        sum.1 += u(&a["usage"]["output_tokens"]);
        sum.2 += a["cost"].as_f64().unwrap_or(0.0);
    }
    assert!(sum.0 > 0, "{attempts}");
    sum
}

fn assert_finished(case: &Case, id: &str, out: &Out) -> Value {
    assert_eq!(out.code, 0, "the run failed:\n{}", out.stderr);
    let info = case.run_json(id);
    assert_eq!(info["status"], "finished", "{info:#}");
    assert_eq!(info["exit"], "success", "{info:#}");
    assert_eq!(info["exit_code"], 0, "{info:#}");
    info
}

/// Stopped at `error`, resumable: exit 2, `failed` in run.json, a checkpoint kept.
fn assert_failed_resumable(case: &Case, id: &str, out: &Out) -> Value {
    assert_eq!(out.code, 2, "expected the error exit:\n{}", out.stderr);
    let info = case.run_json(id);
    assert_eq!(info["status"], "failed", "{info:#}");
    assert_eq!(info["exit"], "error", "{info:#}");
    assert_eq!(info["exit_code"], 2, "{info:#}");
    if let Err(e) = rondo::run::rundir::read_checkpoint(&case.run_dir(id)) {
        panic!("no checkpoint to resume from: {e}");
    }
    info
}

// ====================================================================== every kind, happy path

/// One call on `kind`: exit 0, the reply in the artifact, tokens and the cost computed from
/// the profile's prices in run.json, one successful attempt in events.jsonl.
async fn happy_path(kind: Kind) {
    let secret = Secret::new();
    let srv = server(kind, &secret, (1200, 300)).await;
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  temperature = 0.2\n  timeout = 60s\n  price { input_per_1k = 0.002  output_per_1k = 0.006 }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(srv.count(), 1, "one request");

    let cost = 1.2 * 0.002 + 0.3 * 0.006;
    let t = &info["totals"];
    assert_eq!(u(&t["llm_calls"]), 1);
    assert_eq!(u(&t["input_tokens"]), 1200, "{t}");
    assert_eq!(u(&t["output_tokens"]), 300, "{t}");
    assert!(approx(&t["cost"], cost), "cost {} != {cost}", t["cost"]);
    // run.json names the key's variable, never its value.
    let main = info["providers"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "main"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(main["kind"], kind.name());
    assert_eq!(main["api_key_env"], case.secret.var.as_str());
    assert_eq!(main["base_url"], srv.base_url().as_str());

    assert_eq!(case.artifact("r1", "answer.txt"), kind.answer());
    let r = case.response("r1", "answer");
    assert_eq!(r["profile"], "main");
    assert_eq!(r["raw"], kind.answer().as_str());
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 1200, "output_tokens": 300})
    );
    assert!(approx(&r["cost"], cost));
    assert_eq!(shape(&r["attempts"]), vec![att("main", 1, "success", "")]);
    let a = &r["attempts"][0];
    assert_eq!(
        a["model"].as_str().map(|m| m.contains(kind.model())),
        Some(true),
        "{a}"
    );
    assert_eq!(a["role"], "answer");
    assert_eq!(a["usage"], r["usage"]);
    assert!(approx(&a["cost"], cost));
    assert!(a.get("retry_delay_ms").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_run_reports_tokens_and_cost() {
    happy_path(Kind::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_run_reports_tokens_and_cost() {
    happy_path(Kind::Compatible).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_run_counts_cache_tokens_as_input() {
    happy_path(Kind::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_run_counts_thinking_tokens_as_output() {
    happy_path(Kind::Gemini).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_run_behind_a_keyed_proxy_reports_tokens() {
    happy_path(Kind::Ollama).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_without_key_sends_no_auth_header() {
    let secret = Secret::new();
    let srv = Server::start(
        Expect {
            kind: Kind::Compatible,
            key: None,
            max_tokens: 64,
            native: false,
        },
        (10, 5),
    )
    .await;
    let block = provider_for("main", &srv, &secret, "");
    assert!(!block.contains("api_key_env"));
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(u(&info["totals"]["input_tokens"]), 10);
    assert_eq!(u(&info["totals"]["output_tokens"]), 5);
    // No price: the call costs nothing.
    assert!(approx(&info["totals"]["cost"], 0.0));
    assert_eq!(srv.count(), 1);
}

// ====================================================================== misbehaviour

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (100, 20)).await;
    srv.script([Reply::rate_limited("1")]);
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);

    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "rate_limited"),
            att("main", 2, "success", "")
        ]
    );
    let first = &r["attempts"][0];
    assert_eq!(first["status"], 429);
    // Retry-After replaces the (10 ms) backoff.
    assert_eq!(first["retry_delay_ms"], 1000, "{first}");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 2);
    let gap = reqs[1].at.duration_since(reqs[0].at);
    assert!(
        gap >= Duration::from_millis(990),
        "the retry came {gap:?} after the 429 with Retry-After: 1"
    );
    // Only the successful attempt is billed.
    assert_eq!(u(&info["totals"]["llm_calls"]), 1);
    assert_eq!(u(&info["totals"]["input_tokens"]), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_total_budget_moves_to_the_fallback() {
    let secret = Secret::new();
    let limited = server(Kind::OpenAi, &secret, (10, 1)).await;
    limited.always(Some(Reply::rate_limited("30")));
    let backup = server(Kind::Anthropic, &secret, (300, 30)).await;
    let providers = provider_for(
        "main",
        &limited,
        &secret,
        "  retry { max_attempts = 5  initial_backoff = 10ms  max_backoff = 20ms  total_budget = 3s }\n  fallback = [backup]",
    ) + &provider_for("backup", &backup, &secret, "");
    let case = Case::one(secret, &providers);
    let out = case.run("r1", &[]).await;
    limited.assert_valid();
    backup.assert_valid();
    assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "rate_limited"),
            att("backup", 1, "success", "")
        ]
    );
    assert!(
        r["attempts"][0].get("retry_delay_ms").is_none(),
        "a 30 s wait does not fit a 3 s budget: {}",
        r["attempts"][0]
    );
    assert_eq!(limited.count(), 1);
    assert_eq!(r["profile"], "backup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_with_exponential_backoff() {
    let secret = Secret::new();
    let srv = server(Kind::Anthropic, &secret, (400, 40)).await;
    // Anthropic's 529 "overloaded" is a server error too.
    srv.script([
        Reply::server_error(500),
        Reply::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
    ]);
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 40ms  max_backoff = 10s }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "server"),
            att("main", 2, "error", "server"),
            att("main", 3, "success", "")
        ]
    );
    let a = r["attempts"].as_array().cloned().unwrap_or_default();
    assert_eq!(a[0]["status"], 500);
    assert_eq!(a[1]["status"], 529);
    assert!(
        a[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("Overloaded")),
        "{}",
        a[1]
    );
    // Equal jitter: between half and all of initial_backoff × 2^(attempt−1).
    let d1 = u(&a[0]["retry_delay_ms"]);
    let d2 = u(&a[1]["retry_delay_ms"]);
    assert!((20..=40).contains(&d1), "first wait {d1} ms");
    assert!((40..=80).contains(&d2), "second wait {d2} ms");
    assert!(a[2].get("retry_delay_ms").is_none());
    assert_eq!(srv.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_slower_than_the_timeout_is_abandoned_and_retried() {
    let secret = Secret::new();
    let srv = server(Kind::Ollama, &secret, (50, 10)).await;
    srv.script([Reply::Slow(Duration::from_secs(60))]);
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  timeout = 2s\n  retry { max_attempts = 2  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "timeout"),
            att("main", 2, "success", "")
        ]
    );
    let first = &r["attempts"][0];
    assert!(first.get("status").is_none(), "{first}");
    assert!(
        first["latency_ms"].as_f64().is_some_and(|l| l >= 1990.0),
        "a timeout cannot come early: {first}"
    );
    assert_eq!(srv.count(), 2);
    assert_eq!(case.artifact("r1", "answer.txt"), Kind::Ollama.answer());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_body_is_retried_as_a_connection_failure() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (30, 3)).await;
    srv.script([Reply::truncated()]);
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "connection"),
            att("main", 2, "success", "")
        ]
    );
    assert_eq!(srv.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_body_on_the_last_attempt_stops_resumably() {
    let secret = Secret::new();
    let srv = server(Kind::Anthropic, &secret, (250, 25)).await;
    srv.always(Some(Reply::truncated()));
    let block = provider_for("main", &srv, &secret, "  retry { max_attempts = 1 }");
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_failed_resumable(&case, "r1", &out);
    let failed = case.events_of("r1", "llm_failed");
    assert_eq!(failed.len(), 1, "{:#?}", case.events("r1"));
    let attempts = shape(&failed[0]["attempts"]);
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!((attempts[0].1, attempts[0].2.as_str()), (1, "error"));
    assert!(
        failed[0]["attempts"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("end of file")),
        "{}",
        failed[0]["attempts"][0]
    );
    assert_eq!(srv.count(), 1);
    // The body was cut after the answer began: the attempt was probably billed.
    let (input, _, _) = billed(&failed[0]["attempts"]);

    srv.always(None);
    let out = case.resume("r1").await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(u(&info["totals"]["input_tokens"]), 250 + input);
    assert_eq!(case.artifact("r1", "answer.txt"), Kind::Anthropic.answer());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_is_not_retried_and_falls_back() {
    let secret = Secret::new();
    let bad = server(Kind::Compatible, &secret, (30, 3)).await;
    bad.always(Some(Reply::malformed()));
    let good = server(Kind::Gemini, &secret, (70, 30)).await;
    let providers = provider_for(
        "main",
        &bad,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }\n  fallback = [backup]\n  price { input_per_1k = 1.0  output_per_1k = 1.0 }",
    ) + &provider_for(
        "backup",
        &good,
        &secret,
        "  price { input_per_1k = 0.01  output_per_1k = 0.02 }",
    );
    let case = Case::one(secret, &providers);
    let out = case.run("r1", &[]).await;
    bad.assert_valid();
    good.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "malformed_response"),
            att("backup", 1, "success", "")
        ]
    );
    assert!(r["attempts"][0].get("retry_delay_ms").is_none());
    assert_eq!(r["profile"], "backup");
    assert_eq!(
        bad.count(),
        1,
        "a malformed reply is not retried on its profile"
    );
    assert_eq!(good.count(), 1);
    // Priced with the profile that answered, plus the malformed reply, which was made
    // (and billed) though it could not be read.
    let (_, _, malformed) = billed(&r["attempts"]);
    let cost = 0.07 * 0.01 + 0.03 * 0.02 + malformed;
    assert!(approx(&info["totals"]["cost"], cost), "{}", info["totals"]);
    assert_eq!(case.artifact("r1", "answer.txt"), Kind::Gemini.answer());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_used_up_stop_the_run_resumably_and_resume_succeeds() {
    let secret = Secret::new();
    let srv = server(Kind::Gemini, &secret, (80, 20)).await;
    srv.always(Some(Reply::server_error(503)));
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 2  initial_backoff = 10ms  max_backoff = 20ms }\n  price { input_per_1k = 0.5  output_per_1k = 1.0 }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_failed_resumable(&case, "r1", &out);
    assert_eq!(u(&info["totals"]["llm_calls"]), 0);
    assert!(approx(&info["totals"]["cost"], 0.0));
    assert!(
        out.stderr.contains("503") || info["reason"].as_str().is_some_and(|r| r.contains("503")),
        "the failure names the status:\n{}\n{info:#}",
        out.stderr
    );
    let failed = case.events_of("r1", "llm_failed");
    assert_eq!(failed.len(), 1, "{:#?}", case.events("r1"));
    assert_eq!(failed[0]["role"], "answer");
    assert_eq!(
        shape(&failed[0]["attempts"]),
        vec![
            att("main", 1, "error", "server"),
            att("main", 2, "error", "server")
        ]
    );
    assert_eq!(failed[0]["attempts"][0]["status"], 503);
    assert!(failed[0]["attempts"][0]["retry_delay_ms"].is_u64());
    assert!(failed[0]["attempts"][1].get("retry_delay_ms").is_none());
    assert!(case.events_of("r1", "llm_response").is_empty());
    assert!(!case.run_dir("r1").join("workspace/answer.txt").exists());
    assert_eq!(srv.count(), 2);

    // The server recovers; resuming without the key is refused up front...
    srv.always(None);
    let dir = case.run_dir("r1");
    let out = case
        .rondo(&["resume", dir.to_str().expect("utf-8")], false)
        .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains(&case.secret.var), "{}", out.stderr);
    assert_eq!(srv.count(), 2, "no call without the key");
    assert_eq!(case.run_json("r1")["status"], "failed");
    // ...and with it the run continues where it stopped.
    let out = case.resume("r1").await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(srv.count(), 3);
    let t = &info["totals"];
    assert_eq!((u(&t["input_tokens"]), u(&t["output_tokens"])), (80, 20));
    assert!(approx(&t["cost"], 0.08 * 0.5 + 0.02 * 1.0), "{t}");
    let kinds: Vec<String> = case
        .events("r1")
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_string())
        .collect();
    let resumed = kinds.iter().position(|k| k == "run_resumed");
    let answered = kinds.iter().position(|k| k == "llm_response");
    assert!(
        resumed.is_some() && answered > resumed,
        "run_resumed then llm_response: {kinds:?}"
    );
    let r = case.response("r1", "answer");
    assert_eq!(shape(&r["attempts"]), vec![att("main", 1, "success", "")]);
    assert_eq!(case.artifact("r1", "answer.txt"), Kind::Gemini.answer());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_without_fallback_stops_resumably() {
    let secret = Secret::new();
    let srv = server(Kind::Ollama, &secret, (12, 8)).await;
    srv.always(Some(Reply::malformed()));
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_failed_resumable(&case, "r1", &out);
    let failed = case.events_of("r1", "llm_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(
        shape(&failed[0]["attempts"]),
        vec![att("main", 1, "error", "malformed_response")]
    );
    assert_eq!(srv.count(), 1);
    let (input, _, _) = billed(&failed[0]["attempts"]);

    srv.always(None);
    let out = case.resume("r1").await;
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(u(&info["totals"]["input_tokens"]), 12 + input);
    assert_eq!(case.artifact("r1", "answer.txt"), Kind::Ollama.answer());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_used_up_stop_the_run_resumably() {
    let secret = Secret::new();
    let srv = server(Kind::Anthropic, &secret, (300, 30)).await;
    srv.always(Some(Reply::Slow(Duration::from_secs(60))));
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  timeout = 1s\n  retry { max_attempts = 2  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_failed_resumable(&case, "r1", &out);
    let failed = case.events_of("r1", "llm_failed");
    assert_eq!(
        shape(&failed[0]["attempts"]),
        vec![
            att("main", 1, "error", "timeout"),
            att("main", 2, "error", "timeout")
        ]
    );
    // Both requests were sent: their input counts, estimated.
    let (input, _, _) = billed(&failed[0]["attempts"]);
    srv.always(None);
    let out = case.resume("r1").await;
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(u(&info["totals"]["input_tokens"]), 300 + input);
}

// ====================================================================== fallbacks, circuit breaker

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_ollama_falls_back_to_an_openai_compatible_server() {
    let secret = Secret::new();
    let port = dead_port().await;
    let compat = server(Kind::Compatible, &secret, (40, 4)).await;
    let providers = provider(
        "main",
        "ollama",
        "llama3.2",
        &format!("http://127.0.0.1:{port}"),
        "  retry { max_attempts = 2  initial_backoff = 10ms  max_backoff = 20ms }\n  fallback = [compat, scripted]",
    ) + &provider_for("compat", &compat, &secret, "");
    let case = Case::one(secret, &providers);
    let out = case.run("r1", &[]).await;
    compat.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "connection"),
            att("main", 2, "error", "connection"),
            att("compat", 1, "success", "")
        ]
    );
    assert_eq!(r["profile"], "compat");
    assert_eq!(compat.count(), 1);
    assert_eq!(u(&info["totals"]["input_tokens"]), 40);
    assert_eq!(case.artifact("r1", "answer.txt"), Kind::Compatible.answer());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_failing_servers_ends_on_the_scripted_provider() {
    let secret = Secret::new();
    let port = dead_port().await;
    let compat = server(Kind::Compatible, &secret, (40, 4)).await;
    compat.always(Some(Reply::server_error(500)));
    let providers = provider(
        "main",
        "ollama",
        "llama3.2",
        &format!("http://127.0.0.1:{port}"),
        "  retry { max_attempts = 1 }\n  fallback = [compat, scripted]",
    ) + &provider_for(
        "compat",
        &compat,
        &secret,
        "  retry { max_attempts = 2  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &providers);
    let script = Path::new(FIXTURES).join("script.yaml");
    let out = case
        .run("r1", &["--script", script.to_str().expect("utf-8")])
        .await;
    compat.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "connection"),
            att("compat", 1, "error", "server"),
            att("compat", 2, "error", "server"),
            att("scripted", 1, "success", "")
        ]
    );
    assert_eq!(r["profile"], "scripted");
    assert_eq!(compat.count(), 2);
    assert_eq!(case.artifact("r1", "answer.txt"), "scripted says: Oslo");
    assert!(approx(&info["totals"]["cost"], 0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_skips_the_profile_on_the_next_call() {
    let secret = Secret::new();
    let primary = server(Kind::OpenAi, &secret, (10, 1)).await;
    primary.always(Some(Reply::server_error(502)));
    let backup = server(Kind::Ollama, &secret, (60, 6)).await;
    let providers = provider_for(
        "main",
        &primary,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }\n  circuit_breaker_threshold = 2\n  fallback = [backup]",
    ) + &provider_for("backup", &backup, &secret, "");
    let case = Case::new("two_roles.rondo.tmpl", secret, &providers, "");
    let out = case.run("r1", &[]).await;
    primary.assert_valid();
    backup.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    // Two failures open the circuit: the third attempt is not made.
    let first = case.response("r1", "first");
    assert_eq!(
        shape(&first["attempts"]),
        vec![
            att("main", 1, "error", "server"),
            att("main", 2, "error", "server"),
            att("main", 3, "circuit_open", "circuit_open"),
            att("backup", 1, "success", "")
        ]
    );
    // The next call fails fast on the open circuit (cooldown 30 s by default).
    let second = case.response("r1", "second");
    assert_eq!(
        shape(&second["attempts"]),
        vec![
            att("main", 1, "circuit_open", "circuit_open"),
            att("backup", 1, "success", "")
        ]
    );
    assert!(
        second["attempts"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("circuit open for profile `main`")),
        "{}",
        second["attempts"][0]
    );
    assert_eq!(primary.count(), 2, "no request while the circuit is open");
    assert_eq!(backup.count(), 2);
    assert_eq!(u(&info["totals"]["llm_calls"]), 2);
    assert_eq!(u(&info["totals"]["input_tokens"]), 120);
}

// ====================================================================== budgets

fn assert_limit(case: &Case, id: &str, out: &Out) -> Value {
    assert_eq!(out.code, 3, "expected the limit exit:\n{}", out.stderr);
    let info = case.run_json(id);
    assert_eq!(info["exit"], "limit", "{info:#}");
    assert_eq!(info["exit_code"], 3, "{info:#}");
    info
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_stops_before_the_call_that_could_exceed_it() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (1000, 500)).await;
    // A call costs 1.0 × 0.01 + 0.5 × 0.03 = 0.025; the worst case of the next one is
    // about 0.256 × 0.03 = 0.0077 more, past 0.03.
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  price { input_per_1k = 0.01  output_per_1k = 0.03 }",
    );
    let case = Case::new(
        "two_roles.rondo.tmpl",
        secret,
        &block,
        "    max_cost = 0.03",
    );
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_limit(&case, "r1", &out);
    assert_eq!(srv.count(), 1, "the second call is not made");
    assert!(approx(&info["totals"]["cost"], 0.025), "{}", info["totals"]);
    assert!(
        info["reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_cost")),
        "{info:#}"
    );
    assert_eq!(case.events_of("r1", "llm_response").len(), 1);
    assert!(!case.run_dir("r1").join("workspace/second.txt").exists());
}

/// An attempt that timed out after its request was sent was probably billed: its input,
/// estimated from the request, counts towards `max_cost`. The first role's call times out
/// once, then costs 0.001; the second call's worst case is its input (output is free
/// here). Free, the timeout would leave room for it (0.001 + W ≤ 0.035 for the ~24 tokens
/// of the request, W = 0.024); counted, it does not (0.001 + 2W > 0.035).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billed_timeout_counts_towards_max_cost() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (1, 1)).await;
    srv.script([Reply::Slow(Duration::from_secs(60))]);
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  timeout = 1s\n  retry { max_attempts = 2  initial_backoff = 10ms  max_backoff = 20ms }\n  price { input_per_1k = 1.0  output_per_1k = 0.0 }",
    );
    let case = Case::new(
        "two_roles.rondo.tmpl",
        secret,
        &block,
        "    max_cost = 0.035",
    );
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_limit(&case, "r1", &out);
    assert_eq!(srv.count(), 2, "the second role's call is not made");
    let first = case.response("r1", "first");
    assert_eq!(
        shape(&first["attempts"]),
        vec![
            att("main", 1, "error", "timeout"),
            att("main", 2, "success", "")
        ]
    );
    let billed = &first["attempts"][0];
    assert_eq!(billed["usage_estimated"], true, "{billed}");
    let estimated = u(&billed["usage"]["input_tokens"]);
    assert!((17..=34).contains(&estimated), "{billed}");
    assert!(
        approx(&billed["cost"], estimated as f64 / 1000.0),
        "{billed}"
    );
    let t = &info["totals"];
    assert_eq!(u(&t["input_tokens"]), 1 + estimated, "{t}");
    assert!(approx(&t["cost"], 0.001 + estimated as f64 / 1000.0), "{t}");
    assert_eq!(u(&t["llm_calls"]), 1, "{t}");
    assert!(
        info["reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_cost")),
        "{info:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_below_one_call_makes_no_request() {
    let secret = Secret::new();
    let srv = server(Kind::Anthropic, &secret, (1000, 500)).await;
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  price { input_per_1k = 0.01  output_per_1k = 0.03 }",
    );
    let case = Case::new(
        "one_role.rondo.tmpl",
        secret,
        &block,
        "    max_cost = 0.001",
    );
    let out = case.run("r1", &[]).await;
    let info = assert_limit(&case, "r1", &out);
    assert_eq!(srv.count(), 0);
    assert_eq!(u(&info["totals"]["llm_calls"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_spent_stops_the_run_before_the_next_call() {
    let secret = Secret::new();
    let srv = server(Kind::Gemini, &secret, (900, 300)).await;
    let block = provider_for("main", &srv, &secret, "");
    let case = Case::new(
        "two_roles.rondo.tmpl",
        secret,
        &block,
        "    max_tokens = 1000",
    );
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_limit(&case, "r1", &out);
    assert_eq!(srv.count(), 1);
    assert_eq!(u(&info["totals"]["input_tokens"]), 900);
    assert_eq!(u(&info["totals"]["output_tokens"]), 300);
    assert!(
        info["reason"]
            .as_str()
            .is_some_and(|r| r.contains("max_tokens")),
        "{info:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_stops_before_the_call_that_could_exceed_it() {
    let secret = Secret::new();
    // First call: 300 tokens. The second could use ~20 input + 256 output: past 500.
    let srv = server(Kind::Compatible, &secret, (200, 100)).await;
    let block = provider_for("main", &srv, &secret, "");
    let case = Case::new(
        "two_roles.rondo.tmpl",
        secret,
        &block,
        "    max_tokens = 500",
    );
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_limit(&case, "r1", &out);
    assert_eq!(srv.count(), 1, "the second call could go past max_tokens");
    assert_eq!(
        u(&info["totals"]["input_tokens"]) + u(&info["totals"]["output_tokens"]),
        300
    );
}

// ====================================================================== imported profiles

/// A workflow whose profile `main` comes from an imported YAML providers file.
fn case_with_import(secret: Secret, yaml: &str) -> Case {
    let case = Case::one(secret, "");
    std::fs::write(case.tmp.path().join("providers.yaml"), yaml).expect("write yaml");
    let text = std::fs::read_to_string(&case.file).expect("read workflow");
    std::fs::write(
        &case.file,
        format!("import providers \"providers.yaml\"\n{text}"),
    )
    .expect("write workflow");
    case
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_imported_from_yaml_serves_the_run() {
    let secret = Secret::new();
    let srv = server(Kind::Anthropic, &secret, (1000, 100)).await;
    let yaml = format!(
        "profiles:\n  - name: main\n    kind: anthropic\n    model: {}\n    base_url: {}\n    api_key_env: {}\n    max_tokens: 256\n    retry: {{ max_attempts: 2, initial_backoff: 10ms, max_backoff: 20ms }}\n    price: {{ input_per_1k: 0.003, output_per_1k: 0.015 }}\n",
        Kind::Anthropic.model(),
        srv.base_url(),
        secret.var
    );
    srv.script([Reply::server_error(503)]);
    let case = case_with_import(secret, &yaml);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    assert!(
        approx(&info["totals"]["cost"], 0.003 + 0.1 * 0.015),
        "{}",
        info["totals"]
    );
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "server"),
            att("main", 2, "success", "")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_file_in_the_documented_format_can_be_imported() {
    let secret = Secret::new();
    let srv = server(Kind::Compatible, &secret, (10, 10)).await;
    let yaml = format!(
        "profiles:\n  - name: main\n    kind: openai-compatible\n    model: {}\n    base_url: {}\n    api_key_env: {}\n    max_tokens: 256\n    circuit_breaker_threshold: 5\n    circuit_breaker_cooldown: 30s\n",
        Kind::Compatible.model(),
        srv.base_url(),
        secret.var
    );
    let case = case_with_import(secret, &yaml);
    let file = case.file.to_str().expect("utf-8").to_string();
    let out = case.rondo(&["check", "--offline", &file], true).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_finished(&case, "r1", &out);
    assert_eq!(srv.count(), 1);
}

// ====================================================================== missing keys

/// A profile `main` at `url` whose key is in the variable `var`.
fn keyed(kind: Kind, url: &str, var: &str) -> String {
    provider(
        "main",
        kind.name(),
        kind.model(),
        url,
        &format!("  api_key_env = \"{var}\""),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_reported_by_check_and_stops_run_at_start() {
    let secret = Secret::new();
    let srv = server(Kind::Anthropic, &secret, (1, 1)).await;
    let var = secret.var.clone();
    let case = Case::one(secret, &keyed(Kind::Anthropic, &srv.base_url(), &var));
    let file = case.file.to_str().expect("utf-8").to_string();

    // The file is sound: a key not set is a warning of check, an error with
    // --deny-warnings (CI), and run refuses to start (below).
    let out = case.rondo(&["check", &file], false).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("rondo::env::missing_key"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(&var), "{}", out.stderr);
    // No other profile in the chain: the warning says the run will not start.
    assert!(
        out.stderr.contains("`rondo run` will not start without it")
            && !out.stderr.contains("its calls go to"),
        "{}",
        out.stderr
    );
    let out = case
        .rondo(&["check", "--deny-warnings", &file], false)
        .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let out = case
        .rondo(&["check", "--format", "json", &file], false)
        .await;
    assert_eq!(out.code, 0);
    let report: Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(
        report[0]["diagnostics"][0]["code"], "rondo::env::missing_key",
        "{report:#}"
    );
    assert_eq!(report[0]["diagnostics"][0]["severity"], "warning");
    // --offline skips the environment; with the key set the file is clean.
    assert_eq!(
        case.rondo(&["check", "--offline", &file], false).await.code,
        0
    );
    assert_eq!(case.rondo(&["check", &file], true).await.code, 0);

    let runs = case.tmp.path().join("runs");
    let out = case
        .rondo(
            &[
                "run",
                &file,
                "--run-dir",
                runs.to_str().expect("utf-8"),
                "--run-id",
                "r1",
            ],
            false,
        )
        .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&var) && out.stderr.contains("`main`"),
        "the error names the variable and the profile:\n{}",
        out.stderr
    );
    assert_eq!(srv.count(), 0, "no call is made");
    assert!(
        !case.run_dir("r1").join("run.json").exists(),
        "the run never started"
    );
}

/// docs/providers.md: a profile whose key is missing is skipped for its fallbacks. A chain
/// with a profile that can be called starts (and `check` warns); only a chain where no
/// profile can be called refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_of_a_fallback_is_skipped_and_only_a_chain_without_any_key_stops() {
    let secret = Secret::new();
    let srv = server(Kind::Compatible, &secret, (1, 1)).await;
    let backup_var = format!("{}_BACKUP", secret.var);
    let providers = provider_for("main", &srv, &secret, "  fallback = [backup]")
        + &provider(
            "backup",
            "gemini",
            "gemini-2.5-flash",
            "http://127.0.0.1:9/v1beta",
            &format!("  api_key_env = \"{backup_var}\""),
        );
    let case = Case::one(secret, &providers);
    let out = case.run("r1", &[]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(srv.count(), 1, "main served the call");
    let file = case.file.to_str().expect("utf-8").to_string();
    let out = case.rondo(&["check", &file], true).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("rondo::env::missing_key")
            && out.stderr.contains(&backup_var)
            && out.stderr.contains("its calls go to"),
        "{}",
        out.stderr
    );
    let out = case.rondo(&["check", "--deny-warnings", &file], true).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    // Neither key: no profile of the chain can be called.
    let out = case.run("r2", &["--provider", "backup"]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&backup_var) && out.stderr.contains("`backup`"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_profile_without_api_key_env_needs_openai_api_key_at_run() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (1, 1)).await;
    let block = provider("main", "openai", "gpt-4o-mini", &srv.base_url(), "");
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("OPENAI_API_KEY"), "{}", out.stderr);
    assert_eq!(srv.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_the_default_key_variable_of_a_hosted_kind() {
    let secret = Secret::new();
    let block = provider("main", "openai", "gpt-4o-mini", "http://127.0.0.1:9/v1", "");
    let case = Case::one(secret, &block);
    let file = case.file.to_str().expect("utf-8").to_string();
    let out = case.rondo(&["check", "--deny-warnings", &file], true).await;
    assert_eq!(
        out.code, 1,
        "check --deny-warnings passed a run that cannot start:\n{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("rondo::env::missing_key") && out.stderr.contains("OPENAI_API_KEY"),
        "{}",
        out.stderr
    );
}

// ====================================================================== secrets

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_echoed_by_the_server_is_redacted_everywhere() {
    let secret = Secret::new();
    let srv = server(Kind::Compatible, &secret, (5, 5)).await;
    // Some servers quote the key in errors, in messages and in non-JSON bodies.
    let echo_json =
        json!({"error": {"message": format!("Incorrect API key provided: {}", secret.value)}})
            .to_string();
    srv.script([
        Reply::status(500, &echo_json),
        Reply::status(
            502,
            &format!("<html>bad gateway for {}</html>", secret.value),
        ),
    ]);
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await; // `rondo` scans for the key after every command
    srv.assert_valid();
    assert_finished(&case, "r1", &out);
    let r = case.response("r1", "answer");
    assert_eq!(
        shape(&r["attempts"]),
        vec![
            att("main", 1, "error", "server"),
            att("main", 2, "error", "server"),
            att("main", 3, "success", "")
        ]
    );
    assert!(
        r["attempts"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("Incorrect API key provided: [REDACTED]")),
        "{}",
        r["attempts"][0]
    );
    // Showing the run (prompts and replies in full) and listing runs leak nothing either.
    let dir = case.run_dir("r1");
    let out = case
        .rondo(&["replay", dir.to_str().expect("utf-8"), "--full"], true)
        .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains(QUESTION), "{}", out.stdout);
    let runs = case.tmp.path().join("runs");
    let out = case
        .rondo(&["runs", "--run-dir", runs.to_str().expect("utf-8")], true)
        .await;
    assert!(out.stdout.contains("r1"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_failure_echoing_the_key_stops_resumably_without_leaking_it() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (5, 5)).await;
    let echo = json!({"error": {"message": format!("Incorrect API key provided: {}", secret.value),
        "type": "invalid_request_error", "code": "invalid_api_key"}})
    .to_string();
    srv.always(Some(Reply::status(401, &echo)));
    let block = provider_for(
        "main",
        &srv,
        &secret,
        "  retry { max_attempts = 3  initial_backoff = 10ms  max_backoff = 20ms }",
    );
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_failed_resumable(&case, "r1", &out);
    let failed = case.events_of("r1", "llm_failed");
    assert_eq!(
        shape(&failed[0]["attempts"]),
        vec![att("main", 1, "error", "auth")],
        "an auth failure is not retried"
    );
    assert_eq!(failed[0]["attempts"][0]["status"], 401);
    assert_eq!(srv.count(), 1);
    // The key is fixed (the server accepts it now): resume finishes the run.
    srv.always(None);
    let out = case.resume("r1").await;
    assert_finished(&case, "r1", &out);
}

// ====================================================================== native tool calling
// `native.rondo.tmpl`: the model is offered `lookup {city}` and `population {city, year:
// int}`. Turn 1 asks for both at once, `population` with a bad year; turn 2 corrects it;
// turn 3 answers. Each server checks, in its protocol's own form, the tools it is offered
// and the whole conversation it is sent back: the assistant turns with their calls and
// one result per call, matched by id (or by name where the protocol has no ids).

/// A request's conversation, read back from the wire form of its protocol.
#[derive(Debug, PartialEq)]
enum Turn {
    /// `user` or `assistant` text.
    Text(&'static str, String),
    /// An assistant turn's calls: (id, tool, arguments).
    Calls(Vec<(String, String, Value)>),
    /// A result: (the call's id, or its tool's name where the protocol has no ids; content).
    Result(String, String),
}

/// The call ids each protocol's server gives (Gemini and Ollama give none).
fn call_id(kind: Kind, n: usize) -> Option<String> {
    match kind {
        Kind::OpenAi | Kind::Compatible => Some(format!("call_{n}")),
        Kind::Anthropic => Some(format!("toolu_{n}")),
        Kind::Gemini | Kind::Ollama => None,
    }
}

/// The calls of turn `turn` (1-based): both tools at once, then the corrected one.
fn native_calls(turn: usize) -> Vec<(&'static str, Value)> {
    match turn {
        1 => vec![
            ("lookup", json!({"city": "Oslo"})),
            ("population", json!({"city": "Oslo", "year": "now"})),
        ],
        2 => vec![("population", json!({"city": "Oslo", "year": 2024}))],
        _ => vec![],
    }
}

fn arguments_object(v: &Value, what: &str) -> Result<Value, String> {
    match v {
        Value::String(s) => serde_json::from_str(s).map_err(|e| format!("{what}: {e}")),
        Value::Object(_) => Ok(v.clone()),
        other => Err(format!("{what} is {other}")),
    }
}

/// Reads the conversation out of a request, checking each protocol's own shapes, and
/// checks the tools offered.
fn native_turns(kind: Kind, b: &Value) -> Result<Vec<Turn>, String> {
    let mut turns = Vec::new();
    let str_of = |v: &Value, what: &str| {
        v.as_str()
            .map(str::to_string)
            .ok_or(format!("{what} is not a string: {v}"))
    };
    let tools = match kind {
        Kind::Gemini => b["tools"][0]["functionDeclarations"].clone(),
        _ => b["tools"].clone(),
    };
    let tools = tools.as_array().ok_or("no tools offered")?;
    check(tools.len() == 2, "two tools")?;
    for (tool, name) in tools.iter().zip(["lookup", "population"]) {
        let (fname, schema) = match kind {
            Kind::OpenAi | Kind::Compatible | Kind::Ollama => {
                check(tool["type"] == "function", "a tool is a function")?;
                (&tool["function"]["name"], &tool["function"]["parameters"])
            }
            Kind::Anthropic => (&tool["name"], &tool["input_schema"]),
            Kind::Gemini => (&tool["name"], &tool["parameters"]),
        };
        check(fname == name, format!("tool {fname}"))?;
        check(
            schema["properties"]["city"]["type"]
                .as_str()
                .is_some_and(|t| t.eq_ignore_ascii_case("string")),
            format!("the schema of {name}: {schema}"),
        )?;
        let required = schema["required"].as_array().ok_or("required")?;
        check(
            required.contains(&json!("city")),
            format!("{name} requires city"),
        )?;
    }
    match kind {
        Kind::OpenAi | Kind::Compatible | Kind::Ollama => {
            let msgs = b["messages"].as_array().ok_or("messages")?;
            check(
                msgs.first().is_some_and(|m| m["role"] == "system"),
                "system first",
            )?;
            for m in &msgs[1..] {
                match m["role"].as_str() {
                    Some("user") => {
                        turns.push(Turn::Text("user", str_of(&m["content"], "content")?))
                    }
                    Some("assistant") => match m["tool_calls"].as_array() {
                        Some(calls) => {
                            let mut out = Vec::new();
                            for c in calls {
                                let f = &c["function"];
                                let args = if kind == Kind::Ollama {
                                    check(
                                        f["arguments"].is_object(),
                                        "Ollama's arguments are an object",
                                    )?;
                                    f["arguments"].clone()
                                } else {
                                    check(c["type"] == "function", "a call's type is function")?;
                                    check(
                                        f["arguments"].is_string(),
                                        "OpenAI's arguments are a JSON string",
                                    )?;
                                    arguments_object(&f["arguments"], "arguments")?
                                };
                                let id = if kind == Kind::Ollama {
                                    String::new()
                                } else {
                                    str_of(&c["id"], "id")?
                                };
                                out.push((id, str_of(&f["name"], "name")?, args));
                            }
                            turns.push(Turn::Calls(out));
                        }
                        None => {
                            turns.push(Turn::Text("assistant", str_of(&m["content"], "content")?))
                        }
                    },
                    Some("tool") => {
                        let to = if kind == Kind::Ollama {
                            str_of(&m["tool_name"], "tool_name")?
                        } else {
                            str_of(&m["tool_call_id"], "tool_call_id")?
                        };
                        turns.push(Turn::Result(to, str_of(&m["content"], "content")?));
                    }
                    other => return Err(format!("a message of role {other:?}")),
                }
            }
        }
        Kind::Anthropic => {
            let msgs = b["messages"].as_array().ok_or("messages")?;
            for (i, m) in msgs.iter().enumerate() {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                check(m["role"] == role, "user and assistant turns alternate")?;
                let blocks = match &m["content"] {
                    Value::String(s) => vec![json!({"type": "text", "text": s})],
                    Value::Array(a) => a.clone(),
                    other => return Err(format!("content {other}")),
                };
                let mut calls = Vec::new();
                for bl in &blocks {
                    match bl["type"].as_str() {
                        Some("text") => turns.push(Turn::Text(role, str_of(&bl["text"], "text")?)),
                        Some("tool_use") if role == "assistant" => {
                            check(bl["input"].is_object(), "tool_use input is an object")?;
                            calls.push((
                                str_of(&bl["id"], "id")?,
                                str_of(&bl["name"], "name")?,
                                bl["input"].clone(),
                            ));
                        }
                        Some("tool_result") if role == "user" => {
                            let content = str_of(&bl["content"], "tool_result content")?;
                            // A refused or failed call's result says so.
                            let failed = content.starts_with("⛔️validation_error")
                                || content.starts_with("error (");
                            check(
                                bl.get("is_error").and_then(Value::as_bool).unwrap_or(false)
                                    == failed,
                                format!("is_error of a tool_result: {bl}"),
                            )?;
                            turns.push(Turn::Result(
                                str_of(&bl["tool_use_id"], "tool_use_id")?,
                                content,
                            ))
                        }
                        other => return Err(format!("a {role} block of type {other:?}")),
                    }
                }
                if !calls.is_empty() {
                    turns.push(Turn::Calls(calls));
                }
            }
        }
        Kind::Gemini => {
            for c in b["contents"].as_array().ok_or("contents")? {
                let role = c["role"].as_str().unwrap_or("");
                let mut calls = Vec::new();
                for p in c["parts"].as_array().ok_or("parts")? {
                    check(
                        p.as_object().is_some_and(|o| o.len() == 1),
                        format!("a part has one field: {p}"),
                    )?;
                    if let Some(t) = p["text"].as_str() {
                        turns.push(Turn::Text(
                            if role == "model" { "assistant" } else { "user" },
                            t.to_string(),
                        ));
                    } else if p["functionCall"].is_object() && role == "model" {
                        let f = &p["functionCall"];
                        check(f["args"].is_object(), "functionCall args is an object")?;
                        calls.push((
                            String::new(),
                            str_of(&f["name"], "name")?,
                            f["args"].clone(),
                        ));
                    } else if p["functionResponse"].is_object() && role == "user" {
                        let f = &p["functionResponse"];
                        check(
                            f["response"].is_object(),
                            "functionResponse response is an object",
                        )?;
                        // A refused call's result goes under `error`, others under `output`.
                        let failed = f["response"].to_string().contains("⛔️validation_error");
                        let key = if failed { "error" } else { "output" };
                        check(
                            f["response"].as_object().is_some_and(|o| o.len() == 1)
                                && f["response"].get(key).is_some(),
                            format!("functionResponse of a {key}: {f}"),
                        )?;
                        turns.push(Turn::Result(
                            str_of(&f["name"], "name")?,
                            f["response"].to_string(),
                        ));
                    } else {
                        return Err(format!("a {role} part {p}"));
                    }
                }
                if !calls.is_empty() {
                    turns.push(Turn::Calls(calls));
                }
            }
        }
    }
    Ok(turns)
}

/// The conversation a request of turn `turn` must carry: the question, then per earlier
/// turn its calls and one result per call (a refused call's result says why).
fn validate_native(e: &Expect, r: &Recorded) -> Result<(), String> {
    check(r.method == "POST", format!("method {}", r.method))?;
    let b = r.json();
    check(b.to_string().contains(SYSTEM), "the system prompt is sent")?;
    let turns = native_turns(e.kind, &b)?;
    check(
        turns.first() == Some(&Turn::Text("user", QUESTION.to_string())),
        format!("the conversation starts with the question: {turns:?}"),
    )?;
    let mut at = 1;
    let mut n = 0;
    for turn in 1.. {
        if at == turns.len() {
            break;
        }
        let Some(Turn::Calls(calls)) = turns.get(at) else {
            return Err(format!(
                "turn {turn}: the assistant's calls, got {:?}",
                turns.get(at)
            ));
        };
        let wanted = native_calls(turn);
        check(
            calls.len() == wanted.len(),
            format!("turn {turn}: {} calls", wanted.len()),
        )?;
        for (i, ((id, name, args), (want_name, want_args))) in calls.iter().zip(&wanted).enumerate()
        {
            check(
                name == want_name && args == want_args,
                format!("turn {turn}: call {name} {args}"),
            )?;
            if let Some(want) = call_id(e.kind, n + i + 1) {
                check(*id == want, format!("call id {id}, sent {want}"))?;
            }
        }
        for (i, (want_name, want_args)) in wanted.iter().enumerate() {
            let Some(Turn::Result(to, content)) = turns.get(at + 1 + i) else {
                return Err(format!("turn {turn}: a result per call: {turns:?}"));
            };
            let want_to = call_id(e.kind, n + i + 1).unwrap_or(want_name.to_string());
            check(*to == want_to, format!("result for {to}, not {want_to}"))?;
            let refused = want_args["year"] == "now";
            let fits = if refused {
                content.contains("⛔️validation_error") && content.contains("year")
            } else {
                // `echo` prints the arguments back.
                content.contains("Oslo") && (want_name != &"population" || content.contains("2024"))
            };
            check(
                fits,
                format!("turn {turn}: the result of {want_name}: {content}"),
            )?;
        }
        n += wanted.len();
        at += 1 + wanted.len();
    }
    Ok(())
}

/// Calls of the next turn (the number of results sent so far says which), or the answer.
fn respond_native(e: &Expect, (input, output): (u64, u64), r: &Recorded) -> String {
    let b = r.json();
    let turns = native_turns(e.kind, &b).unwrap_or_default();
    let done = turns
        .iter()
        .filter(|t| matches!(t, Turn::Result(..)))
        .count();
    let turn = match done {
        0 => 1,
        2 => 2,
        _ => 3,
    };
    let first = if turn == 2 { 3 } else { 1 };
    let calls: Vec<(Option<String>, &str, Value)> = native_calls(turn)
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| (call_id(e.kind, first + i), name, args))
        .collect();
    let text = if calls.is_empty() { "Oslo" } else { "" };
    match e.kind {
        Kind::OpenAi | Kind::Compatible => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}))
                .collect();
            let message = if calls.is_empty() {
                json!({"role": "assistant", "content": text, "refusal": null})
            } else {
                json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": tool_calls})
            };
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
                "model": b["model"],
                "choices": [{"index": 0, "message": message, "logprobs": null,
                    "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
            })
        }
        Kind::Anthropic => {
            let mut content: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| json!({"type": "tool_use", "id": id, "name": name, "input": args}))
                .collect();
            if calls.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "content": content,
                "model": b["model"], "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" },
                "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": output},
            })
        }
        Kind::Gemini => {
            let mut parts: Vec<Value> = calls
                .iter()
                .map(|(_, name, args)| json!({"functionCall": {"name": name, "args": args}}))
                .collect();
            if calls.is_empty() {
                parts.push(json!({"text": text}));
            }
            json!({
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": input, "candidatesTokenCount": output,
                    "totalTokenCount": input + output},
                "modelVersion": e.kind.model(),
            })
        }
        Kind::Ollama => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|(_, name, args)| json!({"function": {"name": name, "arguments": args}}))
                .collect();
            let mut message = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                message["tool_calls"] = json!(tool_calls);
            }
            json!({
                "model": b["model"], "created_at": "2025-01-01T00:00:00Z", "message": message,
                "done": true, "done_reason": "stop", "total_duration": 1000,
                "prompt_eval_count": input, "eval_count": output,
            })
        }
    }
    .to_string()
}

async fn native_server(kind: Kind, secret: &Secret) -> Server {
    Server::start(
        Expect {
            kind,
            key: Some(secret.value.clone()),
            max_tokens: 256,
            native: true,
        },
        (100, 20),
    )
    .await
}

/// The conversation a finished native run holds: 7 messages, as `rondo run` left them.
fn native_chat(case: &Case, id: &str) -> Vec<Value> {
    let state = rondo::run::rundir::read_checkpoint(&case.run_dir(id)).expect("a checkpoint");
    state["memory"][0]
        .as_array()
        .cloned()
        .expect("the conversation is a list")
}

/// Three calls through `rondo run`: parallel calls, a refused one, a corrected one, the
/// answer; every request checked by the protocol's server.
async fn native_round_trip(kind: Kind) {
    let secret = Secret::new();
    let srv = native_server(kind, &secret).await;
    let block = provider_for("main", &srv, &secret, "");
    let case = Case::new("native.rondo.tmpl", secret, &block, "");
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    let info = assert_finished(&case, "r1", &out);
    assert_eq!(srv.count(), 3, "three calls");
    assert_eq!(case.artifact("r1", "answer.txt"), "Oslo");
    assert_eq!(u(&info["totals"]["llm_calls"]), 3);
    // Two tools ran (the refused call did not).
    assert_eq!(u(&info["totals"]["tool_calls"]), 2, "{info:#}");
    let chat = native_chat(&case, "r1");
    let roles: Vec<&str> = chat
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    assert_eq!(chat[6]["content"], "Oslo");
    let refused = chat[3]["content"].as_str().unwrap_or_default();
    assert!(refused.starts_with("⛔️validation_error"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_native_tool_calls_round_trip_through_a_run() {
    native_round_trip(Kind::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_native_tool_calls_round_trip_through_a_run() {
    native_round_trip(Kind::Compatible).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_native_tool_calls_round_trip_through_a_run() {
    native_round_trip(Kind::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_native_tool_calls_round_trip_through_a_run() {
    native_round_trip(Kind::Gemini).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_native_tool_calls_round_trip_through_a_run() {
    native_round_trip(Kind::Ollama).await;
}

/// A run that stops after two turns resumes with the same conversation: the third
/// request carries every message the first two made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_native_run_sends_the_checkpointed_conversation() {
    let secret = Secret::new();
    let srv = native_server(Kind::OpenAi, &secret).await;
    srv.script([Reply::Normal, Reply::Normal, Reply::server_error(500)]);
    let block = provider_for("main", &srv, &secret, "  retry { max_attempts = 1 }");
    let case = Case::new("native.rondo.tmpl", secret, &block, "");
    let out = case.run("r1", &[]).await;
    assert_failed_resumable(&case, "r1", &out);
    assert_eq!(native_chat(&case, "r1").len(), 6);
    let out = case.resume("r1").await;
    srv.assert_valid();
    assert_finished(&case, "r1", &out);
    assert_eq!(srv.count(), 4);
    // The retried third turn was sent the six checkpointed messages (and validated).
    let last = srv.requests().pop().expect("a request").json();
    assert_eq!(
        last["messages"].as_array().map(Vec::len),
        Some(7),
        "{last:#}"
    );
    assert_eq!(native_chat(&case, "r1").len(), 7);
    assert_eq!(case.artifact("r1", "answer.txt"), "Oslo");
}

/// A role that does not take native tool calls (`mode = json`, the default) is never
/// answered by a reply that holds only tool calls: each is an invalid attempt, and when
/// the retries are used up the run ends at `invalid_output` (a text role has no invalid
/// route) instead of taking empty text — what a model answers never ends a run at `error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_with_only_tool_calls_is_not_an_empty_answer() {
    let secret = Secret::new();
    let srv = server(Kind::OpenAi, &secret, (10, 5)).await;
    let only_calls = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
        "model": Kind::OpenAi.model(),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "lookup", "arguments": "{\"city\":\"Oslo\"}"}}]},
            "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
    .to_string();
    srv.always(Some(Reply::status(200, &only_calls)));
    let block = provider_for("main", &srv, &secret, "");
    let case = Case::one(secret, &block);
    let out = case.run("r1", &[]).await;
    srv.assert_valid();
    assert_eq!(
        out.code, 4,
        "expected the invalid_output exit:\n{}",
        out.stderr
    );
    let info = case.run_json("r1");
    assert_eq!(info["status"], "finished", "{info:#}");
    assert_eq!(info["exit"], "invalid_output", "{info:#}");
    // The default two retries: three attempts, each refused with the reason.
    assert_eq!(srv.count(), 3);
    assert!(
        out.stderr.contains("holds only tool calls (lookup)"),
        "{}",
        out.stderr
    );
    let refused = case.events_of("r1", "invalid_output");
    assert_eq!(refused.len(), 3, "{refused:#?}");
    assert!(
        !case.run_dir("r1").join("workspace/answer.txt").exists(),
        "no answer was written"
    );
}

/// `rondo test` covers native mode: the scripted provider answers a role that offers tools
/// with the tool calls its reply lists (tests/fixtures/native/agent.rondo), and a model that
/// calls tools forever fills its conversation's bound and stops at `limit` (bounded.rondo),
/// and so does an `update` past the bound (update_bound.rondo).
#[test]
fn rondo_test_runs_native_tool_calls_from_scripted_replies() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/native");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(tmp.path())
        .env("NO_COLOR", "1")
        .arg("test")
        .arg(fixtures.join("agent.rondo"))
        .arg(fixtures.join("bounded.rondo"))
        .arg(fixtures.join("update_bound.rondo"))
        .output()
        .expect("run rondo test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("3 passed, 0 failed"), "{text}");
}
