//! An orders API made safe to retry with idem's tower layer, its keys kept in SQLite.
//!
//! `POST /orders` creates an order and answers `201` with it. Behind [`IdempotencyLayer`], a
//! client that sends an `Idempotency-Key` can retry as often as it likes: the order is created
//! once, and every retry gets the first answer with `Idempotent-Replayed: true`.
//!
//! Run it with `cargo run -p axum-sqlite`, then:
//!
//! ```text
//! curl -i -X POST localhost:3000/orders -H 'Idempotency-Key: order-1' \
//!      -H 'Content-Type: application/json' -d '{"item":"book","quantity":2}'
//! ```
//!
//! Send it twice: the second answer is the same order, replayed.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::{Json, Router, extract::State, http::StatusCode, routing::post};
use idem_http::IdempotencyLayer;
use idem_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};

/// What a client orders.
#[derive(Debug, Deserialize)]
pub struct NewOrder {
    /// The item's name.
    pub item: String,
    /// How many.
    pub quantity: u32,
}

/// An order as created.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Order {
    /// Its number: one per order created.
    pub id: u64,
    /// The item's name.
    pub item: String,
    /// How many.
    pub quantity: u32,
}

/// The orders created so far.
#[derive(Debug, Default)]
pub struct Orders {
    created: AtomicU64,
}

impl Orders {
    /// How many orders were created.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::SeqCst)
    }
}

/// The API with the idempotency layer over `store`.
pub fn app(store: SqliteStore, orders: Arc<Orders>) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .with_state(orders)
        .layer(IdempotencyLayer::new(store))
}

async fn create_order(
    State(orders): State<Arc<Orders>>,
    Json(order): Json<NewOrder>,
) -> (StatusCode, Json<Order>) {
    let id = orders.created.fetch_add(1, Ordering::SeqCst) + 1;
    let order = Order {
        id,
        item: order.item,
        quantity: order.quantity,
    };
    (StatusCode::CREATED, Json(order))
}
