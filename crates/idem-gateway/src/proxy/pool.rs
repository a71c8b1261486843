//! [`Pool`]: the gateway's connections to its upstream.
//!
//! An HTTP/1.1 connection carries one exchange at a time. Idle connections wait on a stack, the
//! most recently used on top (its socket is the likeliest to be open still); a request takes the
//! top one, or opens a new connection when none is idle. A connection goes back on the stack as
//! soon as its response has been read to the end, by the task that read it ([`Checkout`]): no
//! task of its own waits for that, and nothing is looked up per request. A request is sent
//! again, on the next connection, only when hyper hands it back unwritten: the idle connection
//! it took had been closed by the upstream meanwhile.
//!
//! At most [`max_idle`](Pool::new) connections wait idle (a connection released beyond them is
//! closed) and none for longer than the idle timeout: a connection is closed when it is found
//! expired on the stack, and a sweep closes the expired ones every half idle timeout. The
//! connections open at once are at most the requests in flight, which the client connection
//! limit bounds.
//!
//! With h2c every request shares one HTTP/2 connection, opened again when it has closed.

use std::{
    io,
    sync::{
        Arc, Mutex, PoisonError, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::body::Body;
use http::{Request, Response};
use hyper::{
    body::Incoming,
    client::conn::{http1, http2},
};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::{net::TcpStream, time::Instant};

use super::Upstream;
use crate::{HumanDuration, error::UpstreamError as Error};

/// The connections to one upstream. Clones share them.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    upstream: Upstream,
    connect_timeout: Duration,
    max_idle: usize,
    idle_timeout: Duration,
    /// Idle HTTP/1.1 connections, the most recently released last.
    idle: Mutex<Vec<Idle>>,
    /// Whether the sweep of expired idle connections runs (it starts with the first release).
    sweeping: AtomicBool,
    /// The HTTP/2 connection (h2c only), opened under the lock.
    h2: Option<tokio::sync::Mutex<Option<http2::SendRequest<Body>>>>,
}

#[derive(Debug)]
struct Idle {
    sender: http1::SendRequest<Body>,
    since: Instant,
}

/// An HTTP/1.1 connection lent to one exchange: [`release`](Checkout::release) it once the
/// response's body has been read to its end; dropped instead, the connection closes.
#[derive(Debug)]
pub(crate) struct Checkout {
    sender: http1::SendRequest<Body>,
    pool: Arc<Shared>,
}

impl Checkout {
    /// Puts the connection back on the idle stack.
    pub(crate) fn release(self) {
        self.pool.put(self.sender);
    }
}

impl Pool {
    /// Connections to `upstream` over HTTP/1.1, or (with `h2c`) one HTTP/2 connection; a
    /// connection attempt gives up after `connect_timeout`; at most `max_idle` connections wait
    /// idle, each for at most `idle_timeout`.
    pub(crate) fn new(
        upstream: Upstream,
        h2c: bool,
        connect_timeout: Duration,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                upstream,
                connect_timeout,
                max_idle,
                idle_timeout,
                idle: Mutex::new(Vec::new()),
                sweeping: AtomicBool::new(false),
                h2: h2c.then(|| tokio::sync::Mutex::new(None)),
            }),
        }
    }

    /// The same pool with other idle limits (connections already idle are closed).
    pub(crate) fn idle_limits(self, max_idle: usize, idle_timeout: Duration) -> Self {
        let shared = &self.shared;
        Self::new(
            shared.upstream.clone(),
            shared.h2.is_some(),
            shared.connect_timeout,
            max_idle,
            idle_timeout,
        )
    }

    /// Sends `request` and returns the response head, with the connection to release once its
    /// body has been read (HTTP/1.1). A request is sent on a connection that was idle, or on a
    /// new one; when an idle one turns out to be closed before the request was written, on the
    /// next one.
    pub(crate) async fn send(
        &self,
        mut request: Request<Body>,
    ) -> Result<(Response<Incoming>, Option<Checkout>), Error> {
        if self.shared.h2.is_some() {
            return self.send_h2(request).await.map(|response| (response, None));
        }
        loop {
            let (mut sender, reused) = match self.shared.take() {
                Some(sender) => (sender, true),
                None => (self.connect_h1().await?, false),
            };
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let checkout = Checkout {
                        sender,
                        pool: Arc::clone(&self.shared),
                    };
                    return Ok((response, Some(checkout)));
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    Some(_) => {
                        return Err(Error::UpstreamConnect(io::Error::other(error.into_error())));
                    }
                    None => return Err(Error::Upstream(error.into_error())),
                },
            }
        }
    }

    /// How many connections wait idle.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.shared.lock().len()
    }

    async fn send_h2(&self, request: Request<Body>) -> Result<Response<Incoming>, Error> {
        let mut sender = {
            let mut connection = self
                .shared
                .h2
                .as_ref()
                .expect("an h2c pool has its connection slot")
                .lock()
                .await;
            match &*connection {
                Some(sender) if !sender.is_closed() => sender.clone(),
                _ => {
                    let io = TokioIo::new(self.shared.tcp().await?);
                    let (sender, connection_task) = http2::Builder::new(TokioExecutor::new())
                        .timer(TokioTimer::new())
                        .handshake(io)
                        .await
                        .map_err(|e| Error::UpstreamConnect(io::Error::other(e)))?;
                    tokio::spawn(drive(connection_task));
                    connection.insert(sender).clone()
                }
            }
        };
        match sender.try_send_request(request).await {
            Ok(response) => Ok(response),
            // The connection ended before the request went out: nothing was sent.
            Err(error) if error.message().is_some() => {
                Err(Error::UpstreamConnect(io::Error::other(error.into_error())))
            }
            Err(error) => Err(Error::Upstream(error.into_error())),
        }
    }

    async fn connect_h1(&self) -> Result<http1::SendRequest<Body>, Error> {
        let io = TokioIo::new(self.shared.tcp().await?);
        let (sender, connection) = http1::handshake(io)
            .await
            .map_err(|e| Error::UpstreamConnect(io::Error::other(e)))?;
        tokio::spawn(drive(connection));
        Ok(sender)
    }
}

