//! The store contract on one Redis server (`IDEM_TEST_REDIS_URL`), each test under its own key
//! prefix: every check and the model test on a manual clock, exact to the millisecond, then the
//! time-based checks again on the server's own clock, the path production takes.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod support;

use std::time::Duration;

use idem_conformance::{Subject, checks};
use idem_redis::{RedisOptions, RedisStore};
use idem_test_support::Server;

use support::{RedisSubject, fresh_prefix, redis_url};

async fn subject() -> RedisSubject {
    RedisSubject::open(RedisOptions::new(redis_url())).await
}

idem_conformance::conformance_tests!(subject(), if Server::Redis.url().is_some());

/// The store on the server's clock: moving time means waiting.
struct ServerClockSubject {
    store: RedisStore,
}

impl Subject for ServerClockSubject {
    type Store = RedisStore;

    fn store(&self) -> RedisStore {
        self.store.clone()
    }

    async fn advance(&self, by: Duration) {
        // A millisecond more: the server's clock is read in whole milliseconds.
        tokio::time::sleep(by + Duration::from_millis(1)).await;
    }

    fn tolerance(&self) -> Duration {
        // Round trips and scheduling on a loaded machine, in a check that sleeps seconds.
        Duration::from_millis(250)
    }

    fn lists_in_global_order(&self) -> bool {
        false
    }
}

async fn server_clock_subject() -> ServerClockSubject {
    let options = RedisOptions::new(redis_url()).prefix(fresh_prefix());
    let store = RedisStore::open_with(options)
        .await
        .expect("open the store");
    ServerClockSubject { store }
}

/// The checks that move time, on the server's clock, and those on streamed parts.
/// `purge_expired` is left out (with the check on parts that purges them): there Redis removes
/// expired records and parts itself and the purge finds none (see `server.rs`).
mod server_clock {
    use super::*;

    macro_rules! server_clock_checks {
        ($($check:ident),* $(,)?) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    if Server::Redis.url().is_none() {
                        return;
                    }
                    checks::$check(&server_clock_subject().await).await;
                }
            )*
        };
    }

    server_clock_checks!(
        first_acquire_wins_and_the_second_is_in_flight,
        other_fingerprint_is_a_mismatch_while_processing_and_after_completion,
        released_key_is_free_for_any_request_with_a_larger_token,
        expired_lease_is_taken_over_and_the_old_token_is_fenced,
        late_completion_by_the_current_holder_is_accepted,
        renew_extends_the_lease,
        completed_key_expires_after_its_ttl,
        forget_removes_any_record_and_fences_its_holder,
        record_timestamps_follow_the_terms,
        listing_pages_through_every_record_newest_first,
        listing_filters_by_state_age_and_scope,
        census_counts_live_records_by_state,
        streamed_parts_are_appended_in_order_and_read_from_any_index,
        streamed_parts_are_fenced_and_outlive_the_settlement_until_discarded,
    );
}
