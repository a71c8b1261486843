//! W3C trace context (`traceparent`, `tracestate`) taken from headers and put into them.

use http::{HeaderMap, HeaderValue};
use opentelemetry::{
    Context,
    propagation::{Extractor, TextMapPropagator},
    trace::TraceContextExt as _,
};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::is_on;

/// Makes `span` a child of the trace context that `headers` carry, when the process exports
/// traces and they carry a valid one; otherwise `span` starts a trace (or stays in its parent's).
pub(crate) fn continue_trace(span: &Span, headers: &HeaderMap) {
    if is_on() {
        set_parent(span, &HeaderExtractor(headers));
    }
}

/// Writes the current span's context into `headers` as `traceparent` (and `tracestate`),
/// replacing any there, when the process exports traces; otherwise leaves them as they are.
pub(crate) fn inject(headers: &mut HeaderMap) {
    if is_on() {
        inject_span(&Span::current(), headers);
    }
}

/// Makes `span` a child of the valid trace context `carrier` holds, if any.
fn set_parent(span: &Span, carrier: &dyn Extractor) {
    let parent = TraceContextPropagator::new().extract_with_context(&Context::new(), carrier);
    if parent.span().span_context().is_valid() {
        // Fails only for a span that has started already, which callers never pass.
        let _ = span.set_parent(parent);
    }
}

/// Writes `span`'s trace context into `headers` as `traceparent` (and `tracestate` when it has
/// one), in place of any there, when `span` has one: only a span the exporter records does.
/// Otherwise leaves them as they are.
pub(crate) fn inject_span(span: &Span, headers: &mut HeaderMap) {
    if span.is_disabled() {
        return;
    }
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return;
    }
    headers.remove(TRACESTATE);
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
    // The propagator writes an empty one for a trace without state.
    if headers.get(TRACESTATE).is_some_and(HeaderValue::is_empty) {
        headers.remove(TRACESTATE);
    }
}

const TRACESTATE: &str = "tracestate";
