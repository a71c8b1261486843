//! The writer: one thread per store that owns the write connection and commits writes in groups.
//!
//! SQLite lets one connection write at a time, and a commit in `synchronous = FULL` waits for
//! the disk. Writes that arrive while a transaction commits wait in a bounded queue; the writer
//! then takes every waiting write (up to [`SqliteOptions::batch_size`]) into one transaction, so
//! that one commit, and one flush, makes them all durable:
//!
//! ```text
//! BEGIN IMMEDIATE
//!   (write 1)
//!   (write 2)   -- failed: wrote nothing
//!   (write 3)
//! COMMIT
//! ```
//!
//! A failing write is undone without its neighbours, mostly without a savepoint: the writes on
//! the hot path change the store with one statement (complete, release, renew, a streamed
//! response's part, discarding an execution's parts, the census board's one `UPDATE`), which
//! SQLite undoes by itself when it fails. An acquire runs two, the fencing counter's increment
//! and then the record's row; a failure of the second leaves a token skipped, which fencing
//! allows (tokens grow; they need not be consecutive). A savepoint around each write would cost
//! it two statements more and a copy of each page it changes (kept for the rollback) and buy
//! nothing. Only `forget` and the purge, rare, which delete from both `idem_records` and
//! `idem_parts`, run in a savepoint: a failure of their second `DELETE` undoes the first. When a
//! failure makes SQLite roll the whole transaction back (a full disk, an I/O error), the writes
//! before it are gone too, and they all fail with it.
//!
//! Writes run in the order they were queued, so two writes of one key are never reordered; and
//! every caller gets its result only once `COMMIT` returned: nothing is acknowledged before it is
//! durable. A lone write waits for nothing: the writer never holds a transaction open for more.
//!
//! The writer is a thread rather than a task because a transaction is many short statements in a
//! row: on a thread of its own, with a connection of its own (rusqlite, prepared statements
//! cached), they run back to back, where an async driver hands each one to its worker thread and
//! back. Callers wait on their reply channel, not on the thread.
//!
//! [`SqliteOptions::batch_size`]: crate::SqliteOptions::batch_size

use std::{fmt, sync::Arc};

use idem_core::{Acquisition, CensusClaim, CensusTurn, Clock, StoreError, Timestamp};
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::{
    Error,
    error::{closed, is_corruption},
    writes::{self, Acquire, AppendPart, HolderWrite, Parts},
};

/// A write for the writer, with where its result goes.
pub(crate) enum Job {
    Acquire(Acquire, Reply<Acquisition>),
    Holder(HolderWrite, Reply<Timestamp>),
    Forget(writes::Target, Reply<bool>),
    Purge(usize, Reply<usize>),
    AppendPart(AppendPart, Reply<()>),
    DiscardParts(Parts, Reply<()>),
    ClaimCensus(CensusClaim, Reply<CensusTurn>),
    PostCensus(writes::PostCensus, Reply<bool>),
    /// Runs what is queued, closes the connection, then answers.
    Close(oneshot::Sender<()>),
    /// Holds the writer until the sender is used or dropped: tests queue writes meanwhile, which
    /// then reach it together.
    #[cfg(test)]
    Pause(oneshot::Receiver<()>),
    /// Runs on the writer's connection between two transactions: tests read its settings.
    #[cfg(test)]
    Inspect(Box<dyn FnOnce(&Connection) + Send>),
}

pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// The writer's connection, and how it sizes its transactions.
pub(crate) struct WriterOptions {
    pub(crate) connection: Connection,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) queue_size: usize,
    pub(crate) batch_size: usize,
}

