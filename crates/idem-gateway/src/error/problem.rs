//! The problems (RFC 9457) that the gateway itself answers with, beyond the layer's
//! ([`idem_http::problem`]): typed, with a fixed status, and rendered by
//! [`Problem::to_response`] like the layer's.

use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode, header::WWW_AUTHENTICATE};
pub use idem_http::problem::UPSTREAM_FAILED;
pub use idem_http::problem::{INVALID_KEY, Problem, RECORD_CORRUPTED, STORE_UNAVAILABLE};

/// The upstream could not be reached; nothing was sent (502).
pub const UPSTREAM_UNREACHABLE: &str = "urn:idem:problem:upstream-unreachable";
/// The upstream did not answer in time (504).
pub const UPSTREAM_TIMEOUT: &str = "urn:idem:problem:upstream-timeout";
/// The admin API has no record under this key and scope (404).
pub const KEY_NOT_FOUND: &str = "urn:idem:problem:key-not-found";
/// The admin API was given a scope that is not 64 hex digits (400).
pub const INVALID_SCOPE: &str = "urn:idem:problem:invalid-scope";

/// The admin API was called without the admin token, or with another (401, with
/// `WWW-Authenticate: Bearer`).
pub const UNAUTHORIZED: &str = "urn:idem:problem:unauthorized";
/// The admin API was asked to forget a key that a request holds, without `?force=true` (409).
pub const KEY_PROCESSING: &str = "urn:idem:problem:key-processing";
/// The admin API was given a `force` that is neither `true` nor `false` (400).
pub const INVALID_FORCE: &str = "urn:idem:problem:invalid-force";

/// The admin API's key listing was given a filter, a limit or a cursor it cannot read (400).
pub const INVALID_QUERY: &str = "urn:idem:problem:invalid-query";

/// `idem relay`'s admin listener cannot read the outbox's database (503).
pub const OUTBOX_UNAVAILABLE: &str = "urn:idem:problem:outbox-unavailable";
/// An admin listener without a token was called under a `Host` that is neither a loopback name
/// or address nor one of `--admin-allowed-hosts` (421): a web page the operator opened may have
/// rebound its own name to the loopback address.
pub const HOST_NOT_ALLOWED: &str = "urn:idem:problem:host-not-allowed";
/// An admin request took longer than the admin listener allows (503).
pub const ADMIN_TIMEOUT: &str = "urn:idem:problem:admin-timeout";

/// A forward to the upstream that ended without a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamRejection {
    /// The upstream did not send its response head in time (504, [`UPSTREAM_TIMEOUT`]).
    #[error("the upstream did not answer within {0:?}")]
    Timeout(Duration),
    /// The upstream could not be reached; nothing was sent (502, [`UPSTREAM_UNREACHABLE`]).
    #[error("the upstream could not be reached")]
    Unreachable,
    /// The connection failed after the request may have been sent (502, [`UPSTREAM_FAILED`]).
    #[error("the upstream connection failed")]
    Failed,
}

impl Problem for UpstreamRejection {
    fn status(&self) -> StatusCode {
        match self {
            UpstreamRejection::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            UpstreamRejection::Unreachable | UpstreamRejection::Failed => StatusCode::BAD_GATEWAY,
        }
    }

    fn problem_type(&self) -> &'static str {
        match self {
            UpstreamRejection::Timeout(_) => UPSTREAM_TIMEOUT,
            UpstreamRejection::Unreachable => UPSTREAM_UNREACHABLE,
            UpstreamRejection::Failed => UPSTREAM_FAILED,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            UpstreamRejection::Timeout(_) => "Upstream timeout",
            UpstreamRejection::Unreachable => "Upstream unreachable",
            UpstreamRejection::Failed => "Upstream failed",
        }
    }

    fn detail(&self) -> String {
        match self {
            UpstreamRejection::Timeout(_) => {
                "The upstream did not answer in time; the request may or may not have taken effect."
            }
            UpstreamRejection::Unreachable => {
                "The upstream could not be reached; the request was not sent."
            }
            UpstreamRejection::Failed => {
                "The upstream connection failed; the request may or may not have taken effect."
            }
        }
        .to_owned()
    }
}

