//! The storage edge: how the rows the statements return map to records and outcomes.

use std::time::Duration;

use bytes::Bytes;
use idem_core::{
    Acquisition, Census, FencingToken, Fingerprint, Lease, Listed, Outcome, Posted, Record,
    RecordState, Scope, StateFilter, StoreError, Timestamp, census::Board,
};
use sqlx::{Decode, Postgres, Row, Type, postgres::PgRow};

use crate::{Error, error::store_error};

/// The `state` column.
const PROCESSING: &str = "processing";
const COMPLETED: &str = "completed";

/// The `state` column of records in `state`.
pub(crate) fn state_column(state: StateFilter) -> &'static str {
    match state {
        StateFilter::Processing => PROCESSING,
        StateFilter::Completed => COMPLETED,
    }
}

/// What `sql/acquire.sql` decided.
#[derive(Debug)]
pub(crate) enum AcquireRow {
    /// The statement's answer.
    Decided(Acquisition),
    /// It meant to write but a concurrent writer changed the record first: run it again.
    Raced,
}

/// A row read from the store, with the table's name for error messages.
pub(crate) struct Columns<'r> {
    pub(crate) row: &'r PgRow,
    pub(crate) table: &'r str,
}

impl Columns<'_> {
    fn get<'r, T: Decode<'r, Postgres> + Type<Postgres>>(
        &'r self,
        name: &str,
    ) -> Result<T, StoreError> {
        self.row
            .try_get(name)
            .map_err(|e| store_error(e, self.table))
    }

    /// A nullable column that a record in `state` must have.
    fn required<'r, T: Decode<'r, Postgres> + Type<Postgres>>(
        &'r self,
        state: &'static str,
        column: &'static str,
    ) -> Result<T, StoreError> {
        self.get::<Option<T>>(column)?
            .ok_or_else(|| StoreError::corrupted(Error::MissingColumn { state, column }))
    }

    fn millis(&self, name: &str) -> Result<Timestamp, StoreError> {
        self.get::<i64>(name).map(timestamp)
    }

    /// Tokens come from a sequence that starts at 1.
    fn token(&self) -> Result<FencingToken, StoreError> {
        let token: i64 = self.get("token")?;
        Ok(FencingToken::new(u64::try_from(token).unwrap_or(0)))
    }

    fn outcome(&self) -> Result<Outcome, StoreError> {
        let bytes: &[u8] = self.required(COMPLETED, "response")?;
        Outcome::decode(bytes).map_err(StoreError::corrupted)
    }

    /// The columns of `sql/acquire.sql`.
    pub(crate) fn acquisition(&self) -> Result<AcquireRow, StoreError> {
        if self.get::<bool>("raced")? {
            return Ok(AcquireRow::Raced);
        }
        let acquired = |took_over| -> Result<Acquisition, StoreError> {
            Ok(Acquisition::Acquired(Lease {
                token: self.token()?,
                until: self.millis("lease_until")?,
                took_over,
            }))
        };
        let acquisition = match self.get::<&str>("plan")? {
            "create" => acquired(false)?,
            "take_over" => acquired(true)?,
            "replay" => Acquisition::Completed(self.outcome()?),
            "mismatch" => Acquisition::Mismatch,
            "in_flight" => {
                // Computed from the lease's end, which a processing record always has.
                let millis: i64 = self.get::<Option<i64>>("retry_after")?.ok_or_else(|| {
                    StoreError::corrupted(Error::MissingColumn {
                        state: PROCESSING,
                        column: "lease_until",
                    })
                })?;
                let retry_after = Duration::from_millis(u64::try_from(millis).unwrap_or(0));
                Acquisition::InFlight { retry_after }
            }
            other => unreachable!("acquire.sql has no plan {other:?}"),
        };
        Ok(AcquireRow::Decided(acquisition))
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
        let fingerprint: &[u8] = self.get("fingerprint")?;
        Ok(Record {
            fingerprint: Fingerprint::try_from(fingerprint).map_err(StoreError::corrupted)?,
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
            key_sha256: self.digest("key")?,
            record: self.record()?,
        })
    }

    /// The columns of `sql/census.sql`: one step's census, and the step's last record (`None`
    /// past the last record).
    pub(crate) fn census_step(&self) -> Result<(Census, Option<PrimaryKey>), StoreError> {
        let census = Census {
            processing: self.count("processing")?,
            completed: self.count("completed")?,
            oldest_processing: self.time("oldest_processing")?,
        };
        let last_scope: Option<Vec<u8>> = self.get("last_scope")?;
        let last_key: Option<Vec<u8>> = self.get("last_key")?;
        Ok((census, last_scope.zip(last_key)))
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

    /// The columns of `sql/append_part.sql`: whether the token holds a live processing record,
    /// the execution's next index, and whether the part was stored.
    pub(crate) fn appended(&self) -> Result<(bool, u64, bool), StoreError> {
        let next: i64 = self.get("next")?;
        Ok((
            self.get("live")?,
            u64::try_from(next).unwrap_or(0),
            self.get("appended")?,
        ))
    }

    /// The `part` column of `sql/read_parts.sql`.
    pub(crate) fn part(&self) -> Result<Bytes, StoreError> {
        self.get::<Vec<u8>>("part").map(Bytes::from)
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
    fn digest(&self, name: &str) -> Result<[u8; 32], StoreError> {
        let bytes: &[u8] = self.get(name)?;
        <[u8; 32]>::try_from(bytes).map_err(StoreError::corrupted)
    }
}

/// A record's primary key: its scope and key digest.
pub(crate) type PrimaryKey = (Vec<u8>, Vec<u8>);

/// Milliseconds since the epoch from the database; the store writes none before 1970.
fn timestamp(millis: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// A token as the `bigint` column holds it. Tokens the store issued fit; a larger one (forged by
/// a caller) matches no record either way.
pub(crate) fn sql_token(token: FencingToken) -> i64 {
    i64::try_from(token.get()).unwrap_or(-1)
}

/// A duration as the statements take it: whole milliseconds (the resolution the store keeps),
/// at most a thousand years so that the server's date arithmetic cannot overflow.
pub(crate) fn sql_millis(duration: Duration) -> i64 {
    const MAX: u128 = 1_000 * 366 * 24 * 3_600 * 1_000;
    i64::try_from(duration.as_millis().min(MAX)).expect("a thousand years of milliseconds fit")
}

/// A time as the statements take it: milliseconds since the epoch, at most a thousand years after
/// it (as [`sql_millis`]), so that the server's date arithmetic cannot overflow.
pub(crate) fn sql_time(at: Timestamp) -> i64 {
    sql_millis(Duration::from_millis(at.as_millis()))
}

/// The test clock's "now" as `$1` takes it; `None` makes the statement read the server's clock.
pub(crate) fn sql_now(now: Option<Timestamp>) -> Option<i64> {
    now.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
}
