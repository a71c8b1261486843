//! [`CensusKeeper`]: the store's record counts, recounted in the background at a pace that keeps
//! their cost small, once for every gateway that shares the store, for `GET /v1/stats` and the
//! gauges behind the stuck-keys alert.
//!
//! A census may read every record, so it is never run per request, and it is taken for the whole
//! fleet: each gateway asks the store's census board for the next one
//! ([`Store::claim_census`]); the one given it counts, renewing its claim as it goes, and posts
//! the counts ([`Store::post_census`]); the others read them from the board. Counting reads the
//! records in bounded steps and rests after each at [`Pace::DEFAULT`], so that it takes at most
//! 5% of the store's time while it runs; the next census is due as long after as this one took
//! (at least five seconds). A gateway that stops counting half-way leaves the census to another
//! once its claim runs out ([`HOLD`]). The gauges are
//!
//! | metric | what |
//! | --- | --- |
//! | `idem_records{state="processing"\|"completed"}` | live records, at the last census |
//! | `idem_oldest_processing_age_seconds` | the oldest processing record's age at the last census (0 when none) |
//! | `idem_lease_seconds` | the configured lease, for alert rules ("older than two leases") |

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime},
};

use idem_core::{
    Census, CensusClaim, CensusTurn, Pace, Store, StoreError, Timestamp, time_limit::within,
};
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
/// How long a claim on the census holds unless renewed: a gateway that stops counting leaves
/// the census to another after at most this long.
pub(crate) const HOLD: Duration = Duration::from_secs(60);
/// How often a counting gateway renews its claim.
const RENEW_EVERY: Duration = Duration::from_secs(20);
/// The longest a waiting gateway goes without reading the board: a census another gateway
/// posts shows here at most this late.
const MAX_WAIT: Duration = Duration::from_secs(15);
/// The time limit of a call to the board.
const BOARD_CALL_LIMIT: Duration = Duration::from_secs(10);
/// The longest a census may take: at the default pace, an hour reads about 30 million Redis
/// records, or a few hundred million SQL rows.
const TIME_LIMIT: Duration = Duration::from_secs(3600);

/// The last census, when there has been one, and whether this gateway is counting now.
#[derive(Debug, Default)]
pub(crate) struct CensusKeeper {
    latest: Mutex<Option<Counted>>,
    counting: AtomicBool,
}

/// A census and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) census: Census,
    /// When the count finished: by this process's clock when it counted, by the store's when
    /// another gateway did.
    pub(crate) at: Timestamp,
    /// Whether this gateway counted it.
    pub(crate) here: bool,
}

/// The gauges a census sets.
struct Gauges {
    processing: metrics::Gauge,
    completed: metrics::Gauge,
    oldest_age: metrics::Gauge,
}