/// Runs a connection until it closes.
async fn drive<C: std::future::Future<Output = hyper::Result<()>>>(connection: C) {
    if let Err(error) = connection.await {
        tracing::debug!(%error, "an upstream connection ended with an error");
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently released idle connection that is open and not expired. Expired ones
    /// are closed: everything under an expired connection was released before it.
    fn take(&self) -> Option<http1::SendRequest<Body>> {
        let mut idle = self.lock();
        while let Some(Idle { sender, since }) = idle.pop() {
            if since.elapsed() >= self.idle_timeout {
                let expired = std::mem::take(&mut *idle);
                drop(idle);
                drop(expired);
                return None;
            }
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// Puts a connection whose exchange has ended back on the stack, once it is ready for the
    /// next one. It usually is by the time its response's body has been read; when the
    /// connection still winds the exchange up (the last bytes of the request being written), a
    /// task waits for it.
    fn put(self: &Arc<Self>, mut sender: http1::SendRequest<Body>) {
        if sender.is_ready() {
            self.push(sender);
        } else if !sender.is_closed() {
            let pool = Arc::clone(self);
            tokio::spawn(async move {
                let ready = tokio::time::timeout(pool.idle_timeout, sender.ready()).await;
                if let Ok(Ok(())) = ready {
                    pool.push(sender);
                }
            });
        }
    }

    fn push(self: &Arc<Self>, sender: http1::SendRequest<Body>) {
        let mut idle = self.lock();
        if idle.len() >= self.max_idle {
            // Closed, outside the lock.
            drop(idle);
            return;
        }
        idle.push(Idle {
            sender,
            since: Instant::now(),
        });
        drop(idle);
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
    }

    /// Closes the connections idle for the idle timeout or longer.
    fn close_expired(&self) {
        let mut idle = self.lock();
        let fresh = idle.partition_point(|entry| entry.since.elapsed() >= self.idle_timeout);
        let expired: Vec<Idle> = idle.drain(..fresh).collect();
        drop(idle);
        drop(expired);
    }

    /// A TCP connection to the upstream, within the connect timeout.
    async fn tcp(&self) -> Result<TcpStream, Error> {
        let (host, port) = self.upstream.host_and_port();
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| {
                Error::UpstreamConnect(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no connection within {}",
                        HumanDuration(self.connect_timeout)
                    ),
                ))
            })?
            .map_err(Error::UpstreamConnect)?;
        // Requests are written whole; waiting to fill a segment only adds latency.
        stream.set_nodelay(true).map_err(Error::UpstreamConnect)?;
        Ok(stream)
    }
}

