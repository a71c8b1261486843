//! The SQLite store of idem: idempotency records that survive restarts, in one embedded file.
//!
//! [`SqliteStore`] implements the [`Store`](idem_core::Store) contract on a SQLite database in
//! WAL mode. Every operation is atomic across the processes that share the file; time is read
//! from an injected [`Clock`](idem_core::Clock); the schema is created and migrated on open.
//!
//! [`patterns`] makes operations idempotent by their data, inside your own transactions on your
//! own tables: a row inserted once by its unique key, a state transition applied once.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_core::{Engine, Execution, Fingerprint, Address, Policy, RunOutcome, StoredResponse};
//! use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
//!
//! let dir = tempfile::tempdir()?;
//! let options = SqliteOptions::new(dir.path().join("idem.db")).synchronous(Synchronous::Normal);
//! let engine = Engine::new(SqliteStore::open_with(options).await?, Policy::default());
//!
//! let address = Address::anonymous("pay-1".parse()?);
//! let outcome = engine
//!     .run(address, Fingerprint::from_bytes([1; 32]), |_lease| async {
//!         Execution::Final { value: "paid", response: StoredResponse::new(201) }
//!     })
//!     .await?;
//! assert!(matches!(outcome, RunOutcome::Executed("paid")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod error;
mod key_digest;
mod listing;
mod migrations;
mod options;
mod parts;
pub mod patterns;
mod readers;
mod row;
mod store;
mod url;
mod writer;
mod writes;

pub use error::Error;
pub use options::{SqliteOptions, Synchronous, UnknownSynchronous};
pub use store::SqliteStore;
