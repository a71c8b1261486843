//! The calling side of idem: an HTTP client that sends each logical operation under one
//! idempotency key and retries it with that same key, so that a retry is never a second charge.
//!
//! A [`Client`] wraps a [`reqwest::Client`]. Each [`RequestBuilder`] is one operation with its
//! own key — a fresh UUIDv4, or the caller's ([`RequestBuilder::key`]) — and its body held in
//! memory. [`send`](RequestBuilder::send) sends it until a definite answer:
//!
//! - **definite** (returned as `Ok`): any `2xx` or `3xx`; a `4xx` other than `408`, `409` and
//!   `429` (a `400` or `413` would be refused again); a `5xx` other than `502`, `503` and `504`
//!   (a `500` is the API's own answer); and any replay (`Idempotent-Replayed: true`), which the
//!   server gives to every retry.
//! - **retried**, with the same key: no answer (connection refused or broken, the attempt timed
//!   out), `408`, `409` (the key is still running), `429`, `502`, `503` and `504` — the key makes
//!   a second delivery harmless.
//! - **final errors**: the `outcome-unknown` problem ([`Error::OutcomeUnknown`]: the result was
//!   lost on the server's side), and the `fingerprint-mismatch` problem ([`Error::Mismatch`]:
//!   the key was used for a different request, a caller's mistake).
//!
//! A problem details body (`application/problem+json`) is parsed into a [`Problem`]: the
//! errors carry theirs, and [`Response::problem`] reads any other's. The Python and TypeScript
//! clients in the repository's `clients/` follow the same contract, checked by one table of
//! cases that the three clients' tests share.
//!
//! Waits between attempts grow exponentially with full jitter; a `Retry-After` on a `409`,
//! `429` or `503` makes the wait at least that long. Attempts stop at
//! [`max_attempts`](ClientBuilder::max_attempts) or at the [`deadline`](ClientBuilder::deadline)
//! ([`Error::GaveUp`]); a wait that would pass the deadline is not waited. The
//! [`Response`] says whether it is a replay and how many attempts it took.
//!
//! The repository's `docs/client.md` explains each choice; `docs/http.md` is the server's side.
//!
//! # Examples
//!
//! A charge through the idem gateway, sent twice under one key: executed once.
//!
//! ```
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! # use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
//! # let charges = Arc::new(AtomicUsize::new(0));
//! # let counter = Arc::clone(&charges);
//! # let api = axum::Router::new().route("/charges", axum::routing::post(move || async move {
//! #     let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
//! #     (axum::http::StatusCode::CREATED, format!("charge {n}"))
//! # }));
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! # let upstream = format!("http://{}", listener.local_addr().unwrap());
//! # tokio::spawn(async move { axum::serve(listener, api).await.unwrap() });
//! # let mut config = idem_gateway::Config::new(upstream.parse().unwrap());
//! # config.listen = "127.0.0.1:0".parse().unwrap();
//! # config.admin_listen = "127.0.0.1:0".parse().unwrap();
//! # config.store = "memory://".parse().unwrap();
//! # let gateway = idem_gateway::Gateway::bind(config).await.unwrap();
//! # let gateway_url = format!("http://{}", gateway.addr());
//! # tokio::spawn(gateway.run(std::future::pending()));
//! use std::time::Duration;
//!
//! use idem_client::Client;
//! use serde_json::json;
//!
//! let client = Client::builder()
//!     .max_attempts(4)
//!     .deadline(Duration::from_secs(10))
//!     .build();
//!
//! // One operation, one key: every retry inside `send` carries it.
//! let charge = client
//!     .post(format!("{gateway_url}/charges"))
//!     .json(&json!({ "amount": 1000, "currency": "eur" }));
//! let key = charge.key_str().to_owned();
//! let first = charge.send().await?;
//! assert_eq!(first.status(), 201);
//! assert_eq!(first.body(), "charge 1");
//! assert_eq!(first.attempts(), 1);
//! assert!(!first.replayed());
//!
//! // The same operation again — say, after a crash — under its key: the stored answer.
//! let again = client
//!     .post(format!("{gateway_url}/charges"))
//!     .key(&key)
//!     .json(&json!({ "amount": 1000, "currency": "eur" }))
//!     .send()
//!     .await?;
//! assert_eq!(again.status(), 201);
//! assert_eq!(again.body(), "charge 1");
//! assert!(again.replayed());
//! # assert_eq!(charges.load(Ordering::SeqCst), 1);
//! # Ok::<(), idem_client::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Features
//!
//! - `rustls` (default): HTTPS through rustls with the ring provider. Building a client with
//!   the default [`http`](ClientBuilder::http) installs ring as the process's rustls provider
//!   when none is; a [`reqwest::Client`] built before that needs one installed
//!   (`rustls::crypto::ring::default_provider().install_default()`). Without the feature, only
//!   `http://` URLs work.

#[cfg(test)]
mod cases;
mod classify;
mod client;
mod error;
mod key;
mod policy;
mod problem;
mod request;
mod response;
mod retry;
mod retry_after;
#[cfg(feature = "rustls")]
mod tls;

pub use client::{Client, ClientBuilder};
pub use error::{Error, GiveUpReason, LastFailure};
pub use idem_core::KeyError;
pub use problem::Problem;
pub use request::RequestBuilder;
pub use response::Response;
