//! The operators' view: `GET /v1/keys` listings, `GET /v1/stats`, `idem keys list`, and the
//! request latency histograms with and without the upstream.

use std::time::Duration;

use axum::{body::Body, http::Request};
use idem_core::{IdempotencyKey, Scope};
use serde_json::Value;

use crate::{
    cli::fails,
    support::{Client, Gateway, Reply, Upstream, idem, sqlite_url},
};

async fn get(client: &Client, url: String) -> Reply {
    client
        .send(Request::get(url).body(Body::empty()).unwrap())
        .await
}

/// The SHA-256 of `key` in hex, as listings name keys.
fn sha256(key: &str) -> String {
    let key: IdempotencyKey = key.parse().unwrap();
    key.sha256().iter().map(|b| format!("{b:02x}")).collect()
}

/// The `key_sha256` of each listed record.
fn keys(page: &Value) -> Vec<String> {
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["key_sha256"].as_str().unwrap().to_owned())
        .collect()
}

/// A keyed `POST` of an empty body to `path`, with `headers` besides the key.
fn keyed(gateway: &Gateway, path: &str, key: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::post(gateway.url(path)).header("idempotency-key", key);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).unwrap()
}

/// Sends a keyed request in the scope of `authorization`.
async fn send(client: &Client, gateway: &Gateway, key: &str, authorization: &str) -> Reply {
    let headers = [("authorization", authorization)];
    client.send(keyed(gateway, "/charges", key, &headers)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_listed_newest_first_filtered_and_paged() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    for key in ["list-1", "list-2", "list-3"] {
        assert_eq!(
            send(&client, &gateway, key, "Bearer alice").await.status,
            201
        );
        // Acquisition times are milliseconds: keep the order unambiguous.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = tokio::spawn({
        let client = client.clone();
        let headers = [("authorization", "Bearer bob"), ("x-delay-ms", "2000")];
        let request = keyed(&gateway, "/slow", "list-held", &headers);
        async move { client.send(request).await }
    });
    upstream.wait_for_hits("slow", 1).await;
    // The default scope header is Authorization: its name and value make the identity.
    let alice =
        Scope::from_identity([b"authorization".as_slice(), b"Bearer alice".as_slice()]).to_string();

    let all = get(&client, gateway.admin_url("/v1/keys")).await;
    assert_eq!(all.status, 200);
    assert_eq!(all.header("content-type"), "application/json");
    let all = all.json();
    assert_eq!(
        keys(&all),
        [
            sha256("list-held"),
            sha256("list-3"),
            sha256("list-2"),
            sha256("list-1")
        ]
    );
    assert!(all.get("next").is_none(), "one page");
    let held_record = &all["records"][0];
    assert_eq!(held_record["state"], "processing");
    assert!(held_record["lease_until"].as_str().unwrap().ends_with('Z'));
    assert!(held_record.get("status").is_none());
    let completed = &all["records"][1];
    assert_eq!(completed["state"], "completed");
    assert_eq!(completed["status"], 201);
    assert_eq!(completed["scope"], alice.as_str());
    assert!(
        completed.get("key_digest").is_none(),
        "the store has no key to digest"
    );

    let url = |query: &str| gateway.admin_url(&format!("/v1/keys?{query}"));
    let processing = get(&client, url("state=processing")).await.json();
    assert_eq!(keys(&processing), [sha256("list-held")]);
    let completed = get(&client, url("state=completed")).await.json();
    assert_eq!(keys(&completed).len(), 3);
    let of_alice = get(&client, url(&format!("scope={alice}"))).await.json();
    assert_eq!(
        keys(&of_alice),
        [sha256("list-3"), sha256("list-2"), sha256("list-1")]
    );
    assert_eq!(
        keys(&get(&client, url("older_than=1h")).await.json()).len(),
        0
    );

    // Pages of two: the cursor goes on where the page stopped, and the last page has none.
    let first = get(&client, url("limit=2")).await.json();
    assert_eq!(keys(&first), [sha256("list-held"), sha256("list-3")]);
    let cursor = first["next"].as_str().unwrap();
    let second = get(&client, url(&format!("limit=2&cursor={cursor}")))
        .await
        .json();
    assert_eq!(keys(&second), [sha256("list-2"), sha256("list-1")]);
    assert!(second.get("next").is_none());

    for (query, detail) in [
        ("state=held", "state is `processing` or `completed`"),
        ("limit=0", "limit is a whole number from 1 to 1000"),
        ("limit=1001", "limit is a whole number from 1 to 1000"),
        ("limit=ten", "limit is a whole number from 1 to 1000"),
        (
            "older_than=5",
            "older_than is a duration: a number and a unit (ms, s, m, h, d), such as 5m",
        ),
        (
            "cursor=zz",
            "cursor is the `next` of a page of this listing, unchanged",
        ),
        (
            "state=completed&state=processing",
            "each parameter is given at most once",
        ),
    ] {
        let bad = get(&client, url(query)).await;
        assert_eq!(bad.status, 400, "{query}");
        assert_eq!(bad.header("content-type"), "application/problem+json");
        let problem = bad.json();
        assert_eq!(problem["type"], "urn:idem:problem:invalid-query", "{query}");
        assert_eq!(problem["detail"], detail, "{query}");
    }
    let bad_scope = get(&client, url("scope=abc")).await;
    assert_eq!(bad_scope.json()["type"], "urn:idem:problem:invalid-scope");

    assert_eq!(held.await.unwrap().status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_show_the_census_and_the_last_minutes_store_calls() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let empty = get(&client, gateway.admin_url("/v1/stats")).await;
    assert_eq!(empty.status, 200);
    let empty = empty.json();
    assert_eq!(empty["store"]["window_seconds"], 60);
    assert_eq!(empty["store"]["calls"], 0);
    assert!(empty["store"].get("latency_seconds").is_none());

    for key in ["stats-1", "stats-2", "stats-3"] {
        let reply = client.post(&gateway.url("/charges"), key, "{}").await;
        assert_eq!(reply.status, 201);
    }
    // A replay reads the record with one acquire.
    let replay = client.post(&gateway.url("/charges"), "stats-1", "{}").await;
    assert!(replay.replayed());

    // The census is retaken every five seconds at most.
    let mut stats;
    let mut attempts = 0;
    loop {
        stats = get(&client, gateway.admin_url("/v1/stats")).await.json();
        if stats["records"]["completed"] == 3 || attempts == 100 {
            break;
        }
        attempts += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let records = &stats["records"];
    assert_eq!(records["completed"], 3, "{stats}");
    assert_eq!(records["processing"], 0);
    assert!(records.get("oldest_processing").is_none());
    assert!(records.get("oldest_processing_age_seconds").is_none());
    assert!(records["counted_at"].as_str().unwrap().ends_with('Z'));
    // Three executions (acquire, complete) and a replay (acquire).
    let store = &stats["store"];
    assert_eq!(store["calls"], 7, "{stats}");
    assert_eq!(store["errors"], 0);
    let latency = &store["latency_seconds"];
    let [p50, p90, p99, max] =
        ["p50", "p90", "p99", "max"].map(|name| latency[name].as_f64().unwrap());
    assert!(
        0.0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max,
        "{latency}"
    );

    let metrics = get(&client, gateway.admin_url("/metrics")).await;
    let text = metrics.text();
    assert!(
        text.contains("idem_records{state=\"completed\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("idem_oldest_processing_age_seconds 0"),
        "{text}"
    );
    assert!(text.contains("idem_lease_seconds 30"), "{text}");
}

/// The censuses a gateway took, from its `idem_store_duration_seconds` histogram.
async fn censuses_taken(client: &Client, gateway: &Gateway) -> u64 {
    let metrics = get(client, gateway.admin_url("/metrics")).await;
    metrics
        .text()
        .lines()
        .find(|line| {
            line.starts_with("idem_store_duration_seconds_count") && line.contains("op=\"census\"")
        })
        .and_then(|line| line.rsplit(' ').next())
        .map_or(0, |count| count.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_sharing_a_store_take_one_census_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "shared.db");
    let upstream = Upstream::start().await;
    let started = std::time::Instant::now();
    let gateways = [
        Gateway::start(&upstream.url(), &["--store", &store]),
        Gateway::start(&upstream.url(), &["--store", &store]),
    ];
    let client = Client::new();
    // The next census is due 5 s after the last one ended: each gateway on its own would
    // count three times in 12 s, the two together take three censuses at most.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut taken = 0;
    for gateway in &gateways {
        taken += censuses_taken(&client, gateway).await;
        let stats = get(&client, gateway.admin_url("/v1/stats")).await.json();
        assert_eq!(stats["records"]["completed"], 0, "{stats}");
    }
    let elapsed = started.elapsed().as_secs();
    assert!(
        (1..=elapsed / 5 + 1).contains(&taken),
        "{taken} censuses in {elapsed} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_latency_is_measured_with_and_without_the_upstream() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let slow = || keyed(&gateway, "/slow", "timed-1", &[("x-delay-ms", "300")]);
    assert_eq!(client.send(slow()).await.status, 201);
    assert!(client.send(slow()).await.replayed());

    let metrics = get(&client, gateway.admin_url("/metrics")).await;
    let text = metrics.text();
    let series = |name: &str| -> u64 {
        let line = text
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // Both requests took the gateway itself far less than the upstream's 300 ms; the first
    // took at least that in all, the replay did not.
    assert_eq!(series("idem_request_duration_seconds_count"), 2);
    assert_eq!(series("idem_request_own_duration_seconds_count"), 2);
    assert_eq!(
        series("idem_request_own_duration_seconds_bucket{le=\"0.25\"}"),
        2
    );
    assert_eq!(
        series("idem_request_duration_seconds_bucket{le=\"0.25\"}"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_keys_list_prints_a_table_or_json() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    let client = Client::new();
    for key in ["cli-1", "cli-2"] {
        assert_eq!(
            client
                .post(&gateway.url("/charges"), key, "{}")
                .await
                .status,
            201
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let json = idem(&["keys", "list", "--store", &store, "--json", "--limit", "1"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let page: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(keys(&page), [sha256("cli-2")]);
    let cursor = page["next"].as_str().unwrap();
    let json = idem(&[
        "keys", "list", "--store", &store, "--json", "--cursor", cursor,
    ]);
    let page: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(keys(&page), [sha256("cli-1")]);
    assert!(page.get("next").is_none());

    let table = idem(&["keys", "list", "--store", &store, "--state", "completed"]);
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", table.stdout);
    assert!(lines[0].starts_with("STATE"), "{}", lines[0]);
    for (line, key) in lines[1..3].iter().zip(["cli-2", "cli-1"]) {
        assert!(line.starts_with("completed"), "{line}");
        assert!(line.contains(" 201 "), "{line}");
        assert!(line.ends_with(&sha256(key)[..16]), "{line}");
    }
    assert_eq!(lines[3], "2 records; the last page");
    let none = idem(&["keys", "list", "--store", &store, "--state", "processing"]);
    assert_eq!(none.stdout.lines().last(), Some("0 records; the last page"));

    assert!(
        fails(&["keys", "list", "--store", &store, "--state", "held"], 2)
            .starts_with("error: invalid value 'held' for '--state <STATE>'")
    );
    assert!(
        fails(&["keys", "list", "--store", &store, "--limit", "0"], 2)
            .starts_with("error: invalid value '0' for '--limit <LIMIT>'")
    );
    assert!(
        fails(&["keys", "list", "--store", &store, "--cursor", "zz"], 2)
            .starts_with("error: invalid value 'zz' for '--cursor <CURSOR>'")
    );
}
