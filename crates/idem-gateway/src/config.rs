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
//! config.lease = Duration::from_secs(2);
//! assert_eq!(config.key_header, "idempotency-key");
//! assert_eq!(config.ttl, Duration::from_secs(24 * 60 * 60));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::{ffi::OsString, fmt, net::SocketAddr, path::Path, str::FromStr, time::Duration};

use clap::{ArgAction, ArgMatches, parser::ValueSource};
use http::{HeaderName, Method};
use idem_core::{Ambiguous, DigestKey, FingerprintMode, InFlight, sealing::KeyRing};
use idem_http::{Anonymous, OnStoreError};

use crate::{
    AdminToken, Error, StoreUrl, Upstream,
    cli::{AmbiguousMode, AnonymousMode, FingerprintArg, InFlightMode, ServeArgs, StoreErrorMode},
    key_files,
};

/// Default of `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10_000;
/// Default of `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `--admin-listen`.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9090";
/// Default of `--store`.
pub const DEFAULT_STORE: &str = "sqlite://idem.db";
/// Default of `--key-header`.
pub const DEFAULT_KEY_HEADER: &str = "Idempotency-Key";
/// Default of `--methods`.
pub const DEFAULT_METHODS: &str = "POST,PATCH";
/// Default of `--scope-header`.
pub const DEFAULT_SCOPE_HEADER: &str = "Authorization";
/// Default of `--anonymous`.
pub const DEFAULT_ANONYMOUS: &str = "allow";
/// Default of `--ttl`: as Stripe.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default of `--lease`.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default of `--max-waiters`.
pub const DEFAULT_MAX_WAITERS: usize = 1000;
/// What `--store-timeout` defaults to: the lease divided by this, so that a renewal that hangs
/// leaves time for the next one.
pub const DEFAULT_STORE_TIMEOUT_LEASE_FRACTION: u32 = 3;
/// Default of `--wait-timeout`.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--connect-timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of `--upstream-timeout`.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `--shutdown-timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--max-body`: 10 MiB.
pub const DEFAULT_MAX_BODY: usize = 10 << 20;
/// Default of `--body-timeout`.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `--max-buffered`: 256 MiB.
pub const DEFAULT_MAX_BUFFERED: usize = 256 << 20;
/// Default of `--max-stored-response`: 1 MiB.
pub const DEFAULT_MAX_STORED_RESPONSE: usize = 1 << 20;
/// Default of `--encryption-key-file`: none, stored responses are kept in clear.
pub const DEFAULT_ENCRYPTION: Option<KeyRing> = None;
/// Default of `--digest-key-file`: none, log digests are unkeyed.
pub const DEFAULT_DIGEST_KEY: Option<DigestKey> = None;

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
    /// The API requests are forwarded to.
    pub upstream: Upstream,
    /// Speak h2c (HTTP/2 with prior knowledge) to the upstream instead of HTTP/1.1.
    pub upstream_h2c: bool,
    /// How long to wait for a connection to the upstream.
    pub connect_timeout: Duration,
    /// How long the whole upstream exchange may take once connected: response head and body.
    pub upstream_timeout: Duration,
    /// Where records are kept.
    pub store: StoreUrl,
    /// The keys that seal stored responses at rest; `None` keeps them in clear.
    pub encryption: Option<KeyRing>,
    /// The key that makes the digests in logs keyed; `None` leaves them unkeyed. Installed for
    /// the whole process by [`Gateway::bind`](crate::Gateway::bind).
    pub digest_key: Option<DigestKey>,
    /// The header that carries the idempotency key.
    pub key_header: HeaderName,
    /// The methods whose requests are deduplicated.
    pub methods: Vec<Method>,
    /// Whether a covered request without a key is refused (400) rather than forwarded.
    pub require_key: bool,
    /// How long a completed key is replayed.
    pub ttl: Duration,
    /// How long a key is held without renewal.
    pub lease: Duration,
    /// What a request whose key is in flight gets.
    pub in_flight: InFlight,
    /// In wait mode, how many requests may wait at once.
    pub max_waiters: usize,
    /// What happens to ambiguous outcomes.
    pub ambiguous: Ambiguous,
    /// The headers hashed into the scope; empty turns scoping off.
    pub scope_headers: Vec<HeaderName>,
    /// What a keyed request without any scope header gets.
    pub anonymous: Anonymous,
    /// How bodies are fingerprinted.
    pub fingerprint: FingerprintMode,
    /// The largest body of a request with a key.
    pub max_body: usize,
    /// How long the body of a request with a key may take to arrive.
    pub body_timeout: Duration,
    /// The most bytes of request bodies buffered at once, across all requests.
    pub max_buffered: usize,
    /// The largest response stored for replay.
    pub max_stored_response: usize,
    /// Whether to forward requests without idempotency while the store is unreachable.
    pub on_store_error: OnStoreError,
    /// The longest one store call may take; `None`: the lease divided by
    /// [`DEFAULT_STORE_TIMEOUT_LEASE_FRACTION`].
    pub store_timeout: Option<Duration>,
    /// How long requests in progress may take to finish on shutdown.
    pub shutdown_timeout: Duration,
}

