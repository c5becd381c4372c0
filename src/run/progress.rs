//! Progress on stderr: a live status line on a terminal, plain lines otherwise.
//!
//! On a terminal the screen holds three kinds of output: whole lines that stay (a finished
//! step, a retry, a tool's output line), streamed reply text that stays, and one status
//! line that is redrawn and erased. [`Screen`] knows which of them the cursor's line holds,
//! so a status line is only ever erased by the next one, streamed text is ended (style
//! reset, newline) before anything else is written, and every style is closed on its line.
//! (A progress-bar library redraws its bar over the cursor's line, which a reply streamed a
//! piece at a time is: so the three states are kept here.)

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rondo_provider::{AttemptOutcome, AttemptRecord};

use super::bus::Subscriber;
use super::events::{Entry, Event};
use super::state::{RunState, Totals};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Quiet,
    Plain,
    Live,
}

const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const ERASE_LINE: &str = "\r\x1b[2K";

/// What the cursor's line holds on a live terminal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Cursor {
    /// The start of an empty line.
    #[default]
    Clear,
    /// The status line, to be erased before anything else is written.
    Status,
    /// Streamed text of `role`'s reply, dimmed, its line not ended.
    Reply(String),
}

/// Shared by the reporter and the printers of tool output (which outlive a borrow).
#[derive(Clone)]
struct Screen {
    mode: Mode,
    cursor: Arc<Mutex<Cursor>>,
}

impl Screen {
    /// Writes whole lines that stay, after taking the cursor's line back to a clear one.
    fn lines(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let _ = err.write_all(end_of(&cursor).as_bytes());
        *cursor = Cursor::Clear;
        let _ = writeln!(err, "{text}");
        let _ = err.flush();
    }

    /// Replaces the status line (or starts one under what stays).
    fn status(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let _ = err.write_all(end_of(&cursor).as_bytes());
        *cursor = Cursor::Status;
        let _ = write!(err, "{text}");
        let _ = err.flush();
    }

    /// Streamed text of `role`'s reply, continuing its line.
    fn reply(&self, role: &str, text: &str) {
        let mut err = std::io::stderr().lock();
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        if *cursor != Cursor::Reply(role.to_string()) {
            let _ = err.write_all(end_of(&cursor).as_bytes());
            let _ = write!(err, "{DIM}{role}> ");
            *cursor = Cursor::Reply(role.to_string());
        }
        // Every line ends its style: a terminal's scrollback keeps no open style.
        let text = text.replace('\n', &format!("{RESET}\n{DIM}"));
        let _ = write!(err, "{text}");
        let _ = err.flush();
    }
}

/// What takes the cursor's line back to the start of a clear line.
fn end_of(cursor: &Cursor) -> &'static str {
    match cursor {
        Cursor::Clear => "",
        Cursor::Status => ERASE_LINE,
        Cursor::Reply(_) => "\x1b[0m\n",
    }
}

