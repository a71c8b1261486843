//! The requests the layer answers itself: typed [`Rejection`]s with RFC 9457
//! `application/problem+json` bodies, the stable problem `type` values, and the [`Problem`]
//! trait that renders them, for the layer's problems and for those a server adds of its own.
//!
//! # Examples
//!
//! ```
//! use http::StatusCode;
//! use idem_http::problem::{self, Problem, Rejection};
//!
//! let rejection = Rejection::FingerprintMismatch;
//! assert_eq!(rejection.status(), StatusCode::UNPROCESSABLE_ENTITY);
//! assert_eq!(rejection.problem_type(), problem::FINGERPRINT_MISMATCH);
//!
//! let response = rejection.into_response::<http_body_util::Empty<bytes::Bytes>>();
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//! ```
//!
//! A server's own problem, rendered the same way:
//!
//! ```
//! use bytes::Bytes;
//! use http::StatusCode;
//! use idem_http::problem::Problem;
//!
//! struct QuotaExceeded;
//!
//! impl Problem for QuotaExceeded {
//!     fn status(&self) -> StatusCode {
//!         StatusCode::TOO_MANY_REQUESTS
//!     }
//!     fn problem_type(&self) -> &'static str {
//!         "urn:example:problem:quota-exceeded"
//!     }
//!     fn title(&self) -> &'static str {
//!         "Quota exceeded"
//!     }
//!     fn detail(&self) -> String {
//!         "This account has used its requests for today.".to_owned()
//!     }
//! }
//!
//! let response = QuotaExceeded.to_response::<Bytes>();
//! assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(response.headers()["content-length"], "140");
//! assert!(response.body().starts_with(br#"{"type":"urn:example:problem:quota-exceeded","#));
//! ```

use std::time::Duration;

use bytes::Bytes;
use http::{
    HeaderMap, HeaderName, HeaderValue, Response, StatusCode,
    header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER},
};
use idem_core::{KeyError, StoreError};

use crate::ResponseBody;

/// The request lacks the key header and the layer requires one (400).
pub const MISSING_KEY: &str = "urn:idem:problem:missing-key";
/// The key header is invalid or was sent more than once (400).
pub const INVALID_KEY: &str = "urn:idem:problem:invalid-key";
/// The request has a key but none of the scope headers, and anonymous keys are refused (400).
pub const SCOPE_REQUIRED: &str = "urn:idem:problem:scope-required";
/// A request with the same key is still running (409, with `Retry-After`).
pub const IN_FLIGHT: &str = "urn:idem:problem:in-flight";
/// The key was used before with another method, path, query or body (422).
pub const FINGERPRINT_MISMATCH: &str = "urn:idem:problem:fingerprint-mismatch";
/// The request body is over the limit (413).
pub const BODY_TOO_LARGE: &str = "urn:idem:problem:body-too-large";
/// The request body could not be read (the client went away mid-upload) (400).
pub const BODY_UNREADABLE: &str = "urn:idem:problem:body-unreadable";
/// The request body did not arrive within the body timeout (408).
pub const BODY_TIMEOUT: &str = "urn:idem:problem:body-timeout";
/// The bodies being buffered already fill the buffer budget (503, with `Retry-After`).
pub const OVERLOADED: &str = "urn:idem:problem:overloaded";
/// The idempotency store cannot be reached (503, with `Retry-After`).
pub const STORE_UNAVAILABLE: &str = "urn:idem:problem:store-unavailable";
/// The key's stored record cannot be read (altered, or sealed with a key that is not in the key
/// ring): nothing is executed again and nothing is replayed (500).
pub const RECORD_CORRUPTED: &str = "urn:idem:problem:record-corrupted";
/// The idempotency store is at its capacity and takes no new key (503, with `Retry-After`).
pub const STORE_FULL: &str = "urn:idem:problem:store-full";
/// The replay of a response that was too large to store; it carries the original status.
pub const RESPONSE_NOT_STORED: &str = "urn:idem:problem:response-not-stored";
/// The upstream's response was cut off after the request was sent; the key was released, so a
/// retry executes again (502).
pub const UPSTREAM_FAILED: &str = "urn:idem:problem:upstream-failed";
pub use idem_core::OUTCOME_UNKNOWN_TYPE as OUTCOME_UNKNOWN;

