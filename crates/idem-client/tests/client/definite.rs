//! Definite answers: returned after one attempt, or after the replay that makes them final.

use http::HeaderName;
use idem_client::{Client, Error};
use idem_core::Ambiguous;
use serde_json::json;

use crate::support::{Upstream, gateway, problem_type};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_gets_its_own_key_and_is_executed_once() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let client = Client::new();

    let first = client
        .post(format!("{gateway}/orders"))
        .send()
        .await
        .unwrap();
    let second = client
        .post(format!("{gateway}/orders"))
        .send()
        .await
        .unwrap();

    assert_ne!(first.key(), second.key());
    for response in [&first, &second] {
        assert_eq!(response.status(), 201);
        assert!(!response.replayed());
        assert_eq!(response.attempts(), 1);
        assert_eq!(
            response.json::<serde_json::Value>().unwrap(),
            json!({ "key": response.key(), "execution": 1 })
        );
        assert_eq!(upstream.executions(response.key()), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_for_another_body_is_one_mismatch_error() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let client = Client::new();

    let first = client
        .post(format!("{gateway}/orders"))
        .key("order-422")
        .json(&json!({ "amount": 10 }))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    assert_eq!(first.attempts(), 1);

    let error = client
        .post(format!("{gateway}/orders"))
        .key("order-422")
        .json(&json!({ "amount": 20 }))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the idempotency key was used for a different request"
    );
    let Error::Mismatch {
        key,
        attempts,
        problem,
        response,
    } = error
    else {
        panic!("expected Mismatch, got {error:?}");
    };
    assert_eq!(key.as_str(), "order-422");
    assert_eq!(attempts, 1);
    assert_eq!(response.status(), 422);
    assert!(!response.replayed());
    assert_eq!(problem.kind, "urn:idem:problem:fingerprint-mismatch");
    assert_eq!(problem.status, Some(422));
    assert_eq!(problem.title.as_deref(), Some("Idempotency key reused"));
    assert_eq!(Some(problem), response.problem());
    assert_eq!(upstream.executions("order-422"), 1);
}

/// A retry would be refused the same way. A `500` is the API's own answer, which a retry would
/// not change; the gateway says its own transient failures with `502`, `503` and `504`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_s_4xx_and_5xx_but_the_transient_ones_are_answers() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let client = Client::new();

    for status in [400, 401, 403, 404, 410, 413, 422, 500, 501, 505] {
        let request = client.post(format!("{gateway}/status/{status}"));
        let key = request.key_str().to_owned();
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(response.body(), format!("status {status}").as_bytes());
        assert_eq!(response.attempts(), 1, "status {status}");
        assert!(!response.replayed());
        assert_eq!(upstream.executions(&key), 1, "status {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_gateway_refuses_is_a_400_sent_once() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream.url(), |config| {
        config.idempotency.require_key = true
    })
    .await;
    // The client's key goes into a header the gateway does not read, so what it sees is the
    // raw header below, or nothing.
    let client = Client::builder()
        .key_header(HeaderName::from_static("x-operation-key"))
        .build();

    let invalid = client
        .post(format!("{gateway}/orders"))
        .header("idempotency-key", "a, b")
        .send()
        .await
        .unwrap();
    assert_eq!(invalid.status(), 400);
    assert_eq!(invalid.attempts(), 1);
    assert_eq!(problem_type(&invalid), "urn:idem:problem:invalid-key");

    let missing = client
        .post(format!("{gateway}/orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);
    assert_eq!(missing.attempts(), 1);
    assert_eq!(problem_type(&missing), "urn:idem:problem:missing-key");

    assert_eq!(upstream.total_executions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_5xx_is_final_once_replayed() {
    let upstream = Upstream::start().await;
    // Never executes twice: the 503 is stored and replayed to every retry.
    let gateway = gateway(&upstream.url(), |config| {
        config.idempotency.policy.ambiguous = Ambiguous::Reject;
    })
    .await;
    let client = Client::builder()
        .initial_backoff(std::time::Duration::from_millis(10))
        .build();

    let request = client.post(format!("{gateway}/status/503"));
    let key = request.key_str().to_owned();
    let response = request.send().await.unwrap();

    // 1: the upstream's 503, retried; 2: its replay, which no retry can change.
    assert_eq!(response.status(), 503);
    assert_eq!(response.body(), "status 503");
    assert!(response.replayed());
    assert_eq!(response.attempts(), 2);
    assert_eq!(upstream.executions(&key), 1);
}
