//! The anonymous scope: refused with `Anonymous::Reject`, and never replaying cookies.

use axum::body::Body;
use http::{HeaderName, Request, StatusCode};
use std::time::Duration;

use idem_core::{
    Acquisition, Address, Fingerprint, FingerprintMode, IdempotencyKey, RecordState, Scope, Store,
    StoredResponse, Terms,
};
use idem_http::{Anonymous, RequestOutcome, problem};

use crate::common::{Fixture, KEY, keyed, send};

fn charge_as(tenant: &str) -> Request<Body> {
    Request::post("/charges")
        .header(KEY, "pay-1")
        .header("authorization", tenant)
        .body(Body::from("{}"))
        .unwrap()
}

/// The header lines of a reply, as `(name, value)` pairs in order.
fn lines(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_keyed_request_without_a_scope_header_is_400_when_anonymous_keys_are_refused() {
    let f = Fixture::new();
    let app = f.app(f.layer().anonymous(Anonymous::Reject));

    let refused = send(&app, keyed("/charges", "pay-1", "{}")).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.outcome, Some(RequestOutcome::Invalid));
    assert_eq!(refused.problem_type(), problem::SCOPE_REQUIRED);
    assert_eq!(
        refused.problem()["detail"],
        "Requests with an idempotency key must identify their caller with one of these \
         headers: authorization; nothing was executed."
    );
    assert_eq!(f.calls.get(), 0);
    let address = Address::anonymous("pay-1".parse::<IdempotencyKey>().unwrap());
    assert_eq!(f.store.get(&address).await.unwrap(), None);

    // A caller that says who it is runs; a request without a key still passes through.
    let scoped = send(&app, charge_as("Bearer alice")).await;
    assert_eq!(scoped.status, StatusCode::CREATED);
    assert_eq!(scoped.outcome, Some(RequestOutcome::Executed));
    let unkeyed = Request::post("/charges").body(Body::empty()).unwrap();
    assert_eq!(
        send(&app, unkeyed).await.outcome,
        Some(RequestOutcome::Passthrough)
    );
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn with_scoping_off_anonymous_reject_refuses_every_keyed_request() {
    let f = Fixture::new();
    let app = f.app(f.layer().scope_headers([]).anonymous(Anonymous::Reject));
    let refused = send(&app, charge_as("Bearer alice")).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.problem_type(), problem::SCOPE_REQUIRED);
    assert_eq!(
        refused.problem()["detail"],
        "Requests with an idempotency key must identify their caller, and no scope header is \
         configured; nothing was executed."
    );
    assert_eq!(f.calls.get(), 0);
}

#[tokio::test]
async fn an_anonymous_response_is_stored_without_its_cookies_and_a_scoped_one_keeps_them() {
    let f = Fixture::new();
    let app = f.app(f.layer());

    // The client that caused the response gets all of it.
    let first = send(&app, keyed("/charges", "pay-1", "{}")).await;
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));
    assert_eq!(
        first.header_lines(),
        lines(&[
            ("content-type", "application/json"),
            ("x-charge", "ch_1"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("content-length", "30"),
        ])
    );
    // The store never holds the cookies, and no replay carries them.
    let address = Address::anonymous("pay-1".parse::<IdempotencyKey>().unwrap());
    let record = f.store.get(&address).await.unwrap().unwrap();
    let RecordState::Completed {
        outcome: idem_core::Outcome::Response(stored),
        ..
    } = record.state
    else {
        panic!("not completed: {record:?}")
    };
    let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["content-type", "x-charge"]);
    let replay = send(&app, keyed("/charges", "pay-1", "{}")).await;
    assert_eq!(replay.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(
        replay.header_lines(),
        lines(&[
            ("content-type", "application/json"),
            ("x-charge", "ch_1"),
            ("content-length", "30"),
            ("idempotent-replayed", "true"),
        ])
    );

    // A tenant's replay is its own response, cookies included.
    let alice = send(&app, charge_as("Bearer alice")).await;
    assert_eq!(alice.outcome, Some(RequestOutcome::Executed));
    let again = send(&app, charge_as("Bearer alice")).await;
    assert_eq!(again.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(
        again.header_lines(),
        lines(&[
            ("content-type", "application/json"),
            ("x-charge", "ch_2"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("content-length", "30"),
            ("idempotent-replayed", "true"),
        ])
    );
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn with_scoping_off_replays_carry_no_cookies() {
    let f = Fixture::new();
    let app = f.app(f.layer().scope_headers(Vec::<HeaderName>::new()));
    let alice = send(&app, charge_as("Bearer alice")).await;
    assert_eq!(alice.header("set-cookie"), Some("a=1"));
    let bob = send(&app, charge_as("Bearer bob")).await;
    assert_eq!(bob.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(bob.headers.get_all("set-cookie").iter().count(), 0);
    assert_eq!(bob.header("x-charge"), Some("ch_1"));
    assert_eq!(bob.key.unwrap().scope(), Scope::ANONYMOUS);
}

#[tokio::test]
async fn cookies_stored_in_the_anonymous_scope_before_they_were_dropped_are_not_replayed() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    // A record as an older version stored it: cookies and all.
    let address = Address::anonymous("pay-1".parse::<IdempotencyKey>().unwrap());
    let fingerprint = Fingerprint::builder(FingerprintMode::Json)
        .method("POST")
        .path("/charges")
        .query(None)
        .body(Some("application/json"), b"{}");
    let terms = Terms {
        lease: Duration::from_secs(30),
        ttl: Duration::from_secs(60),
    };
    let Acquisition::Acquired(lease) = f
        .store
        .acquire(&address, &fingerprint, terms)
        .await
        .unwrap()
    else {
        panic!("a new key is acquired")
    };
    let stored = StoredResponse::new(201)
        .header("x-charge", "ch_0")
        .header("set-cookie", "session=old")
        .body("old");
    f.store
        .complete(&address, lease.token, &stored.into(), terms.ttl)
        .await
        .unwrap();

    let replay = send(&app, keyed("/charges", "pay-1", "{}")).await;
    assert_eq!(replay.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(
        replay.header_lines(),
        lines(&[
            ("x-charge", "ch_0"),
            ("content-length", "3"),
            ("idempotent-replayed", "true"),
        ])
    );
    assert_eq!(f.calls.get(), 0);
}
