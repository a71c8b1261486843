//! [`Client`] and its [`ClientBuilder`].

use std::time::Duration;

use http::{HeaderName, Method};
use reqwest::IntoUrl;

use crate::{RequestBuilder, policy::RetryPolicy};

/// An HTTP client that sends each logical operation under one idempotency key, and retries it
/// with that same key until it gets a definite answer.
///
/// Cloning is cheap: clones share the connection pool of the underlying [`reqwest::Client`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let client = idem_client::Client::builder()
///     .max_attempts(3)
///     .deadline(Duration::from_secs(10))
///     .build();
/// let charge = client.post("http://localhost:8080/charges").key("order-42");
/// assert_eq!(charge.key_str(), "order-42");
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    policy: RetryPolicy,
    key_header: HeaderName,
}

impl Client {
    /// A client with the defaults of [`ClientBuilder`].
    ///
    /// # Panics
    ///
    /// As [`reqwest::Client::new`]: when the TLS backend cannot be initialized.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Settings for a client, starting from the defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A `POST` to `url`: a new operation, with a fresh key.
    pub fn post(&self, url: impl IntoUrl) -> RequestBuilder {
        self.request(Method::POST, url)
    }

    /// A `PATCH` to `url`: a new operation, with a fresh key.
    pub fn patch(&self, url: impl IntoUrl) -> RequestBuilder {
        self.request(Method::PATCH, url)
    }

    /// A `method` request to `url`: a new operation, with a fresh key. An invalid URL is
    /// reported by [`send`](RequestBuilder::send), as [`Error::Build`](crate::Error::Build).
    pub fn request(&self, method: Method, url: impl IntoUrl) -> RequestBuilder {
        RequestBuilder::new(
            self.http.clone(),
            self.policy,
            self.key_header.clone(),
            self.http.request(method, url),
        )
    }
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

/// The settings of a [`Client`].
///
/// | setting | default |
/// | --- | --- |
/// | [`http`](Self::http) | a [`reqwest::Client`] that does not follow redirects |
/// | [`key_header`](Self::key_header) | `Idempotency-Key` |
/// | [`max_attempts`](Self::max_attempts) | 5 |
/// | [`deadline`](Self::deadline) | 30 s |
/// | [`attempt_timeout`](Self::attempt_timeout) | 10 s |
/// | [`initial_backoff`](Self::initial_backoff) | 100 ms |
/// | [`max_backoff`](Self::max_backoff) | 5 s |
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    http: Option<reqwest::Client>,
    key_header: HeaderName,
    policy: RetryPolicy,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            http: None,
            key_header: HeaderName::from_bytes(idem_core::KEY_HEADER.as_bytes())
                .expect("a valid header name"),
            policy: RetryPolicy::default(),
        }
    }
}

impl ClientBuilder {
    /// The client that sends the attempts, with its own settings (proxy, TLS, connection
    /// pool, connect and read timeouts). Its total `timeout` is replaced by each attempt's.
    ///
    /// The default does not follow redirects: a `3xx` is the operation's answer — the idem
    /// server stores and replays it — and following it would send the key elsewhere.
    pub fn http(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// The header that carries the key (default `Idempotency-Key`).
    pub fn key_header(mut self, key_header: HeaderName) -> Self {
        self.key_header = key_header;
        self
    }

    /// How many attempts an operation gets at most, the first one included (default 5; `0`
    /// counts as `1`).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.policy.max_attempts = max_attempts.max(1);
        self
    }

    /// How long an operation may take, all its attempts and the waits between them included
    /// (default 30 s). The first attempt is always sent.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.policy.deadline = deadline;
        self
    }

    /// How long one attempt may take, from connecting to the end of the response body
    /// (default 10 s); less when the deadline is nearer.
    pub fn attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.policy.attempt_timeout = attempt_timeout;
        self
    }

    /// The bound of the first backoff (default 100 ms); it doubles with each failed attempt.
    pub fn initial_backoff(mut self, initial_backoff: Duration) -> Self {
        self.policy.initial_backoff = initial_backoff;
        self
    }

    /// The largest bound of a backoff (default 5 s). A `Retry-After` may ask for longer.
    pub fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.policy.max_backoff = max_backoff;
        self
    }

    /// The client.
    ///
    /// # Panics
    ///
    /// Without [`http`](Self::http), as [`reqwest::Client::new`]: when the TLS backend cannot
    /// be initialized.
    pub fn build(self) -> Client {
        Client {
            http: self.http.unwrap_or_else(default_http),
            policy: self.policy,
            key_header: self.key_header,
        }
    }
}

/// reqwest's defaults, but redirects are answers.
fn default_http() -> reqwest::Client {
    #[cfg(feature = "rustls")]
    crate::tls::install_ring_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("the TLS backend and the resolver initialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let client = Client::new();
        assert_eq!(client.key_header, "idempotency-key");
        assert_eq!(
            client.policy,
            RetryPolicy {
                max_attempts: 5,
                deadline: Duration::from_secs(30),
                attempt_timeout: Duration::from_secs(10),
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
            }
        );
    }

    #[test]
    fn every_setting_is_kept() {
        let client = Client::builder()
            .key_header(HeaderName::from_static("x-request-key"))
            .max_attempts(7)
            .deadline(Duration::from_secs(60))
            .attempt_timeout(Duration::from_secs(2))
            .initial_backoff(Duration::from_millis(10))
            .max_backoff(Duration::from_secs(1))
            .build();
        assert_eq!(client.key_header, "x-request-key");
        assert_eq!(
            client.policy,
            RetryPolicy {
                max_attempts: 7,
                deadline: Duration::from_secs(60),
                attempt_timeout: Duration::from_secs(2),
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_secs(1),
            }
        );
    }

    #[test]
    fn zero_attempts_count_as_one() {
        assert_eq!(
            Client::builder()
                .max_attempts(0)
                .build()
                .policy
                .max_attempts,
            1
        );
    }
}
