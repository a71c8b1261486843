//! [`KeyedAddresses`]: a store wrapper under which a store keeps keyed digests of scopes and keys.

use bytes::Bytes;
use std::{future::Future, sync::Arc, time::Duration};

use crate::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, Clock, DigestKey, FencingToken,
    Fingerprint, IdempotencyKey, ListPage, ListQuery, Outcome, Pace, Record, Scope, Store,
    StoreError, SystemClock, Terms, Timestamp, dyn_store::ErasedStore,
};

/// A [`Store`] that addresses records by keyed digests: the inner store sees, instead of each
/// [`Address`], one whose scope and key are keyed BLAKE3 hashes under a [`DigestKey`].
///
/// Without it, the stores keep the scope (an unkeyed hash of the caller's credential) and the key
/// (in clear in memory, SHA-256 of it in the SQL stores, an unkeyed hash with the scope in Redis'
/// key names), so a dump of the store can be matched against guessed keys (sequential order
/// numbers) and weak credentials. Under this wrapper only the holder of the digest key can.
///
/// - The stored scope is the keyed digest that logs print for the scope under the same key
///   ([`Scope::digest`]): a listing and the logs show the same scope. A listing's scope filter is
///   therefore given in that stored form, as a listing shows it, and passed on as it is.
/// - The stored key is 64 hex digits, a keyed hash of the stored scope and the key.
///
/// **Changing over** a store that holds records under their plain addresses: for a window
/// ([`changeover_until`](Self::changeover_until)), a key found under neither address is acquired
/// under its keyed address only after looking for a record under its plain address: a completed
/// one is replayed from there (its keyed acquisition is released), one in flight answers in flight,
/// one with another fingerprint a mismatch, and one whose lease ran out is cleared. Reads and
/// forgets look at both addresses. Once the window has passed (one TTL after the key was turned on),
/// no plain record is left to find, and each call is one call of the inner store again.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use idem_core::{
///     Acquisition, Address, DigestKey, Fingerprint, KeyedAddresses, MemoryStore, Policy, Store,
///     StoredResponse,
/// };
///
/// let inner = std::sync::Arc::new(MemoryStore::new());
/// let store = KeyedAddresses::new(inner.clone(), &DigestKey::new([7; 32]));
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([1; 32]);
/// let terms = (&Policy::default()).into();
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// store.complete(&address, lease.token, &StoredResponse::new(201).into(), terms.ttl).await?;
///
/// // Found through the wrapper; under its plain address, the inner store holds nothing.
/// assert!(store.get(&address).await?.is_some());
/// assert!(inner.get(&address).await?.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct KeyedAddresses<S> {
    inner: S,
    scopes: [u8; 32],
    keys: [u8; 32],
    changeover_until: Option<Timestamp>,
    clock: Arc<dyn Clock>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for KeyedAddresses<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedAddresses")
            .field("inner", &self.inner)
            .field("changeover_until", &self.changeover_until)
            .finish_non_exhaustive()
    }
}

