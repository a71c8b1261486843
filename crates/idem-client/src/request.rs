//! [`RequestBuilder`]: one logical operation, its key and its bytes.

use std::fmt;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, header::CONTENT_TYPE};
use serde::Serialize;

use crate::{Error, Response, key, policy::RetryPolicy, retry};

/// One logical operation: a request and the key every attempt at it carries.
///
/// Made by [`Client::post`](crate::Client::post), [`Client::patch`](crate::Client::patch) or
/// [`Client::request`](crate::Client::request) with a fresh key (a random UUID), or with the
/// caller's own through [`key`](Self::key). The body is held in memory, so every attempt sends
/// the same bytes.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), idem_client::Error> {
/// let client = idem_client::Client::new();
/// let charge = client
///     .post("http://localhost:8080/charges")
///     .header("authorization", "Bearer sk_test_alice")
///     .json(&serde_json::json!({ "amount": 1000, "currency": "eur" }));
/// // Log the key before sending: it finds the operation in the server's records.
/// println!("charging under key {}", charge.key_str());
/// let response = charge.send().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a request does nothing until it is sent"]
pub struct RequestBuilder {
    http: reqwest::Client,
    policy: RetryPolicy,
    key_header: HeaderName,
    inner: reqwest::RequestBuilder,
    key: String,
    /// The body's `Content-Type`, unless a header sets one.
    content_type: Option<HeaderValue>,
    json_error: Option<serde_json::Error>,
}

impl RequestBuilder {
    /// A request of `http`'s, sent under `policy` with its key in `key_header`.
    pub(crate) fn new(
        http: reqwest::Client,
        policy: RetryPolicy,
        key_header: HeaderName,
        inner: reqwest::RequestBuilder,
    ) -> Self {
        Self {
            http,
            policy,
            key_header,
            inner,
            key: key::generate(),
            content_type: None,
            json_error: None,
        }
    }

    /// Sends the operation under `key` instead of a fresh one: to resume an operation whose
    /// answer was never received (after [`Error::GaveUp`], or a crash), or to derive the key
    /// from the operation itself (`order-42`).
    ///
    /// `key` is the key, not a header value: 1 to 255 printable ASCII characters, quoted on
    /// the wire when it holds a space, `"`, `,` or `;`. It is checked by
    /// [`send`](Self::send), which fails with [`Error::InvalidKey`].
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// The key of this operation, to log before sending it.
    pub fn key_str(&self) -> &str {
        &self.key
    }

    /// Adds a header. The key header is the client's: a value set here is replaced by the
    /// operation's key. An invalid name or value fails [`send`](Self::send) with
    /// [`Error::Build`].
    pub fn header<K, V>(mut self, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.inner = self.inner.header(name, value);
        self
    }

    /// Adds headers, replacing any already set under the same names.
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        self.inner = self.inner.headers(headers);
        self
    }

    /// Sets the body to `value` in JSON, serialized once, and `Content-Type: application/json`
    /// unless a header sets another. A value that cannot be serialized fails
    /// [`send`](Self::send) with [`Error::Json`].
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                self.inner = self.inner.body(body);
                self.content_type = Some(HeaderValue::from_static("application/json"));
                self.json_error = None;
            }
            Err(error) => self.json_error = Some(error),
        }
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.inner = self.inner.body(body.into());
        self.content_type = None;
        self.json_error = None;
        self
    }

    /// Sends the operation, and again with the same key while the answer may be transient,
    /// until a definite answer, the last attempt or the deadline.
    ///
    /// `Ok` is a definite answer: a `2xx` or `3xx`, a `4xx` other than `408`, `409` and `429`,
    /// a `5xx` other than `502`, `503` and `504`, or a replay of any status. The
    /// outcome-unknown and fingerprint-mismatch problems are errors of their own; the rest is
    /// retried. See the crate documentation.
    pub async fn send(self) -> Result<Response, Error> {
        let Self {
            http,
            policy,
            key_header,
            inner,
            key,
            content_type,
            json_error,
        } = self;
        if let Some(error) = json_error {
            return Err(Error::Json(error));
        }
        let (key, key_value) = key::encode(&key).map_err(Error::InvalidKey)?;
        let mut request = inner.build().map_err(Error::Build)?;
        let headers = request.headers_mut();
        if let Some(content_type) = content_type {
            headers.entry(CONTENT_TYPE).or_insert(content_type);
        }
        headers.insert(key_header, key_value);
        retry::send(&http, policy, request, key).await
    }
}

impl fmt::Debug for RequestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the key: caller-supplied keys may carry customer data.
        f.debug_struct("RequestBuilder")
            .field("request", &self.inner)
            .finish_non_exhaustive()
    }
}
