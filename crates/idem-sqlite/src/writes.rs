//! The writes of the store, each run by the writer inside the transaction of its batch, on the
//! writer's own connection; and what a reader can answer without them.

use std::time::Duration;

use bytes::Bytes;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, Clock, FencingToken, Fingerprint, Lease,
    Posted, StoreError, Terms, Timestamp,
    census::Board,
    transition::{AcquirePlan, plan_acquire, processing_expiry},
};
use rusqlite::{Connection, OptionalExtension, Row, ToSql};

use crate::{
    error::sqlite_error,
    key_digest::key_digest,
    row::{self, Found, StateCode, sql_int, unsigned},
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

/// Part `index` of the response that the execution holding `token` streams.
pub(crate) struct AppendPart {
    pub(crate) target: Target,
    pub(crate) token: FencingToken,
    pub(crate) index: u32,
    pub(crate) part: Bytes,
}

/// The parts of one execution: its record's address and its token.
pub(crate) struct Parts {
    pub(crate) target: Target,
    pub(crate) token: FencingToken,
}

/// Decides and writes an acquisition under the write lock: the reader's view may be stale.
pub(crate) fn acquire(
    connection: &Connection,
    clock: &dyn Clock,
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
    let found = row::query_one(
        connection,
        include_str!("../sql/acquire_read.sql"),
        (scope, key),
        |row| row.map(Found::read).transpose(),
    )?;
    let took_over = match plan_acquire(found.as_ref().map(Found::view), fingerprint, now) {
        AcquirePlan::InFlight { retry_after } => return Ok(Acquisition::InFlight { retry_after }),
        AcquirePlan::Mismatch => return Ok(Acquisition::Mismatch),
        AcquirePlan::Replay => {
            return row::query_one(
                connection,
                include_str!("../sql/acquire_replay.sql"),
                (scope, key),
                |row| {
                    // The row read above, under the same lock: always there.
                    let row = row.ok_or(rusqlite::Error::QueryReturnedNoRows);
                    row::outcome(row.map_err(sqlite_error)?).map(Acquisition::Completed)
                },
            );
        }
        AcquirePlan::TakeOver => true,
        AcquirePlan::Create => false,
    };

    let token: u64 = connection
        .prepare_cached(include_str!("../sql/next_token.sql"))
        .and_then(|mut next| {
            next.query_row((), |row| unsigned(0, row.get(0)?))
                .optional()
        })
        .map_err(sqlite_error)?
        .ok_or_else(|| StoreError::Misconfigured {
            message: "the idem_fencing row is missing: check the migrations".into(),
            source: None,
        })?;
    let lease_until = now + terms.lease;
    let (token_value, until) = (sql_int(token), sql_int(lease_until.as_millis()));
    let written = if took_over {
        connection
            .prepare_cached(include_str!("../sql/take_over.sql"))
            .and_then(|mut write| write.execute((scope, key, token_value, until)))
    } else {
        connection
            .prepare_cached(include_str!("../sql/create.sql"))
            .and_then(|mut write| {
                write.execute((
                    scope,
                    key,
                    fingerprint.as_bytes().as_slice(),
                    StateCode::Processing.code(),
                    token_value,
                    until,
                    sql_int(now.as_millis()),
                    sql_int(processing_expiry(now, *terms).as_millis()),
                ))
            })
    };
    written.map_err(sqlite_error)?;
    Ok(Acquisition::Acquired(Lease {
        token: FencingToken::new(token),
        until: lease_until,
        took_over,
    }))
}

/// Runs a write of the holder; returns the lease's new end for a renewal, the time of the write
/// otherwise.
pub(crate) fn as_holder(
    connection: &Connection,
    clock: &dyn Clock,
    write: &HolderWrite,
) -> Result<Timestamp, StoreError> {
    let now = clock.now();
    let (sql, at) = match write.kind {
        HolderWriteKind::Complete { .. } => (include_str!("../sql/complete.sql"), now),
        HolderWriteKind::Release => (include_str!("../sql/release.sql"), now),
        HolderWriteKind::Renew { lease } => (include_str!("../sql/renew.sql"), now + lease),
    };
    let (scope, key) = (write.target.scope.as_slice(), write.target.key.as_slice());
    let (token, processing) = (sql_int(write.token.get()), StateCode::Processing.code());
    let (now_value, at_value) = (sql_int(now.as_millis()), sql_int(at.as_millis()));
    // Every holder-only write starts with the address (?1, ?2), the token (?3), the processing
    // state (?4) and now (?5); then its own.
    let mut params: Vec<&dyn ToSql> = vec![&scope, &key, &token, &processing, &now_value];
    let (completed, expires_at);
    match &write.kind {
        HolderWriteKind::Complete { outcome, ttl } => {
            completed = StateCode::Completed.code();
            expires_at = sql_int((now + *ttl).as_millis());
            params.extend([&completed as &dyn ToSql, &expires_at, outcome]);
        }
        HolderWriteKind::Release => {}
        HolderWriteKind::Renew { .. } => params.push(&at_value),
    }
    let changed = connection
        .prepare_cached(sql)
        .and_then(|mut holder_write| holder_write.execute(params.as_slice()));
    match changed.map_err(sqlite_error)? {
        0 => Err(StoreError::LeaseLost),
        _ => Ok(at),
    }
}

/// Deletes the record and every execution's parts; whether the record was live.
pub(crate) fn forget(
    connection: &Connection,
    clock: &dyn Clock,
    target: &Target,
) -> Result<bool, StoreError> {
    let now = clock.now();
    let (scope, key) = (target.scope.as_slice(), target.key.as_slice());
    undone_alone(connection, || {
        let expires_at: Option<u64> = connection
            .prepare_cached(include_str!("../sql/forget.sql"))
            .and_then(|mut forget| {
                forget
                    .query_row((scope, key), |row| unsigned(0, row.get(0)?))
                    .optional()
            })
            .map_err(sqlite_error)?;
        connection
            .prepare_cached(include_str!("../sql/forget_parts.sql"))
            .and_then(|mut forget| forget.execute((scope, key)))
            .map_err(sqlite_error)?;
        Ok(expires_at.is_some_and(|at| now < Timestamp::from_millis(at)))
    })
}

/// Appends a part if `token` holds the live processing record and the part is the next one, in
/// one statement; otherwise reads why not, under the same lock: a lost lease, a part stored
/// before (a retry, which changes nothing), or a part past the next one.
pub(crate) fn append_part(
    connection: &Connection,
    clock: &dyn Clock,
    append: &AppendPart,
) -> Result<(), StoreError> {
    let now = sql_int(clock.now().as_millis());
    let (scope, key) = (append.target.scope.as_slice(), append.target.key.as_slice());
    let (token, processing) = (sql_int(append.token.get()), StateCode::Processing.code());
    let index = i64::from(append.index);
    let appended = connection
        .prepare_cached(include_str!("../sql/append_part.sql"))
        .and_then(|mut write| {
            write.execute((scope, key, token, processing, now, index, &append.part[..]))
        })
        .map_err(sqlite_error)?;
    if appended > 0 {
        return Ok(());
    }
    let (holding, next) = connection
        .prepare_cached(include_str!("../sql/append_part_refused.sql"))
        .and_then(|mut why| {
            why.query_row((scope, key, token, processing, now), |row| {
                Ok((row.get::<_, bool>(0)?, unsigned(1, row.get(1)?)?))
            })
        })
        .map_err(sqlite_error)?;
    if !holding {
        return Err(StoreError::LeaseLost);
    }
    if u64::from(append.index) < next {
        return Ok(());
    }
    Err(StoreError::PartOutOfOrder {
        // At most `index` here, so a `u32`.
        next: u32::try_from(next).unwrap_or(u32::MAX),
        given: append.index,
    })
}

/// Deletes one execution's parts.
pub(crate) fn discard_parts(connection: &Connection, parts: &Parts) -> Result<(), StoreError> {
    let (scope, key) = (parts.target.scope.as_slice(), parts.target.key.as_slice());
    connection
        .prepare_cached(include_str!("../sql/discard_parts.sql"))
        .and_then(|mut discard| discard.execute((scope, key, sql_int(parts.token.get()))))
        .map(drop)
        .map_err(sqlite_error)
}

/// Runs `write`, a write of more than one statement, in a savepoint of the writer's transaction,
/// so that a failure undoes it alone, as SQLite undoes a failed statement by itself.
fn undone_alone<T>(
    connection: &Connection,
    write: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let execute = |sql: &str| {
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(()))
            .map(drop)
    };
    execute("SAVEPOINT idem_write").map_err(sqlite_error)?;
    match write() {
        Ok(written) => execute("RELEASE idem_write")
            .map(|()| written)
            .map_err(sqlite_error),
        Err(error) => {
            // A failure that rolled the whole transaction back took the savepoint with it: the
            // writer sees that. Otherwise nothing more to do if these fail: the writer's `COMMIT`
            // reports the connection's state.
            if !connection.is_autocommit() {
                let _ = execute("ROLLBACK TO idem_write");
                let _ = execute("RELEASE idem_write");
            }
            Err(error)
        }
    }
}

