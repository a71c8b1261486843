//! Traces: W3C Trace Context continued through every hop, and spans exported over OTLP.
//!
//! With an OTLP endpoint (`--otlp-endpoint`, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`), a
//! process exports its spans there, over OTLP/HTTP (protobuf, or JSON with
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`), in batches from a thread of the exporter's own:
//! `idem serve` continues each request's `traceparent` (or starts a trace) and passes its context
//! to the upstream; `idem relay` and `idem deliver` continue each message's. Without one, nothing
//! of this is set up: no exporter, no span recorded, no header written or rewritten.
//!
//! The spans (`idem.acquire`, `idem.execute`, `idem.complete`, `idem.replay`, `idem.publish`,
//! `idem.deliver`, `idem.consume`) are `tracing` spans of the libraries at the `debug` level; the
//! exporter takes every span of idem's crates whatever `--log-level` says, the logs only those
//! their filter lets through.

mod exporter;
mod propagation;
mod server;

pub(crate) use exporter::{Tracing, is_on};
pub(crate) use propagation::{continue_trace, inject, inject_span};
pub(crate) use server::{record_response, server_span};
