//! `GET /runs/{id}/events`: the run's journal as Server-Sent Events, one event per line,
//! following the run as it goes and ending when it ends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::Server;
use super::error::ApiError;

/// A journal line longer than this is cut (the journal's own lines are far shorter).
const MAX_LINE: usize = 4 * 1024 * 1024;
const POLL: Duration = Duration::from_millis(50);

struct Follow {
    server: Arc<Server>,
    id: String,
    reader: Option<BufReader<tokio::fs::File>>,
    path: std::path::PathBuf,
    partial: Vec<u8>,
    done: bool,
}

pub(super) async fn stream(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let dir = server.run_dir(&id)?;
    let follow = Follow {
        server,
        id,
        reader: None,
        path: dir.join("events.jsonl"),
        partial: Vec::new(),
        done: false,
    };
    let events = futures::stream::unfold(follow, |mut f| async move {
        let event = f.next().await?;
        Some((Ok(event), f))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

impl Follow {
    /// The next whole journal line as an event; `None` once the run has ended and every
    /// line was sent.
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        loop {
            // Whether the run was still going is read before the journal, so a line written
            // just before the end is never missed.
            let live = self.is_live();
            if self.reader.is_none() {
                self.reader = tokio::fs::File::open(&self.path)
                    .await
                    .ok()
                    .map(BufReader::new);
            }
            if let Some(reader) = &mut self.reader {
                // Read by buffer, never a whole line at once: a line is kept up to
                // MAX_LINE and the rest of it is skipped, not held.
                let buf = reader.fill_buf().await.unwrap_or(&[]);
                if !buf.is_empty() {
                    let newline = buf.iter().position(|&b| b == b'\n');
                    let take = newline.map_or(buf.len(), |i| i + 1);
                    let room = MAX_LINE.saturating_sub(self.partial.len());
                    self.partial.extend_from_slice(&buf[..take.min(room)]);
                    reader.consume(take);
                    if newline.is_some() {
                        let line = String::from_utf8_lossy(&self.partial)
                            .trim_end()
                            .to_string();
                        self.partial.clear();
                        let kind = serde_json::from_str::<serde_json::Value>(&line)
                            .ok()
                            .and_then(|v| v.get("event").and_then(|e| e.as_str()).map(String::from))
                            .unwrap_or_else(|| "event".into());
                        return Some(Event::default().event(kind).data(line));
                    }
                    continue;
                }
            }
            if !live {
                self.done = true;
                return Some(
                    Event::default()
                        .event("end")
                        .data(format!("{{\"id\":\"{}\"}}", self.id)),
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn is_live(&self) -> bool {
        self.server
            .live
            .lock()
            .map(|l| l.contains_key(&self.id))
            .unwrap_or(false)
    }
}
