//! Responses lost on their way back: the retries carry the same key and get the replay.

use std::time::Duration;

use idem_client::{Client, Error, GiveUpReason, LastFailure};
use serde_json::{Value, json};

use crate::support::{LossyProxy, Upstream, gateway};

fn client(max_attempts: u32) -> Client {
    Client::builder()
        .max_attempts(max_attempts)
        .initial_backoff(Duration::from_millis(20))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_responses_are_retried_under_the_same_key_and_replayed() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let proxy = LossyProxy::start(&gateway, 2).await;

    let order = client(5)
        .post(format!("{}/orders", proxy.url()))
        .json(&json!({ "amount": 10 }));
    let key = order.key_str().to_owned();
    let response = order.send().await.unwrap();

    assert_eq!(proxy.lost(), 2);
    assert_eq!(response.status(), 201);
    assert!(response.replayed());
    assert_eq!(response.attempts(), 3);
    assert_eq!(response.key(), key);
    assert_eq!(response.body(), &upstream.first_body(&key));
    assert_eq!(
        response.json::<Value>().unwrap(),
        json!({ "key": key, "execution": 1 })
    );
    assert_eq!(upstream.executions(&key), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_giving_up_the_same_key_resumes_the_operation_without_executing_it_again() {
    let upstream = Upstream::start().await;
    let gateway = gateway(&upstream.url(), |_| {}).await;
    let proxy = LossyProxy::start(&gateway, 3).await;
    let client = client(3);

    let order = client
        .post(format!("{}/orders", proxy.url()))
        .json(&json!({ "amount": 10 }));
    let key = order.key_str().to_owned();
    let error = order.send().await.unwrap_err();
    let Error::GaveUp {
        key: gave_up_key,
        attempts,
        reason,
        last: LastFailure::Transport(transport),
    } = error
    else {
        panic!("expected GaveUp after lost responses, got {error:?}");
    };
    assert_eq!(gave_up_key.as_str(), key);
    assert_eq!(attempts, 3);
    assert_eq!(reason, GiveUpReason::MaxAttempts);
    assert!(
        !transport.is_timeout() && !transport.is_connect(),
        "{transport:?}"
    );
    assert_eq!(proxy.lost(), 3);
    assert_eq!(upstream.executions(&key), 1);

    // Later — another process, after a crash — the operation is sent again under its key.
    let resumed = client
        .post(format!("{}/orders", proxy.url()))
        .key(&key)
        .json(&json!({ "amount": 10 }))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 201);
    assert!(resumed.replayed());
    assert_eq!(resumed.attempts(), 1);
    assert_eq!(resumed.body(), &upstream.first_body(&key));
    assert_eq!(upstream.executions(&key), 1);
}
