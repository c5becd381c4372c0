//! What a person sees in a terminal during `rondo run`: the real binary runs under a
//! pseudo-terminal against an in-process OpenAI-compatible server, its output goes into a
//! terminal emulator (`vt100`), and the tests read the emulated screen.
//!
//! The server can look at the screen while it holds a request, which is how "shown when
//! it happens" is tested: the retry line must be on screen before the retry is answered.

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ROWS: u16 = 60;
const COLS: u16 = 140;
/// Every run gets at most this long; a hang fails the test instead of blocking CI.
const PROCESS_LIMIT: Duration = Duration::from_secs(120);
/// How long the server waits for a line to reach the screen before answering anyway.
const SCREEN_WAIT: Duration = Duration::from_secs(30);

type SharedScreen = Arc<Mutex<vt100::Parser>>;

/// How the server answers one request.
#[derive(Clone)]
enum Reply {
    /// The normal answer (streamed when asked).
    Answer,
    /// The answer as one JSON body, even to a request that asked to stream (LiteLLM's
    /// Anthropic route does so).
    Whole,
    /// A status and a body, with an optional Retry-After.
    Status(u16, String, Option<&'static str>),
    /// The reply, once `text` is on screen (or after `SCREEN_WAIT`); whether it was is
    /// recorded.
    WhenShown(&'static str, Box<Reply>),
    /// The streamed answer's first `n` frames, then the connection is dropped.
    Cut(usize),
}

struct Server {
    addr: SocketAddr,
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

/// The model's reply to a prompt: two lines, so a reply's own line breaks show.
fn answer_for(prompt: &str) -> String {
    format!("Oslo is the answer to {prompt}.\nSecond line of the reply.")
}

async fn start(screen: SharedScreen) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Server {
        addr,
        script: Arc::default(),
        seen: Arc::default(),
        bodies: Arc::default(),
    };
    let (script, seen, bodies) = (
        server.script.clone(),
        server.seen.clone(),
        server.bodies.clone(),
    );
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (script, seen, bodies, screen) =
                (script.clone(), seen.clone(), bodies.clone(), screen.clone());
            tokio::spawn(async move {
                let _ = serve(sock, script, seen, bodies, screen).await;
            });
        }
    });
    server
}

async fn read_request(sock: &mut TcpStream) -> Option<(String, Value)> {
    let mut buf = Vec::new();
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
    let path = head.split(' ').nth(1)?.to_string();
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + 4 + len {
        let mut chunk = [0u8; 8192];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end + 4..head_end + 4 + len]).ok()?;
    Some((path, body))
}

