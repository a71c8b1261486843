//! Logs: the subscriber (`--log-format text|json`, `--log-level`) and the one line per request.
//!
//! Keys and scope identities are never logged in clear: a request's line carries the key's
//! digest and the scope's hash (both keyed under `--digest-key-file`).

use std::io::IsTerminal;

use http::{HeaderName, HeaderValue, Method, Request, Response, Uri};
use idem_core::IdempotencyKey;
use idem_http::{Delivery, RequestKey, RequestOutcome};
use reqwest::Url;
use tokio::time::Instant;
use tracing::Level;
use tracing_subscriber::{
    EnvFilter, Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _,
};

use clap::ValueEnum;

use crate::{Error, error::StartupError, telemetry::Tracing};

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
    start(format, filter, None, "idem").map(drop)
}

/// Installs the global tracing subscriber, writing to standard output, and, given an OTLP
/// endpoint, the trace exporter of the process, named `service`: the caller
/// shuts it down once its work is done, so that the last spans are sent.
///
/// `filter` filters the logs only: the exporter takes every span of idem's crates.
pub(crate) fn start(
    format: LogFormat,
    filter: &str,
    otlp_endpoint: Option<&Url>,
    service: &'static str,
) -> Result<Option<Tracing>, Error> {
    let filter = EnvFilter::try_new(filter).map_err(|source| StartupError::InvalidLogFilter {
        filter: filter.to_owned(),
        source,
    })?;
    let ansi = std::io::stdout().is_terminal();
    let Some(endpoint) = otlp_endpoint else {
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stdout);
        // Another subscriber may be installed already (tests, `idem demo`): keep it.
        let _ = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        return Ok(None);
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stdout);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        LogFormat::Json => logs.json().flatten_event(true).boxed(),
    };
    let (tracing, spans) = Tracing::start(endpoint, service)?;
    let _ = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(spans)
        .try_init();
    tracing::info!(endpoint = %endpoint, "exporting traces over OTLP");
    Ok(Some(tracing))
}

/// One request's log line at `info` (target `idem::request`), begun when the request arrives.
pub(crate) struct RequestLine {
    start: Instant,
    method: Method,
    uri: Uri,
    /// The key header's value, for the line of a request whose forward failed: the layer labels
    /// the responses it returns, but such a request gets none.
    key: Option<HeaderValue>,
}

impl RequestLine {
    /// The line of `request`, or `None` when request lines are not logged: then nothing of the
    /// request is copied for it.
    pub(crate) fn begin<B>(request: &Request<B>, key_header: &HeaderName) -> Option<Self> {
        if !tracing::enabled!(target: "idem::request", Level::INFO) {
            return None;
        }
        let mut keys = request.headers().get_all(key_header).iter();
        let key = match (keys.next(), keys.next()) {
            (Some(value), None) => Some(value.clone()),
            _ => None,
        };
        Some(Self {
            start: Instant::now(),
            method: request.method().clone(),
            uri: request.uri().clone(),
            key,
        })
    }

    /// Writes the line of the request, answered with `response`. A response marked with a
    /// [`Delivery`] is the proxy's own, for an upstream that gave none.
    pub(crate) fn log<B>(self, response: &Response<B>) {
        let forwarded = response.extensions().get::<Delivery>().is_none();
        let key = response.extensions().get::<RequestKey>();
        let fallback = match (key, forwarded) {
            (None, false) => self
                .key
                .and_then(|value| IdempotencyKey::parse_header(value.as_bytes()).ok())
                .map(|key| key.digest()),
            _ => None,
        };
        tracing::info!(
            target: "idem::request",
            method = %self.method,
            path = self.uri.path(),
            status = response.status().as_u16(),
            // Microsecond precision is plenty, and keeps the lines short.
            latency_ms = self.start.elapsed().as_micros() as f64 / 1000.0,
            outcome = response.extensions().get::<RequestOutcome>().map(|o| o.as_str()),
            key = key.map(RequestKey::digest).or(fallback),
            // The hash in hex, or its keyed digest under `--digest-key-file`.
            scope = key.map(|k| k.scope().digest()),
            "request"
        );
    }
}
