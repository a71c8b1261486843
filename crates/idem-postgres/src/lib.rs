//! The PostgreSQL store of idem: idempotency records shared by every instance of a service, and
//! keys completed in the caller's own transaction.
//!
//! [`PostgresStore`] implements the [`Store`](idem_core::Store) contract on one table (and
//! `<table>_parts` for streamed responses). Each
//! operation is a single SQL statement, on the database server's clock; concurrent writes share
//! one statement and one commit ([group commit](PostgresOptions::batch_size)); fencing tokens
//! come from a sequence; waiters on other instances are woken through `LISTEN`/`NOTIFY` when a
//! record they found in flight is settled or a part of its streamed response is appended; expired
//! records and parts are purged in bounded batches by [`PostgresStore::spawn_purger`]. The schema is created by
//! [`PostgresStore::migrate`] (what `idem migrate` runs) and checked when a store is opened.
//!
//! Its transactional API, [`PostgresStore::acquire_in`] and [`PostgresStore::complete_in`], runs
//! on the caller's own `sqlx` transaction, so that a service's business rows and the key's
//! completion commit together or not at all: there is never a charge without its recorded
//! response, nor a recorded response without its charge. `docs/stores.md` in the repository
//! describes the patterns and their exact guarantees; `examples/axum-payments` is a complete
//! service built on them.
//!
//! [`patterns`] makes operations idempotent by their data, in the same transactions: a row
//! inserted once by its unique key, a state transition applied once.
//!
//! # Examples
//!
//! Charging an account and completing the key in one transaction:
//!
//! ```no_run
//! # async fn charge() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, StoredResponse, Terms};
//! use idem_postgres::{PostgresOptions, PostgresStore};
//!
//! let store = PostgresStore::connect("postgres://postgres@127.0.0.1/app", PostgresOptions::new())
//!     .await?;
//! let address = Address::anonymous("charge-7".parse()?);
//! let fingerprint = Fingerprint::from_bytes([7; 32]);
//! let terms = Terms::from(&Policy::default());
//!
//! let mut tx = store.pool().begin().await?;
//! match store.acquire_in(&mut tx, &address, &fingerprint, terms).await? {
//!     Acquisition::Acquired(lease) => {
//!         sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 'alice'")
//!             .execute(&mut *tx)
//!             .await?;
//!         let response = Outcome::from(StoredResponse::new(201).body("charged 10"));
//!         store
//!             .complete_in(&mut tx, &address, lease.token, &response, terms.ttl)
//!             .await?;
//!         tx.commit().await?; // the charge and the completed key, or neither
//!     }
//!     Acquisition::Completed(Outcome::Response(response)) => println!("replay: {}", response.status),
//!     Acquisition::Completed(Outcome::Unknown) => println!("500 outcome unknown"),
//!     Acquisition::InFlight { .. } | Acquisition::Mismatch => println!("409 / 422"),
//! }
//! # Ok(())
//! # }
//! ```

mod changes;
mod connections;
mod error;
mod key_digest;
mod options;
pub mod patterns;
mod row;
mod schema;
mod shared;
mod sql;
mod store;
mod url;
mod writes;

pub use error::Error;
pub use idem_sql::batch::{BatchError, BatchFailure};
pub use idem_sql::{InvalidName, Purger, SchemaName, TableName};
pub use options::PostgresOptions;
pub use schema::Migration;
pub use sql::Statement;
pub use store::PostgresStore;
