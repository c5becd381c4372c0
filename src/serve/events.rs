//! `GET /runs/{id}/events`: the run's journal as Server-Sent Events, each carrying its
//! journal line and its position (`seq`) as the event's id. A run this server drives is
//! followed as it publishes its events (nothing polls the journal file); a stream that
//! starts late, or reconnects with `Last-Event-ID`, first reads what it missed from the
//! journal, once, then follows. The stream ends with an `end` event when the run has.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as Sse, KeepAlive};
use futures::Stream;
use tokio::sync::watch;

use super::Server;
use super::error::ApiError;
use crate::run::bus::Subscriber;
use crate::run::events::{Entry, Event};
use crate::run::rundir::{self, JournalLine, JournalLines};
use crate::run::state::Totals;

/// Events handed to the connection at a time (read from the journal or from memory).
const BATCH: usize = 256;
/// Bytes of events a live run keeps in memory for streams that fall behind (those the
/// journal file does not hold yet are all kept: a step's worth).
const KEEP_BYTES: usize = 4 << 20;

/// What a live run has published, for the streams that follow it.
pub(super) struct Hub {
    feed: Mutex<Feed>,
    /// Bumped at every change: the streams waiting on it look again.
    changed: watch::Sender<u64>,
}

/// An event as a stream sends it.
struct Line {
    seq: u64,
    kind: &'static str,
    /// The journal line.
    data: String,
}

impl Line {
    fn of(entry: &Entry) -> Option<Line> {
        Some(Line {
            seq: entry.seq,
            kind: entry.event.kind(),
            data: serde_json::to_string(entry).ok()?,
        })
    }
}

#[derive(Default)]
struct Feed {
    /// The latest events published; an event leaves once the journal file holds it and
    /// more than [`KEEP_BYTES`] are kept.
    recent: VecDeque<Arc<Line>>,
    /// The bytes of `recent`.
    bytes: usize,
    /// Every event up to here is in the journal file.
    written: u64,
    /// The last event there is (published, or in the file when the hub joined the run).
    last: u64,
    /// The run's totals after its last step.
    totals: Option<Totals>,
    /// The run has ended: nothing more comes.
    closed: bool,
}

/// What a stream does next.
enum Next {
    Send(Vec<Arc<Line>>),
    /// The events after the stream's position up to `until` are not in memory: they are
    /// in the journal file (or soon will be).
    ReadFile {
        until: u64,
        /// The run has ended: what the file does not give now, nothing will.
        closed: bool,
    },
    Wait,
    End,
}

impl Hub {
    pub(super) fn new() -> Arc<Hub> {
        Arc::new(Hub {
            feed: Mutex::new(Feed::default()),
            changed: watch::Sender::new(0),
        })
    }

