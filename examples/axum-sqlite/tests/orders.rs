//! The example behaves as its docs say: one order per key, retries replayed, even across a
//! restart of the service on the same database file.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum_sqlite::{Order, Orders, app};
use http::{Request, StatusCode};
use idem_sqlite::SqliteStore;
use tower::ServiceExt;

fn order(key: &str, body: &str) -> Request<Body> {
    Request::post("/orders")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn send(app: &axum::Router, request: Request<Body>) -> (StatusCode, bool, Order) {
    let response = app.clone().oneshot(request).await.unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, replayed, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn retries_create_one_order_even_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.db");
    let orders = Arc::new(Orders::default());
    let book = Order {
        id: 1,
        item: "book".into(),
        quantity: 2,
    };

    let api = app(SqliteStore::open(&path).await.unwrap(), orders.clone());
    let first = send(&api, order("order-1", r#"{"item":"book","quantity":2}"#)).await;
    assert_eq!(first, (StatusCode::CREATED, false, book));
    // Same payload, re-serialized by the client: still a replay.
    let retry = send(
        &api,
        order("order-1", r#"{ "quantity": 2, "item": "book" }"#),
    )
    .await;
    assert_eq!(retry.0, StatusCode::CREATED);
    assert!(retry.1);
    assert_eq!(retry.2.id, 1);
    drop(api);

    let restarted = app(SqliteStore::open(&path).await.unwrap(), orders.clone());
    let after_restart = send(
        &restarted,
        order("order-1", r#"{"item":"book","quantity":2}"#),
    )
    .await;
    assert_eq!(
        (after_restart.0, after_restart.1, after_restart.2.id),
        (StatusCode::CREATED, true, 1)
    );
    let another = send(
        &restarted,
        order("order-2", r#"{"item":"pen","quantity":1}"#),
    )
    .await;
    assert_eq!(
        (another.0, another.1, another.2.id),
        (StatusCode::CREATED, false, 2)
    );
    assert_eq!(orders.created(), 2);
}
