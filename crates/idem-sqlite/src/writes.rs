//! The writes of the store, each run by the writer inside the transaction of its batch.

use std::time::Duration;

use idem_core::{
    Acquisition, Address, Clock, FencingToken, Fingerprint, Lease, StoreError, Terms, Timestamp,
    transition::{AcquirePlan, plan_acquire, processing_expiry},
};
use sqlx::{Executor, SqliteConnection, sqlite::SqliteRow};

use crate::{
    error::store_error,
    key_digest::key_digest,
    row::{self, Found, StateCode, sql_int},
};

/// The record a write is about: the address's scope and key digest, as the table keys it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) scope: [u8; 32],
    pub(crate) key: [u8; 32],
}

impl From<&Address> for Target {
    fn from(address: &Address) -> Self {
        Self {
            scope: *address.scope.as_bytes(),
            key: key_digest(&address.key),
        }
    }
}

/// `acquire` of a key that is not completed or in flight (as far as a reader saw).
pub(crate) struct Acquire {
    pub(crate) target: Target,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) terms: Terms,
}

/// A write of the holder of `token`, which changes nothing unless `token` holds a live
/// processing record.
pub(crate) struct HolderWrite {
    pub(crate) target: Target,
    pub(crate) token: FencingToken,
    pub(crate) kind: HolderWriteKind,
}

pub(crate) enum HolderWriteKind {
    /// The outcome's encoding, kept for `ttl`.
    Complete {
        outcome: Vec<u8>,
        ttl: Duration,
    },
    Release,
    Renew {
        lease: Duration,
    },
}

/// Where a write stands in its transaction: each runs in the savepoint `write`, which the first
/// write of a transaction opens and each later one opens after releasing its predecessor's.
/// The savepoint statements go in front of the write's first statement, one call with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Savepoint {
    First,
    Next,
}

/// A statement's SQL file after each [`Savepoint`]'s statements, indexed by the variant.
macro_rules! in_savepoint {
    ($file:literal) => {
        [
            concat!("SAVEPOINT write;\n", include_str!($file)),
            concat!("RELEASE write; SAVEPOINT write;\n", include_str!($file)),
        ]
    };
}

