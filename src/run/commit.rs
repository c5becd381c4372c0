//! Group commit: the syncs that make runs' steps durable, for every run of the process.
//!
//! A step's records are written to its run's files at once (into the page cache); what
//! the step then waits for is their sync. The runs of one process (a server, an eval)
//! hand those syncs to one committer thread instead of each calling `fdatasync` on the
//! thread that drives it. The committer takes every sync that arrived while the previous
//! batch ran as the next batch and issues the batch's syncs together: the filesystem's
//! journal (ext4's jbd2, XFS's log) then commits them in one transaction and one device
//! flush, and each step is acknowledged when the sync that covers it returns. The
//! runtime's threads never block on the disk, so a process needs no thread per run in
//! flight.
//!
//! `syncfs` would make one call cover the whole batch, but it also flushes every other
//! program's dirty data on the same filesystem (a build's gigabytes); a run folder stays
//! self-contained (a shared log outside it would not move with it), so the unit of sync
//! stays the run's own file.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use tokio::sync::oneshot;

/// What a step waits for before it is acknowledged.
pub enum Job {
    /// `fdatasync` of a journal. Two for the same file in one batch are synced once.
    SyncData(Arc<File>),
    /// Writes that must happen in order after the journal's sync (a snapshot).
    Ordered(Box<dyn FnOnce() -> io::Result<()> + Send + Sync>),
}

impl Job {
    /// Does the job on the calling thread (start-up, before any step, and code that has
    /// no runtime).
    pub fn run(self) -> io::Result<()> {
        match self {
            Job::SyncData(file) => file.sync_data(),
            Job::Ordered(write) => write(),
        }
    }

    /// This job, then `next` if it succeeded: one hand-over to the committer for both.
    pub fn then(self, next: Job) -> Job {
        Job::Ordered(Box::new(move || {
            self.run()?;
            next.run()
        }))
    }

    /// Hands the job to the committer and waits, without holding a thread, until it is
    /// done. A process with one run does it on its own thread: there is nothing to group
    /// and no other run to hold up, and the hand-over would only add its latency.
    pub async fn commit(self) -> io::Result<()> {
        if RUNS.load(Ordering::Relaxed) <= 1 {
            return self.run();
        }
        let (done, acknowledged) = oneshot::channel();
        let request = Request { job: self, done };
        if let Err(mpsc::SendError(request)) = committer().send(request) {
            // The committer thread could not be started: the job is still done.
            return request.job.run();
        }
        acknowledged
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the committer thread stopped")))
    }
}

/// Runs of this process that exist (started or resumed, not yet dropped).
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Counts a run among the process's runs for as long as it lives.
pub struct InFlight(());

impl InFlight {
    pub fn new() -> InFlight {
        RUNS.fetch_add(1, Ordering::Relaxed);
        InFlight(())
    }
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        RUNS.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Request {
    job: Job,
    done: oneshot::Sender<io::Result<()>>,
}

/// Most syncs of one batch issued at the same time; the rest of the batch waits for a
/// free thread (a thousand runs in flight do not make a thousand threads).
const MAX_PARALLEL: usize = 32;

fn committer() -> &'static mpsc::Sender<Request> {
    static COMMITTER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    COMMITTER.get_or_init(|| {
        let (send, receive) = mpsc::channel::<Request>();
        let started = std::thread::Builder::new()
            .name("rondo-commit".into())
            .spawn(move || {
                while let Ok(first) = receive.recv() {
                    let mut batch = vec![first];
                    batch.extend(receive.try_iter());
                    commit_batch(batch);
                }
            });
        if started.is_err() {
            // `send` on a channel whose receiver is gone fails: callers run jobs inline.
            let (send, _) = mpsc::channel();
            return send;
        }
        send
    })
}

