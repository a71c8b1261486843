//! The admin listener: health, readiness, metrics and single keys.

use axum::{body::Body, http::Request};
use idem_core::{IdempotencyKey, Scope};

use crate::{
    cli::fails,
    support::{Client, Gateway, Reply, Upstream, idem_command, sqlite_url},
};

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
    assert_eq!(record["body_bytes"], reply.body.len());
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

    // A parameter given twice is the API's problem too, not a plain-text rejection.
    let anonymous = Scope::ANONYMOUS.to_string();
    let twice = format!("/v1/keys/k?scope={anonymous}&scope={anonymous}");
    let repeated_scope = get(&client, gateway.admin_url(&twice)).await;
    assert_eq!(repeated_scope.status, 400);
    assert_eq!(
        repeated_scope.header("content-type"),
        "application/problem+json"
    );
    assert_eq!(
        repeated_scope.json()["type"],
        "urn:idem:problem:invalid-scope"
    );
    let repeated_force = delete(
        &client,
        gateway.admin_url("/v1/keys/k?force=true&force=true"),
    )
    .await;
    assert_eq!(repeated_force.status, 400);
    assert_eq!(
        repeated_force.json()["type"],
        "urn:idem:problem:invalid-force"
    );

    let bad_key = get(&client, gateway.admin_url("/v1/keys/a%20b")).await;
    assert_eq!(bad_key.status, 400);
    assert_eq!(bad_key.json()["type"], "urn:idem:problem:invalid-key");
    // Not UTF-8 once percent-decoded: the key parser's problem too, naming the byte.
    let not_utf8 = get(&client, gateway.admin_url("/v1/keys/ab%FF")).await;
    assert_eq!(not_utf8.status, 400);
    assert_eq!(not_utf8.json()["type"], "urn:idem:problem:invalid-key");
    assert_eq!(
        not_utf8.json()["detail"],
        "the idempotency key has a character that is not allowed (byte 0xff at position 2)"
    );

    let too_long = get(
        &client,
        gateway.admin_url(&format!("/v1/keys/{}", "k".repeat(256))),
    )
    .await;
    assert_eq!(too_long.status, 400);

    let unknown = delete(&client, gateway.admin_url("/v1/keys/never-used")).await;
    assert_eq!(unknown.status, 404);
}

/// A file holding `token` and a newline, in a directory removed when dropped.
pub(crate) fn token_file(token: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

pub(crate) async fn send_with(
    client: &Client,
    method: &str,
    url: String,
    token: Option<&str>,
) -> Reply {
    let mut request = Request::builder().method(method).uri(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    client.send(request.body(Body::empty()).unwrap()).await
}

fn assert_unauthorized(reply: &Reply) {
    assert_eq!(reply.status, 401);
    assert_eq!(reply.header("www-authenticate"), "Bearer");
    assert_eq!(reply.header("content-type"), "application/problem+json");
    assert_eq!(reply.json()["type"], "urn:idem:problem:unauthorized");
    assert_eq!(reply.json()["status"], 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_metrics_and_keys_need_it_and_the_probes_do_not() {
    let (_dir, path) = token_file("s3cret-admin-token");
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--admin-token-file", &path],
    );
    let client = Client::new();
    let reply = client.post(&gateway.url("/charges"), "tok-1", "{}").await;
    assert_eq!(reply.status, 201);

    for (method, path) in [
        ("GET", "/metrics"),
        ("GET", "/v1/keys/tok-1"),
        ("DELETE", "/v1/keys/tok-1"),
    ] {
        let url = || gateway.admin_url(path);
        assert_unauthorized(&send_with(&client, method, url(), None).await);
        assert_unauthorized(&send_with(&client, method, url(), Some("s3cret-admin-tokeN")).await);
        assert_unauthorized(&send_with(&client, method, url(), Some("s3cret-admin-token2")).await);
        assert_unauthorized(&send_with(&client, method, url(), Some("")).await);
        let basic = Request::builder()
            .method(method)
            .uri(url())
            .header("authorization", "Basic s3cret-admin-token")
            .body(Body::empty())
            .unwrap();
        assert_unauthorized(&client.send(basic).await);
    }
    // Refused requests changed nothing: the key is still there.
    let token = Some("s3cret-admin-token");
    let metrics = send_with(&client, "GET", gateway.admin_url("/metrics"), token).await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .text()
            .lines()
            .any(|l| l == "idem_requests_total{outcome=\"executed\"} 1"),
        "{}",
        metrics.text()
    );
    // Each refusal counted: five for each of the three routes.
    assert!(
        metrics
            .text()
            .lines()
            .any(|l| l == "idem_admin_unauthorized_total 15"),
        "{}",
        metrics.text()
    );
    let shown = send_with(&client, "GET", gateway.admin_url("/v1/keys/tok-1"), token).await;
    assert_eq!(shown.status, 200);
    assert_eq!(shown.json()["state"], "completed");
    let lower = Request::get(gateway.admin_url("/v1/keys/tok-1"))
        .header("authorization", "bearer s3cret-admin-token")
        .body(Body::empty())
        .unwrap();
    assert_eq!(client.send(lower).await.status, 200);
    let forgot = send_with(
        &client,
        "DELETE",
        gateway.admin_url("/v1/keys/tok-1"),
        token,
    )
    .await;
    assert_eq!(forgot.status, 204);

    for (path, body) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let probe = send_with(&client, "GET", gateway.admin_url(path), None).await;
        assert_eq!((probe.status.as_u16(), probe.text()), (200, body));
        let wrong = send_with(&client, "GET", gateway.admin_url(path), Some("wrong")).await;
        assert_eq!(wrong.status, 200);
    }
    // The token is never logged.
    let all_logs = serde_json::to_string(&gateway.logs()).unwrap();
    assert!(!all_logs.contains("s3cret-admin-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_admin_listener_answers_only_loopback_and_allowed_hosts() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--admin-allowed-hosts",
            "admin.internal,ops.internal:9999",
        ],
    );
    let client = Client::new();
    let with_host = |path: &str, host: &str| {
        Request::get(gateway.admin_url(path))
            .header("host", host)
            .body(Body::empty())
            .unwrap()
    };
    for host in [
        "localhost:9090",
        "127.0.0.1",
        "[::1]:1",
        "admin.internal",
        "ops.internal:9999",
    ] {
        let reply = client.send(with_host("/v1/keys", host)).await;
        assert_eq!(reply.status, 200, "{host}");
    }
    // A name a web page may have rebound to 127.0.0.1 reads nothing, and forgets nothing.
    for (path, host) in [
        ("/metrics", "rebound.example"),
        ("/v1/keys", "rebound.example:9090"),
        ("/v1/stats", "ops.internal:9998"),
    ] {
        let reply = client.send(with_host(path, host)).await;
        assert_eq!(reply.status, 421, "{path} {host}");
        assert_eq!(reply.json()["type"], "urn:idem:problem:host-not-allowed");
    }
    // The probes and the dashboard's files answer any host.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(client.send(with_host(path, "lb.example")).await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_file_can_come_from_the_environment() {
    let (_dir, path) = token_file("admin-token-from-env");
    let upstream = Upstream::start().await;
    let mut command = idem_command();
    command
        .args([
            "serve",
            "--upstream",
            &upstream.url(),
            "--store",
            "memory://",
        ])
        .env("IDEM_ADMIN_TOKEN_FILE", &path);
    let gateway = Gateway::spawn(command, &[]);
    let client = Client::new();
    let url = || gateway.admin_url("/metrics");
    assert_unauthorized(&send_with(&client, "GET", url(), None).await);
    assert_eq!(
        send_with(&client, "GET", url(), Some("admin-token-from-env"))
            .await
            .status,
        200
    );
}

#[test]
fn a_non_loopback_admin_listener_without_a_token_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    for addr in ["0.0.0.0:9090", "[::]:9090", "192.0.2.1:9090"] {
        assert_eq!(
            fails(
                &[
                    "serve",
                    "--upstream",
                    "http://127.0.0.1:9",
                    "--store",
                    &store,
                    "--admin-listen",
                    addr,
                ],
                2
            ),
            format!(
                "error: --admin-listen {addr} is not a loopback address: set --admin-token-file \
                 (or IDEM_ADMIN_TOKEN_FILE) so that its endpoints need a token"
            )
        );
    }
    // Refused before the store was opened, so before any socket was bound.
    assert!(!dir.path().join("idem.db").exists());
}

