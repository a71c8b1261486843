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
//! # Examples
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

mod dead_letter;
mod message;
mod options;

use std::{
    fmt,
    sync::Arc,
    time::{Duration, SystemTime},
};

use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

use idem_sql::MigrationFile;

use crate::{
    Error, MessageId,
    sql::{self, Location, migrate_postgres, query_text},
};

pub use dead_letter::DeadLetter;
pub use message::{Envelope, OutboxMessage};
pub use options::OutboxOptions;

/// The migrations, in order.
const MIGRATIONS: &[MigrationFile] = &[
    MigrationFile::new(
        1,
        "idem outbox",
        include_str!("../../migrations/postgres/0001_outbox.sql"),
    ),
    MigrationFile::new(
        2,
        "idem outbox: claims held as transactions",
        include_str!("../../migrations/postgres/0002_outbox_held_claims.sql"),
    ),
];

/// An outbox in one PostgreSQL table: [`enqueue`](Self::enqueue) in the business transaction,
/// and a [`Relay`](crate::Relay) publishes.
///
/// Holds no connection; clones share the rendered statements.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) location: Location,
    pub(crate) channel: String,
    enqueue: Arc<str>,
    pub(crate) claim: Arc<str>,
    pub(crate) claim_ordered: Arc<str>,
    pub(crate) mark_sent: Arc<str>,
    pub(crate) fail: Arc<str>,
    dead_letters: Arc<str>,
    revive: Arc<str>,
    pending: Arc<str>,
}

impl Outbox {
    /// The outbox in the table `options` name. Does no I/O: run [`migrate`](Self::migrate) once
    /// before using it.
    pub fn new(options: OutboxOptions) -> Self {
        let location = Location::new(options.schema, options.table);
        let claim = |ordering: &str| {
            sql::statement(
                &location,
                &include_str!("../../sql/postgres/outbox_claim.sql")
                    .replace("{ordering}", ordering.trim_end()),
            )
        };
        Self {
            inner: Arc::new(Inner {
                channel: sql::channel(&location),
                enqueue: sql::statement(
                    &location,
                    include_str!("../../sql/postgres/outbox_enqueue.sql"),
                ),
                claim: claim(""),
                claim_ordered: claim(include_str!("../../sql/postgres/outbox_ordering.sql")),
                mark_sent: sql::statement(
                    &location,
                    include_str!("../../sql/postgres/outbox_mark_sent.sql"),
                ),
                fail: sql::statement(
                    &location,
                    include_str!("../../sql/postgres/outbox_fail.sql"),
                ),
                dead_letters: sql::statement(
                    &location,
                    include_str!("../../sql/postgres/outbox_dead_letters.sql"),
                ),
                revive: sql::statement(
                    &location,
                    include_str!("../../sql/postgres/outbox_revive.sql"),
                ),
                pending: sql::statement(
                    &location,
                    include_str!("../../sql/postgres/outbox_pending.sql"),
                ),
                location,
            }),
        }
    }

    /// Creates the schema (when missing), the table and its sequence, or brings them up to date.
    /// Applied migrations are recorded in `<table>_migrations`; running it again, or from several
    /// processes at once, is safe.
    pub async fn migrate(&self, pool: &PgPool) -> Result<(), Error> {
        let migrator = sql::migrator(&self.inner.location, MIGRATIONS, true);
        migrate_postgres(pool, &migrator).await
    }

    /// Adds `message` to the outbox in the caller's transaction (pass `&mut tx`) and returns its
    /// id, a new UUIDv7: the message is published if and only if the transaction commits.
    ///
    /// The relays are notified (`NOTIFY`) when the transaction commits, once however many
    /// messages it enqueued. The id is the message id the consumers see; keep it if the
    /// service must tell which event a consumer processed.
    pub async fn enqueue(
        &self,
        connection: &mut PgConnection,
        message: OutboxMessage,
    ) -> Result<MessageId, Error> {
        let (uuid, id) = MessageId::new_v7();
        let (names, values): (Vec<String>, Vec<String>) = message.headers.into_iter().unzip();
        sqlx::query(query_text(&self.inner.enqueue))
            .bind(uuid)
            .bind(message.destination)
            .bind(message.ordering_key)
            .bind(names)
            .bind(values)
            .bind(message.payload.as_ref())
            .execute(connection)
            .await?;
        Ok(id)
    }

