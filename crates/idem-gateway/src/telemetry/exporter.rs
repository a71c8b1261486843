//! The OTLP exporter of a process's spans, and the `tracing` layer that feeds it.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use reqwest::Url;
use tracing::{Metadata, Subscriber};
use tracing_subscriber::{Layer, filter::filter_fn, registry::LookupSpan};

use crate::error::StartupError;

/// Set once the process exports traces: only then are trace headers continued and written.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces.
pub(crate) fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A process's trace exporter. [`shutdown`](Tracing::shutdown) sends the spans not sent yet.
pub(crate) struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Starts exporting to the OTLP endpoint `base`, to which the signal's path `/v1/traces` is
    /// appended (as to `OTEL_EXPORTER_OTLP_ENDPOINT`), naming the process `service` unless
    /// `OTEL_SERVICE_NAME` names it; returns the exporter with the layer that feeds it idem's
    /// spans. The exporter's other settings are the standard `OTEL_EXPORTER_OTLP_*` and
    /// `OTEL_BSP_*` variables.
    pub(crate) fn start<S>(
        base: &Url,
        service: &'static str,
    ) -> Result<(Self, impl Layer<S> + Send + Sync + 'static), StartupError>
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let endpoint = format!("{}/v1/traces", base.as_str().trim_end_matches('/'));
        crate::tls::install_ring_provider();
        let mut exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint.clone());
        // OTLP's default is protobuf; the exporter, built with JSON too, would default to JSON.
        let chosen = [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ];
        if chosen.iter().all(|name| std::env::var_os(name).is_none()) {
            exporter = exporter.with_protocol(Protocol::HttpBinary);
        }
        let exporter = exporter
            .build()
            .map_err(|source| StartupError::TraceExporter { endpoint, source })?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service);
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        // Spans with the attributes idem gives them, not the layer's own (the thread, the source
        // line, busy and idle times), which every span would carry and cost.
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("idem"))
            .with_threads(false)
            .with_location(false)
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(is_idem_span));
        // The libraries (idem-http, idem-messaging) read and write trace headers through the
        // global propagator, a no-op until a process sets one.
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        ON.store(true, Ordering::Relaxed);
        Ok((Self { provider }, layer))
    }

    /// Sends the spans not sent yet, and stops the exporter.
    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        // The exporter's client blocks: off the runtime's threads.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the last spans could not be exported"),
            Err(error) => tracing::warn!(%error, "the trace exporter failed to stop"),
        }
    }
}

/// The spans of idem's own crates, whatever their level; no events (logs are the logs' job).
fn is_idem_span(metadata: &Metadata<'_>) -> bool {
    metadata.is_span() && metadata.target().starts_with("idem")
}
