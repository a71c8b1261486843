//! `idem serve`: its options ([`ServeArgs`]), the [`Config`] they describe, and the command.

use std::{net::SocketAddr, path::PathBuf, str::FromStr};

use clap::{
    Args,
    builder::{BoolishValueParser, PossibleValue, PossibleValuesParser, TypedValueParser},
};
use http::HeaderName;
use idem_core::{Ambiguous, FingerprintMode, InFlight, Policy};
use idem_http::{Anonymous, OnStoreError, Settings};

use super::{LogArgs, MethodList, StatusList};
use crate::{
    AdminToken, ByteSize, Config, Error, Gateway, HumanDuration, StoreUrl, Upstream,
    error::ConfigError,
    proxy,
    serve::{config, logging},
    shutdown_signal,
    store::key_files,
};

/// `idem serve`: every option, as given (see [`Config`](crate::Config) for their meaning).
#[derive(Debug, Args)]
#[command(
    after_help = "Every option can also be set as IDEM_<OPTION> (e.g. IDEM_KEY_HEADER) or in the \
                  TOML file given by --config (e.g. key-header = \"X-Key\"). Precedence: flag, then \
                  environment, then file, then default."
)]
pub struct ServeArgs {
    /// A TOML file of settings named like the flags (`ttl = "1h"`).
    #[arg(long, env = "IDEM_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Where clients connect.
    #[arg(long, env = "IDEM_LISTEN", value_name = "ADDR", default_value_t = config::DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// The most client connections open at once; beyond it, new ones wait in the accept queue
    /// and idle ones are closed.
    #[arg(long, env = "IDEM_MAX_CONNECTIONS", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..),
          default_value_t = config::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: u32,

    /// How long a client connection may stay without a request in progress before it is closed.
    #[arg(long, env = "IDEM_IDLE_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_IDLE_TIMEOUT))]
    pub idle_timeout: HumanDuration,

    /// The API to forward to, as http://HOST:PORT (required).
    #[arg(long, env = "IDEM_UPSTREAM", value_name = "URL")]
    pub upstream: Option<Upstream>,

    /// Speak HTTP/2 without TLS (h2c, prior knowledge) to the upstream instead of HTTP/1.1
    /// [default: off].
    #[arg(long, env = "IDEM_UPSTREAM_H2C", value_parser = BoolishValueParser::new())]
    pub upstream_h2c: bool,

    /// How long to wait for a connection to the upstream (then 502, and the key is released).
    #[arg(long, env = "IDEM_CONNECT_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_CONNECT_TIMEOUT))]
    pub connect_timeout: HumanDuration,

    /// How long the whole upstream exchange may take, response head and body (then 504 without
    /// a head, a cut-off response after it; the outcome is ambiguous). For a body of unknown
    /// length (a stream of events), how long to wait for each chunk.
    #[arg(long, env = "IDEM_UPSTREAM_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_UPSTREAM_TIMEOUT))]
    pub upstream_timeout: HumanDuration,

