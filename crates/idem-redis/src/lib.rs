//! The Redis store of idem: idempotency records shared by every instance of a service, on one
//! Redis server or a Redis Cluster.
//!
//! [`RedisStore`] implements the [`Store`](idem_core::Store) contract with one Lua function per
//! operation, on the server's clock and with the server's key expiry; the operations of
//! concurrent calls go to Redis together, in one script call; completions and the parts of
//! streamed responses are announced over pub/sub so that waiters on other instances wake up at
//! once. How Redis's persistence
//! settings bound what a restart can lose is in `docs/stores.md`.
//!
//! # Examples
//!
//! ```no_run
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use idem_core::{Address, Engine, Execution, Fingerprint, Policy, RunOutcome, StoredResponse};
//! use idem_redis::{RedisOptions, RedisStore};
//!
//! let options = RedisOptions::new("redis://127.0.0.1:6379").prefix("payments".parse()?);
//! let engine = Engine::new(RedisStore::open_with(options).await?, Policy::default());
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

mod batch;
mod changes;
mod connection;
mod error;
mod keys;
mod listing;
mod operation;
mod options;
mod prefix;
mod reply;
mod scripts;
mod store;
mod url;
mod walk;

pub use error::Error;
pub use options::RedisOptions;
pub use prefix::{InvalidPrefix, KeyPrefix};
pub use store::RedisStore;
