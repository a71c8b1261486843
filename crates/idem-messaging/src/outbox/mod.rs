//! The transactional outbox: messages enqueued in the business transaction, published later by
//! a [`Relay`](crate::Relay).
//!
//! Publishing to a broker from inside a database transaction cannot be atomic with it: the
//! transaction may roll back after the publish, or the process may die after the commit and
//! before the publish. The outbox turns the publish into a row written in the business
//! transaction, so that the event exists exactly when the business change does; a relay then
//! publishes the rows with the broker's confirmation, at least once, each under a stable id that
//! the consumers' [`Inbox`](crate::Inbox) deduplicates on.
//!
//! The outbox lives in PostgreSQL ([`PgOutbox`]), MySQL or MariaDB (`MysqlOutbox`, the `mysql`
//! feature) or an SQLite file ([`SqliteOutbox`]), with the same API: the database is the pool's
//! and the transaction's.
//!
//! # Examples
//!
//! On PostgreSQL:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_messaging::{Outbox, OutboxMessage, OutboxOptions};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let outbox = Outbox::new(OutboxOptions::new());
//! outbox.migrate(&pool).await?;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE orders SET state = 'paid' WHERE id = 42").execute(&mut *tx).await?;
//! let id = outbox
//!     .enqueue(&mut tx, OutboxMessage::new("orders.paid", r#"{"order":42}"#).ordering_key("42"))
//!     .await?;
//! tx.commit().await?; // the order is paid and the event will be published, or neither
//! println!("enqueued {id}");
//! # Ok(())
//! # }
//! ```
//!
//! On SQLite, with a relay in the same process publishing to a broker that prints:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_messaging::{
//!     Confirmations, Envelope, OutboxMessage, OutboxOptions, Publisher, Relay, SqliteOutbox,
//! };
//! use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
//!
//! struct Print;
//!
//! impl Publisher for Print {
//!     async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
//!         batch
//!             .iter()
//!             .map(|envelope| {
//!                 println!("{} to {}", envelope.id(), envelope.message().destination);
//!                 Ok(())
//!             })
//!             .collect()
//!     }
//! }
//!
//! let dir = tempfile::tempdir()?;
//! let pool = SqlitePoolOptions::new()
//!     .connect_with(
//!         SqliteConnectOptions::new()
//!             .filename(dir.path().join("shop.db"))
//!             .create_if_missing(true)
//!             .journal_mode(SqliteJournalMode::Wal),
//!     )
//!     .await?;
//! sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")
//!     .execute(&pool)
//!     .await?;
//! let outbox = SqliteOutbox::new(OutboxOptions::new()); // main.idem_outbox
//! outbox.migrate(&pool).await?;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id, state) VALUES (42, 'paid')").execute(&mut *tx).await?;
//! outbox.enqueue(&mut tx, OutboxMessage::new("orders.paid", r#"{"order":42}"#)).await?;
//! tx.commit().await?;
//!
//! let relay = Relay::new(pool.clone(), outbox.clone(), Print);
//! let report = relay.run_once().await?;
//! assert_eq!((report.claimed, report.published), (1, 1));
//! let counts = outbox.counts(&pool).await?;
//! assert_eq!((counts.due, counts.in_flight, counts.dead_letters), (0, 0, 0));
//! assert_eq!(counts.oldest_due, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod counts;
mod database;
mod dead_letter;
mod message;
mod options;
mod report;

use std::{fmt, marker::PhantomData, sync::Arc};

use sqlx::{Pool, Postgres, Sqlite};
use uuid::Uuid;

use crate::{Error, MessageId, sql::Table};

pub use counts::OutboxCounts;
pub use database::OutboxDatabase;
pub use dead_letter::DeadLetter;
pub use message::{Envelope, OutboxMessage};
pub use options::OutboxOptions;
pub use report::BatchReport;

/// An outbox in PostgreSQL.
pub type PgOutbox = Outbox<Postgres>;
/// An outbox in SQLite.
pub type SqliteOutbox = Outbox<Sqlite>;
/// An outbox in MySQL or MariaDB.
#[cfg(feature = "mysql")]
pub type MysqlOutbox = Outbox<sqlx::MySql>;

