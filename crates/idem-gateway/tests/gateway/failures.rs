//! Upstreams that are slow, fail or lose their client: what is released, stored or replayed.

use std::time::Duration;

use axum::{body::Body, http::Request};
use tokio::io::AsyncWriteExt;

use crate::support::{Client, Gateway, Upstream};

fn slow(gateway: &Gateway, key: &str, delay_ms: &str) -> Request<Body> {
    Request::post(gateway.url("/slow"))
        .header("idempotency-key", key)
        .header("x-delay-ms", delay_ms)
        .body(Body::from("refund 3 EUR"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_timeout_is_504_and_by_default_releases_the_key() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--upstream-timeout", "300ms"],
    );
    let client = Client::new();

    let timed_out = client.send(slow(&gateway, "timeout-1", "1000")).await;
    assert_eq!(timed_out.status, 504);
    assert_eq!(
        timed_out.json()["type"],
        "urn:idem:problem:upstream-timeout"
    );
    let record = client
        .send(
            Request::get(gateway.admin_url("/v1/keys/timeout-1"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(record.status, 404);

    let retry = client.send(slow(&gateway, "timeout-1", "10")).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed());
    assert_eq!(upstream.hits("slow"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ambiguous_reject_a_5xx_is_replayed_and_a_timeout_is_outcome_unknown() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--ambiguous",
            "reject",
            "--upstream-timeout",
            "300ms",
        ],
    );
    let client = Client::new();

    for replayed in [false, true] {
        let reply = client
            .post(&gateway.url("/status/503"), "reject-503", "")
            .await;
        assert_eq!(reply.status, 503);
        assert_eq!(reply.text(), "status 503");
        assert_eq!(reply.replayed(), replayed);
    }
    assert_eq!(upstream.hits("status"), 1);

    for replayed in [false, true] {
        let reply = client.send(slow(&gateway, "reject-timeout", "1000")).await;
        assert_eq!(reply.status, 500);
        assert_eq!(reply.json()["type"], "urn:idem:problem:outcome-unknown");
        assert_eq!(reply.replayed(), replayed);
    }
    assert_eq!(upstream.hits("slow"), 1);

    // Both answers count: the one recorded and its replay; the 503s do not.
    let metrics = client
        .send(
            Request::get(gateway.admin_url("/metrics"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let text = metrics.text();
    assert!(
        text.lines().any(|l| l == "idem_outcome_unknown_total 2"),
        "no `idem_outcome_unknown_total 2` in:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_does_not_abandon_its_request() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);

    let mut socket = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    socket
        .write_all(
            b"POST /slow HTTP/1.1\r\nhost: gateway\r\nidempotency-key: gone-1\r\n\
              x-delay-ms: 800\r\ncontent-length: 12\r\n\r\nrefund 3 EUR",
        )
        .await
        .unwrap();
    upstream.wait_for_hits("slow", 1).await;
    drop(socket);

    // The forwarded call runs to its end and is stored: the retry gets its replay.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let retry = Client::new().send(slow(&gateway, "gone-1", "800")).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.text(), "slow done");
    assert!(retry.replayed());
    assert_eq!(upstream.hits("slow"), 1);
}
