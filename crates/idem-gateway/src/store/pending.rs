//! A store that could not be reached at start, opened in the background.
//!
//! A store that is down when the gateway starts (a Redis restarting during a rolling deploy, a
//! database failing over) does not stop it: under an orchestrator that would be a crash loop
//! with a growing back-off, keeping the gateway down for minutes after the store is back. The
//! gateway starts on a [`PendingStore`] instead: until the store is reached, every call answers
//! [`StoreError::Unavailable`] (`/readyz` is 503, keyed requests get the store-unavailable 503,
//! or pass through under `--on-store-error passthrough`), and the store is opened again in the
//! background, every 100 ms at first, then at most every 5 s. A store that answers but refuses
//! (wrong credentials, missing migrations) still stops the start, with its reason.

use std::{
    error::Error as StdError,
    future::Future,
    io::ErrorKind,
    sync::{Arc, OnceLock, Weak},
    time::Duration,
};

use bytes::Bytes;
use futures_util::future::Either;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, DynStore, FencingToken, Fingerprint,
    ListPage, ListQuery, Outcome, Pace, Record, Store, StoreError, Terms, Timestamp,
};

use super::{AtRest, StoreUrl};
use crate::Error;

/// The first wait before a store or database that cannot be reached is tried again, doubled
/// after each failure.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// The waits between attempts to reach what cannot be reached yet: 100 ms, then twice the last,
/// at most 5 s. The gateway's store at start and the relay's outbox database both wait so.
#[derive(Debug)]
pub(crate) struct RetryWaits(Duration);

impl RetryWaits {
    pub(crate) fn new() -> Self {
        Self(FIRST_RETRY)
    }

    /// The wait before the next attempt.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.0;
        self.0 = (wait * 2).min(MAX_RETRY);
        wait
    }
}

/// A store being opened in the background: unavailable until it is.
#[derive(Debug, Clone)]
pub(crate) struct PendingStore {
    opened: Arc<OnceLock<DynStore>>,
}

impl PendingStore {
    /// Opens the store at `url` (its records protected as `at_rest` says), or, when it cannot be
    /// reached, a [`PendingStore`] that keeps opening it in a task of its own. A store that
    /// answers and refuses is an error, as from [`StoreUrl::open_at_rest`].
    pub(crate) async fn open(url: &StoreUrl, at_rest: &AtRest) -> Result<DynStore, Error> {
        match url.open_at_rest(at_rest).await {
            Ok(store) => Ok(store),
            Err(error) if unreachable(&error) => {
                tracing::warn!(
                    error = &error as &(dyn StdError + 'static),
                    "the store cannot be reached: starting without it, not ready until it is"
                );
                let pending = Self {
                    opened: Arc::new(OnceLock::new()),
                };
                tokio::spawn(keep_opening(
                    url.clone(),
                    at_rest.clone(),
                    Arc::downgrade(&pending.opened),
                ));
                Ok(DynStore::new(pending))
            }
            Err(error) => Err(error),
        }
    }

    fn store(&self) -> Result<&DynStore, StoreError> {
        self.opened
            .get()
            .ok_or_else(|| StoreError::unavailable("the store has not been reached since start"))
    }
}

/// Opens `url` until it opens, or until the [`PendingStore`] is gone.
async fn keep_opening(url: StoreUrl, at_rest: AtRest, opened: Weak<OnceLock<DynStore>>) {
    let mut waits = RetryWaits::new();
    loop {
        tokio::time::sleep(waits.next_wait()).await;
        let Some(slot) = opened.upgrade() else {
            return;
        };
        match url.open_at_rest(&at_rest).await {
            Ok(store) => {
                let _ = slot.set(store);
                tracing::info!(store = %url, "the store is reached");
                return;
            }
            Err(error) if unreachable(&error) => {
                tracing::debug!(
                    error = &error as &(dyn StdError + 'static),
                    "the store is still unreachable"
                );
            }
            Err(error) => {
                tracing::error!(
                    error = &error as &(dyn StdError + 'static),
                    "the store answers but refuses the gateway; trying again"
                );
            }
        }
    }
}

/// Whether `error` is a failure to connect (refused, reset, timed out, no route), rather than a
/// server that answered and refused: a failure worth trying again unchanged.
pub(crate) fn unreachable(error: &(dyn StdError + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(redis) = error.downcast_ref::<idem_redis::Error>() {
            return redis.is_unreachable();
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::TimedOut
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
                    | ErrorKind::AddrNotAvailable
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            );
        }
        cause = error.source();
    }
    false
}

impl Store for PendingStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        self.store()?.acquire(address, fingerprint, terms).await
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.store()?.complete(address, token, outcome, ttl).await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        self.store()?.release(address, token).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.store()?.renew(address, token, lease).await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        self.store()?.get(address).await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        self.store()?.forget(address).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.store()?.purge_expired(limit).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.store()?.ping().await
    }

    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        self.store()?.list(query).await
    }

    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        self.store()?.census(pace).await
    }

    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        self.store()?.claim_census(claim).await
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        self.store()?.post_census(claimant, census, rest).await
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        self.store()?.append_part(address, token, index, part).await
    }

    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        self.store()?
            .read_parts(address, token, from, max_bytes)
            .await
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        self.store()?.discard_parts(address, token).await
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        match self.opened.get() {
            Some(store) => Either::Left(store.changed(address)),
            // Not reached yet: the engine polls with backoff, and every call is refused anyway.
            None => Either::Right(std::future::pending()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waits_double_from_100_ms_up_to_5_s() {
        let mut waits = RetryWaits::new();
        let millis: Vec<u128> = (0..9).map(|_| waits.next_wait().as_millis()).collect();
        assert_eq!(millis, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    }

    #[test]
    fn a_refused_connection_is_unreachable_and_a_refusal_is_not() {
        let opening = |source: Box<dyn StdError + Send + Sync>| Error::OpenStore {
            url: "redis://127.0.0.1:1".to_owned(),
            source,
        };
        let refused = std::io::Error::from(ErrorKind::ConnectionRefused);
        assert!(unreachable(&opening(Box::new(refused))));
        let timed_out = std::io::Error::from(ErrorKind::TimedOut);
        assert!(unreachable(&opening(Box::new(timed_out))));
        let tls = std::io::Error::new(ErrorKind::InvalidData, "unknown issuer");
        assert!(!unreachable(&opening(Box::new(tls))));
        assert!(!unreachable(&opening(
            "the idem table has not been created".into()
        )));
    }
}
