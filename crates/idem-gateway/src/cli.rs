//! The command line of `idem`: `demo`, `serve`, `keys`, `migrate` and `relay`.
//!
//! Every `serve` option is also read from `IDEM_<FLAG>` and from the TOML file given by
//! `--config`; see [`Cli::parse_from_env_and_file`] for the precedence.

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{
    Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum,
    builder::BoolishValueParser,
};
use http::HeaderName;
use idem_core::{IdempotencyKey, Scope};

use crate::{
    ByteSize, Error, HumanDuration, StoreUrl, Upstream,
    config::{self, MethodList},
};

/// Exactly-once effects on top of at-least-once delivery: idempotency keys for any HTTP API.
#[derive(Debug, Parser)]
#[command(name = "idem", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// See what idem is for: payments through a lossy network, with and without the gateway.
    Demo(crate::demo::DemoArgs),
    /// Run the reverse proxy that adds idempotency keys in front of an HTTP API.
    Serve(Box<ServeArgs>),
    /// Show, forget or purge idempotency records.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Create the store's schema or bring it up to date.
    Migrate(MigrateArgs),
    /// Publish a transactional outbox to a broker (RabbitMQ, NATS JetStream or Kafka).
    Relay(Box<RelayArgs>),
}

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
    #[arg(long, env = "IDEM_LISTEN", value_name = "ADDR", default_value = config::DEFAULT_LISTEN)]
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
    /// a head, a cut-off response after it; the outcome is ambiguous).
    #[arg(long, env = "IDEM_UPSTREAM_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_UPSTREAM_TIMEOUT))]
    pub upstream_timeout: HumanDuration,

    /// Where the admin endpoints listen (/healthz, /readyz, /metrics, /v1/keys).
    #[arg(long, env = "IDEM_ADMIN_LISTEN", value_name = "ADDR", default_value = config::DEFAULT_ADMIN_LISTEN)]
    pub admin_listen: SocketAddr,

    /// A file holding the admin token: /metrics and /v1/keys then need `Authorization: Bearer
    /// <token>` (/healthz and /readyz never do). Required when --admin-listen is not loopback.
    #[arg(long, env = "IDEM_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// Where records are kept: memory://, sqlite://PATH (relative), sqlite:///ABSOLUTE/PATH,
    /// postgres://USER@HOST/DB?schema=S (TLS: &sslmode=verify-full&sslrootcert=CA.pem),
    /// redis://HOST:PORT?prefix=P or redis+cluster://HOST:PORT,HOST:PORT…?prefix=P (TLS:
    /// rediss://…&cacert=CA.pem) (the parameters are optional).
    #[arg(long, env = "IDEM_STORE", value_name = "URL", default_value = config::DEFAULT_STORE)]
    pub store: StoreUrl,

    /// Seal stored responses with the key ring in this file: one `ID:BASE64` key per line (32
    /// random bytes), the first seals, every one opens [default: stored in clear].
    #[arg(long, env = "IDEM_ENCRYPTION_KEY_FILE", value_name = "PATH")]
    pub encryption_key_file: Option<PathBuf>,

    /// Key the key and scope digests in logs with the 32 bytes, in standard base64, in this file
    /// [default: unkeyed].
    #[arg(long, env = "IDEM_DIGEST_KEY_FILE", value_name = "PATH")]
    pub digest_key_file: Option<PathBuf>,

    /// The request header that carries the idempotency key.
    #[arg(long, env = "IDEM_KEY_HEADER", value_name = "NAME", default_value = config::DEFAULT_KEY_HEADER)]
    pub key_header: HeaderName,

    /// The methods whose requests are deduplicated (comma-separated); others pass through.
    #[arg(long, env = "IDEM_METHODS", value_name = "LIST", default_value = config::DEFAULT_METHODS)]
    pub methods: MethodList,

    /// Answer 400 to a covered request without a key, instead of passing it through [default:
    /// off].
    #[arg(long, env = "IDEM_REQUIRE_KEY", value_parser = BoolishValueParser::new())]
    pub require_key: bool,

    /// How long a completed key is replayed, counted from its completion.
    #[arg(long, env = "IDEM_TTL", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_TTL))]
    pub ttl: HumanDuration,

    /// How long a key is held without renewal; a crashed gateway's keys are free after it.
    #[arg(long, env = "IDEM_LEASE", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_LEASE))]
    pub lease: HumanDuration,

    /// A request whose key is in flight: answer 409 at once, or wait for the first one's result.
    #[arg(long, env = "IDEM_IN_FLIGHT", value_enum, default_value_t = InFlightMode::Reject)]
    pub in_flight: InFlightMode,

    /// In wait mode, how long to wait before answering 409.
    #[arg(long, env = "IDEM_WAIT_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_WAIT_TIMEOUT))]
    pub wait_timeout: HumanDuration,

    /// In wait mode, how many requests may wait at once (for all keys); one more gets 409 at once.
    #[arg(long, env = "IDEM_MAX_WAITERS", value_name = "N",
          default_value_t = config::DEFAULT_MAX_WAITERS)]
    pub max_waiters: usize,

    /// A 5xx, 408, 429 or lost upstream connection: release the key (retry executes again) or
    /// store it (never execute twice; a lost connection becomes "outcome unknown").
    #[arg(long, env = "IDEM_AMBIGUOUS", value_enum, default_value_t = AmbiguousMode::Retry)]
    pub ambiguous: AmbiguousMode,

    /// A header hashed into the key's scope (repeatable or comma-separated; replaces the
    /// default; an empty value turns scoping off).
    #[arg(long = "scope-header", env = "IDEM_SCOPE_HEADER", value_name = "NAME",
          value_delimiter = ',', default_value = config::DEFAULT_SCOPE_HEADER)]
    pub scope_headers: Vec<String>,

    /// A keyed request without any scope header: run it in the shared anonymous scope, or
    /// refuse it (400 scope-required).
    #[arg(long, env = "IDEM_ANONYMOUS", value_enum, default_value = config::DEFAULT_ANONYMOUS)]
    pub anonymous: AnonymousMode,

    /// How request bodies are compared: JSON canonicalized first, or raw bytes.
    #[arg(long, env = "IDEM_FINGERPRINT", value_enum, default_value_t = FingerprintArg::Json)]
    pub fingerprint: FingerprintArg,

    /// The largest body of a request with a key (it is buffered to fingerprint it); over it, 413.
    #[arg(long, env = "IDEM_MAX_BODY", value_name = "BYTES",
          default_value_t = ByteSize(config::DEFAULT_MAX_BODY))]
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
          default_value_t = ByteSize(config::DEFAULT_MAX_STORED_RESPONSE))]
    pub max_stored_response: ByteSize,

    /// When the store is unreachable: answer 503 (fail closed) or forward without idempotency.
    #[arg(long, env = "IDEM_ON_STORE_ERROR", value_enum, default_value_t = StoreErrorMode::Reject)]
    pub on_store_error: StoreErrorMode,

    /// The longest one store call may take; then it fails as unreachable (503, or forwarded under
    /// --on-store-error passthrough before the key is acquired). Default: a third of --lease.
    #[arg(long, env = "IDEM_STORE_TIMEOUT", value_name = "DURATION")]
    pub store_timeout: Option<HumanDuration>,

    /// On SIGTERM or SIGINT, how long requests in progress may take to finish; then the gateway
    /// exits anyway, leaving their keys to their leases.
    #[arg(long, env = "IDEM_SHUTDOWN_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(config::DEFAULT_SHUTDOWN_TIMEOUT))]
    pub shutdown_timeout: HumanDuration,

    /// Log lines as text or as JSON objects.
    #[arg(long, env = "IDEM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Which logs to write, as a tracing filter (`info`, `idem_gateway=debug,warn`).
    #[arg(
        long,
        env = "IDEM_LOG_LEVEL",
        value_name = "FILTER",
        default_value = "info"
    )]
    pub log_level: String,
}