    /// The most connections to the upstream kept open, idle, for the next request (0: none, a
    /// connection per request); a connection released beyond them is closed.
    #[arg(long, env = "IDEM_UPSTREAM_MAX_IDLE", value_name = "N",
          default_value_t = proxy::DEFAULT_UPSTREAM_MAX_IDLE)]
    pub upstream_max_idle: usize,

    /// How long a connection to the upstream is kept idle before it is closed.
    #[arg(long, env = "IDEM_UPSTREAM_IDLE_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(proxy::DEFAULT_UPSTREAM_IDLE_TIMEOUT))]
    pub upstream_idle_timeout: HumanDuration,

    /// Where the admin endpoints listen (/healthz, /readyz, /metrics, /v1/keys, /openapi.json).
    #[arg(long, env = "IDEM_ADMIN_LISTEN", value_name = "ADDR", default_value_t = config::DEFAULT_ADMIN_LISTEN)]
    pub admin_listen: SocketAddr,

    /// A file holding the admin token: /metrics and /v1/keys then need `Authorization: Bearer
    /// <token>` (/healthz and /readyz never do). Required when --admin-listen is not loopback.
    #[arg(long, env = "IDEM_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// Without an admin token, the `Host` names (or NAME:PORT) the admin endpoints answer besides
    /// the loopback ones; any other `Host` gets 421, so that a web page cannot read them through
    /// DNS rebinding. Comma-separated.
    #[arg(
        long,
        env = "IDEM_ADMIN_ALLOWED_HOSTS",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub admin_allowed_hosts: Vec<String>,

    /// Where records are kept: memory://, sqlite://PATH (relative), sqlite:///ABSOLUTE/PATH,
    /// postgres://USER@HOST/DB?schema=S (TLS: &sslmode=verify-full&sslrootcert=CA.pem),
    /// mysql://USER:PASSWORD@HOST:PORT/DB?table=T (TLS: &ssl-mode=VERIFY_IDENTITY&ssl-ca=CA.pem),
    /// redis://HOST:PORT?prefix=P or redis+cluster://HOST:PORT,HOST:PORT…?prefix=P (TLS:
    /// rediss://…&cacert=CA.pem) (the parameters are optional).
    #[arg(long, env = "IDEM_STORE", value_name = "URL", default_value = config::DEFAULT_STORE)]
    pub store: StoreUrl,

    /// Seal stored responses with the key ring in this file: one `ID:BASE64` key per line (32
    /// random bytes), the first seals, every one opens [default: stored in clear].
    #[arg(long, env = "IDEM_ENCRYPTION_KEY_FILE", value_name = "PATH")]
    pub encryption_key_file: Option<PathBuf>,

    /// With --encryption-key-file, still replay records stored in clear (for the window after
    /// sealing is turned on over a store that holds them; each is counted in
    /// idem_plaintext_records_accepted_total) [default: refused as corrupted, since whoever can
    /// write to the store could have planted them].
    #[arg(long, env = "IDEM_ACCEPT_PLAINTEXT", value_parser = BoolishValueParser::new())]
    pub accept_plaintext: bool,

    /// Key the key and scope digests in logs and in the store with the 32 bytes, in standard
    /// base64, in this file [default: unkeyed].
    #[arg(long, env = "IDEM_DIGEST_KEY_FILE", value_name = "PATH")]
    pub digest_key_file: Option<PathBuf>,

    /// With --digest-key-file, how long after start a new key also looks for a record stored
    /// under its plain address before the key was turned on (0s once none is left)
    /// [default: the --ttl].
    #[arg(long, env = "IDEM_DIGEST_CHANGEOVER", value_name = "DURATION")]
    pub digest_changeover: Option<HumanDuration>,

    /// The request header that carries the idempotency key.
    #[arg(long, env = "IDEM_KEY_HEADER", value_name = "NAME", default_value = idem_http::DEFAULT_KEY_HEADER)]
    pub key_header: HeaderName,

    /// The methods whose requests are deduplicated (comma-separated); others pass through.
    #[arg(long, env = "IDEM_METHODS", value_name = "LIST", default_value_t = MethodList(idem_http::DEFAULT_METHODS.to_vec()))]
    pub methods: MethodList,

    /// The statuses that mean the operation did not run (comma-separated 4xx, or `none`): the
    /// answer is passed on, nothing is stored and the key is released, so that the retry
    /// executes.
    #[arg(long, env = "IDEM_RELEASE_STATUSES", value_name = "LIST",
          default_value_t = StatusList(idem_http::DEFAULT_RELEASE_STATUSES.to_vec()))]
    pub release_statuses: StatusList,

    /// Answer 400 to a covered request without a key, instead of passing it through [default:
    /// off].
    #[arg(long, env = "IDEM_REQUIRE_KEY", value_parser = BoolishValueParser::new())]
    pub require_key: bool,

    /// How long a completed key is replayed, counted from its completion.
    #[arg(long, env = "IDEM_TTL", value_name = "DURATION",
          default_value_t = HumanDuration(Policy::DEFAULT_TTL))]
    pub ttl: HumanDuration,

    /// How long a key is held without renewal; a crashed gateway's keys are free after it.
    #[arg(long, env = "IDEM_LEASE", value_name = "DURATION",
          default_value_t = HumanDuration(Policy::DEFAULT_LEASE))]
    pub lease: HumanDuration,

    /// A request whose key is in flight: answer 409 at once, or wait for the first one's result.
    #[arg(long, env = "IDEM_IN_FLIGHT", value_name = "MODE", value_parser = in_flight_parser(),
          default_value = "reject")]
    pub in_flight: InFlight,

    /// In wait mode, how long to wait before answering 409.
    #[arg(long, env = "IDEM_WAIT_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(Policy::DEFAULT_WAIT_TIMEOUT))]
    pub wait_timeout: HumanDuration,

    /// In wait mode, how many requests may wait at once (for all keys); one more gets 409 at once.
    #[arg(long, env = "IDEM_MAX_WAITERS", value_name = "N",
          default_value_t = Policy::DEFAULT_MAX_WAITERS)]
    pub max_waiters: usize,

    /// A 5xx, 408, 429 or lost upstream connection: release the key (retry executes again) or
    /// store it (never execute twice; a lost connection becomes "outcome unknown").
    #[arg(long, env = "IDEM_AMBIGUOUS", value_enum, default_value_t = Ambiguous::default())]
    pub ambiguous: Ambiguous,

    /// A header hashed into the key's scope (repeatable or comma-separated; replaces the
    /// default; an empty value turns scoping off).
    #[arg(long = "scope-header", env = "IDEM_SCOPE_HEADER", value_name = "NAME",
          value_delimiter = ',',
          default_values_t = idem_http::DEFAULT_SCOPE_HEADERS.map(String::from))]
    pub scope_headers: Vec<String>,

    /// A keyed request without any scope header: run it in the shared anonymous scope, or
    /// refuse it (400 scope-required).
    #[arg(long, env = "IDEM_ANONYMOUS", value_enum, default_value_t = Anonymous::default())]
    pub anonymous: Anonymous,

    /// How request bodies are compared: JSON canonicalized first, or raw bytes.
    #[arg(long, env = "IDEM_FINGERPRINT", value_enum, default_value_t = FingerprintMode::default())]
    pub fingerprint: FingerprintMode,

    /// The largest body of a request with a key (it is buffered to fingerprint it); over it, 413.
    #[arg(long, env = "IDEM_MAX_BODY", value_name = "BYTES",
          default_value_t = ByteSize(idem_http::DEFAULT_MAX_BODY))]
    pub max_body: ByteSize,

    /// How long the body of a request with a key may take to arrive (then 408).
    #[arg(long, env = "IDEM_BODY_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_BODY_TIMEOUT))]
    pub body_timeout: HumanDuration,

    /// The most bytes of request bodies buffered at once, across all requests; a request over
    /// it gets 503 with Retry-After.
    #[arg(long, env = "IDEM_MAX_BUFFERED", value_name = "BYTES",
          default_value_t = ByteSize(config::DEFAULT_MAX_BUFFERED))]
    pub max_buffered: ByteSize,

    /// The largest response stored for replay; a bigger one is delivered but not stored.
    #[arg(long, env = "IDEM_MAX_STORED_RESPONSE", value_name = "BYTES",
          default_value_t = ByteSize(idem_http::DEFAULT_MAX_STORED_RESPONSE))]
    pub max_stored_response: ByteSize,

    /// Send each keyed request's fencing token to the upstream in this header (e.g.
    /// Idempotency-Token); a client's header of that name is removed [default: none].
    #[arg(long, env = "IDEM_FENCING_HEADER", value_name = "NAME")]
    pub fencing_header: Option<HeaderName>,

    /// When the store is unreachable: answer 503 (fail closed) or forward without idempotency.
    #[arg(long, env = "IDEM_ON_STORE_ERROR", value_enum, default_value_t = OnStoreError::default())]
    pub on_store_error: OnStoreError,

    /// The longest one store call may take; then it fails as unreachable (503, or forwarded under
    /// --on-store-error passthrough before the key is acquired). Default: a third of --lease.
    #[arg(long, env = "IDEM_STORE_TIMEOUT", value_name = "DURATION")]
    pub store_timeout: Option<HumanDuration>,

    /// On SIGTERM or SIGINT, how long requests in progress may take to finish; then the gateway
    /// exits anyway, leaving their keys to their leases.
    #[arg(long, env = "IDEM_SHUTDOWN_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_SHUTDOWN_TIMEOUT))]
    pub shutdown_timeout: HumanDuration,

    /// The logs' format and filter.
    #[command(flatten)]
    pub log: LogArgs,
}

