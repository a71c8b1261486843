//! First execution, replays, mismatches and scopes.

use axum::body::Body;
use http::{HeaderName, Request, StatusCode};
use idem_core::{FingerprintMode, IdempotencyKey, Scope};
use idem_http::{RequestOutcome, problem};

use crate::common::{Fixture, KEY, keyed, pattern, send};

#[tokio::test]
async fn the_first_request_executes_and_a_retry_replays_status_headers_and_body() {
    let f = Fixture::new();
    let app = f.app(f.layer());

    let first = send(&app, keyed("/charges", "pay-1", r#"{"amount":10}"#)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));
    assert!(!first.is_replay());
    let lines = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    };
    let body = r#"{"charge":"ch_1","received":13}"#;
    assert_eq!(
        first.header_lines(),
        lines(&[
            ("content-type", "application/json"),
            ("x-charge", "ch_1"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("content-length", "31"),
        ])
    );
    assert_eq!(first.text(), body);

    let retry = send(&app, keyed("/charges", "pay-1", r#"{"amount":10}"#)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(
        retry.header_lines(),
        // The anonymous scope's replay leaves the cookies out (tenancy.rs tests why).
        lines(&[
            ("content-type", "application/json"),
            ("x-charge", "ch_1"),
            ("content-length", "31"),
            ("idempotent-replayed", "true"),
        ])
    );
    assert_eq!(retry.text(), body);
    assert_eq!(retry.trailers, None);

    let key = retry.key.unwrap();
    assert_eq!(
        key.digest(),
        "pay-1".parse::<IdempotencyKey>().unwrap().digest()
    );
    assert_eq!(key.scope(), Scope::ANONYMOUS);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_path_or_query_is_422() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let first = send(
        &app,
        keyed("/charges?currency=EUR", "pay-1", r#"{"amount":10}"#),
    )
    .await;
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));

    for (uri, body) in [
        ("/charges?currency=EUR", r#"{"amount":11}"#),
        ("/echo?currency=EUR", r#"{"amount":10}"#),
        ("/charges?currency=USD", r#"{"amount":10}"#),
        ("/charges", r#"{"amount":10}"#),
    ] {
        let reply = send(&app, keyed(uri, "pay-1", body)).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{uri} {body}"
        );
        assert_eq!(reply.problem_type(), problem::FINGERPRINT_MISMATCH);
        assert_eq!(reply.outcome, Some(RequestOutcome::Mismatch));
    }
    // Another method on the same path is another request too.
    let patch = Request::patch("/charges?currency=EUR")
        .header(KEY, "pay-1")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"amount":10}"#))
        .unwrap();
    assert_eq!(
        send(&app, patch).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn json_bodies_equal_after_canonicalization_are_replayed() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let first = send(
        &app,
        keyed("/charges", "pay-1", r#"{"amount": 10, "currency": "EUR"}"#),
    )
    .await;
    let retry = send(
        &app,
        keyed("/charges", "pay-1", r#"{"currency":"EUR","amount":1.0e1}"#),
    )
    .await;
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(retry.body, first.body);
    // Big integers are compared exactly, never through a float.
    let big = send(
        &app,
        keyed("/charges", "pay-2", r#"{"amount":12345678901234567890}"#),
    )
    .await;
    let other = send(
        &app,
        keyed("/charges", "pay-2", r#"{"amount":12345678901234567891}"#),
    )
    .await;
    assert_eq!(big.outcome, Some(RequestOutcome::Executed));
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn raw_fingerprints_compare_bodies_as_sent() {
    let f = Fixture::new();
    let app = f.app(f.layer().fingerprint(FingerprintMode::Raw));
    send(&app, keyed("/charges", "pay-1", r#"{"amount": 10}"#)).await;
    let retry = send(&app, keyed("/charges", "pay-1", r#"{"amount":10}"#)).await;
    assert_eq!(retry.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(f.calls.get(), 1);
}

fn charge_as(tenant: &str) -> Request<Body> {
    Request::post("/charges")
        .header(KEY, "pay-1")
        .header("authorization", tenant)
        .body(Body::from("{}"))
        .unwrap()
}

#[tokio::test]
async fn tenants_that_pick_the_same_key_are_isolated_by_authorization() {
    let f = Fixture::new();
    let app = f.app(f.layer());

    let alice = send(&app, charge_as("Bearer alice")).await;
    let bob = send(&app, charge_as("Bearer bob")).await;
    assert_eq!(alice.outcome, Some(RequestOutcome::Executed));
    assert_eq!(bob.outcome, Some(RequestOutcome::Executed));
    assert_eq!(alice.header("x-charge"), Some("ch_1"));
    assert_eq!(bob.header("x-charge"), Some("ch_2"));

    let alice_again = send(&app, charge_as("Bearer alice")).await;
    assert_eq!(alice_again.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(alice_again.header("x-charge"), Some("ch_1"));

    let (alice_scope, bob_scope) = (alice.key.unwrap().scope(), bob.key.unwrap().scope());
    assert_ne!(alice_scope, bob_scope);
    assert_ne!(alice_scope, Scope::ANONYMOUS);
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn with_scoping_off_every_caller_shares_the_key() {
    let f = Fixture::new();
    let app = f.app(f.layer().scope_headers([]));
    let alice = send(&app, charge_as("Bearer alice")).await;
    let bob = send(&app, charge_as("Bearer bob")).await;
    assert_eq!(bob.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(bob.body, alice.body);
    assert_eq!(bob.key.unwrap().scope(), Scope::ANONYMOUS);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn configured_scope_headers_replace_authorization() {
    let f = Fixture::new();
    let app = f.app(
        f.layer()
            .scope_headers([HeaderName::from_static("x-tenant")]),
    );
    let as_tenant = |tenant: &str, auth: &str| {
        Request::post("/charges")
            .header(KEY, "pay-1")
            .header("x-tenant", tenant)
            .header("authorization", auth)
            .body(Body::empty())
            .unwrap()
    };
    let first = send(&app, as_tenant("t1", "Bearer alice")).await;
    // Another Authorization, same tenant: the same caller.
    let same = send(&app, as_tenant("t1", "Bearer bob")).await;
    let other = send(&app, as_tenant("t2", "Bearer alice")).await;
    assert_eq!(same.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(same.body, first.body);
    assert_eq!(other.outcome, Some(RequestOutcome::Executed));
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn a_final_4xx_is_stored_and_replayed() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    for (code, outcome) in [
        (404, RequestOutcome::Executed),
        (404, RequestOutcome::Replayed),
    ] {
        let reply = send(&app, keyed("/status/404", "k", "")).await;
        assert_eq!(reply.status.as_u16(), code);
        assert_eq!(reply.outcome, Some(outcome));
        assert_eq!(reply.text(), "call 1");
    }
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_401_or_403_releases_the_key_and_the_retry_executes() {
    for code in [401, 403] {
        let f = Fixture::new();
        let app = f.app(f.layer());
        let uri = format!("/status/{code}");
        for n in 1..=2 {
            let reply = send(&app, keyed(&uri, "k", "")).await;
            assert_eq!(reply.status.as_u16(), code);
            assert_eq!(reply.text(), format!("call {n}"));
            assert!(!reply.is_replay());
        }
        assert_eq!(f.calls.get(), 2, "{code}");
        // Nothing was stored: a refused caller cannot fill the store.
        assert!(f.store.is_empty(), "{code}");
    }
}

#[tokio::test]
async fn the_release_statuses_are_a_setting() {
    let f = Fixture::new();
    let app = f.app(f.layer().release_statuses([StatusCode::NOT_FOUND]));
    // 404 now releases; 401 is a final answer like any other 4xx, stored and replayed.
    for n in 1..=2 {
        let reply = send(&app, keyed("/status/404", "gone", "")).await;
        assert_eq!(reply.text(), format!("call {n}"));
    }
    let first = send(&app, keyed("/status/401", "refused", "")).await;
    let retry = send(&app, keyed("/status/401", "refused", "")).await;
    assert_eq!(first.text(), "call 3");
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(retry.text(), "call 3");
    assert_eq!(f.calls.get(), 3);
}

#[tokio::test]
async fn binary_bodies_are_executed_and_replayed_byte_exact() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let bytes: Vec<u8> = (0..=255u8).rev().chain(pattern(3_000)).collect();
    let request = || {
        Request::post("/echo")
            .header(KEY, "blob")
            .header("content-type", "application/octet-stream")
            .body(Body::from(bytes.clone()))
            .unwrap()
    };
    let first = send(&app, request()).await;
    let retry = send(&app, request()).await;
    assert_eq!(first.body, bytes);
    assert_eq!(retry.body, bytes);
    assert_eq!(retry.header("content-length"), Some("3256"));
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn hop_by_hop_headers_are_dropped_on_replay() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let first = send(&app, keyed("/hop", "k", "")).await;
    assert_eq!(first.header("x-private"), Some("for this hop"));

    let retry = send(&app, keyed("/hop", "k", "")).await;
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(
        retry.header_lines(),
        [
            ("x-kept".to_owned(), "yes".to_owned()),
            ("content-length".to_owned(), "10".to_owned()),
            ("idempotent-replayed".to_owned(), "true".to_owned()),
        ]
    );
    assert_eq!(retry.text(), "hop call 1");
}
