//! The `idem` gateway: a reverse proxy that gives any HTTP API, in any language, idempotency
//! keys — exactly-once effects on top of at-least-once delivery.
//!
//! `idem serve` puts the [`idem_http`] layer in front of a [`Proxy`] to the upstream, with a
//! store chosen by URL ([`StoreUrl`]), an admin listener (health, readiness, Prometheus metrics,
//! single records), structured logs and graceful shutdown. [`Gateway`] runs the same thing
//! in-process. `idem keys` and `idem migrate` work on a store directly; `idem relay`
//! ([`relay`]) publishes a transactional outbox to a broker.
//!
//! The flags, the config file and what the gateway can and cannot guarantee are described in
//! `docs/gateway.md`.
//!
//! # Examples
//!
//! ```
//! use idem_gateway::{Cli, Config, cli::Command};
//!
//! let cli = Cli::parse_from_env_and_file([
//!     "idem", "serve", "--upstream", "http://127.0.0.1:3000", "--ttl", "1h", "--store", "memory://",
//! ])?;
//! let Command::Serve(args) = cli.command else { unreachable!() };
//! let config = Config::try_from(&*args)?;
//! assert_eq!(config.idempotency.policy.ttl, std::time::Duration::from_secs(3600));
//! # Ok::<(), idem_gateway::Error>(())
//! ```

mod admin;
mod admin_auth;
mod census;
pub mod cli;
pub mod config;
mod connections;
mod dashboard;
pub mod demo;
mod duration;
mod error;
mod forget;
mod instrumented_store;
mod key_files;
pub mod keys;
mod latency_window;
pub mod logging;
mod metrics_recorder;
pub mod migrate;
pub mod problem;
mod proxy;
mod record_view;
pub mod relay;
mod serve;
mod size;
mod store_url;
mod upstream;

pub use admin_auth::AdminToken;
pub use cli::{Cli, serve};
pub use config::Config;
pub use duration::HumanDuration;
pub use error::{
    AdminTokenError, ConfigError, Error, KeyFileError, KeysError, StartupError, UpstreamError,
};
pub use instrumented_store::{GatewayStore, InstrumentedStore, STORE_DURATION};
pub use proxy::{
    Proxy, ProxyBody, REQUEST_DURATION, REQUEST_OWN_DURATION, UPSTREAM_DURATION, UpstreamBody,
    failure_response,
};
pub use record_view::{KeyList, ListedView, RecordFields, RecordView};
pub use serve::{Gateway, shutdown_signal};
pub use size::ByteSize;
pub use store_url::{MemoryUrl, StoreUrl};
pub use upstream::Upstream;
