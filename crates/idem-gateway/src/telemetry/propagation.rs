//! W3C trace context (`traceparent`, `tracestate`) taken from headers and put into them.

use http::HeaderMap;
use opentelemetry::{propagation::TextMapPropagator, trace::TraceContextExt as _};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::is_on;

/// Makes `span` a child of the trace context that `headers` carry, when the process exports
/// traces and they carry a valid one; otherwise `span` starts a trace (or stays in its parent's).
pub(crate) fn continue_trace(span: &Span, headers: &HeaderMap) {
    if !is_on() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // Fails only for a span that has started already, which callers never pass.
        let _ = span.set_parent(parent);
    }
}

/// Writes the current span's context into `headers` as `traceparent` (and `tracestate`),
/// replacing any there, when the process exports traces; otherwise leaves them as they are.
pub(crate) fn inject(headers: &mut HeaderMap) {
    if !is_on() {
        return;
    }
    let context = Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}
