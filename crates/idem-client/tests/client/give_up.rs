//! Answers that stay transient: the retries end at the last attempt or at the deadline.

use std::time::Duration;

use idem_client::{Client, Error, GiveUpReason, LastFailure};
use idem_core::InFlight;
use serde_json::json;
use tokio::time::Instant;

use crate::support::{Upstream, gateway, gave_up_on_status, gave_up_on_transport, problem_type};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_503_is_retried_until_the_attempts_run_out() {
    let upstream = Upstream::start().await;
    // By default a 5xx releases the key, so each retry executes again.
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let client = Client::builder()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(10))
        .build();

    let request = client.post(format!("{gateway}/status/503"));
    let key = request.key_str().to_owned();
    let error = request.send().await.unwrap_err();

    let Error::GaveUp {
        key: gave_up_key,
        attempts,
        reason,
        last: LastFailure::Status(last),
    } = error
    else {
        panic!("expected GaveUp with a status, got {error:?}");
    };
    assert_eq!(gave_up_key.as_str(), key);
    assert_eq!(attempts, 3);
    assert_eq!(reason, GiveUpReason::MaxAttempts);
    assert_eq!(last.status(), 503);
    assert_eq!(last.body(), "status 503");
    assert_eq!(last.attempts(), 3);
    assert!(!last.replayed());
    assert_eq!(upstream.executions(&key), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_ends_the_retries_of_an_upstream_that_never_answers() {
    let upstream = Upstream::start().await;
    // Retries wait for the first attempt's result instead of getting a 409.
    let gateway = gateway(&upstream.url(), |config| {
        config.idempotency.policy.in_flight = InFlight::Wait {
            timeout: Duration::from_secs(60),
        };
    })
    .await;
    let client = Client::builder()
        .max_attempts(100)
        .deadline(Duration::from_millis(1500))
        .attempt_timeout(Duration::from_millis(400))
        .initial_backoff(Duration::from_millis(50))
        .build();

    let order = client
        .post(format!("{gateway}/orders"))
        .header("x-delay-ms", "60000")
        .json(&json!({ "amount": 10 }));
    let key = order.key_str().to_owned();
    let start = Instant::now();
    let error = order.send().await.unwrap_err();
    let elapsed = start.elapsed();

    let (attempts, reason, last) = gave_up_on_transport(error);
    assert_eq!(reason, GiveUpReason::Deadline);
    // At least a whole attempt and a part of another fit in the deadline; each attempt
    // lasts its timeout, or what is left of the deadline.
    assert!((2..=5).contains(&attempts), "{attempts} attempts");
    assert!(last.is_timeout(), "{last:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(upstream.executions(&key), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_deadline_is_not_waited() {
    let upstream = Upstream::start().await;
    // The 409's Retry-After is the lease's remaining time: 7 to 10 s.
    let gateway = gateway(&upstream.url(), |config| {
        config.idempotency.policy.in_flight = InFlight::Reject;
        config.idempotency.policy.lease = Duration::from_secs(10);
    })
    .await;
    let deadline = Duration::from_secs(3);
    let client = Client::builder()
        .deadline(deadline)
        .attempt_timeout(Duration::from_millis(300))
        .initial_backoff(Duration::from_millis(50))
        .build();

    let order = client
        .post(format!("{gateway}/orders"))
        .header("x-delay-ms", "5000")
        .json(&json!({ "amount": 10 }));
    let key = order.key_str().to_owned();
    let start = Instant::now();
    let error = order.send().await.unwrap_err();
    let elapsed = start.elapsed();

    let (attempts, reason, last) = gave_up_on_status(error);
    // 1: timed out; 2: 409, whose Retry-After ends past the deadline.
    assert_eq!(reason, GiveUpReason::Deadline);
    assert_eq!(attempts, 2);
    assert_eq!(last.status(), 409);
    assert_eq!(problem_type(&last), "urn:idem:problem:in-flight");
    let retry_after: u64 = last.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (7..=10).contains(&retry_after),
        "Retry-After: {retry_after}"
    );
    // It gave up at once rather than sleep until the deadline.
    assert!(elapsed < deadline, "{elapsed:?}");
    assert_eq!(upstream.executions(&key), 1);
}
