//! The core of idem: exactly-once effects on top of at-least-once delivery.
//!
//! This crate holds the domain model and no I/O: the [`IdempotencyKey`], the caller's [`Scope`],
//! the request [`Fingerprint`], the [`Record`], its states and its [`Outcome`], [`FencingToken`]s and
//! [`Lease`]s, the [`Policy`], the [`Store`] contract every backend implements, the [`Engine`]
//! that runs an operation under a key, and [`MemoryStore`], the reference store. With the
//! `sealing` feature, [`sealing::Sealed`] keeps stored responses encrypted in any store;
//! [`KeyedAddresses`] makes any store keep keyed digests of scopes and keys. With the
//! `clap` feature, [`Ambiguous`] and [`FingerprintMode`] derive `clap::ValueEnum`, so that a
//! command line takes them as they are.
//!
//! The state machine is described in `docs/state-machine.md` of the repository.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use idem_core::{
//!     Address, Engine, Execution, Fingerprint, FingerprintMode, MemoryStore, Policy, RunOutcome,
//!     Scope, StoredResponse,
//! };
//!
//! let engine = Engine::new(MemoryStore::new(), Policy::default());
//! let scope = Scope::from_identity([b"Bearer sk_live_alice".as_slice()]);
//! let address = Address::new(scope, r#""pay-1""#.parse()?);
//! let fingerprint = Fingerprint::builder(FingerprintMode::Json)
//!     .method("POST")
//!     .path("/payments")
//!     .query(None)
//!     .body(Some("application/json"), br#"{"amount": 10}"#);
//!
//! let outcome = engine
//!     .run(address, fingerprint, |_lease| async {
//!         let response = StoredResponse::new(201).body("paid");
//!         Execution::Final { value: (), response }
//!     })
//!     .await?;
//! assert!(matches!(outcome, RunOutcome::Executed(())));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub mod census;
mod clock;
mod codec;
mod dyn_store;
mod engine;
mod error;
mod fingerprint;
mod key;
mod keyed_addresses;
mod lease;
mod listing;
mod log_digest;
mod memory;
mod policy;
mod record;
mod response;
mod scope;
#[cfg(feature = "sealing")]
pub mod sealing;
mod store;
pub mod store_url;
pub mod time_limit;
mod trace_context;
pub mod transition;

pub use census::{CensusClaim, CensusTurn, Pace, Posted};
pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use codec::DecodeError;
pub use dyn_store::DynStore;
pub use engine::{
    Engine, Execution, Followed, NotRun, OnSettled, Rest, RunOutcome, Settled, WaitSlot,
};
pub use error::StoreError;
pub use fingerprint::{Fingerprint, FingerprintBuilder, FingerprintMode, InvalidFingerprint};
pub use key::{IdempotencyKey, KEY_HEADER, KeyError, MAX_KEY_LEN};
pub use keyed_addresses::KeyedAddresses;
pub use lease::{FencingToken, Lease};
pub use listing::{
    Census, InvalidCursor, InvalidStateFilter, ListCursor, ListPage, ListQuery, Listed, Newest,
    StateFilter,
};
pub use log_digest::{DIGEST_KEY_LEN, DigestKey, DigestKeyInstalled};
pub use memory::MemoryStore;
pub use policy::{Ambiguous, InFlight, Policy};
pub use record::{Outcome, Record, RecordState};
pub use response::{OUTCOME_UNKNOWN_TYPE, StoredResponse};
pub use scope::{Address, InvalidScope, Scope};
pub use store::{Acquisition, Store, Terms};
pub use trace_context::{InvalidTraceContext, TraceContext};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