/// `--in-flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InFlightMode {
    /// 409 with `Retry-After`.
    Reject,
    /// Wait up to `--wait-timeout` for the first request's response.
    Wait,
}

/// `--ambiguous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AmbiguousMode {
    /// Release the key.
    Retry,
    /// Store the outcome.
    Reject,
}

/// `--anonymous`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AnonymousMode {
    /// Run it in the anonymous scope, shared by every such request.
    Allow,
    /// 400 problem `scope-required`; nothing stored or forwarded.
    Reject,
}

/// `--fingerprint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FingerprintArg {
    /// Canonicalize JSON bodies.
    Json,
    /// Hash bodies as sent.
    Raw,
}

/// `--on-store-error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreErrorMode {
    /// 503 with `Retry-After`; the request is not forwarded.
    Reject,
    /// Forward the request without idempotency.
    Passthrough,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `idem keys`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum KeysCommand {
    /// Print a key's record as JSON.
    Show(KeyArgs),
    /// Remove a key's record so the next request executes (one that a request holds only with
    /// --force).
    Forget(ForgetArgs),
    /// Remove every expired record and print how many there were.
    Purge(StoreArgs),
}

/// A key in a store.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The idempotency key, as clients send it.
    pub key: IdempotencyKey,
    /// The scope hash in hex, as the logs show it without --digest-key-file (default: the
    /// anonymous scope).
    #[arg(long, value_name = "HEX")]
    pub scope: Option<Scope>,
    /// The key ring that opens sealed records (as `idem serve --encryption-key-file`).
    #[arg(long, env = "IDEM_ENCRYPTION_KEY_FILE", value_name = "PATH")]
    pub encryption_key_file: Option<PathBuf>,
    /// The store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `idem keys forget`.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The key.
    #[command(flatten)]
    pub key: KeyArgs,
    /// Forget the key even while a request holds it: a retry may then execute while that
    /// request still runs [default: off].
    #[arg(long)]
    pub force: bool,
}