/// A census to post on the board.
pub(crate) struct PostCensus {
    pub(crate) claimant: u64,
    pub(crate) census: Census,
    pub(crate) rest: Duration,
}

/// Answers `claim` from the census board ([`Board::claim`]), in the writer's transaction.
pub(crate) fn claim_census(
    connection: &Connection,
    clock: &dyn Clock,
    claim: CensusClaim,
) -> Result<CensusTurn, StoreError> {
    with_board(connection, clock, |board, now| board.claim(claim, now))
}

/// Posts a census on the board ([`Board::post`]), in the writer's transaction.
pub(crate) fn post_census(
    connection: &Connection,
    clock: &dyn Clock,
    post: &PostCensus,
) -> Result<bool, StoreError> {
    with_board(connection, clock, |board, now| {
        board.post(post.claimant, post.census, post.rest, now)
    })
}

/// Reads the census board, changes it with `change` at the store's time, and writes it back.
fn with_board<T>(
    connection: &Connection,
    clock: &dyn Clock,
    change: impl FnOnce(&mut Board, Timestamp) -> T,
) -> Result<T, StoreError> {
    let now = clock.now();
    let mut board = connection
        .prepare_cached(include_str!("../sql/census_board.sql"))
        .and_then(|mut read| read.query_row((), board))
        .map_err(sqlite_error)?;
    let answer = change(&mut board, now);
    let millis = |at: Timestamp| sql_int(at.as_millis());
    let posted = board.posted;
    connection
        .prepare_cached(include_str!("../sql/census_board_write.sql"))
        .and_then(|mut write| {
            write.execute((
                board.claim.map(|(claimant, _)| claimant.cast_signed()),
                board.claim.map(|(_, until)| millis(until)),
                posted.map(|posted| millis(posted.at)),
                posted.map(|posted| millis(posted.next)),
                posted.map(|posted| sql_int(posted.census.processing)),
                posted.map(|posted| sql_int(posted.census.completed)),
                posted
                    .and_then(|posted| posted.census.oldest_processing)
                    .map(millis),
            ))
        })
        .map_err(sqlite_error)?;
    Ok(answer)
}

