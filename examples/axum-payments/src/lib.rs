//! A payments service on axum and sqlx that charges an account and completes the request's
//! idempotency key **in one transaction**, with idem's Postgres transactional API.
//!
//! `POST /accounts/{id}/charges` with an `Idempotency-Key` header runs in one transaction:
//!
//! 1. [`PostgresStore::acquire_in`](idem_postgres::PostgresStore::acquire_in) takes the key (a
//!    retry of a completed charge gets its stored response instead, with `Idempotent-Replayed:
//!    true`; a concurrent duplicate waits for this transaction to end, then replays it);
//! 2. the account is debited and the charge inserted;
//! 3. [`PostgresStore::complete_in`](idem_postgres::PostgresStore::complete_in) stores the
//!    response under the key;
//! 4. the transaction commits: the charge and the completed key together, or neither.
//!
//! Whatever step fails (the tests inject a failure before the charge, after it, and before the
//! commit), the transaction rolls back: there is never a charge without a completed key nor a
//! completed key without its charge, and the client's retry charges exactly once.
//!
//! Two operations need no key at all, made idempotent by their data with
//! [`idem_postgres::patterns`]: creating an account is an [`Insert::once`] by its id (already
//! there: 200 with the account as it was), and a refund is the [`Transition`] of the charge from
//! `succeeded` to `refunded` (already applied: 409), whose credit commits only with the
//! transition that applied.
//!
//! `POST /accounts/{id}/payments` is the same charge for a service that sits **behind an idem
//! gateway** (or the tower layer) instead of using the store itself: the gateway sends each
//! request's fencing token (`idem serve --fencing-header Idempotency-Token`), and the payment
//! keeps the largest token seen per key and refuses a smaller one, so that a request whose
//! gateway froze past its lease cannot write after the retry that took its key over.
//!
//! [`Insert::once`]: idem_postgres::patterns::Insert::once
//! [`Transition`]: idem_postgres::patterns::Transition
//!
//! # Examples
//!
//! ```no_run
//! # async fn serve() -> anyhow::Result<()> {
//! use axum_payments::App;
//! use idem_postgres::PostgresOptions;
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/payments").await?;
//! let app = App::new(pool, PostgresOptions::new()).await?; // migrates its tables and idem's
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.router()).await?;
//! # Ok(())
//! # }
//! ```

mod accounts;
mod app;
mod charges;
mod error;
mod faults;
mod payments;
mod refunds;
mod routes;

pub use app::App;
pub use error::AppError;
pub use faults::{Faults, Held, Step};
pub use payments::FENCING_HEADER;
