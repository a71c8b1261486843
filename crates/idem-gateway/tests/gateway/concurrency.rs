//! Twenty concurrent requests with one key against a slow upstream.

use axum::{body::Body, http::Request};

use crate::support::{Client, Gateway, Reply, Upstream};

async fn twenty_at_once(gateway: &Gateway, key: &str) -> Vec<Reply> {
    let client = Client::new();
    let requests = (0..20).map(|_| {
        let client = client.clone();
        let request = Request::post(gateway.url("/slow"))
            .header("idempotency-key", key)
            .header("x-delay-ms", "1500")
            .body(Body::from("charge 10 EUR"))
            .unwrap();
        tokio::spawn(async move { client.send(request).await })
    });
    let mut replies = Vec::new();
    for request in requests.collect::<Vec<_>>() {
        replies.push(request.await.unwrap());
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_execution_and_nineteen_409s_with_retry_after() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);

    let replies = twenty_at_once(&gateway, "burst-1").await;

    let executed: Vec<&Reply> = replies.iter().filter(|r| r.status == 201).collect();
    let conflicts: Vec<&Reply> = replies.iter().filter(|r| r.status == 409).collect();
    assert_eq!(executed.len(), 1);
    assert_eq!(conflicts.len(), 19);
    assert_eq!(executed[0].text(), "slow done");
    for conflict in conflicts {
        assert_eq!(conflict.json()["type"], "urn:idem:problem:in-flight");
        // The 30 s lease's remaining time, rounded up: 30 unless the machine stalled.
        let retry_after: u64 = conflict.header("retry-after").parse().unwrap();
        assert!(
            (28..=30).contains(&retry_after),
            "Retry-After: {retry_after}"
        );
    }
    assert_eq!(upstream.hits("slow"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_wait_mode_all_twenty_get_the_one_response() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--in-flight",
            "wait",
            "--wait-timeout",
            "10s",
        ],
    );

    let replies = twenty_at_once(&gateway, "burst-2").await;

    for reply in &replies {
        assert_eq!(reply.status, 201);
        assert_eq!(reply.text(), "slow done");
    }
    assert_eq!(replies.iter().filter(|r| r.replayed()).count(), 19);
    assert_eq!(upstream.hits("slow"), 1);
}
