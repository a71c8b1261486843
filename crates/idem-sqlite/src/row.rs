//! The storage edge: how a record's parts map to the columns of `idem_records`.

use idem_core::{
    FencingToken, Fingerprint, Listed, Outcome, Record, RecordState, Scope, StateFilter,
    StoreError, Timestamp, transition::RecordView,
};
use rusqlite::{Connection, Params, Row, types::FromSql};

use crate::{Error, error::sqlite_error};

/// Runs the query `sql` with `params` on `connection` (its statement cached) and decodes its
/// first row, if any, where it lies: the decoded values borrow nothing from the statement.
pub(crate) fn query_one<T>(
    connection: &Connection,
    sql: &str,
    params: impl Params,
    decode: impl FnOnce(Option<&Row<'_>>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut statement = connection.prepare_cached(sql).map_err(sqlite_error)?;
    let mut rows = statement.query(params).map_err(sqlite_error)?;
    decode(rows.next().map_err(sqlite_error)?)
}

/// The `state` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateCode {
    Processing = 1,
    Completed = 2,
}

impl StateCode {
    /// The column value.
    pub(crate) fn code(self) -> i64 {
        self as i64
    }

    fn read(row: &Row<'_>) -> Result<Self, StoreError> {
        match column(row, "state")? {
            1 => Ok(Self::Processing),
            2 => Ok(Self::Completed),
            code => Err(StoreError::corrupted(Error::UnknownState(code))),
        }
    }
}

impl From<StateFilter> for StateCode {
    fn from(state: StateFilter) -> Self {
        match state {
            StateFilter::Processing => Self::Processing,
            StateFilter::Completed => Self::Completed,
        }
    }
}

/// A time or a token read from column `index`: never negative in a record the store wrote.
pub(crate) fn unsigned(index: usize, value: i64) -> rusqlite::Result<u64> {
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(index, value))
}

/// A time or a token as a column value. SQLite integers are signed; no clock or counter reaches
/// 2^63, and a value past it (a TTL of `Duration::MAX`) is kept as the largest one.
pub(crate) fn sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The columns that `acquire` decides on, without the response: those of `sql/acquire_read.sql`,
/// which `sql/acquire_peek.sql` begins with.
#[derive(Debug)]
pub(crate) struct Found {
    fingerprint: Fingerprint,
    expires_at: Timestamp,
    lease_until: Option<Timestamp>,
}

impl Found {
    pub(crate) fn read(row: &Row<'_>) -> Result<Self, StoreError> {
        let lease_until = match StateCode::read(row)? {
            StateCode::Processing => Some(timestamp(required(row, "processing", "lease_until")?)),
            StateCode::Completed => None,
        };
        Ok(Self {
            fingerprint: fingerprint(row)?,
            expires_at: timestamp(unsigned_column(row, "expires_at")?),
            lease_until,
        })
    }

    pub(crate) fn view(&self) -> RecordView<'_> {
        RecordView {
            fingerprint: &self.fingerprint,
            expires_at: self.expires_at,
            lease_until: self.lease_until,
        }
    }
}

/// The columns of `sql/get.sql`.
pub(crate) fn record(row: &Row<'_>) -> Result<Record, StoreError> {
    let token = FencingToken::new(unsigned_column(row, "token")?);
    let state = match StateCode::read(row)? {
        StateCode::Processing => RecordState::Processing {
            token,
            lease_until: timestamp(required(row, "processing", "lease_until")?),
        },
        StateCode::Completed => RecordState::Completed {
            token,
            outcome: outcome(row)?,
            completed_at: timestamp(required(row, "completed", "completed_at")?),
        },
    };
    Ok(Record {
        fingerprint: fingerprint(row)?,
        created_at: timestamp(unsigned_column(row, "created_at")?),
        expires_at: timestamp(unsigned_column(row, "expires_at")?),
        state,
    })
}

/// The columns of `sql/list.sql`: a record as [`record`] reads it, with its scope and key digest.
pub(crate) fn listed(row: &Row<'_>) -> Result<Listed, StoreError> {
    Ok(Listed {
        scope: Scope::from_bytes(digest(row, "scope")?),
        key_sha256: digest(row, "key")?,
        record: record(row)?,
    })
}

/// The outcome in the `response` column of a completed record.
pub(crate) fn outcome(row: &Row<'_>) -> Result<Outcome, StoreError> {
    let response = blob(row, "response")?.ok_or_else(|| missing("completed", "response"))?;
    Outcome::decode(response).map_err(StoreError::corrupted)
}

fn fingerprint(row: &Row<'_>) -> Result<Fingerprint, StoreError> {
    // NULL is no bytes: a fingerprint of the wrong length, corrupted.
    let bytes = blob(row, "fingerprint")?.unwrap_or_default();
    Fingerprint::try_from(bytes).map_err(StoreError::corrupted)
}

/// A 32-byte column: the scope, or the key's digest.
fn digest(row: &Row<'_>, name: &str) -> Result<[u8; 32], StoreError> {
    // NULL is no bytes: the wrong length, corrupted.
    let bytes = blob(row, name)?.unwrap_or_default();
    <[u8; 32]>::try_from(bytes).map_err(StoreError::corrupted)
}

fn timestamp(millis: u64) -> Timestamp {
    Timestamp::from_millis(millis)
}

fn column<T: FromSql>(row: &Row<'_>, name: &str) -> Result<T, StoreError> {
    row.get(name).map_err(sqlite_error)
}

/// A time or a token (see [`unsigned`]).
fn unsigned_column(row: &Row<'_>, name: &str) -> Result<u64, StoreError> {
    let index = row.as_ref().column_index(name).map_err(sqlite_error)?;
    row.get(index)
        .and_then(|value| unsigned(index, value))
        .map_err(sqlite_error)
}

/// A blob column's bytes, read in place; NULL as `None`.
fn blob<'r>(row: &'r Row<'_>, name: &str) -> Result<Option<&'r [u8]>, StoreError> {
    let value = row.get_ref(name).map_err(sqlite_error)?;
    value.as_blob_or_null().map_err(StoreError::corrupted)
}

/// A nullable time that a record in `state` must have (see [`unsigned`]).
fn required(row: &Row<'_>, state: &'static str, name: &'static str) -> Result<u64, StoreError> {
    let index = row.as_ref().column_index(name).map_err(sqlite_error)?;
    let value: Option<i64> = row.get(index).map_err(sqlite_error)?;
    let value = value.ok_or_else(|| missing(state, name))?;
    unsigned(index, value).map_err(sqlite_error)
}

fn missing(state: &'static str, column: &'static str) -> StoreError {
    StoreError::corrupted(Error::MissingColumn { state, column })
}
