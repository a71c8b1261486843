//! Logs: the subscriber (`--log-format text|json`, `--log-level`) and the one line per request.
//!
//! Keys and scope identities are never logged in clear: a request's line carries the key's
//! digest and the scope's hash (both keyed under `--digest-key-file`).

use std::{io::IsTerminal, time::Duration};

use http::{Method, StatusCode};
use idem_core::Scope;
use idem_http::Outcome;
use tracing_subscriber::EnvFilter;

use clap::ValueEnum;

use crate::{Error, error::StartupError};

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber, writing to standard output.
///
/// `filter` uses `tracing`'s directive syntax: `info`, or `idem_gateway=debug,warn`.
pub fn init(format: LogFormat, filter: &str) -> Result<(), Error> {
    let filter = EnvFilter::try_new(filter).map_err(|source| StartupError::InvalidLogFilter {
        filter: filter.to_owned(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .with_writer(std::io::stdout);
    // Another subscriber may be installed already (tests, `idem demo`): keep it.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}

/// What one request's log line says.
pub(crate) struct RequestLine<'a> {
    pub(crate) method: &'a Method,
    pub(crate) path: &'a str,
    pub(crate) status: StatusCode,
    pub(crate) latency: Duration,
    pub(crate) outcome: Option<&'a Outcome>,
    pub(crate) key_digest: Option<&'a str>,
    pub(crate) scope: Option<Scope>,
}

impl RequestLine<'_> {
    /// Writes the line at `info`, with the target `idem::request`.
    pub(crate) fn log(&self) {
        tracing::info!(
            target: "idem::request",
            method = %self.method,
            path = self.path,
            status = self.status.as_u16(),
            // Microsecond precision is plenty, and keeps the lines short.
            latency_ms = self.latency.as_micros() as f64 / 1000.0,
            outcome = self.outcome.map(|o| o.as_str()),
            key = self.key_digest,
            // The hash in hex, or its keyed digest under `--digest-key-file`.
            scope = self.scope.map(|scope| scope.digest()),
            "request"
        );
    }
}
