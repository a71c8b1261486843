//! The outbox on MySQL and MariaDB. As on PostgreSQL, a claim is a transaction that locks a batch
//! of due messages (`FOR UPDATE SKIP LOCKED`), stays open while they are published, then deletes
//! the confirmed ones, records the refused ones' failed attempts and commits. What it did not
//! settle is released untouched by the commit, or by a rollback if the relay gives the batch back
//! or dies. The claim's transaction runs at `READ COMMITTED`, and its lease is the session's
//! `wait_timeout`, in whole seconds, while it holds the claim.

use std::{
    sync::{Arc, LazyLock},
    time::{Duration, Instant},
};

use futures_util::future::BoxFuture;
use sqlx::{
    AssertSqlSafe, MySql, MySqlConnection, Pool, Row,
    mysql::{MySqlArguments, MySqlDatabaseError, MySqlRow},
    pool::PoolConnection,
    query::Query,
};
use tokio::{sync::Notify, task::JoinHandle};
use uuid::Uuid;

use super::{
    Claimed, MessageRow, OutboxDatabase, dead_lettered, headers_from_json, headers_to_json,
    in_enqueue_order, json_array, message_with_headers, millis,
};
use crate::{BatchReport, MessageId, Outbox, OutboxMessage, outbox::Inner, sql::query_text};

/// Begins a claim's transaction, `{lease}` standing for its lease in seconds.
const BEGIN: &str = include_str!("../../../sql/mysql/outbox_claim_begin.sql");

/// Ends a claim's transaction by committing it: the settled claim.
static COMMIT: LazyLock<String> = LazyLock::new(|| end("COMMIT"));

/// Ends a claim's transaction by rolling it back: the batch given back.
static ROLLBACK: LazyLock<String> = LazyLock::new(|| end("ROLLBACK"));

fn end(statement: &str) -> String {
    include_str!("../../../sql/mysql/outbox_claim_end.sql").replace("{end}", statement)
}

/// MySQL's `ER_CLIENT_INTERACTION_TIMEOUT` (8.0.24 and later): the server closed a session left
/// idle longer than its `wait_timeout`. MariaDB closes it without a word.
const IDLE_TIMEOUT: u16 = 4031;

/// The longest `wait_timeout` MySQL and MariaDB take on Linux: a year.
const MAX_LEASE_SECONDS: u64 = 365 * 24 * 3600;

impl OutboxDatabase for MySql {
    outbox_database!("mysql", migrations: [(1, "idem outbox", "0001_outbox.sql")]);
    // A claim is held by its transaction, not by rows marked with a token: nothing to release.
    const RELEASE: Option<&'static str> = None;

    type Held = Claim;

