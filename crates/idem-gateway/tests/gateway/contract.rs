//! The rows of the HTTP contract (docs/http.md) that the other modules leave out: bad and
//! missing keys, scopes, fingerprints across paths and queries, expiry, an unavailable store,
//! ambiguous 4xx and what a replay drops.

use std::time::Duration;

use axum::{
    body::Body,
    http::{HeaderValue, Request, StatusCode},
};
use sqlx::{ConnectOptions, Connection, sqlite::SqliteConnectOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Client, Gateway, Reply, Upstream, sqlite_url};

/// `POST url` with a JSON body and one `Idempotency-Key` line per value in `keys`.
fn keyed(url: &str, keys: &[HeaderValue]) -> Request<Body> {
    let mut request = Request::post(url).header("content-type", "application/json");
    for key in keys {
        request = request.header("idempotency-key", key.clone());
    }
    request.body(Body::from("{}")).unwrap()
}

/// `POST url` with `Idempotency-Key: key` and `Authorization: Bearer tenant`.
fn as_tenant(url: &str, key: &str, tenant: &str) -> Request<Body> {
    Request::post(url)
        .header("idempotency-key", key)
        .header("authorization", format!("Bearer {tenant}"))
        .body(Body::from("{}"))
        .unwrap()
}

async fn get(client: &Client, url: String) -> Reply {
    client
        .send(Request::get(url).body(Body::empty()).unwrap())
        .await
}

/// The status of `GET /v1/keys/{key}` on the admin listener, in the anonymous scope.
async fn record_status(client: &Client, gateway: &Gateway, key: &str) -> StatusCode {
    get(client, gateway.admin_url(&format!("/v1/keys/{key}")))
        .await
        .status
}

/// The `/metrics` text.
async fn metrics(client: &Client, gateway: &Gateway) -> String {
    let reply = get(client, gateway.admin_url("/metrics")).await;
    assert_eq!(reply.status, 200);
    reply.text().to_owned()
}

fn assert_problem(reply: &Reply, status: u16, problem_type: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.header("content-type"), "application/problem+json");
    let problem = reply.json();
    assert_eq!(problem["type"], problem_type);
    assert_eq!(problem["status"], status);
    assert!(!reply.replayed());
}

