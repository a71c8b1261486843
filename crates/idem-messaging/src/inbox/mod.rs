//! The inbox: a consumer's effects applied once per message, however often the broker delivers
//! it.
//!
//! Brokers deliver at least once: a consumer that crashed before it acknowledged, a lost ack, a
//! rebalance or a relay that published twice hands the same message over again. The inbox
//! records `(consumer, message id)` in the same database transaction as the handler's effects,
//! under a unique key. The first delivery inserts the row and applies the effects, all or
//! nothing; every later copy finds the row, applies nothing and is acknowledged. A handler that
//! fails rolls back both, so the message is retried, never marked processed without its effects.
//!
//! # Examples
//!
//! A ledger consumer on SQLite (PostgreSQL is the same with [`PgInbox`]):
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_messaging::{ConsumerName, Handled, InboxOptions, MessageId, SqliteInbox};
//!
//! let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! sqlx::query("CREATE TABLE ledger (entry TEXT NOT NULL)").execute(&pool).await?;
//! let inbox = SqliteInbox::new(InboxOptions::new());
//! inbox.migrate(&pool).await?;
//!
//! let consumer: ConsumerName = "ledger".parse()?;
//! let id: MessageId = "payment-7".parse()?;
//! for _delivery in 0..2 {
//!     // The broker delivers the message twice; the second copy is skipped.
//!     let handled = inbox
//!         .handle(&pool, &consumer, &id, |tx| {
//!             Box::pin(async move {
//!                 sqlx::query("INSERT INTO ledger (entry) VALUES ('+10')")
//!                     .execute(&mut **tx)
//!                     .await?;
//!                 Ok::<_, idem_messaging::Error>("booked")
//!             })
//!         })
//!         .await?;
//!     println!("{handled:?}");
//! }
//! let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger").fetch_one(&pool).await?;
//! assert_eq!(entries, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod database;
mod options;

use std::{fmt, marker::PhantomData, sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use sqlx::{Pool, Postgres, Sqlite, Transaction};
use tracing::{Instrument as _, field::Empty};

use idem_sql::{Purge, PurgeLoop};

use crate::{ConsumerName, Error, Incoming, MessageId, sql::Table};

pub use database::InboxDatabase;
pub use idem_sql::Purger;
pub use options::InboxOptions;

/// An inbox in PostgreSQL.
pub type PgInbox = Inbox<Postgres>;
/// An inbox in SQLite.
pub type SqliteInbox = Inbox<Sqlite>;
/// An inbox in MySQL or MariaDB.
#[cfg(feature = "mysql")]
pub type MysqlInbox = Inbox<sqlx::MySql>;

/// Whether a message is new to a consumer: the outcome of [`Inbox::process`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a duplicate must be skipped"]
pub enum Arrival {
    /// The message was recorded in the transaction: apply its effects there, then commit.
    First,
    /// The consumer has processed this message already (its transaction committed): apply
    /// nothing, and acknowledge it.
    Duplicate,
}

/// What became of a message given to [`Inbox::handle`] or [`Inbox::consume`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled<T> {
    /// This was the first delivery: the handler ran and its transaction committed, with the
    /// inbox row. Holds the handler's value.
    Processed(T),
    /// The message had been processed already: the handler did not run.
    Duplicate,
}

/// The inbox of one table: records which messages each consumer has processed, in the
/// consumer's own transactions.
///
/// `DB` is [`Postgres`] ([`PgInbox`]), `MySql` (`MysqlInbox`, the `mysql` feature) or
/// [`Sqlite`] ([`SqliteInbox`]). An inbox holds no
/// connection: every method takes the pool or the transaction to work on. Clones share the
/// rendered statements.
pub struct Inbox<DB: InboxDatabase> {
    inner: Arc<Inner>,
    database: PhantomData<fn() -> DB>,
}

struct Inner {
    table: Table,
    record: Arc<str>,
    purge: Arc<str>,
    dedup_window: Duration,
}

