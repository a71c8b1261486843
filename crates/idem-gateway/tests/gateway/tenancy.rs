//! Strict tenancy: `--anonymous reject`, cookies in the anonymous scope, and the warning when
//! scoping is off.

use axum::{body::Body, http::Request};

use crate::{
    cli::fails,
    support::{Client, Gateway, Reply, Upstream},
};

async fn cookies(client: &Client, gateway: &Gateway, authorization: Option<&str>) -> Reply {
    let mut request = Request::post(gateway.url("/cookies")).header("idempotency-key", "c-1");
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    client.send(request.body(Body::empty()).unwrap()).await
}

fn set_cookies(reply: &Reply) -> Vec<&str> {
    reply
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_reject_refuses_keyed_requests_without_a_scope_header() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--anonymous", "reject"],
    );
    let client = Client::new();

    let refused = client.post(&gateway.url("/charges"), "t-1", "{}").await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.header("content-type"), "application/problem+json");
    assert_eq!(refused.json()["type"], "urn:idem:problem:scope-required");
    assert_eq!(
        refused.json()["detail"],
        "Requests with an idempotency key must identify their caller with one of these \
         headers: authorization; nothing was executed."
    );
    assert_eq!(upstream.hits("charges"), 0);

    // Nothing was stored: the same key from a caller that says who it is executes.
    let scoped = client
        .send(
            Request::post(gateway.url("/charges"))
                .header("idempotency-key", "t-1")
                .header("authorization", "Bearer alice")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(scoped.status, 201);
    assert!(!scoped.replayed());
    // A request without a key passes through as ever.
    let unkeyed = client
        .send(
            Request::post(gateway.url("/charges"))
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(unkeyed.status, 201);
    assert_eq!(upstream.hits("charges"), 2);
}

#[test]
fn anonymous_reject_with_scoping_off_is_refused_at_start() {
    assert_eq!(
        fails(
            &[
                "serve",
                "--upstream",
                "http://127.0.0.1:9",
                "--store",
                "memory://",
                "--anonymous",
                "reject",
                "--scope-header=",
            ],
            2
        ),
        "error: --anonymous reject needs a scope header: with scoping off (--scope-header \"\") \
         every request with a key would be refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_replay_has_no_set_cookie_and_a_scoped_one_keeps_it() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let first = cookies(&client, &gateway, None).await;
    assert_eq!(first.status, 201);
    assert_eq!(set_cookies(&first), ["session=1", "theme=dark"]);
    let replay = cookies(&client, &gateway, None).await;
    assert!(replay.replayed());
    assert_eq!(replay.status, 201);
    assert_eq!(replay.text(), r#"{"session":1}"#);
    assert_eq!(set_cookies(&replay), Vec::<&str>::new());
    assert_eq!(replay.header("content-type"), "application/json");

    let alice = cookies(&client, &gateway, Some("Bearer alice")).await;
    assert_eq!(set_cookies(&alice), ["session=2", "theme=dark"]);
    let again = cookies(&client, &gateway, Some("Bearer alice")).await;
    assert!(again.replayed());
    assert_eq!(again.text(), r#"{"session":2}"#);
    assert_eq!(set_cookies(&again), ["session=2", "theme=dark"]);
    assert_eq!(upstream.hits("cookies"), 2);
}

/// The warning's text, as a log line's `message`.
const SCOPING_OFF: &str = "scoping is off: every caller shares one key space, so two callers \
                           that send the same key get one execution and each other's responses \
                           (set --scope-header)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_scoping_off_the_gateway_warns_once_at_start_and_replays_no_cookies() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--scope-header="],
    );
    let client = Client::new();
    let alice = cookies(&client, &gateway, Some("Bearer alice")).await;
    assert_eq!(set_cookies(&alice), ["session=1", "theme=dark"]);
    let bob = cookies(&client, &gateway, Some("Bearer bob")).await;
    assert!(bob.replayed());
    assert_eq!(set_cookies(&bob), Vec::<&str>::new());

    let warning = gateway
        .log_line(|line| line["message"] == SCOPING_OFF)
        .await;
    assert_eq!(warning["level"], "WARN");
    let warnings = gateway
        .logs()
        .into_iter()
        .filter(|line| line["message"] == SCOPING_OFF)
        .count();
    assert_eq!(warnings, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_scoping_on_there_is_no_warning() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    // One request, so that the start-up lines have all been read.
    let reply = client.post(&gateway.url("/charges"), "w-1", "{}").await;
    assert_eq!(reply.status, 201);
    gateway
        .log_line(|line| line["target"] == "idem::request")
        .await;
    assert_eq!(
        gateway
            .logs()
            .into_iter()
            .filter(|line| line["level"] == "WARN")
            .count(),
        0,
        "{:?}",
        gateway.logs()
    );
}
