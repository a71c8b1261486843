//! [`MemoryStore`]: the reference store, in process memory.

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use hashbrown::{HashTable, hash_table::OccupiedEntry};

use crate::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, Clock, FencingToken, Fingerprint, Lease,
    ListPage, ListQuery, Listed, Newest, Outcome, Pace, Record, RecordState, Scope, StateFilter,
    Store, StoreError, SystemClock, Terms, Timestamp,
    census::Board,
    transition::{AcquirePlan, RecordView, plan_acquire, processing_expiry},
};

/// The reference store: records in a sharded hash table, each operation one short critical
/// section on one shard. Nothing survives the process; use it for tests, for a single instance
/// that can afford to forget its keys on restart, and as the model the other stores are checked
/// against.
///
/// Expired records are removed by [`Store::purge_expired`]; a processing record is never removed
/// before its lease ends.
///
/// # Limits
///
/// The store holds at most [`max_keys`](MemoryStore::max_keys) records (default 1,000,000) and
/// about [`max_bytes`](MemoryStore::max_bytes) bytes (default 1 GiB). A record counts its
/// encoded response (status, headers and body), its key's length, and a fixed
/// [`RECORD_OVERHEAD`](MemoryStore::RECORD_OVERHEAD) for its address, fingerprint, times and
/// the table's slot; records count until they are removed, expired ones included. The parts of
/// streamed responses ([`Store::append_part`]) count their bytes too, until they are discarded,
/// forgotten or purged.
///
/// The limits are checked when a **new** key would add a record: if the store is at either
/// limit, its expired records are removed first (they are dead anyway; the sweep runs only when
/// a record may have expired since the last one, and one at a time), and if that is not enough
/// the key is refused with [`StoreError::Full`]. A live record (processing,
/// or completed and not expired) is never evicted to make room. Keys the store already holds are
/// still taken over, renewed, completed and released when it is full: a completion is never
/// refused, since the operation it records has run. So `max_bytes` can be exceeded by the
/// responses of the keys in flight when it was reached (each at most the response size the
/// caller stores, 1 MiB by default over HTTP); `max_keys` is never exceeded.
///
/// [`max_keys_per_scope`](MemoryStore::max_keys_per_scope) (none by default) bounds each
/// scope's records too, so that one caller (random keys with junk credentials, say) cannot take
/// the whole store from the others: a new key of a scope at its limit is refused with
/// [`StoreError::Full`], whatever room the store has.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use idem_core::{
///     Acquisition, Address, Fingerprint, MemoryStore, Outcome, Policy, Store, StoredResponse,
/// };
///
/// let store = MemoryStore::new();
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([7; 32]);
/// let terms = (&Policy::default()).into();
///
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// let response = Outcome::from(StoredResponse::new(201).body("charged"));
/// store.complete(&address, lease.token, &response, terms.ttl).await?;
///
/// let replay = store.acquire(&address, &fingerprint, terms).await?;
/// assert_eq!(replay, Acquisition::Completed(response));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct MemoryStore {
    shards: Box<[Mutex<HashTable<Entry>>]>,
    hasher: RandomState,
    last_token: AtomicU64,
    clock: Arc<dyn Clock>,
    max_keys: usize,
    max_bytes: u64,
    /// Records held, and their weight (see [`Entry::weight`]); changed under the lock of the
    /// shard that changed, so exact whenever no call is running.
    keys: AtomicUsize,
    bytes: AtomicU64,
    /// No record expires before this (milliseconds): a store full of live records is not swept
    /// for every new key. Lowered by every write of an expiry, recomputed by each sweep.
    earliest_expiry: AtomicU64,
    /// A sweep for room is running: the others refuse rather than sweep the same tables.
    sweeping: AtomicBool,
    /// Each scope's records, when a scope's share is bounded.
    per_scope: Option<ScopeCounts>,
    /// The census board, for the tasks of this process that count.
    census_board: Mutex<Board>,
    /// The parts of streamed responses, by address and execution (see [`Store::append_part`]).
    /// Few at a time (those of the streams in progress and not yet discarded), so one lock.
    parts: Mutex<HashMap<(Address, FencingToken), Parts>>,
}

