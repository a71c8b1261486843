//! Listing and counting records, for operators: which keys are stuck `processing`, how many
//! records a store holds.
//!
//! Stores keep neither the key in clear nor anything derived from the process's log digest, so a
//! listed record is identified by its scope and the SHA-256 of its key
//! ([`IdempotencyKey::sha256`](crate::IdempotencyKey::sha256)).

use std::{cmp::Reverse, collections::BinaryHeap, fmt, str::FromStr, time::Duration};

use crate::{Record, RecordState, Scope, StoreError, Timestamp};

/// Which records [`Store::list`](crate::Store::list) returns, and from where.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_core::{ListQuery, StateFilter};
///
/// let stuck = ListQuery::new(20)
///     .state(StateFilter::Processing)
///     .older_than(Duration::from_secs(300));
/// assert_eq!(stuck.limit, 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only records in this state; both when `None`.
    pub state: Option<StateFilter>,
    /// Only records acquired at least this long ago, by the store's clock.
    pub older_than: Option<Duration>,
    /// Only records of this scope.
    pub scope: Option<Scope>,
    /// At most this many records, from 1 to [`ListQuery::MAX_LIMIT`] (clamped to that range).
    pub limit: usize,
    /// Where the previous page stopped; the first page when `None`.
    pub cursor: Option<ListCursor>,
}

impl ListQuery {
    /// The most records one page holds.
    pub const MAX_LIMIT: usize = 1000;

    /// Every live record, `limit` at a time, from the first page.
    pub fn new(limit: usize) -> Self {
        Self {
            state: None,
            older_than: None,
            scope: None,
            limit: limit.clamp(1, Self::MAX_LIMIT),
            cursor: None,
        }
    }

    /// Only records in `state`.
    pub fn state(mut self, state: StateFilter) -> Self {
        self.state = Some(state);
        self
    }

    /// Only records acquired at least `age` ago.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only records of `scope`.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// The page after `cursor`.
    pub fn after(mut self, cursor: ListCursor) -> Self {
        self.cursor = Some(cursor);
        self
    }

    /// The page size, clamped to `1..=MAX_LIMIT` (the field is public: a store reads this).
    pub fn page_size(&self) -> usize {
        self.limit.clamp(1, Self::MAX_LIMIT)
    }

    /// Where an ordered listing resumes: after this acquisition time, scope and key digest, from
    /// the query's [`ListCursor::After`]. A cursor of another kind was not issued by an ordered
    /// store: [`StoreError::InvalidCursor`].
    pub fn resume_after(&self) -> Result<Option<(Timestamp, Scope, [u8; 32])>, StoreError> {
        match self.cursor {
            None => Ok(None),
            Some(ListCursor::After {
                created_at,
                scope,
                key_sha256,
            }) => Ok(Some((created_at, scope, key_sha256))),
            Some(ListCursor::Scan { .. }) => Err(StoreError::InvalidCursor),
        }
    }

    /// Whether `listed`, found at `now` by the store's clock, passes the state, age and scope
    /// filters (not the cursor). Stores that filter in their own query language use it to check
    /// what they cannot express there.
    pub fn admits(&self, listed: &Listed, now: Timestamp) -> bool {
        let state = match (&self.state, &listed.record.state) {
            (None, _)
            | (Some(StateFilter::Processing), RecordState::Processing { .. })
            | (Some(StateFilter::Completed), RecordState::Completed { .. }) => true,
            (Some(_), _) => false,
        };
        let old_enough = self
            .older_than
            .is_none_or(|age| listed.record.created_at <= now - age);
        let scope = self.scope.is_none_or(|scope| scope == listed.scope);
        state && old_enough && scope && now < listed.record.expires_at
    }
}

/// The state a listing is restricted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateFilter {
    /// Records a worker holds (or held until its lease ran out).
    Processing,
    /// Records with a stored outcome.
    Completed,
}

impl StateFilter {
    /// `"processing"` or `"completed"`, as [`RecordState::name`] spells them.
    pub fn name(self) -> &'static str {
        match self {
            StateFilter::Processing => "processing",
            StateFilter::Completed => "completed",
        }
    }
}

/// Text that is neither `processing` nor `completed`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a state is `processing` or `completed`")]
pub struct InvalidStateFilter;

impl FromStr for StateFilter {
    type Err = InvalidStateFilter;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "processing" => Ok(StateFilter::Processing),
            "completed" => Ok(StateFilter::Completed),
            _ => Err(InvalidStateFilter),
        }
    }
}

/// A record found by a listing, with what identifies it in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Whose key it is.
    pub scope: Scope,
    /// SHA-256 of the key's text: stores do not keep the key itself.
    pub key_sha256: [u8; 32],
    /// The record.
    pub record: Record,
}

