//! [`Sealed`]: a store wrapper that keeps stored responses encrypted.

use std::{fmt, future::Future, sync::Arc, time::Duration};

use crate::{
    Acquisition, Address, Census, FencingToken, Fingerprint, ListPage, ListQuery, Outcome, Record,
    RecordState, Store, StoreError, Terms, Timestamp,
    sealing::{
        KeyRing, SealingError,
        envelope::{self, is_sealed},
    },
};

/// A [`Store`] whose completed outcomes (a response's status, headers, body and trailers, or
/// [`Outcome::Unknown`]) are sealed with XChaCha20-Poly1305 before they reach the inner store,
/// and opened when read back.
///
/// What stays in clear, because the store's atomic decisions need it: the address (the scope is
/// a hash already; SQL stores keep a digest of the key), the fingerprint, the state, the tokens
/// and the timestamps.
///
/// A sealed record that does not open (altered, copied to another address, sealed with a key
/// that has left the ring) is [`StoreError::Corrupted`]: never replayed, never executed again.
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
    accept_plaintext: bool,
    on_plaintext: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl<S: fmt::Debug> fmt::Debug for Sealed<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("inner", &self.inner)
            .field("ring", &self.ring)
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
            accept_plaintext: false,
            on_plaintext: None,
        }
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

    fn open(&self, address: &Address, outcome: Outcome) -> Result<Outcome, StoreError> {
        match outcome {
            Outcome::Response(sealed) if is_sealed(&sealed) => {
                envelope::open(&self.ring, address, sealed).map_err(StoreError::corrupted)
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
}

impl<S: Store> Store for Sealed<S> {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        match self.inner.acquire(address, fingerprint, terms).await? {
            Acquisition::Completed(outcome) => {
                Ok(Acquisition::Completed(self.open(address, outcome)?))
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
        let sealed = envelope::seal(&self.ring, address, outcome).map_err(|error| match error {
            SealingError::Random(_) => StoreError::unavailable(error),
            other => StoreError::corrupted(other),
        })?;
        self.inner
            .complete(address, token, &Outcome::Response(sealed), ttl)
            .await
    }

    fn release(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.release(address, token)
    }

    fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        self.inner.renew(address, token, lease)
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
                outcome: self.open(address, outcome)?,
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

    fn census(&self) -> impl Future<Output = Result<Census, StoreError>> + Send {
        self.inner.census()
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changed(address)
    }
}
