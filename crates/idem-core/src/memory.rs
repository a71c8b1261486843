//! [`MemoryStore`]: the reference store, in process memory.

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;

use crate::{
    Acquisition, Address, Clock, FencingToken, Fingerprint, Lease, Record, RecordState, Store,
    StoreError, StoredResponse, SystemClock, Terms, Timestamp,
    transition::{AcquirePlan, RecordView, plan_acquire, processing_expiry},
};

/// The reference store: records in a sharded hash map, each operation one short critical section
/// on one shard. Nothing survives the process; use it for tests, for a single instance that can
/// afford to forget its keys on restart, and as the model the other stores are checked against.
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
    shards: Box<[Mutex<HashMap<Address, Record>>]>,
    hasher: RandomState,
    last_token: AtomicU64,
    clock: Arc<dyn Clock>,
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

    fn shard(&self, address: &Address) -> MutexGuard<'_, HashMap<Address, Record>> {
        let index = self.hasher.hash_one(address) as usize & (self.shards.len() - 1);
        lock(&self.shards[index])
    }

    fn next_token(&self) -> FencingToken {
        FencingToken::new(self.last_token.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Runs `change` on the live processing record held by `token`, or answers `LeaseLost`.
    fn with_holder<T>(
        &self,
        address: &Address,
        token: FencingToken,
        change: impl FnOnce(&mut HashMap<Address, Record>, Timestamp) -> T,
    ) -> Result<T, StoreError> {
        let now = self.clock.now();
        let mut shard = self.shard(address);
        match shard.get(address) {
            Some(Record {
                state: RecordState::Processing { token: held, .. },
                expires_at,
                ..
            }) if *held == token && now < *expires_at => Ok(change(&mut shard, now)),
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
/// leaves the map consistent, so the data is still good.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn view(record: &Record) -> RecordView<'_> {
    RecordView {
        fingerprint: &record.fingerprint,
        expires_at: record.expires_at,
        lease_until: match record.state {
            RecordState::Processing { lease_until, .. } => Some(lease_until),
            RecordState::Completed { .. } => None,
        },
    }
}

impl Store for MemoryStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let now = self.clock.now();
        let mut shard = self.shard(address);
        let plan = plan_acquire(shard.get(address).map(view), fingerprint, now);
        let lease_until = now + terms.lease;
        let took_over = match plan {
            AcquirePlan::InFlight { retry_after } => {
                return Ok(Acquisition::InFlight { retry_after });
            }
            AcquirePlan::Mismatch => return Ok(Acquisition::Mismatch),
            AcquirePlan::Replay => {
                let record = &shard[address];
                let RecordState::Completed { response, .. } = &record.state else {
                    unreachable!("only completed records are replayed");
                };
                return Ok(Acquisition::Completed(response.clone()));
            }
            AcquirePlan::TakeOver => true,
            AcquirePlan::Create => false,
        };
        let token = self.next_token();
        let state = RecordState::Processing { token, lease_until };
        if took_over {
            let record = shard.get_mut(address).expect("planned on this record");
            record.state = state;
            record.expires_at = record.expires_at.max(lease_until);
        } else {
            let record = Record {
                fingerprint: *fingerprint,
                created_at: now,
                expires_at: processing_expiry(now, terms),
                state,
            };
            shard.insert(address.clone(), record);
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
        // A body sliced from a larger buffer (an HTTP connection's read buffer, say) would keep
        // all of it alive for the whole TTL: keep a copy of just the body.
        let response = StoredResponse {
            body: Bytes::copy_from_slice(&response.body),
            ..response.clone()
        };
        self.with_holder(address, token, |shard, now| {
            let record = shard.get_mut(address).expect("checked by with_holder");
            record.state = RecordState::Completed {
                token,
                response,
                completed_at: now,
            };
            record.expires_at = now + ttl;
        })
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        self.with_holder(address, token, |shard, _| {
            shard.remove(address);
        })
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.with_holder(address, token, |shard, now| {
            let record = shard.get_mut(address).expect("checked by with_holder");
            let until = now + lease;
            record.state = RecordState::Processing {
                token,
                lease_until: until,
            };
            record.expires_at = record.expires_at.max(until);
            until
        })
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        let now = self.clock.now();
        Ok(self
            .shard(address)
            .get(address)
            .filter(|r| now < r.expires_at)
            .cloned())
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let now = self.clock.now();
        Ok(self
            .shard(address)
            .remove(address)
            .is_some_and(|r| now < r.expires_at))
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
                .extract_if(|_, r| now >= r.expires_at)
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
