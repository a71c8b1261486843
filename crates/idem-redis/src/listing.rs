//! The operators' listing and census: a [`Walk`] over the prefix's record keys, each `SCAN`
//! step's records read by one call of a read-only script on the server that holds them.

use std::time::{Duration, Instant};

use idem_core::{
    Census, CensusClaim, ListCursor, ListPage, ListQuery, Listed, Pace, Posted, StoreError,
};
use redis::Cmd;

use crate::{
    connection::Connection,
    error::store_error,
    reply,
    scripts::{self, millis},
    walk::{Step, Walk},
};

/// The most `SCAN` steps one page takes (each asks for about 1,000 keys), so that a page's cost
/// is bounded however few records pass the filters: a page may end short, or empty, with the
/// cursor of the rest.
const PAGE_STEPS: usize = 10;

/// One page of `query`, walking the keys that match `pattern`, at the time `now` (a manual
/// clock's, or empty for each server's own).
///
/// A page takes the admitted records of `SCAN` steps, each step's in key order, until it is full
/// or has taken [`PAGE_STEPS`] steps. A step that does not fit whole is left to the next page,
/// unless the page is empty: then the page takes what fits, and its cursor says where in the
/// step, in key order, it stopped: the first 64 bits of the last record's key digest, so that
/// the next page resumes after that key even if the step's keys have changed meanwhile.
pub(crate) async fn list(
    connection: &Connection,
    pattern: &str,
    now: &str,
    query: &ListQuery,
) -> Result<ListPage, StoreError> {
    let (from, mut taken) = match query.cursor {
        None => ((0, 0), 0),
        Some(ListCursor::Scan {
            shard,
            cursor,
            after,
        }) => ((shard, cursor), after),
        Some(_) => return Err(StoreError::InvalidCursor),
    };
    let mut walk = Walk::new(connection, pattern, from)
        .await
        .map_err(store_error)?;
    if query.cursor.is_some() && walk.position().is_none() {
        return Err(StoreError::InvalidCursor);
    }
    let limit = query.page_size();
    let mut records = Vec::with_capacity(limit);
    for _ in 0..PAGE_STEPS {
        let Some(step) = walk.step().await.map_err(store_error)? else {
            break;
        };
        // The cursor's position is within its own step only.
        let after = std::mem::take(&mut taken);
        if step.keys.is_empty() {
            continue;
        }
        let room = limit - records.len();
        let whole = !records.is_empty();
        let command = list_command(now, query, &step, after, room, whole);
        let found = connection
            .run_script(&scripts::LIST, &command, Some(&step.shard))
            .await
            .map_err(store_error)?;
        let found = reply::found(&found)?;
        let fits = found.admitted <= room as u64;
        if !fits && whole {
            return Ok(page(records, Some(at(step.at, 0))));
        }
        let now = found.now;
        records.extend(
            found
                .records
                .into_iter()
                .filter(|listed| query.admits(listed, now)),
        );
        if !fits {
            return Ok(page(records, Some(at(step.at, found.last))));
        }
        if records.len() == limit {
            break;
        }
    }
    let next = walk.position().map(|position| at(position, 0));
    Ok(page(records, next))
}

/// Counts the live records whose keys match `pattern`, at the time `now` (a manual clock's, or
/// empty for each server's own): one `SCAN` step and one script call per 1,000 keys or so, then
/// a rest at `pace`.
pub(crate) async fn census(
    connection: &Connection,
    pattern: &str,
    now: &str,
    pace: Pace,
) -> Result<Census, StoreError> {
    let mut walk = Walk::new(connection, pattern, (0, 0))
        .await
        .map_err(store_error)?;
    let mut census = Census::default();
    loop {
        let started = Instant::now();
        let Some(step) = walk.step().await.map_err(store_error)? else {
            return Ok(census);
        };
        if !step.keys.is_empty() {
            let mut command = redis::cmd("EVALSHA");
            command
                .arg(scripts::CENSUS.get_hash())
                .arg(0)
                .arg(now)
                .arg(&step.keys);
            let counted = connection
                .run_script(&scripts::CENSUS, &command, Some(&step.shard))
                .await
                .map_err(store_error)?;
            census.merge(reply::census(&counted)?);
        }
        pace.rest(started.elapsed()).await;
    }
}

/// Claims the next census for `claim`, or posts `census` for `claimant` (see
/// `lua/census_board.lua`), on the board `key`, at the time `now`.
pub(crate) async fn census_board(
    connection: &Connection,
    key: &str,
    now: &str,
    write: BoardWrite<'_>,
) -> Result<(bool, Duration, Option<Posted>), StoreError> {
    let mut command = redis::cmd("EVALSHA");
    command
        .arg(scripts::CENSUS_BOARD.get_hash())
        .arg(1)
        .arg(key)
        .arg(now);
    match write {
        BoardWrite::Claim(claim) => command
            .arg("claim")
            .arg(claim.claimant.to_string())
            .arg(millis(claim.hold)),
        BoardWrite::Post {
            claimant,
            census,
            rest,
        } => command
            .arg("post")
            .arg(claimant.to_string())
            .arg(millis(rest))
            .arg(census.processing)
            .arg(census.completed)
            .arg(
                census
                    .oldest_processing
                    .map_or_else(String::new, |oldest| oldest.as_millis().to_string()),
            ),
    };
    let reply = connection
        .run_script(&scripts::CENSUS_BOARD, &command, None)
        .await
        .map_err(store_error)?;
    reply::census_board(&reply)
}

/// A claim on the next census, or a census to post.
pub(crate) enum BoardWrite<'a> {
    Claim(CensusClaim),
    Post {
        claimant: u64,
        census: &'a Census,
        rest: Duration,
    },
}

/// The call of `lua/list.lua` on `step`'s keys.
fn list_command(
    now: &str,
    query: &ListQuery,
    step: &Step,
    after: u64,
    room: usize,
    whole: bool,
) -> Cmd {
    let mut command = redis::cmd("EVALSHA");
    command
        .arg(scripts::LIST.get_hash())
        .arg(0)
        .arg(now)
        .arg(query.state.map_or(&[][..], reply::state_code))
        .arg(
            query
                .scope
                .as_ref()
                .map_or(&[][..], |scope| scope.as_bytes()),
        )
        .arg(
            query
                .older_than
                .map_or_else(String::new, |age| millis(age).to_string()),
        )
        .arg(if after == 0 {
            String::new()
        } else {
            format!("{after:016x}")
        })
        .arg(room)
        .arg(if whole { "1" } else { "" })
        .arg(&step.keys);
    command
}

fn at((shard, cursor): (u64, u64), after: u64) -> ListCursor {
    ListCursor::Scan {
        shard,
        cursor,
        after,
    }
}

/// The page of `records`, newest first, each record once (a full walk may find a key twice).
fn page(mut records: Vec<Listed>, next: Option<ListCursor>) -> ListPage {
    records.sort_by(Listed::newest_first);
    records.dedup_by_key(|listed| listed.sort_key());
    ListPage { records, next }
}
