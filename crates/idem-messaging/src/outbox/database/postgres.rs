//! The outbox on PostgreSQL. A claim is a transaction that locks a batch of due messages
//! (`FOR UPDATE SKIP LOCKED`), stays open while they are published, then deletes the confirmed
//! ones, records the refused ones' failed attempts and commits. What it did not settle is
//! released untouched by the commit, or by a rollback if the relay gives the batch back or dies.
//! Its lease is the transaction's idle timeout.

use std::{sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use sqlx::{
    PgPool, Pool, Postgres, Row, Transaction,
    error::DatabaseError,
    postgres::{PgArguments, PgRow},
    query::Query,
};
use tokio::{sync::Notify, task::JoinHandle};
use uuid::Uuid;

use super::{
    Claimed, MessageRow, OutboxDatabase, dead_lettered, in_enqueue_order, message_with_headers,
    millis,
};
use crate::{BatchReport, MessageId, Outbox, OutboxMessage, sql::query_text};

/// SQLSTATE `idle_in_transaction_session_timeout`: the server ended a claim held longer than its
/// lease.
const LEASE_RAN_OUT: &str = "25P03";

/// How the listener's connection shows in `pg_stat_activity`, and in logs.
const LISTENER_NAME: &str = "idem-relay-listener";

impl OutboxDatabase for Postgres {
    outbox_database!(
        "postgres",
        migrations: [
            (1, "idem outbox", "0001_outbox.sql"),
            (
                2,
                "idem outbox: claims held as transactions",
                "0002_outbox_held_claims.sql"
            ),
        ]
    );
    // A claim is held by its transaction, not by rows marked with a token: nothing to release.
    const RELEASE: Option<&'static str> = None;

    /// The claim's transaction, and the messages' row addresses (`ctid`) in the claim's order:
    /// stable while the transaction holds the rows locked, and the cheapest way back to them.
    type Held = (Transaction<'static, Postgres>, Vec<String>);

    fn claim<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        _name: &'c str,
        lease: Duration,
        batch: u32,
        ordering: bool,
    ) -> BoxFuture<'c, Result<Claimed<Self::Held>, sqlx::Error>> {
        Box::pin(async move {
            let mut transaction = pool.begin().await?;
            let rows = sqlx::query(query_text(outbox.inner().claim_statement(ordering)))
                .bind(lease_millis(lease))
                .bind(i64::from(batch))
                .fetch_all(&mut *transaction)
                .await?;
            // The claim takes the due messages by due time; publish them in enqueue order.
            let (rows, envelopes) = in_enqueue_order(&rows, |row| row.try_get::<String, _>("row"))?;
            Ok(((transaction, rows), envelopes))
        })
    }

    fn settle<'c>(
        (mut transaction, rows): Self::Held,
        outbox: &'c Outbox<Self>,
        sent: Vec<usize>,
        refused: Vec<(usize, String)>,
        (max_attempts, base, cap): (u32, Duration, Duration),
    ) -> BoxFuture<'c, Result<BatchReport, sqlx::Error>> {
        Box::pin(async move {
            let statements = outbox.inner();
            let outcome = async {
                if !sent.is_empty() {
                    let rows: Vec<&str> = sent.iter().map(|&i| &*rows[i]).collect();
                    sqlx::query(query_text(&statements.mark_sent))
                        .bind(rows)
                        .execute(&mut *transaction)
                        .await?;
                }
                let mut dead = Vec::new();
                if !refused.is_empty() {
                    let (rows, errors): (Vec<&str>, Vec<&str>) = refused
                        .iter()
                        .map(|(i, error)| (&*rows[*i], error.as_str()))
                        .unzip();
                    let failed = sqlx::query(query_text(&statements.fail))
                        .bind(rows)
                        .bind(errors)
                        .bind(i64::from(max_attempts))
                        .bind(millis(base))
                        .bind(millis(cap))
                        .fetch_all(&mut *transaction)
                        .await?;
                    for row in &failed {
                        if row.try_get::<bool, _>("dead")? {
                            dead.push(row.message_id()?);
                        }
                    }
                }
                transaction.commit().await?;
                Ok(dead)
            };
            match outcome.await {
                Ok(dead) => {
                    for id in &dead {
                        dead_lettered(outbox, id.as_str());
                    }
                    Ok(BatchReport {
                        failed: refused.len(),
                        dead_lettered: dead.len(),
                        ..BatchReport::default()
                    })
                }
                // The server ended the claim's transaction: nothing was marked, and its messages
                // are due again (another relay may hold them already).
                Err(sqlx::Error::Database(error)) if lease_ran_out(&*error) => Ok(BatchReport {
                    taken_over: sent.len(),
                    ..BatchReport::default()
                }),
                Err(error) => Err(error),
            }
        })
    }

    fn give_back<'c>(
        (transaction, _): Self::Held,
        _outbox: &'c Outbox<Self>,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        // If the rollback fails, the connection is closed, which rolls it back too.
        Box::pin(transaction.rollback())
    }

    fn listen(pool: &PgPool, outbox: &Outbox<Self>, wake: Arc<Notify>) -> Option<JoinHandle<()>> {
        // A connection of its own, made with the pool's settings, so that the relay's pool keeps
        // all its connections.
        let listener = idem_sql::listener::Listener::new(
            (*pool.connect_options()).clone(),
            LISTENER_NAME,
            outbox.channel().to_owned(),
        );
        // A permit is stored until taken, so a burst of notifications wakes the relay once.
        Some(tokio::spawn(listener.run(move |_| wake.notify_one())))
    }
}

/// A message id as the statements take it: a `uuid`.
fn id_param(id: Uuid) -> Uuid {
    id
}

/// A message's headers as the enqueue statement takes them: two `text[]`, the names and the
/// values.
fn bind_headers(
    query: Query<'_, Postgres, PgArguments>,
    headers: Vec<(String, String)>,
) -> Query<'_, Postgres, PgArguments> {
    let (names, values): (Vec<String>, Vec<String>) = headers.into_iter().unzip();
    query.bind(names).bind(values)
}

impl MessageRow for PgRow {
    /// A `uuid` column.
    fn message_id(&self) -> Result<MessageId, sqlx::Error> {
        Ok(MessageId::from(self.try_get::<Uuid, _>("id")?))
    }

    /// An `integer` column.
    fn attempts(&self) -> Result<u32, sqlx::Error> {
        Ok(u32::try_from(self.try_get::<i32, _>("attempts")?).unwrap_or(0))
    }

    /// The headers as two `text[]` columns, names and values.
    fn message(&self) -> Result<OutboxMessage, sqlx::Error> {
        let names: Vec<String> = self.try_get("header_names")?;
        let values: Vec<String> = self.try_get("header_values")?;
        message_with_headers(self, names.into_iter().zip(values).collect())
    }
}

fn lease_ran_out(error: &dyn DatabaseError) -> bool {
    error.code().as_deref() == Some(LEASE_RAN_OUT)
}

/// The lease as `idle_in_transaction_session_timeout` takes it: whole milliseconds, at least 1
/// (0 would turn the timeout off) and at most `i32::MAX`.
fn lease_millis(lease: Duration) -> i64 {
    millis(lease).clamp(1, i64::from(i32::MAX))
}
