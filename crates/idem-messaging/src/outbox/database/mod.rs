//! [`OutboxDatabase`]: the databases an outbox can live in, PostgreSQL, MySQL (and MariaDB) and
//! SQLite, and how a relay claims, settles and gives back its messages in each.

/// The items of [`OutboxDatabase`] that are the same for every database, written once inside
/// each database's `impl OutboxDatabase`: the migrations (`$version`, `$description`, and the
/// file of `migrations/$dir/`), the statements (the files `sql/$dir/outbox_*.sql`, and
/// `sql/outbox_*.sql` where both databases run the same text, all but the optional `RELEASE`),
/// and the functions that only run one statement (`enqueue`, `pending`, `counts`,
/// `dead_letters`, `revive`). sqlx has no trait that gives a statement's affected rows, or a
/// row's columns, whatever the database.
///
/// The database's module gives what its columns hold: `id_param` (a message id as the statements
/// take it), `bind_headers` (a message's headers as the enqueue statement takes them), and its
/// row type's [`MessageRow`] (a claimed or dead row's id, attempts and message). The rest differs
/// and is written there: how a claim is taken, held, settled and given back, and how a relay
/// hears of new messages.
macro_rules! outbox_database {
    (
        $dir:literal,
        migrations: [$(($version:literal, $description:literal, $file:literal)),+ $(,)?]
    ) => {
        const MIGRATIONS: &'static [idem_sql::MigrationFile] = &[$(idem_sql::MigrationFile::new(
            $version,
            $description,
            include_str!(concat!("../../../migrations/", $dir, "/", $file)),
        )),+];
        const ENQUEUE: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_enqueue.sql"));
        const CLAIM: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_claim.sql"));
        const ORDERING: &'static str = include_str!("../../../sql/outbox_ordering.sql");
        const MARK_SENT: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_mark_sent.sql"));
        const FAIL: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_fail.sql"));
        const DEAD_LETTERS: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_dead_letters.sql"));
        const REVIVE: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_revive.sql"));
        const PENDING: &'static str = include_str!("../../../sql/outbox_pending.sql");
        const COUNTS: &'static str =
            include_str!(concat!("../../../sql/", $dir, "/outbox_counts.sql"));

        fn enqueue<'c>(
            connection: &'c mut Self::Connection,
            outbox: &'c $crate::Outbox<Self>,
            id: uuid::Uuid,
            message: $crate::OutboxMessage,
        ) -> futures_util::future::BoxFuture<'c, Result<(), sqlx::Error>> {
            Box::pin(async move {
                let query = sqlx::query($crate::sql::query_text(&outbox.inner().enqueue))
                    .bind(id_param(id))
                    .bind(message.destination)
                    .bind(message.ordering_key);
                bind_headers(query, message.headers)
                    .bind(message.payload.as_ref())
                    .execute(connection)
                    .await?;
                Ok(())
            })
        }

        fn pending<'c>(
            pool: &'c sqlx::Pool<Self>,
            outbox: &'c $crate::Outbox<Self>,
        ) -> futures_util::future::BoxFuture<'c, Result<i64, sqlx::Error>> {
            Box::pin(
                sqlx::query_scalar($crate::sql::query_text(&outbox.inner().pending))
                    .fetch_one(pool),
            )
        }

        fn counts<'c>(
            pool: &'c sqlx::Pool<Self>,
            outbox: &'c $crate::Outbox<Self>,
        ) -> futures_util::future::BoxFuture<'c, Result<$crate::OutboxCounts, sqlx::Error>> {
            Box::pin(async move {
                let row = sqlx::query($crate::sql::query_text(&outbox.inner().counts))
                    .fetch_one(pool)
                    .await?;
                super::counts_from_row(&row)
            })
        }

        fn dead_letters<'c>(
            pool: &'c sqlx::Pool<Self>,
            outbox: &'c $crate::Outbox<Self>,
            limit: u32,
        ) -> futures_util::future::BoxFuture<'c, Result<Vec<$crate::DeadLetter>, sqlx::Error>> {
            Box::pin(async move {
                let rows = sqlx::query($crate::sql::query_text(&outbox.inner().dead_letters))
                    .bind(i64::from(limit))
                    .fetch_all(pool)
                    .await?;
                rows.iter()
                    .map(|row| {
                        let dead_at: i64 = sqlx::Row::try_get(row, "dead_at_millis")?;
                        Ok($crate::DeadLetter {
                            id: row.message_id()?,
                            message: row.message()?,
                            attempts: row.attempts()?,
                            dead_at: std::time::SystemTime::UNIX_EPOCH
                                + std::time::Duration::from_millis(
                                    u64::try_from(dead_at).unwrap_or(0),
                                ),
                            last_error: sqlx::Row::try_get(row, "last_error")?,
                        })
                    })
                    .collect()
            })
        }

        fn revive<'c>(
            pool: &'c sqlx::Pool<Self>,
            outbox: &'c $crate::Outbox<Self>,
            id: uuid::Uuid,
        ) -> futures_util::future::BoxFuture<'c, Result<bool, sqlx::Error>> {
            Box::pin(async move {
                let done = sqlx::query($crate::sql::query_text(&outbox.inner().revive))
                    .bind(id_param(id))
                    .execute(pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            })
        }
    };
}

