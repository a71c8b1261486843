//! [`Sealed`]: a store wrapper that keeps stored responses encrypted.

use bytes::Bytes;
use std::{
    collections::HashMap,
    fmt,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, Clock, FencingToken, Fingerprint,
    ListPage, ListQuery, Outcome, Pace, Record, RecordState, Store, StoreError, SystemClock, Terms,
    Timestamp,
    sealing::{
        KeyRing, SealingError,
        envelope::{self, Binding, is_sealed},
    },
};

/// Default of [`Sealed::clock_skew`]: how far the clocks of the processes sharing a store may
/// disagree before a record served past its sealed expiry is refused.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// How many executions in progress [`Sealed`] remembers the fingerprint of. Past it, the oldest
/// are forgotten, and their completion reads the fingerprint back from the store.
const MAX_HELD: usize = 65_536;

/// The most parts a store returns from one [`Store::read_parts`].
const PARTS_READ: usize = 256;

/// A [`Store`] whose completed outcomes (a response's status, headers, body and trailers, or
/// [`Outcome::Unknown`]) are sealed with XChaCha20-Poly1305 before they reach the inner store,
/// and opened when read back.
///
/// What stays in clear, because the store's atomic decisions need it: the address (the scope is
/// a hash already; SQL stores keep a digest of the key), the fingerprint, the state, the tokens
/// and the timestamps. The sealed outcome is bound to all of them:
///
/// - to the address and the fingerprint of the request that ran: a record whose fingerprint a
///   store writer changed (so that another request body would be answered with this outcome)
///   does not open;
/// - to the fencing token of the execution that completed it, checked wherever the record is
///   read whole ([`get`](Store::get), as the admin API's key view does): a token changed, or an
///   older outcome of the address put back, is refused;
/// - to a sealed expiry, this process's clock at completion plus the TTL: a record still served
///   past it (its expiry extended in the store) is refused, allowing the
///   [`clock_skew`](Sealed::clock_skew) between the processes that share the store.
///
/// A replay ([`acquire`](Store::acquire)) sees the outcome but not the record's token, so an
/// older outcome of the same request put back within its own TTL, after an operator forgot the
/// key and it ran again, replays; [`get`](Store::get) refuses it.
///
/// A sealed record that does not open or is refused (altered, copied to another address, sealed
/// with a key that has left the ring) is [`StoreError::Corrupted`]: never replayed, never
/// executed again.
///
/// A record in clear is [`StoreError::Corrupted`] by default: whoever can write to the store but
/// holds no key could otherwise plant a response ("200, charge succeeded") for any key. For the
/// window after sealing is turned on over a store that holds records in clear,
/// [`accept_plaintext(true)`](Sealed::accept_plaintext) replays them as they are until they age
/// out within their TTL, each counted by the [`on_plaintext`](Sealed::on_plaintext) callback.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use idem_core::{
///     Acquisition, Address, Fingerprint, MemoryStore, Outcome, Policy, RecordState, Store,
///     StoredResponse,
///     sealing::{KeyRing, Sealed},
/// };
///
/// let inner = std::sync::Arc::new(MemoryStore::new());
/// let store = Sealed::new(inner.clone(), KeyRing::single("k1", [7; 32]));
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([1; 32]);
/// let terms = (&Policy::default()).into();
///
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// let response = Outcome::from(StoredResponse::new(201).body("card 4242 charged"));
/// store.complete(&address, lease.token, &response, terms.ttl).await?;
///
/// // Replays open the response...
/// let replay = store.acquire(&address, &fingerprint, terms).await?;
/// assert_eq!(replay, Acquisition::Completed(response));
/// // ...which the inner store holds sealed.
/// let Some(RecordState::Completed { outcome: Outcome::Response(held), .. }) =
///     inner.get(&address).await?.map(|r| r.state) else { unreachable!() };
/// assert!(!held.body.windows(4).any(|w| w == b"4242"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Sealed<S> {
    inner: S,
    ring: KeyRing,
    clock: Arc<dyn Clock>,
    clock_skew: Duration,
    held: Arc<Held>,
    accept_plaintext: bool,
    on_plaintext: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// The fingerprints of the executions this store granted and that have not completed or released
/// yet: what a completion binds its sealed outcome to, since [`Store::complete`] is not given it.
struct Held {
    fingerprints: Mutex<HashMap<(Address, FencingToken), Fingerprint>>,
    capacity: usize,
}

impl Held {
    fn new(capacity: usize) -> Self {
        Self {
            fingerprints: Mutex::default(),
            capacity,
        }
    }

