//! [`start`]: what a command that runs until stopped (`idem relay`, `idem deliver`) sets up
//! before its work, in the order that keeps each step's failure clear.

use std::{net::SocketAddr, path::Path};

use metrics_exporter_prometheus::PrometheusHandle;
use reqwest::Url;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::logging::{self, LogFormat};
use crate::{AdminToken, Error, error::StartupError, telemetry::Tracing};

/// A command's process, set up: its admin token, a shutdown token that SIGTERM or SIGINT
/// cancels, its metrics recorder and its admin listener, bound.
pub(crate) struct Started {
    pub(crate) token: Option<AdminToken>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) metrics: PrometheusHandle,
    pub(crate) listener: TcpListener,
    /// The trace exporter, given an OTLP endpoint: shut down once the command's work is done.
    pub(crate) tracing: Option<Tracing>,
}

/// Reads the admin token (refusing a listener beyond loopback without one, before anything
/// starts), starts the logs (and the trace exporter), installs the signal handlers (first, so that a signal sent as soon
/// as the process starts is not lost) and the metrics recorder, and binds the admin listener.
pub(crate) async fn start(
    admin_listen: SocketAddr,
    admin_token_file: Option<&Path>,
    log_format: LogFormat,
    log_level: &str,
    otlp_endpoint: Option<&Url>,
    service: &'static str,
) -> Result<Started, Error> {
    let token = admin_token_file.map(AdminToken::from_file).transpose()?;
    AdminToken::check_listen(admin_listen, token.as_ref())?;
    let tracing = logging::start(log_format, log_level, otlp_endpoint, service)?;
    let signal = super::shutdown_signal();
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            signal.await;
            shutdown.cancel();
        }
    });
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(StartupError::MetricsRecorder)?;
    let listener = TcpListener::bind(admin_listen)
        .await
        .map_err(|source| StartupError::Bind {
            addr: admin_listen,
            source,
        })?;
    tracing::info!(admin = %admin_listen, "the admin endpoints are listening");
    Ok(Started {
        token,
        shutdown,
        metrics,
        listener,
        tracing,
    })
}
