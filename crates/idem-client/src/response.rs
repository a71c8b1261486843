//! [`Response`]: a definite answer, read whole.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, StatusCode, Version};
use idem_core::IdempotencyKey;
use serde::de::DeserializeOwned;

use crate::Problem;

/// The header with which an idem server marks a replayed response.
pub(crate) const REPLAYED_HEADER: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A response, its body already read, with what it took to get it.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), idem_client::Error> {
/// let client = idem_client::Client::new();
/// let response = client.post("http://localhost:8080/charges").send().await?;
/// if response.replayed() {
///     println!("charged earlier; {} attempt(s) to hear about it", response.attempts());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Response {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) attempts: u32,
    pub(crate) key: IdempotencyKey,
}

impl Response {
    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The HTTP version of the connection it came on.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body, deserialized from JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// Whether the server replayed a stored response (`Idempotent-Replayed: true`) rather than
    /// executing the request: an earlier attempt, or an earlier call with the same key, did.
    pub fn replayed(&self) -> bool {
        self.headers
            .get(REPLAYED_HEADER)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"true"))
    }

    /// The problem details the body holds, when its `Content-Type` is
    /// `application/problem+json`: how an idem server explains a refusal (a `400` invalid key, a
    /// `413` body too large…), or the API's own.
    pub fn problem(&self) -> Option<Problem> {
        Problem::of_response(&self.headers, &self.body)
    }

    /// How many attempts were sent to get this response, this one included (at least 1).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The idempotency key the request carried.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// The body, without the rest.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// Status, version, headers and body as an [`http::Response`].
    pub fn into_http(self) -> http::Response<Bytes> {
        let mut response = http::Response::new(self.body);
        *response.status_mut() = self.status;
        *response.version_mut() = self.version;
        *response.headers_mut() = self.headers;
        response
    }
}