impl Listed {
    /// Where this record sits in the newest-first order: the cursor of a page that ends with it.
    pub fn position(&self) -> ListCursor {
        ListCursor::After {
            created_at: self.record.created_at,
            scope: self.scope,
            key_sha256: self.key_sha256,
        }
    }

    /// The newest-first order of ordered listings: by acquisition time, newest first, then by
    /// scope and key digest, descending, so that records acquired in the same millisecond keep
    /// one order across pages.
    pub fn newest_first(a: &Listed, b: &Listed) -> std::cmp::Ordering {
        b.sort_key().cmp(&a.sort_key())
    }

    /// What the newest-first order sorts on, descending: acquisition time, scope, key digest.
    pub fn sort_key(&self) -> (Timestamp, Scope, [u8; 32]) {
        (self.record.created_at, self.scope, self.key_sha256)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPage {
    /// The records, newest first (on a store that lists in pages of its own order, such as
    /// Redis, newest first within the page; see that store's documentation).
    pub records: Vec<Listed>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<ListCursor>,
}

impl ListPage {
    /// The page of `limit` records from up to `limit + 1` in newest-first order: the first
    /// `limit`, and the cursor after the last of them when there was one more.
    pub fn from_newest(mut records: Vec<Listed>, limit: usize) -> Self {
        let next = if records.len() > limit {
            records.truncate(limit);
            records.last().map(Listed::position)
        } else {
            None
        };
        Self { records, next }
    }
}

/// Collects the newest records after a cursor from a source in no particular order (a hash
/// table, or several ordered queries merged): keeps `limit + 1` of them, so that
/// [`finish`](Newest::finish) knows whether another page follows.
#[derive(Debug)]
pub struct Newest {
    limit: usize,
    after: Option<(Timestamp, Scope, [u8; 32])>,
    /// A min-heap on the newest-first order's reverse: its top is the oldest kept.
    kept: BinaryHeap<Reverse<ByAge>>,
}

/// A listed record ordered by age: older is less.
#[derive(Debug, PartialEq, Eq)]
struct ByAge(Listed);

impl Ord for ByAge {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        Listed::newest_first(&other.0, &self.0)
    }
}

impl PartialOrd for ByAge {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Newest {
    /// Collects the page of `query` (its size and cursor; filtering is the caller's). A cursor
    /// of an unordered store is [`StoreError::InvalidCursor`].
    pub fn new(query: &ListQuery) -> Result<Self, StoreError> {
        let limit = query.page_size();
        Ok(Self {
            limit,
            after: query.resume_after()?,
            kept: BinaryHeap::with_capacity(limit + 2),
        })
    }

    /// Whether a record acquired at `created_at` could still be kept: lets a caller skip
    /// building records that are too old for the page.
    pub fn wants(&self, created_at: Timestamp) -> bool {
        self.kept.len() <= self.limit
            || self
                .kept
                .peek()
                .is_some_and(|Reverse(ByAge(oldest))| created_at >= oldest.record.created_at)
    }

    /// Offers a record that passed the query's filters.
    pub fn offer(&mut self, listed: Listed) {
        if self.after.is_some_and(|after| listed.sort_key() >= after) {
            return;
        }
        self.kept.push(Reverse(ByAge(listed)));
        if self.kept.len() > self.limit + 1 {
            self.kept.pop();
        }
    }

    /// The page.
    pub fn finish(self) -> ListPage {
        // Ascending `Reverse<ByAge>` is newest first.
        let records = self
            .kept
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(ByAge(listed))| listed)
            .collect();
        ListPage::from_newest(records, self.limit)
    }
}

/// Where a listing continues: opaque to callers, who pass back what a page returned. Its text
/// form (`Display`, `FromStr`) goes into URLs.
///
/// # Examples
///
/// ```
/// use idem_core::{ListCursor, Scope, Timestamp};
///
/// let cursor = ListCursor::After {
///     created_at: Timestamp::from_millis(1_767_225_600_000),
///     scope: Scope::ANONYMOUS,
///     key_sha256: [7; 32],
/// };
/// assert_eq!(cursor.to_string().parse::<ListCursor>()?, cursor);
/// assert!("not a cursor".parse::<ListCursor>().is_err());
/// # Ok::<(), idem_core::InvalidCursor>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListCursor {
    /// After this record, in the newest-first order of [`Listed::newest_first`] (stores with an
    /// index on time: memory, SQLite, PostgreSQL).
    After {
        /// The last listed record's acquisition time.
        created_at: Timestamp,
        /// Its scope.
        scope: Scope,
        /// Its key's SHA-256.
        key_sha256: [u8; 32],
    },
    /// A position in a store's own iteration (Redis' `SCAN` cursor on one of its shards), and
    /// where in the records found from there the last page stopped.
    Scan {
        /// Which of the store's shards (a Redis Cluster's masters, in a stable order; 0 on a
        /// single server).
        shard: u64,
        /// The store's cursor on that shard.
        cursor: u64,
        /// The store's order within that step: the records at or before this position were listed
        /// (Redis: the first 64 bits of the last listed record's name); 0 when none was.
        after: u64,
    },
}