#[cfg(feature = "mysql")]
mod mysql;
mod postgres;
mod sqlite;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures_util::future::BoxFuture;
use idem_sql::MigrationFile;
use sqlx::Pool;
use tokio::{sync::Notify, task::JoinHandle};
use uuid::Uuid;

use crate::{BatchReport, DeadLetter, Envelope, MessageId, Outbox, OutboxCounts, OutboxMessage};

/// A database an [`Outbox`] and its [`Relay`](crate::Relay) can live in: [`sqlx::Postgres`],
/// `sqlx::MySql` (MySQL 8.0 and later, MariaDB 10.6 and later; the `mysql` feature) or
/// [`sqlx::Sqlite`].
///
/// Sealed: the relay's guarantees rest on each database's exact locking behaviour. On PostgreSQL
/// and MySQL a claim is a transaction holding its rows locked (`FOR UPDATE SKIP LOCKED`); on
/// SQLite it is a token and a lease written on the rows under the write lock (`BEGIN
/// IMMEDIATE`), and every mark is fenced on that token.
pub trait OutboxDatabase: sqlx::Database + crate::sql::Sealed {
    #[doc(hidden)]
    const MIGRATIONS: &'static [MigrationFile];
    #[doc(hidden)]
    const ENQUEUE: &'static str;
    #[doc(hidden)]
    const CLAIM: &'static str;
    #[doc(hidden)]
    const ORDERING: &'static str;
    #[doc(hidden)]
    const MARK_SENT: &'static str;
    #[doc(hidden)]
    const FAIL: &'static str;
    #[doc(hidden)]
    const RELEASE: Option<&'static str>;
    #[doc(hidden)]
    const DEAD_LETTERS: &'static str;
    #[doc(hidden)]
    const REVIVE: &'static str;
    #[doc(hidden)]
    const PENDING: &'static str;
    #[doc(hidden)]
    const COUNTS: &'static str;

    /// What holds a claimed batch until it is settled or given back.
    #[doc(hidden)]
    type Held: Send + 'static;

    /// Inserts `message` under `id` on the caller's connection.
    #[doc(hidden)]
    fn enqueue<'c>(
        connection: &'c mut Self::Connection,
        outbox: &'c Outbox<Self>,
        id: Uuid,
        message: OutboxMessage,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;

    /// Counts the pending messages, from an index alone.
    #[doc(hidden)]
    fn pending<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>>;

    /// Counts the messages due, in flight, pending and dead, in one statement.
    #[doc(hidden)]
    fn counts<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
    ) -> BoxFuture<'c, Result<OutboxCounts, sqlx::Error>>;

    /// Up to `limit` dead letters, the oldest first.
    #[doc(hidden)]
    fn dead_letters<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        limit: u32,
    ) -> BoxFuture<'c, Result<Vec<DeadLetter>, sqlx::Error>>;

    /// Puts the dead letter `id` back in line: whether it was one.
    #[doc(hidden)]
    fn revive<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        id: Uuid,
    ) -> BoxFuture<'c, Result<bool, sqlx::Error>>;

    /// Claims up to `batch` due messages for `lease`, in the name of the relay `name`, keeping
    /// back those whose key has an earlier pending message if `ordering`: the claim, and the
    /// messages in enqueue order.
    #[doc(hidden)]
    fn claim<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        name: &'c str,
        lease: Duration,
        batch: u32,
        ordering: bool,
    ) -> BoxFuture<'c, Result<Claimed<Self::Held>, sqlx::Error>>;

    /// Deletes the confirmed messages (`sent`, positions in the claim), records a failed attempt
    /// of the `refused` ones (with the broker's reason) after `backoff` (max attempts, base,
    /// cap), and gives the others back. Returns what it did as a report's `taken_over`, `failed`
    /// and `dead_lettered`.
    #[doc(hidden)]
    fn settle<'c>(
        held: Self::Held,
        outbox: &'c Outbox<Self>,
        sent: Vec<usize>,
        refused: Vec<(usize, String)>,
        backoff: (u32, Duration, Duration),
    ) -> BoxFuture<'c, Result<BatchReport, sqlx::Error>>;

    /// Gives the whole claim back untried.
    #[doc(hidden)]
    fn give_back<'c>(
        held: Self::Held,
        outbox: &'c Outbox<Self>,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;

    /// Starts waking `wake` when messages are enqueued, where the database can tell: the task
    /// to abort when the relay stops.
    #[doc(hidden)]
    fn listen(
        pool: &Pool<Self>,
        outbox: &Outbox<Self>,
        wake: Arc<Notify>,
    ) -> Option<JoinHandle<()>>;
}