impl CensusKeeper {
    /// The last census.
    pub(crate) fn latest(&self) -> Option<Counted> {
        *self
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this gateway is counting the store's records now.
    pub(crate) fn counting(&self) -> bool {
        self.counting.load(Ordering::Relaxed)
    }

    /// Keeps `counted` and sets the gauges; a census read from the board that holds the counts
    /// kept already (this gateway's own, posted) is not news.
    fn keep(&self, counted: Counted, gauges: &Gauges) {
        let mut latest = self
            .latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !counted.here && latest.is_some_and(|latest| latest.census == counted.census) {
            return;
        }
        *latest = Some(counted);
        let census = counted.census;
        gauges.processing.set(census.processing as f64);
        gauges.completed.set(census.completed as f64);
        let age = census
            .oldest_processing
            .map_or(Duration::ZERO, |oldest| counted.at.saturating_since(oldest));
        gauges.oldest_age.set(age.as_secs_f64());
    }

    /// Takes or reads the fleet's census of `store` until cancelled, setting the gauges after
    /// each. A store that cannot count (a store of another crate that does not implement
    /// [`Store::census`]) is asked once, and the gauges stay unset.
    pub(crate) async fn run(
        self: Arc<Self>,
        store: GatewayStore,
        lease: Duration,
        cancel: CancellationToken,
    ) {
        metrics::gauge!(LEASE).set(lease.as_secs_f64());
        let gauges = Gauges {
            processing: metrics::gauge!(RECORDS, "state" => "processing"),
            completed: metrics::gauge!(RECORDS, "state" => "completed"),
            oldest_age: metrics::gauge!(OLDEST_PROCESSING_AGE),
        };
        let claim = CensusClaim {
            claimant: fastrand::u64(..),
            hold: HOLD,
        };
        loop {
            let turn = tokio::select! {
                () = cancel.cancelled() => return,
                turn = within(BOARD_CALL_LIMIT, store.claim_census(claim)) => turn,
            };
            if let Some(last) = turn.as_ref().ok().and_then(CensusTurn::last) {
                let counted = Counted {
                    census: last.census,
                    at: last.at,
                    here: false,
                };
                self.keep(counted, &gauges);
            }
            let wait = match turn {
                Ok(CensusTurn::Count { .. }) => {
                    self.counting.store(true, Ordering::Relaxed);
                    let counted = tokio::select! {
                        () = cancel.cancelled() => return,
                        counted = self.count(&store, claim) => counted,
                    };
                    self.counting.store(false, Ordering::Relaxed);
                    match counted {
                        Ok(Some((census, rest))) => {
                            let at = Timestamp::from_system_time(SystemTime::now());
                            let here = true;
                            self.keep(Counted { census, at, here }, &gauges);
                            rest
                        }
                        Ok(None) => MIN_REST,
                        Err(StoreError::Unsupported { operation }) => {
                            tracing::info!(operation, "the store cannot count its records");
                            return;
                        }
                        Err(error) => {
                            tracing::warn!(
                                error = &error as &(dyn std::error::Error + 'static),
                                "counting the store's records failed"
                            );
                            MIN_REST
                        }
                    }
                }
                Ok(CensusTurn::Wait { retry_after, .. }) => retry_after.clamp(MIN_REST, MAX_WAIT),
                Err(error) => {
                    tracing::warn!(
                        error = &error as &(dyn std::error::Error + 'static),
                        "asking the store for the next census failed"
                    );
                    MIN_REST
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Counts the records under `claim`, renewing it as it goes, and posts the census: the
    /// census and the rest before the next, or `None` when another gateway took the claim over
    /// meanwhile (its census is the one that counts).
    async fn count(
        &self,
        store: &GatewayStore,
        claim: CensusClaim,
    ) -> Result<Option<(Census, Duration)>, StoreError> {
        let start = Instant::now();
        let counting = within(TIME_LIMIT, store.census(Pace::DEFAULT));
        tokio::pin!(counting);
        let mut renew = tokio::time::interval_at(start + RENEW_EVERY, RENEW_EVERY);
        let census = loop {
            tokio::select! {
                census = &mut counting => break census?,
                _ = renew.tick() => {
                    match within(BOARD_CALL_LIMIT, store.claim_census(claim)).await {
                        Ok(CensusTurn::Count { .. }) => {}
                        Ok(CensusTurn::Wait { .. }) => {
                            tracing::info!("another gateway took the census over");
                            return Ok(None);
                        }
                        // Counting goes on: the claim holds for a while yet.
                        Err(error) => tracing::warn!(
                            error = &error as &(dyn std::error::Error + 'static),
                            "renewing the claim on the census failed"
                        ),
                    }
                }
            }
        };
        let rest = start.elapsed().max(MIN_REST);
        match within(
            BOARD_CALL_LIMIT,
            store.post_census(claim.claimant, &census, rest),
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!("another gateway took the census over before it was posted")
            }
            Err(error) => tracing::warn!(
                error = &error as &(dyn std::error::Error + 'static),
                "posting the census failed"
            ),
        }
        Ok(Some((census, rest)))
    }
}

#[cfg(test)]
mod tests {
    use idem_core::{Acquisition, Address, DynStore, Fingerprint, ManualClock, MemoryStore, Terms};

    use super::*;
    use crate::store::InstrumentedStore;

    const START: Timestamp = Timestamp::from_millis(1_767_225_600_000);

    fn keeper(
        memory: &Arc<MemoryStore>,
        cancel: &CancellationToken,
    ) -> (Arc<CensusKeeper>, tokio::task::JoinHandle<()>) {
        let store = InstrumentedStore::new(DynStore::new(Arc::clone(memory)));
        let keeper = Arc::new(CensusKeeper::default());
        let lease = Duration::from_secs(30);
        let task = tokio::spawn(Arc::clone(&keeper).run(store, lease, cancel.clone()));
        (keeper, task)
    }

    #[tokio::test(start_paused = true)]
    async fn the_census_is_retaken_after_its_rest() {
        let clock = ManualClock::new(START);
        let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
        let cancel = CancellationToken::new();
        let (keeper, task) = keeper(&memory, &cancel);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let first = keeper.latest().expect("counted at start");
        assert_eq!(first.census, Census::default());
        assert!(first.here);

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
        tokio::time::sleep(MIN_REST - Duration::from_millis(200)).await;
        assert_eq!(keeper.latest().unwrap().census, Census::default());
        // ...and recounted after, when the store's clock says the next census is due.
        clock.advance(MIN_REST);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            keeper.latest().unwrap().census,
            Census {
                processing: 1,
                completed: 0,
                oldest_processing: Some(START),
            }
        );
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn gateways_sharing_a_store_take_one_census_and_all_read_it() {
        let clock = ManualClock::new(START);
        let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
        let cancel = CancellationToken::new();
        let gateways: Vec<_> = (0..3).map(|_| keeper(&memory, &cancel)).collect();
        // The first to claim counts; the others read its census from the board.
        tokio::time::sleep(MAX_WAIT + Duration::from_secs(1)).await;
        let seen: Vec<Counted> = gateways
            .iter()
            .map(|(keeper, _)| keeper.latest().expect("every gateway has the census"))
            .collect();
        assert_eq!(seen.iter().filter(|counted| counted.here).count(), 1);
        assert!(
            seen.iter()
                .all(|counted| counted.census == Census::default())
        );
        cancel.cancel();
        for (_, task) in gateways {
            task.await.unwrap();
        }
    }
}
