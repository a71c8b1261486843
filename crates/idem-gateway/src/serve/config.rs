//! [`Config`]: everything `idem serve` needs, from flags, `IDEM_*` variables, a TOML file and
//! defaults, in that order of precedence.
//!
//! The config file names settings like the flags, without the dashes in front:
//!
//! ```toml
//! upstream = "http://127.0.0.1:3000"
//! store = "sqlite:///var/lib/idem/idem.db"
//! ttl = "24h"
//! in-flight = "wait"
//! scope-header = ["Authorization", "X-Tenant"]   # [] turns scoping off
//! methods = ["POST", "PATCH", "PUT"]             # or "POST,PATCH,PUT"
//! require-key = true
//! ```
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use idem_gateway::Config;
//!
//! let mut config = Config::new("http://127.0.0.1:3000".parse()?);
//! config.listen = "127.0.0.1:0".parse()?;
//! config.idempotency.policy.lease = Duration::from_secs(2);
//! assert_eq!(config.idempotency.key_header, "idempotency-key");
//! assert_eq!(config.idempotency.policy.ttl, Duration::from_secs(24 * 60 * 60));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::{
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    time::Duration,
};

use idem_core::{DigestKey, sealing::KeyRing};
use idem_http::Settings;

use crate::{
    AdminToken, StoreUrl, Upstream,
    proxy::{DEFAULT_UPSTREAM_IDLE_TIMEOUT, DEFAULT_UPSTREAM_MAX_IDLE},
    store::{AtRest, KeyedDigests, Sealing},
};

/// Default of `--listen`.
pub const DEFAULT_LISTEN: SocketAddr = loopback(8080);
/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10_000;
/// Default of `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `--admin-listen`.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr = loopback(9090);
/// Default of `--store`.
pub const DEFAULT_STORE: &str = "sqlite://idem.db";
/// Default of `--connect-timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of `--upstream-timeout`.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `--shutdown-timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--body-timeout` (the layer alone has none).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--max-buffered`: 256 MiB (the layer alone has no limit).
pub const DEFAULT_MAX_BUFFERED: usize = 256 << 20;
/// Default of `--encryption-key-file`: none, stored responses are kept in clear.
pub const DEFAULT_ENCRYPTION: Option<KeyRing> = None;
/// Default of `--digest-key-file`: none, log digests are unkeyed.
pub const DEFAULT_DIGEST_KEY: Option<DigestKey> = None;

/// `127.0.0.1:port`.
const fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// The settings of a [`Gateway`](crate::Gateway).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Where clients connect (port 0: any free port, see [`Gateway::addr`](crate::Gateway::addr)).
    pub listen: SocketAddr,
    /// The most client connections open at once.
    pub max_connections: u32,
    /// How long a client connection may stay without a request in progress.
    pub idle_timeout: Duration,
    /// Where the admin endpoints listen.
    pub admin_listen: SocketAddr,
    /// The token the admin endpoints need (all but `/healthz` and `/readyz`); none: open, which
    /// only a loopback `admin_listen` allows.
    pub admin_token: Option<AdminToken>,
    /// The `Host` names (or `name:port`) that an admin listener without a token answers besides
    /// the loopback ones (`localhost`, `127.0.0.1`, `[::1]`, …); any other gets a `421`.
    pub admin_allowed_hosts: Vec<String>,
    /// The API requests are forwarded to.
    pub upstream: Upstream,
    /// Speak h2c (HTTP/2 with prior knowledge) to the upstream instead of HTTP/1.1.
    pub upstream_h2c: bool,
    /// How long to wait for a connection to the upstream.
    pub connect_timeout: Duration,
    /// How long the whole upstream exchange may take once connected: response head and body.
    pub upstream_timeout: Duration,
    /// The most connections to the upstream kept open, idle, for the next request.
    pub upstream_max_idle: usize,
    /// How long a connection to the upstream is kept idle before it is closed.
    pub upstream_idle_timeout: Duration,
    /// Where records are kept.
    pub store: StoreUrl,
    /// The keys that seal stored responses at rest; `None` keeps them in clear.
    pub encryption: Option<KeyRing>,
    /// With `encryption`, whether a record in clear is still replayed (`true`, for the window
    /// after sealing is turned on over a store that holds such records) or refused as corrupted
    /// (`false`, the default: it may have been written by someone without the key).
    pub accept_plaintext: bool,
    /// The key that makes the digests in logs and the store's addresses keyed; `None` leaves
    /// them unkeyed. Installed for the whole process by [`Gateway::bind`](crate::Gateway::bind).
    pub digest_key: Option<DigestKey>,
    /// With `digest_key`, how long after the store is opened a new key also looks for a record
    /// under its plain address, stored before the key was turned on; `None` is the policy's TTL.
    pub digest_changeover: Option<Duration>,
    /// What the idempotency layer applies: the key header, the methods, the policy (TTL, lease,
    /// in-flight requests, ambiguous outcomes, waiters, store calls' time limit), scoping,
    /// fingerprints, the bounds on bodies and the fencing header. (The proxy never fails: it
    /// marks its own `502` and `504` with their [`Delivery`](idem_http::Delivery), so the
    /// settings' `classify_error` has nothing to classify.)
    pub idempotency: Settings,
    /// How long requests in progress may take to finish on shutdown.
    pub shutdown_timeout: Duration,
}

impl Config {
    /// The time limit of one store call: the policy's store timeout, or the lease divided by
    /// [`Policy::STORE_TIMEOUT_LEASE_FRACTION`](idem_core::Policy::STORE_TIMEOUT_LEASE_FRACTION).
    pub fn store_call_limit(&self) -> Duration {
        self.idempotency.policy.store_call_limit()
    }

    /// How the store's records are protected at rest: sealed with [`encryption`](Self::encryption),
    /// addressed by digests keyed with [`digest_key`](Self::digest_key).
    pub fn at_rest(&self) -> AtRest {
        AtRest {
            sealing: self.encryption.clone().map(|ring| Sealing {
                ring,
                accept_plaintext: self.accept_plaintext,
            }),
            digests: self.digest_key.clone().map(|key| KeyedDigests {
                key,
                changeover: self
                    .digest_changeover
                    .unwrap_or(self.idempotency.policy.ttl),
            }),
        }
    }

    /// The defaults, forwarding to `upstream`: the gateway's own, and the idempotency layer's
    /// with a body timeout and a budget of buffered bytes.
    pub fn new(upstream: Upstream) -> Self {
        let mut idempotency = Settings::default();
        idempotency.body_timeout = Some(DEFAULT_BODY_TIMEOUT);
        idempotency.max_buffered = Some(DEFAULT_MAX_BUFFERED);
        Self {
            listen: DEFAULT_LISTEN,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            admin_listen: DEFAULT_ADMIN_LISTEN,
            admin_token: None,
            admin_allowed_hosts: Vec::new(),
            upstream,
            upstream_h2c: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            upstream_max_idle: DEFAULT_UPSTREAM_MAX_IDLE,
            upstream_idle_timeout: DEFAULT_UPSTREAM_IDLE_TIMEOUT,
            store: DEFAULT_STORE
                .parse()
                .expect("the default store URL is valid"),
            encryption: DEFAULT_ENCRYPTION,
            accept_plaintext: false,
            digest_key: DEFAULT_DIGEST_KEY,
            digest_changeover: None,
            idempotency,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}
