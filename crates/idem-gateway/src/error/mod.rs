//! The failures of the gateway and of the `idem` commands: [`Error`], made of one enum per
//! concern.

pub mod problem;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use http::HeaderName;
use idem_core::StoreError;

/// A failure of the gateway: bad configuration, a store that cannot be opened, a socket that
/// cannot be bound, or an upstream that did not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The command line or the config file was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A key file could not be read or holds no valid key.
    #[error(transparent)]
    KeyFile(#[from] KeyFileError),
    /// The admin token could not be read, or is missing where it is required.
    #[error(transparent)]
    AdminToken(#[from] AdminTokenError),
    /// The gateway could not start: a socket, the logs, the digest key.
    #[error(transparent)]
    Startup(#[from] StartupError),
    /// The upstream is not a usable URL, or did not answer.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// `idem keys` could not do what it was asked.
    #[error(transparent)]
    Keys(#[from] KeysError),
    /// `idem demo` could not set itself up (a temporary directory, a loopback port).
    #[error("the demo could not {what}")]
    Demo {
        /// What it tried.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    // The store: its URL, its opening, its schema and its calls.
    /// A store URL that cannot be parsed, has an unknown scheme, or has a parameter that its
    /// store does not know or cannot use.
    #[error(transparent)]
    InvalidStoreUrl(#[from] idem_core::store_url::InvalidStoreUrl),
    /// The store could not be opened (a file that cannot be created, a server that cannot be
    /// reached, a schema that cannot be migrated or has not been: the store's error says how to
    /// migrate it).
    #[error("cannot open the store {url}")]
    OpenStore {
        /// The store URL, password hidden.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Error {
    /// The exit status of `idem` for this error: 2 for a refused command line or a setting
    /// refused before start-up (an admin token or listener, incompatible options), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(
                ConfigError::Cli(_)
                | ConfigError::AnonymousWithoutScope
                | ConfigError::FencingHeaderTaken { .. }
                | ConfigError::DeadLetterNeeded
                | ConfigError::UnorderedKafka,
            )
            | Error::AdminToken(_) => 2,
            _ => 1,
        }
    }
}

/// A refused command line of `idem`, or config file of `idem serve`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The command line was refused, or help or the version was asked for.
    #[error(transparent)]
    Cli(#[from] clap::Error),
    /// A duration that is not a whole number followed by `ms`, `s`, `m`, `h` or `d`.
    #[error(
        "invalid duration `{0}`: expected a whole number and a unit (ms, s, m, h or d), e.g. 500ms, 2s, 30m, 24h"
    )]
    InvalidDuration(String),
    /// A size that is not a whole number of bytes, optionally in `KiB`, `MiB` or `GiB`.
    #[error(
        "invalid size `{0}`: expected a whole number of bytes, optionally with a unit (KiB, MiB or GiB), e.g. 1024, 64KiB, 10MiB"
    )]
    InvalidSize(String),
    /// An HTTP method or header name that is not valid.
    #[error("invalid {what} `{value}`")]
    InvalidHttpToken {
        /// `"method"` or `"header name"`.
        what: &'static str,
        /// The value as given.
        value: String,
    },
    /// A `--release-statuses` entry that is not a 4xx status.
    #[error(
        "invalid release status `{0}`: expected a 4xx status that your service answers before \
         it acts, such as 401"
    )]
    InvalidReleaseStatus(String),
    /// A broker URL that cannot be parsed or is refused (`idem relay --broker`).
    #[error(transparent)]
    InvalidBrokerUrl(idem_messaging::InvalidBrokerUrl),
    /// A broker URL for a broker whose cargo feature this build of `idem` lacks.
    #[error(
        "{scheme}:// needs idem's `{feature}` feature, which this build lacks: \
         cargo install --path crates/idem-gateway --features {feature}"
    )]
    BrokerNotBuilt {
        /// The URL's scheme.
        scheme: String,
        /// The missing feature.
        feature: &'static str,
    },
    /// `idem deliver` on Kafka without a dead-letter topic: Kafka has no mechanism of its own.
    #[error(
        "Kafka has no dead-letter mechanism of its own: give --dead-letter TOPIC for the messages \
         the endpoint refuses"
    )]
    DeadLetterNeeded,
    /// `idem deliver --unordered` on Kafka, which acknowledges a partition's messages in order.
    #[error(
        "Kafka acknowledges a partition's messages by committing an offset, which covers every \
         message before it: --unordered would acknowledge messages not delivered yet"
    )]
    UnorderedKafka,
    /// No upstream was configured.
    #[error("no upstream: set --upstream, IDEM_UPSTREAM or `upstream` in the config file")]
    MissingUpstream,
    /// `--anonymous reject` with scoping off, which would refuse every request with a key.
    #[error(
        "--anonymous reject needs a scope header: with scoping off (--scope-header \"\") every \
         request with a key would be refused"
    )]
    AnonymousWithoutScope,
    /// `--fencing-header` names a header that is not its own (the key, a scope header, or one the
    /// exchange itself uses): the gateway would overwrite it on every request.
    #[error(
        "--fencing-header {name} is also {role}: the gateway removes the fencing header from \
         every request before it sets its own, so it needs a header of its own"
    )]
    FencingHeaderTaken {
        /// The header.
        name: HeaderName,
        /// What else it is: the key header, a scope header or a header of the exchange.
        role: &'static str,
    },
    /// The config file could not be read.
    #[error("cannot read the config file {}", path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML.
    #[error("the config file {} is not valid TOML", path.display())]
    ParseConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: toml::de::Error,
    },
    /// The config file has a setting that `idem serve` does not know, or a value of the wrong
    /// type.
    #[error("the config file {} has {problem} `{key}`", path.display())]
    InvalidSetting {
        /// The file.
        path: PathBuf,
        /// The setting's name.
        key: String,
        /// `"an unknown setting"` or `"a value of the wrong type for"`.
        problem: &'static str,
    },
}

