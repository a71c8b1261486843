//! The failures of the gateway and of the `idem` commands.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use idem_core::StoreError;

/// A failure of the gateway: bad configuration, a store that cannot be opened, a socket that
/// cannot be bound, or an upstream that did not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    /// A store URL that cannot be parsed, has an unknown scheme, or has a parameter that its
    /// store does not know or cannot use.
    #[error(transparent)]
    InvalidStoreUrl(#[from] idem_core::store_url::InvalidStoreUrl),
    /// An upstream URL that is not `http://HOST[:PORT]`.
    #[error("invalid upstream URL `{url}`: {reason}")]
    InvalidUpstream {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An HTTP method or header name that is not valid.
    #[error("invalid {what} `{value}`")]
    InvalidHttpToken {
        /// `"method"` or `"header name"`.
        what: &'static str,
        /// The value as given.
        value: String,
    },
    /// `idem demo` could not set itself up (a temporary directory, a loopback port).
    #[error("the demo could not {what}")]
    Demo {
        /// What it tried.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// No upstream was configured.
    #[error("no upstream: set --upstream, IDEM_UPSTREAM or `upstream` in the config file")]
    MissingUpstream,
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
    /// Another digest key is already in use in this process (two gateways in one process).
    #[error(transparent)]
    DigestKeyInstalled(#[from] idem_core::DigestKeyInstalled),
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
    /// The store could not be opened (a file that cannot be created, a server that cannot be
    /// reached, a schema that cannot be migrated).
    #[error("cannot open the store {url}")]
    OpenStore {
        /// The store URL, password hidden.
        url: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The PostgreSQL store's table has not been created: `idem migrate` was not run.
    #[error(
        "the idem table {table} of the store {url} has not been created: run \
         `idem migrate --store {url}`"
    )]
    NotMigrated {
        /// The store URL, password hidden.
        url: String,
        /// The records table, quoted and qualified.
        table: String,
    },
    /// The PostgreSQL store's table lacks a migration of this build.
    #[error(
        "the idem table {table} of the store {url} lacks migration {version}: run \
         `idem migrate --store {url}`"
    )]
    MigrationPending {
        /// The store URL, password hidden.
        url: String,
        /// The records table, quoted and qualified.
        table: String,
        /// The first migration missing.
        version: i64,
    },
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
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
    /// `--anonymous reject` with scoping off, which would refuse every request with a key.
    #[error(
        "--anonymous reject needs a scope header: with scoping off (--scope-header \"\") every \
         request with a key would be refused"
    )]
    AnonymousWithoutScope,
    /// `--log-level` is not a valid tracing filter.
    #[error("invalid log filter `{filter}`")]
    InvalidLogFilter {
        /// The filter as given.
        filter: String,
        /// Why.
        #[source]
        source: tracing_subscriber::filter::ParseError,
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
    /// The upstream could not be reached: nothing of the request was sent.
    #[error("cannot connect to the upstream")]
    UpstreamConnect(#[source] hyper_util::client::legacy::Error),
    /// The upstream exchange failed after the request may have been sent.
    #[error("the upstream exchange failed")]
    Upstream(#[source] hyper_util::client::legacy::Error),
    /// The upstream did not answer in time; the request may have been sent.
    #[error("the upstream did not answer within {}", humantime::format_duration(*.0))]
    UpstreamTimeout(Duration),
}

impl Error {
    /// The exit status of `idem` for this error: 2 for a refused command line or a setting
    /// refused before start-up (an admin token or listener, incompatible options), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Cli(_)
            | Error::ReadAdminToken { .. }
            | Error::InvalidAdminToken { .. }
            | Error::UnprotectedAdmin { .. }
            | Error::AnonymousWithoutScope => 2,
            _ => 1,
        }
    }
}
