//! The outbox on SQLite. SQLite has no row locks to hold: a claim writes a token of its own and
//! the end of its lease on the messages it takes, in one `UPDATE … RETURNING` under the write
//! lock (`BEGIN IMMEDIATE`), so that two relays on one file never take the same message while a
//! lease runs. Settling the claim deletes the confirmed messages, records the refused ones'
//! failed attempts and gives the rest back, in one transaction, each statement fenced on the
//! token: a relay whose lease ran out and whose messages another claim took marks nothing.

use std::{sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use sqlx::{Pool, Row, Sqlite, sqlite::SqliteRow};
use tokio::{sync::Notify, task::JoinHandle};
use uuid::Uuid;

use super::{Claimed, OutboxDatabase, dead_lettered, millis};
use crate::{BatchReport, Envelope, MessageId, Outbox, OutboxMessage, sql::query_text};

impl OutboxDatabase for Sqlite {
    outbox_database!("sqlite", migrations: [(1, "idem outbox", "0001_outbox.sql")]);
    const RELEASE: Option<&'static str> =
        Some(include_str!("../../../sql/sqlite/outbox_release.sql"));

    /// The pool, the claim's token, and the messages' ids in the claim's order.
    type Held = (Pool<Sqlite>, String, Vec<String>);

    fn enqueue<'c>(
        connection: &'c mut Self::Connection,
        outbox: &'c Outbox<Self>,
        id: Uuid,
        message: OutboxMessage,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query(query_text(&outbox.inner().enqueue))
                .bind(id_param(id))
                .bind(message.destination)
                .bind(message.ordering_key)
                .bind(headers_to_json(&message.headers))
                .bind(message.payload.as_ref())
                .execute(connection)
                .await?;
            Ok(())
        })
    }

    fn claim<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        name: &'c str,
        lease: Duration,
        batch: u32,
        ordering: bool,
    ) -> BoxFuture<'c, Result<Claimed<Self::Held>, sqlx::Error>> {
        Box::pin(async move {
            let statements = outbox.inner();
            let statement = if ordering {
                &statements.claim_ordered
            } else {
                &statements.claim
            };
            let token = Uuid::new_v4().hyphenated().to_string();
            let mut transaction = pool.begin_with("BEGIN IMMEDIATE").await?;
            let rows = sqlx::query(query_text(statement))
                .bind(&token)
                .bind(name)
                .bind(millis(lease).max(1))
                .bind(i64::from(batch))
                .fetch_all(&mut *transaction)
                .await?;
            transaction.commit().await?;
            let mut claimed = rows
                .iter()
                .map(|row| {
                    let envelope = Envelope::new(
                        id_from_row(row)?,
                        message_from_row(row)?,
                        attempts_from_row(row)?.saturating_add(1),
                    );
                    Ok((row.try_get::<i64, _>("seq")?, envelope))
                })
                .collect::<Result<Vec<(i64, Envelope)>, sqlx::Error>>()?;
            // RETURNING hands the rows out in no particular order; publish them in enqueue order.
            claimed.sort_unstable_by_key(|(seq, _)| *seq);
            let envelopes: Vec<Envelope> = claimed.into_iter().map(|(_, e)| e).collect();
            let ids = envelopes
                .iter()
                .map(|e| e.id().as_str().to_owned())
                .collect();
            Ok(((pool.clone(), token, ids), envelopes))
        })
    }

    fn settle<'c>(
        (pool, token, ids): Self::Held,
        outbox: &'c Outbox<Self>,
        sent: Vec<usize>,
        refused: Vec<(usize, String)>,
        (max_attempts, base, cap): (u32, Duration, Duration),
    ) -> BoxFuture<'c, Result<BatchReport, sqlx::Error>> {
        Box::pin(async move {
            let statements = outbox.inner();
            let mut transaction = pool.begin_with("BEGIN IMMEDIATE").await?;
            let mut marked = 0;
            if !sent.is_empty() {
                marked = sqlx::query(query_text(&statements.mark_sent))
                    .bind(&token)
                    .bind(json_array(sent.iter().map(|&i| ids[i].as_str())))
                    .execute(&mut *transaction)
                    .await?
                    .rows_affected();
            }
            let mut failed = Vec::new();
            if !refused.is_empty() {
                let refused = refused
                    .iter()
                    .map(|(i, error)| vec![ids[*i].as_str(), error.as_str()]);
                failed = sqlx::query(query_text(&statements.fail))
                    .bind(&token)
                    .bind(json_array(refused))
                    .bind(i64::from(max_attempts))
                    .bind(millis(base))
                    .bind(millis(cap))
                    .fetch_all(&mut *transaction)
                    .await?;
            }
            if let Some(release) = &statements.release {
                sqlx::query(query_text(release))
                    .bind(&token)
                    .execute(&mut *transaction)
                    .await?;
            }
            transaction.commit().await?;
            let mut dead = 0;
            for row in &failed {
                if row.try_get::<bool, _>("dead")? {
                    dead += 1;
                    dead_lettered(outbox, row.try_get("id")?);
                }
            }
            Ok(BatchReport {
                // Confirmed messages another claim holds now: its relay publishes them again.
                taken_over: sent.len() - usize::try_from(marked).unwrap_or(sent.len()),
                failed: failed.len(),
                dead_lettered: dead,
                ..BatchReport::default()
            })
        })
    }

    fn give_back<'c>(
        (pool, token, _): Self::Held,
        outbox: &'c Outbox<Self>,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(async move {
            if let Some(release) = &outbox.inner().release {
                sqlx::query(query_text(release))
                    .bind(&token)
                    .execute(&pool)
                    .await?;
            }
            Ok(())
        })
    }

    fn listen(
        _pool: &Pool<Self>,
        _outbox: &Outbox<Self>,
        _wake: Arc<Notify>,
    ) -> Option<JoinHandle<()>> {
        // SQLite cannot tell another connection about a commit: relays poll.
        None
    }
}

