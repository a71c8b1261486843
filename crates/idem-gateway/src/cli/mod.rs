//! The command line of `idem`: `demo`, `serve`, `keys`, `migrate`, `relay` and `deliver`.
//!
//! Every `serve` option is also read from `IDEM_<FLAG>` and from the TOML file given by
//! `--config`; see [`Cli::parse_from_env_and_file`] for the precedence.

mod config_file;
mod method_list;
mod serve;
mod status_list;

use std::{ffi::OsString, net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, builder::BoolishValueParser};
use idem_core::{IdempotencyKey, ListCursor, Scope, StateFilter};

pub use self::{
    method_list::MethodList,
    serve::{ServeArgs, serve},
    status_list::StatusList,
};
pub use crate::serve::logging::LogFormat;
use crate::{
    HumanDuration, StoreUrl,
    error::{ConfigError, Error},
    serve::config,
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
    /// List, show, forget or purge idempotency records.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Create the store's schema or bring it up to date.
    Migrate(MigrateArgs),
    /// Publish a transactional outbox to a broker (RabbitMQ, NATS JetStream, Kafka or Amazon SQS).
    Relay(Box<RelayArgs>),
    /// Deliver a broker's messages (RabbitMQ, NATS JetStream, Kafka or Amazon SQS) to an HTTP
    /// endpoint as CloudEvents, each under an idempotency key.
    Deliver(Box<DeliverArgs>),
}

/// `idem keys`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum KeysCommand {
    /// List live records, newest first, as a table or as JSON: the keys stuck processing, a
    /// tenant's records.
    List(ListArgs),
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
    /// The digest key the store's addresses are keyed with (as `idem serve --digest-key-file`);
    /// records under plain addresses are found too.
    #[arg(long, env = "IDEM_DIGEST_KEY_FILE", value_name = "PATH")]
    pub digest_key_file: Option<PathBuf>,
    /// The store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `idem keys list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only records in this state: processing or completed [default: both].
    #[arg(long, value_name = "STATE")]
    pub state: Option<StateFilter>,
    /// Only records acquired at least this long ago, by the store's clock (e.g. 5m).
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<HumanDuration>,
    /// Only records of this scope: in hex, as listings and the logs show it (under
    /// --digest-key-file, its keyed digest).
    #[arg(long, value_name = "HEX")]
    pub scope: Option<Scope>,
    /// At most this many records, from 1 to 1000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
    /// The page after this cursor, as the previous page printed it.
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<ListCursor>,
    /// Print the page as JSON (as `GET /v1/keys` answers it) instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// memory://, sqlite://PATH (relative), sqlite:///ABSOLUTE/PATH, postgres://…, mysql://…,
    /// redis://… or redis+cluster://… (see `idem serve --help`).
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
    /// Clap's refusals (and requests for help or the version) are [`ConfigError::Cli`].
    pub fn parse_from_env_and_file<I, T>(args: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let command = Self::command();
        let matches = command
            .clone()
            .try_get_matches_from(&args)
            .map_err(ConfigError::Cli)?;
        let cli = Self::from_arg_matches(&matches).map_err(ConfigError::Cli)?;
        if let Command::Serve(serve) = &cli.command
            && let Some(path) = &serve.config
            && let (Some(serve_command), Some(serve_matches)) = (
                command.find_subcommand("serve"),
                matches.subcommand_matches("serve"),
            )
        {
            let extra = config_file::file_args(path, serve_command, serve_matches)?;
            if !extra.is_empty() {
                return Ok(Self::try_parse_from(args.into_iter().chain(extra))
                    .map_err(ConfigError::Cli)?);
            }
        }
        Ok(cli)
    }
}

/// Parses `--broker`; a broker left out of this build names the command that builds it in.
fn broker_url(url: &str) -> Result<idem_messaging::BrokerUrl, ConfigError> {
    url.parse().map_err(|invalid| match invalid {
        idem_messaging::InvalidBrokerUrl::FeatureDisabled { scheme, feature } => {
            ConfigError::BrokerNotBuilt { scheme, feature }
        }
        other => ConfigError::InvalidBrokerUrl(other),
    })
}

