//! [`Proxy`]: forwards requests to the upstream like a well-behaved reverse proxy.
//!
//! The request URI is rewritten to the upstream's authority with the path and query kept;
//! hop-by-hop headers are removed both ways; `X-Forwarded-For` gets the client's address
//! appended ([`Proxy::for_client`]), `X-Forwarded-Proto` and `X-Forwarded-Host` are set, and `Host` becomes the
//! upstream's authority. Connections are pooled (`pool`); HTTP/1.1, or h2c with prior
//! knowledge.

mod body;
mod pool;
mod upstream;

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::body::Body;
use bytes::Bytes;
use http::{
    HeaderMap, HeaderName, HeaderValue, Request, Response, Version,
    header::{Entry, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE},
};
use http_body_util::{Either, Full};
use idem_http::{Delivery, hop_by_hop};
use metrics::Histogram;
use tokio::time::Instant;

use self::pool::Pool;
pub use self::{body::UpstreamBody, upstream::Upstream};
use crate::{
    error::{
        UpstreamError as Error,
        problem::{Problem, UpstreamRejection},
    },
    telemetry,
};

/// Default of `--upstream-max-idle`: connections to the upstream kept open for the next request.
pub const DEFAULT_UPSTREAM_MAX_IDLE: usize = 1024;
/// Default of `--upstream-idle-timeout`.
pub const DEFAULT_UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The histogram of upstream latencies: from forwarding a request to its response head.
pub(crate) const UPSTREAM_DURATION: &str = "idem_upstream_duration_seconds";

/// The histogram of the time from a request's arrival to its response head, whatever answered
/// it (the upstream, a replay, a problem).
pub(crate) const REQUEST_DURATION: &str = "idem_request_duration_seconds";

/// The histogram of the gateway's own share of [`REQUEST_DURATION`]: the whole minus the time
/// waiting on the upstream's response head, so the cost of idempotency itself (store calls,
/// waiting on a key, fingerprints), without the upstream's.
pub(crate) const REQUEST_OWN_DURATION: &str = "idem_request_own_duration_seconds";

/// How long the upstream took to answer a forwarded request's head: in the response's
/// extensions, for [`RequestTiming`].
#[derive(Debug, Clone, Copy)]
struct UpstreamElapsed(Duration);

/// The two request histograms, registered once and shared by every connection.
#[derive(Debug, Clone)]
pub(crate) struct RequestTiming {
    whole: Histogram,
    own: Histogram,
}

impl RequestTiming {
    pub(crate) fn register() -> Self {
        Self {
            whole: metrics::histogram!(REQUEST_DURATION),
            own: metrics::histogram!(REQUEST_OWN_DURATION),
        }
    }