    fn claim<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        _name: &'c str,
        lease: Duration,
        batch: u32,
        ordering: bool,
    ) -> BoxFuture<'c, Result<Claimed<Self::Held>, sqlx::Error>> {
        Box::pin(async move {
            let lease = lease_seconds(lease);
            let mut claim = Claim {
                connection: Some(pool.acquire().await?),
                rows: Vec::new(),
                started: Instant::now(),
                lease: Duration::from_secs(lease),
            };
            sqlx::raw_sql(AssertSqlSafe(BEGIN.replace("{lease}", &lease.to_string())))
                .execute(claim.connection())
                .await?;
            // The server's idle wait starts after this statement's answer: no earlier than now.
            claim.started = Instant::now();
            let rows = sqlx::query(query_text(outbox.inner().claim_statement(ordering)))
                .bind(i64::from(batch))
                .fetch_all(claim.connection())
                .await?;
            // The claim takes the due messages by due time; publish them in enqueue order.
            let (rows, envelopes) = in_enqueue_order(&rows, |row| {
                Ok(ClaimedRow {
                    seq: row.try_get("seq")?,
                    attempts: row.attempts()?,
                    id: row.message_id()?,
                })
            })?;
            claim.rows = rows;
            Ok((claim, envelopes))
        })
    }

    fn settle<'c>(
        mut claim: Self::Held,
        outbox: &'c Outbox<Self>,
        sent: Vec<usize>,
        refused: Vec<(usize, String)>,
        (max_attempts, base, cap): (u32, Duration, Duration),
    ) -> BoxFuture<'c, Result<BatchReport, sqlx::Error>> {
        Box::pin(async move {
            let backoff = (max_attempts, base, cap);
            let rows = std::mem::take(&mut claim.rows);
            let marked = mark(
                claim.connection(),
                outbox.inner(),
                &rows,
                &sent,
                &refused,
                backoff,
            )
            .await;
            match marked {
                Ok(dead) => {
                    claim.release();
                    for id in &dead {
                        dead_lettered(outbox, id.as_str());
                    }
                    Ok(BatchReport {
                        failed: refused.len(),
                        dead_lettered: dead.len(),
                        ..BatchReport::default()
                    })
                }
                // The server ended the claim's session: nothing was marked, and its messages are
                // due again (another relay may hold them already).
                Err(Unmarked {
                    error,
                    answered: false,
                }) if claim.lease_ran_out(&error) => Ok(BatchReport {
                    taken_over: sent.len(),
                    ..BatchReport::default()
                }),
                Err(Unmarked { error, .. }) => Err(error),
            }
        })
    }

    fn give_back<'c>(
        mut claim: Self::Held,
        _outbox: &'c Outbox<Self>,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::raw_sql(ROLLBACK.as_str())
                .execute(claim.connection())
                .await?;
            claim.release();
            Ok(())
        })
    }

    fn listen(
        _pool: &Pool<Self>,
        _outbox: &Outbox<Self>,
        _wake: Arc<Notify>,
    ) -> Option<JoinHandle<()>> {
        // MySQL has no notifications: relays poll.
        None
    }
}

/// A claim: its connection, in the claim's transaction, and the messages it holds in enqueue
/// order.
///
/// Dropped before it is settled or given back (a relay task aborted, a statement failed), it
/// closes its connection rather than give it back to the pool: the server rolls the claim back
/// at once, and no pooled session keeps the claim's `wait_timeout`.
pub struct Claim {
    connection: Option<PoolConnection<MySql>>,
    rows: Vec<ClaimedRow>,
    /// When the session's idle wait began, at the latest.
    started: Instant,
    /// The session's `wait_timeout` while it holds the claim.
    lease: Duration,
}

/// What a claim needs of a message it holds to settle it.
struct ClaimedRow {
    seq: i64,
    /// The failed attempts before this one (the row is locked: they are still its count).
    attempts: u32,
    id: MessageId,
}

impl Claim {
    fn connection(&mut self) -> &mut MySqlConnection {
        self.connection
            .as_mut()
            .expect("a claim has its connection until it is settled or given back")
    }

    /// Gives the connection back to the pool: the claim's transaction ended and the session's
    /// `wait_timeout` is its own again.
    fn release(&mut self) {
        drop(self.connection.take());
    }

    /// Whether `error`, on the first statement after the claim's idle wait, is the server ending
    /// the session for having waited out its lease.
    fn lease_ran_out(&self, error: &sqlx::Error) -> bool {
        let ended = match error {
            sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(error) => error
                .try_downcast_ref::<MySqlDatabaseError>()
                .is_some_and(|error| error.number() == IDLE_TIMEOUT),
            _ => false,
        };
        ended && self.started.elapsed() >= self.lease
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(connection) = &mut self.connection {
            connection.close_on_drop();
        }
    }
}

/// A settlement that failed, and whether a statement of it had made it through the claim's idle
/// wait (then the lease cannot be what ended it).
struct Unmarked {
    error: sqlx::Error,
    answered: bool,
}

