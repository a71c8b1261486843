//! The admin listener: health, readiness, metrics and single keys.

use axum::{body::Body, http::Request};
use idem_core::{IdempotencyKey, Scope};

use crate::support::{Client, Gateway, Reply, Upstream};

async fn get(client: &Client, url: String) -> Reply {
    client
        .send(Request::get(url).body(Body::empty()).unwrap())
        .await
}

async fn delete(client: &Client, url: String) -> Reply {
    client
        .send(Request::delete(url).body(Body::empty()).unwrap())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let health = get(&client, gateway.admin_url("/healthz")).await;
    assert_eq!((health.status.as_u16(), health.text()), (200, "ok\n"));
    let ready = get(&client, gateway.admin_url("/readyz")).await;
    assert_eq!((ready.status.as_u16(), ready.text()), (200, "ready\n"));

    let reply = client
        .post(&gateway.url("/charges"), "metered-1", "{}")
        .await;
    assert_eq!(reply.status, 201);
    let reply = client
        .post(&gateway.url("/charges"), "metered-1", "{}")
        .await;
    assert!(reply.replayed());
    let reply = get(&client, gateway.url("/hello")).await;
    assert_eq!(reply.status, 200);

    let metrics = get(&client, gateway.admin_url("/metrics")).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.header("content-type").starts_with("text/plain"));
    let text = metrics.text();
    for line in [
        "idem_requests_total{outcome=\"executed\"} 1",
        "idem_requests_total{outcome=\"replayed\"} 1",
        "idem_requests_total{outcome=\"passthrough\"} 1",
        "idem_upstream_duration_seconds_count 2",
        "idem_store_duration_seconds_count{op=\"acquire\"} 2",
        "idem_store_duration_seconds_count{op=\"complete\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    assert!(text.contains("idem_upstream_duration_seconds_bucket{le=\"0.5\"}"));
    assert!(text.contains("idem_store_duration_seconds_bucket{op=\"acquire\",le=\"0.001\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_can_be_shown_and_forgotten_with_and_without_scope() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let key: IdempotencyKey = "order-secret-1".parse().unwrap();
    let digest = key.digest();
    let anonymous = Scope::ANONYMOUS.to_string();

    // Anonymous scope: no Authorization header.
    let reply = client
        .post(&gateway.url("/charges"), "order-secret-1", "{}")
        .await;
    assert_eq!(reply.status, 201);
    let shown = get(&client, gateway.admin_url("/v1/keys/order-secret-1")).await;
    assert_eq!(shown.status, 200);
    let record = shown.json();
    assert_eq!(record["key_digest"], digest.as_str());
    assert_eq!(record["scope"], anonymous);
    assert_eq!(record["state"], "completed");
    assert_eq!(record["status"], 201);
    assert!(record["token"].as_u64().unwrap() >= 1);
    assert!(record["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(record["completed_at"].as_str().unwrap().ends_with('Z'));
    assert!(record["expires_at"].as_str().unwrap().ends_with('Z'));
    assert!(record.get("lease_until").is_none());

    // A tenant's key lives in its scope, named by its hash as the request's log line shows it.
    let reply = client
        .send(
            Request::post(gateway.url("/charges"))
                .header("idempotency-key", "order-secret-1")
                .header("authorization", "Bearer sk_alice")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 201);
    assert!(!reply.replayed(), "another tenant's key is another key");
    let line = gateway
        .log_line(|line| {
            line["target"] == "idem::request"
                && line["key"] == digest.as_str()
                && line["scope"] != anonymous.as_str()
        })
        .await;
    let alice = line["scope"].as_str().unwrap().to_owned();
    assert_eq!(alice.len(), 64);
    assert_eq!(line["outcome"], "executed");
    assert_eq!(line["status"], 201);
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/charges");
    let scoped = get(
        &client,
        gateway.admin_url(&format!("/v1/keys/order-secret-1?scope={alice}")),
    )
    .await;
    assert_eq!(scoped.status, 200);
    assert_eq!(scoped.json()["scope"], alice.as_str());
    assert_eq!(scoped.json()["key_digest"], digest.as_str());

    // Keys and identities are never logged in clear.
    let all_logs = serde_json::to_string(&gateway.logs()).unwrap();
    assert!(!all_logs.contains("order-secret-1"));
    assert!(!all_logs.contains("sk_alice"));

    // Forget: 204 once, then 404; the other scope's record stays.
    let url = gateway.admin_url(&format!("/v1/keys/order-secret-1?scope={alice}"));
    assert_eq!(delete(&client, url.clone()).await.status, 204);
    assert_eq!(delete(&client, url.clone()).await.status, 404);
    let gone = get(&client, url).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.header("content-type"), "application/problem+json");
    assert_eq!(gone.json()["type"], "urn:idem:problem:key-not-found");
    assert_eq!(
        get(&client, gateway.admin_url("/v1/keys/order-secret-1"))
            .await
            .status,
        200
    );
    assert_eq!(
        delete(&client, gateway.admin_url("/v1/keys/order-secret-1"))
            .await
            .status,
        204
    );

    // A forgotten key executes again.
    let again = client
        .post(&gateway.url("/charges"), "order-secret-1", "{}")
        .await;
    assert_eq!(again.status, 201);
    assert!(!again.replayed());
    assert_eq!(upstream.hits("charges"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_and_scopes_are_400() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let bad_scope = get(&client, gateway.admin_url("/v1/keys/k?scope=abc")).await;
    assert_eq!(bad_scope.status, 400);
    assert_eq!(bad_scope.json()["type"], "urn:idem:problem:invalid-scope");

    let bad_key = get(&client, gateway.admin_url("/v1/keys/a%20b")).await;
    assert_eq!(bad_key.status, 400);
    assert_eq!(bad_key.json()["type"], "urn:idem:problem:invalid-key");

    let too_long = get(
        &client,
        gateway.admin_url(&format!("/v1/keys/{}", "k".repeat(256))),
    )
    .await;
    assert_eq!(too_long.status, 400);

    let unknown = delete(&client, gateway.admin_url("/v1/keys/never-used")).await;
    assert_eq!(unknown.status, 404);
}