impl Savepoint {
    fn pick(self, sql: [&'static str; 2]) -> &'static str {
        sql[self as usize]
    }
}

/// Decides and writes an acquisition under the write lock: the reader's view may be stale.
pub(crate) async fn acquire(
    connection: &mut SqliteConnection,
    clock: &dyn Clock,
    savepoint: Savepoint,
    acquire: &Acquire,
) -> Result<Acquisition, StoreError> {
    let Acquire {
        target,
        fingerprint,
        terms,
    } = acquire;
    let (scope, key) = (target.scope.as_slice(), target.key.as_slice());
    // Read under the write lock, so that writers see time in the order they commit.
    let now = clock.now();
    let found = sqlx::query(savepoint.pick(in_savepoint!("../sql/acquire_read.sql")))
        .bind(scope)
        .bind(key)
        .fetch_optional(&mut *connection)
        .await
        .map_err(store_error)?;
    let found = found.as_ref().map(Found::read).transpose()?;
    let lease_until = now + terms.lease;
    let (write, took_over) = match plan_acquire(found.as_ref().map(Found::view), fingerprint, now) {
        AcquirePlan::InFlight { retry_after } => return Ok(Acquisition::InFlight { retry_after }),
        AcquirePlan::Mismatch => return Ok(Acquisition::Mismatch),
        AcquirePlan::Replay => {
            let row = sqlx::query(include_str!("../sql/acquire_replay.sql"))
                .bind(scope)
                .bind(key)
                .fetch_one(&mut *connection)
                .await
                .map_err(store_error)?;
            return row::outcome(&row).map(Acquisition::Completed);
        }
        AcquirePlan::TakeOver => (
            sqlx::query_scalar(include_str!("../sql/acquire_take_over.sql"))
                .bind(scope)
                .bind(key)
                .bind(sql_int(lease_until.as_millis())),
            true,
        ),
        AcquirePlan::Create => (
            sqlx::query_scalar(include_str!("../sql/acquire_create.sql"))
                .bind(scope)
                .bind(key)
                .bind(fingerprint.as_bytes().as_slice())
                .bind(StateCode::Processing.code())
                .bind(sql_int(lease_until.as_millis()))
                .bind(sql_int(now.as_millis()))
                .bind(sql_int(processing_expiry(now, *terms).as_millis())),
            false,
        ),
    };
    let token: u64 = write
        .fetch_one(&mut *connection)
        .await
        .map_err(store_error)?;
    Ok(Acquisition::Acquired(Lease {
        token: FencingToken::new(token),
        until: lease_until,
        took_over,
    }))
}

/// Runs a write of the holder; returns the lease's new end for a renewal, the time of the write
/// otherwise.
pub(crate) async fn as_holder(
    connection: &mut SqliteConnection,
    clock: &dyn Clock,
    savepoint: Savepoint,
    write: &HolderWrite,
) -> Result<Timestamp, StoreError> {
    let now = clock.now();
    let sql = savepoint.pick(match write.kind {
        HolderWriteKind::Complete { .. } => in_savepoint!("../sql/complete.sql"),
        HolderWriteKind::Release => in_savepoint!("../sql/release.sql"),
        HolderWriteKind::Renew { .. } => in_savepoint!("../sql/renew.sql"),
    });
    // Every holder-only write starts with the address (?1, ?2), the token (?3), the processing
    // state (?4) and now (?5).
    let query = sqlx::query(sql)
        .bind(write.target.scope.as_slice())
        .bind(write.target.key.as_slice())
        .bind(sql_int(write.token.get()))
        .bind(StateCode::Processing.code())
        .bind(sql_int(now.as_millis()));
    let (query, at) = match &write.kind {
        HolderWriteKind::Complete { outcome, ttl } => (
            query
                .bind(StateCode::Completed.code())
                .bind(sql_int((now + *ttl).as_millis()))
                .bind(outcome.as_slice()),
            now,
        ),
        HolderWriteKind::Release => (query, now),
        HolderWriteKind::Renew { lease } => {
            let until = now + *lease;
            (query.bind(sql_int(until.as_millis())), until)
        }
    };
    // The statement returns the row it changed: with the savepoint's statements in the same
    // call, SQLite's count of changed rows would not be this statement's alone.
    let changed = query
        .fetch_optional(&mut *connection)
        .await
        .map_err(store_error)?;
    match changed {
        None => Err(StoreError::LeaseLost),
        Some(_) => Ok(at),
    }
}

/// Deletes the record; whether it was live.
pub(crate) async fn forget(
    connection: &mut SqliteConnection,
    clock: &dyn Clock,
    savepoint: Savepoint,
    target: &Target,
) -> Result<bool, StoreError> {
    let now = clock.now();
    let expires_at: Option<u64> =
        sqlx::query_scalar(savepoint.pick(in_savepoint!("../sql/forget.sql")))
            .bind(target.scope.as_slice())
            .bind(target.key.as_slice())
            .fetch_optional(&mut *connection)
            .await
            .map_err(store_error)?;
    Ok(expires_at.is_some_and(|at| now < Timestamp::from_millis(at)))
}

/// Deletes up to `limit` expired records; how many.
pub(crate) async fn purge_expired(
    connection: &mut SqliteConnection,
    clock: &dyn Clock,
    savepoint: Savepoint,
    limit: usize,
) -> Result<usize, StoreError> {
    // A call of its own: the count of deleted rows is then the `DELETE`'s.
    let savepoint = match savepoint {
        Savepoint::First => "SAVEPOINT write",
        Savepoint::Next => "RELEASE write; SAVEPOINT write",
    };
    connection.execute(savepoint).await.map_err(store_error)?;
    let now = clock.now();
    let done = sqlx::query(include_str!("../sql/purge_expired.sql"))
        .bind(sql_int(now.as_millis()))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .execute(&mut *connection)
        .await
        .map_err(store_error)?;
    Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
}

/// What a reader decides for `acquire` without the writer: a completed key's replay, a
/// mismatch, a key in flight. `None` when the key is to be created or taken over, which only
/// the writer decides.
pub(crate) fn peek(
    row: Option<&SqliteRow>,
    fingerprint: &Fingerprint,
    now: Timestamp,
) -> Result<Option<Acquisition>, StoreError> {
    let Some(row) = row else {
        return Ok(None);
    };
    let found = Found::read(row)?;
    Ok(match plan_acquire(Some(found.view()), fingerprint, now) {
        AcquirePlan::InFlight { retry_after } => Some(Acquisition::InFlight { retry_after }),
        AcquirePlan::Mismatch => Some(Acquisition::Mismatch),
        AcquirePlan::Replay => Some(Acquisition::Completed(row::outcome(row)?)),
        AcquirePlan::TakeOver | AcquirePlan::Create => None,
    })
}