/// The store's handle on its writer thread. Clones share the thread; it ends when the store is
/// closed or every handle is dropped.
#[derive(Clone)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Starts the writer's thread on its connection.
    pub(crate) fn start(options: WriterOptions) -> Result<Self, Error> {
        let (jobs, queued) = mpsc::channel(options.queue_size);
        let thread = Thread {
            connection: options.connection,
            clock: options.clock,
            queued,
            batch_size: options.batch_size,
        };
        std::thread::Builder::new()
            .name("idem-sqlite-writer".into())
            .spawn(move || thread.run())
            .map_err(Error::StartWriter)?;
        Ok(Self { jobs })
    }

    /// Queues a write made by `job` from its reply channel, and waits for its result.
    pub(crate) async fn run<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T, StoreError> {
        let (reply, result) = oneshot::channel();
        self.jobs.send(job(reply)).await.map_err(|_| closed())?;
        result.await.map_err(|_| closed())?
    }

    /// Queues a write without waiting for it: tests queue several in a known order.
    #[cfg(test)]
    pub(crate) async fn queue<T>(
        &self,
        job: impl FnOnce(Reply<T>) -> Job,
    ) -> oneshot::Receiver<Result<T, StoreError>> {
        let (reply, result) = oneshot::channel();
        assert!(
            self.jobs.send(job(reply)).await.is_ok(),
            "the writer is open"
        );
        result
    }

    /// Holds the writer until the returned sender is used or dropped.
    #[cfg(test)]
    pub(crate) async fn pause(&self) -> oneshot::Sender<()> {
        let (resume, paused) = oneshot::channel();
        assert!(
            self.jobs.send(Job::Pause(paused)).await.is_ok(),
            "the writer is open"
        );
        resume
    }

    /// Waits until the writer has taken every queued write from the queue.
    #[cfg(test)]
    pub(crate) async fn taken(&self) {
        while self.jobs.capacity() < self.jobs.max_capacity() {
            tokio::task::yield_now().await;
        }
    }

    /// Runs `inspect` on the writer's connection, between two transactions.
    #[cfg(test)]
    pub(crate) async fn inspect<T: Send + 'static>(
        &self,
        inspect: impl FnOnce(&Connection) -> T + Send + 'static,
    ) -> T {
        let (answer, answered) = oneshot::channel();
        let job = Job::Inspect(Box::new(move |connection| {
            let _ = answer.send(inspect(connection));
        }));
        assert!(self.jobs.send(job).await.is_ok(), "the writer is open");
        answered.await.expect("the writer answers")
    }

    /// Runs the queued writes, then closes the connection. Later writes fail.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.jobs.send(Job::Close(done)).await.is_ok() {
            // An error means that the thread has already ended.
            let _ = closed.await;
        }
    }

    /// Whether the writer still takes writes.
    pub(crate) fn is_open(&self) -> bool {
        !self.jobs.is_closed()
    }
}

/// A transaction that did not commit; every write in it is reported failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the SQLite transaction of this write did not commit")]
struct NotCommitted(#[source] Arc<rusqlite::Error>);

struct Thread {
    connection: Connection,
    clock: Arc<dyn Clock>,
    queued: mpsc::Receiver<Job>,
    batch_size: usize,
}

impl Thread {
    fn run(mut self) {
        let mut batch = Vec::with_capacity(self.batch_size);
        let mut closing = None;
        while let Some(first) = self.queued.blocking_recv() {
            #[cfg(test)]
            let first = match first {
                Job::Pause(resume) => {
                    let _ = resume.blocking_recv();
                    continue;
                }
                Job::Inspect(inspect) => {
                    inspect(&self.connection);
                    continue;
                }
                job => job,
            };
            batch.push(first);
            while batch.len() < self.batch_size
                && let Ok(job) = self.queued.try_recv()
            {
                batch.push(job);
            }
            // A close answers once the writes queued before it ran; the queue then takes no more.
            if let Some(at) = batch.iter().position(|job| matches!(job, Job::Close(_))) {
                let Job::Close(done) = batch.remove(at) else {
                    unreachable!("the job at `at` is a close");
                };
                closing.get_or_insert(done);
                self.queued.close();
            }
            self.commit(&mut batch);
        }
        // Every handle is gone, or the queue was closed and drained.
        drop(self.connection);
        if let Some(done) = closing {
            let _ = done.send(());
        }
    }

    /// Runs `batch` in one transaction, and answers each write once the transaction committed
    /// (or failed).
    fn commit(&mut self, batch: &mut Vec<Job>) {
        let mut answers = Vec::with_capacity(batch.len());
        let committed = self.run_batch(batch.drain(..), &mut answers);
        for answer in answers {
            answer.send(committed.clone());
        }
    }

    fn run_batch(
        &mut self,
        jobs: impl Iterator<Item = Job>,
        answers: &mut Vec<Answer>,
    ) -> Result<(), NotCommitted> {
        // Acquires whose callers gave up (a timeout) are dropped: no one would learn of the lease.
        // Other writes run even so: a completion must not be lost because its caller left.
        let mut jobs = jobs.filter(|job| !job.is_abandoned_acquire());
        let mut begun = false;
        while let Some(job) = jobs.next() {
            if !begun {
                if let Err(error) = self.execute("BEGIN IMMEDIATE") {
                    return Err(self.abandon(error, answers, [job].into_iter().chain(jobs)));
                }
                begun = true;
                // `BEGIN` may have waited up to the busy timeout for another process's lock:
                // the first write is looked at again, as the later ones are when taken.
                if job.is_abandoned_acquire() {
                    continue;
                }
            }
            let answer = self.apply(job);
            // SQLite has undone the failed write. If it rolled the whole transaction back
            // instead, the writes before it are gone too.
            let rolled_back = answer.failed && self.connection.is_autocommit();
            answers.push(answer);
            if rolled_back {
                let error = rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some("a failed write rolled the transaction back".into()),
                );
                return Err(self.abandon(error, answers, jobs));
            }
        }
        if !begun {
            return Ok(());
        }
        match self.execute("COMMIT") {
            Ok(()) => Ok(()),
            Err(error) => Err(self.abandon(error, answers, jobs)),
        }
    }

    fn execute(&self, sql: &str) -> Result<(), rusqlite::Error> {
        self.connection.prepare_cached(sql)?.execute(()).map(drop)
    }

    /// Ends a transaction that cannot commit: the writes not yet run fail with it, unrun.
    fn abandon(
        &mut self,
        error: rusqlite::Error,
        answers: &mut Vec<Answer>,
        unrun: impl Iterator<Item = Job>,
    ) -> NotCommitted {
        if !self.connection.is_autocommit() {
            // Nothing more to do if this fails: the next `BEGIN` reports the connection's state.
            let _ = self.execute("ROLLBACK");
        }
        answers.extend(unrun.map(Answer::unrun));
        NotCommitted(Arc::new(error))
    }

    fn apply(&mut self, job: Job) -> Answer {
        let connection = &self.connection;
        let clock = &*self.clock;
        match job {
            Job::Acquire(acquire, reply) => {
                Answer::of(reply, writes::acquire(connection, clock, &acquire))
            }
            Job::Holder(write, reply) => {
                Answer::of(reply, writes::as_holder(connection, clock, &write))
            }
            Job::Forget(target, reply) => {
                Answer::of(reply, writes::forget(connection, clock, &target))
            }
            Job::Purge(limit, reply) => {
                Answer::of(reply, writes::purge_expired(connection, clock, limit))
            }
            Job::AppendPart(append, reply) => {
                Answer::of(reply, writes::append_part(connection, clock, &append))
            }
            Job::DiscardParts(parts, reply) => {
                Answer::of(reply, writes::discard_parts(connection, &parts))
            }
            Job::ClaimCensus(claim, reply) => {
                Answer::of(reply, writes::claim_census(connection, clock, claim))
            }
            Job::PostCensus(post, reply) => {
                Answer::of(reply, writes::post_census(connection, clock, &post))
            }
            Job::Close(_) => unreachable!("a close is taken out of its batch"),
            #[cfg(test)]
            Job::Pause(_) | Job::Inspect(_) => unreachable!("tests send these to an idle writer"),
        }
    }
}

