//! `POST /accounts/{id}/payments` behind idem's tower layer with a fencing header, against a real
//! PostgreSQL: a request whose lease was taken over cannot write after the retry that took it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use axum::{
    Router,
    body::Body,
    http::{HeaderName, Request, StatusCode},
};
use axum_payments::{App, FENCING_HEADER, Step};
use http_body_util::BodyExt;
use idem_core::{ManualClock, Timestamp};
use idem_http::IdempotencyLayer;
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_test_support::PgSchema;
use serde_json::{Value, json};
use sqlx::PgPool;
use tower::ServiceExt;

const AUTHORIZATION: &str = "Bearer sk_test_alice";
const LEASE: Duration = Duration::from_secs(30);

/// The service in a schema of its own, dropped at the end.
struct Service {
    app: App,
    pool: PgPool,
    options: PostgresOptions,
    _schema: PgSchema,
}

impl Service {
    /// `None` after saying why, when no server is configured. Alice's account holds 1,000.
    async fn start() -> Option<Self> {
        let common::Started { app, pool, schema } = common::start().await?;
        let options = PostgresOptions::new().schema(schema.name().parse().unwrap());
        let opened = app
            .router()
            .oneshot(
                Request::put("/accounts/alice")
                    .header("content-type", "application/json")
                    .body(Body::from(json!({ "balance": 1_000 }).to_string()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(opened.status(), StatusCode::CREATED);
        Some(Self {
            app,
            pool,
            options,
            _schema: schema,
        })
    }

    /// The service behind an idempotency layer of its own (a gateway instance) that sends the
    /// fencing token, on the same idem table, reading time from `clock`.
    async fn behind_a_gateway(&self, clock: &ManualClock) -> Router {
        let options = self.options.clone().test_clock(clock.clone());
        let store = PostgresStore::open(self.pool.clone(), options)
            .await
            .unwrap();
        let layer = IdempotencyLayer::new(store)
            .lease(LEASE)
            .fencing_header(HeaderName::from_static(FENCING_HEADER));
        self.app.router().layer(layer)
    }

    async fn balance(&self) -> i64 {
        sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 'alice'")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    async fn charges(&self) -> Vec<(i64, String)> {
        sqlx::query_as("SELECT id, key FROM charges ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }
}

/// A payment request; `token` is a fencing header set by hand (no layer in front).
fn payment(key: &str, amount: i64, token: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/accounts/alice/payments")
        .header("authorization", AUTHORIZATION)
        .header("idempotency-key", key)
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header(FENCING_HEADER, token);
    }
    request
        .body(Body::from(json!({ "amount": amount }).to_string()))
        .unwrap()
}

/// The answer's status, whether it is a replay, and its JSON body.
async fn send(router: Router, request: Request<Body>) -> (StatusCode, bool, Value) {
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, replayed, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_first_attempt_cannot_write_after_the_retry_that_took_its_key_over() {
    let Some(service) = Service::start().await else {
        return;
    };
    let start = Timestamp::from_millis(1_900_000_000_000);
    // Two gateway instances on one store; the second's clock is past the first's lease, as if
    // the first had frozen (and stopped renewing) for longer than the lease.
    let first_clock = ManualClock::new(start);
    let second_clock = ManualClock::new(start + LEASE + Duration::from_secs(1));
    let first_gateway = service.behind_a_gateway(&first_clock).await;
    let second_gateway = service.behind_a_gateway(&second_clock).await;

    // The first attempt reaches the service and stalls there before it writes anything.
    let mut held = service.app.faults().hold_once_at(Step::BeforePayment);
    let first = tokio::spawn(send(first_gateway, payment("pay-1", 250, None)));
    held.reached().await;

    // The client's retry reaches the other instance, takes the key over and pays.
    let (status, replayed, retry) = send(second_gateway.clone(), payment("pay-1", 250, None)).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    assert_eq!(retry["balance"], 750);
    let charge = retry["charge"].as_i64().unwrap();

    // The first attempt wakes up and writes late: refused, nothing written.
    held.release();
    let (status, _, late) = first.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(late["error"], "stale fencing token");
    let fence: i64 = sqlx::query_scalar("SELECT token FROM payment_fences WHERE key = 'pay-1'")
        .fetch_one(&service.pool)
        .await
        .unwrap();
    let late_token = late["token"].as_i64().unwrap();
    assert!(late_token < fence, "{late_token} refused below {fence}");

    assert_eq!(service.charges().await, vec![(charge, "pay-1".to_owned())]);
    assert_eq!(service.balance().await, 750);
    // Every later retry gets the retry's answer, from the store.
    let (status, replayed, again) = send(second_gateway, payment("pay-1", 250, None)).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(again, retry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fence_keeps_the_largest_token_and_a_newer_holder_finds_the_charge_made_before() {
    let Some(service) = Service::start().await else {
        return;
    };
    let router = service.app.router();

    // A holder writes, then (its gateway gone before recording the answer) a newer one comes:
    // it gets the charge that was made, not a second one.
    let (status, _, first) = send(router.clone(), payment("pay-2", 100, Some("5"))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(first["balance"], 900);
    let (status, _, newer) = send(router.clone(), payment("pay-2", 100, Some("9"))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(newer, first);

    // An older holder, after the newer one: refused. The same token again: allowed (the holder
    // itself retrying its write).
    let (status, _, stale) = send(router.clone(), payment("pay-2", 100, Some("7"))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(stale, json!({ "error": "stale fencing token", "token": 7 }));
    let (status, _, same) = send(router.clone(), payment("pay-2", 100, Some("9"))).await;
    assert_eq!((status, same), (StatusCode::CREATED, first.clone()));

    assert_eq!(service.charges().await.len(), 1);
    assert_eq!(service.balance().await, 900);

    // Without one token, or with one that is not a number: 400, nothing written.
    for token in [None, Some("seven"), Some("-")] {
        let (status, _, _) = send(router.clone(), payment("pay-3", 100, token)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{token:?}");
    }
    assert_eq!(service.charges().await.len(), 1);
    assert_eq!(service.balance().await, 900);
}