/// Text from a tool or a model made safe to print: escape sequences and other control
/// characters are shown (`^[`), not obeyed, so they cannot move the cursor, recolour or
/// retitle the terminal. Newlines and tabs stay; a carriage return goes.
pub fn neutralise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {}
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) => {
                out.push_str(&format!("<{:02x}>", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// Continuation lines of a message (a server's multi-line error) under its first line's
/// text, so they do not read as lines of their own.
fn indent(text: &str, by: usize) -> String {
    let pad = format!("\n{}", " ".repeat(by));
    text.trim_end().replace('\n', &pad)
}

/// Replies streamed to the screen whose fate is not known yet, by label (`role`, or
/// `role #visit` in a map): text of the attempt under way, and whole replies still to be
/// read. Text of an attempt that fails, or of a reply that is refused, is marked discarded.
#[derive(Default)]
struct Streamed {
    arriving: HashSet<String>,
    checking: HashSet<String>,
}

#[derive(Clone)]
pub struct Reporter {
    screen: Screen,
    redactor: rondo_env::Redactor,
    streamed: Arc<Mutex<Streamed>>,
}

/// The run's progress on the terminal as its events come: a line a finished step (with
/// the run's totals after it) and, in plain output, where the run goes next.
pub struct Progress {
    reporter: Reporter,
    started: Instant,
    /// The kind of the role whose step is being recorded (`role_start` says it).
    kind: String,
}

impl Progress {
    pub fn new(reporter: Reporter, started: Instant) -> Self {
        Progress {
            reporter,
            started,
            kind: String::new(),
        }
    }
}

impl Subscriber for Progress {
    fn event(&mut self, entry: &std::sync::Arc<Entry>) {
        match &entry.event {
            Event::RoleStart { kind, .. } => self.kind.clone_from(kind),
            Event::RoleEnd {
                role, step, totals, ..
            } => {
                let totals = totals.clone().unwrap_or_default();
                self.reporter
                    .role_done(role, &self.kind, *step, &totals, self.started);
            }
            event => self.reporter.event(event),
        }
    }
}

impl Reporter {
    pub fn new(mode: Mode, redactor: rondo_env::Redactor) -> Self {
        Reporter {
            screen: Screen {
                mode,
                cursor: Arc::new(Mutex::new(Cursor::Clear)),
            },
            redactor,
            streamed: Arc::default(),
        }
    }

    fn streamed(&self) -> std::sync::MutexGuard<'_, Streamed> {
        self.streamed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Says that the text streamed above for `label` is not the answer.
    fn discarded(&self, label: &str, why: &str) {
        self.print(&format!("  ✗ {label}: streamed reply discarded ({why})"));
    }

    fn mode(&self) -> Mode {
        self.screen.mode
    }

    fn print(&self, text: &str) {
        let text = self.redactor.redact(text);
        self.screen.lines(&text);
    }

    /// The status line while a role runs (on a terminal; plain output waits for the end).
    #[inline]
    pub fn role_start(&self, name: &str, kind: &str, step: u64, started: Instant) {
        if self.mode() != Mode::Live {
            return;
        }
        let elapsed = started.elapsed().as_secs_f64();
        self.screen
            .status(&format!("▶ step {step} · {name} ({kind}) · {elapsed:.1}s"));
    }

    /// A finished step, with the run's totals after it.
    pub fn role_done(&self, name: &str, kind: &str, step: u64, totals: &Totals, started: Instant) {
        if self.mode() == Mode::Quiet {
            return;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let tokens = totals.input_tokens + totals.output_tokens;
        self.print(&format!(
            "[{elapsed:7.2}s] step {step:>4}  {name} ({kind})  tokens {tokens}  cost ${:.4}",
            totals.cost
        ));
    }

    pub fn event(&self, event: &Event) {
        if self.mode() != Mode::Plain {
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
        // The reply streamed for this role, when only one of its visits has one waiting.
        let refused = {
            let mut streamed = self.streamed();
            let branch = format!("{role} #");
            let mut waiting = streamed
                .checking
                .iter()
                .filter(|l| *l == role || l.starts_with(&branch));
            match (waiting.next().cloned(), waiting.next()) {
                (Some(label), None) => streamed.checking.take(&label),
                _ => None,
            }
        };
        if let Some(label) = refused {
            self.discarded(&label, &format!("attempt {attempt} refused"));
        }
        if self.mode() != Mode::Quiet {
            let head = format!("  ! {role} attempt {attempt}: ");
            self.print(&format!("{head}{}", indent(error, 4)));
        }
    }

    /// One provider attempt, as soon as it ends: a failed one says what comes next (a
    /// retry after a wait, or `fallback`, the next profile of the chain). The last
    /// failure is left to the step's error.
    pub fn attempt(&self, r: &AttemptRecord, fallback: Option<&str>) {
        if self.mode() == Mode::Quiet {
            return;
        }
        // What this attempt streamed: kept while its reply is read, discarded if it failed.
        let failed_text = {
            let mut streamed = self.streamed();
            let labels = [format!("{} #{}", r.role, r.visit), r.role.clone()];
            // A reply of an earlier attempt was read already.
            for l in &labels {
                streamed.checking.remove(l);
            }
            let label = labels.into_iter().find(|l| streamed.arriving.contains(l));
            match label {
                Some(label) => {
                    streamed.arriving.remove(&label);
                    if r.outcome == AttemptOutcome::Success {
                        streamed.checking.insert(label);
                        None
                    } else {
                        Some(label)
                    }
                }
                None => None,
            }
        };
        if let Some(label) = failed_text {
            let why = format!("attempt {} on `{}` failed", r.attempt, r.profile);
            self.discarded(&label, &why);
        }
        let Some(error) = &r.error else {
            return;
        };
        let next = match (r.retry_delay_ms, fallback) {
            (Some(d), _) => format!("; retrying in {d} ms"),
            (None, Some(f)) => format!("; falling back to `{f}`"),
            // The call's last error: the step's failure says it, once.
            (None, None) => return,
        };
        self.print(&format!(
            "  ! {} attempt {} on `{}`: {}{next}",
            r.role,
            r.attempt,
            r.profile,
            indent(error, 4)
        ));
    }

    pub fn shows_events(&self) -> bool {
        self.mode() != Mode::Quiet
    }

    /// Whether the run is shown live on a terminal (answers stream in).
    pub fn live(&self) -> bool {
        self.mode() == Mode::Live
    }

    /// A piece of an LLM answer as it arrives.
    pub fn delta(&self, role: &str, text: &str) {
        if self.mode() != Mode::Live || text.is_empty() {
            return;
        }
        {
            let mut streamed = self.streamed();
            streamed.checking.remove(role);
            streamed.arriving.insert(role.to_string());
        }
        // A value cut between two pieces is not caught here; the recorded reply is.
        let text = neutralise(&self.redactor.redact(text));
        self.screen.reply(role, &text);
    }

    /// Prints a tool's output lines as they come (none when quiet).
    pub fn line_printer(&self, role: &str) -> Option<impl Fn(&str) + Send + Sync + 'static> {
        let (screen, redactor, role) =
            (self.screen.clone(), self.redactor.clone(), role.to_string());
        (screen.mode != Mode::Quiet).then_some(move |line: &str| {
            let line = neutralise(&redactor.redact(line));
            match screen.mode {
                Mode::Live => screen.lines(&format!("{DIM}{role}| {line}{RESET}")),
                _ => screen.lines(&format!("    {role}| {line}")),
            }
        })
    }

    pub fn warn(&self, text: &str) {
        self.print(&format!("warning: {text}"));
    }

    pub fn finish(&self, exit: &str, reason: &str, state: &RunState) {
        if self.mode() == Mode::Quiet {
            return;
        }
        let t = &state.totals;
        self.print(&format!(
            "exit `{exit}` ({}) after {} steps · {} LLM calls · {} tokens · ${:.4}",
            indent(reason, 2),
            state.step,
            t.llm_calls,
            t.input_tokens + t.output_tokens,
            t.cost
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(
            neutralise("\x1b[31mred\x1b[0m\x07\ttab\r\nnext\u{9b}2J"),
            "^[[31mred^[[0m^G\ttab\nnext<9b>2J"
        );
        assert_eq!(neutralise("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn continuation_lines_are_indented() {
        assert_eq!(indent("first\nsecond\n", 4), "first\n    second");
    }
}