/// `--in-flight`: `reject`, or `wait` (up to `--wait-timeout`, which [`Config::try_from`] puts
/// in).
fn in_flight_parser() -> impl TypedValueParser<Value = InFlight> {
    PossibleValuesParser::new([
        PossibleValue::new("reject").help("409 with `Retry-After`"),
        PossibleValue::new("wait")
            .help("Wait up to `--wait-timeout` for the first request's response"),
    ])
    .map(|mode| match mode.as_str() {
        "wait" => InFlight::Wait {
            timeout: Policy::DEFAULT_WAIT_TIMEOUT,
        },
        _ => InFlight::Reject,
    })
}

impl TryFrom<&ServeArgs> for Config {
    type Error = Error;

    fn try_from(args: &ServeArgs) -> Result<Self, Error> {
        let upstream = args.upstream.clone().ok_or(ConfigError::MissingUpstream)?;
        let scope_headers = args
            .scope_headers
            .iter()
            .filter(|name| !name.is_empty())
            .map(|name| {
                HeaderName::from_str(name).map_err(|_| ConfigError::InvalidHttpToken {
                    what: "header name",
                    value: name.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if args.anonymous == Anonymous::Reject && scope_headers.is_empty() {
            return Err(ConfigError::AnonymousWithoutScope.into());
        }
        if let Some(name) = &args.fencing_header
            && let Some(role) = fencing_header_taken(name, &args.key_header, &scope_headers)
        {
            let name = name.clone();
            return Err(ConfigError::FencingHeaderTaken { name, role }.into());
        }
        let mut idempotency = Settings::default();
        idempotency.key_header = args.key_header.clone();
        idempotency.methods = args.methods.0.clone();
        idempotency.require_key = args.require_key;
        let policy = &mut idempotency.policy;
        policy.ttl = args.ttl.0;
        policy.lease = args.lease.0;
        policy.in_flight = match args.in_flight {
            InFlight::Wait { .. } => InFlight::Wait {
                timeout: args.wait_timeout.0,
            },
            InFlight::Reject => InFlight::Reject,
        };
        policy.ambiguous = args.ambiguous;
        policy.max_waiters = args.max_waiters;
        policy.store_timeout = args.store_timeout.map(|timeout| timeout.0);
        idempotency.scope_headers = scope_headers;
        idempotency.anonymous = args.anonymous;
        idempotency.fingerprint = args.fingerprint;
        idempotency.max_body = args.max_body.0;
        idempotency.body_timeout = Some(args.body_timeout.0);
        idempotency.max_buffered = Some(args.max_buffered.0);
        idempotency.max_stored_response = args.max_stored_response.0;
        idempotency.on_store_error = args.on_store_error;
        idempotency.fencing_header = args.fencing_header.clone();
        idempotency.release_statuses = args.release_statuses.0.clone();
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
            admin_allowed_hosts: args.admin_allowed_hosts.clone(),
            upstream,
            upstream_h2c: args.upstream_h2c,
            connect_timeout: args.connect_timeout.0,
            upstream_timeout: args.upstream_timeout.0,
            upstream_max_idle: args.upstream_max_idle,
            upstream_idle_timeout: args.upstream_idle_timeout.0,
            store: args.store.clone(),
            encryption: args
                .encryption_key_file
                .as_deref()
                .map(key_files::key_ring)
                .transpose()?,
            accept_plaintext: args.accept_plaintext,
            digest_key: args
                .digest_key_file
                .as_deref()
                .map(key_files::digest_key)
                .transpose()?,
            digest_changeover: args.digest_changeover.map(|window| window.0),
            idempotency,
            shutdown_timeout: args.shutdown_timeout.0,
        })
    }
}

/// What else the header `name` is, if anything: the gateway overwrites the fencing header on
/// every request, so it must not be the key, a scope header, or a header that the exchange
/// itself depends on (its framing, its target, its credentials, what the proxy adds).
fn fencing_header_taken(
    name: &HeaderName,
    key_header: &HeaderName,
    scope_headers: &[HeaderName],
) -> Option<&'static str> {
    const EXCHANGE: [&str; 11] = [
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "authorization",
        "cookie",
        "expect",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
    ];
    if name == key_header {
        Some("the key header")
    } else if scope_headers.contains(name) {
        Some("a scope header")
    } else if idem_http::hop_by_hop::is_fixed(name) || EXCHANGE.contains(&name.as_str()) {
        Some("a header of the HTTP exchange itself")
    } else {
        None
    }
}

/// `idem serve`: sets up logging as `args` say, runs the gateway they describe until SIGTERM or
/// SIGINT, then shuts down gracefully.
pub async fn serve(args: &ServeArgs) -> Result<(), Error> {
    let config = Config::try_from(args)?;
    let log = &args.log;
    let tracing = logging::start(
        log.log_format,
        &log.log_level,
        log.otlp_endpoint.as_ref(),
        "idem-serve",
    )?;
    // Installed before the sockets are bound, so that a signal sent as soon as the gateway says
    // it listens is not lost.
    let shutdown = shutdown_signal();
    let served = async { Gateway::bind(config).await?.run(shutdown).await }.await;
    if let Some(tracing) = tracing {
        tracing.shutdown().await;
    }
    served
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use base64::{Engine as _, engine::general_purpose::STANDARD};
    use http::Method;
    use idem_core::DigestKey;

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
        assert_eq!(config.idempotency.policy.ttl, Duration::from_secs(2 * 3600));
        assert_eq!(config.idempotency.policy.lease, Duration::from_secs(2));
        assert_eq!(config.idempotency.methods, [Method::POST, Method::PUT]);
        assert_eq!(config.idempotency.scope_headers, Vec::<HeaderName>::new());
        assert!(config.idempotency.require_key);
        assert_eq!(config.idempotency.max_body, 2048);
        assert_eq!(config.idempotency.key_header, "x-request-key");
        assert_eq!(
            config.idempotency.policy.in_flight,
            InFlight::Wait {
                timeout: Duration::from_millis(500)
            }
        );
        // Untouched: the defaults.
        assert_eq!(
            config.idempotency.max_stored_response,
            idem_http::DEFAULT_MAX_STORED_RESPONSE
        );
        assert_eq!(config.listen, config::DEFAULT_LISTEN);
    }