    fn update(&self, change: impl FnOnce(&mut Feed)) {
        {
            let mut feed = self.feed.lock().unwrap_or_else(|e| e.into_inner());
            change(&mut feed);
            while feed.bytes > KEEP_BYTES
                && let Some(first) = feed.recent.front()
                && first.seq <= feed.written
            {
                feed.bytes -= first.data.len();
                feed.recent.pop_front();
            }
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The run has ended (its records are complete).
    pub(super) fn close(&self) {
        self.update(|feed| feed.closed = true);
    }

    /// The run's totals after its last step; `None` before its first.
    pub(super) fn totals(&self) -> Option<Totals> {
        self.feed.lock().ok().and_then(|f| f.totals.clone())
    }

    fn next_after(&self, after: u64) -> Next {
        let feed = self.feed.lock().unwrap_or_else(|e| e.into_inner());
        if feed.last <= after {
            return if feed.closed { Next::End } else { Next::Wait };
        }
        match feed.recent.front() {
            Some(first) if first.seq <= after + 1 => Next::Send(
                feed.recent
                    .iter()
                    .skip_while(|e| e.seq <= after)
                    .take(BATCH)
                    .cloned()
                    .collect(),
            ),
            Some(first) => Next::ReadFile {
                until: first.seq - 1,
                closed: feed.closed,
            },
            None => Next::ReadFile {
                until: feed.last,
                closed: feed.closed,
            },
        }
    }
}

/// The run's side of a [`Hub`]: what the interpreter publishes goes in.
pub(super) struct Feeder(pub(super) Arc<Hub>);

impl Subscriber for Feeder {
    fn event(&mut self, entry: &Arc<Entry>) {
        // Serialized once here, for every stream (and so its size is known).
        let line = Line::of(entry).map(Arc::new);
        self.0.update(|feed| {
            match &entry.event {
                Event::RoleEnd {
                    totals: Some(t), ..
                }
                | Event::Exit { totals: t, .. } => feed.totals = Some(t.clone()),
                _ => {}
            }
            feed.last = feed.last.max(entry.seq);
            if let Some(line) = line {
                feed.bytes += line.data.len();
                feed.recent.push_back(line);
            }
        });
    }

    fn written(&mut self, seq: u64) {
        self.0.update(|feed| {
            feed.written = feed.written.max(seq);
            feed.last = feed.last.max(seq);
        });
    }
}

/// One stream's way through the run's events.
struct Follow {
    id: String,
    dir: PathBuf,
    /// The last event sent (or the client had: `Last-Event-ID`).
    after: u64,
    live: Option<(Arc<Hub>, watch::Receiver<u64>)>,
    /// The journal, opened once, at the first event the stream reads from it.
    lines: Option<JournalLines>,
    queue: VecDeque<Sse>,
    done: bool,
}

pub(super) async fn stream(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<axum::response::Sse<impl Stream<Item = Result<Sse, Infallible>>>, ApiError> {
    let dir = server.run_dir(&id)?;
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_last_event_id",
                    "Last-Event-ID is the id of an event of this stream: a journal position",
                )
            })?,
    };
    let live = server.hub(&id).map(|hub| {
        let changes = hub.changed.subscribe();
        (hub, changes)
    });
    let follow = Follow {
        id,
        dir,
        after,
        live,
        lines: None,
        queue: VecDeque::new(),
        done: false,
    };
    let events = futures::stream::unfold(follow, |mut f| async move {
        let event = f.next().await?;
        Some((Ok(event), f))
    });
    Ok(axum::response::Sse::new(events).keep_alive(KeepAlive::default()))
}