impl<DB: InboxDatabase> Inbox<DB> {
    /// The inbox in the table `options` name. Does no I/O: run [`migrate`](Self::migrate) once
    /// (at deployment, or at start-up) before using it.
    pub fn new(options: InboxOptions) -> Self {
        let table = Table::new::<DB>(options.schema, options.table);
        Self {
            inner: Arc::new(Inner {
                record: table.statement::<DB>(DB::RECORD),
                purge: table.statement::<DB>(DB::PURGE),
                table,
                dedup_window: options.dedup_window,
            }),
            database: PhantomData,
        }
    }

    /// Creates the schema (PostgreSQL and MySQL, when missing) and the table, or brings them up
    /// to date. Applied migrations are recorded in `<table>_migrations`; running it again, or
    /// from several processes at once, is safe. On MySQL the pool's URL must name a database,
    /// where the migrations take their lock.
    pub async fn migrate(&self, pool: &Pool<DB>) -> Result<(), Error> {
        DB::migrate(pool, &self.inner.table.migrator::<DB>(DB::MIGRATIONS)).await
    }

    /// How long a processed message is remembered ([`InboxOptions::dedup_window`]).
    pub fn dedup_window(&self) -> Duration {
        self.inner.dedup_window
    }

    /// Records that `consumer` is processing `message_id`, in the caller's transaction (pass
    /// `&mut tx`): [`Arrival::First`] the first time, then apply the effects in the same
    /// transaction and commit; [`Arrival::Duplicate`] when a committed transaction recorded it
    /// already, then apply nothing, roll back, and acknowledge the message.
    ///
    /// Roll the transaction back when the handler fails: the row goes with it, so the message is
    /// processed again when the broker redelivers it.
    ///
    /// Call it before the effects, as the transaction's first write. While another transaction
    /// holds an uncommitted row for the same message (a concurrent copy, on another instance),
    /// this call waits for it to end: after its commit the answer is `Duplicate`, after its
    /// rollback `First`. On PostgreSQL that wait is a row lock. Under `REPEATABLE READ` or
    /// `SERIALIZABLE` the waiting call fails with a serialization error instead (SQLSTATE 40001,
    /// [`Error::is_transient`]): retry the transaction, or let the broker redeliver. On MySQL
    /// the wait is a row lock at any isolation level (the duplicate is found by a locking read);
    /// when the first copy rolls back while several wait, the server may end all but one with a
    /// deadlock (1213, transient), and a wait past `innodb_lock_wait_timeout` fails (1205,
    /// transient). On SQLite the first write takes the database's write lock, so copies take
    /// turns (the busy timeout bounds the wait).
    pub async fn process(
        &self,
        connection: &mut DB::Connection,
        consumer: &ConsumerName,
        message_id: &MessageId,
    ) -> Result<Arrival, Error> {
        let inserted = DB::record(
            connection,
            &self.inner.record,
            consumer.as_str(),
            message_id.as_str(),
        )
        .await?;
        Ok(if inserted {
            Arrival::First
        } else {
            Arrival::Duplicate
        })
    }