    fn insert(&self, address: &Address, token: FencingToken, fingerprint: Fingerprint) {
        let mut held = self.lock();
        if held.len() >= self.capacity {
            // An execution that never completes nor releases (its caller dropped it) would
            // otherwise stay forever: forget one, whose completion then reads the store.
            if let Some(any) = held.keys().next().cloned() {
                held.remove(&any);
            }
        }
        held.insert((address.clone(), token), fingerprint);
    }

    fn remove(&self, address: &Address, token: FencingToken) -> Option<Fingerprint> {
        self.lock().remove(&(address.clone(), token))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Address, FencingToken), Fingerprint>> {
        // A panic under the lock leaves the map whole: each step is one insert or remove.
        self.fingerprints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<S: fmt::Debug> fmt::Debug for Sealed<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("inner", &self.inner)
            .field("ring", &self.ring)
            .field("clock_skew", &self.clock_skew)
            .field("accept_plaintext", &self.accept_plaintext)
            .finish_non_exhaustive()
    }
}

impl<S> Sealed<S> {
    /// Seals what `inner` stores with `ring`'s first key, and opens with any of its keys.
    pub fn new(inner: S, ring: KeyRing) -> Self {
        Self {
            inner,
            ring,
            clock: Arc::new(SystemClock),
            clock_skew: DEFAULT_CLOCK_SKEW,
            held: Arc::new(Held::new(MAX_HELD)),
            accept_plaintext: false,
            on_plaintext: None,
        }
    }

    /// The clock the sealed expiry is read from and checked against (the system's by default;
    /// tests inject a [`ManualClock`](crate::ManualClock)).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How far the clocks of the processes that share the store may disagree
    /// ([`DEFAULT_CLOCK_SKEW`], 5 minutes, by default): a record served later than its sealed
    /// expiry plus this is refused. The store's own clock decides when records expire; this only
    /// catches an expiry a store writer extended.
    #[must_use]
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.clock_skew = skew;
        self
    }

    /// Whether records in clear (written before sealing was on, or planted by someone without
    /// the key) are replayed (`true`) or are [`StoreError::Corrupted`] (`false`, the default).
    #[must_use]
    pub fn accept_plaintext(mut self, accept: bool) -> Self {
        self.accept_plaintext = accept;
        self
    }

    /// Calls `count` each time a record in clear is accepted (under
    /// [`accept_plaintext(true)`](Self::accept_plaintext)): a metric that says when the records
    /// written before sealing have aged out.
    #[must_use]
    pub fn on_plaintext(mut self, count: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_plaintext = Some(Arc::new(count));
        self
    }

    /// The inner store, which holds sealed responses.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The key ring.
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    /// How many executions in progress this store remembers the fingerprint of.
    #[cfg(test)]
    pub(crate) fn held_len(&self) -> usize {
        self.held.lock().len()
    }

    /// Remembers the fingerprints of at most `capacity` executions in progress.
    #[cfg(test)]
    pub(crate) fn held_capacity(mut self, capacity: usize) -> Self {
        self.held = Arc::new(Held::new(capacity));
        self
    }

    /// Opens the outcome of a completed record at `address`, whose request had `fingerprint` and
    /// whose token, when the caller knows it, is `token`.
    fn open(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        token: Option<FencingToken>,
        outcome: Outcome,
    ) -> Result<Outcome, StoreError> {
        match outcome {
            Outcome::Response(sealed) if is_sealed(&sealed) => {
                let opened = envelope::open(&self.ring, address, fingerprint, sealed)
                    .map_err(StoreError::corrupted)?;
                if let Some((sealed_token, expires)) = opened.sealed {
                    self.check(sealed_token, expires, token)
                        .map_err(StoreError::corrupted)?;
                }
                Ok(opened.outcome)
            }
            plain if self.accept_plaintext => {
                if let Some(count) = &self.on_plaintext {
                    count();
                }
                Ok(plain)
            }
            _ => Err(StoreError::corrupted(SealingError::Plaintext)),
        }
    }

    /// Checks an opened record's sealed token against the record's, and its sealed expiry
    /// against the clock.
    fn check(
        &self,
        sealed: FencingToken,
        expires: Timestamp,
        record: Option<FencingToken>,
    ) -> Result<(), SealingError> {
        if let Some(record) = record.filter(|record| *record != sealed) {
            return Err(SealingError::TokenMismatch {
                sealed: sealed.get(),
                record: record.get(),
            });
        }
        let overdue = self.clock.now().saturating_since(expires + self.clock_skew);
        if overdue > Duration::ZERO {
            return Err(SealingError::Outlived { overdue });
        }
        Ok(())
    }

    /// The fingerprint of the execution at `address` held by `token`: remembered since its
    /// acquisition, or read back from the store when it was forgotten (or acquired through
    /// another `Sealed`).
    async fn fingerprint(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<Fingerprint, StoreError>
    where
        S: Store,
    {
        if let Some(fingerprint) = self.held.remove(address, token) {
            return Ok(fingerprint);
        }
        match self.inner.get(address).await? {
            Some(Record {
                fingerprint,
                state: RecordState::Processing { token: held, .. },
                ..
            }) if held == token => Ok(fingerprint),
            _ => Err(StoreError::LeaseLost),
        }
    }
}

