//! The outbox on SQLite. SQLite has no row locks to hold: a claim writes a token of its own and
//! the end of its lease on the messages it takes, in one `UPDATE … RETURNING` under the write
//! lock (`BEGIN IMMEDIATE`), so that two relays on one file never take the same message while a
//! lease runs. Settling the claim deletes the confirmed messages, records the refused ones'
//! failed attempts and gives the rest back, in one transaction, each statement fenced on the
//! token: a relay whose lease ran out and whose messages another claim took marks nothing.

use std::{sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use sqlx::{
    Pool, Row, Sqlite,
    query::Query,
    sqlite::{SqliteArguments, SqliteRow},
};
use tokio::{sync::Notify, task::JoinHandle};
use uuid::Uuid;

use super::{
    Claimed, MessageRow, OutboxDatabase, dead_lettered, headers_from_json, headers_to_json,
    in_enqueue_order, json_array, message_with_headers, millis,
};
use crate::{BatchReport, MessageId, Outbox, OutboxMessage, sql::query_text};

impl OutboxDatabase for Sqlite {
    outbox_database!("sqlite", migrations: [(1, "idem outbox", "0001_outbox.sql")]);
    const RELEASE: Option<&'static str> =
        Some(include_str!("../../../sql/sqlite/outbox_release.sql"));

    /// The pool, the claim's token, and the messages' ids in the claim's order.
    type Held = (Pool<Sqlite>, String, Vec<String>);

    fn claim<'c>(
        pool: &'c Pool<Self>,
        outbox: &'c Outbox<Self>,
        name: &'c str,
        lease: Duration,
        batch: u32,
        ordering: bool,
    ) -> BoxFuture<'c, Result<Claimed<Self::Held>, sqlx::Error>> {
        Box::pin(async move {
            let token = Uuid::new_v4().hyphenated().to_string();
            let mut transaction = pool.begin_with("BEGIN IMMEDIATE").await?;
            let rows = sqlx::query(query_text(outbox.inner().claim_statement(ordering)))
                .bind(&token)
                .bind(name)
                .bind(millis(lease).max(1))
                .bind(i64::from(batch))
                .fetch_all(&mut *transaction)
                .await?;
            transaction.commit().await?;
            // RETURNING hands the rows out in no particular order; publish them in enqueue order.
            let (ids, envelopes) = in_enqueue_order(&rows, |row| row.try_get::<String, _>("id"))?;
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

impl MessageRow for SqliteRow {
    /// A `TEXT` column, hyphenated.
    fn message_id(&self) -> Result<MessageId, sqlx::Error> {
        let id: String = self.try_get("id")?;
        id.parse().map_err(|error| sqlx::Error::ColumnDecode {
            index: "id".to_owned(),
            source: Box::new(error),
        })
    }

    /// An `INTEGER` column.
    fn attempts(&self) -> Result<u32, sqlx::Error> {
        Ok(u32::try_from(self.try_get::<i64, _>("attempts")?).unwrap_or(0))
    }

    /// The headers as one JSON column.
    fn message(&self) -> Result<OutboxMessage, sqlx::Error> {
        message_with_headers(self, headers_from_json(self.try_get("headers")?)?)
    }
}

/// A message's headers as the enqueue statement takes them, and the `headers` column keeps them:
/// a JSON array of `[name, value]` pairs.
fn bind_headers(
    query: Query<'_, Sqlite, SqliteArguments>,
    headers: Vec<(String, String)>,
) -> Query<'_, Sqlite, SqliteArguments> {
    query.bind(headers_to_json(&headers))
}