/// The census board as its row holds it.
fn board(row: &rusqlite::Row<'_>) -> rusqlite::Result<Board> {
    let at = |index: usize| at_of(row, index);
    let count = |index: usize| -> rusqlite::Result<u64> {
        row.get::<_, Option<i64>>(index)?
            .map_or(Ok(0), |count| unsigned(index, count))
    };
    let claimant: Option<i64> = row.get(0)?;
    let posted = match (at(2)?, at(3)?) {
        (Some(posted_at), Some(next)) => Some(Posted {
            census: Census {
                processing: count(4)?,
                completed: count(5)?,
                oldest_processing: at(6)?,
            },
            at: posted_at,
            next,
        }),
        _ => None,
    };
    Ok(Board {
        posted,
        claim: claimant
            .zip(at(1)?)
            .map(|(claimant, until)| (claimant.cast_unsigned(), until)),
    })
}

/// A time column that may be NULL.
fn at_of(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Option<Timestamp>> {
    row.get::<_, Option<i64>>(index)?
        .map(|millis| unsigned(index, millis).map(Timestamp::from_millis))
        .transpose()
}

/// Deletes up to `limit` expired records, then expired parts with the rest of `limit`; how many
/// rows in all.
pub(crate) fn purge_expired(
    connection: &Connection,
    clock: &dyn Clock,
    limit: usize,
) -> Result<usize, StoreError> {
    let now = sql_int(clock.now().as_millis());
    let purge = |sql: &str, limit: usize| {
        connection
            .prepare_cached(sql)
            .and_then(|mut purge| purge.execute((now, i64::try_from(limit).unwrap_or(i64::MAX))))
            .map_err(sqlite_error)
    };
    undone_alone(connection, || {
        let records = purge(include_str!("../sql/purge_expired.sql"), limit)?;
        let parts = match limit.saturating_sub(records) {
            0 => 0,
            rest => purge(include_str!("../sql/purge_expired_parts.sql"), rest)?,
        };
        Ok(records + parts)
    })
}

/// What a reader decides for `acquire` without the writer: a completed key's replay, a
/// mismatch, a key in flight. `None` when the key is to be created or taken over, which only
/// the writer decides.
pub(crate) fn peek(
    row: Option<&Row<'_>>,
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