/// A claim: what holds it, and its messages in enqueue order.
type Claimed<Held> = (Held, Vec<Envelope>);

/// A claimed, failed or dead row, read the way its database's columns keep the message.
trait MessageRow: sqlx::Row {
    /// The message id.
    fn message_id(&self) -> Result<MessageId, sqlx::Error>;

    /// The failed attempts so far, never negative.
    fn attempts(&self) -> Result<u32, sqlx::Error>;

    /// The message.
    fn message(&self) -> Result<OutboxMessage, sqlx::Error>;

    /// A claimed row's envelope: its attempt is the one after the failed ones.
    fn envelope(&self) -> Result<Envelope, sqlx::Error> {
        Ok(Envelope::new(
            self.message_id()?,
            self.message()?,
            self.attempts()?.saturating_add(1),
        ))
    }
}

/// A claim's rows in enqueue order (their `seq` column), whatever order the claim took them in:
/// for each, what `held` reads from it to find it again when the claim is settled, and its
/// envelope.
fn in_enqueue_order<R: MessageRow, T>(
    rows: &[R],
    held: impl Fn(&R) -> Result<T, sqlx::Error>,
) -> Result<(Vec<T>, Vec<Envelope>), sqlx::Error>
where
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    &'static str: sqlx::ColumnIndex<R>,
{
    let mut claimed = rows
        .iter()
        .map(|row| {
            let envelope = row.envelope()?;
            Ok((row.try_get::<i64, _>("seq")?, held(row)?, envelope))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    claimed.sort_unstable_by_key(|(seq, ..)| *seq);
    Ok(claimed
        .into_iter()
        .map(|(_, held, envelope)| (held, envelope))
        .unzip())
}

/// A claimed, failed or dead row's message, its headers read by the caller: the columns every
/// database has alike.
fn message_with_headers<R: sqlx::Row>(
    row: &R,
    headers: Vec<(String, String)>,
) -> Result<OutboxMessage, sqlx::Error>
where
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    &'static str: sqlx::ColumnIndex<R>,
{
    let payload: Vec<u8> = row.try_get("payload")?;
    Ok(OutboxMessage {
        destination: row.try_get("destination")?,
        ordering_key: row.try_get("ordering_key")?,
        headers,
        payload: payload.into(),
    })
}

/// A message's headers as the `headers` column of SQLite and MySQL keeps them: a JSON array of
/// `[name, value]` pairs.
fn headers_to_json(headers: &[(String, String)]) -> String {
    json_array(
        headers
            .iter()
            .map(|(name, value)| vec![name.as_str(), value.as_str()]),
    )
}

/// The headers of a `headers` column (see [`headers_to_json`]).
fn headers_from_json(headers: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    serde_json::from_str(headers).map_err(|error| sqlx::Error::ColumnDecode {
        index: "headers".to_owned(),
        source: Box::new(error),
    })
}

/// `values` as a JSON array, for the `headers` column and the statements that take a list
/// (SQLite's `json_each`, MySQL's `JSON_TABLE`).
fn json_array<T: Into<serde_json::Value>>(values: impl IntoIterator<Item = T>) -> String {
    serde_json::Value::Array(values.into_iter().map(Into::into).collect()).to_string()
}

/// A duration in whole milliseconds, as the statements take it.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The counts statement's row: `bigint` counts, never negative, and the oldest due time in
/// milliseconds since the Unix epoch.
fn counts_from_row<R: sqlx::Row>(row: &R) -> Result<OutboxCounts, sqlx::Error>
where
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    &'static str: sqlx::ColumnIndex<R>,
{
    let count =
        |column| Ok::<_, sqlx::Error>(u64::try_from(row.try_get::<i64, _>(column)?).unwrap_or(0));
    let oldest_due: Option<i64> = row.try_get("oldest_due_millis")?;
    Ok(OutboxCounts {
        due: count("due")?,
        in_flight: count("in_flight")?,
        dead_letters: count("dead_letters")?,
        pending: count("pending")?,
        oldest_due: oldest_due.map(|millis| {
            SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
        }),
    })
}

/// Logs a message that failed its last attempt.
fn dead_lettered<DB: OutboxDatabase>(outbox: &Outbox<DB>, id: &str) {
    tracing::warn!(
        outbox = %outbox.inner().table.qualified::<DB>(),
        message_id = id,
        "an outbox message failed its last attempt and is now a dead letter"
    );
}
