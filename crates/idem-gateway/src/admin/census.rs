//! [`CensusKeeper`]: the store's record counts, recounted in the background at a pace that keeps
//! their cost small, for `GET /v1/stats` and the gauges behind the stuck-keys alert.
//!
//! A census may read every record (Redis, and the completed count elsewhere), so it is never
//! run per request: one task recounts, then rests nineteen times as long as the count took
//! (at least five seconds), so counting takes at most 5% of the store's time whatever its size.
//! The gauges are
//!
//! | metric | what |
//! | --- | --- |
//! | `idem_records{state="processing"\|"completed"}` | live records, at the last census |
//! | `idem_oldest_processing_age_seconds` | the oldest processing record's age at the last census (0 when none) |
//! | `idem_lease_seconds` | the configured lease, for alert rules ("older than two leases") |

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use idem_core::{Census, Store, StoreError, Timestamp, time_limit::within};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::GatewayStore;

/// The gauge of live records by state.
pub(crate) const RECORDS: &str = "idem_records";
/// The gauge of the oldest processing record's age.
pub(crate) const OLDEST_PROCESSING_AGE: &str = "idem_oldest_processing_age_seconds";
/// The gauge of the configured lease.
pub(crate) const LEASE: &str = "idem_lease_seconds";

/// The least time between two censuses.
const MIN_REST: Duration = Duration::from_secs(5);
/// How many times its own duration a census rests before the next: counting takes at most
/// 1/(1 + 19) = 5% of the time.
const REST_FACTOR: u32 = 19;
/// The longest a census may take: ten minutes reads tens of millions of Redis records.
const TIME_LIMIT: Duration = Duration::from_secs(600);

/// The last census, when there has been one.
#[derive(Debug, Default)]
pub(crate) struct CensusKeeper {
    latest: Mutex<Option<Counted>>,
}

/// A census and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) census: Census,
    /// When the count finished, by this process's clock.
    pub(crate) at: Timestamp,
}

impl CensusKeeper {
    /// The last census.
    pub(crate) fn latest(&self) -> Option<Counted> {
        *self
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn keep(&self, counted: Counted) {
        *self
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(counted);
    }

    /// Counts the records of `store` until cancelled, at most 5% of the time, setting the
    /// gauges after each count. A store that cannot count (a store of another crate that does
    /// not implement [`Store::census`]) is counted once, and the gauges stay unset.
    pub(crate) async fn run(
        self: Arc<Self>,
        store: GatewayStore,
        lease: Duration,
        cancel: CancellationToken,
    ) {
        metrics::gauge!(LEASE).set(lease.as_secs_f64());
        let processing = metrics::gauge!(RECORDS, "state" => "processing");
        let completed = metrics::gauge!(RECORDS, "state" => "completed");
        let oldest_age = metrics::gauge!(OLDEST_PROCESSING_AGE);
        loop {
            let start = Instant::now();
            let counted = tokio::select! {
                () = cancel.cancelled() => return,
                counted = within(TIME_LIMIT, store.census()) => counted,
            };
            let took = start.elapsed();
            match counted {
                Ok(census) => {
                    let at = Timestamp::from_system_time(SystemTime::now());
                    processing.set(census.processing as f64);
                    completed.set(census.completed as f64);
                    let age = census
                        .oldest_processing
                        .map_or(Duration::ZERO, |oldest| at.saturating_since(oldest));
                    oldest_age.set(age.as_secs_f64());
                    self.keep(Counted { census, at });
                }
                Err(StoreError::Unsupported { operation }) => {
                    tracing::info!(operation, "the store cannot count its records");
                    return;
                }
                Err(error) => tracing::warn!(
                    error = &error as &(dyn std::error::Error + 'static),
                    "counting the store's records failed"
                ),
            }
            let rest = (took * REST_FACTOR).max(MIN_REST);
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(rest) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use idem_core::{Acquisition, Address, DynStore, Fingerprint, ManualClock, MemoryStore, Terms};

    use super::*;
    use crate::store::InstrumentedStore;

    #[tokio::test(start_paused = true)]
    async fn the_census_is_retaken_after_its_rest() {
        let clock = ManualClock::new(Timestamp::from_millis(1_767_225_600_000));
        let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
        let store = InstrumentedStore::new(DynStore::new(Arc::clone(&memory)));
        let keeper = Arc::new(CensusKeeper::default());
        let cancel = CancellationToken::new();
        let task =
            tokio::spawn(Arc::clone(&keeper).run(store, Duration::from_secs(30), cancel.clone()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let first = keeper.latest().expect("counted at start");
        assert_eq!(first.census, Census::default());

        let terms = Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(60),
        };
        let address = Address::anonymous("order-42".parse().unwrap());
        let acquired = memory
            .acquire(&address, &Fingerprint::from_bytes([1; 32]), terms)
            .await
            .unwrap();
        assert!(matches!(acquired, Acquisition::Acquired(_)));
        // Not recounted before the rest is over...
        tokio::time::sleep(MIN_REST - Duration::from_millis(10)).await;
        assert_eq!(keeper.latest().unwrap().census, Census::default());
        // ...and recounted after.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            keeper.latest().unwrap().census,
            Census {
                processing: 1,
                completed: 0,
                oldest_processing: Some(Timestamp::from_millis(1_767_225_600_000)),
            }
        );
        cancel.cancel();
        task.await.unwrap();
    }
}
