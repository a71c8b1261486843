//! The MySQL and MariaDB store of idem: idempotency records shared by every instance of a
//! service, and keys completed in the caller's own transaction.
//!
//! [`MysqlStore`] implements the [`Store`](idem_core::Store) contract on one table, for MySQL
//! 8.0 and later and MariaDB 10.6 and later, with the SQL both accept. Each write is one round
//! trip and one transaction, on the database server's clock; concurrent writes share them
//! ([group commit](MysqlOptions::batch_size)); fencing tokens come from an `AUTO_INCREMENT`
//! counter, drawn after the records are locked; waiters on other instances poll with backoff
//! (MySQL has no notifications); expired records are purged in bounded batches by
//! [`MysqlStore::spawn_purger`], and so are the parts of streamed responses, kept in
//! `<table>_parts` for requests on other instances to follow. The tables are created by
//! [`MysqlStore::migrate`] (what `idem migrate` runs) and checked when a store is opened.
//!
//! Its transactional API, [`MysqlStore::acquire_in`] and [`MysqlStore::complete_in`], runs on
//! the caller's own `sqlx` transaction, so that a service's business rows and the key's
//! completion commit together or not at all: there is never a charge without its recorded
//! response, nor a recorded response without its charge.
//!
//! Begin those transactions at `READ COMMITTED` ([`BEGIN_READ_COMMITTED`]), as the example
//! does. The records are found
//! through a unique index on their addresses, and under `REPEATABLE READ` (MySQL's default)
//! InnoDB's locks on a record found that way take the gap before it in the index too: until
//! your commit, the acquisitions of new keys whose addresses fall in that gap (about one in as
//! many as the table holds records) wait for your transaction.
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
//! use idem_mysql::{MysqlOptions, MysqlStore};
//!
//! let store = MysqlStore::connect_with(MysqlOptions::from_url("mysql://root@127.0.0.1/app")?)
//!     .await?;
//! let address = Address::anonymous("charge-7".parse()?);
//! let fingerprint = Fingerprint::from_bytes([7; 32]);
//! let terms = Terms::from(&Policy::default());
//!
//! let mut tx = store
//!     .pool()
//!     .begin_with(idem_mysql::BEGIN_READ_COMMITTED)
//!     .await?;
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

mod connections;
mod error;
mod key_digest;
mod options;
mod parts;
pub mod patterns;
mod row;
mod schema;
mod shared;
mod sql;
mod store;
mod writes;

pub use error::Error;
pub use idem_sql::{
    InvalidName, Purger, TableName,
    batch::{BatchError, BatchFailure},
};
pub use options::MysqlOptions;

/// The text that begins a transaction at `READ COMMITTED`, for `sqlx`'s `begin_with`: how to
/// begin the transactions [`MysqlStore::acquire_in`] and [`MysqlStore::complete_in`] run in (see
/// above), and how the store begins its purges.
pub const BEGIN_READ_COMMITTED: &str =
    "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";
pub use schema::Migration;
pub use sql::{BatchForm, Statement};
pub use store::MysqlStore;
