use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::redact::StreamRedactor;
use crate::{EnvError, Redactor};

/// What to run: an argument vector (no shell) or a shell command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Argv(Vec<String>),
    Shell(String),
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Shell(s) => f.write_str(s),
            Command::Argv(v) => {
                let quoted: Vec<String> = v.iter().map(|a| shell_quote(a)).collect();
                f.write_str(&quoted.join(" "))
            }
        }
    }
}

/// Which stream a line of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// Called with every complete output line (without its newline) as it arrives; the
/// last unterminated line is delivered when the command ends.
pub type LineCallback = Arc<dyn Fn(StreamKind, &str) + Send + Sync>;

/// One command to run in an [`crate::Environment`].
#[derive(Clone)]
pub struct ExecRequest {
    pub command: Command,
    /// Working directory; `None` uses the environment's own. Relative paths are resolved
    /// against the environment's working directory.
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// `None` uses the environment's default timeout.
    pub timeout: Option<Duration>,
    /// The whole output (merged, plus a header and footer) is written here.
    pub log_path: Option<PathBuf>,
    /// The log file already opened by the caller (confined to its workspace); it wins
    /// over opening `log_path` by name, which `log_path` then only names in messages.
    pub log_file: Option<Arc<std::fs::File>>,
    pub on_line: Option<LineCallback>,
    /// Bytes of each stream kept in memory (half head, half tail); `None` uses
    /// [`DEFAULT_MAX_OUTPUT`]. The log file always gets everything.
    pub max_output: Option<usize>,
    /// Processes a local command may have at once, itself included; `None` uses
    /// [`crate::DEFAULT_MAX_PROCESSES`]. A tool spec's `max_processes`.
    pub max_processes: Option<std::num::NonZeroU32>,
    /// Capabilities a local command started by root keeps; empty: none at all. A tool
    /// spec's `capabilities`.
    pub capabilities: Vec<crate::Capability>,
    /// In Docker, processes the command leaves running outlive it, until the environment
    /// ends (a tool that keeps a session between calls, such as a debugger). A tool spec's
    /// `keep_processes`. Locally every process still ends with its call.
    pub keep_processes: bool,
}

/// Bytes of output kept in memory per stream when a request does not say: 4 MiB.
pub const DEFAULT_MAX_OUTPUT: usize = 4 << 20;

/// A line longer than this is delivered to the line callback in pieces.
const MAX_LINE: usize = 64 << 10;

/// Linux refuses to start a program with one argument this long or longer
/// (`MAX_ARG_STRLEN`, 32 pages), whatever the total size.
pub(crate) const MAX_ARG_LEN: usize = 32 * 4096;

impl fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field("workdir", &self.workdir)
            .field("env", &self.env)
            .field("timeout", &self.timeout)
            .field("log_path", &self.log_path)
            .field("on_line", &self.on_line.is_some())
            .field("max_output", &self.max_output)
            .field("max_processes", &self.max_processes)
            .field("capabilities", &self.capabilities)
            .finish()
    }
}

impl ExecRequest {
    pub fn new(command: Command) -> Self {
        ExecRequest {
            command,
            workdir: None,
            env: BTreeMap::new(),
            timeout: None,
            log_path: None,
            log_file: None,
            on_line: None,
            max_output: None,
            max_processes: None,
            capabilities: Vec::new(),
            keep_processes: false,
        }
    }

    /// A shell command line (`sh -c` locally, the configured shell in Docker).
    pub fn shell(command: impl Into<String>) -> Self {
        Self::new(Command::Shell(command.into()))
    }

    pub fn argv<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(Command::Argv(argv.into_iter().map(Into::into).collect()))
    }

    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub fn log_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.log_path = Some(path.into());
        self
    }

    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = Some(bytes);
        self
    }

    pub fn max_processes(mut self, max: std::num::NonZeroU32) -> Self {
        self.max_processes = Some(max);
        self
    }

    pub fn capabilities(
        mut self,
        capabilities: impl IntoIterator<Item = crate::Capability>,
    ) -> Self {
        self.capabilities = capabilities.into_iter().collect();
        self
    }

    pub fn on_line(mut self, callback: impl Fn(StreamKind, &str) + Send + Sync + 'static) -> Self {
        self.on_line = Some(Arc::new(callback));
        self
    }

    pub(crate) fn validate(&self) -> Result<(), EnvError> {
        match &self.command {
            Command::Argv(v) if v.is_empty() => {
                Err(EnvError::InvalidRequest("empty argument vector".into()))
            }
            _ => Ok(()),
        }
    }
}

