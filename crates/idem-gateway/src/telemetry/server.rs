//! The span of a request to `idem serve`: the trace's server span, continuing the client's.

use http::{Request, Response};
use idem_http::{RequestKey, RequestOutcome};
use tracing::{Span, field::Empty};

use super::continue_trace;

/// The server span of `request`, a child of the trace context its headers carry (a new trace
/// when they carry none). Named after the method, as OpenTelemetry's HTTP conventions name a
/// server span whose route is unknown.
pub(crate) fn server_span<B>(request: &Request<B>) -> Span {
    let method = request.method().as_str();
    let span = tracing::debug_span!(
        "request",
        otel.name = method,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        url.path = request.uri().path(),
        http.response.status_code = Empty,
        idem.outcome = Empty,
        idem.key_digest = Empty,
    );
    continue_trace(&span, request.headers());
    span
}

/// Records what `response` says of its request on its server `span`: the status, and what the
/// idempotency layer did with the key (its outcome, the key's digest).
pub(crate) fn record_response<B>(span: &Span, response: &Response<B>) {
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    if let Some(outcome) = response.extensions().get::<RequestOutcome>() {
        span.record("idem.outcome", outcome.as_str());
    }
    if let Some(key) = response.extensions().get::<RequestKey>() {
        span.record("idem.key_digest", key.digest());
    }
}
