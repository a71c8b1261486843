//! The storage edge: how the rows the statements return map to records and outcomes.

use std::time::Duration;

use idem_core::{
    Census, FencingToken, Fingerprint, Listed, Outcome, Posted, Record, RecordState, Scope,
    StateFilter, StoreError, Timestamp, census::Board,
};
use sqlx::{Decode, MySql, Row, Type, mysql::MySqlRow};

use crate::{Error, error::store_error};

/// The `state` column.
pub(crate) const PROCESSING: &str = "processing";
pub(crate) const COMPLETED: &str = "completed";

/// The `state` column of records in `state`.
pub(crate) fn state_column(state: StateFilter) -> &'static str {
    match state {
        StateFilter::Processing => PROCESSING,
        StateFilter::Completed => COMPLETED,
    }
}

/// A row read from the store, with the table's name for error messages.
pub(crate) struct Columns<'r> {
    pub(crate) row: &'r MySqlRow,
    pub(crate) table: &'r str,
}

impl Columns<'_> {
    pub(crate) fn get<'r, T: Decode<'r, MySql> + Type<MySql>>(
        &'r self,
        name: &str,
    ) -> Result<T, StoreError> {
        self.row
            .try_get(name)
            .map_err(|e| store_error(e, self.table))
    }

    /// A nullable column that a record in `state` must have.
    pub(crate) fn required<'r, T: Decode<'r, MySql> + Type<MySql>>(
        &'r self,
        state: &'static str,
        column: &'static str,
    ) -> Result<T, StoreError> {
        self.get::<Option<T>>(column)?
            .ok_or_else(|| StoreError::corrupted(Error::MissingColumn { state, column }))
    }

    pub(crate) fn millis(&self, name: &str) -> Result<Timestamp, StoreError> {
        self.get::<i64>(name).map(timestamp)
    }

    /// The record's token; tokens are drawn from 1 up.
    pub(crate) fn token(&self) -> Result<FencingToken, StoreError> {
        let token: i64 = self.get("token")?;
        Ok(FencingToken::new(u64::try_from(token).unwrap_or(0)))
    }

    pub(crate) fn outcome(&self) -> Result<Outcome, StoreError> {
        let bytes: &[u8] = self.required(COMPLETED, "response")?;
        Outcome::decode(bytes).map_err(StoreError::corrupted)
    }

    pub(crate) fn fingerprint(&self) -> Result<Fingerprint, StoreError> {
        let fingerprint: &[u8] = self.get("fingerprint")?;
        Fingerprint::try_from(fingerprint).map_err(StoreError::corrupted)
    }

    /// The columns of `sql/get.sql`.
    pub(crate) fn record(&self) -> Result<Record, StoreError> {
        let token = self.token()?;
        let state = match self.get::<&str>("state")? {
            PROCESSING => RecordState::Processing {
                token,
                lease_until: timestamp(self.required(PROCESSING, "lease_until")?),
            },
            COMPLETED => RecordState::Completed {
                token,
                outcome: self.outcome()?,
                completed_at: timestamp(self.required(COMPLETED, "completed_at")?),
            },
            other => return Err(StoreError::corrupted(Error::UnknownState(other.to_owned()))),
        };
        Ok(Record {
            fingerprint: self.fingerprint()?,
            created_at: self.millis("created_at")?,
            expires_at: self.millis("expires_at")?,
            state,
        })
    }

    /// The columns of `sql/list.sql`: a record as [`record`](Self::record) reads it, with its
    /// scope and key digest.
    pub(crate) fn listed(&self) -> Result<Listed, StoreError> {
        Ok(Listed {
            scope: Scope::from_bytes(self.digest("scope")?),
            key_sha256: self.digest("key_digest")?,
            record: self.record()?,
        })
    }

    /// The columns of `sql/census.sql`: one step's census, and the step's last record's id
    /// (`None` past the last record).
    pub(crate) fn census_step(&self) -> Result<(Census, Option<i64>), StoreError> {
        let census = Census {
            processing: self.count("processing")?,
            completed: self.count("completed")?,
            oldest_processing: self.time("oldest_processing")?,
        };
        let last: Option<i64> = self.get("last")?;
        Ok((census, last))
    }

    /// The columns of `sql/census_board.sql`: the board, and the store's time.
    pub(crate) fn census_board(&self) -> Result<(Board, Timestamp), StoreError> {
        let claimant: Option<i64> = self.get("claimant")?;
        let posted = match (self.time("posted_at")?, self.time("next_at")?) {
            (Some(at), Some(next)) => Some(Posted {
                census: Census {
                    processing: self.count("processing")?,
                    completed: self.count("completed")?,
                    oldest_processing: self.time("oldest_processing")?,
                },
                at,
                next,
            }),
            _ => None,
        };
        let board = Board {
            posted,
            claim: claimant
                .zip(self.time("claimed_until")?)
                .map(|(claimant, until)| (claimant.cast_unsigned(), until)),
        };
        Ok((board, timestamp(self.get("now")?)))
    }

    /// A count, NULL as 0.
    fn count(&self, name: &str) -> Result<u64, StoreError> {
        Ok(self
            .get::<Option<i64>>(name)?
            .map_or(0, |count| u64::try_from(count).unwrap_or(0)))
    }

    /// A time in milliseconds since the epoch, or NULL.
    fn time(&self, name: &str) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.get::<Option<i64>>(name)?.map(timestamp))
    }

    /// A 32-byte column: the scope, or the key's digest.
    pub(crate) fn digest(&self, name: &str) -> Result<[u8; 32], StoreError> {
        let bytes: &[u8] = self.get(name)?;
        <[u8; 32]>::try_from(bytes).map_err(StoreError::corrupted)
    }
}

/// Milliseconds since the epoch from the database; the store writes none before 1970.
pub(crate) fn timestamp(millis: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// A token as the `BIGINT` column holds it. Tokens the store issued fit; a larger one (forged by
/// a caller) matches no record either way.
pub(crate) fn sql_token(token: FencingToken) -> i64 {
    i64::try_from(token.get()).unwrap_or(-2)
}

/// A duration as the statements take it: whole milliseconds (the resolution the store keeps),
/// at most a thousand years so that the server's arithmetic cannot overflow.
pub(crate) fn millis(duration: Duration) -> i64 {
    const MAX: u128 = 1_000 * 366 * 24 * 3_600 * 1_000;
    i64::try_from(duration.as_millis().min(MAX)).expect("a thousand years of milliseconds fit")
}

/// A time as the statements take it: milliseconds since the epoch, at most a thousand years after
/// it (as [`millis`]).
pub(crate) fn sql_time(at: Timestamp) -> i64 {
    millis(Duration::from_millis(at.as_millis()))
}

/// The test clock's "now"; `None` makes the statements read the server's clock.
pub(crate) fn sql_now(now: Option<Timestamp>) -> Option<i64> {
    now.map(sql_time)
}