/// The result of a command. Output is decoded lossily as UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// `None` when no exit code could be obtained (killed and never reaped).
    /// A process killed by a signal locally reports `128 + signal`, like a shell.
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    /// stdout and stderr interleaved in arrival order.
    pub merged: String,
    pub timed_out: bool,
    pub duration: Duration,
    /// Bytes the command wrote (both streams), including those cut from the fields above.
    pub total_bytes: u64,
    /// Bytes left out of `merged` (its middle, replaced by a `[... N bytes cut ...]` line).
    pub cut_bytes: u64,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        !self.timed_out && self.exit_code == Some(0)
    }

    /// The merged output cut for a prompt; see [`truncate_for_prompt`].
    pub fn merged_for_prompt(&self, head: usize, tail: usize) -> String {
        truncate_for_prompt(&self.merged, head, tail)
    }
}

/// Keep the first `head` and last `tail` characters of `text`, replacing the middle with
/// a `[... N characters elided ...]` line. Text that fits is returned unchanged.
pub fn truncate_for_prompt(text: &str, head: usize, tail: usize) -> String {
    let total = text.chars().count();
    if total <= head + tail {
        return text.to_string();
    }
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = if tail == 0 {
        text.len()
    } else {
        text.char_indices()
            .nth(total - tail)
            .map_or(text.len(), |(i, _)| i)
    };
    let elided = total - head - tail;
    format!(
        "{}\n[... {elided} characters elided ...]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

/// Longest line [`head_tail_lines`] keeps whole; the rest of a longer one is cut.
pub const MAX_SHOWN_LINE: usize = 2_000;

/// The first `head` and last `tail` lines of `text`, with a `[... N lines elided ...]`
/// line between them; each line kept is cut to [`MAX_SHOWN_LINE`] characters.
pub fn head_tail_lines(text: &str, head: usize, tail: usize) -> String {
    let cut = |line: &str| -> String {
        match line.char_indices().nth(MAX_SHOWN_LINE) {
            Some((i, _)) => format!(
                "{}[... {} characters cut ...]",
                &line[..i],
                line[i..].chars().count()
            ),
            None => line.to_string(),
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= head + tail {
        return lines.iter().map(|l| cut(l)).collect::<Vec<_>>().join("\n");
    }
    let elided = lines.len() - head - tail;
    let mut out: Vec<String> = lines[..head].iter().map(|l| cut(l)).collect();
    out.push(format!("[... {elided} lines elided ...]"));
    out.extend(lines[lines.len() - tail..].iter().map(|l| cut(l)));
    out.join("\n")
}

/// Quote a word for a POSIX shell.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The first and last bytes of a stream, within a fixed budget, and how many it saw.
struct HeadTail {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    total: u64,
}

impl HeadTail {
    fn new(budget: usize) -> Self {
        HeadTail {
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            head_max: budget / 2,
            tail_max: budget - budget / 2,
            total: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_max - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.tail_max {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_max..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_max);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    fn cut(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    fn text(self, log: bool) -> String {
        let cut = self.cut();
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if cut > 0 {
            let whole = if log {
                "; the whole output is in the log file"
            } else {
                ""
            };
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!("[... {cut} bytes cut{whole} ...]\n"));
        }
        let (a, b) = self.tail.as_slices();
        if b.is_empty() {
            out.push_str(&String::from_utf8_lossy(a));
        } else {
            out.push_str(&String::from_utf8_lossy(&[a, b].concat()));
        }
        out
    }
}

/// Accumulates output from both streams: bounded separate and merged captures, line
/// callbacks, and the log file, which gets everything.
pub(crate) struct Collector {
    stdout: HeadTail,
    stderr: HeadTail,
    merged: HeadTail,
    partial: [Vec<u8>; 2],
    on_line: Option<LineCallback>,
    log: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    /// One per stream, so that a secret is replaced before any copy of the output is made.
    redact: Option<[StreamRedactor; 2]>,
    ends_with_newline: bool,
}

impl Collector {
    pub(crate) fn new(
        req: &ExecRequest,
        shown_command: &str,
        redactor: &Redactor,
    ) -> Result<Self, EnvError> {
        let shown_command = redactor.redact(shown_command);
        let log = match (&req.log_path, &req.log_file) {
            (path, Some(file)) => {
                let path = path.clone().unwrap_or_default();
                let file = file.try_clone().map_err(|e| EnvError::io(&path, e))?;
                let mut w = std::io::BufWriter::new(file);
                writeln!(w, "$ {shown_command}").map_err(|e| EnvError::io(&path, e))?;
                Some((path, w))
            }
            (Some(path), None) => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(|e| EnvError::io(parent, e))?;
                }
                let file = std::fs::File::create(path).map_err(|e| EnvError::io(path, e))?;
                let mut w = std::io::BufWriter::new(file);
                writeln!(w, "$ {shown_command}").map_err(|e| EnvError::io(path, e))?;
                Some((path.clone(), w))
            }
            (None, None) => None,
        };
        let budget = req.max_output.unwrap_or(DEFAULT_MAX_OUTPUT);
        Ok(Collector {
            stdout: HeadTail::new(budget),
            stderr: HeadTail::new(budget),
            merged: HeadTail::new(budget),
            partial: [Vec::new(), Vec::new()],
            on_line: req.on_line.clone(),
            log,
            redact: (!redactor.is_empty()).then(|| [redactor.stream(), redactor.stream()]),
            ends_with_newline: true,
        })
    }

    pub(crate) fn push(&mut self, kind: StreamKind, bytes: &[u8]) {
        match &mut self.redact {
            Some(streams) => {
                let clean = streams[kind as usize].push(bytes);
                self.push_clean(kind, &clean);
            }
            None => self.push_clean(kind, bytes),
        }
    }

    fn push_clean(&mut self, kind: StreamKind, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match kind {
            StreamKind::Stdout => self.stdout.push(bytes),
            StreamKind::Stderr => self.stderr.push(bytes),
        }
        self.merged.push(bytes);
        self.ends_with_newline = bytes.ends_with(b"\n");
        if let Some((_, w)) = &mut self.log {
            // A full disk should not abort the command; the in-memory output is still kept.
            let _ = w.write_all(bytes);
        }
        if let Some(cb) = &self.on_line {
            let buf = &mut self.partial[kind as usize];
            let mut rest = bytes;
            while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
                let line = if buf.is_empty() {
                    String::from_utf8_lossy(&rest[..pos])
                } else {
                    buf.extend_from_slice(&rest[..pos]);
                    std::borrow::Cow::Owned(String::from_utf8_lossy(buf).into_owned())
                };
                cb(kind, line.trim_end_matches('\r'));
                buf.clear();
                rest = &rest[pos + 1..];
            }
            buf.extend_from_slice(rest);
            if buf.len() >= MAX_LINE {
                cb(kind, &String::from_utf8_lossy(buf));
                buf.clear();
            }
        }
    }

    /// The command could not start, its arguments past the OS limit (`E2BIG`): the tool's
    /// failure (the model sent too much), not the run's. Exit code 126, as a shell gives.
    pub(crate) fn too_long(
        mut self,
        program: &str,
        command: &Command,
        duration: Duration,
    ) -> Result<ExecOutput, EnvError> {
        let size: usize = match command {
            Command::Argv(argv) => argv.iter().map(|a| a.len() + 1).sum(),
            Command::Shell(line) => line.len() + 1,
        };
        let msg = format!(
            "{program}: argument list too long ({size} bytes of arguments; the OS refused to start the command)\n"
        );
        self.push(StreamKind::Stderr, msg.as_bytes());
        self.finish(Some(126), false, duration)
    }

    pub(crate) fn finish(
        mut self,
        exit_code: Option<i64>,
        timed_out: bool,
        duration: Duration,
    ) -> Result<ExecOutput, EnvError> {
        if let Some(mut streams) = self.redact.take() {
            for kind in [StreamKind::Stdout, StreamKind::Stderr] {
                let rest = streams[kind as usize].finish();
                self.push_clean(kind, &rest);
            }
        }
        if let Some(cb) = &self.on_line {
            for (i, kind) in [StreamKind::Stdout, StreamKind::Stderr]
                .into_iter()
                .enumerate()
            {
                if !self.partial[i].is_empty() {
                    cb(kind, &String::from_utf8_lossy(&self.partial[i]));
                }
            }
        }
        let log = self.log.is_some();
        if let Some((path, mut w)) = self.log.take() {
            let sep = if self.ends_with_newline { "" } else { "\n" };
            let status = match (timed_out, exit_code) {
                (true, _) => "timed out, killed".to_string(),
                (false, Some(c)) => format!("exit code {c}"),
                (false, None) => "exit code unknown".to_string(),
            };
            writeln!(w, "{sep}[{status} after {:.3}s]", duration.as_secs_f64())
                .and_then(|_| w.flush())
                .map_err(|e| EnvError::io(path, e))?;
        }
        let total_bytes = self.merged.total;
        let cut_bytes = self.merged.cut();
        Ok(ExecOutput {
            exit_code,
            stdout: self.stdout.text(log),
            stderr: self.stderr.text(log),
            merged: self.merged.text(log),
            timed_out,
            duration,
            total_bytes,
            cut_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_head_and_tail() {
        let text: String = ('a'..='z').collect();
        let cut = truncate_for_prompt(&text, 3, 2);
        assert_eq!(cut, "abc\n[... 21 characters elided ...]\nyz");
        assert_eq!(truncate_for_prompt("short", 3, 2), "short");
        assert_eq!(
            truncate_for_prompt("ééééé", 1, 0),
            "é\n[... 4 characters elided ...]\n"
        );
    }

    #[test]
    fn capture_keeps_head_and_tail_within_budget() {
        let mut h = HeadTail::new(8);
        for chunk in [&b"abc"[..], b"defgh", b"ijklmnopq", b"rs"] {
            h.push(chunk);
        }
        assert_eq!(h.total, 19);
        assert_eq!(h.cut(), 11);
        assert_eq!(h.text(false), "abcd\n[... 11 bytes cut ...]\npqrs");
        let mut small = HeadTail::new(8);
        small.push(b"abcdef");
        assert_eq!(small.text(false), "abcdef");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a.py"), "a.py");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
