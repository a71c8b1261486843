//! The accept loop: client connections taken up to the limit, each served over HTTP/1.1 or
//! HTTP/2, every request answered through the gateway's service and logged.

use std::{convert::Infallible, future::Future, sync::Arc, time::Duration};

use axum::body::Body;
use http::{HeaderName, Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use idem_http::Idempotency;
use tokio::net::TcpListener;
use tower::{Service, ServiceExt};
use tracing::{Instrument as _, Span};

use super::{
    connections::{Activity, Connections},
    logging::RequestLine,
};
use crate::{
    proxy::{self, Proxy, RequestTiming},
    store::GatewayStore,
    telemetry,
};

/// The most requests at once on one HTTP/2 client connection.
const MAX_CONCURRENT_STREAMS: u32 = 256;
/// How often an HTTP/2 client connection is pinged, and how long its answer may take before the
/// connection is taken for dead and closed.
const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(20);
/// The read buffer of an HTTP/1.1 client connection, which bounds its request head too (a
/// longer head gets `431`). hyper's default (about 400 KiB) lets the buffer grow to a MiB while
/// a large body streams through it, and keep that size as long as the connection lives.
const HTTP1_READ_BUFFER: usize = 64 * 1024;

/// Accepts client connections on `listener` and serves them with `service` until `shutdown`
/// completes; then the listener is closed (the connections stay, in `connections`).
///
/// `key_header` names the key in the log line of a request that got no response; `idle_timeout`
/// bounds the wait for a request's head.
pub(super) async fn until_shutdown(
    listener: TcpListener,
    connections: &Connections,
    service: Idempotency<Proxy, GatewayStore>,
    key_header: HeaderName,
    idle_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A timer makes hyper's header read timeout (slow clients, and idle HTTP/1 keep-alive
    // connections: the next request's head is awaited as one) and HTTP/2 keep-alive work.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout)
        .max_buf_size(HTTP1_READ_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .keep_alive_interval(HTTP2_KEEP_ALIVE)
        .keep_alive_timeout(HTTP2_KEEP_ALIVE);
    let mut shutdown = std::pin::pin!(shutdown);
    let timing = RequestTiming::register();
    while let Some((stream, peer, slot)) = connections.accept(&listener, shutdown.as_mut()).await {
        // Responses are written whole; waiting to fill a segment only adds latency.
        let _ = stream.set_nodelay(true);
        // The proxy of this connection names its client in `X-Forwarded-For`.
        let mut service = service.clone();
        *service.get_mut() = service.get_ref().for_client(peer);
        let key_header = key_header.clone();
        let activity = Activity::new();
        let requests = Arc::clone(&activity);
        let timing = timing.clone();
        let per_request = hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = requests.track();
            let mut request = request.map(Body::new);
            // What concerns the client's connection only goes before the layer sees the
            // request, so that a `Connection` header cannot name away a header the layer sets
            // (the fencing token) or reads (the scope's): the layer and the upstream see the
            // same request.
            proxy::remove_hop_by_hop_at_ingress(request.headers_mut());
            let line = RequestLine::begin(&request, &key_header);
            let span = telemetry::is_on().then(|| telemetry::server_span(&request));
            let answered = answer(service.clone(), request, line, timing.clone(), span);
            async move { Ok::<_, Infallible>(busy.response(answered.await?)) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), per_request)
            .into_owned();
        connections.spawn(connection, activity, slot, peer);
    }
}

/// Answers one request, in its server `span` when traces are exported, then records its time to
/// the response head in `timing`, and writes its log `line` if request lines are logged.
async fn answer<S, B>(
    service: S,
    request: Request<Body>,
    line: Option<RequestLine>,
    timing: RequestTiming,
    span: Option<Span>,
) -> Result<Response<Body>, Infallible>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let start = tokio::time::Instant::now();
    let Ok(response) = match &span {
        None => service.oneshot(request).await,
        Some(span) => service.oneshot(request).instrument(span.clone()).await,
    };
    if let Some(span) = &span {
        telemetry::record_response(span, &response);
    }
    let response = response.map(Body::new);
    timing.record(start.elapsed(), &response);
    if let Some(line) = line {
        line.log(&response);
    }
    Ok(response)
}