    /// Records a request answered with `response` after `elapsed`.
    pub(crate) fn record<B>(&self, elapsed: Duration, response: &Response<B>) {
        let upstream = response
            .extensions()
            .get::<UpstreamElapsed>()
            .map_or(Duration::ZERO, |upstream| upstream.0);
        self.whole.record(elapsed.as_secs_f64());
        self.own
            .record(elapsed.saturating_sub(upstream).as_secs_f64());
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// A `tower::Service` that forwards each request to the upstream and returns its response.
///
/// It never fails: a forward that ends without a response is answered by the proxy itself, a
/// `502` or `504` problem+json marked with the [`Delivery`] that tells the idempotency layer
/// whether the request may have reached the upstream:
/// [`Error::UpstreamConnect`] is not sent, [`Error::Upstream`] and [`Error::UpstreamTimeout`]
/// maybe sent.
///
/// Clones share the connections to the upstream. [`Proxy::for_client`] makes the proxy of one
/// client connection, which names the client in `X-Forwarded-For`.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::time::Duration;
/// use idem_gateway::proxy::Proxy;
///
/// let proxy = Proxy::new(
///     "http://127.0.0.1:3000".parse()?,
///     false,
///     Duration::from_secs(5),
///     Duration::from_secs(60),
/// );
/// let for_one_client = proxy.for_client("192.0.2.1:5555".parse()?);
/// # drop(for_one_client);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
    /// The client's address as `X-Forwarded-For` names it, rendered once per connection.
    client: Option<HeaderValue>,
}

struct Shared {
    pool: Pool,
    upstream: Upstream,
    /// The upstream's authority as a `Host` value, made once.
    host: HeaderValue,
    h2c: bool,
    timeout: Duration,
    /// [`UPSTREAM_DURATION`], registered once in the recorder installed when the proxy is made.
    latency: Histogram,
}

impl Proxy {
    /// A proxy to `upstream`, over HTTP/1.1 or (with `h2c`) HTTP/2 with prior knowledge, giving
    /// up on connecting after `connect_timeout`, and on the whole exchange (the response head,
    /// then its body) after `timeout`: a body still streaming then ends in
    /// [`Error::UpstreamTimeout`]. Up to [`DEFAULT_UPSTREAM_MAX_IDLE`] connections wait idle
    /// for the next request, each for at most [`DEFAULT_UPSTREAM_IDLE_TIMEOUT`] (see
    /// [`Proxy::idle_connections`]).
    pub fn new(
        upstream: Upstream,
        h2c: bool,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Self {
        let pool = Pool::new(
            upstream.clone(),
            h2c,
            connect_timeout,
            DEFAULT_UPSTREAM_MAX_IDLE,
            DEFAULT_UPSTREAM_IDLE_TIMEOUT,
        );
        Self::with_pool(upstream, h2c, timeout, pool)
    }

    fn with_pool(upstream: Upstream, h2c: bool, timeout: Duration, pool: Pool) -> Self {
        let host = HeaderValue::from_str(upstream.authority().as_str())
            .expect("an authority is a valid header value");
        Self {
            shared: Arc::new(Shared {
                pool,
                upstream,
                host,
                h2c,
                timeout,
                latency: metrics::histogram!(UPSTREAM_DURATION),
            }),
            client: None,
        }
    }

    /// Keeps at most `max` HTTP/1.1 connections to the upstream idle, each for at most
    /// `timeout`; a connection released beyond them, or idle for longer, is closed.
    #[must_use]
    pub fn idle_connections(self, max: usize, timeout: Duration) -> Self {
        let shared = &self.shared;
        let pool = shared.pool.clone().idle_limits(max, timeout);
        Self::with_pool(shared.upstream.clone(), shared.h2c, shared.timeout, pool)
    }

    /// The proxy of one client connection: its requests get `client`'s address appended to
    /// `X-Forwarded-For`. It shares the connections to the upstream.
    #[must_use]
    pub fn for_client(&self, client: SocketAddr) -> Self {
        let ip = HeaderValue::from_str(&client.ip().to_string())
            .expect("an IP address is a valid header value");
        Self {
            shared: Arc::clone(&self.shared),
            client: Some(ip),
        }
    }

    /// Rewrites a client's request for the upstream.
    fn upstream_request(&self, request: Request<Body>) -> Request<Body> {
        let shared = &*self.shared;
        let (mut parts, body) = request.into_parts();
        let headers = &mut parts.headers;
        // Taken before the hop-by-hop headers go: a `Connection` header may name it.
        let client_host = headers.remove(HOST).or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        remove_hop_by_hop(headers, true);

        if let Some(client) = &self.client {
            match headers.entry(&X_FORWARDED_FOR) {
                Entry::Vacant(entry) => {
                    entry.insert(client.clone());
                }
                Entry::Occupied(mut entry) => {
                    let mut value = Vec::new();
                    for prior in entry.iter() {
                        value.extend_from_slice(prior.as_bytes());
                        value.extend_from_slice(b", ");
                    }
                    value.extend_from_slice(client.as_bytes());
                    if let Ok(value) = HeaderValue::from_bytes(&value) {
                        entry.insert(value);
                    }
                }
            }
        }
        headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        // The upstream continues the trace from the span it is called in (the layer's
        // `idem.execute`, or the request's own span when it passes through).
        telemetry::inject(headers);
        match client_host {
            Some(host) => headers.insert(&X_FORWARDED_HOST, host),
            None => headers.remove(&X_FORWARDED_HOST),
        };

        if shared.h2c {
            // HTTP/2 carries the authority in the URI (`:authority`), not in `Host`.
            parts.uri = shared.upstream.uri_for(parts.uri.path_and_query());
            parts.version = Version::HTTP_2;
        } else {
            // HTTP/1.1 sends the path and query alone (origin form), the authority in `Host`.
            parts.uri = shared.upstream.origin_form(parts.uri.path_and_query());
            parts.version = Version::HTTP_11;
            headers.insert(HOST, shared.host.clone());
        }
        Request::from_parts(parts, body)
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = &*self.shared;
        f.debug_struct("Proxy")
            .field("upstream", &shared.upstream)
            .field("h2c", &shared.h2c)
            .field("timeout", &shared.timeout)
            .field("pool", &shared.pool)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// The body of a [`Proxy`] response: the upstream's, or the proxy's own problem when the
/// upstream gave no response.
pub type ProxyBody = Either<UpstreamBody, Full<Bytes>>;

impl tower::Service<Request<Body>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let request = self.upstream_request(request);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let timeout = shared.timeout;
            let start = Instant::now();
            let deadline = start + timeout;
            let result = tokio::time::timeout_at(deadline, shared.pool.send(request)).await;
            let elapsed = start.elapsed();
            shared.latency.record(elapsed.as_secs_f64());
            let sent = result.unwrap_or_else(|_| Err(Error::UpstreamTimeout(timeout)));
            let (mut response, connection) = match sent {
                Ok(sent) => sent,
                Err(error) => {
                    // The request's line, when request lines are logged, names its method and
                    // path: copying them for this warning would cost every request.
                    tracing::warn!(
                        upstream = %shared.upstream,
                        error = &error as &(dyn std::error::Error + 'static),
                        "forwarding failed"
                    );
                    return Ok(failure_response(&error));
                }
            };
            remove_hop_by_hop(response.headers_mut(), false);
            response.extensions_mut().insert(UpstreamElapsed(elapsed));
            Ok(response
                .map(|body| Either::Left(UpstreamBody::new(body, connection, deadline, timeout))))
        })
    }
}

/// The proxy's answer to a request whose forward failed without a response: `504`
/// problem+json when the upstream did not answer in time, `502` otherwise; marked with the
/// [`Delivery`] of the failure (only a failure to connect is sure not to have reached the
/// upstream), which the idempotency layer reads.
pub(crate) fn failure_response(error: &Error) -> Response<ProxyBody> {
    let (rejection, delivery) = match error {
        Error::UpstreamTimeout(timeout) => {
            (UpstreamRejection::Timeout(*timeout), Delivery::MaybeSent)
        }
        Error::UpstreamConnect(_) => (UpstreamRejection::Unreachable, Delivery::NotSent),
        _ => (UpstreamRejection::Failed, Delivery::MaybeSent),
    };
    let mut response = rejection.to_response::<Full<Bytes>>().map(Either::Right);
    response.extensions_mut().insert(delivery);
    response
}

/// Removes the hop-by-hop headers of a client's request as it arrives, as the proxy would (`Host`
/// stays, whatever `Connection` lists: the proxy reads it for `X-Forwarded-Host`).
pub(crate) fn remove_hop_by_hop_at_ingress(headers: &mut HeaderMap) {
    if !has_hop_by_hop(headers) {
        return;
    }
    let host = headers.remove(HOST);
    remove_hop_by_hop(headers, true);
    if let Some(host) = host {
        headers.insert(HOST, host);
    }
}

/// Whether `headers` hold anything [`remove_hop_by_hop`] removes. Most messages have none: one
/// pass over the names finds that.
fn has_hop_by_hop(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| {
        hop_by_hop::is_fixed(name) || name == PROXY_AUTHENTICATE || name == PROXY_AUTHORIZATION
    })
}

