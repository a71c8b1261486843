//! [`Gateway`]: `idem serve`, startable in-process.
//!
//! The stack for each client request is: the request log line, errors turned into 502/504
//! problems, the idempotency layer, and the [`Proxy`]. Keyed requests run in the layer's
//! engine: a client that disconnects does not cancel the forwarded call (the engine finishes it
//! in a task of its own), and its result is stored for the retry. [`serve`] is the whole
//! `idem serve` command.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> Result<(), idem_gateway::Error> {
//! use idem_gateway::{Config, Gateway};
//!
//! let mut config = Config::new("http://127.0.0.1:3000".parse()?);
//! config.listen = "127.0.0.1:0".parse().unwrap();
//! config.admin_listen = "127.0.0.1:0".parse().unwrap();
//! config.store = "memory://".parse()?;
//! let gateway = Gateway::bind(config).await?;
//! println!("proxying on {}, admin on {}", gateway.addr(), gateway.admin_addr());
//! gateway.run(idem_gateway::shutdown_signal()).await
//! # }
//! ```

use std::{
    convert::Infallible,
    future::{Future, IntoFuture},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::body::Body;
use http::{HeaderName, Request, Response};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use idem_core::{DynStore, IdempotencyKey};
use idem_http::{IdempotencyLayer, Outcome, RequestKey};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, time::Instant};
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::{
    AdminToken, Config, Error, InstrumentedStore, Proxy,
    admin::{self, AdminState},
    cli::ServeArgs,
    connections::{Activity, Connections},
    key_files,
    logging::{self, RequestLine},
    metrics_recorder,
    proxy::{self, ClientAddr},
};

/// The store as the gateway uses it: chosen at run time, its calls timed.
pub type GatewayStore = InstrumentedStore<DynStore>;

