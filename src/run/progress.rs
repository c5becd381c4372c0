//! Progress on stderr: a live status line on a terminal, plain lines otherwise.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use rondo_provider::AttemptRecord;

use super::events::Event;
use super::state::{RunState, Totals};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Quiet,
    Plain,
    Live,
}

pub struct Reporter {
    mode: Mode,
    line_open: Mutex<bool>,
    redactor: rondo_env::Redactor,
}

impl Reporter {
    pub fn new(mode: Mode, redactor: rondo_env::Redactor) -> Self {
        Reporter {
            mode,
            line_open: Mutex::new(false),
            redactor,
        }
    }

    fn print(&self, text: &str) {
        let text = self.redactor.redact(text);
        let mut err = std::io::stderr().lock();
        if let Ok(mut open) = self.line_open.lock()
            && *open
        {
            let _ = write!(err, "\r\x1b[2K");
            *open = false;
        }
        let _ = writeln!(err, "{text}");
    }

    pub fn role_start(&self, name: &str, kind: &str, step: u64, totals: &Totals, started: Instant) {
        if self.mode == Mode::Quiet {
            return;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let tokens = totals.input_tokens + totals.output_tokens;
        match self.mode {
            Mode::Quiet => {}
            Mode::Plain => self.print(&format!(
                "[{elapsed:7.2}s] step {step:>4}  {name} ({kind})  tokens {tokens}  cost ${:.4}",
                totals.cost
            )),
            Mode::Live => {
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r\x1b[2K▶ step {step} · {name} ({kind}) · {elapsed:.1}s · {tokens} tokens · ${:.4}",
                    totals.cost
                );
                let _ = err.flush();
                if let Ok(mut open) = self.line_open.lock() {
                    *open = true;
                }
            }
        }
    }

    pub fn event(&self, event: &Event) {
        if self.mode != Mode::Plain {
            return;
        }
        if let Event::Route { to, condition, .. } = event {
            let cond = if condition.is_empty() {
                String::new()
            } else {
                format!("  [{condition}]")
            };
            self.print(&format!("            → {}{cond}", to.join(", ")));
        }
    }

    /// A reply that was rejected; the call is asked again (or the role's outcome is invalid).
    pub fn invalid_reply(&self, role: &str, attempt: u64, error: &str) {
        if self.mode != Mode::Quiet {
            self.print(&format!("  ! {role} attempt {attempt}: {error}"));
        }
    }

    pub fn attempts(&self, records: &[AttemptRecord]) {
        if self.mode == Mode::Quiet {
            return;
        }
        for r in records.iter().filter(|r| r.error.is_some()) {
            let delay = r
                .retry_delay_ms
                .map(|d| format!(", retrying in {d} ms"))
                .unwrap_or_default();
            self.print(&format!(
                "  ! {} attempt {} on `{}`: {}{delay}",
                r.role,
                r.attempt,
                r.profile,
                r.error.clone().unwrap_or_default()
            ));
        }
    }

    pub fn shows_events(&self) -> bool {
        self.mode != Mode::Quiet
    }

    /// Whether the run is shown live on a terminal (answers stream in).
    pub fn live(&self) -> bool {
        self.mode == Mode::Live
    }

    /// A piece of an LLM answer as it arrives.
    pub fn delta(&self, role: &str, text: &str) {
        if self.mode != Mode::Live || text.is_empty() {
            return;
        }
        let mut err = std::io::stderr().lock();
        if let Ok(mut open) = self.line_open.lock()
            && *open
        {
            let _ = write!(err, "\r\x1b[2K\x1b[2m{role}> ");
            *open = false;
        }
        // A value cut between two pieces is not caught here; the recorded reply is.
        let _ = write!(err, "{}", self.redactor.redact(text));
        let _ = err.flush();
    }

    /// Prints a tool's output lines as they come (none when quiet).
    pub fn line_printer(&self, role: &str) -> Option<impl Fn(&str) + Send + Sync + 'static> {
        let (mode, role) = (self.mode, role.to_string());
        (mode != Mode::Quiet).then_some(move |line: &str| {
            let mut err = std::io::stderr().lock();
            let _ = match mode {
                Mode::Live => writeln!(err, "\r\x1b[2K\x1b[2m{role}| {line}\x1b[0m"),
                _ => writeln!(err, "    {role}| {line}"),
            };
        })
    }

    pub fn warn(&self, text: &str) {
        self.print(&format!("warning: {text}"));
    }

    pub fn finish(&self, exit: &str, reason: &str, state: &RunState) {
        if self.mode == Mode::Quiet {
            return;
        }
        let t = &state.totals;
        self.print(&format!(
            "exit `{exit}` ({reason}) after {} steps · {} LLM calls · {} tokens · ${:.4}",
            state.step,
            t.llm_calls,
            t.input_tokens + t.output_tokens,
            t.cost
        ));
    }
}
