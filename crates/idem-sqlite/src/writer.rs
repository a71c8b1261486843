//! The writer: one task per store that owns the write connection and commits writes in groups.
//!
//! SQLite lets one connection write at a time, and a commit in `synchronous = FULL` waits for
//! the disk. Writes that arrive while a transaction commits wait in a bounded queue; the writer
//! then takes every waiting write (up to [`SqliteOptions::max_batch`]) into one transaction, so
//! that one commit, and one flush, makes them all durable:
//!
//! ```text
//! BEGIN IMMEDIATE
//! SAVEPOINT write;                 (write 1)
//! RELEASE write; SAVEPOINT write;  (write 2)
//! ROLLBACK TO write                                  -- write 2 failed: it alone is undone
//! RELEASE write; SAVEPOINT write;  (write 3)
//! RELEASE write; COMMIT
//! ```
//!
//! Each write runs in its own savepoint, so a failing one is undone without its neighbours;
//! writes run in the order they were queued, so two writes of one key are never reordered; and
//! every caller gets its result only once `COMMIT` returned: nothing is acknowledged before it is
//! durable. A lone write waits for nothing: the writer never holds a transaction open for more.
//!
//! [`SqliteOptions::max_batch`]: crate::SqliteOptions::max_batch

use std::{fmt, sync::Arc};

use idem_core::{Acquisition, Clock, StoreError, Timestamp};
use sqlx::{Connection, Executor, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use crate::{
    error::is_corruption,
    writes::{self, Acquire, HolderWrite, Savepoint},
};

/// A write for the writer, with where its result goes.
pub(crate) enum Job {
    Acquire(Acquire, Reply<Acquisition>),
    Holder(HolderWrite, Reply<Timestamp>),
    Forget(writes::Target, Reply<bool>),
    Purge(usize, Reply<usize>),
    /// Runs what is queued, closes the connection, then answers.
    Close(oneshot::Sender<()>),
}

pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// The store's handle on its writer task. Clones share the task; it ends when the store is
/// closed or every handle is dropped.
#[derive(Clone)]
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Starts the writer task on `connection`.
    pub(crate) fn spawn(
        connection: SqliteConnection,
        clock: Arc<dyn Clock>,
        queue: usize,
        max_batch: usize,
    ) -> Self {
        let (jobs, queued) = mpsc::channel(queue);
        tokio::spawn(
            Task {
                connection,
                clock,
                queued,
                max_batch,
            }
            .run(),
        );
        Self { jobs }
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

    /// Runs the queued writes, then closes the connection. Later writes fail.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.jobs.send(Job::Close(done)).await.is_ok() {
            // An error means that the task has already ended.
            let _ = closed.await;
        }
    }

    /// Whether the writer still takes writes.
    pub(crate) fn is_open(&self) -> bool {
        !self.jobs.is_closed()
    }
}

fn closed() -> StoreError {
    StoreError::unavailable(Closed)
}

/// Writes after the store was closed (or after its runtime shut down).
#[derive(Debug, thiserror::Error)]
#[error("the SQLite store is closed")]
pub(crate) struct Closed;

/// A transaction that did not commit; every write in it is reported failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the SQLite transaction of this write did not commit")]
struct NotCommitted(#[source] Arc<sqlx::Error>);

struct Task {
    connection: SqliteConnection,
    clock: Arc<dyn Clock>,
    queued: mpsc::Receiver<Job>,
    max_batch: usize,
}

impl Task {
    async fn run(mut self) {
        let mut batch = Vec::with_capacity(self.max_batch);
        let mut closing = None;
        while self.queued.recv_many(&mut batch, self.max_batch).await > 0 {
            // A close answers once the writes queued before it ran; the queue then takes no more.
            if let Some(at) = batch.iter().position(|job| matches!(job, Job::Close(_))) {
                let Job::Close(done) = batch.remove(at) else {
                    unreachable!("the job at `at` is a close");
                };
                closing.get_or_insert(done);
                self.queued.close();
            }
            self.commit(&mut batch).await;
        }
        // Every handle is gone, or the queue was closed and drained.
        let _ = self.connection.close().await;
        if let Some(done) = closing {
            let _ = done.send(());
        }
    }

    /// Runs `batch` in one transaction, each write in a savepoint, and answers each write once
    /// the transaction committed (or failed).
    async fn commit(&mut self, batch: &mut Vec<Job>) {
        let mut answers = Vec::with_capacity(batch.len());
        let committed = self.run_batch(batch.drain(..), &mut answers).await;
        for answer in answers {
            answer.send(committed.clone());
        }
    }

    async fn run_batch(
        &mut self,
        jobs: impl Iterator<Item = Job>,
        answers: &mut Vec<Answer>,
    ) -> Result<(), NotCommitted> {
        // Acquires whose callers gave up (a timeout) are dropped: no one would learn of the lease.
        // Other writes run even so: a completion must not be lost because its caller left.
        let mut jobs = jobs.filter(|job| !job.is_abandoned_acquire());
        let mut begun = false;
        while let Some(job) = jobs.next() {
            let savepoint = if begun {
                Savepoint::Next
            } else {
                if let Err(error) = self.connection.execute("BEGIN IMMEDIATE").await {
                    return Err(self
                        .abandon(error, false, answers, [job].into_iter().chain(jobs))
                        .await);
                }
                begun = true;
                Savepoint::First
            };
            let answer = self.apply(job, savepoint).await;
            let failed = answer.failed;
            answers.push(answer);
            if failed && let Err(error) = self.connection.execute("ROLLBACK TO write").await {
                // SQLite rolled the whole transaction back (a full disk, an I/O error): the
                // writes before this one are gone with it.
                return Err(self.abandon(error, begun, answers, jobs).await);
            }
        }
        if !begun {
            return Ok(());
        }
        match self.connection.execute("RELEASE write; COMMIT").await {
            Ok(_) => Ok(()),
            Err(error) => Err(self.abandon(error, begun, answers, jobs).await),
        }
    }

    /// Ends a transaction that cannot commit: the writes not yet run fail with it, unrun.
    async fn abandon(
        &mut self,
        error: sqlx::Error,
        begun: bool,
        answers: &mut Vec<Answer>,
        unrun: impl Iterator<Item = Job>,
    ) -> NotCommitted {
        if begun {
            // An error means that SQLite ended the transaction itself; nothing more to undo.
            let _ = self.connection.execute("ROLLBACK").await;
        }
        answers.extend(unrun.map(Answer::unrun));
        NotCommitted(Arc::new(error))
    }

    async fn apply(&mut self, job: Job, savepoint: Savepoint) -> Answer {
        let connection = &mut self.connection;
        let clock = &*self.clock;
        match job {
            Job::Acquire(acquire, reply) => Answer::of(
                reply,
                writes::acquire(connection, clock, savepoint, &acquire).await,
            ),
            Job::Holder(write, reply) => Answer::of(
                reply,
                writes::as_holder(connection, clock, savepoint, &write).await,
            ),
            Job::Forget(target, reply) => Answer::of(
                reply,
                writes::forget(connection, clock, savepoint, &target).await,
            ),
            Job::Purge(limit, reply) => Answer::of(
                reply,
                writes::purge_expired(connection, clock, savepoint, limit).await,
            ),
            Job::Close(_) => unreachable!("a close is taken out of its batch"),
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
            Job::Close(_) => unreachable!("a close is taken out of its batch"),
        }
    }

    fn send(self, committed: Result<(), NotCommitted>) {
        (self.send)(committed);
    }
}

impl NotCommitted {
    /// Corrupted if SQLite says the file is, unavailable otherwise (as `store_error` classifies).
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