/// A key file (`--encryption-key-file`, `--digest-key-file`) that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// A key file (`--encryption-key-file`, `--digest-key-file`) could not be read.
    #[error("cannot read the key file {}", path.display())]
    ReadKeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `--encryption-key-file` is not a valid key ring; the cause names the line.
    #[error("invalid encryption key file {}", path.display())]
    EncryptionKeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, and on which line.
        #[source]
        source: idem_core::sealing::KeyRingError,
    },
    /// The `--digest-key-file` is not 32 bytes of standard base64 on one line.
    #[error("invalid digest key file {}: {problem}", path.display())]
    DigestKeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// An admin token that cannot be read, or an admin listener that would need one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminTokenError {
    /// The admin token file could not be read.
    #[error("cannot read the admin token file {}", path.display())]
    ReadAdminToken {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The admin token file does not hold a usable token.
    #[error("the admin token file {} holds no usable token: {reason}", path.display())]
    InvalidAdminToken {
        /// The file.
        path: PathBuf,
        /// What is wrong with its content.
        reason: &'static str,
    },
    /// The admin listener would listen beyond loopback without a token.
    #[error(
        "--admin-listen {addr} is not a loopback address: set --admin-token-file (or \
         IDEM_ADMIN_TOKEN_FILE) so that its endpoints need a token"
    )]
    UnprotectedAdmin {
        /// The admin listener's address.
        addr: SocketAddr,
    },
}

/// What stops the gateway from starting once its settings are accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    /// Another digest key is already in use in this process (two gateways in one process).
    #[error(transparent)]
    DigestKeyInstalled(#[from] idem_core::DigestKeyInstalled),
    /// `--log-level` is not a valid tracing filter.
    #[error("invalid log filter `{filter}`")]
    InvalidLogFilter {
        /// The filter as given.
        filter: String,
        /// Why.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// The trace exporter of `--otlp-endpoint` could not be built (an endpoint the OTLP client
    /// refuses, or a bad `OTEL_EXPORTER_OTLP_*` setting).
    #[error("cannot export traces to {endpoint}")]
    TraceExporter {
        /// The endpoint traces go to.
        endpoint: String,
        /// Why.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// `idem relay` could not start: its database could not be reached, or its outbox migrated.
    #[error(transparent)]
    Relay(#[from] idem_messaging::Error),
    /// `idem relay` could not install its metrics recorder.
    #[error("cannot install the metrics recorder")]
    MetricsRecorder(#[source] metrics_exporter_prometheus::BuildError),
    /// A listening socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The upstream: a URL that cannot be forwarded to, or an exchange that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// An upstream URL that is not `http://HOST[:PORT]`.
    #[error("invalid upstream URL `{url}`: {reason}")]
    InvalidUpstream {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The upstream could not be reached, or its connection ended before the request was
    /// written: nothing of the request was sent.
    #[error("cannot connect to the upstream")]
    UpstreamConnect(#[source] std::io::Error),
    /// The upstream exchange failed after the request may have been sent.
    #[error("the upstream exchange failed")]
    Upstream(#[source] hyper::Error),
    /// The upstream did not answer in time; the request may have been sent.
    #[error("the upstream did not answer within {}", humantime::format_duration(*.0))]
    UpstreamTimeout(Duration),
}

/// What `idem keys` refuses to do to a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeysError {
    /// `idem keys` found no record under the key.
    #[error("no record for key {key_digest} in scope {scope}")]
    KeyNotFound {
        /// The key's digest, as logs show it.
        key_digest: String,
        /// The scope in hex.
        scope: String,
    },
    /// `idem keys forget` without `--force` found the key processing: a request holds it.
    #[error(
        "key {key_digest} in scope {scope} is being processed: a request holds it; add --force \
         to forget it anyway (a retry may then execute while that request still runs)"
    )]
    KeyProcessing {
        /// The key's digest, as logs show it.
        key_digest: String,
        /// The scope in hex.
        scope: String,
    },
}