/// The parts one execution appended, which expire together, when the last one appended does.
struct Parts {
    list: Vec<Bytes>,
    expires_at: Timestamp,
}

/// The most parts one [`Store::read_parts`] returns.
const MAX_PARTS_READ: usize = 256;

/// The records of each scope that holds any, and the most a scope may hold. Counted under one
/// lock, taken only when a record is added or removed (not on replays), and only when the bound
/// is set.
struct ScopeCounts {
    max: usize,
    counts: Mutex<HashMap<Scope, usize>>,
}

impl ScopeCounts {
    /// Counts a record of `scope` unless the scope is at its limit; then, which limit.
    fn admit(&self, scope: &Scope) -> Result<(), String> {
        let mut counts = lock(&self.counts);
        let count = counts.entry(*scope).or_default();
        if *count >= self.max {
            if *count == 0 {
                counts.remove(scope);
            }
            return Err(format!("max_keys_per_scope = {}", self.max));
        }
        *count += 1;
        Ok(())
    }

    /// Counts a record of `scope` removed.
    fn remove(&self, scope: &Scope) {
        let mut counts = lock(&self.counts);
        if let Some(count) = counts.get_mut(scope) {
            *count -= 1;
            if *count == 0 {
                counts.remove(scope);
            }
        }
    }
}

/// A record as a shard keeps it: with its address, and the address's hash so that growing the
/// table does not hash every address again. A completed outcome is kept encoded, in one
/// allocation (a [`StoredResponse`](crate::StoredResponse) takes one per header name and value): the store holds every
/// key for its whole TTL.
struct Entry {
    hash: u64,
    address: Address,
    fingerprint: Fingerprint,
    created_at: Timestamp,
    expires_at: Timestamp,
    state: Held,
}

enum Held {
    Processing {
        token: FencingToken,
        lease_until: Timestamp,
    },
    Completed {
        token: FencingToken,
        outcome: Box<[u8]>,
        completed_at: Timestamp,
    },
}

impl Entry {
    /// What the record counts against [`MemoryStore::max_bytes`].
    fn weight(&self) -> u64 {
        let outcome = match &self.state {
            Held::Processing { .. } => 0,
            Held::Completed { outcome, .. } => outcome.len(),
        };
        MemoryStore::RECORD_OVERHEAD + (self.address.key.as_str().len() + outcome) as u64
    }

    fn view(&self) -> RecordView<'_> {
        RecordView {
            fingerprint: &self.fingerprint,
            expires_at: self.expires_at,
            lease_until: match self.state {
                Held::Processing { lease_until, .. } => Some(lease_until),
                Held::Completed { .. } => None,
            },
        }
    }

    fn is_held_by(&self, token: FencingToken, now: Timestamp) -> bool {
        matches!(self.state, Held::Processing { token: held, .. } if held == token)
            && now < self.expires_at
    }

    fn record(&self) -> Result<Record, StoreError> {
        let state = match &self.state {
            Held::Processing { token, lease_until } => RecordState::Processing {
                token: *token,
                lease_until: *lease_until,
            },
            Held::Completed {
                token,
                outcome,
                completed_at,
            } => RecordState::Completed {
                token: *token,
                outcome: decode(outcome)?,
                completed_at: *completed_at,
            },
        };
        Ok(Record {
            fingerprint: self.fingerprint,
            created_at: self.created_at,
            expires_at: self.expires_at,
            state,
        })
    }
}

fn decode(outcome: &[u8]) -> Result<Outcome, StoreError> {
    Outcome::decode(outcome).map_err(StoreError::corrupted)
}

impl MemoryStore {
    /// What each record counts against [`max_bytes`](MemoryStore::max_bytes) besides its key and
    /// its encoded response: its address, fingerprint, times, token and table slot, rounded up.
    pub const RECORD_OVERHEAD: u64 = 256;
    /// Default of [`max_keys`](MemoryStore::max_keys).
    pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
    /// Default of [`max_bytes`](MemoryStore::max_bytes): 1 GiB.
    pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

