//! A reply's size cap (`ChatRequest::max_reply`) holds while the body is read: against a
//! server that sends a body of up to 1 GiB (a whole JSON body, a stream of frames, one
//! endless line, an error body), the client stops reading soon after the cap. The server
//! counts the bytes the client let it send: what the client read, plus what the kernel's
//! socket buffers hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rondo_provider::http::shared_client;
use rondo_provider::providers::{
    anthropic::AnthropicModel, gemini::GeminiModel, ollama::OllamaModel, openai::OpenAiModel,
};
use rondo_provider::{ChatModel, ChatRequest, ChatResponse, Message, ProviderError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

const MAX_REPLY: usize = 1 << 20;
/// What the server would send if nobody stopped it.
const BODY: u64 = 1 << 30;
/// What may be in flight besides what the client read: the client's receive buffer
/// (Linux grows it as the client reads), the server's send buffer (pinned small below), the HTTP
/// library's read buffer.
const IN_FLIGHT: u64 = 4 << 20;

/// How a fake reply's body goes on.
#[derive(Clone)]
struct Body {
    status: u16,
    content_type: &'static str,
    /// `Content-Length` announced (the real body is as long, if read).
    length: Option<u64>,
    head: String,
    /// Repeated after `head` until `BODY` bytes are sent or the client goes away.
    unit: String,
}

/// Serves one request with `body`; the returned counter ends at the bytes sent.
async fn serve(body: Body) -> (String, Arc<AtomicU64>) {
    let socket = TcpSocket::new_v4().unwrap();
    // Accepted sockets inherit it: little is parked in the server's kernel buffer.
    socket.set_send_buffer_size(16 * 1024).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(4).unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 8192];
        // Headers, then as many body bytes as announced.
        let body_len = loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "request cut short");
            request.extend_from_slice(&buf[..n]);
            if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                break end + 4 + len;
            }
        };
        while request.len() < body_len {
            let n = stream.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        let mut head = format!(
            "HTTP/1.1 {} X\r\ncontent-type: {}\r\nconnection: close\r\n",
            body.status, body.content_type
        );
        if let Some(n) = body.length {
            head.push_str(&format!("content-length: {n}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(&body.head);
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let unit = body.unit.repeat((64 * 1024 / body.unit.len()).max(1));
        let mut total = body.head.len() as u64;
        while total < BODY {
            if stream.write_all(unit.as_bytes()).await.is_err() {
                break;
            }
            total += unit.len() as u64;
            counter.store(total, Ordering::SeqCst);
        }
    });
    (format!("http://{addr}"), sent)
}

fn request() -> ChatRequest {
    let mut req = ChatRequest::new(vec![Message::user("talk")]);
    req.max_reply = Some(MAX_REPLY);
    req
}

/// The bytes sent once the server is done (the client closed, or it sent all).
async fn settled(sent: &AtomicU64) -> u64 {
    let mut last = u64::MAX;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = sent.load(Ordering::SeqCst);
        if now == last {
            return now;
        }
        last = now;
    }
}

async fn assert_bounded(sent: &AtomicU64) {
    let sent = settled(sent).await;
    assert!(
        sent < MAX_REPLY as u64 + IN_FLIGHT,
        "the client let the server send {sent} bytes for a reply capped at {MAX_REPLY}"
    );
}

fn stream_cb() -> &'static (dyn Fn(&str) + Send + Sync) {
    &|_: &str| {}
}

/// Calls `model` (streamed or not) against `body` and checks the reading stopped.
async fn capped(
    make: impl FnOnce(&str) -> Box<dyn ChatModel>,
    body: Body,
    stream: bool,
) -> Result<ChatResponse, ProviderError> {
    let (base, sent) = serve(body).await;
    let model = make(&base);
    let req = request();
    let out = model.complete(&req, stream.then(stream_cb)).await;
    assert_bounded(&sent).await;
    out
}

/// Builds a provider's client for a server's base address.
type MakeModel = Box<dyn Fn(&str) -> Box<dyn ChatModel>>;

fn openai(base: &str) -> Box<dyn ChatModel> {
    Box::new(OpenAiModel::new(
        shared_client().unwrap(),
        base,
        "m",
        None,
        true,
    ))
}

fn json_body(head: &str, unit: &str) -> Body {
    Body {
        status: 200,
        content_type: "application/json",
        length: None,
        head: head.into(),
        unit: unit.into(),
    }
}