impl Config {
    /// The time limit of one store call: [`Config::store_timeout`], or the lease divided by
    /// [`DEFAULT_STORE_TIMEOUT_LEASE_FRACTION`].
    pub fn store_call_limit(&self) -> Duration {
        self.store_timeout
            .unwrap_or(self.lease / DEFAULT_STORE_TIMEOUT_LEASE_FRACTION)
    }

    /// The defaults, forwarding to `upstream`.
    pub fn new(upstream: Upstream) -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid default"),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            admin_listen: DEFAULT_ADMIN_LISTEN.parse().expect("valid default"),
            admin_token: None,
            upstream,
            upstream_h2c: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            store: DEFAULT_STORE.parse().expect("valid default"),
            encryption: DEFAULT_ENCRYPTION,
            digest_key: DEFAULT_DIGEST_KEY,
            key_header: HeaderName::from_static("idempotency-key"),
            methods: DEFAULT_METHODS
                .parse::<MethodList>()
                .expect("valid default")
                .0,
            require_key: false,
            ttl: DEFAULT_TTL,
            lease: DEFAULT_LEASE,
            in_flight: InFlight::Reject,
            max_waiters: DEFAULT_MAX_WAITERS,
            ambiguous: Ambiguous::Retry,
            scope_headers: vec![http::header::AUTHORIZATION],
            anonymous: Anonymous::Allow,
            fingerprint: FingerprintMode::Json,
            max_body: DEFAULT_MAX_BODY,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_buffered: DEFAULT_MAX_BUFFERED,
            max_stored_response: DEFAULT_MAX_STORED_RESPONSE,
            on_store_error: OnStoreError::Reject,
            store_timeout: None,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}

impl TryFrom<&ServeArgs> for Config {
    type Error = Error;