/// A message id as the statements take it: text, hyphenated.
fn id_param(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// The message id of a claimed or dead row.
fn id_from_row(row: &SqliteRow) -> Result<MessageId, sqlx::Error> {
    let id: String = row.try_get("id")?;
    id.parse().map_err(|error| sqlx::Error::ColumnDecode {
        index: "id".to_owned(),
        source: Box::new(error),
    })
}

/// The failed attempts of a claimed or dead row: an `INTEGER` column, never negative.
fn attempts_from_row(row: &SqliteRow) -> Result<u32, sqlx::Error> {
    Ok(u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(0))
}

/// The message columns of a claimed or dead row.
fn message_from_row(row: &SqliteRow) -> Result<OutboxMessage, sqlx::Error> {
    let headers: String = row.try_get("headers")?;
    let headers: Vec<(String, String)> =
        serde_json::from_str(&headers).map_err(|error| sqlx::Error::ColumnDecode {
            index: "headers".to_owned(),
            source: Box::new(error),
        })?;
    let payload: Vec<u8> = row.try_get("payload")?;
    Ok(OutboxMessage {
        destination: row.try_get("destination")?,
        ordering_key: row.try_get("ordering_key")?,
        headers,
        payload: payload.into(),
    })
}

/// Headers as the `headers` column keeps them: a JSON array of `[name, value]` pairs.
fn headers_to_json(headers: &[(String, String)]) -> String {
    json_array(
        headers
            .iter()
            .map(|(name, value)| vec![name.as_str(), value.as_str()]),
    )
}

/// `values` as a JSON array, for the `headers` column and the statements' `json_each`.
fn json_array<T: Into<serde_json::Value>>(values: impl IntoIterator<Item = T>) -> String {
    serde_json::Value::Array(values.into_iter().map(Into::into).collect()).to_string()
}
