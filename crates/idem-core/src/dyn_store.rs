//! [`DynStore`]: one object-safe store, for choosing the backend at run time.

use std::{future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use futures_util::future::BoxFuture;

use crate::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, FencingToken, Fingerprint, ListPage,
    ListQuery, Outcome, Pace, Record, Store, StoreError, Terms, Timestamp,
};

/// A type-erased [`Store`]: the gateway picks a backend from a URL and hands this to the engine.
///
/// # Examples
///
/// ```
/// use idem_core::{DynStore, MemoryStore};
///
/// let store = DynStore::new(MemoryStore::new());
/// let shared = store.clone(); // cheap: an `Arc`
/// # drop(shared);
/// ```
#[derive(Clone)]
pub struct DynStore(Arc<dyn ErasedStore>);

impl DynStore {
    /// Erases the type of `store`.
    pub fn new(store: impl Store) -> Self {
        Self(Arc::new(store))
    }
}

impl std::fmt::Debug for DynStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DynStore")
    }
}

/// The object-safe mirror of [`Store`].
pub(crate) trait ErasedStore: Send + Sync {
    fn acquire<'a>(
        &'a self,
        address: &'a Address,
        fingerprint: &'a Fingerprint,
        terms: Terms,
    ) -> BoxFuture<'a, Result<Acquisition, StoreError>>;
    fn complete<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        outcome: &'a Outcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn release<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn renew<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Timestamp, StoreError>>;
    fn get<'a>(&'a self, address: &'a Address)
    -> BoxFuture<'a, Result<Option<Record>, StoreError>>;
    fn forget<'a>(&'a self, address: &'a Address) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn purge_expired(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>>;
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>>;
    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Result<ListPage, StoreError>>;
    fn census(&self, pace: Pace) -> BoxFuture<'_, Result<Census, StoreError>>;
    fn claim_census(&self, claim: CensusClaim) -> BoxFuture<'_, Result<CensusTurn, StoreError>>;
    fn post_census<'a>(
        &'a self,
        claimant: u64,
        census: &'a Census,
        rest: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn append_part<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        index: u32,
        part: &'a Bytes,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn read_parts<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<Vec<Bytes>, StoreError>>;
    fn discard_parts<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn changed(&self, address: &Address) -> BoxFuture<'static, ()>;
}

impl<S: Store> ErasedStore for S {
    fn acquire<'a>(
        &'a self,
        address: &'a Address,
        fingerprint: &'a Fingerprint,
        terms: Terms,
    ) -> BoxFuture<'a, Result<Acquisition, StoreError>> {
        Box::pin(Store::acquire(self, address, fingerprint, terms))
    }

    fn complete<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        outcome: &'a Outcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::complete(self, address, token, outcome, ttl))
    }

    fn release<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::release(self, address, token))
    }

    fn renew<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Timestamp, StoreError>> {
        Box::pin(Store::renew(self, address, token, lease))
    }

    fn get<'a>(
        &'a self,
        address: &'a Address,
    ) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(Store::get(self, address))
    }

    fn forget<'a>(&'a self, address: &'a Address) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(Store::forget(self, address))
    }

    fn purge_expired(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(Store::purge_expired(self, limit))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(Store::ping(self))
    }

    fn list<'a>(&'a self, query: &'a ListQuery) -> BoxFuture<'a, Result<ListPage, StoreError>> {
        Box::pin(Store::list(self, query))
    }

    fn census(&self, pace: Pace) -> BoxFuture<'_, Result<Census, StoreError>> {
        Box::pin(Store::census(self, pace))
    }

    fn claim_census(&self, claim: CensusClaim) -> BoxFuture<'_, Result<CensusTurn, StoreError>> {
        Box::pin(Store::claim_census(self, claim))
    }

    fn post_census<'a>(
        &'a self,
        claimant: u64,
        census: &'a Census,
        rest: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(Store::post_census(self, claimant, census, rest))
    }

    fn append_part<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        index: u32,
        part: &'a Bytes,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::append_part(self, address, token, index, part))
    }

    fn read_parts<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<Vec<Bytes>, StoreError>> {
        Box::pin(Store::read_parts(self, address, token, from, max_bytes))
    }

    fn discard_parts<'a>(
        &'a self,
        address: &'a Address,
        token: FencingToken,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::discard_parts(self, address, token))
    }

    fn changed(&self, address: &Address) -> BoxFuture<'static, ()> {
        Box::pin(Store::changed(self, address))
    }
}

impl Store for DynStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        self.0.acquire(address, fingerprint, terms).await
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.0.complete(address, token, outcome, ttl).await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        self.0.release(address, token).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.0.renew(address, token, lease).await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        self.0.get(address).await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        self.0.forget(address).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.0.purge_expired(limit).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }

    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        self.0.list(query).await
    }

    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        self.0.census(pace).await
    }

    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        self.0.claim_census(claim).await
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        self.0.post_census(claimant, census, rest).await
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        self.0.append_part(address, token, index, part).await
    }

    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        self.0.read_parts(address, token, from, max_bytes).await
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        self.0.discard_parts(address, token).await
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.0.changed(address)
    }
}
