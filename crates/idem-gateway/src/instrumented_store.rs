//! [`InstrumentedStore`]: a [`Store`] that records the latency of every call.

use std::{future::Future, time::Duration};

use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, Record, Store, StoreError, StoredResponse,
    Terms, Timestamp,
};
use tokio::time::Instant;

/// The histogram of store call latencies, labelled by `op`.
pub const STORE_DURATION: &str = "idem_store_duration_seconds";

/// Wraps a store and records each call's latency in the [`STORE_DURATION`] histogram, labelled
/// `op="acquire"`, `"complete"`, … (failed calls too). [`Store::changed`] is passed through, so
/// that waiters wake up when another gateway completes their key.
///
/// # Examples
///
/// ```
/// use idem_core::{DynStore, MemoryStore};
/// use idem_gateway::InstrumentedStore;
///
/// let store = InstrumentedStore::new(DynStore::new(MemoryStore::new()));
/// # drop(store);
/// ```
#[derive(Debug, Clone)]
pub struct InstrumentedStore<S> {
    inner: S,
}

impl<S> InstrumentedStore<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

async fn timed<T>(op: &'static str, call: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let result = call.await;
    metrics::histogram!(STORE_DURATION, "op" => op).record(start.elapsed().as_secs_f64());
    result
}

impl<S: Store> Store for InstrumentedStore<S> {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        timed("acquire", self.inner.acquire(address, fingerprint, terms)).await
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        timed(
            "complete",
            self.inner.complete(address, token, response, ttl),
        )
        .await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        timed("release", self.inner.release(address, token)).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        timed("renew", self.inner.renew(address, token, lease)).await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        timed("get", self.inner.get(address)).await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        timed("forget", self.inner.forget(address)).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        timed("purge_expired", self.inner.purge_expired(limit)).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        timed("ping", self.inner.ping()).await
    }

    // Not timed: it resolves when another process changes the record, whenever that is.
    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changed(address)
    }
}