fn sse_body(head: &str, unit: &str) -> Body {
    Body {
        content_type: "text/event-stream",
        ..json_body(head, unit)
    }
}

/// A whole JSON body that never ends: nothing can be decoded, so the reply is empty and
/// marked truncated; an announced length past the cap is not read at all.
#[tokio::test]
async fn a_whole_body_is_read_no_further_than_the_cap() {
    let head = r#"{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":""#;
    let out = capped(openai, json_body(head, "abcdefgh"), false)
        .await
        .unwrap();
    assert!(out.truncated);
    assert_eq!(out.content, "");

    let announced = Body {
        length: Some(BODY),
        ..json_body(head, "abcdefgh")
    };
    let (base, sent) = serve(announced).await;
    let out = openai(&base).complete(&request(), None).await.unwrap();
    assert!(out.truncated);
    assert_bounded(&sent).await;

    // Within the cap the reply is whole and not marked.
    let (base, _) = serve(Body {
        length: Some(200),
        ..json_body(
            r#"{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#,
            " ",
        )
    })
    .await;
    let out = openai(&base).complete(&request(), None).await.unwrap();
    assert_eq!((out.content.as_str(), out.truncated), ("hi", false));
}

/// Streamed replies of each protocol that never end: reading stops once the text passes
/// the cap, and the reply is its beginning, marked truncated.
#[tokio::test]
async fn a_streamed_reply_stops_at_the_cap_in_every_protocol() {
    let word = "x".repeat(1000);
    let cases: Vec<(&str, MakeModel, Body)> = vec![
        (
            "openai",
            Box::new(openai),
            sse_body(
                "",
                &format!(
                    "data: {{\"id\":\"x\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}}}}]}}\n\n"
                ),
            ),
        ),
        (
            "anthropic",
            Box::new(|b: &str| {
                Box::new(AnthropicModel::new(shared_client().unwrap(), b, "m", None))
                    as Box<dyn ChatModel>
            }),
            sse_body(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"x\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                &format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{word}\"}}}}\n\n"
                ),
            ),
        ),
        (
            "gemini",
            Box::new(|b: &str| {
                Box::new(GeminiModel::new(shared_client().unwrap(), b, "m", None))
                    as Box<dyn ChatModel>
            }),
            sse_body(
                "",
                &format!(
                    "data: {{\"candidates\":[{{\"index\":0,\"content\":{{\"role\":\"model\",\"parts\":[{{\"text\":\"{word}\"}}]}}}}]}}\n\n"
                ),
            ),
        ),
        (
            "ollama",
            Box::new(|b: &str| {
                Box::new(OllamaModel::new(shared_client().unwrap(), b, "m", None))
                    as Box<dyn ChatModel>
            }),
            Body {
                content_type: "application/x-ndjson",
                ..json_body(
                    "",
                    &format!(
                        "{{\"model\":\"m\",\"created_at\":\"t\",\"message\":{{\"role\":\"assistant\",\"content\":\"{word}\"}},\"done\":false}}\n"
                    ),
                )
            },
        ),
    ];
    for (name, make, body) in cases {
        let out = capped(make, body, true)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(out.truncated, "{name}");
        assert!(
            out.content.len() > MAX_REPLY && out.content.len() <= MAX_REPLY + word.len(),
            "{name}: {} bytes of text",
            out.content.len()
        );
        assert!(out.content.bytes().all(|b| b == b'x'), "{name}");
    }
}

/// One line, or one event, that never ends is not held past the cap either.
#[tokio::test]
async fn an_endless_line_or_event_is_not_held() {
    let line = sse_body("data: ", "y");
    let out = capped(openai, line, true).await.unwrap();
    assert!(out.truncated);
    assert_eq!(out.content, "");
    let event = sse_body("", "data: yyyyyyyy\n");
    let out = capped(openai, event, true).await.unwrap();
    assert!(out.truncated);
}

/// An error status with an endless body: only the beginning of the message is read.
#[tokio::test]
async fn an_error_body_is_read_only_in_part() {
    let body = Body {
        status: 500,
        ..json_body(r#"{"error":{"message":"broken"#, "z")
    };
    let err = capped(openai, body, false).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Server { status: 500, .. }),
        "{err}"
    );
}
