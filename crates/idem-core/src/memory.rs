//! [`MemoryStore`]: the reference store, in process memory.

use std::{
    hash::{BuildHasher, RandomState},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use hashbrown::{HashTable, hash_table::OccupiedEntry};

use crate::{
    Acquisition, Address, Clock, FencingToken, Fingerprint, Lease, Record, RecordState, Store,
    StoreError, StoredResponse, SystemClock, Terms, Timestamp,
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
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use idem_core::{Acquisition, Address, Fingerprint, MemoryStore, Policy, Store, StoredResponse};
///
/// let store = MemoryStore::new();
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([7; 32]);
/// let terms = (&Policy::default()).into();
///
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// let response = StoredResponse::new(201).body("charged");
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
}

/// A record as a shard keeps it: with its address, and the address's hash so that growing the
/// table does not hash every address again. A completed response is kept encoded, in one
/// allocation (a [`StoredResponse`] takes one per header name and value): the store holds every
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
        response: Box<[u8]>,
        completed_at: Timestamp,
    },
}

impl Entry {
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
                response,
                completed_at,
            } => RecordState::Completed {
                token: *token,
                response: decode(response)?,
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

fn decode(response: &[u8]) -> Result<StoredResponse, StoreError> {
    StoredResponse::decode(response).map_err(StoreError::corrupted)
}

impl MemoryStore {
    /// A store on the system clock, with one shard per four hardware threads (at least 16).
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
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

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
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

impl Store for MemoryStore {
    async fn acquire(
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
                    state: Held::Completed { response, .. },
                    ..
                }) = entry
                else {
                    unreachable!("only completed records are replayed");
                };
                return decode(response).map(Acquisition::Completed);
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
            Some(expired) => {
                expired.fingerprint = *fingerprint;
                expired.created_at = now;
                expired.expires_at = processing_expiry(now, terms);
                expired.state = state;
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
                shard.insert_unique(hash, entry, |e| e.hash);
            }
        }
        Ok(Acquisition::Acquired(Lease {
            token,
            until: lease_until,
            took_over,
        }))
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        // Encoded before taking the lock; a copy, so a body sliced from a larger buffer (an HTTP
        // connection's read buffer, say) does not keep all of it alive for the whole TTL.
        let response = response.encode().into_boxed_slice();
        self.with_holder(address, token, |mut entry, now| {
            let entry = entry.get_mut();
            entry.state = Held::Completed {
                token,
                response,
                completed_at: now,
            };
            entry.expires_at = now + ttl;
        })
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        self.with_holder(address, token, |entry, _| {
            entry.remove();
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
            Ok(entry) => now < entry.remove().0.expires_at,
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
            purged += shard
                .extract_if(|e| now >= e.expires_at)
                .take(limit - purged)
                .count();
        }
        Ok(purged)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

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
            .complete(&address, lease.token, &response, terms.ttl)
            .await
            .unwrap();

        let record = store.get(&address).await.unwrap().unwrap();
        let RecordState::Completed {
            response: stored, ..
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
}