impl Follow {
    /// The next event; `None` once the run has ended and every event was sent.
    async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            let Some((hub, changes)) = &mut self.live else {
                // Not driven here: the journal as it is, to its end.
                if !self.read_file(u64::MAX).await {
                    self.end();
                }
                continue;
            };
            changes.borrow_and_update();
            let waited = match hub.next_after(self.after) {
                Next::Send(lines) => {
                    for line in lines {
                        self.send(&line);
                    }
                    continue;
                }
                Next::End => {
                    self.end();
                    continue;
                }
                Next::Wait => false,
                Next::ReadFile { until, closed } => {
                    let moved = self.read_file(until).await;
                    // A journal that cannot be read after the run's end (moved, deleted)
                    // ends the stream: no change of the run will ever come to wait for.
                    if !moved && closed {
                        self.end();
                        continue;
                    }
                    moved
                }
            };
            if !waited
                && let Some((_, changes)) = &mut self.live
                && changes.changed().await.is_err()
            {
                self.end();
            }
        }
    }

    fn send(&mut self, line: &Line) {
        if line.seq <= self.after {
            return;
        }
        self.after = line.seq;
        self.queue.push_back(
            Sse::default()
                .id(line.seq.to_string())
                .event(line.kind)
                .data(&line.data),
        );
    }

    fn end(&mut self) {
        self.done = true;
        self.queue.push_back(
            Sse::default()
                .event("end")
                .data(serde_json::json!({"id": self.id}).to_string()),
        );
    }

    /// Reads the next events after the stream's position from the journal file, up to
    /// `until` (a batch at a time); whether there were any.
    async fn read_file(&mut self, until: u64) -> bool {
        let following = self.live.is_some();
        let lines = match self.lines.take() {
            Some(lines) => lines,
            None => match rundir::journal_lines(&self.dir) {
                Ok(lines) if following => lines.following(),
                Ok(lines) => lines,
                Err(_) => return false,
            },
        };
        let after = self.after;
        let read = tokio::task::spawn_blocking(move || {
            let mut lines = lines;
            let mut entries = Vec::new();
            let mut at = after;
            while entries.len() < BATCH && at < until {
                match lines.next_after(at) {
                    Some(Ok(JournalLine::Entry(entry))) => {
                        at = entry.seq;
                        entries.extend(Line::of(&entry));
                    }
                    // A line this version does not read is left out of the stream.
                    Some(Ok(JournalLine::Unread(unread))) => {
                        at = unread.seq.unwrap_or(at).max(at);
                    }
                    Some(Err(_)) | None => break,
                }
            }
            (lines, entries, at)
        })
        .await;
        let Ok((lines, entries, at)) = read else {
            return false;
        };
        self.lines = Some(lines);
        let moved = at > self.after;
        for line in &entries {
            self.send(line);
        }
        self.after = self.after.max(at);
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, text: &str) -> Entry {
        Entry {
            seq,
            ts: "2026-01-01T00:00:00.000Z".into(),
            event: Event::ToolCall {
                role: "r".into(),
                visit: seq,
                result: serde_json::Value::String(text.into()),
            },
        }
    }

    /// A stream that fell behind further than the run keeps in memory reads the events
    /// that left memory from the journal, then the rest from memory: in order, each once.
    #[tokio::test]
    async fn a_stream_behind_what_memory_keeps_reads_the_rest_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(100 * 1024);
        let entries: Vec<Entry> = (1..=100).map(|seq| entry(seq, &big)).collect();
        let mut journal = String::new();
        for e in &entries {
            journal.push_str(&serde_json::to_string(e).unwrap());
            journal.push('\n');
        }
        std::fs::write(dir.path().join("events.jsonl"), journal).unwrap();
        let hub = Hub::new();
        let mut feeder = Feeder(hub.clone());
        feeder.written(0);
        for e in &entries {
            feeder.event(&Arc::new(e.clone()));
        }
        feeder.written(100);
        let kept = hub.feed.lock().unwrap().recent.front().unwrap().seq;
        assert!(kept > 1, "memory keeps every event");
        hub.close();

        let mut follow = Follow {
            id: "r".into(),
            dir: dir.path().to_path_buf(),
            after: 0,
            live: Some((hub.clone(), hub.changed.subscribe())),
            lines: None,
            queue: VecDeque::new(),
            done: false,
        };
        let mut count = 0;
        while follow.next().await.is_some() {
            count += 1;
        }
        // Each event once (the queue holds them in order, ids checked as they are sent),
        // then `end`.
        assert_eq!(count, 101);
        assert_eq!(follow.after, 100);
        assert!(follow.lines.is_some(), "the journal was read");
    }

    /// The events before the server joined a run are in its journal only: a stream that
    /// needs them after the run ended, with the file gone, ends instead of waiting forever.
    #[tokio::test]
    async fn a_stream_whose_journal_is_gone_ends_once_the_run_has() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub::new();
        let mut feeder = Feeder(hub.clone());
        feeder.written(2);
        feeder.event(&Arc::new(entry(3, "after the join")));
        feeder.written(3);
        hub.close();
        let mut follow = Follow {
            id: "r".into(),
            dir: dir.path().to_path_buf(),
            after: 1,
            live: Some((hub.clone(), hub.changed.subscribe())),
            lines: None,
            queue: VecDeque::new(),
            done: false,
        };
        let mut names = Vec::new();
        while let Some(event) =
            tokio::time::timeout(std::time::Duration::from_secs(60), follow.next())
                .await
                .expect("the stream ends")
        {
            names.push(event);
        }
        assert_eq!(
            names.len(),
            1,
            "only `end`: event 2 cannot be read and 3 must not jump it"
        );
        assert_eq!(follow.after, 1);
    }
}