/// Every half idle timeout, closes the expired idle connections, for as long as the pool lives.
async fn sweep(pool: Weak<Shared>) {
    let period = pool
        .upgrade()
        .map_or(Duration::ZERO, |pool| pool.idle_timeout / 2)
        .max(Duration::from_millis(1));
    let mut every = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        every.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        pool.close_expired();
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        net::SocketAddr,
        sync::atomic::{AtomicUsize, Ordering},
    };

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::{server::conn::http1 as server, service::service_fn};
    use tokio::{net::TcpListener, sync::Barrier};

    use super::*;
    use crate::proxy::body::UpstreamBody;

    /// An upstream that counts the connections it accepted and those that ended. Paths:
    /// `/ok` (a body), `/empty` (204), `/close` (`Connection: close`), `/held` (answered once
    /// `held` requests arrived), `/big` (1 MiB).
    struct TestUpstream {
        addr: SocketAddr,
        accepted: Arc<AtomicUsize>,
        ended: Arc<AtomicUsize>,
    }

    impl TestUpstream {
        async fn start(held: usize) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let accepted = Arc::new(AtomicUsize::new(0));
            let ended = Arc::new(AtomicUsize::new(0));
            let barrier = Arc::new(Barrier::new(held.max(1)));
            let (counted, closed) = (Arc::clone(&accepted), Arc::clone(&ended));
            tokio::spawn(async move {
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    counted.fetch_add(1, Ordering::SeqCst);
                    let (barrier, closed) = (Arc::clone(&barrier), Arc::clone(&closed));
                    tokio::spawn(async move {
                        let service = service_fn(move |request: Request<Incoming>| {
                            let barrier = Arc::clone(&barrier);
                            async move { Ok::<_, Infallible>(answer(request, &barrier).await) }
                        });
                        let _ = server::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                        closed.fetch_add(1, Ordering::SeqCst);
                    });
                }
            });
            Self {
                addr,
                accepted,
                ended,
            }
        }

        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }

        fn ended(&self) -> usize {
            self.ended.load(Ordering::SeqCst)
        }

        fn pool(&self, max_idle: usize, idle_timeout: Duration) -> Pool {
            Pool::new(
                Upstream::http(self.addr),
                false,
                Duration::from_secs(1),
                max_idle,
                idle_timeout,
            )
        }
    }

    async fn answer(request: Request<Incoming>, barrier: &Barrier) -> Response<Full<Bytes>> {
        let response = Response::builder();
        let response = match request.uri().path() {
            "/empty" => response.status(204),
            "/close" => response.header("connection", "close"),
            "/held" => {
                barrier.wait().await;
                response
            }
            _ => response,
        };
        let body = match request.uri().path() {
            "/empty" => Bytes::new(),
            "/big" => Bytes::from(vec![b'x'; 1 << 20]),
            path => Bytes::copy_from_slice(path.as_bytes()),
        };
        response.body(Full::new(body)).unwrap()
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path)
            .header("host", "upstream")
            .body(Body::empty())
            .unwrap()
    }

    /// Sends a request and reads its body to the end, releasing the connection as the proxy's
    /// response body does.
    async fn fetch(pool: &Pool, path: &str) -> Bytes {
        let (response, connection) = pool.send(get(path)).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        if let Some(connection) = connection {
            connection.release();
        }
        body
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn requests_one_after_another_share_one_connection() {
        let upstream = TestUpstream::start(1).await;
        let pool = upstream.pool(8, MINUTE);
        for _ in 0..10 {
            assert_eq!(fetch(&pool, "/ok").await, "/ok");
        }
        assert_eq!(upstream.accepted(), 1);
        assert_eq!(pool.idle(), 1);
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_wait_and_the_rest_are_closed() {
        let upstream = TestUpstream::start(5).await;
        let pool = upstream.pool(2, MINUTE);
        let round = || futures_util::future::join_all((0..5).map(|_| fetch(&pool, "/held")));
        assert!(round().await.iter().all(|body| body == "/held"));
        assert_eq!(upstream.accepted(), 5);
        assert_eq!(pool.idle(), 2);
        // The three released beyond the limit were closed.
        wait_until(|| upstream.ended() == 3).await;

        // Two of the next five reuse the idle connections; three are new.
        round().await;
        assert_eq!(upstream.accepted(), 8);
        assert_eq!(pool.idle(), 2);
    }

    #[tokio::test]
    async fn connections_idle_for_the_idle_timeout_are_closed() {
        let upstream = TestUpstream::start(1).await;
        let pool = upstream.pool(8, Duration::from_millis(100));
        fetch(&pool, "/ok").await;
        assert_eq!(pool.idle(), 1);
        // The sweep closes it without another request.
        wait_until(|| upstream.ended() == 1).await;
        assert_eq!(pool.idle(), 0);
        fetch(&pool, "/ok").await;
        assert_eq!(upstream.accepted(), 2);
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closes_is_not_used_again() {
        let upstream = TestUpstream::start(1).await;
        let pool = upstream.pool(8, MINUTE);
        assert_eq!(fetch(&pool, "/close").await, "/close");
        wait_until(|| upstream.ended() == 1).await;
        assert_eq!(fetch(&pool, "/ok").await, "/ok");
        assert_eq!(upstream.accepted(), 2);
    }

    #[tokio::test]
    async fn an_empty_response_releases_its_connection_with_its_head() {
        let upstream = TestUpstream::start(1).await;
        let pool = upstream.pool(8, MINUTE);
        for _ in 0..3 {
            let (response, connection) = pool.send(get("/empty")).await.unwrap();
            assert_eq!(response.status(), 204);
            let body = UpstreamBody::new(
                response.into_body(),
                connection,
                Instant::now() + MINUTE,
                MINUTE,
            );
            assert_eq!(pool.idle(), 1);
            drop(body);
        }
        assert_eq!(upstream.accepted(), 1);
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_releases_its_connection_and_one_dropped_early_closes_it() {
        let upstream = TestUpstream::start(1).await;
        let pool = upstream.pool(8, MINUTE);
        let (response, connection) = pool.send(get("/ok")).await.unwrap();
        let body = UpstreamBody::new(
            response.into_body(),
            connection,
            Instant::now() + MINUTE,
            MINUTE,
        );
        assert_eq!(body.collect().await.unwrap().to_bytes(), "/ok");
        assert_eq!(pool.idle(), 1);

        let (response, connection) = pool.send(get("/big")).await.unwrap();
        let mut body = UpstreamBody::new(
            response.into_body(),
            connection,
            Instant::now() + MINUTE,
            MINUTE,
        );
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.data_ref().is_some_and(|data| !data.is_empty()));
        drop(body);
        assert_eq!(pool.idle(), 0);
        wait_until(|| upstream.ended() == 1).await;
        assert_eq!(fetch(&pool, "/ok").await, "/ok");
        assert_eq!(upstream.accepted(), 2);
    }

    #[tokio::test]
    async fn an_upstream_that_refuses_connections_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let pool = Pool::new(
            Upstream::http(addr),
            false,
            Duration::from_secs(1),
            8,
            MINUTE,
        );
        let error = pool.send(get("/ok")).await.unwrap_err();
        assert!(
            matches!(&error, Error::UpstreamConnect(e) if e.kind() == io::ErrorKind::ConnectionRefused),
            "{error:?}"
        );
    }

    /// Waits (up to 5 s) until `condition` holds.
    async fn wait_until(condition: impl Fn() -> bool) {
        for _ in 0..500 {
            if condition() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the condition did not come true within 5 s");
    }
}
