//! Traces: the trace context of an execution kept with its response, and the span of a replay,
//! linked to it.
//!
//! The layer's spans are `tracing` spans at the `debug` level: `idem.acquire`, `idem.execute`
//! and `idem.complete` (the engine's, in `idem-core`) and `idem.replay` (here), each with the
//! key's digest (`idem.key_digest`, never the key) and its outcome (`idem.outcome`). With the
//! `opentelemetry` feature and a `tracing-opentelemetry` layer in the application's subscriber,
//! the response of a traced execution keeps the execution span's W3C trace context, and a replay's
//! span links to it: the trace of any retry leads to the trace that ran the operation. Without
//! the feature, nothing is kept and no link is made.

use idem_core::{Outcome, TraceContext};
use tracing::Span;

/// The trace context of the current span (the engine's `idem.execute`, around the work), to keep
/// with the response; `None` without the feature, or when the span is not traced.
pub(crate) fn current() -> Option<TraceContext> {
    #[cfg(feature = "opentelemetry")]
    {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;

        // The spans are at `debug`: where no subscriber takes that level, no span is traced, and
        // this static check spares the lookup of the current span.
        if !tracing::level_enabled!(tracing::Level::DEBUG) {
            return None;
        }
        let span = Span::current();
        if span.is_disabled() {
            return None;
        }
        let context = span.context();
        let context = context.span().span_context().clone();
        if !context.is_valid() {
            return None;
        }
        TraceContext::new(
            context.trace_id().to_bytes(),
            context.span_id().to_bytes(),
            context.trace_flags().to_u8(),
        )
        .ok()
    }
    #[cfg(not(feature = "opentelemetry"))]
    None
}

/// The span of a replay under the key whose digest `digest` gives: of the stored `outcome`,
/// linked to the trace that executed it when that was kept; or, without one, of a response that
/// another request is streaming (`idem.outcome` `stream`).
pub(crate) fn replay_span(digest: impl FnOnce() -> String, outcome: Option<&Outcome>) -> Span {
    let span = tracing::debug_span!(
        "idem.replay",
        idem.key_digest = digest(),
        idem.outcome = match outcome {
            Some(Outcome::Response(_)) => "response",
            Some(Outcome::Unknown) => "unknown",
            None => "stream",
        },
    );
    #[cfg(feature = "opentelemetry")]
    if let Some(Outcome::Response(stored)) = outcome
        && let Some(trace) = stored.trace
        && !span.is_disabled()
    {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;

        span.add_link(SpanContext::new(
            TraceId::from_bytes(trace.trace_id()),
            SpanId::from_bytes(trace.span_id()),
            TraceFlags::new(trace.flags()),
            true,
            TraceState::NONE,
        ));
    }
    span
}