    /// How many messages wait to be published, claimed or not (dead letters excluded).
    pub async fn pending(&self, pool: &PgPool) -> Result<u64, Error> {
        let count: i64 = sqlx::query_scalar(query_text(&self.inner.pending))
            .fetch_one(pool)
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Up to `limit` dead letters, the oldest first.
    pub async fn dead_letters(&self, pool: &PgPool, limit: u32) -> Result<Vec<DeadLetter>, Error> {
        let rows = sqlx::query(query_text(&self.inner.dead_letters))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?;
        rows.iter()
            .map(|row| {
                let dead_at: i64 = row.try_get("dead_at_millis")?;
                Ok(DeadLetter {
                    id: MessageId::from(row.try_get::<Uuid, _>("id")?),
                    message: message_from_row(row)?,
                    attempts: u32::try_from(row.try_get::<i32, _>("attempts")?).unwrap_or(0),
                    dead_at: SystemTime::UNIX_EPOCH
                        + Duration::from_millis(u64::try_from(dead_at).unwrap_or(0)),
                    last_error: row.try_get("last_error")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Error::Database)
    }

    /// Puts the dead letter `id` back in line with its attempts reset; `false` when `id` is not
    /// a dead letter of this outbox. It is published again, under the same id.
    pub async fn revive(&self, pool: &PgPool, id: &MessageId) -> Result<bool, Error> {
        let Ok(uuid) = Uuid::parse_str(id.as_str()) else {
            return Ok(false);
        };
        let done = sqlx::query(query_text(&self.inner.revive))
            .bind(uuid)
            .execute(pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// The `LISTEN`/`NOTIFY` channel relays listen on: `idem_outbox_` and 16 hex digits of a
    /// hash of the schema and table names.
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

/// The message columns of a claimed or dead row.
pub(crate) fn message_from_row(row: &sqlx::postgres::PgRow) -> Result<OutboxMessage, sqlx::Error> {
    let names: Vec<String> = row.try_get("header_names")?;
    let values: Vec<String> = row.try_get("header_values")?;
    let payload: Vec<u8> = row.try_get("payload")?;
    Ok(OutboxMessage {
        destination: row.try_get("destination")?,
        ordering_key: row.try_get("ordering_key")?,
        headers: names.into_iter().zip(values).collect(),
        payload: payload.into(),
    })
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("table", &self.inner.location.qualified())
            .field("channel", &self.inner.channel)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let outbox = Outbox::new(
            OutboxOptions::new()
                .schema("billing".parse().unwrap())
                .table("events".parse().unwrap()),
        );
        let inner = outbox.inner();
        for statement in [
            &inner.enqueue,
            &inner.claim,
            &inner.claim_ordered,
            &inner.mark_sent,
            &inner.fail,
            &inner.dead_letters,
            &inner.revive,
            &inner.pending,
        ] {
            assert!(!statement.contains('{'), "{statement}");
            assert!(statement.contains(r#""billing"."events""#), "{statement}");
        }
        assert!(
            inner
                .enqueue
                .contains(&format!("pg_notify('{}'", outbox.channel()))
        );
        assert!(inner.claim_ordered.contains("earlier.seq < o.seq"));
        assert!(!inner.claim.contains("earlier.seq"));
        // The condition is SQL, not part of a comment.
        let line = inner
            .claim_ordered
            .lines()
            .find(|line| line.contains("AND (o.ordering_key IS NULL"))
            .unwrap();
        assert!(!line.trim_start().starts_with("--"));
    }
}
