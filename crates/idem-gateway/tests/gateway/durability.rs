//! Restarts, crashes and graceful shutdown, on one SQLite file.

use std::time::{Duration, SystemTime};

use axum::{body::Body, http::Request};

use crate::support::{Client, Gateway, Upstream, idem, sqlite_url};

fn slow_request(gateway: &Gateway, key: &str, delay_ms: &str) -> Request<Body> {
    Request::post(gateway.url("/slow"))
        .header("idempotency-key", key)
        .header("x-delay-ms", delay_ms)
        .body(Body::from("ship order 7"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_keys_survive_a_restart() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let client = Client::new();

    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    let first = client
        .post(&gateway.url("/charges"), "durable-1", r#"{"amount":5}"#)
        .await;
    assert_eq!(first.status, 201);
    gateway.stop().await;

    // The same file, opened with the URL's tuning parameters, holds the same records.
    let tuned = format!("{store}?synchronous=normal&pool_size=1&batch_size=1&busy_timeout=100");
    let gateway = Gateway::start(&upstream.url(), &["--store", &tuned]);
    let retry = client
        .post(&gateway.url("/charges"), "durable-1", r#"{"amount":5}"#)
        .await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.text(), r#"{"charge":1}"#);
    assert_eq!(upstream.hits("charges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_9_the_key_is_in_flight_until_the_lease_ends_then_free() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    // Long enough that restarting the gateway on a busy machine stays well within the dead
    // gateway's lease; the test waits for the lease itself, not for a fixed time.
    let args = ["--store", store.as_str(), "--lease", "8s"];
    let client = Client::new();

    let mut gateway = Gateway::start(&upstream.url(), &args);
    let request = slow_request(&gateway, "crash-1", "5000");
    let lost = tokio::spawn({
        let client = client.clone();
        async move { client.send(request).await }
    });
    upstream.wait_for_hits("slow", 1).await;
    gateway.kill();
    lost.abort();

    let gateway = Gateway::start(&upstream.url(), &args);
    let record = client
        .send(
            Request::get(gateway.admin_url("/v1/keys/crash-1"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(record.status, 200);
    let record = record.json();
    assert_eq!(record["state"], "processing");

    // The 409's Retry-After is the dead gateway's remaining lease, rounded up to a second.
    let lease_until = humantime::parse_rfc3339(record["lease_until"].as_str().unwrap()).unwrap();
    let remaining = || {
        lease_until
            .duration_since(SystemTime::now())
            .unwrap_or_default()
    };
    let most = remaining().as_secs() + 1;
    let in_flight = client.send(slow_request(&gateway, "crash-1", "10")).await;
    let least = remaining().as_secs();
    assert_eq!(in_flight.status, 409);
    let retry_after: u64 = in_flight.header("retry-after").parse().unwrap();
    assert!(
        (least.max(1)..=most).contains(&retry_after),
        "Retry-After: {retry_after}, remaining lease {least}..={most} s"
    );

    // Once the dead gateway's lease has run out, the retry executes.
    tokio::time::sleep(remaining() + Duration::from_millis(100)).await;
    let retry = client.send(slow_request(&gateway, "crash-1", "10")).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed());
    assert_eq!(upstream.hits("slow"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_running_request_finish_and_complete_its_key() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let client = Client::new();

    let mut gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    let request = slow_request(&gateway, "drain-1", "1500");
    let running = tokio::spawn({
        let client = client.clone();
        async move { client.send(request).await }
    });
    upstream.wait_for_hits("slow", 1).await;
    gateway.terminate();

    let reply = running.await.unwrap();
    assert_eq!(reply.status, 201);
    assert_eq!(reply.text(), "slow done");
    let status = gateway.exit_status(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0));
    let messages: Vec<String> = gateway
        .logs()
        .iter()
        .filter_map(|line| line["message"].as_str().map(str::to_owned))
        .collect();
    assert!(
        messages.contains(&"shutdown signal received".to_owned()),
        "{messages:?}"
    );
    assert_eq!(messages.last().map(String::as_str), Some("stopped"));

    let shown = idem(&["keys", "show", "drain-1", "--store", &store]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let record: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(record["state"], "completed");
    assert_eq!(record["status"], 201);
    assert_eq!(upstream.hits("slow"), 1);
}