/// Writes `request` on a new connection and reads until the gateway closes it or 2 s pass.
async fn raw_exchange(gateway: &Gateway, request: &[u8]) -> String {
    let mut socket = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), socket.read_to_end(&mut answer));
    // A connection kept open after a complete answer is fine too: what was read is the answer.
    let _ = read.await;
    String::from_utf8(answer).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_400_invalid_key_and_neither_forwarded_nor_stored() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let url = gateway.url("/charges");

    let bad: Vec<(&str, Vec<HeaderValue>)> = vec![
        (
            "256 characters",
            vec![HeaderValue::from_str(&"k".repeat(256)).unwrap()],
        ),
        ("empty", vec![HeaderValue::from_static("")]),
        (
            "empty between quotes",
            vec![HeaderValue::from_static("\"\"")],
        ),
        (
            "not ASCII",
            vec![HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap()],
        ),
        (
            "unterminated quotes",
            vec![HeaderValue::from_static("\"abc")],
        ),
        (
            "two header lines",
            vec![
                HeaderValue::from_static("dup"),
                HeaderValue::from_static("dup"),
            ],
        ),
        ("a list", vec![HeaderValue::from_static("a, b")]),
        ("parameters", vec![HeaderValue::from_static("\"k\";p=1")]),
        (
            "a space in a bare key",
            vec![HeaderValue::from_static("a b")],
        ),
        ("a tab", vec![HeaderValue::from_static("a\tb")]),
    ];
    for (what, keys) in &bad {
        let reply = client.send(keyed(&url, keys)).await;
        assert_eq!(reply.status, 400, "{what}: {reply:?}");
        assert_problem(&reply, 400, "urn:idem:problem:invalid-key");
    }
    assert_eq!(upstream.hits("charges"), 0);
    // The keys these headers would have meant, had they been accepted, are unknown…
    for key in ["abc", "dup", "a", "b", "k"] {
        assert_eq!(record_status(&client, &gateway, key).await, 404, "{key}");
    }
    // …and the store was not even asked.
    let text = metrics(&client, &gateway).await;
    let invalid = format!("idem_requests_total{{outcome=\"invalid\"}} {}", bad.len());
    assert!(
        text.lines().any(|l| l == invalid),
        "no `{invalid}` in:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "idem_store_duration_seconds_count{op=\"acquire\"} 0"),
        "the store was asked:\n{text}"
    );

    // The longest key there may be is a key.
    let longest = "k".repeat(255);
    let first = client
        .send(keyed(&url, &[HeaderValue::from_str(&longest).unwrap()]))
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(first.text(), r#"{"charge":1}"#);
    assert!(!first.replayed());
    assert_eq!(record_status(&client, &gateway, &longest).await, 200);
    let retry = client
        .send(keyed(&url, &[HeaderValue::from_str(&longest).unwrap()]))
        .await;
    assert!(retry.replayed());
    assert_eq!(retry.text(), r#"{"charge":1}"#);
    assert_eq!(upstream.hits("charges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_control_character_is_400_and_neither_forwarded_nor_stored() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    // `http` refuses to build such headers: they go over a raw socket. A control character
    // makes the whole message invalid HTTP (RFC 9110 §5.5), so hyper answers it before the
    // layer sees the key: a 400 without a problem body (docs/http.md promises `invalid-key`).
    for key in [&b"ab\x01c"[..], b"ab\x7fc"] {
        let mut request = b"POST /charges HTTP/1.1\r\nhost: gateway\r\nidempotency-key: ".to_vec();
        request.extend_from_slice(key);
        request.extend_from_slice(
            b"\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        );
        let answer = raw_exchange(&gateway, &request).await;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let mut lines = head.lines();
        assert_eq!(lines.next(), Some("HTTP/1.1 400 Bad Request"), "{answer:?}");
        let headers: Vec<&str> = lines.filter(|l| !l.starts_with("date: ")).collect();
        assert_eq!(
            headers,
            ["connection: close", "content-length: 0"],
            "{answer:?}"
        );
        assert_eq!(body, "");
    }
    assert_eq!(upstream.hits("charges"), 0);
    let text = metrics(&client, &gateway).await;
    assert!(
        text.lines()
            .any(|l| l == "idem_store_duration_seconds_count{op=\"acquire\"} 0"),
        "the store was asked:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_require_key_a_post_without_key_is_400_and_a_get_passes_through() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://", "--require-key"]);
    let client = Client::new();

    let missing = client
        .send(
            Request::post(gateway.url("/charges"))
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_problem(&missing, 400, "urn:idem:problem:missing-key");
    assert_eq!(upstream.hits("charges"), 0);

    let unkeyed_get = get(&client, gateway.url("/hello")).await;
    assert_eq!(unkeyed_get.status, 200);
    assert_eq!(unkeyed_get.text(), "hello");
    assert!(!unkeyed_get.replayed());
    assert_eq!(upstream.hits("hello"), 1);

    let keyed = client
        .post(&gateway.url("/charges"), "required-1", "{}")
        .await;
    assert_eq!(keyed.status, 201);
    assert_eq!(upstream.hits("charges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_with_one_key_execute_twice_and_each_replays_its_own() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let url = gateway.url("/charges");

    for (tenant, charge) in [("alice", 1), ("bob", 2)] {
        let reply = client.send(as_tenant(&url, "shared-1", tenant)).await;
        assert_eq!(reply.status, 201);
        assert_eq!(reply.json()["charge"], charge, "{tenant}");
        assert!(!reply.replayed(), "{tenant}");
    }
    for (tenant, charge) in [("alice", 1), ("bob", 2)] {
        let reply = client.send(as_tenant(&url, "shared-1", tenant)).await;
        assert_eq!(reply.status, 201);
        assert_eq!(reply.json()["charge"], charge, "{tenant}");
        assert!(reply.replayed(), "{tenant}");
    }
    assert_eq!(upstream.hits("charges"), 2);
    // Neither tenant's record is in the anonymous scope.
    assert_eq!(record_status(&client, &gateway, "shared-1").await, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_scoping_off_a_second_tenant_gets_the_first_ones_replay() {
    let upstream = Upstream::start().await;
    // An empty list turns scoping off.
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--scope-header", ""],
    );
    let client = Client::new();
    let url = gateway.url("/charges");

    let alice = client.send(as_tenant(&url, "shared-1", "alice")).await;
    assert_eq!(alice.status, 201);
    assert_eq!(alice.text(), r#"{"charge":1}"#);
    assert!(!alice.replayed());
    let bob = client.send(as_tenant(&url, "shared-1", "bob")).await;
    assert_eq!(bob.status, 201);
    assert_eq!(bob.text(), r#"{"charge":1}"#);
    assert!(bob.replayed());
    assert_eq!(upstream.hits("charges"), 1);

    let record = get(&client, gateway.admin_url("/v1/keys/shared-1")).await;
    assert_eq!(record.status, 200);
    assert_eq!(record.json()["scope"], "0".repeat(64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_on_another_path_query_or_method_is_422_and_not_forwarded() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let request = |method: &str, path: &str| {
        Request::builder()
            .method(method)
            .uri(gateway.url(path))
            .header("idempotency-key", "fp-1")
            .body(Body::from("payload"))
            .unwrap()
    };

    let first = client.send(request("POST", "/echo?a=1")).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["query"], "a=1");

    for (method, path) in [
        ("POST", "/binary?a=1"),
        ("POST", "/echo?a=2"),
        ("POST", "/echo?a=1&b=2"),
        ("POST", "/echo"),
        ("PATCH", "/echo?a=1"),
    ] {
        let reply = client.send(request(method, path)).await;
        assert_eq!(reply.status, 422, "{method} {path}");
        assert_problem(&reply, 422, "urn:idem:problem:fingerprint-mismatch");
    }
    assert_eq!(upstream.hits("echo"), 1);
    assert_eq!(upstream.hits("binary"), 0);

    // The refusals left the record alone.
    let retry = client.send(request("POST", "/echo?a=1")).await;
    assert_eq!(retry.status, 200);
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(upstream.hits("echo"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_key_executes_again_once_its_ttl_has_passed() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--ttl", "1s", "--lease", "1s"],
    );
    let client = Client::new();
    let url = gateway.url("/charges");

    let first = client.post(&url, "ttl-1", "{}").await;
    assert_eq!(first.text(), r#"{"charge":1}"#);
    assert!(!first.replayed());
    let within = client.post(&url, "ttl-1", "{}").await;
    assert_eq!(within.text(), r#"{"charge":1}"#);
    assert!(within.replayed());
    assert_eq!(upstream.hits("charges"), 1);

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = client.post(&url, "ttl-1", "{}").await;
    assert_eq!(after.status, 201);
    assert_eq!(after.text(), r#"{"charge":2}"#);
    assert!(!after.replayed());
    assert_eq!(upstream.hits("charges"), 2);

    // The new execution is a new record, replayed in its turn.
    let again = client.post(&url, "ttl-1", "{}").await;
    assert_eq!(again.text(), r#"{"charge":2}"#);
    assert!(again.replayed());
}

/// Takes 5 s: the SQLite store waits out its busy timeout, which the gateway does not expose,
/// before it gives up. Both modes are checked at once, on one file, with one lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_store_is_503_and_not_forwarded_unless_passthrough() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let reject = Gateway::start(&upstream.url(), &["--store", &store]);
    let passthrough = Gateway::start(
        &upstream.url(),
        &["--store", &store, "--on-store-error", "passthrough"],
    );
    let client = Client::new();

    // Another process holds SQLite's write lock: the gateways' writes wait, then fail.
    let mut locker = SqliteConnectOptions::new()
        .filename(dir.path().join("idem.db"))
        .connect()
        .await
        .unwrap();
    let lock = locker.begin_with("BEGIN EXCLUSIVE").await.unwrap();

    let refused = tokio::spawn({
        let (client, url) = (client.clone(), reject.url("/charges"));
        async move { client.post(&url, "down-1", "{}").await }
    });
    let forwarded = client
        .post(&passthrough.url("/charges"), "down-2", "{}")
        .await;
    let refused = refused.await.unwrap();

    assert_problem(&refused, 503, "urn:idem:problem:store-unavailable");
    assert_eq!(refused.header("retry-after"), "1");
    assert_eq!(forwarded.status, 201);
    assert_eq!(forwarded.text(), r#"{"charge":1}"#);
    assert!(!forwarded.replayed());
    assert_eq!(upstream.hits("charges"), 1);
    // Reads still work under the lock: neither key was stored.
    assert_eq!(record_status(&client, &reject, "down-1").await, 404);
    assert_eq!(record_status(&client, &passthrough, "down-2").await, 404);

    lock.rollback().await.unwrap();
    locker.close().await.unwrap();

    // The gateways recover by themselves: both retries execute, and are then replayed.
    let retry = client.post(&reject.url("/charges"), "down-1", "{}").await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.text(), r#"{"charge":2}"#);
    assert!(!retry.replayed());
    let retry = client
        .post(&passthrough.url("/charges"), "down-2", "{}")
        .await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.text(), r#"{"charge":3}"#);
    assert!(!retry.replayed());
    let replay = client.post(&reject.url("/charges"), "down-1", "{}").await;
    assert!(replay.replayed());
    assert_eq!(replay.text(), r#"{"charge":2}"#);
    assert_eq!(upstream.hits("charges"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_408_or_429_is_ambiguous_and_released_by_default() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    for code in [408, 429] {
        let url = gateway.url(&format!("/status/{code}"));
        let key = format!("s-{code}");
        for _ in 0..2 {
            let reply = client.post(&url, &key, "").await;
            assert_eq!(reply.status, code);
            assert_eq!(reply.text(), format!("status {code}"));
            assert!(!reply.replayed());
        }
        assert_eq!(record_status(&client, &gateway, &key).await, 404);
    }
    assert_eq!(upstream.hits("status"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_drop_hop_by_hop_headers_and_recompute_content_length() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let url = gateway.url("/hop");

    for replayed in [false, true] {
        let reply = client.post(&url, "hop-1", "").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text(), "hop");
        assert_eq!(reply.replayed(), replayed);
        assert_eq!(reply.header("x-kept"), "yes");
        assert_eq!(reply.header("content-length"), "3");
        assert!(reply.headers.get("x-custom").is_none(), "{reply:?}");
        assert!(reply.headers.get("keep-alive").is_none(), "{reply:?}");
        assert!(reply.headers.get("connection").is_none(), "{reply:?}");
    }
    assert_eq!(upstream.hits("hop"), 1);
}
