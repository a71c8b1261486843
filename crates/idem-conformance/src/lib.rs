//! The [`Store`](idem_core::Store) contract as one test suite that every store runs.
//!
//! Each check is a plain generic `async fn` over a [`Subject`]: a fresh store plus a way to move
//! its clock. A store crate stamps them all out as tests with [`conformance_tests!`]:
//!
//! ```text
//! // crates/idem-sqlite/tests/conformance.rs
//! idem_conformance::conformance_tests!(subject());
//! ```
//!
//! where `subject()` is an `async` expression that builds a fresh [`Subject`] for one test.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

pub mod checks;
pub mod model;
mod subject;

pub use subject::{ManualSubject, Subject};

/// Stamps out every check of [`checks`] and the [`model`] test as `#[tokio::test]`s.
///
/// `$subject` is an expression evaluated once per test that yields a future of a fresh
/// [`Subject`] (one store, empty, used by that test alone).
///
/// A store on a server that may not be configured adds `if $ready`: a `bool` expression
/// evaluated first in every test, which returns at once when it is false (the expression says
/// why on stderr), as in `conformance_tests!(subject(), if server_configured())`.
#[macro_export]
macro_rules! conformance_tests {
    ($subject:expr, if $ready:expr) => {
        $crate::conformance_tests!(@each $subject; $ready;
            first_acquire_wins_and_the_second_is_in_flight,
            completed_key_replays_the_response_byte_for_byte,
            unknown_outcome_round_trips,
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
            one_census_at_a_time_among_the_processes_sharing_the_store,
            sealed_outcomes_are_bound_to_what_replays_read,
            streamed_parts_are_appended_in_order_and_read_from_any_index,
            streamed_parts_are_fenced_and_outlive_the_settlement_until_discarded,
            streamed_parts_expire_with_their_record,
        );

        #[test]
        fn matches_the_reference_model() {
            if !$ready {
                return;
            }
            $crate::model::check(|| $subject);
        }
    };
    ($subject:expr) => {
        $crate::conformance_tests!($subject, if true);
    };
    (@each $subject:expr; $ready:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                if !$ready {
                    return;
                }
                let subject = $subject.await;
                $crate::checks::$check(&subject).await;
            }
        )*
    };
}
