//! A small in-process HTTP/1.1 server that plays a provider: it records and checks every
//! request and answers from a script (so it can misbehave on cue).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn wants_stream(&self) -> bool {
        self.json().get("stream").and_then(Value::as_bool) == Some(true)
            || self.path.contains("streamGenerateContent")
    }
}

#[derive(Debug, Clone)]
pub enum Reply {
    Json(u16, Value),
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Wait, then answer normally.
    Slow(Duration),
    /// Bytes written as they are, then the connection is closed.
    Raw(Vec<u8>),
    /// A chunked streaming body, one frame per chunk; `cut` drops the connection after
    /// `frames` without ending the body.
    Stream {
        content_type: &'static str,
        frames: Vec<String>,
        cut: bool,
    },
}

impl Reply {
    pub fn status(status: u16, body: &str) -> Reply {
        Reply::Status {
            status,
            headers: vec![],
            body: body.to_string(),
        }
    }
    pub fn rate_limited(retry_after: &str) -> Reply {
        Reply::Status {
            status: 429,
            headers: vec![("retry-after".into(), retry_after.into())],
            body: r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#.into(),
        }
    }
    pub fn truncated_json() -> Reply {
        Reply::Raw(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"id\":\"x\",\"choi"
                .to_vec(),
        )
    }
    pub fn malformed_json() -> Reply {
        let body = "{this is not json";
        Reply::Raw(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }
}

type Validator = Box<dyn Fn(&Recorded) -> Result<(), String> + Send + Sync>;
type Responder = Box<dyn Fn(&Recorded) -> Reply + Send + Sync>;

struct State {
    validate: Validator,
    respond: Responder,
    /// `None` = answer normally.
    script: Mutex<VecDeque<Option<Reply>>>,
    requests: Mutex<Vec<Recorded>>,
    violations: Mutex<Vec<String>>,
}

#[derive(Clone)]
pub struct FakeServer {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl FakeServer {
    pub async fn start(
        validate: impl Fn(&Recorded) -> Result<(), String> + Send + Sync + 'static,
        respond: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(State {
            validate: Box::new(validate),
            respond: Box::new(respond),
            script: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        });
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = serve(sock, st).await;
                });
            }
        });
        FakeServer { addr, state }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Queue replies for the next requests; `None` means a normal answer.
    pub fn script(&self, replies: impl IntoIterator<Item = Option<Reply>>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    pub fn violations(&self) -> Vec<String> {
        self.state.violations.lock().unwrap().clone()
    }

    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(v.is_empty(), "the fake server rejected requests: {v:#?}");
        assert!(self.request_count() > 0, "no request reached the server");
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
    })
}

async fn serve(mut sock: TcpStream, st: Arc<State>) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        st.requests.lock().unwrap().push(req.clone());
        let reply = match (st.validate)(&req) {
            Err(v) => {
                st.violations.lock().unwrap().push(v.clone());
                Reply::Json(400, serde_json::json!({"error": {"message": v}}))
            }
            Ok(()) => {
                let scripted = st.script.lock().unwrap().pop_front().flatten();
                match scripted {
                    Some(Reply::Slow(d)) => {
                        tokio::time::sleep(d).await;
                        (st.respond)(&req)
                    }
                    Some(r) => r,
                    None => (st.respond)(&req),
                }
            }
        };
        if !write_reply(&mut sock, reply).await? {
            return Ok(());
        }
    }
    Ok(())
}

/// Returns whether the connection can be kept.
async fn write_reply(sock: &mut TcpStream, reply: Reply) -> std::io::Result<bool> {
    match reply {
        Reply::Json(status, v) => {
            write_plain(sock, status, &[], "application/json", &v.to_string()).await?;
            Ok(true)
        }
        Reply::Status {
            status,
            headers,
            body,
        } => {
            write_plain(sock, status, &headers, "application/json", &body).await?;
            Ok(true)
        }
        Reply::Slow(_) => Ok(true),
        Reply::Raw(bytes) => {
            sock.write_all(&bytes).await?;
            sock.flush().await?;
            let _ = sock.shutdown().await;
            Ok(false)
        }
        Reply::Stream {
            content_type,
            frames,
            cut,
        } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
            );
            sock.write_all(head.as_bytes()).await?;
            for f in frames {
                let chunk = format!("{:x}\r\n{f}\r\n", f.len());
                sock.write_all(chunk.as_bytes()).await?;
                sock.flush().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if cut {
                let _ = sock.shutdown().await;
                return Ok(false);
            }
            sock.write_all(b"0\r\n\r\n").await?;
            Ok(true)
        }
    }
}

async fn write_plain(
    sock: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.flush().await
}

/// SSE frames: each `data:` event ends with a blank line.
pub fn sse(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// Split text into small pieces for streamed deltas.
pub fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(3).map(|c| c.iter().collect()).collect()
}

pub fn check(cond: bool, what: impl Into<String>) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what.into()) }
}

/// Env lookup for tests: the pool reads keys through this instead of the process env.
pub fn env_with(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

pub fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}
pub mod openai;

/// The request as it would be without asking to stream, for a server that answers a
/// streamed request with a whole JSON body (as LiteLLM's Anthropic route does).
pub fn unstreamed(r: &Recorded) -> Recorded {
    let mut r = r.clone();
    let mut body = r.json();
    if let Some(o) = body.as_object_mut() {
        o.remove("stream");
        o.remove("stream_options");
    }
    if !r.body.is_empty() {
        r.body = serde_json::to_vec(&body).unwrap_or_default();
    }
    r.path = r
        .path
        .replace("streamGenerateContent?alt=sse", "generateContent");
    r
}