    #[test]
    fn repeated_scope_headers_replace_the_default() {
        let config = config_with_file(
            "scope-header = [\"Authorization\", \"X-Tenant\"]",
            &["--upstream", "http://a"],
        )
        .unwrap();
        assert_eq!(
            config.idempotency.scope_headers,
            ["authorization", "x-tenant"]
        );
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
        assert_eq!(config.idempotency.scope_headers, ["x-tenant", "x-user"]);
        let config = config_with_file("", &["--upstream", "http://a", "--scope-header="]).unwrap();
        assert!(config.idempotency.scope_headers.is_empty());
    }

    #[test]
    fn the_fencing_header_is_off_by_default_and_needs_a_header_of_its_own() {
        let config = config_with_file("", &["--upstream", "http://a"]).unwrap();
        assert_eq!(config.idempotency.fencing_header, None);
        let config = config_with_file(
            "fencing-header = \"Idempotency-Token\"",
            &["--upstream", "http://a"],
        )
        .unwrap();
        assert_eq!(
            config.idempotency.fencing_header,
            Some(HeaderName::from_static("idempotency-token"))
        );
        for (flags, message) in [
            (
                ["--fencing-header", "Idempotency-Key"],
                "--fencing-header idempotency-key is also the key header",
            ),
            (
                ["--fencing-header", "authorization"],
                "--fencing-header authorization is also a scope header",
            ),
            (
                ["--fencing-header", "Content-Length"],
                "--fencing-header content-length is also a header of the HTTP exchange itself",
            ),
            (
                ["--fencing-header", "connection"],
                "--fencing-header connection is also a header of the HTTP exchange itself",
            ),
            (
                ["--fencing-header", "X-Forwarded-Host"],
                "--fencing-header x-forwarded-host is also a header of the HTTP exchange itself",
            ),
        ] {
            let error = config_with_file("", &[&["--upstream", "http://a"][..], &flags].concat())
                .unwrap_err();
            assert!(error.to_string().starts_with(message), "{error}");
            assert_eq!(error.exit_code(), 2);
        }
    }

