//! An upstream that loses its connection after the request: with `--ambiguous reject` the
//! outcome is unknown and final; by default the key is released and the request retried.

use std::time::Duration;

use idem_client::{Client, Error, GiveUpReason};
use idem_core::Ambiguous;

use crate::support::{BrokenUpstream, gateway, gave_up_on_status, problem_type};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_unknown_is_final_and_not_retried() {
    let upstream = BrokenUpstream::start().await;
    let gateway = gateway(&upstream.url(), |config| {
        config.idempotency.policy.ambiguous = Ambiguous::Reject;
    })
    .await;
    let client = Client::new();

    for replayed in [false, true] {
        let error = client
            .post(format!("{gateway}/orders"))
            .key("order-unknown")
            .body("charge 10 EUR")
            .send()
            .await
            .unwrap_err();
        let Error::OutcomeUnknown {
            key,
            attempts,
            problem,
            response,
        } = error
        else {
            panic!("expected OutcomeUnknown, got {error:?}");
        };
        assert_eq!(key.as_str(), "order-unknown");
        assert_eq!(attempts, 1);
        assert_eq!(response.status(), 500);
        assert_eq!(response.replayed(), replayed);
        assert_eq!(problem_type(&response), "urn:idem:problem:outcome-unknown");
        assert_eq!(problem.kind, "urn:idem:problem:outcome-unknown");
        assert_eq!(problem.status, Some(500));
        assert_eq!(Some(problem), response.problem());
        assert_eq!(upstream.requests(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_lost_upstream_connection_is_retried() {
    let upstream = BrokenUpstream::start().await;
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let client = Client::builder()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(10))
        .build();

    let error = client
        .post(format!("{gateway}/orders"))
        .body("charge 10 EUR")
        .send()
        .await
        .unwrap_err();
    let (attempts, reason, last) = gave_up_on_status(error);
    assert_eq!(attempts, 3);
    assert_eq!(reason, GiveUpReason::MaxAttempts);
    assert_eq!(last.status(), 502);
    assert_eq!(problem_type(&last), "urn:idem:problem:upstream-failed");
    assert_eq!(upstream.requests(), 3);
}