    /// A store on the system clock, with one shard per four hardware threads (at least 16).
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }

    /// Sets the most records the store holds; a new key beyond it is refused with
    /// [`StoreError::Full`] (see [Limits](MemoryStore#limits)).
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Sets the bytes beyond which a new key is refused with [`StoreError::Full`] (see
    /// [Limits](MemoryStore#limits)).
    #[must_use]
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets the most records one scope may hold; a new key of a scope at it is refused with
    /// [`StoreError::Full`] (see [Limits](MemoryStore#limits)). None by default.
    #[must_use]
    pub fn max_keys_per_scope(mut self, max: usize) -> Self {
        self.per_scope = Some(ScopeCounts {
            max,
            counts: Mutex::default(),
        });
        self
    }

    /// The bytes the records and parts held count (see [Limits](MemoryStore#limits)).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// A store that reads time from `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(clock: impl Clock) -> Self {
        let threads = std::thread::available_parallelism().map_or(4, usize::from);
        let shards = (threads * 4).next_power_of_two().max(16);
        Self {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            last_token: AtomicU64::new(0),
            clock: Arc::new(clock),
            max_keys: Self::DEFAULT_MAX_KEYS,
            max_bytes: Self::DEFAULT_MAX_BYTES,
            keys: AtomicUsize::new(0),
            bytes: AtomicU64::new(0),
            earliest_expiry: AtomicU64::new(u64::MAX),
            sweeping: AtomicBool::new(false),
            per_scope: None,
            census_board: Mutex::default(),
            parts: Mutex::default(),
        }
    }

    /// The number of records held, expired ones included until purged.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address's shard, locked, and the address's hash in it: one hash for both. The table
    /// places entries by the hash's low bits and tags them with its top seven, so the shard takes
    /// bits in between; taking low bits would leave most of each shard's buckets unused.
    fn locate(&self, address: &Address) -> (MutexGuard<'_, HashTable<Entry>>, u64) {
        let hash = self.hasher.hash_one(address);
        let index = (hash >> 40) as usize & (self.shards.len() - 1);
        (lock(&self.shards[index]), hash)
    }

    /// Counts a record added.
    fn added(&self, weight: u64) {
        self.keys.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(weight, Ordering::Relaxed);
    }

    /// Counts a record removed.
    fn removed(&self, entry: &Entry) {
        self.keys.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(entry.weight(), Ordering::Relaxed);
        if let Some(per_scope) = &self.per_scope {
            per_scope.remove(&entry.address.scope);
        }
    }

    /// Counts a record whose weight changed from `before` to `after`.
    fn reweighed(&self, before: u64, after: u64) {
        if after >= before {
            self.bytes.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.bytes.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Which limit a record of `weight` more would cross, if any.
    fn over_limit(&self, weight: u64) -> Option<String> {
        if self.keys.load(Ordering::Relaxed) >= self.max_keys {
            return Some(format!("max_keys = {}", self.max_keys));
        }
        if self.bytes.load(Ordering::Relaxed) + weight > self.max_bytes {
            return Some(format!("max_bytes = {}", self.max_bytes));
        }
        None
    }

    /// Notes that a record now expires at `at`.
    fn expires(&self, at: Timestamp) {
        self.earliest_expiry
            .fetch_min(at.as_millis(), Ordering::Relaxed);
    }

    /// Removes every expired record, when one may have expired and no other sweep runs; whether
    /// it swept. Takes one shard's lock at a time.
    fn sweep(&self, now: Timestamp) -> bool {
        if now.as_millis() < self.earliest_expiry.load(Ordering::Relaxed)
            || self.sweeping.swap(true, Ordering::Acquire)
        {
            return false;
        }
        // Reset first: a record written during the sweep lowers it again itself.
        self.earliest_expiry.store(u64::MAX, Ordering::Relaxed);
        for shard in &self.shards {
            let mut shard = lock(shard);
            let mut earliest = u64::MAX;
            let expired = shard.extract_if(|e| {
                earliest = earliest.min(e.expires_at.as_millis());
                now >= e.expires_at
            });
            for expired in expired {
                self.removed(&expired);
            }
            drop(shard);
            self.earliest_expiry.fetch_min(earliest, Ordering::Relaxed);
        }
        self.sweeping.store(false, Ordering::Release);
        true
    }

    fn next_token(&self) -> FencingToken {
        FencingToken::new(self.last_token.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Runs `change` on the live processing record held by `token`, or answers `LeaseLost`.
    fn with_holder<T>(
        &self,
        address: &Address,
        token: FencingToken,
        change: impl FnOnce(OccupiedEntry<'_, Entry>, Timestamp) -> T,
    ) -> Result<T, StoreError> {
        let now = self.clock.now();
        let (mut shard, hash) = self.locate(address);
        match shard.find_entry(hash, |e| e.address == *address) {
            Ok(entry) if entry.get().is_held_by(token, now) => Ok(change(entry, now)),
            _ => Err(StoreError::LeaseLost),
        }
    }
}

impl MemoryStore {
    /// Removes the parts of the executions `which` picks.
    fn discard_parts_where(&self, which: impl Fn(&(Address, FencingToken)) -> bool) {
        lock(&self.parts).retain(|held, parts| {
            if which(held) {
                self.bytes.fetch_sub(parts.weight(), Ordering::Relaxed);
                return false;
            }
            true
        });
    }
}

impl Parts {
    /// What the parts count against [`MemoryStore::max_bytes`].
    fn weight(&self) -> u64 {
        self.list.iter().map(|part| part.len() as u64).sum()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .field("max_bytes", &self.max_bytes)
            .field(
                "max_keys_per_scope",
                &self.per_scope.as_ref().map(|per_scope| per_scope.max),
            )
            .finish_non_exhaustive()
    }
}

/// A poisoned shard only means a panic elsewhere while holding it; every critical section
/// leaves the table consistent, so the data is still good.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemoryStore {
    /// [`Store::acquire`] without making room: a new key over a limit is [`StoreError::Full`].
    fn try_acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let now = self.clock.now();
        let (mut shard, hash) = self.locate(address);
        let entry = shard.find_mut(hash, |e| e.address == *address);
        let plan = plan_acquire(entry.as_deref().map(Entry::view), fingerprint, now);
        let lease_until = now + terms.lease;
        let took_over = match plan {
            AcquirePlan::InFlight { retry_after } => {
                return Ok(Acquisition::InFlight { retry_after });
            }
            AcquirePlan::Mismatch => return Ok(Acquisition::Mismatch),
            AcquirePlan::Replay => {
                let Some(Entry {
                    state: Held::Completed { outcome, .. },
                    ..
                }) = entry
                else {
                    unreachable!("only completed records are replayed");
                };
                return decode(outcome).map(Acquisition::Completed);
            }
            AcquirePlan::TakeOver => true,
            AcquirePlan::Create => false,
        };
        let token = self.next_token();
        let state = Held::Processing { token, lease_until };
        match entry {
            Some(entry) if took_over => {
                entry.expires_at = entry.expires_at.max(lease_until);
                entry.state = state;
            }
            // Reused in place: the key count stays, the weight can only shrink.
            Some(expired) => {
                let before = expired.weight();
                expired.fingerprint = *fingerprint;
                expired.created_at = now;
                expired.expires_at = processing_expiry(now, terms);
                expired.state = state;
                self.reweighed(before, expired.weight());
                self.expires(expired.expires_at);
            }
            None => {
                let entry = Entry {
                    hash,
                    address: address.clone(),
                    fingerprint: *fingerprint,
                    created_at: now,
                    expires_at: processing_expiry(now, terms),
                    state,
                };
                let weight = entry.weight();
                if let Some(limit) = self.over_limit(weight) {
                    return Err(StoreError::Full { limit });
                }
                if let Some(per_scope) = &self.per_scope {
                    per_scope
                        .admit(&address.scope)
                        .map_err(|limit| StoreError::Full { limit })?;
                }
                self.added(weight);
                self.expires(entry.expires_at);
                shard.insert_unique(hash, entry, |e| e.hash);
            }
        }
        Ok(Acquisition::Acquired(Lease {
            token,
            until: lease_until,
            took_over,
        }))
    }
}

impl Store for MemoryStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        match self.try_acquire(address, fingerprint, terms) {
            // The expired records are dead: room they free goes to new keys before any refusal.
            Err(StoreError::Full { .. }) if self.sweep(self.clock.now()) => {
                self.try_acquire(address, fingerprint, terms)
            }
            result => result,
        }
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        // Encoded before taking the lock; a copy, so a body sliced from a larger buffer (an HTTP
        // connection's read buffer, say) does not keep all of it alive for the whole TTL.
        let outcome = outcome.encode().into_boxed_slice();
        // Never refused for size: the operation has run (see Limits).
        self.with_holder(address, token, |mut entry, now| {
            let entry = entry.get_mut();
            let before = entry.weight();
            entry.state = Held::Completed {
                token,
                outcome,
                completed_at: now,
            };
            entry.expires_at = now + ttl;
            self.reweighed(before, entry.weight());
            self.expires(entry.expires_at);
        })
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        self.with_holder(address, token, |entry, _| {
            self.removed(&entry.remove().0);
        })
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.with_holder(address, token, |mut entry, now| {
            let entry = entry.get_mut();
            let until = now + lease;
            entry.state = Held::Processing {
                token,
                lease_until: until,
            };
            entry.expires_at = entry.expires_at.max(until);
            until
        })
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        let now = self.clock.now();
        let (shard, hash) = self.locate(address);
        shard
            .find(hash, |e| e.address == *address)
            .filter(|e| now < e.expires_at)
            .map(Entry::record)
            .transpose()
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let (mut shard, hash) = self.locate(address);
        Ok(match shard.find_entry(hash, |e| e.address == *address) {
            Ok(entry) => {
                let removed = entry.remove().0;
                self.removed(&removed);
                self.discard_parts_where(|(held, _)| held == address);
                now < removed.expires_at
            }
            Err(_) => false,
        })
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let mut purged = 0;
        for shard in &self.shards {
            if purged == limit {
                break;
            }
            let mut shard = lock(shard);
            for expired in shard
                .extract_if(|e| now >= e.expires_at)
                .take(limit - purged)
            {
                self.removed(&expired);
                purged += 1;
            }
        }
        if purged < limit {
            let mut parts = lock(&self.parts);
            let mut removed = 0;
            parts.retain(|_, held| {
                if purged + removed >= limit || now < held.expires_at {
                    return true;
                }
                removed += held.list.len();
                self.bytes.fetch_sub(held.weight(), Ordering::Relaxed);
                false
            });
            purged += removed;
        }
        Ok(purged)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Reads every record, one shard's lock at a time, and decodes only those that make the
    /// page: a page over a million records takes tens of milliseconds of one core.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let now = self.clock.now();
        let created_before = query.older_than.map(|age| now - age);
        let mut newest = Newest::new(query)?;
        for shard in &self.shards {
            let shard = lock(shard);
            for entry in shard.iter() {
                let state_matches = match (query.state, &entry.state) {
                    (None, _)
                    | (Some(StateFilter::Processing), Held::Processing { .. })
                    | (Some(StateFilter::Completed), Held::Completed { .. }) => true,
                    (Some(_), _) => false,
                };
                if state_matches
                    && now < entry.expires_at
                    && created_before.is_none_or(|before| entry.created_at <= before)
                    && query.scope.is_none_or(|scope| scope == entry.address.scope)
                    && newest.wants(entry.created_at)
                {
                    newest.offer(Listed {
                        scope: entry.address.scope,
                        key_sha256: entry.address.key.sha256(),
                        record: entry.record()?,
                    });
                }
            }
        }
        Ok(newest.finish())
    }

    /// Reads every record, one shard's lock at a time, without decoding any, resting after each
    /// shard at `pace`.
    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        let now = self.clock.now();
        let mut census = Census::default();
        for shard in &self.shards {
            let started = std::time::Instant::now();
            for entry in lock(shard).iter().filter(|e| now < e.expires_at) {
                match entry.state {
                    Held::Processing { .. } => {
                        census.processing += 1;
                        census.oldest_processing = Some(
                            census
                                .oldest_processing
                                .map_or(entry.created_at, |t| t.min(entry.created_at)),
                        );
                    }
                    Held::Completed { .. } => census.completed += 1,
                }
            }
            pace.rest(started.elapsed()).await;
        }
        Ok(census)
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        self.with_holder(address, token, |entry, _| {
            let expires_at = entry.get().expires_at;
            let mut parts = lock(&self.parts);
            let next = parts
                .get(&(address.clone(), token))
                .map_or(0, |held| held.list.len());
            let next = u32::try_from(next).unwrap_or(u32::MAX);
            match index.cmp(&next) {
                std::cmp::Ordering::Less => Ok(()),
                std::cmp::Ordering::Greater => {
                    Err(StoreError::PartOutOfOrder { next, given: index })
                }
                std::cmp::Ordering::Equal => {
                    let held = parts.entry((address.clone(), token)).or_insert(Parts {
                        list: Vec::new(),
                        expires_at,
                    });
                    held.expires_at = expires_at;
                    // A copy, so that a part sliced from a larger buffer does not keep it.
                    held.list.push(Bytes::copy_from_slice(part));
                    self.bytes.fetch_add(part.len() as u64, Ordering::Relaxed);
                    Ok(())
                }
            }
        })?
    }

    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let now = self.clock.now();
        let parts = lock(&self.parts);
        let Some(held) = parts
            .get(&(address.clone(), token))
            .filter(|held| now < held.expires_at)
        else {
            return Ok(Vec::new());
        };
        let mut budget = max_bytes;
        let mut read = Vec::new();
        for part in held.list.iter().skip(from as usize).take(MAX_PARTS_READ) {
            if !read.is_empty() && part.len() > budget {
                break;
            }
            budget = budget.saturating_sub(part.len());
            read.push(part.clone());
        }
        Ok(read)
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        self.discard_parts_where(|held| *held == (address.clone(), token));
        Ok(())
    }

    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        Ok(lock(&self.census_board).claim(claim, self.clock.now()))
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        Ok(lock(&self.census_board).post(claimant, *census, rest, self.clock.now()))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::StoredResponse;

    use super::*;

    #[tokio::test]
    async fn parts_count_in_the_bytes_held_until_they_are_discarded() {
        let store = MemoryStore::new();
        let address = Address::anonymous("k".parse().unwrap());
        let terms = Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(60),
        };
        let fingerprint = Fingerprint::from_bytes([7; 32]);
        let Acquisition::Acquired(lease) =
            store.acquire(&address, &fingerprint, terms).await.unwrap()
        else {
            panic!("a new key is acquired");
        };
        let record = store.bytes();
        for index in 0..3 {
            let part = Bytes::from(vec![b'x'; 1000]);
            store
                .append_part(&address, lease.token, index, &part)
                .await
                .unwrap();
        }
        assert_eq!(store.bytes(), record + 3000);
        store.discard_parts(&address, lease.token).await.unwrap();
        assert_eq!(store.bytes(), record);
        store
            .append_part(&address, lease.token, 0, &Bytes::from_static(b"again"))
            .await
            .unwrap();
        assert!(store.forget(&address).await.unwrap());
        assert_eq!(store.bytes(), 0);
    }

    #[tokio::test]
    async fn a_stored_body_does_not_keep_the_buffer_it_was_sliced_from() {
        let store = MemoryStore::new();
        let address = Address::anonymous("k".parse().unwrap());
        let terms = Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(60),
        };
        let fingerprint = Fingerprint::from_bytes([7; 32]);
        let Acquisition::Acquired(lease) =
            store.acquire(&address, &fingerprint, terms).await.unwrap()
        else {
            panic!("a new key is acquired");
        };
        let read_buffer = Bytes::from(vec![b'x'; 16 * 1024]);
        let response = StoredResponse::new(201).body(read_buffer.slice(100..199));

        store
            .complete(&address, lease.token, &response.clone().into(), terms.ttl)
            .await
            .unwrap();

        let record = store.get(&address).await.unwrap().unwrap();
        let RecordState::Completed {
            outcome: Outcome::Response(stored),
            ..
        } = record.state
        else {
            panic!("completed");
        };
        assert_eq!(stored, response);
        let buffer = read_buffer.as_ptr_range();
        assert!(
            !buffer.contains(&stored.body.as_ptr()),
            "the body is a copy"
        );
    }

    fn terms() -> Terms {
        Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(60),
        }
    }

    const FP: Fingerprint = Fingerprint::from_bytes([7; 32]);

    fn address(key: &str) -> Address {
        Address::anonymous(key.parse().unwrap())
    }

    async fn acquire(store: &MemoryStore, key: &str) -> Result<Acquisition, StoreError> {
        store.acquire(&address(key), &FP, terms()).await
    }

    async fn acquired(store: &MemoryStore, key: &str) -> Lease {
        match acquire(store, key).await {
            Ok(Acquisition::Acquired(lease)) => lease,
            other => panic!("{other:?}"),
        }
    }

    fn manual() -> (crate::ManualClock, MemoryStore) {
        let clock = crate::ManualClock::new(Timestamp::from_millis(1_000_000));
        (clock.clone(), MemoryStore::with_clock(clock))
    }

    #[tokio::test]
    async fn a_scope_at_its_limit_is_refused_and_the_others_still_get_new_keys() {
        let store = MemoryStore::new().max_keys_per_scope(2);
        let tenant = |name: &str| Scope::from_identity([name.as_bytes()]);
        let key = |scope: Scope, key: &str| Address::new(scope, key.parse().unwrap());
        let acquire = |address: Address| {
            let store = &store;
            async move { store.acquire(&address, &FP, terms()).await }
        };
        let noisy = tenant("junk credentials");
        let first = match acquire(key(noisy, "a")).await {
            Ok(Acquisition::Acquired(lease)) => lease,
            other => panic!("{other:?}"),
        };
        acquire(key(noisy, "b")).await.unwrap();
        let refused = acquire(key(noisy, "c")).await;
        assert!(
            matches!(refused, Err(StoreError::Full { ref limit }) if limit == "max_keys_per_scope = 2"),
            "{refused:?}"
        );
        // Another scope has its own share; a held key of the full scope still answers.
        assert!(matches!(
            acquire(key(tenant("a tenant"), "c")).await,
            Ok(Acquisition::Acquired(_))
        ));
        assert!(matches!(
            acquire(key(noisy, "b")).await,
            Ok(Acquisition::InFlight { .. })
        ));
        // A record removed gives its scope the room back.
        store.release(&key(noisy, "a"), first.token).await.unwrap();
        assert!(matches!(
            acquire(key(noisy, "c")).await,
            Ok(Acquisition::Acquired(_))
        ));
        assert_eq!(store.len(), 3);
    }

    #[tokio::test]
    async fn a_key_beyond_max_keys_is_refused_and_held_keys_still_answer() {
        let store = MemoryStore::new().max_keys(2);
        let first = acquired(&store, "a").await;
        acquired(&store, "b").await;

        let refused = acquire(&store, "c").await;
        assert!(
            matches!(refused, Err(StoreError::Full { ref limit }) if limit == "max_keys = 2"),
            "{refused:?}"
        );
        assert_eq!(store.len(), 2);
        // Held keys still complete and replay, and a retry of a held key is no new key.
        let response = Outcome::from(StoredResponse::new(201).body("done"));
        store
            .complete(&address("a"), first.token, &response, terms().ttl)
            .await
            .unwrap();
        assert_eq!(
            acquire(&store, "a").await.unwrap(),
            Acquisition::Completed(response)
        );
        assert!(matches!(
            acquire(&store, "b").await.unwrap(),
            Acquisition::InFlight { .. }
        ));
        let encoded = StoredResponse::new(201).body("done").encode().len() as u64;
        assert_eq!(
            (store.len(), store.bytes()),
            (2, 2 * (MemoryStore::RECORD_OVERHEAD + 1) + encoded)
        );
    }

    #[tokio::test]
    async fn an_expired_record_makes_room_for_a_new_key() {
        let (clock, store) = manual();
        let store = store.max_keys(1);
        let lease = acquired(&store, "old").await;
        store
            .complete(
                &address("old"),
                lease.token,
                &StoredResponse::new(200).into(),
                terms().ttl,
            )
            .await
            .unwrap();
        assert!(matches!(
            acquire(&store, "new").await,
            Err(StoreError::Full { .. })
        ));

        clock.advance(terms().ttl);
        acquired(&store, "new").await;
        assert_eq!(store.len(), 1);
        assert_eq!(store.get(&address("old")).await.unwrap(), None);
        assert_eq!(store.bytes(), MemoryStore::RECORD_OVERHEAD + 3);
    }

    #[tokio::test]
    async fn a_live_record_is_never_evicted_for_a_new_key() {
        let (clock, store) = manual();
        let store = store.max_keys(1);
        acquired(&store, "running").await;
        // Its lease has run out but its record lives until its expiry (max(ttl, lease)).
        clock.advance(terms().lease);
        assert!(matches!(
            acquire(&store, "new").await,
            Err(StoreError::Full { .. })
        ));
        assert!(matches!(
            acquire(&store, "running").await.unwrap(),
            Acquisition::Acquired(Lease {
                took_over: true,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn a_completion_over_max_bytes_is_accepted_and_new_keys_are_refused() {
        let overhead = MemoryStore::RECORD_OVERHEAD;
        // Room for two processing records with one-character keys.
        let store = MemoryStore::new().max_bytes(2 * (overhead + 1));
        let lease = acquired(&store, "a").await;
        let response = Outcome::from(StoredResponse::new(200).body(vec![b'x'; 4096]));
        store
            .complete(&address("a"), lease.token, &response, terms().ttl)
            .await
            .unwrap();
        let weight = overhead + 1 + response.encode().len() as u64;
        assert_eq!(store.bytes(), weight);
        assert!(store.bytes() > 2 * (overhead + 1));

        let refused = acquire(&store, "b").await;
        assert!(
            matches!(refused, Err(StoreError::Full { ref limit }) if *limit == format!("max_bytes = {}", 2 * (overhead + 1))),
            "{refused:?}"
        );
        // Forgetting the record gives its bytes back.
        assert!(store.forget(&address("a")).await.unwrap());
        assert_eq!((store.len(), store.bytes()), (0, 0));
        acquired(&store, "b").await;
    }

    #[tokio::test]
    async fn the_counts_follow_every_change() {
        let (clock, store) = manual();
        let overhead = MemoryStore::RECORD_OVERHEAD;
        let a = acquired(&store, "a").await;
        let b = acquired(&store, "bb").await;
        assert_eq!(store.bytes(), 2 * overhead + 3);
        store.release(&address("a"), a.token).await.unwrap();
        assert_eq!(store.bytes(), overhead + 2);
        let response = Outcome::from(StoredResponse::new(200).body("ok"));
        store
            .complete(&address("bb"), b.token, &response, terms().ttl)
            .await
            .unwrap();
        assert_eq!(store.bytes(), overhead + 2 + response.encode().len() as u64);
        clock.advance(terms().ttl);
        // Reusing the expired record in place keeps the count and drops the response's bytes.
        acquired(&store, "bb").await;
        assert_eq!((store.len(), store.bytes()), (1, overhead + 2));
        clock.advance(terms().ttl);
        assert_eq!(store.purge_expired(10).await.unwrap(), 1);
        assert_eq!((store.len(), store.bytes()), (0, 0));
    }
}
