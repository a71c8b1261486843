//! [`InstrumentedStore`]: a [`Store`] that records the latency of every call.

use std::{future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, DynStore, FencingToken, Fingerprint,
    ListPage, ListQuery, Outcome, Pace, Record, Store, StoreError, Terms, Timestamp,
};
use metrics::Histogram;
use tokio::time::Instant;

use super::latency_window::{LatencySnapshot, LatencyWindow};

/// The histogram of store call latencies, labelled by `op`.
pub(crate) const STORE_DURATION: &str = "idem_store_duration_seconds";

/// The store as the gateway uses it: chosen at run time, its calls timed.
pub(crate) type GatewayStore = InstrumentedStore<DynStore>;

/// Wraps a store and records each call's latency in the `idem_store_duration_seconds` histogram, labelled
/// `op="acquire"`, `"complete"`, … (failed calls too). The calls of the request path (`acquire`,
/// `complete`, `release`, `renew`, `get`) also count in the last minute's percentiles that
/// `GET /v1/stats` shows. [`Store::changed`] is passed through, so
/// that waiters wake up when another gateway completes their key.
///
/// The histograms are registered once, in the `metrics` recorder installed when the store is
/// made (none: the latencies go nowhere), so that a call does not look them up.
///
/// # Examples
///
/// ```
/// use idem_core::{DynStore, MemoryStore};
/// use idem_gateway::testing::InstrumentedStore;
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
    list: Histogram,
    census: Histogram,
    append_part: Histogram,
    read_parts: Histogram,
    discard_parts: Histogram,
    /// The request path's calls over the last minute.
    window: LatencyWindow,
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
            list: op("list"),
            census: op("census"),
            append_part: op("append_part"),
            read_parts: op("read_parts"),
            discard_parts: op("discard_parts"),
            window: LatencyWindow::new(),
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

    /// The request path's store calls over the last minute.
    pub(crate) fn last_minute(&self) -> LatencySnapshot {
        self.latency.window.snapshot()
    }
}

async fn timed<T>(histogram: &Histogram, call: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let result = call.await;
    histogram.record(start.elapsed().as_secs_f64());
    result
}

/// [`timed`], and counted in `window`: a lost lease is an answer, not a failure of the store.
async fn windowed<T>(
    histogram: &Histogram,
    window: &LatencyWindow,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let start = Instant::now();
    let result = call.await;
    let ended = Instant::now();
    let elapsed = ended.saturating_duration_since(start);
    histogram.record(elapsed.as_secs_f64());
    let failed = matches!(&result, Err(error) if !matches!(error, StoreError::LeaseLost));
    window.record(ended, elapsed, failed);
    result
}

impl<S: Store> Store for InstrumentedStore<S> {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        windowed(
            &self.latency.acquire,
            &self.latency.window,
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
        windowed(
            &self.latency.complete,
            &self.latency.window,
            self.inner.complete(address, token, outcome, ttl),
        )
        .await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        windowed(
            &self.latency.release,
            &self.latency.window,
            self.inner.release(address, token),
        )
        .await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        windowed(
            &self.latency.renew,
            &self.latency.window,
            self.inner.renew(address, token, lease),
        )
        .await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        windowed(
            &self.latency.get,
            &self.latency.window,
            self.inner.get(address),
        )
        .await
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

    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        timed(&self.latency.list, self.inner.list(query)).await
    }

    /// Timed from its first step to its last, rests included.
    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        timed(&self.latency.census, self.inner.census(pace)).await
    }

    // Not timed: one short call per census, at most.
    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        self.inner.claim_census(claim).await
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        self.inner.post_census(claimant, census, rest).await
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let append = self.inner.append_part(address, token, index, part);
        timed(&self.latency.append_part, append).await
    }

    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let read = self.inner.read_parts(address, token, from, max_bytes);
        timed(&self.latency.read_parts, read).await
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let discard = self.inner.discard_parts(address, token);
        timed(&self.latency.discard_parts, discard).await
    }

    // Not timed: it resolves when another process changes the record, whenever that is.
    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changed(address)
    }
}
