//! A Jepsen-style chaos harness for the `idem` gateway: real gateway processes on a real store,
//! many [`idem_client`] callers, faults injected all along, a history of every attempt and
//! execution, and a check of that history at the end.
//!
//! `idem-chaos run` starts an upstream API that records every execution, the store (a SQLite
//! file, or a PostgreSQL, MariaDB or Redis server or a Redis Cluster of its own), two gateways
//! sharing it, and a proxy in front of them that drops some of their answers. Callers make
//! logical operations, one key each, while a seeded schedule SIGKILLs gateways, stops them past
//! their lease, restarts the store (on a cluster: kills a master and lets its replica take over),
//! cuts a gateway from its store or its upstream (through a proxy on each link), steps their
//! clocks, and slows the upstream down or has it answer 503. The upstream refuses a request
//! whose fencing token is lower than one it applied for the operation. Then [`check()`] reads
//! the history: duplicates, stale writes, lost operations, stuck keys. With `--json`, the run's
//! [`Report`] records its figures, options and [`provenance`] (date, commit, machine);
//! `idem-chaos report FILE…` prints many reports as one markdown table ([`summary`]).
//! `docs/reliability.md` explains the run and its figures.
//!
//! # Examples
//!
//! Checking a history by hand: an operation executed twice, through a gateway nobody killed,
//! is a duplicate no fault explains, and fails the run in either mode.
//!
//! ```
//! use std::time::Duration;
//! use idem_chaos::{
//!     Ambiguous, GatewayId, History, Reply, Stamp, StoreKind,
//!     check::{Settings, check},
//!     history::{Execution, Operation},
//! };
//!
//! let at = |ms| Stamp::from_millis(ms);
//! let execution = |id, start| Execution {
//!     id,
//!     key: "op-1".into(),
//!     gateway: GatewayId(0),
//!     token: id,
//!     start: at(start),
//!     end: Some(at(start + 10)),
//! };
//! let history = History {
//!     operations: vec![Operation {
//!         key: "op-1".into(),
//!         started: at(0),
//!         ended: at(900),
//!         outcome: Reply::Answered { status: 201, replayed: false, execution: Some(2) },
//!     }],
//!     executions: vec![execution(1, 0), execution(2, 500)],
//!     ..History::default()
//! };
//! let settings = Settings {
//!     store: StoreKind::Postgres,
//!     ambiguous: Ambiguous::Retry,
//!     lease: Duration::from_secs(2),
//!     ttl: Duration::from_secs(60),
//! };
//! let verdict = check(&history, settings);
//! assert_eq!(verdict.figures.duplicates, 1);
//! assert_eq!(verdict.figures.explained_duplicates, 0);
//! assert!(!verdict.passed());
//! ```

mod admin;
mod callers;
pub mod check;
mod error;
pub mod faults;
pub mod gateway_process;
pub mod history;
mod http_client;
mod injector;
mod link;
pub mod options;
mod process;
mod progress;
pub mod provenance;
mod proxy;
pub mod report;
pub mod resources;
mod run;
pub mod store;
pub mod summary;
mod upstream;

pub use check::{Failure, Figures, Verdict, check};
pub use error::Error;
pub use faults::{FaultKind, Schedule};
pub use gateway_process::GatewayProgram;
pub use history::{GatewayId, History, Reply, Stamp};
pub use options::{Ambiguous, InFlight, RedisPersistence, RunArgs, StoreKind};
pub use report::Report;
pub use run::run;