/// The store a command works on.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// memory://, sqlite://PATH (relative), sqlite:///ABSOLUTE/PATH, postgres://…, redis://…
    /// or redis+cluster://… (see `idem serve --help`).
    #[arg(long, env = "IDEM_STORE", value_name = "URL", default_value = config::DEFAULT_STORE)]
    pub store: StoreUrl,
}

/// `idem migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArgs,
}

impl Cli {
    /// Parses `args` (the program name first), filling the `serve` options that neither a flag
    /// nor an `IDEM_*` variable set from the `--config` file, if any.
    ///
    /// Clap's refusals (and requests for help or the version) are [`Error::Cli`].
    pub fn parse_from_env_and_file<I, T>(args: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let command = Self::command();
        let matches = command.clone().try_get_matches_from(&args)?;
        let cli = Self::from_arg_matches(&matches)?;
        if let Command::Serve(serve) = &cli.command
            && let Some(path) = &serve.config
            && let (Some(serve_command), Some(serve_matches)) = (
                command.find_subcommand("serve"),
                matches.subcommand_matches("serve"),
            )
        {
            let extra = config::file_args(path, serve_command, serve_matches)?;
            if !extra.is_empty() {
                return Ok(Self::try_parse_from(args.into_iter().chain(extra))?);
            }
        }
        Ok(cli)
    }
}

/// Parses `--broker`; a broker left out of this build names the command that builds it in.
fn broker_url(url: &str) -> Result<idem_messaging::BrokerUrl, Error> {
    url.parse().map_err(|invalid| match invalid {
        idem_messaging::InvalidBrokerUrl::FeatureDisabled { scheme, feature } => {
            Error::BrokerNotBuilt { scheme, feature }
        }
        other => Error::InvalidBrokerUrl(other),
    })
}

