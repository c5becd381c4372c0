//! A process that stays alive in the run container and starts commands on request.
//! Each `docker exec` costs the engine a runc exec (~80 ms here); through the runner a
//! command costs a fork, which is what makes an exec round trip cheap.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::{EnvError, StreamKind};

const SCRIPT: &str = include_str!("runner.py");

pub(crate) enum Message {
    Output(StreamKind, Vec<u8>),
    Exit { code: i64, timed_out: bool },
}

type Pending = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Message>>>>;

type Input = Arc<tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>>;

/// The runner's standard output, as it arrives.
type Chunks = Pin<Box<dyn futures_util::Stream<Item = Result<Vec<u8>, ()>> + Send>>;

/// Longer than any line a runner writes (a 64 KiB chunk, JSON-escaped).
const MAX_LINE: usize = 1 << 20;

/// The command line that starts a runner, for a backend that starts it itself. Isolated
/// (`-I`): no module is looked up in the working folder, where commands write, nor through
/// `PYTHON*` variables; no `site` (`-S`): the runner needs the standard library alone, and
/// starts faster without.
pub(crate) fn command() -> Vec<String> {
    ["python3", "-I", "-S", "-u", "-c", SCRIPT]
        .map(String::from)
        .to_vec()
}

/// A runner at the other end of a byte stream; see `runner.py` for the protocol.
pub(crate) struct Runner {
    input: Input,
    pending: Pending,
    alive: Arc<AtomicBool>,
    next: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

/// A command for the runner.
pub(crate) struct Request {
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: HashMap<String, String>,
    pub timeout: Duration,
    pub grace: Duration,
    /// What the command leaves running is not killed when it ends.
    pub keep: bool,
}

impl Runner {
    /// Starts the runner as `user` in a container of the local engine and checks it
    /// answers; `None` when the image cannot run it (no python3), in which case commands
    /// go through plain execs.
    pub(crate) async fn start(
        docker: &Docker,
        container: &str,
        user: Option<String>,
    ) -> Option<Runner> {
        let opts = CreateExecOptions {
            user,
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(command()),
            ..Default::default()
        };
        let exec = docker.create_exec(container, opts).await.ok()?;
        let StartExecResults::Attached { output, input } =
            docker.start_exec(&exec.id, None).await.ok()?
        else {
            return None;
        };
        let stdout = output.filter_map(|item| async move {
            match item {
                Ok(LogOutput::StdOut { message }) => Some(Ok(message.to_vec())),
                Ok(_) => None,
                Err(_) => Some(Err(())),
            }
        });
        Runner::from_stream(Box::pin(stdout), input).await.ok()
    }

