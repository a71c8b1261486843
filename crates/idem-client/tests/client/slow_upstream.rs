//! A slow upstream: the first attempt times out while the work goes on, the next one learns it
//! is still running (409 with `Retry-After`), and the one after that gets the result.

use std::time::Duration;

use idem_client::Client;
use idem_core::InFlight;
use serde_json::json;

use crate::support::{Upstream, gateway};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_is_waited_for_through_a_409_and_its_retry_after_then_replayed() {
    let upstream = Upstream::start().await;
    // The 409's Retry-After is the lease's remaining time: 2 or 3 s.
    let gateway = gateway(&upstream.url(), |config| {
        config.idempotency.policy.in_flight = InFlight::Reject;
        config.idempotency.policy.lease = Duration::from_secs(3);
    })
    .await;
    // A backoff alone would be back within 100 ms and meet a second 409.
    let client = Client::builder()
        .attempt_timeout(Duration::from_millis(300))
        .initial_backoff(Duration::from_millis(50))
        .max_backoff(Duration::from_millis(100))
        .build();

    let order = client
        .post(format!("{gateway}/orders"))
        .header("x-delay-ms", "1800")
        .json(&json!({ "amount": 10 }));
    let key = order.key_str().to_owned();
    let response = order.send().await.unwrap();

    // 1: timed out at 300 ms; 2: 409 while the upstream runs; 3: the replay.
    assert_eq!(response.status(), 201);
    assert!(response.replayed());
    assert_eq!(response.attempts(), 3);
    assert_eq!(response.body(), &upstream.first_body(&key));
    assert_eq!(upstream.executions(&key), 1);
}
