//! [`Proxy`]: forwards requests to the upstream like a well-behaved reverse proxy.
//!
//! The request URI is rewritten to the upstream's authority with the path and query kept;
//! hop-by-hop headers are removed both ways; `X-Forwarded-For` gets the client's address
//! appended, `X-Forwarded-Proto` and `X-Forwarded-Host` are set, and `Host` becomes the
//! upstream's authority. Connections are pooled; HTTP/1.1, or h2c with prior knowledge.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::body::Body;
use http::{
    HeaderMap, HeaderName, HeaderValue, Request, Response, Version,
    header::{HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE},
};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
};
use idem_http::{Delivery, hop_by_hop};
use metrics::Histogram;
use tokio::time::Instant;

use crate::{
    Upstream,
    deadline::DeadlineBody,
    error::UpstreamError as Error,
    problem::{Problem, UpstreamRejection},
};

/// The histogram of upstream latencies: from forwarding a request to its response head.
pub const UPSTREAM_DURATION: &str = "idem_upstream_duration_seconds";

/// The client's address, set by the server on every request it receives (for
/// `X-Forwarded-For`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// A `tower::Service` that forwards each request to the upstream and returns its response.
///
/// Its errors are [`Error::UpstreamConnect`] (nothing was sent), [`Error::Upstream`] and
/// [`Error::UpstreamTimeout`] (the request may have been sent); [`delivery`] tells them apart
/// for the idempotency layer, and [`error_response`] turns them into 502 or 504 problems.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::time::Duration;
/// use idem_gateway::Proxy;
///
/// let proxy = Proxy::new(
///     "http://127.0.0.1:3000".parse()?,
///     false,
///     Duration::from_secs(5),
///     Duration::from_secs(60),
/// );
/// # drop(proxy);
/// # Ok::<(), idem_gateway::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Proxy {
    client: Client<HttpConnector, Body>,
    upstream: Upstream,
    h2c: bool,
    timeout: Duration,
    /// [`UPSTREAM_DURATION`], registered once in the recorder installed when the proxy is made.
    latency: Histogram,
}

impl Proxy {
    /// A proxy to `upstream`, over HTTP/1.1 or (with `h2c`) HTTP/2 with prior knowledge, giving
    /// up on connecting after `connect_timeout`, and on the whole exchange (the response head,
    /// then its body) after `timeout`: a body still streaming then ends in
    /// [`Error::UpstreamTimeout`].
    pub fn new(
        upstream: Upstream,
        h2c: bool,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(h2c)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        Self {
            client,
            upstream,
            h2c,
            timeout,
            latency: metrics::histogram!(UPSTREAM_DURATION),
        }
    }

    /// Rewrites a client's request for the upstream.
    fn upstream_request(&self, request: Request<Body>) -> Request<Body> {
        let (mut parts, body) = request.into_parts();
        let original_host = parts.headers.get(HOST).cloned().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        let headers = &mut parts.headers;
        remove_hop_by_hop(headers, true);

        if let Some(ClientAddr(client)) = parts.extensions.get::<ClientAddr>() {
            let prior: Vec<&[u8]> = headers
                .get_all(&X_FORWARDED_FOR)
                .iter()
                .map(HeaderValue::as_bytes)
                .collect();
            let ip = client.ip().to_string();
            let value = if prior.is_empty() {
                ip.into_bytes()
            } else {
                [prior.join(&b", "[..]), ip.into_bytes()].join(&b", "[..])
            };
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.insert(&X_FORWARDED_FOR, value);
            }
        }
        headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        match original_host {
            Some(host) => headers.insert(&X_FORWARDED_HOST, host),
            None => headers.remove(&X_FORWARDED_HOST),
        };

        parts.uri = self.upstream.uri_for(parts.uri.path_and_query());
        if self.h2c {
            // HTTP/2 carries the authority in the URI (`:authority`), not in `Host`.
            parts.version = Version::HTTP_2;
            headers.remove(HOST);
        } else {
            parts.version = Version::HTTP_11;
            let authority = HeaderValue::from_str(self.upstream.authority().as_str())
                .expect("an authority is a valid header value");
            headers.insert(HOST, authority);
        }
        Request::from_parts(parts, body)
    }
}

impl tower::Service<Request<Body>> for Proxy {
    type Response = Response<Body>;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let request = self.upstream_request(request);
        let client = self.client.clone();
        let timeout = self.timeout;
        let latency = self.latency.clone();
        Box::pin(async move {
            let start = Instant::now();
            let deadline = start + timeout;
            let result = tokio::time::timeout_at(deadline, client.request(request)).await;
            latency.record(start.elapsed().as_secs_f64());
            let mut response = match result {
                Ok(Ok(response)) => response,
                Ok(Err(error)) if error.is_connect() => return Err(Error::UpstreamConnect(error)),
                Ok(Err(error)) => return Err(Error::Upstream(error)),
                Err(_) => return Err(Error::UpstreamTimeout(timeout)),
            };
            remove_hop_by_hop(response.headers_mut(), false);
            Ok(response.map(|body| Body::new(DeadlineBody::new(body, deadline, timeout))))
        })
    }
}

/// Whether a failed forward may have reached the upstream: only a failure to connect is sure
/// not to have. Any error that is not the proxy's is treated as possibly sent.
pub fn delivery(error: &(dyn std::error::Error + 'static)) -> Delivery {
    match error.downcast_ref::<Error>() {
        Some(Error::UpstreamConnect(_)) => Delivery::NotSent,
        _ => Delivery::MaybeSent,
    }
}

/// The answer to a request whose forward failed without a response: 504 problem+json when the
/// upstream did not answer in time, 502 otherwise.
pub fn error_response(error: &Error) -> Response<Body> {
    let rejection = match error {
        Error::UpstreamTimeout(timeout) => UpstreamRejection::Timeout(*timeout),
        Error::UpstreamConnect(_) => UpstreamRejection::Unreachable,
        _ => UpstreamRejection::Failed,
    };
    rejection.to_response()
}

/// Removes the headers that concern one connection only ([`hop_by_hop`]), and the proxy
/// authentication ones, which concern the next hop only. A request keeps `TE: trailers` (gRPC
/// needs it; it is the only value HTTP/2 allows).
fn remove_hop_by_hop(headers: &mut HeaderMap, request: bool) {
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
        let mut request = Request::post("/v1/charges?expand=x")
            .header(HOST, "api.example.com")
            .header(CONNECTION, "keep-alive, x-hop")
            .header("x-hop", "1")
            .header("keep-alive", "timeout=5")
            .header(TE, "trailers")
            .header(&X_FORWARDED_FOR, "203.0.113.9")
            .header(&X_FORWARDED_HOST, "spoofed")
            .header("idempotency-key", "k1")
            .body(Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert(ClientAddr("192.0.2.1:5555".parse().unwrap()));
        request
    }

    #[tokio::test]
    async fn rewrites_the_request_for_an_http1_upstream() {
        let forwarded = proxy(false).upstream_request(request());
        assert_eq!(forwarded.uri(), "http://10.0.0.7:3000/v1/charges?expand=x");
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