    /// Processes `message_id` once for `consumer`: begins a transaction on `pool`, records the
    /// message ([`process`](Self::process)), runs `handler` in the same transaction and commits.
    ///
    /// - A duplicate rolls back at once and returns [`Handled::Duplicate`]; `handler` does not
    ///   run.
    /// - An error from `handler`, or from the commit, rolls everything back (the inbox row too)
    ///   and is returned: the message is not marked processed, and its next delivery runs the
    ///   handler again.
    ///
    /// `handler` gets the transaction (its writes are the effects that happen once) and returns
    /// a boxed future, as in `sqlx::Connection::transaction`. Anything it does outside the
    /// transaction (an HTTP call, an e-mail) happens at least once: once per delivery that
    /// reaches it.
    pub async fn handle<'t, F, T, E>(
        &self,
        pool: &Pool<DB>,
        consumer: &ConsumerName,
        message_id: &MessageId,
        handler: F,
    ) -> Result<Handled<T>, E>
    where
        F: for<'c> FnOnce(&'c mut Transaction<'t, DB>) -> BoxFuture<'c, Result<T, E>> + Send,
        T: Send,
        E: From<Error> + Send,
    {
        let Some(tx) = self.begin_first(pool, consumer, message_id).await? else {
            return Ok(Handled::Duplicate);
        };
        let mut tx: Transaction<'t, DB> = tx;
        match handler(&mut tx).await {
            Ok(value) => {
                tx.commit().await.map_err(Error::Database)?;
                Ok(Handled::Processed(value))
            }
            Err(error) => {
                rollback(tx).await;
                Err(error)
            }
        }
    }

    /// [`handle`](Self::handle)s a message received from a broker, then settles it with the
    /// broker: acknowledged only once the inbox transaction has committed (or when it is a
    /// duplicate), requeued when the handler or the database fails, so that it comes back.
    ///
    /// A message without a producer's id ([`Error::MissingMessageId`]), or with an invalid one,
    /// can never be deduplicated: it is rejected without requeueing (the broker drops it, or
    /// dead-letters it when the queue has a dead-letter exchange) and the error returned.
    ///
    /// After a commit, an error settling the message ([`Error::Settle`]: the channel was lost)
    /// is returned although the effects are committed: the broker redelivers the message, and
    /// the inbox skips it.
    ///
    /// `handler` gets the transaction and the message.
    ///
    /// All of it runs in an `idem.consume` span (`debug`), the handler too, whose `idem.outcome`
    /// says what became of the message: `processed`, `duplicate`, `requeued` (the handler or the
    /// database failed) or `rejected` (no valid id). With the `opentelemetry` feature, the span
    /// continues the W3C trace context the message's headers carry
    /// ([`Incoming::header`]).
    pub async fn consume<'t, M, F, T, E>(
        &self,
        pool: &Pool<DB>,
        consumer: &ConsumerName,
        message: M,
        handler: F,
    ) -> Result<Handled<T>, E>
    where
        M: Incoming,
        F: for<'c> FnOnce(&'c mut Transaction<'t, DB>, &'c M) -> BoxFuture<'c, Result<T, E>> + Send,
        T: Send,
        E: From<Error> + Send,
    {
        let span = tracing::debug_span!(
            "idem.consume",
            otel.kind = "consumer",
            messaging.message.id = message.message_id(),
            messaging.consumer.group.name = consumer.as_str(),
            idem.outcome = Empty,
        );
        crate::consume::continue_trace(&span, &message);
        let (handled, outcome) = self
            .consume_once(pool, consumer, message, handler)
            .instrument(span.clone())
            .await;
        span.record("idem.outcome", outcome);
        handled
    }

    /// [`consume`](Self::consume)'s work, and the outcome its span records.
    async fn consume_once<'t, M, F, T, E>(
        &self,
        pool: &Pool<DB>,
        consumer: &ConsumerName,
        message: M,
        handler: F,
    ) -> (Result<Handled<T>, E>, &'static str)
    where
        M: Incoming,
        F: for<'c> FnOnce(&'c mut Transaction<'t, DB>, &'c M) -> BoxFuture<'c, Result<T, E>> + Send,
        T: Send,
        E: From<Error> + Send,
    {
        let id = match message.message_id().map(MessageId::try_from) {
            Some(Ok(id)) => id,
            invalid => {
                let error = match invalid {
                    Some(Err(invalid)) => Error::InvalidMessageId(invalid),
                    _ => Error::MissingMessageId,
                };
                tracing::warn!(
                    consumer = consumer.as_str(),
                    error = &error as &dyn std::error::Error,
                    "rejecting a message that cannot be deduplicated"
                );
                if let Err(settle) = message.reject().await {
                    warn_unsettled(consumer, &settle);
                }
                return (Err(error.into()), "rejected");
            }
        };
        let tx = match self.begin_first(pool, consumer, &id).await {
            Ok(Some(tx)) => tx,
            Ok(None) => {
                let acked = message.ack().await.map_err(Error::Settle);
                return (
                    acked.map(|()| Handled::Duplicate).map_err(E::from),
                    "duplicate",
                );
            }
            Err(error) => {
                requeue(message, consumer).await;
                return (Err(error.into()), "requeued");
            }
        };
        let mut tx: Transaction<'t, DB> = tx;
        let value = match handler(&mut tx, &message).await {
            Ok(value) => value,
            Err(error) => {
                rollback(tx).await;
                requeue(message, consumer).await;
                return (Err(error), "requeued");
            }
        };
        if let Err(error) = tx.commit().await {
            requeue(message, consumer).await;
            return (Err(Error::Database(error).into()), "requeued");
        }
        // Processed, even when the broker cannot be told: its copy will be a duplicate.
        let acked = message.ack().await.map_err(Error::Settle);
        (
            acked.map(|()| Handled::Processed(value)).map_err(E::from),
            "processed",
        )
    }

    /// Deletes at most `batch` rows older than the dedup window, oldest first, in one short
    /// statement; returns how many. [`spawn_purger`](Self::spawn_purger) calls it until a batch
    /// comes back short.
    pub async fn purge(&self, pool: &Pool<DB>, batch: u32) -> Result<u64, Error> {
        let window = i64::try_from(self.inner.dedup_window.as_millis()).unwrap_or(i64::MAX);
        Ok(DB::purge(pool, &self.inner.purge, window, i64::from(batch)).await?)
    }

    /// Starts a task that, every `every`, [`purge`](Self::purge)s `batch` rows at a time until
    /// none older than the dedup window is left. Several instances may run one. Dropping the
    /// returned handle stops it.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn spawn_purger(&self, pool: Pool<DB>, every: Duration, batch: u32) -> Purger {
        let purge = InboxPurge {
            inbox: self.clone(),
            pool,
        };
        PurgeLoop::new(purge, "idem inbox rows older than the dedup window")
            .every(every)
            .batch(usize::try_from(batch).unwrap_or(usize::MAX))
            .spawn()
    }

    /// Begins a transaction and records the message in it: the transaction for a first
    /// delivery, `None` (rolled back) for a duplicate.
    async fn begin_first(
        &self,
        pool: &Pool<DB>,
        consumer: &ConsumerName,
        message_id: &MessageId,
    ) -> Result<Option<Transaction<'static, DB>>, Error> {
        let mut tx = pool.begin().await?;
        match self.process(&mut tx, consumer, message_id).await? {
            Arrival::First => Ok(Some(tx)),
            Arrival::Duplicate => {
                tx.rollback().await?;
                tracing::debug!(
                    consumer = consumer.as_str(),
                    message_id = message_id.as_str(),
                    "skipped a duplicate message"
                );
                Ok(None)
            }
        }
    }
}