    /// Talks to a runner already started at the other end of `reader` (its standard
    /// output) and `writer` (its standard input), wherever it runs: a local child
    /// process, an exec through a remote engine or the Kubernetes API. Checks it answers.
    pub(crate) async fn over(
        reader: impl AsyncRead + Send + 'static,
        writer: impl AsyncWrite + Send + 'static,
    ) -> Result<Runner, EnvError> {
        let reader = Box::pin(reader);
        let chunks = futures_util::stream::unfold(reader, |mut reader| async move {
            let mut buf = vec![0u8; 64 * 1024];
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(buf), reader))
                }
            }
        });
        Runner::from_stream(Box::pin(chunks), Box::pin(writer)).await
    }

    async fn from_stream(
        mut output: Chunks,
        input: Pin<Box<dyn AsyncWrite + Send>>,
    ) -> Result<Runner, EnvError> {
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let alive = Arc::new(AtomicBool::new(true));
        let reader = {
            let pending = pending.clone();
            let alive = alive.clone();
            tokio::spawn(async move {
                let mut buffer: Vec<u8> = Vec::new();
                while let Some(Ok(message)) = output.next().await {
                    buffer.extend_from_slice(&message);
                    let mut start = 0;
                    while let Some(end) = buffer[start..].iter().position(|&b| b == b'\n') {
                        let line = &buffer[start..start + end + 1];
                        if let Ok(event) = serde_json::from_slice::<Value>(line) {
                            dispatch(&pending, &event);
                        }
                        start += end + 1;
                    }
                    buffer.drain(..start);
                    // A runner sends lines of a few hundred KiB at most: anything longer
                    // is not one, and must not grow without bound.
                    if buffer.len() > MAX_LINE {
                        break;
                    }
                }
                alive.store(false, Ordering::SeqCst);
                // Wake every waiting command: its sender is dropped.
                if let Ok(mut p) = pending.lock() {
                    p.clear();
                }
            })
        };
        let runner = Runner {
            input: Arc::new(tokio::sync::Mutex::new(input)),
            pending,
            alive,
            next: AtomicU64::new(1),
            reader,
        };
        runner.probe().await?;
        Ok(runner)
    }

    /// Runs `true` and waits for its exit.
    async fn probe(&self) -> Result<(), EnvError> {
        let probe = Request {
            argv: vec!["true".into()],
            cwd: "/".into(),
            env: HashMap::new(),
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            keep: false,
        };
        let (mut rx, _) = self.send(probe).await?;
        let answered = tokio::time::timeout(Duration::from_secs(15), async {
            while let Some(m) = rx.recv().await {
                if let Message::Exit { code: 0, .. } = m {
                    return true;
                }
            }
            false
        })
        .await;
        match answered {
            Ok(true) => Ok(()),
            Ok(false) => Err(EnvError::InvalidRequest(
                "the command runner did not start (is python3 there?)".into(),
            )),
            Err(_) => Err(EnvError::InvalidRequest(
                "the command runner did not answer within 15 s".into(),
            )),
        }
    }

    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Sends a request; the receiver gets its output and then its exit. A closed
    /// receiver without an exit means the runner died.
    pub(crate) async fn send(
        &self,
        req: Request,
    ) -> Result<(mpsc::UnboundedReceiver<Message>, Cancel), EnvError> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let line = json!({
            "id": id,
            "argv": req.argv,
            "cwd": req.cwd,
            "env": req.env,
            "timeout": req.timeout.as_secs_f64(),
            "grace": req.grace.as_secs_f64(),
            "keep": req.keep,
        })
        .to_string()
            + "\n";
        write_line(&self.input, &line)
            .await
            .map_err(|e| EnvError::InvalidRequest(format!("the command runner stopped: {e}")))?;
        let cancel = Cancel {
            input: self.input.clone(),
            id,
        };
        Ok((rx, cancel))
    }
}

async fn write_line(input: &Input, line: &str) -> std::io::Result<()> {
    let mut input = input.lock().await;
    input.write_all(line.as_bytes()).await?;
    input.flush().await
}

/// Ends one request early: the runner kills every process of its command.
pub(crate) struct Cancel {
    input: Input,
    id: u64,
}

impl Cancel {
    pub(crate) async fn send(self) {
        let line = json!({ "cancel": self.id }).to_string() + "\n";
        // A runner that is gone has nothing left to kill.
        let _ = write_line(&self.input, &line).await;
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn latin1(text: &str) -> Vec<u8> {
    text.chars().map(|c| c as u32 as u8).collect()
}

fn dispatch(pending: &Pending, event: &Value) {
    let Some(id) = event.get("id").and_then(Value::as_u64) else {
        return;
    };
    let Ok(mut map) = pending.lock() else { return };
    let Some(tx) = map.get(&id) else { return };
    if let Some(text) = event.get("o").and_then(Value::as_str) {
        let _ = tx.send(Message::Output(StreamKind::Stdout, latin1(text)));
    } else if let Some(text) = event.get("e").and_then(Value::as_str) {
        let _ = tx.send(Message::Output(StreamKind::Stderr, latin1(text)));
    } else if let Some(code) = event.get("exit").and_then(Value::as_i64) {
        let timed_out = event
            .get("timed_out")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let _ = tx.send(Message::Exit { code, timed_out });
        map.remove(&id);
    }
}