impl<S: Store> Store for Sealed<S> {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        match self.inner.acquire(address, fingerprint, terms).await? {
            Acquisition::Completed(outcome) => Ok(Acquisition::Completed(self.open(
                address,
                fingerprint,
                None,
                outcome,
            )?)),
            Acquisition::Acquired(lease) => {
                self.held.insert(address, lease.token, *fingerprint);
                Ok(Acquisition::Acquired(lease))
            }
            other => Ok(other),
        }
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let binding = Binding {
            fingerprint: self.fingerprint(address, token).await?,
            token,
            expires: self.clock.now() + ttl,
        };
        let sealed =
            envelope::seal(&self.ring, address, &binding, outcome).map_err(
                |error| match error {
                    SealingError::Random(_) => StoreError::unavailable(error),
                    other => StoreError::corrupted(other),
                },
            )?;
        self.inner
            .complete(address, token, &Outcome::Response(sealed), ttl)
            .await
    }

    fn release(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.held.remove(address, token);
        self.inner.release(address, token)
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let renewed = self.inner.renew(address, token, lease).await;
        if let Err(StoreError::LeaseLost) = renewed {
            self.held.remove(address, token);
        }
        renewed
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        let Some(record) = self.inner.get(address).await? else {
            return Ok(None);
        };
        let state = match record.state {
            RecordState::Completed {
                token,
                outcome,
                completed_at,
            } => RecordState::Completed {
                token,
                outcome: self.open(address, &record.fingerprint, Some(token), outcome)?,
                completed_at,
            },
            processing => processing,
        };
        Ok(Some(Record { state, ..record }))
    }

    fn forget(&self, address: &Address) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.forget(address)
    }

    fn purge_expired(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send {
        self.inner.purge_expired(limit)
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.ping()
    }

    /// The inner store's page: completed records keep their sealed outcomes, which open only
    /// with the key in clear, so a listing shows no status for them
    /// ([`is_sealed`](crate::sealing::is_sealed) tells).
    fn list(&self, query: &ListQuery) -> impl Future<Output = Result<ListPage, StoreError>> + Send {
        self.inner.list(query)
    }

    fn census(&self, pace: Pace) -> impl Future<Output = Result<Census, StoreError>> + Send {
        self.inner.census(pace)
    }

    fn claim_census(
        &self,
        claim: CensusClaim,
    ) -> impl Future<Output = Result<CensusTurn, StoreError>> + Send {
        self.inner.claim_census(claim)
    }

    fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.post_census(claimant, census, rest)
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let sealed = envelope::seal_part(&self.ring, address, token, index, part)
            .map_err(StoreError::corrupted)?;
        self.inner.append_part(address, token, index, &sealed).await
    }

    /// Opens each part; one that does not open is [`StoreError::Corrupted`], as is a part in
    /// clear (parts are kept for the stream in progress only, so none predates sealing).
    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        // The budget counts the parts opened: the inner store is asked for what it may hold
        // sealed, and what opens past the budget is left for the next read.
        let sealed_budget = max_bytes.saturating_add(envelope::MAX_PART_OVERHEAD * PARTS_READ);
        let sealed = self
            .inner
            .read_parts(address, token, from, sealed_budget)
            .await?;
        let mut budget = max_bytes;
        let mut opened = Vec::with_capacity(sealed.len());
        for (index, part) in (from..).zip(sealed) {
            let part = envelope::open_part(&self.ring, address, token, index, part)
                .map_err(StoreError::corrupted)?;
            if !opened.is_empty() && part.len() > budget {
                break;
            }
            budget = budget.saturating_sub(part.len());
            opened.push(part);
        }
        Ok(opened)
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        self.inner.discard_parts(address, token).await
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changed(address)
    }
}