/// How often expired records are purged, and how many at most per store call.
const PURGE_EVERY: Duration = Duration::from_secs(60);
const PURGE_BATCH: usize = 1000;
/// How often the metrics recorder drains its histograms.
const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// The most requests at once on one HTTP/2 client connection.
const MAX_CONCURRENT_STREAMS: u32 = 256;
/// How often an HTTP/2 client connection is pinged, and how long its answer may take before the
/// connection is taken for dead and closed.
const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The gateway with its store open and its sockets bound, ready to [`run`](Gateway::run).
pub struct Gateway {
    config: Config,
    store: GatewayStore,
    listener: TcpListener,
    admin_listener: TcpListener,
    addr: SocketAddr,
    admin_addr: SocketAddr,
    metrics: PrometheusHandle,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("addr", &self.addr)
            .field("admin_addr", &self.admin_addr)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// Opens the store (for SQLite: creates the file and applies migrations), sealed when
    /// [`Config::encryption`] has keys, binds both listeners and installs the metrics recorder
    /// (once per process), and the digest key of the logs, if any.
    ///
    /// An admin listener beyond loopback without an admin token is refused first
    /// ([`Error::UnprotectedAdmin`]), before anything is opened or bound.
    pub async fn bind(config: Config) -> Result<Self, Error> {
        AdminToken::check_listen(config.admin_listen, config.admin_token.as_ref())?;
        let metrics = metrics_recorder::handle();
        if let Some(key) = &config.digest_key {
            key.install()?;
        }
        let store = config
            .store
            .clone()
            .statement_timeout(config.store_call_limit())
            .open()
            .await?;
        let store = InstrumentedStore::new(key_files::sealed(store, config.encryption.as_ref()));
        let bind = |addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { addr, source })
        };
        let listener = bind(config.listen).await?;
        let admin_listener = bind(config.admin_listen).await?;
        let local = |listener: &TcpListener, addr| {
            listener
                .local_addr()
                .map_err(|source| Error::Bind { addr, source })
        };
        Ok(Self {
            addr: local(&listener, config.listen)?,
            admin_addr: local(&admin_listener, config.admin_listen)?,
            config,
            store,
            listener,
            admin_listener,
            metrics,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the admin endpoints listen.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The store, as the gateway uses it.
    pub fn store(&self) -> &GatewayStore {
        &self.store
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: stops accepting, lets
    /// open requests finish and waits until every keyed operation has recorded its result, for
    /// at most the configured shutdown timeout in all, and returns. Keys still `processing` then
    /// are counted in the log; their leases free them.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let Gateway {
            config,
            store,
            listener,
            admin_listener,
            addr,
            admin_addr,
            metrics,
        } = self;
        let layer = idempotency_layer(&config, store.clone());
        let engine = layer.engine();
        let proxy = Proxy::new(
            config.upstream.clone(),
            config.upstream_h2c,
            config.connect_timeout,
            config.upstream_timeout,
        );
        let service = ServiceBuilder::new().layer(layer).service(proxy);

        let background = CancellationToken::new();
        let draining = Arc::new(AtomicBool::new(false));
        let admin = admin::router(
            AdminState {
                store: store.clone(),
                metrics: metrics.clone(),
                draining: Arc::clone(&draining),
                store_timeout: config.store_call_limit(),
            },
            config.admin_token.clone(),
        );
        let admin_task = tokio::spawn(
            axum::serve(admin_listener, admin)
                .with_graceful_shutdown(background.clone().cancelled_owned())
                .into_future(),
        );
        tokio::spawn(purge_expired(
            store,
            config.store_call_limit(),
            background.clone(),
        ));
        tokio::spawn(metrics_upkeep(metrics, background.clone()));

        tracing::info!(
            listen = %addr,
            admin = %admin_addr,
            upstream = %config.upstream,
            store = %config.store,
            "listening"
        );
        if config.scope_headers.is_empty() {
            tracing::warn!(
                "scoping is off: every caller shares one key space, so two callers that send \
                 the same key get one execution and each other's responses (set --scope-header)"
            );
        }

        let connections = Connections::new(config.max_connections as usize, config.idle_timeout);
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // A timer makes hyper's header read timeout (slow clients, and idle HTTP/1 keep-alive
        // connections: the next request's head is awaited as one) and HTTP/2 keep-alive work.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.idle_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .keep_alive_interval(HTTP2_KEEP_ALIVE)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors, or a connection reset before accept: wait a
                        // little rather than spin.
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // At the limit, this connection waits here (and the next ones in the accept queue)
            // while idle connections are closed for it.
            let slot = tokio::select! {
                biased;
                () = &mut shutdown => break,
                slot = connections.slot() => slot,
            };
            // Responses are written whole; waiting to fill a segment only adds latency.
            let _ = stream.set_nodelay(true);
            let service = service.clone();
            let key_header = config.key_header.clone();
            let activity = Activity::new();
            let requests = Arc::clone(&activity);
            let per_request = hyper::service::service_fn(move |request: Request<Incoming>| {
                let busy = requests.track();
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(ClientAddr(peer));
                let answered = answer(service.clone(), key_header.clone(), request);
                async move { Ok::<_, Infallible>(answered.await?.map(|body| busy.body(body))) }
            });
            let connection = builder
                .serve_connection(TokioIo::new(stream), per_request)
                .into_owned();
            connections.spawn(connection, activity, slot, peer);
        }

        drop(listener);
        draining.store(true, Ordering::SeqCst);
        tracing::info!("shutting down: finishing open requests");
        let deadline = Instant::now() + config.shutdown_timeout;
        if !connections.shutdown(config.shutdown_timeout).await {
            tracing::warn!(
                timeout = %crate::HumanDuration(config.shutdown_timeout),
                "connections still open at the shutdown timeout are closed"
            );
        }
        // Requests whose clients went away may still be running in the engine: their results
        // must be recorded before the process exits, unless the shutdown timeout has passed.
        let _ = tokio::time::timeout_at(deadline, engine.shutdown()).await;
        let processing = engine.running();
        if processing > 0 {
            tracing::warn!(
                processing,
                timeout = %crate::HumanDuration(config.shutdown_timeout),
                "keys left processing at the shutdown timeout; their leases free them"
            );
        }
        background.cancel();
        if let Ok(Err(error)) = admin_task.await {
            tracing::warn!(%error, "the admin listener failed");
        }
        tracing::info!(processing, "stopped");
        Ok(())
    }
}

