//! The contract's checks on the production path: the database server's clock (`$1` bound to
//! `NULL`), time moved by really waiting, durations compared within a tolerance. The model test,
//! which moves time by up to 11 seconds per step, runs on the manual clock only
//! (`tests/conformance.rs`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use idem_conformance::{Subject, checks};
use idem_postgres::PostgresStore;
use idem_test_support::require;

use common::TestSchema;

/// A store in its own schema, on the server's clock.
struct ServerClockSubject {
    store: PostgresStore,
    schema: TestSchema,
}

impl Subject for ServerClockSubject {
    type Store = PostgresStore;

    fn store(&self) -> PostgresStore {
        self.store.clone()
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }

    /// The statements and the scheduler on a shared 2-core machine, and a reopened store's new
    /// connections (with `sslmode=prefer`, each a TLS handshake: about 100 ms in a debug build);
    /// far below any lease.
    fn tolerance(&self) -> Duration {
        Duration::from_millis(500)
    }
}

async fn subject(url: &str) -> ServerClockSubject {
    let schema = TestSchema::new(url);
    ServerClockSubject {
        store: schema.server_clock_store().await,
        schema,
    }
}

macro_rules! server_clock_checks {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let url = require!(Postgres);
                checks::$check(&subject(&url).await).await;
            }
        )*
    };
}

server_clock_checks!(
    first_acquire_wins_and_the_second_is_in_flight,
    completed_key_replays_the_response_byte_for_byte,
    other_fingerprint_is_a_mismatch_while_processing_and_after_completion,
    concurrent_acquires_elect_exactly_one_holder,
    released_key_is_free_for_any_request_with_a_larger_token,
    expired_lease_is_taken_over_and_the_old_token_is_fenced,
    late_completion_by_the_current_holder_is_accepted,
    renew_extends_the_lease,
    completed_key_expires_after_its_ttl,
    purge_removes_only_expired_records_in_bounded_batches,
    scopes_are_independent,
    large_binary_response_round_trips,
    forget_removes_any_record_and_fences_its_holder,
    settled_records_refuse_every_token,
    record_timestamps_follow_the_terms,
    listing_pages_through_every_record_newest_first,
    listing_filters_by_state_age_and_scope,
    census_counts_live_records_by_state,
    streamed_parts_are_appended_in_order_and_read_from_any_index,
    streamed_parts_are_fenced_and_outlive_the_settlement_until_discarded,
    streamed_parts_expire_with_their_record,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_survive_a_restart() {
    let url = require!(Postgres);
    let subject = subject(&url).await;
    let schema = &subject.schema;
    checks::records_survive_a_restart(&subject, |store| async move {
        store.close().await;
        schema.server_clock_store().await
    })
    .await;
}