/// Deletes the confirmed messages (`sent`, positions in `rows`), records the failed attempts of
/// the `refused` ones and commits the claim: the ids of the messages that became dead letters.
async fn mark(
    connection: &mut MySqlConnection,
    statements: &Inner,
    rows: &[ClaimedRow],
    sent: &[usize],
    refused: &[(usize, String)],
    (max_attempts, base, cap): (u32, Duration, Duration),
) -> Result<Vec<MessageId>, Unmarked> {
    let mut answered = false;
    let unmarked = |error, answered| Unmarked { error, answered };
    if !sent.is_empty() {
        sqlx::query(query_text(&statements.mark_sent))
            .bind(json_array(sent.iter().map(|&i| rows[i].seq)))
            .execute(&mut *connection)
            .await
            .map_err(|error| unmarked(error, answered))?;
        answered = true;
    }
    let mut dead = Vec::new();
    if !refused.is_empty() {
        let failed = refused.iter().map(|(i, error)| {
            let row = &rows[*i];
            let attempts = row.attempts.saturating_add(1);
            if attempts >= max_attempts {
                dead.push(row.id.clone());
            }
            serde_json::json!([row.seq, attempts, error])
        });
        let failed = json_array(failed);
        sqlx::query(query_text(&statements.fail))
            .bind(failed)
            .bind(i64::from(max_attempts))
            .bind(i64::from(max_attempts))
            .bind(millis(cap))
            .bind(millis(base))
            .execute(&mut *connection)
            .await
            .map_err(|error| unmarked(error, answered))?;
        answered = true;
    }
    sqlx::raw_sql(COMMIT.as_str())
        .execute(connection)
        .await
        .map_err(|error| unmarked(error, answered))?;
    Ok(dead)
}

/// The lease as `wait_timeout` takes it: whole seconds, rounded up, from 1 to a year.
fn lease_seconds(lease: Duration) -> u64 {
    let seconds = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    seconds.clamp(1, MAX_LEASE_SECONDS)
}

/// A message id as the statements take it: the UUID's 16 bytes.
fn id_param(id: Uuid) -> Uuid {
    id
}

/// A message's headers as the enqueue statement takes them, and the `headers` column keeps them:
/// a JSON array of `[name, value]` pairs.
fn bind_headers(
    query: Query<'_, MySql, MySqlArguments>,
    headers: Vec<(String, String)>,
) -> Query<'_, MySql, MySqlArguments> {
    query.bind(headers_to_json(&headers))
}

impl MessageRow for MySqlRow {
    /// A `BINARY(16)` column.
    fn message_id(&self) -> Result<MessageId, sqlx::Error> {
        Ok(MessageId::from(self.try_get::<Uuid, _>("id")?))
    }

    /// An `INT` column.
    fn attempts(&self) -> Result<u32, sqlx::Error> {
        Ok(u32::try_from(self.try_get::<i32, _>("attempts")?).unwrap_or(0))
    }

    /// The headers as one JSON column.
    fn message(&self) -> Result<OutboxMessage, sqlx::Error> {
        message_with_headers(self, headers_from_json(self.try_get("headers")?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_whole_seconds_rounded_up() {
        for (lease, seconds) in [
            (Duration::ZERO, 1),
            (Duration::from_millis(200), 1),
            (Duration::from_secs(2), 2),
            (Duration::from_millis(2001), 3),
            (Duration::from_secs(u64::MAX), MAX_LEASE_SECONDS),
        ] {
            assert_eq!(lease_seconds(lease), seconds, "{lease:?}");
        }
    }

    #[test]
    fn a_claim_ends_with_the_sessions_own_timeout_back() {
        for (end, last) in [(&*COMMIT, "COMMIT"), (&*ROLLBACK, "ROLLBACK")] {
            let statements: Vec<&str> =
                end.lines().filter(|line| !line.starts_with("--")).collect();
            assert_eq!(
                statements,
                ["SET SESSION wait_timeout = @idem_relay_wait_timeout;", last]
            );
        }
    }
}
