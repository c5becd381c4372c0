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
}

impl fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecRequest")
            .field("command", &self.command)
            .field("workdir", &self.workdir)
            .field("env", &self.env)
            .field("timeout", &self.timeout)
            .field("log_path", &self.log_path)
            .field("on_line", &self.on_line.is_some())
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

/// Accumulates output from both streams: separate and merged buffers, line callbacks,
/// and the log file.
pub(crate) struct Collector {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    merged: Vec<u8>,
    partial: [Vec<u8>; 2],
    on_line: Option<LineCallback>,
    log: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    /// One per stream, so that a secret is replaced before any copy of the output is made.
    redact: Option<[StreamRedactor; 2]>,
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
        Ok(Collector {
            stdout: Vec::new(),
            stderr: Vec::new(),
            merged: Vec::new(),
            partial: [Vec::new(), Vec::new()],
            on_line: req.on_line.clone(),
            log,
            redact: (!redactor.is_empty()).then(|| [redactor.stream(), redactor.stream()]),
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
        match kind {
            StreamKind::Stdout => self.stdout.extend_from_slice(bytes),
            StreamKind::Stderr => self.stderr.extend_from_slice(bytes),
        }
        self.merged.extend_from_slice(bytes);
        if let Some((_, w)) = &mut self.log {
            // A full disk should not abort the command; the in-memory output is still kept.
            let _ = w.write_all(bytes);
        }
        if let Some(cb) = &self.on_line {
            let buf = &mut self.partial[kind as usize];
            buf.extend_from_slice(bytes);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]);
                cb(kind, text.trim_end_matches('\r'));
            }
        }
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
        if let Some((path, mut w)) = self.log.take() {
            let sep = if self.merged.is_empty() || self.merged.ends_with(b"\n") {
                ""
            } else {
                "\n"
            };
            let status = match (timed_out, exit_code) {
                (true, _) => "timed out, killed".to_string(),
                (false, Some(c)) => format!("exit code {c}"),
                (false, None) => "exit code unknown".to_string(),
            };
            writeln!(w, "{sep}[{status} after {:.3}s]", duration.as_secs_f64())
                .and_then(|_| w.flush())
                .map_err(|e| EnvError::io(path, e))?;
        }
        Ok(ExecOutput {
            exit_code,
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
            merged: String::from_utf8_lossy(&self.merged).into_owned(),
            timed_out,
            duration,
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
    fn quoting() {
        assert_eq!(shell_quote("a.py"), "a.py");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
