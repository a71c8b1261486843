//! The storage edge: how a record's parts map to the columns of `idem_records`.

use idem_core::{
    FencingToken, Fingerprint, Outcome, Record, RecordState, StoreError, Timestamp,
    transition::RecordView,
};
use sqlx::{Decode, Row, Sqlite, Type, sqlite::SqliteRow};

use crate::{Error, error::store_error};

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

    fn read(row: &SqliteRow) -> Result<Self, StoreError> {
        Self::of(column(row, "state")?)
    }

    fn of(code: i64) -> Result<Self, StoreError> {
        match code {
            1 => Ok(Self::Processing),
            2 => Ok(Self::Completed),
            code => Err(StoreError::corrupted(Error::UnknownState(code))),
        }
    }
}

/// A time or a token as a column value. SQLite integers are signed; no clock or counter reaches
/// 2^63, and a value past it (a TTL of `Duration::MAX`) is kept as the largest one.
pub(crate) fn sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The columns of `sql/acquire_read.sql`: what `acquire` decides on, without the response.
#[derive(Debug)]
pub(crate) struct Found {
    fingerprint: Fingerprint,
    expires_at: Timestamp,
    lease_until: Option<Timestamp>,
}

impl Found {
    pub(crate) fn read(row: &SqliteRow) -> Result<Self, StoreError> {
        Self::of(
            column(row, "fingerprint")?,
            column(row, "state")?,
            column(row, "lease_until")?,
            column(row, "expires_at")?,
        )
    }

    /// From the columns' values, as the writer's connection reads them.
    pub(crate) fn of(
        fingerprint: &[u8],
        state: i64,
        lease_until: Option<u64>,
        expires_at: u64,
    ) -> Result<Self, StoreError> {
        let lease_until = match StateCode::of(state)? {
            StateCode::Processing => Some(timestamp(
                lease_until.ok_or_else(|| missing("processing", "lease_until"))?,
            )),
            StateCode::Completed => None,
        };
        Ok(Self {
            fingerprint: Fingerprint::try_from(fingerprint).map_err(StoreError::corrupted)?,
            expires_at: timestamp(expires_at),
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
pub(crate) fn record(row: &SqliteRow) -> Result<Record, StoreError> {
    let token = FencingToken::new(column(row, "token")?);
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
        created_at: timestamp(column(row, "created_at")?),
        expires_at: timestamp(column(row, "expires_at")?),
        state,
    })
}

/// The outcome in the `response` column of a completed record.
pub(crate) fn outcome(row: &SqliteRow) -> Result<Outcome, StoreError> {
    decode_outcome(column(row, "response")?)
}

/// The outcome in a `response` column's value.
pub(crate) fn decode_outcome(response: Option<&[u8]>) -> Result<Outcome, StoreError> {
    let bytes = response.ok_or_else(|| missing("completed", "response"))?;
    Outcome::decode(bytes).map_err(StoreError::corrupted)
}

fn fingerprint(row: &SqliteRow) -> Result<Fingerprint, StoreError> {
    Fingerprint::try_from(column::<&[u8]>(row, "fingerprint")?).map_err(StoreError::corrupted)
}

fn timestamp(millis: u64) -> Timestamp {
    Timestamp::from_millis(millis)
}

fn column<'r, T: Decode<'r, Sqlite> + Type<Sqlite>>(
    row: &'r SqliteRow,
    name: &str,
) -> Result<T, StoreError> {
    row.try_get(name).map_err(store_error)
}

/// A nullable column that a record in `state` must have.
fn required<'r, T: Decode<'r, Sqlite> + Type<Sqlite>>(
    row: &'r SqliteRow,
    state: &'static str,
    name: &'static str,
) -> Result<T, StoreError> {
    column::<Option<T>>(row, name)?.ok_or_else(|| missing(state, name))
}

fn missing(state: &'static str, column: &'static str) -> StoreError {
    StoreError::corrupted(Error::MissingColumn { state, column })
}