    fn try_from(args: &ServeArgs) -> Result<Self, Error> {
        let upstream = args.upstream.clone().ok_or(Error::MissingUpstream)?;
        let scope_headers = args
            .scope_headers
            .iter()
            .filter(|name| !name.is_empty())
            .map(|name| {
                HeaderName::from_str(name).map_err(|_| Error::InvalidHttpToken {
                    what: "header name",
                    value: name.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let anonymous = match args.anonymous {
            AnonymousMode::Allow => Anonymous::Allow,
            AnonymousMode::Reject => Anonymous::Reject,
        };
        if anonymous == Anonymous::Reject && scope_headers.is_empty() {
            return Err(Error::AnonymousWithoutScope);
        }
        let admin_token = args
            .admin_token_file
            .as_deref()
            .map(AdminToken::from_file)
            .transpose()?;
        Ok(Self {
            listen: args.listen,
            max_connections: args.max_connections,
            idle_timeout: args.idle_timeout.0,
            admin_listen: args.admin_listen,
            admin_token,
            upstream,
            upstream_h2c: args.upstream_h2c,
            connect_timeout: args.connect_timeout.0,
            upstream_timeout: args.upstream_timeout.0,
            store: args.store.clone(),
            encryption: args
                .encryption_key_file
                .as_deref()
                .map(key_files::key_ring)
                .transpose()?,
            digest_key: args
                .digest_key_file
                .as_deref()
                .map(key_files::digest_key)
                .transpose()?,
            key_header: args.key_header.clone(),
            methods: args.methods.0.clone(),
            require_key: args.require_key,
            ttl: args.ttl.0,
            lease: args.lease.0,
            in_flight: match args.in_flight {
                InFlightMode::Reject => InFlight::Reject,
                InFlightMode::Wait => InFlight::Wait {
                    timeout: args.wait_timeout.0,
                },
            },
            max_waiters: args.max_waiters,
            ambiguous: match args.ambiguous {
                AmbiguousMode::Retry => Ambiguous::Retry,
                AmbiguousMode::Reject => Ambiguous::Reject,
            },
            scope_headers,
            anonymous,
            fingerprint: match args.fingerprint {
                FingerprintArg::Json => FingerprintMode::Json,
                FingerprintArg::Raw => FingerprintMode::Raw,
            },
            max_body: args.max_body.0,
            body_timeout: args.body_timeout.0,
            max_buffered: args.max_buffered.0,
            max_stored_response: args.max_stored_response.0,
            on_store_error: match args.on_store_error {
                StoreErrorMode::Reject => OnStoreError::Reject,
                StoreErrorMode::Passthrough => OnStoreError::Passthrough,
            },
            store_timeout: args.store_timeout.map(|timeout| timeout.0),
            shutdown_timeout: args.shutdown_timeout.0,
        })
    }
}

/// A comma-separated list of HTTP methods, as `--methods` takes it (an empty list covers none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodList(pub Vec<Method>);

impl FromStr for MethodList {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| {
                Method::from_str(&m.to_ascii_uppercase()).map_err(|_| Error::InvalidHttpToken {
                    what: "method",
                    value: m.to_owned(),
                })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

impl fmt::Display for MethodList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(Method::as_str).collect();
        f.write_str(&names.join(","))
    }
}

/// The arguments that the config file at `path` adds to a command line of `idem serve`, parsed
/// as `serve`: one per setting that neither a flag nor an environment variable set.
///
/// Going through clap again keeps one parser, one validation and one error message per setting.
pub(crate) fn file_args(
    path: &Path,
    serve_command: &clap::Command,
    serve: &ArgMatches,
) -> Result<Vec<OsString>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadConfig {
        path: path.to_owned(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|source| Error::ParseConfig {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |key: &str, problem| Error::InvalidSetting {
        path: path.to_owned(),
        key: key.to_owned(),
        problem,
    };
    let mut extra = Vec::new();
    for (key, value) in table {
        let flag = key.replace('_', "-");
        let arg = serve_command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(flag.as_str()) && flag != "config")
            .ok_or_else(|| invalid(&key, "an unknown setting"))?;
        let source = serve.value_source(arg.get_id().as_str());
        if matches!(
            source,
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let values = match value {
            toml::Value::Boolean(true) if matches!(arg.get_action(), ArgAction::SetTrue) => {
                extra.push(format!("--{flag}").into());
                continue;
            }
            toml::Value::Boolean(false) if matches!(arg.get_action(), ArgAction::SetTrue) => {
                continue;
            }
            toml::Value::String(s) => vec![s],
            toml::Value::Integer(i) => vec![i.to_string()],
            toml::Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    toml::Value::String(s) => Ok(s),
                    _ => Err(invalid(&key, "a value of the wrong type for")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(invalid(&key, "a value of the wrong type for")),
        };
        if matches!(arg.get_action(), ArgAction::Append) && !values.is_empty() {
            extra.extend(values.iter().map(|v| format!("--{flag}={v}").into()));
        } else {
            extra.push(format!("--{flag}={}", values.join(",")).into());
        }
    }
    Ok(extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, cli::Command};

    fn config_with_file(file: &str, flags: &[&str]) -> Result<Config, Error> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idem.toml");
        std::fs::write(&path, file).unwrap();
        let mut args = vec!["idem", "serve", "--config", path.to_str().unwrap()];
        args.extend(flags);
        let cli = Cli::parse_from_env_and_file(args)?;
        let Command::Serve(serve) = cli.command else {
            unreachable!("parsed as serve")
        };
        Config::try_from(&*serve)
    }

    #[test]
    fn the_file_fills_what_flags_left_to_their_defaults() {
        let file = r#"
            upstream = "http://127.0.0.1:3000"
            ttl = "1h"
            lease = "2s"
            methods = ["POST", "put"]
            scope-header = []
            require-key = true
            max-body = 2048
            key_header = "X-Request-Key"
            in-flight = "wait"
            wait-timeout = "500ms"
        "#;
        let config = config_with_file(file, &["--ttl", "2h"]).unwrap();
        assert_eq!(config.upstream.to_string(), "http://127.0.0.1:3000");
        assert_eq!(config.ttl, Duration::from_secs(2 * 3600));
        assert_eq!(config.lease, Duration::from_secs(2));
        assert_eq!(config.methods, [Method::POST, Method::PUT]);
        assert_eq!(config.scope_headers, Vec::<HeaderName>::new());
        assert!(config.require_key);
        assert_eq!(config.max_body, 2048);
        assert_eq!(config.key_header, "x-request-key");
        assert_eq!(
            config.in_flight,
            InFlight::Wait {
                timeout: Duration::from_millis(500)
            }
        );
        // Untouched: the defaults.
        assert_eq!(config.max_stored_response, DEFAULT_MAX_STORED_RESPONSE);
        assert_eq!(config.listen, DEFAULT_LISTEN.parse().unwrap());
    }

    #[test]
    fn repeated_scope_headers_replace_the_default() {
        let config = config_with_file(
            "scope-header = [\"Authorization\", \"X-Tenant\"]",
            &["--upstream", "http://a"],
        )
        .unwrap();
        assert_eq!(config.scope_headers, ["authorization", "x-tenant"]);
        let config = config_with_file(
            "",
            &[
                "--upstream",
                "http://a",
                "--scope-header",
                "X-Tenant,X-User",
            ],
        )
        .unwrap();
        assert_eq!(config.scope_headers, ["x-tenant", "x-user"]);
        let config = config_with_file("", &["--upstream", "http://a", "--scope-header="]).unwrap();
        assert!(config.scope_headers.is_empty());
    }

    #[test]
    fn the_defaults_match_config_new() {
        let parsed = config_with_file("", &["--upstream", "http://a"]).unwrap();
        let built = Config::new("http://a".parse().unwrap());
        assert_eq!(format!("{parsed:?}"), format!("{built:?}"));
    }

    #[test]
    fn the_bounds_are_read_from_the_file() {
        let file = r#"
            upstream = "http://a"
            max-connections = 100
            idle-timeout = "5s"
            body-timeout = "2s"
            max-buffered = "8MiB"
        "#;
        let config = config_with_file(file, &[]).unwrap();
        assert_eq!(config.max_connections, 100);
        assert_eq!(config.idle_timeout, Duration::from_secs(5));
        assert_eq!(config.body_timeout, Duration::from_secs(2));
        assert_eq!(config.max_buffered, 8 << 20);
        let defaults = config_with_file("", &["--upstream", "http://a"]).unwrap();
        assert_eq!(defaults.max_connections, 10_000);
        assert_eq!(defaults.idle_timeout, Duration::from_secs(60));
        assert_eq!(defaults.body_timeout, Duration::from_secs(30));
        assert_eq!(defaults.max_buffered, 256 << 20);
        let error = config_with_file("", &["--upstream", "http://a", "--max-connections", "0"]);
        assert!(matches!(error, Err(Error::Cli(_))));
    }

    #[test]
    fn the_admin_token_file_and_anonymous_come_from_the_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t0ken\n").unwrap();
        let file = format!(
            "admin-token-file = {:?}\nanonymous = \"reject\"\n",
            token.to_str().unwrap()
        );
        let config = config_with_file(&file, &["--upstream", "http://a"]).unwrap();
        assert_eq!(config.anonymous, Anonymous::Reject);
        assert_eq!(format!("{:?}", config.admin_token), "Some(AdminToken(..))");
        let default = config_with_file("", &["--upstream", "http://a"]).unwrap();
        assert_eq!(default.anonymous, Anonymous::Allow);
        assert!(default.admin_token.is_none());
    }

    #[test]
    fn store_bounds_come_from_the_file_and_the_store_timeout_follows_the_lease() {
        let file = r#"
            upstream = "http://a"
            max-waiters = 5
            store = "memory://?max_keys=10"
        "#;
        let config = config_with_file(file, &["--lease", "9s"]).unwrap();
        assert_eq!(config.max_waiters, 5);
        assert_eq!(config.store.to_string(), "memory://?max_keys=10");
        assert_eq!(config.store_timeout, None);
        assert_eq!(config.store_call_limit(), Duration::from_secs(3));
        let config =
            config_with_file("store-timeout = \"250ms\"", &["--upstream", "http://a"]).unwrap();
        assert_eq!(config.store_call_limit(), Duration::from_millis(250));
        assert_eq!(config.max_waiters, DEFAULT_MAX_WAITERS);
    }

    #[test]
    fn a_wrongly_typed_setting_is_refused() {
        let error = config_with_file("ttl = 5.5", &["--upstream", "http://a"]).unwrap_err();
        assert!(matches!(
            error,
            Error::InvalidSetting { ref key, problem: "a value of the wrong type for", .. } if key == "ttl"
        ));
    }
}