#[test]
fn a_missing_empty_or_multi_line_token_file_stops_start_up_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let file = path.to_str().unwrap();
    let serve = [
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--store",
        "memory://",
        "--admin-token-file",
        file,
    ];
    assert_eq!(
        fails(&serve, 2),
        format!(
            "error: cannot read the admin token file {file}: No such file or directory (os error 2)"
        )
    );
    std::fs::write(&path, "\n").unwrap();
    assert_eq!(
        fails(&serve, 2),
        format!("error: the admin token file {file} holds no usable token: it is empty")
    );
    std::fs::write(&path, "one\ntwo\n").unwrap();
    assert_eq!(
        fails(&serve, 2),
        format!(
            "error: the admin token file {file} holds no usable token: a bearer token is \
             visible ASCII without spaces, on one line"
        )
    );
    std::fs::write(&path, "short-token\n").unwrap();
    assert_eq!(
        fails(&serve, 2),
        format!(
            "error: the admin token file {file} holds no usable token: it is shorter than 16 \
             characters"
        )
    );
    let unreadable = dir.path().to_str().unwrap();
    let mut directory = serve;
    directory[6] = unreadable;
    assert!(fails(&directory, 2).starts_with(&format!(
        "error: cannot read the admin token file {unreadable}: "
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_a_processing_key_is_409_unless_forced() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    let slow = tokio::spawn({
        let client = client.clone();
        let url = gateway.url("/slow");
        async move {
            client
                .send(
                    Request::post(url)
                        .header("idempotency-key", "busy-1")
                        .header("x-delay-ms", "3000")
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
        }
    });
    upstream.wait_for_hits("slow", 1).await;

    let url = |query: &str| gateway.admin_url(&format!("/v1/keys/busy-1{query}"));
    let refused = delete(&client, url("")).await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.header("content-type"), "application/problem+json");
    assert_eq!(refused.json()["type"], "urn:idem:problem:key-processing");
    assert_eq!(
        delete(&client, url("?force=false")).await.json()["type"],
        "urn:idem:problem:key-processing"
    );
    let bad = delete(&client, url("?force=yes")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["type"], "urn:idem:problem:invalid-force");
    assert_eq!(get(&client, url("")).await.json()["state"], "processing");

    assert_eq!(delete(&client, url("?force=true")).await.status, 204);
    assert_eq!(get(&client, url("")).await.status, 404);
    assert_eq!(delete(&client, url("?force=true")).await.status, 404);

    // The forced key's request still finishes for its client; its result is not kept.
    let finished = slow.await.unwrap();
    assert_eq!(finished.status, 201);
    assert_eq!(get(&client, url("")).await.status, 404);
}
