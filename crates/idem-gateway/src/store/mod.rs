//! The store as the gateway sees it: chosen by a URL ([`StoreUrl`]), every call timed
//! (`InstrumentedStore`, which also keeps the last minute of latencies in a lock-free
//! `LatencyWindow`), stored responses sealed with the key ring of a key file (`key_files`), and
//! its schema brought up to date by `idem migrate` ([`migrate`]); a warning at start for a
//! PostgreSQL store on another host whose TLS an attacker could strip (`tls`); a store that
//! cannot be reached at start opened in the background (`PendingStore`).

pub(crate) mod instrumented;
pub(crate) mod key_files;
mod latency_window;
pub mod migrate;
mod pending;
mod tls;
mod url;

pub use self::url::{AtRest, KeyedDigests, MemoryUrl, PLAINTEXT_ACCEPTED, Sealing, StoreUrl};
pub(crate) use self::{
    instrumented::{GatewayStore, InstrumentedStore, STORE_DURATION},
    latency_window::LatencyWindow,
    pending::{PendingStore, RetryWaits, unreachable},
    tls::{warn_if_downgradable, warn_if_mysql_downgradable},
};