impl Job {
    fn is_abandoned_acquire(&self) -> bool {
        matches!(self, Job::Acquire(_, reply) if reply.is_closed())
    }
}

/// A write's answer, held until its transaction ends.
struct Answer {
    send: Box<dyn FnOnce(Result<(), NotCommitted>) + Send>,
    failed: bool,
}

impl Answer {
    /// The answer of a write that ran: its result once committed, or the transaction's error.
    fn of<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Self {
        let failed = result.is_err();
        let send = move |committed: Result<(), NotCommitted>| {
            // The caller may have given up.
            let _ = reply.send(
                committed
                    .map_err(NotCommitted::into_store_error)
                    .and(result),
            );
        };
        Self {
            send: Box::new(send),
            failed,
        }
    }

    /// The answer of a write that did not run: the transaction's error.
    fn unrun(job: Job) -> Self {
        fn failure<T: Send + 'static>(reply: Reply<T>) -> Answer {
            let send = move |committed: Result<(), NotCommitted>| {
                if let Err(error) = committed {
                    let _ = reply.send(Err(error.into_store_error()));
                }
            };
            Answer {
                send: Box::new(send),
                failed: true,
            }
        }
        match job {
            Job::Acquire(_, reply) => failure(reply),
            Job::Holder(_, reply) => failure(reply),
            Job::Forget(_, reply) => failure(reply),
            Job::Purge(_, reply) => failure(reply),
            Job::AppendPart(_, reply) => failure(reply),
            Job::DiscardParts(_, reply) => failure(reply),
            Job::ClaimCensus(_, reply) => failure(reply),
            Job::PostCensus(_, reply) => failure(reply),
            Job::Close(_) => unreachable!("a close is taken out of its batch"),
            #[cfg(test)]
            Job::Pause(_) | Job::Inspect(_) => unreachable!("tests send these to an idle writer"),
        }
    }

    fn send(self, committed: Result<(), NotCommitted>) {
        (self.send)(committed);
    }
}

impl NotCommitted {
    /// Corrupted if SQLite says the file is, unavailable otherwise (as `sqlite_error` classifies).
    fn into_store_error(self) -> StoreError {
        if is_corruption(&self.0) {
            StoreError::corrupted(self)
        } else {
            StoreError::unavailable(self)
        }
    }
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}