/// `idem relay`: publishes the messages of an outbox (PostgreSQL, MySQL or SQLite) to a broker, each
/// confirmed by the broker before it is marked sent (see docs/messaging.md).
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The database that holds the outbox: postgres://USER:PASSWORD@HOST:PORT/DB,
    /// mysql://USER:PASSWORD@HOST:PORT/DB (MySQL or MariaDB), or an SQLite file, sqlite://PATH
    /// (relative) or sqlite:///ABSOLUTE/PATH (opened in WAL mode).
    #[arg(long, env = "IDEM_STORE", value_name = "URL")]
    pub store: String,
    /// The broker: amqp://USER:PASSWORD@HOST:PORT/VHOST (RabbitMQ), nats://HOST:PORT (NATS
    /// JetStream), kafka://HOST:PORT,HOST:PORT…[?linger.ms=N&…] (Kafka, its bootstrap servers
    /// and librdkafka producer settings; needs idem built with `--features kafka`) or
    /// sqs://REGION[?endpoint=URL&profile=NAME] (Amazon SQS, credentials from the AWS environment
    /// and profiles; needs `--features sqs`). Over TLS: amqps://…, tls://HOST:PORT or
    /// kafkas://HOST:PORT,…, with ?cacert=PATH for a private CA and &cert=PATH&key=PATH for a
    /// client certificate (PEM files). Kafka's SASL: &sasl.mechanism=PLAIN|SCRAM-SHA-256|
    /// SCRAM-SHA-512&sasl.username=NAME&password-file=PATH (or the password in
    /// IDEM_KAFKA_SASL_PASSWORD).
    #[arg(long, env = "IDEM_BROKER", value_name = "URL", value_parser = broker_url)]
    pub broker: idem_messaging::BrokerUrl,
    /// The outbox's schema (on SQLite, an attached database; on MySQL, a database) [default:
    /// public on PostgreSQL, the URL's database on MySQL, main on SQLite].
    #[arg(long, env = "IDEM_OUTBOX_SCHEMA", value_name = "NAME")]
    pub outbox_schema: Option<idem_messaging::SchemaName>,
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
    /// and its messages go to other relays; a crashed relay's go at once. On SQLite, how long a
    /// claim holds its messages, a crashed relay's too.
    #[arg(long, env = "IDEM_LEASE", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(30)))]
    pub lease: HumanDuration,
    /// How long to wait for the broker's confirmations of a batch (keep it under half the lease).
    #[arg(long, env = "IDEM_PUBLISH_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(10)))]
    pub publish_timeout: HumanDuration,
    /// How often an idle relay looks for due messages without a NOTIFY (on SQLite, always).
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

    /// Without an admin token, the `Host` names (or NAME:PORT) the admin endpoints answer besides
    /// the loopback ones; any other `Host` gets 421. Comma-separated.
    #[arg(
        long,
        env = "IDEM_ADMIN_ALLOWED_HOSTS",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub admin_allowed_hosts: Vec<String>,
    /// The logs' format and filter.
    #[command(flatten)]
    pub log: LogArgs,
}

