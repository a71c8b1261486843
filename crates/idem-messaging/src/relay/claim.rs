//! The relay's statements on the outbox: claim a batch, then mark sent, fail or release what it
//! claimed. Every statement after the claim is conditional on the claim's token.

use std::time::Duration;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::{Envelope, Error, MessageId, Outbox, outbox::message_from_row, sql::query_text};

/// A row the claim statement returned.
pub(super) enum Claimed {
    /// Leased to this claim: publish it. `row` is the row's address (`ctid`) for
    /// [`mark_sent`].
    Leased {
        uuid: Uuid,
        row: String,
        envelope: Envelope,
    },
    /// Its last attempt's relay died and it had no attempt left: now a dead letter.
    Exhausted { id: MessageId },
}

/// What one claim asks for.
pub(super) struct ClaimRequest<'a> {
    pub(super) token: Uuid,
    pub(super) relay: &'a str,
    pub(super) lease: Duration,
    pub(super) batch: u32,
    pub(super) max_attempts: u32,
    pub(super) ordering: bool,
}

pub(super) async fn claim(
    pool: &PgPool,
    outbox: &Outbox,
    request: &ClaimRequest<'_>,
) -> Result<Vec<Claimed>, Error> {
    let statements = outbox.inner();
    let statement = if request.ordering {
        &statements.claim_ordered
    } else {
        &statements.claim
    };
    let rows = sqlx::query(query_text(statement))
        .bind(request.token)
        .bind(request.relay)
        .bind(millis(request.lease))
        .bind(i64::from(request.batch))
        .bind(i64::from(request.max_attempts))
        .fetch_all(pool)
        .await?;
    let mut claimed: Vec<(i64, Claimed)> = rows
        .iter()
        .map(|row| {
            let uuid: Uuid = row.try_get("id")?;
            let seq: i64 = row.try_get("seq")?;
            let entry = if row.try_get("exhausted")? {
                Claimed::Exhausted {
                    id: MessageId::from(uuid),
                }
            } else {
                let attempt: i32 = row.try_get("attempts")?;
                Claimed::Leased {
                    uuid,
                    row: row.try_get("row")?,
                    envelope: Envelope::new(
                        MessageId::from(uuid),
                        message_from_row(row)?,
                        u32::try_from(attempt).unwrap_or(0),
                    ),
                }
            };
            Ok((seq, entry))
        })
        .collect::<Result<_, sqlx::Error>>()?;
    // `UPDATE … RETURNING` returns rows in no particular order; publish in enqueue order.
    claimed.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(claimed.into_iter().map(|(_, entry)| entry).collect())
}

/// Deletes the confirmed messages this claim still holds, found by the row addresses the claim
/// returned; returns how many.
pub(super) async fn mark_sent(
    pool: &PgPool,
    outbox: &Outbox,
    token: Uuid,
    rows: &[String],
) -> Result<u64, Error> {
    let done = sqlx::query(query_text(&outbox.inner().mark_sent))
        .bind(rows)
        .bind(token)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

/// The backoff after failed attempts.
pub(super) struct Backoff {
    pub(super) max_attempts: u32,
    pub(super) base: Duration,
    pub(super) cap: Duration,
}

/// Records a failed attempt of each message this claim still holds; returns how many went to
/// the dead letters.
pub(super) async fn fail(
    pool: &PgPool,
    outbox: &Outbox,
    token: Uuid,
    ids: &[Uuid],
    errors: &[String],
    backoff: &Backoff,
) -> Result<usize, Error> {
    let rows = sqlx::query(query_text(&outbox.inner().fail))
        .bind(ids)
        .bind(errors)
        .bind(token)
        .bind(i64::from(backoff.max_attempts))
        .bind(millis(backoff.base))
        .bind(millis(backoff.cap))
        .fetch_all(pool)
        .await?;
    let mut dead = 0;
    for row in &rows {
        if row.try_get::<bool, _>("dead")? {
            dead += 1;
            let id = MessageId::from(row.try_get::<Uuid, _>("id")?);
            tracing::warn!(
                outbox = %outbox.inner().location.qualified(),
                message_id = id.as_str(),
                "an outbox message failed its last attempt and is now a dead letter"
            );
        }
    }
    Ok(dead)
}

/// Gives back the messages this claim could not try; returns how many.
pub(super) async fn release(
    pool: &PgPool,
    outbox: &Outbox,
    token: Uuid,
    ids: &[Uuid],
) -> Result<u64, Error> {
    let done = sqlx::query(query_text(&outbox.inner().release))
        .bind(ids)
        .bind(token)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
