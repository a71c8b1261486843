//! The reads behind [`Store::list`](idem_core::Store::list) and
//! [`Store::census`](idem_core::Store::census), on a reader connection.
//!
//! A listing walks `idem_records_state_created`, the index on `(state, created_at)` of
//! migration 3, reading one state's entries downwards from where its page starts; a census
//! reads the table in steps of [`CENSUS_STEP`] records in rowid order.

use idem_core::{Census, ListPage, ListQuery, Newest, StateFilter, StoreError, Timestamp};
use rusqlite::Connection;

use crate::{
    error::sqlite_error,
    row::{self, StateCode, sql_int, unsigned},
};

/// Sorts above every scope (32 bytes): a bound of `(t, ABOVE_EVERY_SCOPE, _)` takes in every
/// record acquired at or before `t`.
const ABOVE_EVERY_SCOPE: [u8; 33] = [0xFF; 33];

/// One page of `query` as the file stood at one moment, `now` by the store's clock.
pub(crate) fn list(
    reader: &Connection,
    query: &ListQuery,
    now: Timestamp,
) -> Result<ListPage, StoreError> {
    let bound = Bound::of(query, now)?;
    let both = [StateFilter::Processing, StateFilter::Completed];
    let states = query.state.as_ref().map_or(&both[..], std::slice::from_ref);
    let scope = query
        .scope
        .as_ref()
        .map(|scope| scope.as_bytes().as_slice());
    // One page more than asked from each state: whether a next page exists.
    let limit = i64::try_from(query.page_size() + 1).expect("a page is at most 1001 records");
    let mut newest = Newest::new(query)?;
    // One snapshot for both states: a record completed between two reads would be listed twice
    // (processing, then completed), or not at all.
    let snapshot = reader.unchecked_transaction().map_err(sqlite_error)?;
    {
        let mut statement = snapshot
            .prepare_cached(include_str!("../sql/list.sql"))
            .map_err(sqlite_error)?;
        for &state in states {
            let params = (
                sql_int(now.as_millis()),
                StateCode::from(state).code(),
                scope,
                bound.created_at,
                bound.scope.as_slice(),
                bound.key.as_slice(),
                limit,
            );
            let mut rows = statement.query(params).map_err(sqlite_error)?;
            while let Some(found) = rows.next().map_err(sqlite_error)? {
                newest.offer(row::listed(found)?);
            }
        }
    }
    snapshot.commit().map_err(sqlite_error)?;
    Ok(newest.finish())
}

/// How many records one step of a census reads: about 5 ms of a core.
pub(crate) const CENSUS_STEP: u32 = 5_000;

/// One step of a census: the live records by state among the [`CENSUS_STEP`] records after
/// rowid `after`, `now` by the store's clock, and the last rowid read (`None` past the last
/// record).
pub(crate) fn census_step(
    reader: &Connection,
    now: Timestamp,
    after: i64,
) -> Result<(Census, Option<i64>), StoreError> {
    let params = (
        sql_int(now.as_millis()),
        StateCode::Processing.code(),
        after,
        CENSUS_STEP,
    );
    row::query_one(reader, include_str!("../sql/census.sql"), params, |found| {
        let found = found.expect("an aggregate returns one row");
        let count = |index: usize| {
            found
                .get(index)
                .and_then(|count| unsigned(index, count))
                .map_err(sqlite_error)
        };
        let last: Option<i64> = found.get(0).map_err(sqlite_error)?;
        let oldest: Option<i64> = found.get(3).map_err(sqlite_error)?;
        let census = Census {
            processing: count(1)?,
            completed: count(2)?,
            oldest_processing: oldest
                .map(|millis| unsigned(3, millis).map(Timestamp::from_millis))
                .transpose()
                .map_err(sqlite_error)?,
        };
        Ok((census, last))
    })
}

/// Where a page ends, exclusive, in the newest-first order `(created_at, scope, key)`: the
/// cursor, or the age limit when that is lower. One bound, so that the index range starts there.
#[derive(Debug, PartialEq, Eq)]
struct Bound {
    created_at: i64,
    scope: Vec<u8>,
    key: [u8; 32],
}

impl Bound {
    fn of(query: &ListQuery, now: Timestamp) -> Result<Self, StoreError> {
        let aged = Bound {
            created_at: query
                .older_than
                .map_or(i64::MAX, |age| sql_int((now - age).as_millis())),
            scope: ABOVE_EVERY_SCOPE.to_vec(),
            key: [0; 32],
        };
        let cursor = query.resume_after()?.map(|(created_at, scope, key)| Bound {
            created_at: sql_int(created_at.as_millis()),
            scope: scope.as_bytes().to_vec(),
            key,
        });
        Ok(match cursor {
            Some(cursor) if cursor.created_at <= aged.created_at => cursor,
            _ => aged,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idem_core::{ListCursor, Scope};

    use super::*;

    #[test]
    fn a_page_ends_at_the_cursor_or_the_age_limit_whichever_is_lower() {
        let now = Timestamp::from_millis(10_000);
        let cursor = |millis| ListCursor::After {
            created_at: Timestamp::from_millis(millis),
            scope: Scope::ANONYMOUS,
            key_sha256: [7; 32],
        };
        let at_cursor = |millis| Bound {
            created_at: millis,
            scope: Scope::ANONYMOUS.as_bytes().to_vec(),
            key: [7; 32],
        };
        let up_to = |millis| Bound {
            created_at: millis,
            scope: ABOVE_EVERY_SCOPE.to_vec(),
            key: [0; 32],
        };
        let query = ListQuery::new(10);
        let aged = query.clone().older_than(Duration::from_secs(4));
        let bound = |query: ListQuery| Bound::of(&query, now).unwrap();
        assert_eq!(bound(query.clone()), up_to(i64::MAX));
        assert_eq!(bound(query.clone().after(cursor(9_000))), at_cursor(9_000));
        assert_eq!(bound(aged.clone()), up_to(6_000));
        assert_eq!(bound(aged.clone().after(cursor(5_000))), at_cursor(5_000));
        assert_eq!(bound(aged.clone().after(cursor(6_000))), at_cursor(6_000));
        assert_eq!(bound(aged.after(cursor(6_001))), up_to(6_000));
        let scan = ListCursor::Scan {
            shard: 0,
            cursor: 1,
            after: 0,
        };
        assert!(matches!(
            Bound::of(&query.after(scan), now),
            Err(StoreError::InvalidCursor)
        ));
    }
}
