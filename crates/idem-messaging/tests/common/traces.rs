//! Spans recorded in memory: a `tracing-opentelemetry` layer on an SDK tracer whose exporter keeps
//! what it is given, set as the default subscriber of the test's thread (so that a test on a
//! current-thread runtime records its own spans only).

use std::{sync::OnceLock, time::Duration};

use opentelemetry::trace::{SpanContext, TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::{
    Dispatch, Span,
    subscriber::{DefaultGuard, NoSubscriber},
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// A parent's trace context as a message carries it: the W3C specification's example.
pub const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
/// The parent span's id in [`TRACEPARENT`].
pub const PARENT_ID: &str = "b7ad6b7169203331";
/// `traceparent` of a sampled span [`PARENT_ID`] of the trace [`TRACE_ID`].
pub const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The spans recorded on this thread while it lives.
pub struct Traces {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _default: DefaultGuard,
}

impl Traces {
    /// Records the spans of this thread from now on (each one when it ends).
    pub fn start() -> Self {
        // While `tracing` knows a single dispatcher, a callsite first reached on another thread
        // takes its interest from that thread's (none) and is never enabled again: a second one,
        // alive for good, makes it ask every dispatcher.
        static SECOND: OnceLock<Dispatch> = OnceLock::new();
        SECOND.get_or_init(|| Dispatch::new(NoSubscriber::default()));
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("idem-messaging")));
        Self {
            exporter,
            _provider: provider,
            _default: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The spans named `name` that have ended, in the order they started.
    pub fn ended(&self, name: &str) -> Vec<SpanData> {
        let mut spans = self.exporter.get_finished_spans().unwrap();
        spans.retain(|span| span.name == name);
        spans.sort_by_key(|span| span.start_time);
        spans
    }

    /// The spans named `name`, once `count` have ended. A span a database call ran in may end a
    /// moment after the call: sqlx's SQLite worker thread drops its copy once done with it.
    pub async fn until_ended(&self, name: &str, count: usize) -> Vec<SpanData> {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let spans = self.ended(name);
                if spans.len() >= count {
                    return spans;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        waited
            .await
            .unwrap_or_else(|_| panic!("{name}: {:?}", self.ended(name)))
    }
}

/// The value of `span`'s attribute `key`, as text.
pub fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key.as_str() == key)
        .map(|attribute| attribute.value.as_str().into_owned())
}

/// The `traceparent` of a sampled span.
pub fn traceparent(context: &SpanContext) -> String {
    format!("00-{}-{}-01", context.trace_id(), context.span_id())
}

/// The `traceparent` of `span`, which starts it.
pub fn traceparent_of(span: &Span) -> String {
    traceparent(span.context().span().span_context())
}