/// A problem a server answers with: a fixed status, a stable `type`, and an RFC 9457
/// `application/problem+json` body `{"type","title","status","detail"}`.
///
/// [`Rejection`] is the layer's; a server that answers problems of its own (a gateway's upstream
/// failures, an admin API) implements it for them, so that every problem it sends is rendered
/// the same way.
pub trait Problem {
    /// The response status.
    fn status(&self) -> StatusCode;

    /// The problem `type`: a stable URI that clients match on.
    fn problem_type(&self) -> &'static str;

    /// The problem `title`: a short summary that depends on the type only.
    fn title(&self) -> &'static str;

    /// The problem `detail`: what happened to this request and what the client can do.
    fn detail(&self) -> String;

    /// Adds the headers this problem carries beyond `Content-Type` and `Content-Length`
    /// (`Retry-After`, `WWW-Authenticate`); none by default.
    fn headers(&self, headers: &mut HeaderMap) {
        let _ = headers;
    }

    /// The body: `{"type","title","status","detail"}`, in that order.
    fn body(&self) -> Bytes {
        problem_json(
            self.problem_type(),
            self.title(),
            self.status(),
            &self.detail(),
        )
    }

    /// The response: the status, `Content-Type: application/problem+json`, `Content-Length`,
    /// [`headers`](Problem::headers), and the body.
    fn to_response<B: From<Bytes>>(&self) -> Response<B> {
        let body = self.body();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, content_type());
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        self.headers(&mut headers);
        let mut response = Response::new(B::from(body));
        *response.status_mut() = self.status();
        *response.headers_mut() = headers;
        response
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request the layer answers itself, with a fixed status and a problem+json body.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The key header is missing and keys are required (400, [`MISSING_KEY`]).
    #[error("this request requires an idempotency key in the {header} header")]
    MissingKey {
        /// The configured key header.
        header: HeaderName,
    },
    /// The key header is invalid or repeated (400, [`INVALID_KEY`]).
    #[error("the idempotency key is invalid")]
    InvalidKey(#[source] KeyError),
    /// The request has a key but none of the scope headers, and anonymous keys are refused
    /// (400, [`SCOPE_REQUIRED`]).
    #[error("this request with an idempotency key carries none of the scope headers")]
    ScopeRequired {
        /// The configured scope headers (empty when scoping is off).
        headers: Vec<HeaderName>,
    },
    /// The request body is over the limit (413, [`BODY_TOO_LARGE`]).
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request body failed while it was read (400, [`BODY_UNREADABLE`]).
    #[error("the request body could not be read")]
    BodyUnreadable(#[source] BoxError),
    /// The request body was not received in full within the body timeout (408,
    /// [`BODY_TIMEOUT`]).
    #[error("the request body was not received within {timeout:?}")]
    BodyTimeout {
        /// The body timeout.
        timeout: Duration,
    },
    /// Buffering the request body would pass the budget of bytes buffered at once (503,
    /// [`OVERLOADED`], `Retry-After: 1`).
    #[error("too many request bodies are buffered at once")]
    Overloaded,
    /// A request with the same key is still running (409, [`IN_FLIGHT`]).
    #[error("a request with this idempotency key is still being processed")]
    InFlight {
        /// The running request's remaining lease; sent as `Retry-After` in whole seconds,
        /// rounded up, at least 1.
        retry_after: Duration,
    },
    /// The key is in use by a request with another fingerprint (422, [`FINGERPRINT_MISMATCH`]).
    #[error("the idempotency key was used with another request")]
    FingerprintMismatch,
    /// The store failed (503, [`STORE_UNAVAILABLE`], `Retry-After: 1`).
    #[error("the idempotency store is unavailable")]
    StoreUnavailable(#[source] StoreError),
    /// The key's record cannot be read (500, [`RECORD_CORRUPTED`]); never forwarded, whatever
    /// `on_store_error` says, since the operation may already have taken effect.
    #[error("the idempotency record cannot be read")]
    RecordCorrupted(#[source] StoreError),
    /// The store refused a new key: it is full (503, [`STORE_FULL`], `Retry-After: 1`).
    #[error("the idempotency store is full")]
    StoreFull(#[source] StoreError),
    /// The upstream's response was cut off and the key released (502, [`UPSTREAM_FAILED`]).
    #[error("the upstream response was cut off")]
    UpstreamFailed(#[source] BoxError),
    /// The key's outcome is unknown ([`idem_core::Outcome::Unknown`]): the request was sent and
    /// its result lost, under `Ambiguous::Reject` (500, [`OUTCOME_UNKNOWN`]). Final: replayed
    /// to every retry.
    #[error("the outcome of the request is unknown")]
    OutcomeUnknown,
}

impl Rejection {
    /// The response: the status, `Content-Type: application/problem+json`, `Retry-After` where
    /// it applies, and the problem body ([`Problem::to_response`]).
    pub fn into_response<B>(self) -> Response<ResponseBody<B>> {
        self.to_response()
    }

    /// The `Retry-After` seconds, for the rejections that carry one.
    fn retry_after(&self) -> Option<u64> {
        match self {
            Rejection::InFlight { retry_after } => {
                let whole = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                Some(whole.max(1))
            }
            Rejection::StoreUnavailable(_) | Rejection::StoreFull(_) | Rejection::Overloaded => {
                Some(1)
            }
            _ => None,
        }
    }
}

impl Problem for Rejection {
    fn status(&self) -> StatusCode {
        match self {
            Rejection::MissingKey { .. }
            | Rejection::InvalidKey(_)
            | Rejection::ScopeRequired { .. }
            | Rejection::BodyUnreadable(_) => StatusCode::BAD_REQUEST,
            Rejection::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Rejection::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::InFlight { .. } => StatusCode::CONFLICT,
            Rejection::FingerprintMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            Rejection::StoreUnavailable(_) | Rejection::StoreFull(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Rejection::RecordCorrupted(_) | Rejection::OutcomeUnknown => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Rejection::UpstreamFailed(_) => StatusCode::BAD_GATEWAY,
        }
    }

    /// One of this module's constants.
    fn problem_type(&self) -> &'static str {
        match self {
            Rejection::MissingKey { .. } => MISSING_KEY,
            Rejection::InvalidKey(_) => INVALID_KEY,
            Rejection::ScopeRequired { .. } => SCOPE_REQUIRED,
            Rejection::BodyTooLarge { .. } => BODY_TOO_LARGE,
            Rejection::BodyUnreadable(_) => BODY_UNREADABLE,
            Rejection::BodyTimeout { .. } => BODY_TIMEOUT,
            Rejection::Overloaded => OVERLOADED,
            Rejection::InFlight { .. } => IN_FLIGHT,
            Rejection::FingerprintMismatch => FINGERPRINT_MISMATCH,
            Rejection::StoreUnavailable(_) => STORE_UNAVAILABLE,
            Rejection::RecordCorrupted(_) => RECORD_CORRUPTED,
            Rejection::StoreFull(_) => STORE_FULL,
            Rejection::UpstreamFailed(_) => UPSTREAM_FAILED,
            Rejection::OutcomeUnknown => OUTCOME_UNKNOWN,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Rejection::MissingKey { .. } => "Idempotency key missing",
            Rejection::InvalidKey(_) => "Invalid idempotency key",
            Rejection::ScopeRequired { .. } => "Caller scope required",
            Rejection::BodyTooLarge { .. } => "Request body too large",
            Rejection::BodyUnreadable(_) => "Request body unreadable",
            Rejection::BodyTimeout { .. } => "Request body timeout",
            Rejection::Overloaded => "Overloaded",
            Rejection::InFlight { .. } => "Request in flight",
            Rejection::FingerprintMismatch => "Idempotency key reused",
            Rejection::StoreUnavailable(_) => "Idempotency store unavailable",
            Rejection::RecordCorrupted(_) => "Idempotency record unreadable",
            Rejection::StoreFull(_) => "Idempotency store full",
            Rejection::UpstreamFailed(_) => "Upstream failed",
            Rejection::OutcomeUnknown => "Outcome unknown",
        }
    }

    fn detail(&self) -> String {
        match self {
            Rejection::MissingKey { header } => {
                format!("This request requires an idempotency key in the {header} header.")
            }
            Rejection::InvalidKey(error) => error.to_string(),
            Rejection::ScopeRequired { headers } if headers.is_empty() => concat!(
                "Requests with an idempotency key must identify their caller, ",
                "and no scope header is configured; nothing was executed."
            )
            .to_owned(),
            Rejection::ScopeRequired { headers } => {
                let names: Vec<&str> = headers.iter().map(HeaderName::as_str).collect();
                format!(
                    "Requests with an idempotency key must identify their caller with one of \
                     these headers: {}; nothing was executed.",
                    names.join(", ")
                )
            }
            Rejection::BodyTooLarge { limit } => format!(
                "Requests with an idempotency key may have a body of at most {limit} bytes."
            ),
            Rejection::BodyUnreadable(_) => {
                "The request body could not be read; nothing was executed.".to_owned()
            }
            Rejection::BodyTimeout { timeout } => format!(
                "The request body was not received within {timeout:?}; nothing was executed."
            ),
            Rejection::Overloaded => concat!(
                "Too many request bodies are being received at once; nothing was executed. ",
                "Retry later."
            )
            .to_owned(),
            Rejection::InFlight { .. } => concat!(
                "A request with this idempotency key is still being processed; ",
                "retry after the time given in Retry-After."
            )
            .to_owned(),
            Rejection::FingerprintMismatch => concat!(
                "This idempotency key was used with another method, path, query or body; ",
                "use a new key for a new request."
            )
            .to_owned(),
            // The store's own error may name hosts or files: it is logged, not sent.
            Rejection::StoreUnavailable(_) => {
                "The idempotency store cannot be reached; nothing was executed. Retry later."
                    .to_owned()
            }
            Rejection::RecordCorrupted(_) => concat!(
                "The stored result of this idempotency key cannot be read; the request was not ",
                "executed again. The operator has been told in the logs."
            )
            .to_owned(),
            Rejection::StoreFull(_) => concat!(
                "The idempotency store holds as many keys as it may; nothing was executed. ",
                "Retry later, when older keys have expired."
            )
            .to_owned(),
            Rejection::UpstreamFailed(_) => concat!(
                "The response was cut off; the operation may or may not have taken effect. ",
                "Retrying with the same idempotency key executes it again."
            )
            .to_owned(),
            Rejection::OutcomeUnknown => concat!(
                "The request was sent but its result was lost; it may have taken effect and will ",
                "not be executed again under this key."
            )
            .to_owned(),
        }
    }

    fn headers(&self, headers: &mut HeaderMap) {
        if let Some(seconds) = self.retry_after() {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
    }
}

/// An RFC 9457 body: `{"type","title","status","detail"}`.
pub(crate) fn problem_json(
    problem_type: &str,
    title: &str,
    status: StatusCode,
    detail: &str,
) -> Bytes {
    #[derive(serde::Serialize)]
    struct Document<'a> {
        #[serde(rename = "type")]
        problem_type: &'a str,
        title: &'a str,
        status: u16,
        detail: &'a str,
    }
    let problem = Document {
        problem_type,
        title,
        status: status.as_u16(),
        detail,
    };
    // Serializing strings and a number into a Vec cannot fail.
    serde_json::to_vec(&problem).map_or_else(|_| Bytes::new(), Bytes::from)
}

/// The media type of problem bodies.
pub(crate) fn content_type() -> HeaderValue {
    HeaderValue::from_static("application/problem+json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::header_pairs;

    #[test]
    fn retry_after_is_rounded_up_and_at_least_one_second() {
        let seconds = |d| Rejection::InFlight { retry_after: d }.retry_after();
        assert_eq!(seconds(Duration::ZERO), Some(1));
        assert_eq!(seconds(Duration::from_millis(1)), Some(1));
        assert_eq!(seconds(Duration::from_millis(1001)), Some(2));
        assert_eq!(seconds(Duration::from_secs(30)), Some(30));
    }

    #[test]
    fn outcome_unknown_is_the_problem_earlier_builds_stored() {
        let response = Rejection::OutcomeUnknown.into_response::<http_body_util::Empty<Bytes>>();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let headers = header_pairs(&response);
        assert_eq!(
            headers,
            [
                ("content-type", "application/problem+json"),
                ("content-length", "211")
            ]
        );
        assert_eq!(
            &Rejection::OutcomeUnknown.body()[..],
            concat!(
                r#"{"type":"urn:idem:problem:outcome-unknown","title":"Outcome unknown","#,
                r#""status":500,"detail":"The request was sent but its result was lost; it may "#,
                r#"have taken effect and will not be executed again under this key."}"#
            )
            .as_bytes()
        );
    }

    #[test]
    fn problem_body_has_the_four_members_in_order() {
        let body = problem_json(IN_FLIGHT, "T", StatusCode::CONFLICT, "d \"q\"");
        assert_eq!(
            &body[..],
            br#"{"type":"urn:idem:problem:in-flight","title":"T","status":409,"detail":"d \"q\""}"#
        );
    }
}