/// One batch of [`Inbox::spawn_purger`].
struct InboxPurge<DB: InboxDatabase> {
    inbox: Inbox<DB>,
    pool: Pool<DB>,
}

impl<DB: InboxDatabase> Purge for InboxPurge<DB> {
    type Error = Error;

    async fn purge(&self, limit: usize) -> Result<usize, Error> {
        let batch = u32::try_from(limit).unwrap_or(u32::MAX);
        let purged = self.inbox.purge(&self.pool, batch).await?;
        Ok(usize::try_from(purged).expect("at most `batch` rows"))
    }
}

/// Rolls back now rather than when the connection is next used (what dropping the transaction
/// does), so that a redelivery does not wait on the abandoned inbox row's lock. A failure to
/// roll back means the connection is gone, which rolls back too.
async fn rollback<DB: InboxDatabase>(tx: Transaction<'_, DB>) {
    if let Err(error) = tx.rollback().await {
        tracing::debug!(
            error = &error as &dyn std::error::Error,
            "rolling back a failed handler's transaction failed"
        );
    }
}

/// Requeues a message whose processing failed; a failure to do so only means the broker
/// redelivers it when the channel closes.
async fn requeue(message: impl Incoming, consumer: &ConsumerName) {
    if let Err(error) = message.requeue().await {
        warn_unsettled(consumer, &error);
    }
}

fn warn_unsettled(consumer: &ConsumerName, error: &crate::BoxError) {
    tracing::warn!(
        consumer = consumer.as_str(),
        error = &**error as &dyn std::error::Error,
        "cannot settle a message with the broker; it will be redelivered"
    );
}

impl<DB: InboxDatabase> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            database: PhantomData,
        }
    }
}

impl<DB: InboxDatabase> fmt::Debug for Inbox<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("table", &self.inner.table.qualified::<DB>())
            .field("dedup_window", &self.inner.dedup_window)
            .finish()
    }
}