/// An outbox in one table: [`enqueue`](Self::enqueue) in the business transaction, and a
/// [`Relay`](crate::Relay) publishes.
///
/// `DB` is [`Postgres`] ([`PgOutbox`], the default), `MySql` (`MysqlOutbox`, the `mysql`
/// feature) or [`Sqlite`] ([`SqliteOutbox`]): the database is the pool's and the transaction's. Holds no connection; clones share the rendered
/// statements.
pub struct Outbox<DB: OutboxDatabase = Postgres> {
    inner: Arc<Inner>,
    database: PhantomData<fn() -> DB>,
}

pub(crate) struct Inner {
    pub(crate) table: Table,
    pub(crate) channel: String,
    pub(crate) enqueue: Arc<str>,
    pub(crate) claim: Arc<str>,
    pub(crate) claim_ordered: Arc<str>,
    pub(crate) mark_sent: Arc<str>,
    pub(crate) fail: Arc<str>,
    /// Gives back what a claim holds and did not settle; `None` where ending the claim's
    /// transaction does (PostgreSQL).
    pub(crate) release: Option<Arc<str>>,
    pub(crate) dead_letters: Arc<str>,
    pub(crate) revive: Arc<str>,
    pub(crate) pending: Arc<str>,
    pub(crate) counts: Arc<str>,
}

impl Inner {
    /// The claim statement: if `ordering`, the one that keeps a message back while an earlier
    /// message of its ordering key is pending.
    pub(crate) fn claim_statement(&self, ordering: bool) -> &Arc<str> {
        if ordering {
            &self.claim_ordered
        } else {
            &self.claim
        }
    }
}

impl<DB: OutboxDatabase> Outbox<DB> {
    /// The outbox in the table `options` name. Does no I/O: run [`migrate`](Self::migrate) once
    /// before using it.
    pub fn new(options: OutboxOptions) -> Self {
        let table = Table::new::<DB>(options.schema, options.table);
        let render = |template: &str| table.statement::<DB>(template);
        let claim = |ordering: &str| render(&DB::CLAIM.replace("{ordering}", ordering.trim_end()));
        Self {
            inner: Arc::new(Inner {
                channel: table.channel(),
                enqueue: render(DB::ENQUEUE),
                claim: claim(""),
                claim_ordered: claim(DB::ORDERING),
                mark_sent: render(DB::MARK_SENT),
                fail: render(DB::FAIL),
                release: DB::RELEASE.map(render),
                dead_letters: render(DB::DEAD_LETTERS),
                revive: render(DB::REVIVE),
                pending: render(DB::PENDING),
                counts: render(DB::COUNTS),
                table,
            }),
            database: PhantomData,
        }
    }

    /// Creates the table (on PostgreSQL and MySQL its schema when missing, and on PostgreSQL its
    /// sequence), or brings it up to date. Applied migrations are recorded in
    /// `<table>_migrations`; running it again, or from several processes at once, is safe. On
    /// MySQL the pool's URL must name a database, where the migrations take their lock.
    pub async fn migrate(&self, pool: &Pool<DB>) -> Result<(), Error> {
        DB::migrate(pool, &self.inner.table.migrator::<DB>(DB::MIGRATIONS)).await
    }

    /// Adds `message` to the outbox in the caller's transaction (pass `&mut *tx`, or `&mut tx`
    /// where the database is known) and returns its id, a new UUIDv7: the message is published
    /// if and only if the transaction commits.
    ///
    /// On PostgreSQL the relays are notified (`NOTIFY`) when the transaction commits, once
    /// however many messages it enqueued; on MySQL and SQLite they find it when they poll. The id is the
    /// message id the consumers see; keep it if the service must tell which event a consumer
    /// processed.
    ///
    /// With the `opentelemetry` feature, a message enqueued inside a traced span keeps that
    /// span's trace context in its headers (`traceparent`, and `tracestate` when there is one,
    /// as the global propagator writes them), unless it carries its own already: the relay's
    /// `idem.publish` span continues it.
    pub async fn enqueue(
        &self,
        connection: &mut DB::Connection,
        mut message: OutboxMessage,
    ) -> Result<MessageId, Error> {
        crate::trace::keep_current(&mut message.headers);
        let (uuid, id) = MessageId::new_v7();
        DB::enqueue(connection, self, uuid, message).await?;
        Ok(id)
    }

