//! The relay's claim on the outbox: a transaction that locks a batch of due messages, stays open
//! while they are published, then deletes the confirmed ones, records the refused ones' failed
//! attempts and commits. What it did not settle (messages it could not try) is released untouched
//! by the commit, or by a rollback if the relay gives the batch back or dies.

use std::time::Duration;

use sqlx::{PgPool, Postgres, Row, Transaction, error::DatabaseError};

use crate::{Envelope, Error, MessageId, Outbox, outbox::message_from_row, sql::query_text};

/// SQLSTATE `idle_in_transaction_session_timeout`: the server ended a claim held longer than its
/// lease.
const LEASE_RAN_OUT: &str = "25P03";

/// A batch of messages locked by an open transaction.
pub(super) struct Claim {
    transaction: Transaction<'static, Postgres>,
    /// The messages' row addresses (`ctid`), in the order of `envelopes`: stable while the
    /// transaction holds the rows locked, and the cheapest way back to them.
    rows: Vec<String>,
    /// The messages, in enqueue order.
    pub(super) envelopes: Vec<Envelope>,
}

/// What a claim asks for.
pub(super) struct ClaimRequest {
    pub(super) lease: Duration,
    pub(super) batch: u32,
    pub(super) ordering: bool,
}

/// How a batch's messages fared at the broker, by position in the claim.
#[derive(Default)]
pub(super) struct Verdicts {
    /// Confirmed: delete them.
    pub(super) sent: Vec<usize>,
    /// Refused, with the broker's reason: a failed attempt each.
    pub(super) refused: Vec<(usize, String)>,
}

/// The backoff after failed attempts.
pub(super) struct Backoff {
    pub(super) max_attempts: u32,
    pub(super) base: Duration,
    pub(super) cap: Duration,
}

/// What settling a claim did.
pub(super) enum Settled {
    /// Committed: `dead` of the refused messages became dead letters.
    Committed { dead: usize },
    /// The claim's lease ran out before it settled: the server ended its transaction, so
    /// nothing was marked and its messages are due again (another relay may hold them already).
    LeaseRanOut,
}

impl Claim {
    /// Opens a transaction and locks up to `request.batch` due messages in it.
    pub(super) async fn take(
        pool: &PgPool,
        outbox: &Outbox,
        request: &ClaimRequest,
    ) -> Result<Self, Error> {
        let statements = outbox.inner();
        let statement = if request.ordering {
            &statements.claim_ordered
        } else {
            &statements.claim
        };
        let mut transaction = pool.begin().await?;
        let rows = sqlx::query(query_text(statement))
            .bind(lease_millis(request.lease))
            .bind(i64::from(request.batch))
            .fetch_all(&mut *transaction)
            .await?;
        let mut claimed = rows
            .iter()
            .map(|row| {
                let attempts: i32 = row.try_get("attempts")?;
                let envelope = Envelope::new(
                    MessageId::from(row.try_get::<uuid::Uuid, _>("id")?),
                    message_from_row(row)?,
                    u32::try_from(attempts).unwrap_or(0).saturating_add(1),
                );
                Ok((row.try_get::<i64, _>("seq")?, row.try_get("row")?, envelope))
            })
            .collect::<Result<Vec<(i64, String, Envelope)>, sqlx::Error>>()?;
        // The claim takes the due messages by due time; publish them in enqueue order.
        claimed.sort_unstable_by_key(|(seq, ..)| *seq);
        let (rows, envelopes) = claimed.into_iter().map(|(_, row, e)| (row, e)).unzip();
        Ok(Self {
            transaction,
            rows,
            envelopes,
        })
    }

    /// Deletes the confirmed messages, records the refused ones' failed attempts and commits;
    /// the other messages are due again at once, their attempt not counted.
    pub(super) async fn settle(
        mut self,
        outbox: &Outbox,
        verdicts: Verdicts,
        backoff: &Backoff,
    ) -> Result<Settled, Error> {
        let statements = outbox.inner();
        let outcome = async {
            if !verdicts.sent.is_empty() {
                let rows: Vec<&str> = verdicts.sent.iter().map(|&i| &*self.rows[i]).collect();
                sqlx::query(query_text(&statements.mark_sent))
                    .bind(rows)
                    .execute(&mut *self.transaction)
                    .await?;
            }
            let mut dead = 0;
            if !verdicts.refused.is_empty() {
                let (rows, errors): (Vec<&str>, Vec<&str>) = verdicts
                    .refused
                    .iter()
                    .map(|(i, error)| (&*self.rows[*i], error.as_str()))
                    .unzip();
                let failed = sqlx::query(query_text(&statements.fail))
                    .bind(rows)
                    .bind(errors)
                    .bind(i64::from(backoff.max_attempts))
                    .bind(millis(backoff.base))
                    .bind(millis(backoff.cap))
                    .fetch_all(&mut *self.transaction)
                    .await?;
                for row in &failed {
                    if row.try_get::<bool, _>("dead")? {
                        dead += 1;
                        let id = MessageId::from(row.try_get::<uuid::Uuid, _>("id")?);
                        tracing::warn!(
                            outbox = %statements.location.qualified(),
                            message_id = id.as_str(),
                            "an outbox message failed its last attempt and is now a dead letter"
                        );
                    }
                }
            }
            self.transaction.commit().await?;
            Ok(dead)
        };
        match outcome.await {
            Ok(dead) => Ok(Settled::Committed { dead }),
            Err(sqlx::Error::Database(error)) if lease_ran_out(&*error) => Ok(Settled::LeaseRanOut),
            Err(error) => Err(error.into()),
        }
    }

    /// Gives the batch back untried: rolls the transaction back. If that fails, the connection
    /// is closed, which rolls it back too.
    pub(super) async fn give_back(self) -> Result<(), Error> {
        self.transaction.rollback().await?;
        Ok(())
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

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