async fn serve(
    mut sock: TcpStream,
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
    screen: SharedScreen,
) -> std::io::Result<()> {
    while let Some((path, body)) = read_request(&mut sock).await {
        bodies.lock().unwrap().push(body.clone());
        if path != "/v1/chat/completions" {
            write_plain(
                &mut sock,
                404,
                "application/json",
                r#"{"detail":"Not Found"}"#,
                None,
            )
            .await?;
            continue;
        }
        let mut reply = script.lock().unwrap().pop_front().unwrap_or(Reply::Answer);
        if let Reply::WhenShown(text, then) = reply {
            let since = Instant::now();
            let mut shown = false;
            while since.elapsed() < SCREEN_WAIT {
                if screen.lock().unwrap().screen().contents().contains(text) {
                    shown = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            seen.lock().unwrap().push((text.to_string(), shown));
            reply = *then;
        }
        match reply {
            Reply::Status(status, text, retry_after) => {
                write_plain(&mut sock, status, "text/plain", &text, retry_after).await?;
                continue;
            }
            Reply::Whole => {
                let mut whole = body.clone();
                whole["stream"] = Value::Bool(false);
                answer(&mut sock, &whole).await?;
                continue;
            }
            Reply::Cut(n) => {
                answer_frames(&mut sock, &body, Some(n)).await?;
                return Ok(());
            }
            Reply::Answer | Reply::WhenShown(..) => {}
        }
        answer(&mut sock, &body).await?;
    }
    Ok(())
}

async fn write_plain(
    sock: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    retry_after: Option<&str>,
) -> std::io::Result<()> {
    let retry = retry_after
        .map(|r| format!("retry-after: {r}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{retry}\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.flush().await
}

async fn answer(sock: &mut TcpStream, body: &Value) -> std::io::Result<()> {
    answer_frames(sock, body, None).await
}

/// The answer; streamed, only its first `cut` frames when given (the body is not ended).
async fn answer_frames(
    sock: &mut TcpStream,
    body: &Value,
    cut: Option<usize>,
) -> std::io::Result<()> {
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string();
    let text = answer_for(&prompt);
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    if body["stream"] != true {
        let reply = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"}], "usage": usage});
        return write_plain(sock, 200, "application/json", &reply.to_string(), None).await;
    }
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    sock.write_all(head.as_bytes()).await?;
    let chunk = |delta: Value, usage: Value| {
        let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": if usage.is_null() { json!([{"index": 0, "delta": delta, "finish_reason": null}]) } else { json!([]) },
            "usage": usage});
        format!("data: {c}\n\n")
    };
    let chars: Vec<char> = text.chars().collect();
    let mut frames: Vec<String> = chars
        .chunks(7)
        .map(|p| {
            chunk(
                json!({"content": p.iter().collect::<String>()}),
                Value::Null,
            )
        })
        .collect();
    frames.push(chunk(json!({}), usage));
    frames.push("data: [DONE]\n\n".into());
    if let Some(n) = cut {
        frames.truncate(n);
    }
    for f in frames {
        sock.write_all(format!("{:x}\r\n{f}\r\n", f.len()).as_bytes())
            .await?;
        sock.flush().await?;
    }
    if cut.is_some() {
        return sock.shutdown().await;
    }
    sock.write_all(b"0\r\n\r\n").await?;
    sock.flush().await
}

/// A project folder with the workflow (`@URL@` replaced by the server's base URL).
fn project(dir: &Path, workflow: &str, addr: SocketAddr) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    std::fs::write(
        dir.join("prompts/ask.tera"),
        "step {{ step }} of {{ input.question }}",
    )
    .unwrap();
    let path = dir.join("w.rondo");
    std::fs::write(&path, workflow.replace("@URL@", &format!("http://{addr}"))).unwrap();
    path
}

/// Runs `rondo` with `args` in `dir` under a pseudo-terminal, feeding `screen`; returns
/// the exit code and everything written.
fn run_in_pty(dir: &Path, args: &[&str], screen: SharedScreen) -> (u32, String) {
    let pty = native_pty_system();
    let pair = pty
        .openpty(PtySize {
            rows: ROWS,
            cols: COLS,
            pixel_width: 0,
            pixel_height: 0,
        })
        .expect("open a pty");
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_rondo"));
    cmd.args(args);
    cmd.cwd(dir);
    cmd.env("TERM", "xterm-256color");
    cmd.env("RONDO_UNCONFINED_TOOLS", "1");
    cmd.env_remove("NO_COLOR");
    let mut child = pair.slave.spawn_command(cmd).expect("spawn rondo");
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().expect("reader");
    let all = Arc::new(Mutex::new(Vec::new()));
    let collected = all.clone();
    let feeder = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // The pty ends with EIO once the child and every copy of the slave are gone.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            screen.lock().unwrap().process(&buf[..n]);
            collected.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > PROCESS_LIMIT {
            let _ = child.kill();
            panic!("rondo did not finish within {PROCESS_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(pair.master);
    let _ = feeder.join();
    let out = String::from_utf8_lossy(&all.lock().unwrap()).into_owned();
    (status.exit_code(), out)
}

fn new_screen() -> SharedScreen {
    let size = |n: u16| std::num::NonZeroU16::new(n).expect("a screen size");
    Arc::new(Mutex::new(vt100::Parser::new(size(ROWS), size(COLS), 0)))
}

/// The screen's lines, trailing blanks trimmed.
fn lines(screen: &SharedScreen) -> Vec<String> {
    let s = screen.lock().unwrap();
    s.screen()
        .contents()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

fn row_of(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` is not on screen:\n{}", lines.join("\n")))
}

const TWO_ROLES: &str = r#"
workflow terminal {
  prompts = "prompts"
  provider = main
  input question: string = "the question"
}

provider main {
  kind = "openai-compatible"
  model = "m"
  base_url = "@URL@/v1"
  retry { max_attempts = 3  initial_backoff = 10ms }
  price { input_per_1k = 1.0  output_per_1k = 2.0 }
}

role first: llm {
  prompt = "ask.tera"
  output text
}

role second: llm {
  prompt = "ask.tera"
  output text
}

start -> first
first -> second
second -> success
exit success
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_replies_stay_on_screen_and_styles_are_closed() {
    let screen = new_screen();
    let server = start(screen.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = project(dir.path(), TWO_ROLES, server.addr);
    let s = screen.clone();
    let d = dir.path().to_path_buf();
    let (code, out) = tokio::task::spawn_blocking(move || {
        run_in_pty(&d, &["run", path.to_str().unwrap(), "--run-id", "t"], s)
    })
    .await
    .unwrap();
    let lines = lines(&screen);
    assert_eq!(code, 0, "{}", lines.join("\n"));
    // Both replies, both of their lines, each on its own line: the status line of the
    // second step did not erase the first reply.
    let first = row_of(
        &lines,
        "first> Oslo is the answer to step 1 of the question.",
    );
    let second = row_of(
        &lines,
        "second> Oslo is the answer to step 2 of the question.",
    );
    assert!(first < second);
    assert_eq!(lines[first + 1], "Second line of the reply.");
    assert_eq!(lines[second + 1], "Second line of the reply.");
    // The last reply does not run into the exit line.
    let exit = row_of(&lines, "exit `success`");
    assert!(lines[exit].starts_with("exit `success`"), "{}", lines[exit]);
    assert!(exit > second + 1);
    // The tokens column is the total after each step (15 tokens a call).
    assert!(lines[row_of(&lines, "step    1  first (llm)")].contains("tokens 15  "));
    assert!(lines[row_of(&lines, "step    2  second (llm)")].contains("tokens 30  "));
    // No status line is left behind, and no style is left open.
    assert!(
        !lines.iter().any(|l| l.contains('▶')),
        "{}",
        lines.join("\n")
    );
    let parser = screen.lock().unwrap();
    let exit_cell = parser.screen().cell(exit as u16, 0).expect("a cell");
    assert!(!exit_cell.dim(), "the exit line is dimmed");
    assert!(out.ends_with('\n'));
    let (opened, closed) = (
        out.matches("\x1b[2m").count(),
        out.matches("\x1b[0m").count(),
    );
    assert!(
        opened > 0 && closed >= opened,
        "{opened} dim, {closed} resets"
    );
}

/// Runs the workflow in a pty against `server`; returns the exit code, the screen's
/// lines and the raw output.
async fn run_shown(
    workflow: &str,
    extra: &[&str],
    screen: &SharedScreen,
    server: &Server,
) -> (u32, Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = project(dir.path(), workflow, server.addr);
    let mut args: Vec<String> = vec!["run".into(), path.to_string_lossy().into_owned()];
    args.extend(["--run-id".into(), "t".into()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let (s, d) = (screen.clone(), dir.path().to_path_buf());
    let (code, out) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_in_pty(&d, &args, s)
    })
    .await
    .unwrap();
    (code, lines(screen), out)
}

const FALLBACK: &str = r#"
workflow terminal {
  prompts = "prompts"
  provider = main
  input question: string = "the question"
}

provider main {
  kind = "openai-compatible"
  model = "m"
  base_url = "@URL@/v1"
  stream = false
  retry { max_attempts = 2  initial_backoff = 10ms }
  fallback = [backup]
}

provider backup {
  kind = "openai-compatible"
  model = "m2"
  base_url = "@URL@/v1"
  stream = false
}

role first: llm {
  prompt = "ask.tera"
  output text
}

start -> first
first -> success
exit success
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_fallbacks_are_shown_when_they_happen() {
    let screen = new_screen();
    let server = start(screen.clone()).await;
    let shown = |text, then| Reply::WhenShown(text, Box::new(then));
    server.script.lock().unwrap().extend([
        Reply::Status(429, "slow down".into(), Some("0.2")),
        shown(
            "retrying in 200 ms",
            Reply::Status(
                500,
                "upstream failed\nsecond line of the error".into(),
                None,
            ),
        ),
        shown("falling back to `backup`", Reply::Answer),
    ]);
    let (code, lines, _) = run_shown(FALLBACK, &[], &screen, &server).await;
    assert_eq!(code, 0, "{}", lines.join("\n"));
    // Each line was on screen while the server still held the next request.
    assert_eq!(
        *server.seen.lock().unwrap(),
        [
            ("retrying in 200 ms".to_string(), true),
            ("falling back to `backup`".to_string(), true)
        ]
    );
    let failed = row_of(&lines, "upstream failed");
    assert!(
        lines[failed].starts_with("  ! first attempt 2 on `main`: "),
        "{}",
        lines[failed]
    );
    // A server's multi-line message keeps its lines under the first one.
    assert_eq!(
        lines[failed + 1],
        "    second line of the error; falling back to `backup`"
    );
    // Without stream = true the profile did not stream, though a person watched.
    assert!(
        server
            .bodies
            .lock()
            .unwrap()
            .iter()
            .all(|b| b.get("stream").is_none())
    );
    assert_eq!(lines.iter().filter(|l| l.contains("slow down")).count(), 1);
}

const WRONG_URL: &str = r#"
workflow terminal {
  prompts = "prompts"
  provider = main
  input question: string = "the question"
}

provider main {
  kind = "openai-compatible"
  model = "m"
  base_url = "@URL@/wrong"
  retry { max_attempts = 1 }
}

role first: llm {
  prompt = "ask.tera"
  output text
}

start -> first
first -> success
exit success
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_error_names_profile_model_and_url_once() {
    for extra in [&[][..], &["-q"][..]] {
        let screen = new_screen();
        let server = start(screen.clone()).await;
        let (code, lines, _) = run_shown(WRONG_URL, extra, &screen, &server).await;
        assert_eq!(code, 2, "{}", lines.join("\n"));
        let url = format!("http://{}/wrong/chat/completions", server.addr);
        let text = lines.join("\n");
        assert!(
            text.contains(&format!("(profile `main`, model `m` at {url})")),
            "{extra:?}: {text}"
        );
        assert_eq!(text.matches("Not Found").count(), 1, "{extra:?}: {text}");
    }
}

const TOOL_AND_MAP: &str = r#"
workflow terminal {
  prompts = "prompts"
  provider = main
  input question: string = "the question"
  input items: list[string] = ["a", "b", "c"]
}

provider main {
  kind = "openai-compatible"
  model = "m"
  base_url = "@URL@/v1"
}

role shout: tool {
  env = local
  command = ["printf", "\\033[31mRED\\033[0m \\033]0;owned\\007 \\033[2J done\\n"]
}

role worker: llm {
  prompt = "ask.tera"
  output text
}

role collect: builtin {
}

start -> shout
shout -> map worker over input.items -> collect
collect -> success
exit success
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_escapes_are_shown_not_obeyed_and_map_branches_have_their_steps() {
    let screen = new_screen();
    let server = start(screen.clone()).await;
    let (code, lines, _) = run_shown(TOOL_AND_MAP, &[], &screen, &server).await;
    let text = lines.join("\n");
    assert_eq!(code, 0, "{text}");
    let tool = row_of(&lines, "shout| ");
    assert_eq!(lines[tool], "shout| ^[[31mRED^[[0m ^[]0;owned^G ^[[2J done");
    {
        let parser = screen.lock().unwrap();
        let col = lines[tool].find("RED").unwrap() as u16;
        let red = parser.screen().cell(tool as u16, col).expect("a cell");
        assert_eq!(
            red.fgcolor(),
            vt100::Color::Default,
            "the tool recoloured the screen"
        );
    }
    // The branches stream at once: each piece of a reply is labelled with its visit, on a
    // line of its own when another branch's piece came in between.
    for visit in 1..=3 {
        let label = format!("worker #{visit}> ");
        assert!(
            lines.iter().any(|l| l.starts_with(&label)),
            "{label}: {text}"
        );
        assert!(lines.iter().all(|l| l.matches("> ").count() <= 1), "{text}");
    }
    // The screen was not cleared: the first step's line is still there.
    row_of(&lines, "step    1  shout (tool)");
    for (step, name) in [(2, "worker"), (3, "worker"), (4, "worker"), (5, "collect")] {
        row_of(&lines, &format!("step {step:>4}  {name} ("));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_json_answer_to_a_streamed_request_is_shown_and_accepted() {
    let screen = new_screen();
    let server = start(screen.clone()).await;
    server
        .script
        .lock()
        .unwrap()
        .extend([Reply::Whole, Reply::Whole]);
    let (code, lines, _) = run_shown(TWO_ROLES, &[], &screen, &server).await;
    let text = lines.join("\n");
    assert_eq!(code, 0, "{text}");
    assert!(
        server
            .bodies
            .lock()
            .unwrap()
            .iter()
            .all(|b| b["stream"] == true)
    );
    let second = row_of(
        &lines,
        "second> Oslo is the answer to step 2 of the question.",
    );
    assert_eq!(lines[second + 1], "Second line of the reply.");
    assert!(!text.contains("attempt"), "no retry: {text}");
}

/// The text streamed by an attempt that then failed (a stream cut in the middle) stays on
/// screen marked as discarded, before the retry's line and the reply that counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streamed_text_of_a_failed_attempt_is_marked_discarded() {
    let screen = new_screen();
    let server = start(screen.clone()).await;
    server.script.lock().unwrap().push_back(Reply::Cut(3));
    let (code, lines, _) = run_shown(TWO_ROLES, &[], &screen, &server).await;
    let text = lines.join("\n");
    assert_eq!(code, 0, "{text}");
    let partial = row_of(&lines, "first> Oslo is the answer to");
    assert_eq!(lines[partial], "first> Oslo is the answer to", "{text}");
    assert_eq!(
        lines[partial + 1],
        "  ✗ first: streamed reply discarded (attempt 1 on `main` failed)",
        "{text}"
    );
    assert!(
        lines[partial + 2].starts_with("  ! first attempt 1 on `main`: "),
        "{text}"
    );
    let kept = row_of(
        &lines,
        "first> Oslo is the answer to step 1 of the question.",
    );
    assert!(kept > partial + 2, "{text}");
    assert_eq!(text.matches("discarded").count(), 1, "{text}");
}

const JSON_ROLE: &str = r#"
workflow terminal {
  prompts = "prompts"
  provider = main
  input question: string = "the question"
}

provider main {
  kind = "openai-compatible"
  model = "m"
  base_url = "@URL@/v1"
}

role first: llm {
  prompt = "ask.tera"
  retries = 1
  output json { city: string }
}

start -> first
first -> success
first -> invalid_output when first.invalid
exit success
"#;

/// A streamed reply the role refuses (prose where JSON is declared) is marked discarded
/// too, once per refused attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_streamed_reply_is_marked_discarded() {
    let screen = new_screen();
    let server = start(screen.clone()).await;
    let (code, lines, _) = run_shown(JSON_ROLE, &[], &screen, &server).await;
    let text = lines.join("\n");
    assert_eq!(code, 4, "{text}");
    for attempt in 1..=2 {
        let marker = format!("  ✗ first: streamed reply discarded (attempt {attempt} refused)");
        let at = row_of(&lines, &marker);
        assert_eq!(lines[at - 1], "Second line of the reply.", "{text}");
        assert!(
            lines[at + 1].starts_with(&format!("  ! first attempt {attempt}: ")),
            "{text}"
        );
    }
}