/// `idem relay`: publishes the messages of a PostgreSQL outbox to a broker, each confirmed by
/// the broker before it is marked sent (see docs/messaging.md).
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The PostgreSQL database that holds the outbox: postgres://USER:PASSWORD@HOST:PORT/DB.
    #[arg(long, env = "IDEM_STORE", value_name = "URL")]
    pub store: String,
    /// The broker: amqp://USER:PASSWORD@HOST:PORT/VHOST (RabbitMQ), nats://HOST:PORT (NATS
    /// JetStream) or kafka://HOST:PORT,HOST:PORT… (Kafka, its bootstrap servers; needs idem
    /// built with `--features kafka`). Over TLS:
    /// amqps://… or tls://HOST:PORT, with ?cacert=PATH for a private CA and &cert=PATH&key=PATH
    /// for a client certificate (PEM files).
    #[arg(long, env = "IDEM_BROKER", value_name = "URL", value_parser = broker_url)]
    pub broker: idem_messaging::BrokerUrl,
    /// The outbox's schema.
    #[arg(
        long,
        env = "IDEM_OUTBOX_SCHEMA",
        value_name = "NAME",
        default_value = "public"
    )]
    pub outbox_schema: idem_messaging::SchemaName,
    /// The outbox's table.
    #[arg(
        long,
        env = "IDEM_OUTBOX_TABLE",
        value_name = "NAME",
        default_value = "idem_outbox"
    )]
    pub outbox_table: idem_messaging::TableName,
    /// Create the outbox table, or bring it up to date, before relaying [default: off].
    #[arg(long, env = "IDEM_MIGRATE", value_parser = BoolishValueParser::new())]
    pub migrate: bool,
    /// The name in this relay's logs [default: idem-relay-PID].
    #[arg(long, env = "IDEM_RELAY_NAME", value_name = "NAME")]
    pub relay_name: Option<String>,
    /// Messages claimed and published per batch.
    #[arg(long, env = "IDEM_BATCH_SIZE", value_name = "N", default_value_t = 100)]
    pub batch_size: u32,
    /// How long a claim may stay idle (while its batch is published) before PostgreSQL ends it
    /// and its messages go to other relays; a crashed relay's go at once.
    #[arg(long, env = "IDEM_LEASE", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(30)))]
    pub lease: HumanDuration,
    /// How long to wait for the broker's confirmations of a batch (keep it under half the lease).
    #[arg(long, env = "IDEM_PUBLISH_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(10)))]
    pub publish_timeout: HumanDuration,
    /// How often an idle relay looks for due messages without a NOTIFY.
    #[arg(long, env = "IDEM_POLL_INTERVAL", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(1)))]
    pub poll_interval: HumanDuration,
    /// Attempts before a message the broker keeps rejecting becomes a dead letter.
    #[arg(
        long,
        env = "IDEM_MAX_ATTEMPTS",
        value_name = "N",
        default_value_t = 10
    )]
    pub max_attempts: u32,
    /// The backoff after a rejected attempt, doubled at each attempt up to --max-backoff.
    #[arg(long, env = "IDEM_BACKOFF", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(1)))]
    pub backoff: HumanDuration,
    /// The longest backoff.
    #[arg(long, env = "IDEM_MAX_BACKOFF", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(300)))]
    pub max_backoff: HumanDuration,
    /// Publish the messages of one ordering key one at a time, in order [default: off].
    #[arg(long, env = "IDEM_ORDERING", value_parser = BoolishValueParser::new())]
    pub ordering: bool,
    /// On SIGTERM or SIGINT, how long the batch in flight may take to be confirmed.
    #[arg(long, env = "IDEM_SHUTDOWN_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(10)))]
    pub shutdown_timeout: HumanDuration,
    /// How often the progress is logged.
    #[arg(long, env = "IDEM_PROGRESS_INTERVAL", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(10)))]
    pub progress_interval: HumanDuration,
    /// Where the admin endpoints listen (/healthz, /metrics).
    #[arg(
        long,
        env = "IDEM_ADMIN_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:9091"
    )]
    pub admin_listen: SocketAddr,
    /// A file holding the admin token: /metrics then needs `Authorization: Bearer <token>`
    /// (/healthz never does). Required when --admin-listen is not loopback.
    #[arg(long, env = "IDEM_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// Log lines as text or as JSON objects.
    #[arg(long, env = "IDEM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Which logs to write, as a tracing filter (`info`, `idem_messaging=debug,warn`).
    #[arg(
        long,
        env = "IDEM_LOG_LEVEL",
        value_name = "FILTER",
        default_value = "info"
    )]
    pub log_level: String,
}
