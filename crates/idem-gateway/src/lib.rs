//! The `idem` gateway: a reverse proxy that gives any HTTP API, in any language, idempotency
//! keys — exactly-once effects on top of at-least-once delivery.
//!
//! `idem serve` puts the [`idem_http`] layer in front of a [`Proxy`](proxy::Proxy) to the
//! upstream, with a store chosen by URL ([`StoreUrl`]), an admin listener (health, readiness,
//! Prometheus metrics, single records, a dashboard), structured logs and graceful shutdown.
//! [`Gateway`] runs the same thing in-process.
//!
//! The crate is one module per concern; the arrows between them run one way, from the command
//! line down to the store:
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`cli`] | the command line: flags, `IDEM_*` variables and the config file, read into one [`Config`] |
//! | [`serve`] | `idem serve`: the [`Config`], the [`Gateway`] (accept loop, connection bounds, admin server, purge, signals), the request log line and the metrics recorder |
//! | [`proxy`] | the upstream: the [`Upstream`] URL, the client and its pool with their own defaults, the bodies both ways, the 502/504 the proxy answers for an upstream that failed |
//! | [`store`] | the store: its URL, the instrumented store the gateway calls, the last minute of its latencies, the key files that seal records, `idem migrate` |
//! | `admin` | the admin listener's routes: the [`AdminToken`], the census, record views, forgetting a key, the OpenAPI document and the dashboard |
//! | [`keys`] | `idem keys`: an operator's view of the store without a running gateway |
//! | [`relay`] | `idem relay`: a transactional outbox published to a broker |
//! | [`demo`] | `idem demo`: payments through a lossy network, with and without the gateway |
//! | [`error`] | [`Error`], one enum per concern, and the problems (RFC 9457) the gateway answers with |
//! | `telemetry` | traces: W3C trace context taken from and put into headers, spans exported over OTLP |
//! | `tls` | the process's rustls provider, for its HTTPS clients |
//! | `units` | the [`HumanDuration`] and [`ByteSize`] that flags and config files are written in |
//!
//! The flags, the config file and what the gateway can and cannot guarantee are described in
//! `docs/gateway.md`; the crate's place among the others in `docs/architecture.md`.
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

pub mod cli;
pub mod deliver;
pub mod demo;
pub mod error;
pub mod keys;
pub mod proxy;
pub mod relay;
pub mod serve;
pub mod store;

mod admin;
mod telemetry;
mod tls;
mod units;

pub use admin::AdminToken;
pub use cli::Cli;
pub use error::{
    AdminTokenError, ConfigError, Error, KeyFileError, KeysError, StartupError, UpstreamError,
};
pub use proxy::Upstream;
pub use serve::{Config, Gateway, shutdown_signal};
pub use store::StoreUrl;
pub use units::{ByteSize, HumanDuration};

/// What the workspace's test harnesses reach into; not part of the API.
#[doc(hidden)]
pub mod testing {
    pub use crate::store::instrumented::InstrumentedStore;
}
