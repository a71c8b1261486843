//! Idempotency keys for HTTP services written in Rust: a tower [`Layer`](tower::Layer) for axum,
//! hyper and tonic.
//!
//! [`IdempotencyLayer`] wraps a service in [`Idempotency`]: a `POST` or `PATCH` that carries an
//! `Idempotency-Key` header runs at most once per key and caller, and its retries get the stored
//! response with `Idempotent-Replayed: true`. Concurrent duplicates get `409` (or wait for the
//! first), a key reused for another request gets `422`, and every refusal is an
//! `application/problem+json` body with a stable [`problem`] type. The records live in any
//! [`idem_core::Store`]; the behaviour is the HTTP contract of the repository's `docs/http.md`.
//!
//! # Examples
//!
//! An axum application (the `axum` feature):
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::sync::{
//!     Arc,
//!     atomic::{AtomicUsize, Ordering},
//! };
//!
//! use axum::{Router, body::Body, routing::post};
//! use http::{Request, StatusCode};
//! use idem_core::MemoryStore;
//! use idem_http::{IdempotencyLayer, RequestOutcome};
//! use tower::ServiceExt;
//!
//! let charges = Arc::new(AtomicUsize::new(0));
//! let counter = Arc::clone(&charges);
//! let app = Router::new()
//!     .route(
//!         "/charges",
//!         post(move || async move {
//!             counter.fetch_add(1, Ordering::SeqCst);
//!             (StatusCode::CREATED, "charged 10 EUR")
//!         }),
//!     )
//!     .layer(IdempotencyLayer::new(Arc::new(MemoryStore::new())));
//!
//! let charge = || {
//!     Request::post("/charges")
//!         .header("idempotency-key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
//!         .header("authorization", "Bearer sk_test_alice")
//!         .body(Body::from(r#"{"amount": 10}"#))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(charge()).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//!
//! // The client did not get the answer and retries with the same key: no second charge.
//! let retry = app.oneshot(charge()).await?;
//! assert_eq!(retry.status(), StatusCode::CREATED);
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! assert_eq!(retry.extensions().get(), Some(&RequestOutcome::Replayed));
//! assert_eq!(charges.load(Ordering::SeqCst), 1);
//! # Ok::<(), std::convert::Infallible>(())
//! # }).unwrap();
//! ```
//!
//! # Contents
//!
//! - [`IdempotencyLayer`] and [`Idempotency`] (the service), with their [`Settings`]
//!   ([`OnStoreError`], [`Anonymous`], [`ClassifyError`] and [`Delivery`]);
//! - [`ResponseBody`] and [`ResponseFuture`]: what the service returns;
//! - [`RequestOutcome`] and [`RequestKey`]: response extensions, for logs and metrics;
//! - [`problem`]: the typed rejections and their problem types;
//! - [`hop_by_hop`]: the headers that concern one connection, which are never stored or passed on;
//! - [`FromBytes`]: the request bodies the layer can rebuild after buffering them.
//!
//! # Metrics
//!
//! Each request adds one to the counter `idem_requests_total{outcome}` of the
//! [`metrics`](https://docs.rs/metrics) facade, with the labels of [`RequestOutcome::as_str`]. A new
//! key refused because the store is full ([`problem::STORE_FULL`]) also adds one to
//! `idem_store_full_total`.
//!
//! # Features
//!
//! None is on by default.
//!
//! - `axum`: implements [`FromBytes`] for `axum::body::Body`, so that the layer can wrap an axum
//!   router. It depends on axum-core only, so the application's axum keeps the features it asks for.
//! - `clap`: derives [`clap::ValueEnum`](https://docs.rs/clap) for [`OnStoreError`] and
//!   [`Anonymous`] (and, through idem-core's `clap` feature, for its
//!   [`Ambiguous`](idem_core::Ambiguous) and [`FingerprintMode`](idem_core::FingerprintMode)), so that a command line can take them as they are.
//! - `opentelemetry`: with a `tracing-opentelemetry` layer in the application's subscriber, the
//!   response of an execution keeps that execution's W3C trace context in the store, and the
//!   `idem.replay` span of every retry links to it. The layer's spans (`idem.acquire`,
//!   `idem.execute`, `idem.complete`, `idem.replay`, at the `debug` level, with the key's digest
//!   and the outcome) exist with or without it; it adds the OpenTelemetry API only (the
//!   application brings the SDK and its exporter).
//! - `tonic`: implements [`FromBytes`] for `tonic::body::Body`, so that the layer can wrap a
//!   tonic server (gRPC trailers are stored and replayed with the response).

mod body;
mod budget;
mod capture;
mod collector;
mod follow;
mod from_bytes;
mod future;
pub mod hop_by_hop;
mod layer;
mod live;
mod outcome;
pub mod problem;
mod request;
mod service;
mod settings;
mod stream;
#[cfg(test)]
mod test_support;
mod trace;

pub use body::ResponseBody;
pub use follow::{StreamProgress, stream_progress};
pub use from_bytes::FromBytes;
pub use future::ResponseFuture;
pub use layer::IdempotencyLayer;
pub use outcome::{RequestKey, RequestOutcome};
pub use service::Idempotency;
pub use settings::{
    Anonymous, ClassifyError, DEFAULT_KEY_HEADER, DEFAULT_MAX_BODY, DEFAULT_MAX_STORED_RESPONSE,
    DEFAULT_METHODS, DEFAULT_RELEASE_STATUSES, DEFAULT_SCOPE_HEADERS, Delivery, OnStoreError,
    Settings,
};