    #[test]
    fn the_defaults_are_the_policys_and_the_layers() {
        let config = config_with_file("", &["--upstream", "http://a"]).unwrap();
        let policy = Policy::default();
        assert_eq!(config.idempotency.policy.ttl, policy.ttl);
        assert_eq!(config.idempotency.policy.lease, policy.lease);
        assert_eq!(config.idempotency.policy.in_flight, policy.in_flight);
        assert_eq!(config.idempotency.policy.ambiguous, policy.ambiguous);
        assert_eq!(config.idempotency.policy.max_waiters, policy.max_waiters);
        assert_eq!(
            config.idempotency.policy.store_timeout,
            policy.store_timeout
        );
        assert_eq!(config.store_call_limit(), policy.store_call_limit());
        assert_eq!(config.idempotency.key_header, "idempotency-key");
        // Header names compare with strings case-insensitively.
        assert_eq!(config.idempotency.key_header, idem_http::DEFAULT_KEY_HEADER);
        assert_eq!(config.idempotency.methods, idem_http::DEFAULT_METHODS);
        assert_eq!(
            config.idempotency.release_statuses,
            [http::StatusCode::UNAUTHORIZED, http::StatusCode::FORBIDDEN]
        );
        assert_eq!(config.idempotency.scope_headers, ["authorization"]);
        assert_eq!(
            config.idempotency.scope_headers,
            idem_http::DEFAULT_SCOPE_HEADERS
        );
        assert_eq!(config.idempotency.anonymous, Anonymous::default());
        assert_eq!(config.idempotency.fingerprint, FingerprintMode::default());
        assert_eq!(config.idempotency.on_store_error, OnStoreError::default());
        assert_eq!(config.idempotency.max_body, idem_http::DEFAULT_MAX_BODY);
        assert_eq!(
            config.idempotency.max_stored_response,
            idem_http::DEFAULT_MAX_STORED_RESPONSE
        );
        assert!(!config.idempotency.require_key);
        let waiting =
            config_with_file("", &["--upstream", "http://a", "--in-flight", "wait"]).unwrap();
        assert_eq!(
            waiting.idempotency.policy.in_flight,
            InFlight::Wait {
                timeout: Policy::DEFAULT_WAIT_TIMEOUT
            }
        );
    }