    /// How many messages wait to be published, claimed or not (dead letters excluded): the
    /// `pending` of [`counts`](Self::counts), from an index alone, cheap enough for the relay's
    /// gauge at any backlog.
    pub async fn pending(&self, pool: &Pool<DB>) -> Result<u64, Error> {
        let count = DB::pending(pool, self).await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Counts the messages due, in flight, pending and dead, and finds the oldest due one's due
    /// time, in one statement (see [`OutboxCounts`] for what each count is, on each database).
    ///
    /// It reads indexes, not the messages, except on PostgreSQL the due ones' rows (a claim's
    /// lock is on the row) and on SQLite the claimed ones' rows (for their lease): its cost
    /// grows with the outbox's rows, pending and dead, as a `count(*)` does. On MySQL it finds
    /// the claimed ones by locking the due ones it can, for the instant of the statement (neither
    /// MySQL nor MariaDB shows row locks in a view both have): a relay claiming in that instant
    /// skips those and takes them at its next cycle.
    pub async fn counts(&self, pool: &Pool<DB>) -> Result<OutboxCounts, Error> {
        Ok(DB::counts(pool, self).await?)
    }

    /// Up to `limit` dead letters, the oldest first.
    pub async fn dead_letters(
        &self,
        pool: &Pool<DB>,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, Error> {
        Ok(DB::dead_letters(pool, self, limit).await?)
    }

    /// Puts the dead letter `id` back in line with its attempts reset; `false` when `id` is not
    /// a dead letter of this outbox. It is published again, under the same id.
    pub async fn revive(&self, pool: &Pool<DB>, id: &MessageId) -> Result<bool, Error> {
        let Ok(uuid) = Uuid::parse_str(id.as_str()) else {
            return Ok(false);
        };
        Ok(DB::revive(pool, self, uuid).await?)
    }

    /// The `LISTEN`/`NOTIFY` channel relays listen on: `idem_outbox_` and 16 hex digits of a
    /// hash of the schema and table names. Only PostgreSQL has one; relays on MySQL and SQLite
    /// poll.
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

impl<DB: OutboxDatabase> Clone for Outbox<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            database: PhantomData,
        }
    }
}

impl<DB: OutboxDatabase> fmt::Debug for Outbox<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("table", &self.inner.table.qualified::<DB>())
            .field("channel", &self.inner.channel)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every statement of `outbox` has its placeholders filled and names `table`,
    /// and that only the ordered claim keeps messages back.
    fn assert_rendered<DB: OutboxDatabase>(outbox: &Outbox<DB>, table: &str) {
        let inner = outbox.inner();
        let statements = [
            &inner.enqueue,
            &inner.claim,
            &inner.claim_ordered,
            &inner.mark_sent,
            &inner.fail,
            &inner.dead_letters,
            &inner.revive,
            &inner.pending,
            &inner.counts,
        ];
        for statement in statements.into_iter().chain(&inner.release) {
            assert!(!statement.contains('{'), "{statement}");
            assert!(statement.contains(table), "{statement}");
        }
        assert!(inner.claim_ordered.contains("earlier.seq < o.seq"));
        assert!(!inner.claim.contains("earlier.seq"));
        assert_eq!(inner.claim_statement(true), &inner.claim_ordered);
        assert_eq!(inner.claim_statement(false), &inner.claim);
    }

    #[test]
    fn every_placeholder_is_filled() {
        let outbox = PgOutbox::new(
            OutboxOptions::new()
                .schema("billing".parse().unwrap())
                .table("events".parse().unwrap()),
        );
        assert_rendered(&outbox, r#""billing"."events""#);
        let inner = outbox.inner();
        assert!(inner.release.is_none());
        assert!(
            inner
                .enqueue
                .contains(&format!("pg_notify('{}'", outbox.channel()))
        );
        // The condition is SQL, not part of a comment.
        let line = inner
            .claim_ordered
            .lines()
            .find(|line| line.contains("AND (o.ordering_key IS NULL"))
            .unwrap();
        assert!(!line.trim_start().starts_with("--"));
    }

    #[test]
    fn every_placeholder_is_filled_on_sqlite() {
        let outbox = SqliteOutbox::new(OutboxOptions::new().table("events".parse().unwrap()));
        assert_rendered(&outbox, r#""main"."events""#);
        let inner = outbox.inner();
        assert!(inner.release.is_some());
        assert!(!inner.enqueue.contains("pg_notify"));
    }
}