/// Text that is not a cursor a listing returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a listing cursor: pass back the `next` cursor of a page")]
pub struct InvalidCursor;

const AFTER: u8 = b'a';
const SCAN: u8 = b's';

impl fmt::Display for ListCursor {
    /// One letter for the kind, then the fields in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |f: &mut fmt::Formatter<'_>, bytes: &[u8]| {
            bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
        };
        match self {
            ListCursor::After {
                created_at,
                scope,
                key_sha256,
            } => {
                write!(f, "{}", AFTER as char)?;
                hex(f, &created_at.as_millis().to_be_bytes())?;
                hex(f, scope.as_bytes())?;
                hex(f, key_sha256)
            }
            ListCursor::Scan {
                shard,
                cursor,
                after,
            } => {
                write!(f, "{}", SCAN as char)?;
                hex(f, &shard.to_be_bytes())?;
                hex(f, &cursor.to_be_bytes())?;
                hex(f, &after.to_be_bytes())
            }
        }
    }
}

impl FromStr for ListCursor {
    type Err = InvalidCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, rest) = s.split_at_checked(1).ok_or(InvalidCursor)?;
        let bytes = decode_hex(rest).ok_or(InvalidCursor)?;
        let u64_at = |at: usize| -> u64 {
            u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        let array_at = |at: usize| -> [u8; 32] { bytes[at..at + 32].try_into().expect("32 bytes") };
        match (kind.as_bytes()[0], bytes.len()) {
            (AFTER, 72) => Ok(ListCursor::After {
                created_at: Timestamp::from_millis(u64_at(0)),
                scope: Scope::from_bytes(array_at(8)),
                key_sha256: array_at(40),
            }),
            (SCAN, 24) => Ok(ListCursor::Scan {
                shard: u64_at(0),
                cursor: u64_at(8),
                after: u64_at(16),
            }),
            _ => Err(InvalidCursor),
        }
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

/// How many live records a store holds, by state, and its oldest `processing` one: what
/// [`Store::census`](crate::Store::census) returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Census {
    /// Records being processed (including those whose lease ran out and nobody took over yet).
    pub processing: u64,
    /// Completed records.
    pub completed: u64,
    /// When the oldest processing record was acquired.
    pub oldest_processing: Option<Timestamp>,
}

impl Census {
    /// Counts in `other`'s records: a census taken in steps adds each step's.
    pub fn merge(&mut self, other: Census) {
        self.processing += other.processing;
        self.completed += other.completed;
        self.oldest_processing = match (self.oldest_processing, other.oldest_processing) {
            (Some(one), Some(other)) => Some(one.min(other)),
            (one, other) => one.or(other),
        };
    }

    /// Counts `record` in.
    pub fn add(&mut self, record: &Record) {
        match record.state {
            RecordState::Processing { .. } => {
                self.processing += 1;
                self.oldest_processing = Some(match self.oldest_processing {
                    Some(oldest) => oldest.min(record.created_at),
                    None => record.created_at,
                });
            }
            RecordState::Completed { .. } => self.completed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_bad_text_is_refused() {
        let scan = ListCursor::Scan {
            shard: 1,
            cursor: u64::MAX,
            after: 3,
        };
        assert_eq!(
            scan.to_string(),
            format!(
                "s{}{}{}",
                "0000000000000001",
                "ff".repeat(8),
                "0000000000000003"
            )
        );
        assert_eq!(scan.to_string().parse::<ListCursor>(), Ok(scan));
        for bad in [
            "",
            "s",
            "x00",
            "s00",
            "sgg",
            "é",
            &format!("a{}", "00".repeat(16)),
        ] {
            assert_eq!(bad.parse::<ListCursor>(), Err(InvalidCursor), "{bad:?}");
        }
    }

    #[test]
    fn state_filters_parse_their_names() {
        for state in [StateFilter::Processing, StateFilter::Completed] {
            assert_eq!(state.name().parse::<StateFilter>(), Ok(state));
        }
        assert_eq!("Processing".parse::<StateFilter>(), Err(InvalidStateFilter));
    }

    #[test]
    fn the_limit_is_clamped() {
        assert_eq!(ListQuery::new(0).limit, 1);
        assert_eq!(ListQuery::new(5000).limit, ListQuery::MAX_LIMIT);
    }
}
