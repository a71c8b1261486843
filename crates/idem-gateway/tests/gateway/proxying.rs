//! Forwarding and the HTTP contract through the binary.

use axum::{body::Body, http::Request};

use crate::support::{Client, Gateway, Upstream, big_body, chunked};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_post_is_executed_then_replayed() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let first = client
        .post(&gateway.url("/charges"), "pay-1", r#"{"amount": 10}"#)
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(first.text(), r#"{"charge":1}"#);
    assert!(!first.replayed());

    let retry = client
        .post(&gateway.url("/charges"), "pay-1", r#"{"amount": 10}"#)
        .await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.text(), r#"{"charge":1}"#);
    assert!(retry.replayed());
    assert_eq!(retry.header("content-type"), "application/json");
    assert_eq!(retry.header("content-length"), "12");

    // The same payload serialized another way is the same request.
    let reserialized = client
        .post(&gateway.url("/charges"), "pay-1", r#"{ "amount" : 1e1 }"#)
        .await;
    assert_eq!(reserialized.status, 201);
    assert!(reserialized.replayed());

    // Another body under the key is refused.
    let other = client
        .post(&gateway.url("/charges"), "pay-1", r#"{"amount": 11}"#)
        .await;
    assert_eq!(other.status, 422);
    assert_eq!(
        other.json()["type"],
        "urn:idem:problem:fingerprint-mismatch"
    );
    assert_eq!(upstream.hits("charges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_requests_carry_x_forwarded_headers_and_the_upstream_host() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let reply = client
        .send(
            Request::get(gateway.url("/echo?a=1&b=two"))
                .header("host", "api.example.com")
                .header("x-forwarded-for", "203.0.113.9")
                .header("x-forwarded-host", "spoofed.example.com")
                .header("connection", "x-hop")
                .header("x-hop", "dropped")
                .header("x-custom", "kept")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 200);
    let seen = reply.json();
    assert_eq!(seen["method"], "GET");
    assert_eq!(seen["path"], "/echo");
    assert_eq!(seen["query"], "a=1&b=two");
    let headers = &seen["headers"];
    assert_eq!(headers["host"][0], upstream.addr.to_string());
    assert_eq!(headers["x-forwarded-for"][0], "203.0.113.9, 127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"][0], "http");
    assert_eq!(headers["x-forwarded-host"][0], "api.example.com");
    assert_eq!(headers["x-custom"][0], "kept");
    assert!(headers.get("x-hop").is_none());
    assert!(headers.get("connection").is_none());

    // A keyed request is rebuilt by the layer: it keeps the client's address and its key header.
    let keyed = client
        .send(
            Request::post(gateway.url("/echo"))
                .header("idempotency-key", "\"echo-1\"")
                .body(Body::from("payload"))
                .unwrap(),
        )
        .await;
    assert_eq!(keyed.status, 200);
    let seen = keyed.json();
    assert_eq!(seen["headers"]["x-forwarded-for"][0], "127.0.0.1");
    assert_eq!(seen["headers"]["idempotency-key"][0], "\"echo-1\"");
    assert_eq!(seen["headers"]["host"][0], upstream.addr.to_string());
    assert_eq!(seen["body"], "payload");
    assert_eq!(upstream.hits("echo"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_methods_pass_through_and_nothing_is_stored() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    for _ in 0..2 {
        let reply = client
            .send(
                Request::get(gateway.url("/hello"))
                    .header("idempotency-key", "get-1")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.text(), "hello");
        assert!(!reply.replayed());
    }
    assert_eq!(upstream.hits("hello"), 2);
    let record = client
        .send(
            Request::get(gateway.admin_url("/v1/keys/get-1"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(record.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_body_over_max_body_is_413_and_not_stored() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--max-body", "1KiB"],
    );
    let client = Client::new();
    let body = "x".repeat(1025);

    let reply = client.post(&gateway.url("/charges"), "big-1", &body).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.header("content-type"), "application/problem+json");
    assert_eq!(reply.json()["type"], "urn:idem:problem:body-too-large");
    assert_eq!(upstream.hits("charges"), 0);
    let record = client
        .send(
            Request::get(gateway.admin_url("/v1/keys/big-1"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(record.status, 404);

    // The limit is for bodies that must be buffered: without a key, the body streams through.
    let unkeyed = client
        .send(
            Request::post(gateway.url("/binary"))
                .body(Body::from(body.clone()))
                .unwrap(),
        )
        .await;
    assert_eq!(unkeyed.status, 200);
    assert_eq!(unkeyed.body, body.as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_bodies_are_read_whole() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let chunks: Vec<&'static [u8]> = vec![b"first,", b"second,", b"third"];

    let send = |body| {
        Request::post(gateway.url("/binary"))
            .header("idempotency-key", "chunked-1")
            .body(body)
            .unwrap()
    };
    let first = client.send(send(chunked(chunks.clone()))).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "first,second,third");
    assert!(!first.replayed());

    // The same bytes in one piece are the same request.
    let retry = client.send(send(Body::from("first,second,third"))).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.body, "first,second,third");
    assert!(retry.replayed());

    // Without a key, chunks stream through.
    let unkeyed = client
        .send(
            Request::post(gateway.url("/binary"))
                .body(chunked(chunks))
                .unwrap(),
        )
        .await;
    assert_eq!(unkeyed.body, "first,second,third");
    assert_eq!(upstream.hits("binary"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_bodies_are_byte_exact_and_replayed_byte_exact() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let body: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let send = || {
        Request::post(gateway.url("/binary"))
            .header("idempotency-key", "bin-1")
            .header("content-type", "application/octet-stream")
            .body(Body::from(body.clone()))
            .unwrap()
    };
    let first = client.send(send()).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, body);
    let retry = client.send(send()).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, body);
    assert_eq!(retry.header("content-length"), "70000");
    assert_eq!(upstream.hits("binary"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_max_stored_response_is_delivered_and_its_replay_says_why() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--max-stored-response", "1KiB"],
    );
    let client = Client::new();
    let url = gateway.url("/big?bytes=5000");

    let first = client.post(&url, "big-response", "").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, big_body(5000));

    let retry = client.post(&url, "big-response", "").await;
    assert_eq!(retry.status, 200);
    assert!(retry.replayed());
    assert_eq!(retry.header("content-type"), "application/problem+json");
    assert_eq!(retry.json()["type"], "urn:idem:problem:response-not-stored");
    assert_eq!(upstream.hits("big"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_4xx_is_replayed_and_5xx_released_by_default() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    for _ in 0..2 {
        let reply = client.post(&gateway.url("/status/404"), "s-404", "").await;
        assert_eq!(reply.status, 404);
        assert_eq!(reply.text(), "status 404");
    }
    assert_eq!(upstream.hits("status"), 1);

    for _ in 0..2 {
        let reply = client.post(&gateway.url("/status/503"), "s-503", "").await;
        assert_eq!(reply.status, 503);
        assert!(!reply.replayed());
    }
    assert_eq!(upstream.hits("status"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_clients_and_h2c_upstreams_are_served() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://", "--upstream-h2c"]);
    let client = Client::h2c();
    let reply = client
        .send(
            Request::post(gateway.url("/echo?x=1"))
                .header("idempotency-key", "h2-1")
                .body(Body::from("over h2"))
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 200);
    let seen = reply.json();
    assert_eq!(seen["version"], "HTTP/2.0");
    assert_eq!(seen["query"], "x=1");
    assert_eq!(seen["body"], "over h2");
    assert_eq!(
        seen["headers"]["x-forwarded-host"][0],
        gateway.addr.to_string()
    );
    assert_eq!(seen["headers"]["x-forwarded-for"][0], "127.0.0.1");

    let retry = client
        .send(
            Request::post(gateway.url("/echo?x=1"))
                .header("idempotency-key", "h2-1")
                .body(Body::from("over h2"))
                .unwrap(),
        )
        .await;
    assert!(retry.replayed());
    assert_eq!(upstream.hits("echo"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upstream_connection_releases_the_key_with_502() {
    // A port that was free a moment ago: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let gateway = Gateway::start(&upstream, &["--store", "memory://"]);
    let client = Client::new();

    for _ in 0..2 {
        let reply = client
            .post(&gateway.url("/charges"), "refused-1", "{}")
            .await;
        assert_eq!(reply.status, 502);
        assert_eq!(reply.header("content-type"), "application/problem+json");
        assert_eq!(
            reply.json()["type"],
            "urn:idem:problem:upstream-unreachable"
        );
        // Released (NotSent), not stored: the retry tries again instead of replaying.
        assert!(!reply.replayed());
        let record = client
            .send(
                Request::get(gateway.admin_url("/v1/keys/refused-1"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(record.status, 404);
    }

    let passthrough = client
        .send(
            Request::get(gateway.url("/hello"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(passthrough.status, 502);
    assert_eq!(
        passthrough.json()["type"],
        "urn:idem:problem:upstream-unreachable"
    );
}

/// An upstream, and a gateway in front of it that sends each holder's token in
/// `Idempotency-Token`.
async fn with_fencing_header() -> (Upstream, Gateway) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--fencing-header",
            "Idempotency-Token",
        ],
    );
    (upstream, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_fencing_header_the_upstream_gets_each_holders_token_and_never_a_clients() {
    let (upstream, gateway) = with_fencing_header().await;
    let client = Client::new();
    // A POST to /echo (which answers with the request it got) with a token of the client's own.
    let echo = |key: Option<&str>| {
        let mut request = Request::post(gateway.url("/echo")).header("idempotency-token", "999");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request.body(Body::from("{}")).unwrap()
    };
    let admin = |method: &str| {
        Request::builder()
            .method(method)
            .uri(gateway.admin_url("/v1/keys/fence-1"))
            .body(Body::empty())
            .unwrap()
    };

    // Each holder of the key: the upstream gets the token its record shows, not the client's.
    let mut tokens = Vec::new();
    for holder in 1..=2 {
        let forwarded = client.send(echo(Some("fence-1"))).await;
        assert_eq!(forwarded.status, 200);
        assert!(!forwarded.replayed());
        let token = client.send(admin("GET")).await.json()["token"]
            .as_u64()
            .unwrap();
        assert_eq!(
            forwarded.json()["headers"]["idempotency-token"],
            serde_json::json!([token.to_string()]),
            "holder {holder}"
        );
        tokens.push(token);
        // Forgotten, the key's next request is a new holder.
        assert_eq!(client.send(admin("DELETE")).await.status, 204);
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");

    // Without a key the request passes through, without the client's token.
    let unkeyed = client.send(echo(None)).await;
    assert_eq!(unkeyed.status, 200);
    assert_eq!(unkeyed.json()["headers"].get("idempotency-token"), None);
    assert_eq!(upstream.hits("echo"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_names_the_fencing_header_in_connection_cannot_strip_it() {
    let (_upstream, gateway) = with_fencing_header().await;
    let client = Client::new();
    // `Connection` lists the fencing header (and a header of the client's own): both are
    // hop-by-hop for this request, so they go at ingress, before the layer sets the token.
    let request = Request::post(gateway.url("/echo"))
        .header("idempotency-key", "fence-strip")
        .header("connection", "Idempotency-Token, X-Private")
        .header("x-private", "1")
        .body(Body::from("{}"))
        .unwrap();
    let forwarded = client.send(request).await;
    assert_eq!(forwarded.status, 200);
    let token = client
        .send(
            Request::get(gateway.admin_url("/v1/keys/fence-strip"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .json()["token"]
        .as_u64()
        .unwrap();
    let headers = &forwarded.json()["headers"];
    assert_eq!(
        headers["idempotency-token"],
        serde_json::json!([token.to_string()])
    );
    assert_eq!(headers.get("x-private"), None);
    assert_eq!(headers.get("connection"), None);
}

#[test]
fn a_fencing_header_that_is_the_key_header_is_refused_with_one_line() {
    let output = crate::support::idem(&[
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--fencing-header",
        "Idempotency-Key",
    ]);
    assert_eq!(output.code, Some(2));
    assert_eq!(
        output.stderr.trim_end(),
        "error: --fencing-header idempotency-key is also the key header: the gateway removes the \
         fencing header from every request before it sets its own, so it needs a header of its own"
    );
}