/// A request to the admin API that it refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminRejection {
    /// No admin token, or another one (401, [`UNAUTHORIZED`], `WWW-Authenticate: Bearer`).
    #[error("the admin token is missing or wrong")]
    Unauthorized,
    /// The key in the URL is not a valid idempotency key (400, [`INVALID_KEY`]).
    #[error("the idempotency key is invalid")]
    InvalidKey(#[source] idem_core::KeyError),
    /// The scope is not 64 hexadecimal digits (400, [`INVALID_SCOPE`]).
    #[error("the scope is not a scope hash")]
    InvalidScope,
    /// `force` is neither `true` nor `false` (400, [`INVALID_FORCE`]).
    #[error("force is neither true nor false")]
    InvalidForce,
    /// A listing's `state`, `older_than`, `limit` or `cursor` is not valid (400,
    /// [`INVALID_QUERY`]); the text says which and what it takes.
    #[error("the listing's query is invalid: {0}")]
    InvalidQuery(&'static str),
    /// No live record under this key and scope (404, [`KEY_NOT_FOUND`]).
    #[error("no record under this key")]
    KeyNotFound,
    /// A request holds the key and `force=true` was not given (409, [`KEY_PROCESSING`]).
    #[error("a request holds this key")]
    KeyProcessing,
    /// The record cannot be read (500, [`RECORD_CORRUPTED`]).
    #[error("the idempotency record cannot be read")]
    RecordCorrupted,
    /// The store failed (503, [`STORE_UNAVAILABLE`]).
    #[error("the idempotency store is unavailable")]
    StoreUnavailable,
    /// The relay's outbox database failed, did not answer in time, or was not reached yet (503,
    /// [`OUTBOX_UNAVAILABLE`]).
    #[error("the outbox's database is unavailable")]
    OutboxUnavailable,
    /// The `Host` is not one an admin listener without a token answers (421,
    /// [`HOST_NOT_ALLOWED`]).
    #[error("the Host is not allowed on this admin listener")]
    HostNotAllowed,
    /// The request took longer than the admin listener allows (503, [`ADMIN_TIMEOUT`]).
    #[error("the admin request took too long")]
    Timeout,
}

impl Problem for AdminRejection {
    fn status(&self) -> StatusCode {
        match self {
            AdminRejection::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminRejection::InvalidKey(_)
            | AdminRejection::InvalidScope
            | AdminRejection::InvalidForce
            | AdminRejection::InvalidQuery(_) => StatusCode::BAD_REQUEST,
            AdminRejection::KeyNotFound => StatusCode::NOT_FOUND,
            AdminRejection::KeyProcessing => StatusCode::CONFLICT,
            AdminRejection::RecordCorrupted => StatusCode::INTERNAL_SERVER_ERROR,
            AdminRejection::StoreUnavailable
            | AdminRejection::OutboxUnavailable
            | AdminRejection::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            AdminRejection::HostNotAllowed => StatusCode::MISDIRECTED_REQUEST,
        }
    }

    fn problem_type(&self) -> &'static str {
        match self {
            AdminRejection::Unauthorized => UNAUTHORIZED,
            AdminRejection::InvalidKey(_) => INVALID_KEY,
            AdminRejection::InvalidScope => INVALID_SCOPE,
            AdminRejection::InvalidForce => INVALID_FORCE,
            AdminRejection::InvalidQuery(_) => INVALID_QUERY,
            AdminRejection::KeyNotFound => KEY_NOT_FOUND,
            AdminRejection::KeyProcessing => KEY_PROCESSING,
            AdminRejection::RecordCorrupted => RECORD_CORRUPTED,
            AdminRejection::StoreUnavailable => STORE_UNAVAILABLE,
            AdminRejection::OutboxUnavailable => OUTBOX_UNAVAILABLE,
            AdminRejection::HostNotAllowed => HOST_NOT_ALLOWED,
            AdminRejection::Timeout => ADMIN_TIMEOUT,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            AdminRejection::Unauthorized => "Unauthorized",
            AdminRejection::InvalidKey(_) => "Invalid idempotency key",
            AdminRejection::InvalidScope => "Invalid scope",
            AdminRejection::InvalidForce => "Invalid force",
            AdminRejection::InvalidQuery(_) => "Invalid listing query",
            AdminRejection::KeyNotFound => "Key not found",
            AdminRejection::KeyProcessing => "Key being processed",
            AdminRejection::RecordCorrupted => "Idempotency record unreadable",
            AdminRejection::StoreUnavailable => "Idempotency store unavailable",
            AdminRejection::OutboxUnavailable => "Outbox database unavailable",
            AdminRejection::HostNotAllowed => "Host not allowed",
            AdminRejection::Timeout => "Admin request timed out",
        }
    }

    fn detail(&self) -> String {
        match self {
            AdminRejection::Unauthorized => {
                "The admin endpoints need the admin token, as `Authorization: Bearer <token>`."
            }
            AdminRejection::InvalidKey(error) => return error.to_string(),
            AdminRejection::InvalidScope => {
                "The scope is the scope hash as the logs show it: 64 hexadecimal digits."
            }
            AdminRejection::InvalidForce => "force is `true` or `false`.",
            AdminRejection::InvalidQuery(what) => what,
            AdminRejection::KeyNotFound => "There is no live record under this key in this scope.",
            AdminRejection::KeyProcessing => concat!(
                "A request holds this key and may still be running; forgetting it would let a ",
                "retry execute while it runs. Add force=true to forget it anyway."
            ),
            AdminRejection::RecordCorrupted => concat!(
                "The record under this key cannot be read (altered, or sealed with a key that is ",
                "not in the key ring)."
            ),
            AdminRejection::StoreUnavailable => "The idempotency store cannot be reached.",
            AdminRejection::OutboxUnavailable => {
                "The outbox's database did not answer, or has not been reached yet."
            }
            AdminRejection::HostNotAllowed => concat!(
                "Without an admin token, the admin endpoints answer only loopback hosts ",
                "(localhost, 127.0.0.1, [::1]) and those of --admin-allowed-hosts."
            ),
            AdminRejection::Timeout => "The admin request did not finish in time.",
        }
        .to_owned()
    }

    fn headers(&self, headers: &mut HeaderMap) {
        if let AdminRejection::Unauthorized = self {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
    }
}

impl axum::response::IntoResponse for AdminRejection {
    fn into_response(self) -> axum::response::Response {
        self.to_response()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn an_upstream_timeout_is_a_504_problem() {
        let response = UpstreamRejection::Timeout(Duration::from_secs(30)).to_response::<Bytes>();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(
            &response.body()[..],
            concat!(
                r#"{"type":"urn:idem:problem:upstream-timeout","title":"Upstream timeout","#,
                r#""status":504,"detail":"The upstream did not answer in time; the request may "#,
                r#"or may not have taken effect."}"#
            )
            .as_bytes()
        );
    }

    #[test]
    fn unauthorized_carries_the_bearer_challenge() {
        let response = AdminRejection::Unauthorized.to_response::<Bytes>();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[WWW_AUTHENTICATE], "Bearer");
        assert_eq!(
            response.headers()["content-length"],
            response.body().len().to_string()
        );
    }
}
