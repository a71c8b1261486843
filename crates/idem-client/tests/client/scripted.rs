//! The client against a server that answers from a script: what the gateway never says.

use std::time::Duration;

use idem_client::{Client, Error, GiveUpReason, KeyError};
use serde_json::json;
use tokio::time::Instant;

use crate::support::{Scripted, gave_up_on_status, gave_up_on_transport};

/// Quick retries, so that the tests wait only where they mean to.
fn client() -> Client {
    Client::builder()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(1))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_carries_the_same_key_and_the_same_bytes() {
    let server = Scripted::start([
        (409, &[][..], "running"),
        (502, &[], ""),
        (503, &[], ""),
        (504, &[], ""),
        (408, &[], ""),
        (429, &[], ""),
    ])
    .await;
    let request = Client::builder()
        .max_attempts(7)
        .initial_backoff(Duration::from_millis(1))
        .build()
        .post(server.url("/charges"))
        .json(&json!({ "amount": 10, "currency": "eur" }));
    let key = request.key_str().to_owned();

    let response = request.send().await.unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(response.body(), "done");
    assert_eq!(response.attempts(), 7);
    assert!(!response.replayed());
    let received = server.received();
    assert_eq!(received.len(), 7);
    for (headers, body) in &received {
        let keys: Vec<_> = headers.get_all("idempotency-key").iter().collect();
        assert_eq!(keys, [key.as_str()]);
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(body, r#"{"amount":10,"currency":"eur"}"#);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_is_waited_at_least() {
    let server = Scripted::start([(429, &[("retry-after", "1")][..], "slow down")]).await;
    let start = Instant::now();
    let response = client().post(server.url("/charges")).send().await.unwrap();
    // The backoff alone is at most 1 ms; a sleep never ends early.
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(response.status(), 200);
    assert_eq!(response.attempts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_the_deadline_ends_the_retries_at_once() {
    let server = Scripted::start([(503, &[("retry-after", "30")][..], "down")]).await;
    let error = client()
        .post(server.url("/charges"))
        .send()
        .await
        .unwrap_err();
    let (attempts, reason, last) = gave_up_on_status(error);
    assert_eq!(attempts, 1);
    assert_eq!(reason, GiveUpReason::Deadline);
    assert_eq!(last.status(), 503);
    assert_eq!(last.body(), "down");
    assert_eq!(server.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_retried_until_the_attempts_run_out() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let error = Client::builder()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(1))
        .build()
        .post(format!("http://{addr}/charges"))
        .send()
        .await
        .unwrap_err();
    let (attempts, reason, last) = gave_up_on_transport(error);
    assert_eq!(attempts, 3);
    assert_eq!(reason, GiveUpReason::MaxAttempts);
    assert!(last.is_connect(), "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_an_answer_not_followed() {
    let server = Scripted::start([(303, &[("location", "/charges/1")][..], "")]).await;
    let response = client().post(server.url("/charges")).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/charges/1");
    assert_eq!(response.attempts(), 1);
    assert_eq!(server.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_key_is_sent_quoted_when_it_must_be_and_overrides_the_header() {
    let server = Scripted::start([]).await;
    let response = client()
        .patch(server.url("/orders/42"))
        .header("idempotency-key", "not-this-one")
        .header("content-type", "application/merge-patch+json")
        .key("order 42 \"v2\"")
        .json(&json!({ "state": "paid" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.key(), "order 42 \"v2\"");
    let received = server.received();
    assert_eq!(received.len(), 1);
    let headers = &received[0].0;
    let keys: Vec<_> = headers.get_all("idempotency-key").iter().collect();
    assert_eq!(keys, [r#""order 42 \"v2\"""#]);
    let types: Vec<_> = headers.get_all("content-type").iter().collect();
    assert_eq!(types, ["application/merge-patch+json"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_key_url_header_or_body_fails_before_anything_is_sent() {
    let server = Scripted::start([]).await;
    let client = client();

    let empty = client.post(server.url("/charges")).key("").send().await;
    assert!(
        matches!(empty, Err(Error::InvalidKey(KeyError::Empty))),
        "{empty:?}"
    );
    let control = client.post(server.url("/charges")).key("a\tb").send().await;
    assert!(
        matches!(
            control,
            Err(Error::InvalidKey(KeyError::InvalidCharacter {
                byte: b'\t',
                position: 1
            }))
        ),
        "{control:?}"
    );
    let too_long = client
        .post(server.url("/charges"))
        .key("k".repeat(256))
        .send()
        .await;
    assert!(
        matches!(
            too_long,
            Err(Error::InvalidKey(KeyError::TooLong { len: 256 }))
        ),
        "{too_long:?}"
    );
    let url = client.post("not a url").send().await;
    assert!(matches!(url, Err(Error::Build(_))), "{url:?}");
    let scheme = client.post("ftp://127.0.0.1/charges").send().await;
    assert!(matches!(scheme, Err(Error::Build(_))), "{scheme:?}");
    // JSON object keys must be strings.
    let unserializable = std::collections::HashMap::from([(vec![1], 1)]);
    let json = client
        .post(server.url("/charges"))
        .json(&unserializable)
        .send()
        .await;
    assert!(matches!(json, Err(Error::Json(_))), "{json:?}");
    let header = client
        .post(server.url("/charges"))
        .header("x-bad", "line\nbreak")
        .send()
        .await;
    assert!(matches!(header, Err(Error::Build(_))), "{header:?}");

    assert_eq!(server.received().len(), 0);
}