/// `idem deliver`: consumes a broker's messages and POSTs each to an HTTP endpoint as a
/// CloudEvent (HTTP binary mode) with an `Idempotency-Key`, acknowledging it only after a `2xx`
/// (see docs/messaging.md).
#[derive(Debug, Args)]
pub struct DeliverArgs {
    /// The broker, as `idem relay --broker` takes it: amqp://… or amqps://… (RabbitMQ),
    /// nats://… or tls://… (NATS JetStream), kafka://… or kafkas://… (Kafka, needs idem built
    /// with `--features kafka`), sqs://REGION[?endpoint=URL&profile=NAME] (Amazon SQS, needs
    /// `--features sqs`), with the same TLS files and credentials.
    #[arg(long, env = "IDEM_BROKER", value_name = "URL", value_parser = broker_url)]
    pub broker: idem_messaging::BrokerUrl,
    /// What to consume: a RabbitMQ queue (which must exist), a NATS subject (wildcards allowed)
    /// of a JetStream stream, a Kafka topic, or an SQS queue's name or URL.
    #[arg(long, env = "IDEM_FROM", value_name = "NAME")]
    pub from: String,
    /// The consumer group: Kafka's group, JetStream's durable consumer (created if missing),
    /// RabbitMQ's consumer tag prefix. Deliverers of one group share the messages.
    #[arg(
        long,
        env = "IDEM_GROUP",
        value_name = "NAME",
        default_value = "idem-deliver"
    )]
    pub group: String,
    /// The endpoint each message is POSTed to: http://… or https://….
    #[arg(long, env = "IDEM_TO", value_name = "URL", value_parser = endpoint_url)]
    pub to: reqwest::Url,
    /// Where the idempotency key comes from: outbox-id (the id the relay gave the message, else
    /// the broker's id of it), message-id (the broker's id: Kafka's topic/partition/offset,
    /// JetStream's stream/sequence, SQS's MessageId, RabbitMQ's message_id property) or
    /// header:NAME.
    #[arg(
        long,
        env = "IDEM_KEY_FROM",
        value_name = "SOURCE",
        default_value = "outbox-id"
    )]
    pub key_from: idem_messaging::consume::KeyFrom,
    /// How many requests may be in flight at once.
    #[arg(long, env = "IDEM_CONCURRENCY", value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// How many messages may be held unacknowledged at once (the broker's prefetch): those
    /// being delivered and those queued behind their key.
    #[arg(long, env = "IDEM_MAX_IN_FLIGHT", value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub max_in_flight: u16,
    /// Deliver the messages of one key (a RabbitMQ queue, a NATS subject, a Kafka partition, an
    /// SQS message group) concurrently instead of one at a time, in order [default: off; refused
    /// with Kafka].
    #[arg(long, env = "IDEM_UNORDERED", value_parser = BoolishValueParser::new())]
    pub unordered: bool,
    /// Attempts before a message the endpoint refuses (a 4xx other than 408, 409 and 429)
    /// is dead-lettered.
    #[arg(long, env = "IDEM_MAX_ATTEMPTS", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// Where dead letters are published on the same broker (a queue, a subject, a topic);
    /// without it, the broker's own mechanism takes them (RabbitMQ's dead-letter exchange, NATS's
    /// terminated-message advisory, SQS's redrive policy). Required with Kafka.
    #[arg(long, env = "IDEM_DEAD_LETTER", value_name = "NAME")]
    pub dead_letter: Option<String>,
    /// The backoff after a failed attempt, doubled at each attempt up to --max-backoff.
    #[arg(long, env = "IDEM_BACKOFF", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(1)))]
    pub backoff: HumanDuration,
    /// The longest backoff (a longer Retry-After is honoured, up to an hour).
    #[arg(long, env = "IDEM_MAX_BACKOFF", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(60)))]
    pub max_backoff: HumanDuration,
    /// How long a request may take, its answer included.
    #[arg(long, env = "IDEM_REQUEST_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(30)))]
    pub request_timeout: HumanDuration,
    /// How long the broker waits before it gives a held message to another consumer, extended
    /// while the message is held (JetStream's ack_wait, SQS's visibility timeout).
    #[arg(long, env = "IDEM_ACK_WAIT", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(30)))]
    pub ack_wait: HumanDuration,
    /// The events' `ce-source` [default: the queue, subject or topic].
    #[arg(long, env = "IDEM_SOURCE", value_name = "URI")]
    pub source: Option<String>,
    /// The events' `ce-type` [default: the queue, subject or topic]; a message's own `ce-type`
    /// header wins.
    #[arg(long = "type", env = "IDEM_TYPE", value_name = "TYPE")]
    pub event_type: Option<String>,
    /// On SIGTERM or SIGINT, how long the requests in flight may take to be answered.
    #[arg(long, env = "IDEM_SHUTDOWN_TIMEOUT", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(10)))]
    pub shutdown_timeout: HumanDuration,
    /// How often the progress is logged.
    #[arg(long, env = "IDEM_PROGRESS_INTERVAL", value_name = "DURATION",
          default_value_t = HumanDuration(Duration::from_secs(10)))]
    pub progress_interval: HumanDuration,
    /// Where the admin endpoints listen (/healthz, /metrics, the dashboard).
    #[arg(
        long,
        env = "IDEM_ADMIN_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:9092"
    )]
    pub admin_listen: SocketAddr,
    /// A file holding the admin token: /metrics then needs `Authorization: Bearer <token>`
    /// (/healthz never does). Required when --admin-listen is not loopback.
    #[arg(long, env = "IDEM_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// Without an admin token, the `Host` names (or NAME:PORT) the admin endpoints answer besides
    /// the loopback ones; any other `Host` gets 421. Comma-separated.
    #[arg(
        long,
        env = "IDEM_ADMIN_ALLOWED_HOSTS",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub admin_allowed_hosts: Vec<String>,
    /// The logs' format and filter.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Parses `--to` and `--otlp-endpoint`: an http:// or https:// URL.
fn endpoint_url(url: &str) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|error| format!("{error}"))?;
    match parsed.scheme() {
        "http" | "https" if parsed.has_host() => Ok(parsed),
        _ => Err("expected an http:// or https:// URL".to_owned()),
    }
}

/// `--log-format`, `--log-level` and `--otlp-endpoint`, for the subcommands that run until
/// stopped.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
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
    /// Export traces over OTLP/HTTP to this collector (`/v1/traces` is appended), continuing
    /// each request's or message's W3C `traceparent`; off when unset.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL",
        value_parser = endpoint_url
    )]
    pub otlp_endpoint: Option<reqwest::Url>,
}
