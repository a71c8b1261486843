//! [`Problem`]: an RFC 9457 problem details body, as idem servers answer their refusals.

use std::time::Duration;

use http::{HeaderMap, header::CONTENT_TYPE, header::RETRY_AFTER};

use crate::retry_after::parse_retry_after;

/// The media type of a problem details body.
const PROBLEM_JSON: &str = "application/problem+json";

/// A problem details body (RFC 9457): what an idem server says when it refuses or cannot
/// answer a request — `urn:idem:problem:in-flight`, `…:fingerprint-mismatch`,
/// `…:outcome-unknown` and the others that docs/http.md lists.
///
/// [`Response::problem`](crate::Response::problem) reads it from a response whose
/// `Content-Type` is `application/problem+json`;
/// [`Error::Mismatch`](crate::Error::Mismatch) and
/// [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown) carry the one that ended the call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The problem type, a URI (`urn:idem:problem:in-flight`); `about:blank` when the body
    /// names none.
    pub kind: String,
    /// A short summary of the type.
    pub title: Option<String>,
    /// The status code the server gave it.
    pub status: Option<u16>,
    /// What happened to this request.
    pub detail: Option<String>,
    /// The response's `Retry-After`, when it is in delta-seconds.
    pub retry_after: Option<Duration>,
}

impl Problem {
    /// The problem a response carries: its `Content-Type` is `application/problem+json` (any
    /// parameters) and its body a JSON object.
    pub(crate) fn of_response(headers: &HeaderMap, body: &[u8]) -> Option<Self> {
        let media_type = headers.get(CONTENT_TYPE)?.to_str().ok()?;
        let essence = media_type.split(';').next().unwrap_or_default().trim();
        if !essence.eq_ignore_ascii_case(PROBLEM_JSON) {
            return None;
        }
        Self::of_body(headers, body)
    }

    /// The problem in `body`, whatever the `Content-Type` says: for the answers that are
    /// recognized by their problem type.
    pub(crate) fn of_body(headers: &HeaderMap, body: &[u8]) -> Option<Self> {
        // Members of another JSON type than RFC 9457 gives them are ignored, as it asks.
        let value: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(body).ok()?;
        let text = |name: &str| value.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        Some(Self {
            kind: text("type").unwrap_or_else(|| "about:blank".to_owned()),
            title: text("title"),
            status: value
                .get("status")
                .and_then(serde_json::Value::as_u64)
                .and_then(|status| u16::try_from(status).ok()),
            detail: text("detail"),
            retry_after: headers.get(RETRY_AFTER).and_then(parse_retry_after),
        })
    }
}
