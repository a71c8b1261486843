//! An admin listener, served until its process stops: `idem serve`'s and `idem relay`'s.
//!
//! It is bounded as the client listener is, with bounds of its own ([`AdminBounds`]): at most
//! 64 connections at once (idle ones are closed for a new one when they are all taken), 10 s to
//! send a request's head and as long idle between requests, and 30 s for a request's answer,
//! after which it is a `503` problem ([`AdminRejection::Timeout`]).

use std::{convert::Infallible, future::Future, time::Duration};

use axum::{Router, body::Body, response::IntoResponse};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, task::JoinHandle};
use tower::ServiceExt;

use super::connections::{Activity, Connections};
use crate::error::problem::AdminRejection;

/// How long the connections of a stopping admin listener have to finish their requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The bounds of an admin listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AdminBounds {
    /// The most connections at once.
    pub(crate) max_connections: usize,
    /// How long a connection may take to send a request's head, and stay idle between requests.
    pub(crate) idle_timeout: Duration,
    /// How long a request may take to be answered.
    pub(crate) request_timeout: Duration,
}

impl Default for AdminBounds {
    fn default() -> Self {
        Self {
            max_connections: 64,
            idle_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `router` on `listener` in a task of its own, within `bounds`, until `shutdown`
/// completes; then stops accepting and gives the open connections a few seconds to finish.
pub(crate) fn spawn(
    listener: TcpListener,
    router: Router,
    bounds: AdminBounds,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(serve(listener, router, bounds, shutdown))
}

async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: AdminBounds,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Connections::new(bounds.max_connections, bounds.idle_timeout);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.idle_timeout);
    builder.http2().timer(TokioTimer::new());
    let mut shutdown = std::pin::pin!(shutdown);
    while let Some((stream, peer, slot)) = connections.accept(&listener, shutdown.as_mut()).await {
        let activity = Activity::new();
        let requests = std::sync::Arc::clone(&activity);
        let router = router.clone();
        let per_request = hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = requests.track();
            let answered = answer(
                router.clone(),
                request.map(Body::new),
                bounds.request_timeout,
            );
            async move { Ok::<_, Infallible>(busy.response(answered.await)) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), per_request)
            .into_owned();
        connections.spawn(connection, activity, slot, peer);
    }
    drop(listener);
    connections.shutdown(SHUTDOWN_GRACE).await;
}

/// `router`'s answer to `request`, or a `503` problem once `timeout` has passed.
async fn answer(router: Router, request: Request<Body>, timeout: Duration) -> Response<Body> {
    match tokio::time::timeout(timeout, router.oneshot(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(infallible)) => match infallible {},
        Err(_elapsed) => AdminRejection::Timeout.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::routing::get;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
        sync::Notify,
    };
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A listener serving `router` within `bounds`, and what stops it.
    async fn start(
        router: Router,
        bounds: AdminBounds,
    ) -> (std::net::SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        spawn(listener, router, bounds, stop.clone().cancelled_owned());
        (addr, stop)
    }

    /// Sends `GET path` on `stream` and reads the answer's status line.
    async fn status_of(stream: &mut TcpStream, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = vec![0; 1024];
        let read = stream.read(&mut head).await.unwrap();
        String::from_utf8_lossy(&head[..read])
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    #[tokio::test]
    async fn a_request_head_that_does_not_come_in_time_closes_the_connection() {
        let bounds = AdminBounds {
            idle_timeout: Duration::from_millis(200),
            ..AdminBounds::default()
        };
        let (addr, _stop) = start(Router::new().route("/", get(|| async { "ok" })), bounds).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: loc")
            .await
            .unwrap();
        let mut rest = Vec::new();
        // The server gives up on the head: the connection ends (with a 408, or without a word).
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
            .await
            .expect("the connection is closed within the idle timeout")
            .unwrap();
        assert!(
            rest.is_empty() || rest.starts_with(b"HTTP/1.1 408"),
            "{rest:?}"
        );
    }

    #[tokio::test]
    async fn a_request_that_takes_too_long_is_a_503_problem() {
        let bounds = AdminBounds {
            request_timeout: Duration::from_millis(100),
            ..AdminBounds::default()
        };
        let slow = Router::new().route("/slow", get(std::future::pending::<&str>));
        let (addr, _stop) = start(slow, bounds).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            status_of(&mut stream, "/slow").await,
            "HTTP/1.1 503 Service Unavailable"
        );
    }

    #[tokio::test]
    async fn beyond_the_connection_limit_a_connection_waits_for_a_busy_one_to_end() {
        let release = Arc::new(Notify::new());
        let router = Router::new()
            .route(
                "/hold",
                get({
                    let release = Arc::clone(&release);
                    move || async move {
                        release.notified().await;
                        "released"
                    }
                }),
            )
            .route("/", get(|| async { "ok" }));
        let bounds = AdminBounds {
            max_connections: 1,
            ..AdminBounds::default()
        };
        let (addr, _stop) = start(router, bounds).await;
        let mut first = TcpStream::connect(addr).await.unwrap();
        first
            .write_all(b"GET /hold HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The second connection is not served while the first holds the only slot.
        let second = tokio::spawn(async move {
            let mut second = TcpStream::connect(addr).await.unwrap();
            status_of(&mut second, "/").await
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!second.is_finished());
        release.notify_one();
        drop(first);
        assert_eq!(second.await.unwrap(), "HTTP/1.1 200 OK");
    }
}