/// Does every job of the batch, the syncs of distinct files at the same time, and
/// answers each request with its own job's result.
fn commit_batch(batch: Vec<Request>) {
    // Requests for a file already in the batch wait on its one sync.
    let mut groups: Vec<(Job, Vec<oneshot::Sender<io::Result<()>>>)> = Vec::new();
    for Request { job, done } in batch {
        if let Job::SyncData(file) = &job
            && let Some((_, waiting)) = groups
                .iter_mut()
                .find(|(j, _)| matches!(j, Job::SyncData(f) if Arc::ptr_eq(f, file)))
        {
            waiting.push(done);
            continue;
        }
        groups.push((job, vec![done]));
    }
    let answer = |result: io::Result<()>, waiting: Vec<oneshot::Sender<io::Result<()>>>| {
        for done in waiting {
            let copy = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            let _ = done.send(copy);
        }
    };
    if groups.len() == 1 {
        let (job, waiting) = groups.pop().expect("one group");
        answer(job.run(), waiting);
        return;
    }
    // The batch's syncs are issued at the same time on the process's sync threads, and
    // the batch ends when the last is answered.
    let (finished, all_finished) = mpsc::channel::<()>();
    let mut sent = 0;
    for (job, waiting) in groups {
        let finished = finished.clone();
        let task: Task = Box::new(move || {
            answer(job.run(), waiting);
            let _ = finished.send(());
        });
        if let Err(mpsc::SendError(task)) = syncers().send(task) {
            task();
        } else {
            sent += 1;
        }
    }
    drop(finished);
    for _ in 0..sent {
        // A task lost with its thread answers nothing: its steps get an error (their
        // answer channels are dropped), and the batch does not wait for it.
        if all_finished.recv().is_err() {
            break;
        }
    }
}

type Task = Box<dyn FnOnce() + Send>;

/// The threads that issue a batch's syncs: [`MAX_PARALLEL`], started by the first batch
/// of more than one sync and kept (a thread started for each sync cost more CPU than the
/// sync itself).
fn syncers() -> &'static mpsc::Sender<Task> {
    static SYNCERS: OnceLock<mpsc::Sender<Task>> = OnceLock::new();
    SYNCERS.get_or_init(|| {
        let (send, receive) = mpsc::channel::<Task>();
        let queue = Arc::new(std::sync::Mutex::new(receive));
        let mut started = 0;
        for _ in 0..MAX_PARALLEL {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name("rondo-sync".into())
                .stack_size(256 << 10)
                .spawn(move || {
                    loop {
                        let task = match queue.lock() {
                            Ok(q) => q.recv(),
                            Err(_) => return,
                        };
                        match task {
                            Ok(task) => task(),
                            Err(_) => return,
                        }
                    }
                });
            if spawned.is_ok() {
                started += 1;
            }
        }
        if started == 0 {
            // `send` on a channel whose receiver is gone fails: the committer runs them.
            let (send, _) = mpsc::channel();
            return send;
        }
        send
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[tokio::test]
    async fn every_request_of_a_batch_gets_its_own_jobs_result() {
        // Two runs in the process: the jobs go through the committer.
        let _runs = (InFlight::new(), InFlight::new());
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = Vec::new();
        for i in 0..50 {
            let mut f = File::create(dir.path().join(format!("j{i}"))).unwrap();
            writeln!(f, "line {i}").unwrap();
            let file = Arc::new(f);
            jobs.push(tokio::spawn(Job::SyncData(file.clone()).commit()));
            jobs.push(tokio::spawn(Job::SyncData(file).commit()));
        }
        let failing =
            tokio::spawn(Job::Ordered(Box::new(|| Err(io::Error::other("disk full")))).commit());
        for job in jobs {
            job.await.unwrap().unwrap();
        }
        let e = failing.await.unwrap().unwrap_err();
        assert_eq!(e.to_string(), "disk full");
    }

    #[tokio::test]
    async fn an_ordered_job_runs_its_writes_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let p = path.clone();
        Job::Ordered(Box::new(move || {
            std::fs::write(&p, "a")?;
            let mut f = std::fs::OpenOptions::new().append(true).open(&p)?;
            f.write_all(b"b")?;
            f.sync_all()
        }))
        .commit()
        .await
        .unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), "ab");
    }
}