/// Removes the headers that concern one connection only ([`hop_by_hop`]), and the proxy
/// authentication ones, which concern the next hop only. A request keeps `TE: trailers` (gRPC
/// needs it; it is the only value HTTP/2 allows).
fn remove_hop_by_hop(headers: &mut HeaderMap, request: bool) {
    if !has_hop_by_hop(headers) {
        return;
    }
    let keeps_trailers = request
        && headers
            .get_all(TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    hop_by_hop::remove(headers);
    headers.remove(PROXY_AUTHENTICATE);
    headers.remove(PROXY_AUTHORIZATION);
    if keeps_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

#[cfg(test)]
mod tests {
    use http::header::{CONNECTION, TRANSFER_ENCODING};

    use super::*;

    fn proxy(h2c: bool) -> Proxy {
        Proxy::new(
            "http://10.0.0.7:3000".parse().unwrap(),
            h2c,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
    }

    fn request() -> Request<Body> {
        Request::post("/v1/charges?expand=x")
            .header(HOST, "api.example.com")
            .header(CONNECTION, "keep-alive, x-hop")
            .header("x-hop", "1")
            .header("keep-alive", "timeout=5")
            .header(TE, "trailers")
            .header(&X_FORWARDED_FOR, "203.0.113.9")
            .header(&X_FORWARDED_HOST, "spoofed")
            .header("idempotency-key", "k1")
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn rewrites_the_request_for_an_http1_upstream() {
        let client = "192.0.2.1:5555".parse().unwrap();
        let forwarded = proxy(false).for_client(client).upstream_request(request());
        assert_eq!(forwarded.uri(), "/v1/charges?expand=x");
        assert_eq!(forwarded.version(), Version::HTTP_11);
        let headers = forwarded.headers();
        assert_eq!(headers[HOST], "10.0.0.7:3000");
        assert_eq!(headers[&X_FORWARDED_FOR], "203.0.113.9, 192.0.2.1");
        assert_eq!(headers[&X_FORWARDED_PROTO], "http");
        assert_eq!(headers[&X_FORWARDED_HOST], "api.example.com");
        assert_eq!(headers[TE], "trailers");
        assert_eq!(headers["idempotency-key"], "k1");
        for gone in ["connection", "x-hop", "keep-alive"] {
            assert!(!headers.contains_key(gone), "{gone}");
        }
    }

    #[tokio::test]
    async fn a_request_without_forwarding_headers_gets_them() {
        let request = Request::post("/v1/charges")
            .header(HOST, "api.example.com")
            .header("content-type", "application/json")
            .body(Body::empty())
            .unwrap();
        let client = "[2001:db8::7]:4444".parse().unwrap();
        let forwarded = proxy(false).for_client(client).upstream_request(request);
        let headers = forwarded.headers();
        assert_eq!(headers[HOST], "10.0.0.7:3000");
        assert_eq!(headers[&X_FORWARDED_FOR], "2001:db8::7");
        assert_eq!(headers[&X_FORWARDED_PROTO], "http");
        assert_eq!(headers[&X_FORWARDED_HOST], "api.example.com");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers.len(), 5);
        // Without a client (an in-process proxy), `X-Forwarded-For` is left as it came.
        let anonymous = proxy(false).upstream_request(Request::new(Body::empty()));
        assert!(!anonymous.headers().contains_key(&X_FORWARDED_FOR));
        assert_eq!(anonymous.uri(), "/");
    }

    #[tokio::test]
    async fn h2c_carries_the_authority_in_the_uri() {
        let forwarded = proxy(true).upstream_request(request());
        assert_eq!(forwarded.version(), Version::HTTP_2);
        assert_eq!(forwarded.uri(), "http://10.0.0.7:3000/v1/charges?expand=x");
        assert!(!forwarded.headers().contains_key(HOST));
    }

    #[test]
    fn response_hop_by_hop_headers_are_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        headers.insert(CONNECTION, HeaderValue::from_static("x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert(PROXY_AUTHENTICATE, HeaderValue::from_static("Basic"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        remove_hop_by_hop(&mut headers, false);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers["content-type"], "text/plain");
    }
}
