//! A run's events, published once. Each goes to the journal first, written synchronously
//! as it always was (a step is exactly as durable as before), then to each subscriber in
//! the order they subscribed: the terminal progress, a server's live stream, an eval's
//! progress. Subscribers also learn how far the journal file holds the events, so a reader
//! that joins late reads the start from the file once and follows the rest here.

use std::sync::Arc;

use serde::Deserialize;

use super::clock;
use super::events::{Entry, Event};
use super::rundir::RunDir;

/// Something that follows a run's events as they happen.
pub trait Subscriber: Send + Sync {
    /// An event the journal has: its `seq` and `ts` are the journal line's, its secrets
    /// are replaced as there.
    fn event(&mut self, entry: &Arc<Entry>);

    /// Every event up to `seq` is written to the journal file: a reader finds it there.
    fn written(&mut self, _seq: u64) {}
}

#[derive(Default)]
pub struct Bus {
    subscribers: Vec<Box<dyn Subscriber>>,
    /// The last event's position when no journal numbers them (`--no-checkpoint`).
    seq: u64,
}

impl Bus {
    pub fn subscribe(&mut self, subscriber: Box<dyn Subscriber>) {
        self.subscribers.push(subscriber);
    }

    pub fn has_subscribers(&self) -> bool {
        !self.subscribers.is_empty()
    }

    /// Records `event` in `journal` (secrets replaced), then hands it to every
    /// subscriber. The error is the journal's; the subscribers have the event regardless.
    pub fn publish(
        &mut self,
        mut journal: Option<&mut RunDir>,
        redactor: &rondo_env::Redactor,
        event: Event,
    ) -> std::io::Result<()> {
        if let Some(dir) = journal.as_deref_mut() {
            self.pass_own_records(dir);
        }
        if journal.is_none() && self.subscribers.is_empty() {
            return Ok(());
        }
        let mut record = serde_json::to_value(&event)?;
        redactor.redact_json(&mut record);
        // What subscribers get is what the journal holds: read back from the redacted
        // record. (One that no longer reads, a secret inside a name, is left to the file.)
        let shown = match (self.subscribers.is_empty(), redactor.is_empty()) {
            (true, _) => None,
            (false, true) => Some(event),
            (false, false) => Event::deserialize(&record).ok(),
        };
        let (written, seq, ms) = match journal {
            Some(dir) => {
                let written = dir.append(record);
                let (seq, ms) = dir.last_line();
                (written, seq, ms)
            }
            None => {
                self.seq += 1;
                (Ok(()), self.seq, clock::unix_ms())
            }
        };
        if let Some(event) = shown {
            let entry = Arc::new(Entry {
                seq,
                ts: clock::rfc3339(ms),
                event,
            });
            for s in &mut self.subscribers {
                s.event(&entry);
            }
        }
        written
    }

    /// The journal file holds every event up to the journal's last line (after a
    /// checkpoint, or a flush): its own records are published, then the news.
    pub fn written(&mut self, journal: &mut RunDir) {
        self.pass_own_records(journal);
        let (seq, _) = journal.last_line();
        for s in &mut self.subscribers {
            s.written(seq);
        }
    }

    /// Adds a subscriber while the run goes on: the journal keeps its own records for it
    /// from now on, and what was published before is flushed to the file, where the
    /// subscriber can read it.
    pub fn join(&mut self, subscriber: Box<dyn Subscriber>, journal: Option<&mut RunDir>) {
        self.subscribe(subscriber);
        if let Some(dir) = journal {
            dir.keep_own_records();
            if dir.flush().is_ok() {
                self.written(dir);
            }
        }
    }

    /// The records the journal wrote itself (checkpoints, append lengths) go out in their
    /// place, before the next event.
    fn pass_own_records(&mut self, journal: &mut RunDir) {
        if self.subscribers.is_empty() {
            return;
        }
        for entry in journal.take_own_records() {
            let entry = Arc::new(entry);
            for s in &mut self.subscribers {
                s.event(&entry);
            }
        }
    }
}