impl<S> KeyedAddresses<S> {
    /// Addresses `inner`'s records by digests keyed with `key`. No change-over: records stored
    /// under plain addresses are not looked for.
    pub fn new(inner: S, key: &DigestKey) -> Self {
        let (scopes, keys) = key.at_rest();
        Self {
            inner,
            scopes,
            keys,
            changeover_until: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Until `until` (by this wrapper's clock), also looks for records under their plain
    /// addresses (see [Changing over](Self#changing-over)).
    #[must_use]
    pub fn changeover_until(mut self, until: Timestamp) -> Self {
        self.changeover_until = Some(until);
        self
    }

    /// For `window` from now, also looks for records under their plain addresses: give it the
    /// longest TTL the store's records were written with.
    #[must_use]
    pub fn changeover_for(self, window: Duration) -> Self {
        let until = self.clock.now() + window;
        self.changeover_until(until)
    }

    /// The clock the change-over window is read from (the system's by default).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The inner store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The address under which the inner store keeps `address`'s record.
    pub fn keyed(&self, address: &Address) -> Address {
        let scope = Scope::from_bytes(
            *blake3::keyed_hash(&self.scopes, address.scope.as_bytes()).as_bytes(),
        );
        let key = blake3::Hasher::new_keyed(&self.keys)
            .update(scope.as_bytes())
            .update(address.key.as_str().as_bytes())
            .finalize()
            .to_hex();
        let key: IdempotencyKey = key.parse().expect("64 hex digits are a valid key");
        Address::new(scope, key)
    }

    /// Whether plain addresses are still looked at.
    fn changing_over(&self) -> bool {
        self.changeover_until
            .is_some_and(|until| self.clock.now() < until)
    }
}

impl<S: Store> KeyedAddresses<S> {
    /// A new key acquired at `keyed` during the change-over: answered from a record under the
    /// plain `address` if there is one, else kept.
    async fn plain_record(
        &self,
        address: &Address,
        keyed: &Address,
        token: FencingToken,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Option<Acquisition>, StoreError> {
        if self.inner.get(address).await?.is_none() {
            return Ok(None);
        }
        // The store decides, in one step, what that record means for this request.
        match self.inner.acquire(address, fingerprint, terms).await? {
            Acquisition::Acquired(plain) => {
                // A lease that ran out (or a record gone meanwhile): cleared, and the request
                // goes on under its keyed address.
                match self.inner.release(address, plain.token).await {
                    Ok(()) | Err(StoreError::LeaseLost) => Ok(None),
                    Err(error) => Err(error),
                }
            }
            answer => {
                match self.inner.release(keyed, token).await {
                    Ok(()) | Err(StoreError::LeaseLost) => {}
                    Err(error) => return Err(error),
                }
                Ok(Some(answer))
            }
        }
    }
}

impl<S: Store> Store for KeyedAddresses<S> {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let keyed = self.keyed(address);
        let acquisition = self.inner.acquire(&keyed, fingerprint, terms).await?;
        let Acquisition::Acquired(lease) = &acquisition else {
            return Ok(acquisition);
        };
        if lease.took_over || !self.changing_over() {
            return Ok(acquisition);
        }
        let token = lease.token;
        match self
            .plain_record(address, &keyed, token, fingerprint, terms)
            .await
        {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Ok(acquisition),
            Err(error) => {
                // Not left holding a key nobody will complete: duplicates would wait a lease.
                let _ = self.inner.release(&keyed, token).await;
                Err(error)
            }
        }
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let keyed = self.keyed(address);
        self.inner.complete(&keyed, token, outcome, ttl).await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        let keyed = self.keyed(address);
        self.inner.release(&keyed, token).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let keyed = self.keyed(address);
        self.inner.renew(&keyed, token, lease).await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        match self.inner.get(&self.keyed(address)).await? {
            None if self.changing_over() => self.inner.get(address).await,
            found => Ok(found),
        }
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let keyed = self.keyed(address);
        self.inner.append_part(&keyed, token, index, part).await
    }

    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let keyed = self.keyed(address);
        self.inner.read_parts(&keyed, token, from, max_bytes).await
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let keyed = self.keyed(address);
        self.inner.discard_parts(&keyed, token).await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let keyed = self.inner.forget(&self.keyed(address)).await?;
        let plain = self.changing_over() && self.inner.forget(address).await?;
        Ok(keyed || plain)
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

    /// The inner store's page: records under their keyed addresses (and, until they age out,
    /// records under plain ones). A scope filter is in the stored form, as listings show it.
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

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        // Through the erased form, whose future names no lifetime: the inner store's own future
        // would borrow the keyed address, which lives only in this call.
        let keyed = self.keyed(address);
        ErasedStore::changed(&self.inner, &keyed)
    }
}

#[cfg(test)]
mod tests;
