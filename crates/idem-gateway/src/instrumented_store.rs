//! [`InstrumentedStore`]: a [`Store`] that records the latency of every call.

use std::{future::Future, sync::Arc, time::Duration};

use idem_core::{
    Acquisition, Address, DynStore, FencingToken, Fingerprint, Outcome, Record, Store, StoreError,
    Terms, Timestamp,
};
use metrics::Histogram;
use tokio::time::Instant;

/// The histogram of store call latencies, labelled by `op`.
pub const STORE_DURATION: &str = "idem_store_duration_seconds";

/// The store as the gateway uses it: chosen at run time, its calls timed.
pub type GatewayStore = InstrumentedStore<DynStore>;

/// Wraps a store and records each call's latency in the [`STORE_DURATION`] histogram, labelled
/// `op="acquire"`, `"complete"`, … (failed calls too). [`Store::changed`] is passed through, so
/// that waiters wake up when another gateway completes their key.
///
/// The histograms are registered once, in the `metrics` recorder installed when the store is
/// made (none: the latencies go nowhere), so that a call does not look them up.
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
    latency: Arc<Latency>,
}

/// One histogram per store operation.
#[derive(Debug)]
struct Latency {
    acquire: Histogram,
    complete: Histogram,
    release: Histogram,
    renew: Histogram,
    get: Histogram,
    forget: Histogram,
    purge_expired: Histogram,
    ping: Histogram,
}

impl Latency {
    fn register() -> Self {
        let op = |op: &'static str| metrics::histogram!(STORE_DURATION, "op" => op);
        Self {
            acquire: op("acquire"),
            complete: op("complete"),
            release: op("release"),
            renew: op("renew"),
            get: op("get"),
            forget: op("forget"),
            purge_expired: op("purge_expired"),
            ping: op("ping"),
        }
    }
}

impl<S> InstrumentedStore<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            latency: Arc::new(Latency::register()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

async fn timed<T>(histogram: &Histogram, call: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let result = call.await;
    histogram.record(start.elapsed().as_secs_f64());
    result
}

impl<S: Store> Store for InstrumentedStore<S> {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        timed(
            &self.latency.acquire,
            self.inner.acquire(address, fingerprint, terms),
        )
        .await
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        timed(
            &self.latency.complete,
            self.inner.complete(address, token, outcome, ttl),
        )
        .await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        timed(&self.latency.release, self.inner.release(address, token)).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        timed(&self.latency.renew, self.inner.renew(address, token, lease)).await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        timed(&self.latency.get, self.inner.get(address)).await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        timed(&self.latency.forget, self.inner.forget(address)).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        timed(&self.latency.purge_expired, self.inner.purge_expired(limit)).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        timed(&self.latency.ping, self.inner.ping()).await
    }

    // Not timed: it resolves when another process changes the record, whenever that is.
    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changed(address)
    }
}