/// The idempotency layer, configured as `config` says.
fn idempotency_layer(config: &Config, store: GatewayStore) -> IdempotencyLayer<GatewayStore> {
    IdempotencyLayer::new(store)
        .key_header(config.key_header.clone())
        .methods(config.methods.iter().cloned())
        .require_key(config.require_key)
        .ttl(config.ttl)
        .lease(config.lease)
        .in_flight(config.in_flight)
        .ambiguous(config.ambiguous)
        .scope_headers(config.scope_headers.iter().cloned())
        .anonymous(config.anonymous)
        .fingerprint(config.fingerprint)
        .max_body(config.max_body)
        .body_timeout(config.body_timeout)
        .max_buffered(config.max_buffered)
        .max_stored_response(config.max_stored_response)
        .on_store_error(config.on_store_error)
        .max_waiters(config.max_waiters)
        .store_timeout(config.store_call_limit())
        .classify_error(proxy::delivery)
}

/// Answers one request: the response, or a 502/504 problem when the upstream gave none; then
/// its log line.
async fn answer<S, B>(
    service: S,
    key_header: HeaderName,
    request: Request<Body>,
) -> Result<Response<Body>, Infallible>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Error>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let start = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    // The layer labels the responses it returns; a failed forward returns none, so its line
    // names the key from the header (by digest).
    let mut key_values = request.headers().get_all(&key_header).iter();
    let key_value = match (key_values.next(), key_values.next()) {
        (Some(value), None) => Some(value.clone()),
        _ => None,
    };
    let (response, fallback_digest) = match service.oneshot(request).await {
        Ok(response) => (response.map(Body::new), None),
        Err(error) => {
            tracing::warn!(
                %method,
                path,
                error = &error as &(dyn std::error::Error + 'static),
                "forwarding failed"
            );
            let digest = key_value
                .and_then(|value| IdempotencyKey::parse_header(value.as_bytes()).ok())
                .map(|key| key.digest());
            (proxy::error_response(&error), digest)
        }
    };
    let key = response.extensions().get::<RequestKey>();
    RequestLine {
        method: &method,
        path: &path,
        status: response.status(),
        latency: start.elapsed(),
        outcome: response.extensions().get::<Outcome>(),
        key_digest: key
            .map(|k| k.digest.as_str())
            .or(fallback_digest.as_deref()),
        scope: key.map(|k| k.scope),
    }
    .log();
    Ok(response)
}

/// Removes expired records at start and then every minute, in batches, each store call limited
/// to `limit`, until cancelled.
async fn purge_expired(store: GatewayStore, limit: Duration, cancel: CancellationToken) {
    idem_sql::PurgeLoop::new(store, "expired records")
        .every(PURGE_EVERY)
        .batch(PURGE_BATCH)
        .time_limit(limit)
        .run(cancel)
        .await;
}

/// Drains the histograms of the metrics recorder regularly, until cancelled.
async fn metrics_upkeep(metrics: PrometheusHandle, cancel: CancellationToken) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(METRICS_UPKEEP_EVERY) => metrics.run_upkeep(),
        }
    }
}

/// `idem serve`: sets up logging as `args` say, runs the gateway they describe until SIGTERM or
/// SIGINT, then shuts down gracefully.
pub async fn serve(args: &ServeArgs) -> Result<(), Error> {
    let config = Config::try_from(args)?;
    logging::init(args.log_format, &args.log_level)?;
    // Installed before the sockets are bound, so that a signal sent as soon as the gateway says
    // it listens is not lost.
    let shutdown = shutdown_signal();
    Gateway::bind(config).await?.run(shutdown).await
}

/// Completes on SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is called, so
/// a signal that arrives before the future is first polled is not lost.
///
/// # Panics
///
/// Outside a Tokio runtime, or when the handlers cannot be installed.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
        let mut interrupt = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
        async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown signal received");
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!(signal = "Ctrl-C", "shutdown signal received");
        }
    }
}