    #[test]
    fn both_key_files_are_read_from_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let ring = dir.path().join("ring.keys");
        std::fs::write(
            &ring,
            format!("new:{0}\nold:{0}\n", STANDARD.encode([1; 32])),
        )
        .unwrap();
        let digest = dir.path().join("digest.key");
        std::fs::write(&digest, STANDARD.encode([2; 32])).unwrap();
        let file = format!(
            "upstream = \"http://127.0.0.1:3000\"\nencryption-key-file = {:?}\n\
             digest-key-file = {:?}\n",
            ring.display().to_string(),
            digest.display().to_string()
        );
        let config = config_with_file(&file, &[]).unwrap();
        let ids: Vec<&str> = config.encryption.as_ref().unwrap().ids().collect();
        assert_eq!(ids, ["new", "old"]);
        assert_eq!(config.digest_key, Some(DigestKey::new([2; 32])));
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
            upstream-max-idle = 16
            upstream-idle-timeout = "10s"
        "#;
        let config = config_with_file(file, &[]).unwrap();
        assert_eq!(config.max_connections, 100);
        assert_eq!(config.upstream_max_idle, 16);
        assert_eq!(config.upstream_idle_timeout, Duration::from_secs(10));
        assert_eq!(config.idle_timeout, Duration::from_secs(5));
        assert_eq!(
            config.idempotency.body_timeout,
            Some(Duration::from_secs(2))
        );
        assert_eq!(config.idempotency.max_buffered, Some(8 << 20));
        let defaults = config_with_file("", &["--upstream", "http://a"]).unwrap();
        assert_eq!(defaults.max_connections, 10_000);
        assert_eq!(defaults.idle_timeout, Duration::from_secs(60));
        assert_eq!(
            defaults.idempotency.body_timeout,
            Some(Duration::from_secs(30))
        );
        assert_eq!(defaults.idempotency.max_buffered, Some(256 << 20));
        assert_eq!(defaults.upstream_max_idle, 1024);
        assert_eq!(defaults.upstream_idle_timeout, Duration::from_secs(90));
        let error = config_with_file("", &["--upstream", "http://a", "--max-connections", "0"]);
        assert!(matches!(error, Err(Error::Config(ConfigError::Cli(_)))));
    }

    #[test]
    fn release_statuses_are_4xx_or_none() {
        let config = config_with_file(
            "",
            &["--upstream", "http://a", "--release-statuses", "401,409"],
        )
        .unwrap();
        assert_eq!(
            config.idempotency.release_statuses,
            [http::StatusCode::UNAUTHORIZED, http::StatusCode::CONFLICT]
        );
        let none =
            config_with_file("release-statuses = \"none\"\n", &["--upstream", "http://a"]).unwrap();
        assert!(none.idempotency.release_statuses.is_empty());
        let refused =
            config_with_file("", &["--upstream", "http://a", "--release-statuses", "201"]);
        assert!(matches!(refused, Err(Error::Config(ConfigError::Cli(_)))));
    }

    #[test]
    fn the_admin_token_file_and_anonymous_come_from_the_file_too() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t0ken-from-the-file\n").unwrap();
        let file = format!(
            "admin-token-file = {:?}\nanonymous = \"reject\"\nadmin-allowed-hosts = [\"a.internal\", \"b.internal:9090\"]\n",
            token.to_str().unwrap()
        );
        let config = config_with_file(&file, &["--upstream", "http://a"]).unwrap();
        assert_eq!(config.idempotency.anonymous, Anonymous::Reject);
        assert_eq!(
            config.admin_allowed_hosts,
            ["a.internal", "b.internal:9090"]
        );
        assert_eq!(format!("{:?}", config.admin_token), "Some(AdminToken(..))");
        let default = config_with_file("", &["--upstream", "http://a"]).unwrap();
        assert_eq!(default.idempotency.anonymous, Anonymous::Allow);
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
        assert_eq!(config.idempotency.policy.max_waiters, 5);
        assert_eq!(config.store.to_string(), "memory://?max_keys=10");
        assert_eq!(config.idempotency.policy.store_timeout, None);
        assert_eq!(config.store_call_limit(), Duration::from_secs(3));
        let config =
            config_with_file("store-timeout = \"250ms\"", &["--upstream", "http://a"]).unwrap();
        assert_eq!(config.store_call_limit(), Duration::from_millis(250));
        assert_eq!(
            config.idempotency.policy.max_waiters,
            Policy::DEFAULT_MAX_WAITERS
        );
    }

    #[test]
    fn a_wrongly_typed_setting_is_refused() {
        let error = config_with_file("ttl = 5.5", &["--upstream", "http://a"]).unwrap_err();
        assert!(matches!(
            error,
            Error::Config(ConfigError::InvalidSetting { ref key, problem: "a value of the wrong type for", .. }) if key == "ttl"
        ));
    }
}
