//! The problem `type`s (RFC 9457) that the gateway itself answers with, beyond the layer's
//! ([`idem_http::problem`]).

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode, header::CONTENT_TYPE};
use serde::Serialize;

pub use idem_http::problem::{INVALID_KEY, UPSTREAM_FAILED};

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

/// A problem+json response: `{"type","title","status","detail"}`.
pub(crate) fn response(
    status: StatusCode,
    problem_type: &str,
    title: &str,
    detail: &str,
) -> Response<Body> {
    #[derive(Serialize)]
    struct Problem<'a> {
        #[serde(rename = "type")]
        problem_type: &'a str,
        title: &'a str,
        status: u16,
        detail: &'a str,
    }
    let body = serde_json::to_vec(&Problem {
        problem_type,
        title,
        status: status.as_u16(),
        detail,
    })
    .expect("strings and a number serialize");
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
