//! [`Gateway`]: the store opened and the sockets bound, then the run until shutdown.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use idem_http::IdempotencyLayer;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{net::TcpListener, time::Instant};
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;

use super::{Config, connections::Connections, metrics_recorder};
use super::{
    accept,
    admin_server::{self, AdminBounds},
    purge::purge_expired,
};
use crate::{
    AdminToken, Error, HumanDuration,
    admin::{self, AdminState, CensusKeeper},
    error::StartupError,
    proxy::Proxy,
    store::{
        GatewayStore, InstrumentedStore, PendingStore, StoreUrl, warn_if_downgradable,
        warn_if_mysql_downgradable,
    },
};

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
    /// ([`AdminTokenError::UnprotectedAdmin`](crate::AdminTokenError::UnprotectedAdmin)), before anything is opened or bound.
    pub async fn bind(config: Config) -> Result<Self, Error> {
        AdminToken::check_listen(config.admin_listen, config.admin_token.as_ref())?;
        let metrics = metrics_recorder::handle();
        if let Some(key) = &config.digest_key {
            key.install().map_err(StartupError::from)?;
        }
        match &config.store {
            StoreUrl::Postgres(options) => {
                warn_if_downgradable(&options.connect_options(), "the store");
            }
            StoreUrl::Mysql(options) => {
                warn_if_mysql_downgradable(&options.connect_options(), "the store");
            }
            _ => {}
        }
        let url = config
            .store
            .clone()
            .statement_timeout(config.store_call_limit());
        let store = PendingStore::open(&url, &config.at_rest()).await?;
        let store = InstrumentedStore::new(store);
        let bind = |addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartupError::Bind { addr, source })
        };
        let listener = bind(config.listen).await?;
        let admin_listener = bind(config.admin_listen).await?;
        let local = |listener: &TcpListener, addr| {
            listener
                .local_addr()
                .map_err(|source| StartupError::Bind { addr, source })
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
        let layer = IdempotencyLayer::with_settings(store.clone(), config.idempotency.clone());
        let engine = layer.engine();
        let proxy = Proxy::new(
            config.upstream.clone(),
            config.upstream_h2c,
            config.connect_timeout,
            config.upstream_timeout,
        )
        .idle_connections(config.upstream_max_idle, config.upstream_idle_timeout);
        let service = ServiceBuilder::new().layer(layer).service(proxy);

        let background = CancellationToken::new();
        let draining = Arc::new(AtomicBool::new(false));
        let census = Arc::new(CensusKeeper::default());
        let admin_task = admin_server::spawn(
            admin_listener,
            admin::router(
                AdminState {
                    store: store.clone(),
                    metrics: metrics.clone(),
                    draining: Arc::clone(&draining),
                    store_timeout: config.store_call_limit(),
                    census: Arc::clone(&census),
                },
                config.admin_token.clone(),
                &config.admin_allowed_hosts,
            ),
            AdminBounds::default(),
            background.clone().cancelled_owned(),
        );
        tokio::spawn(census.run(
            store.clone(),
            config.idempotency.policy.lease,
            background.clone(),
        ));
        tokio::spawn(purge_expired(
            store,
            config.store_call_limit(),
            background.clone(),
        ));
        tokio::spawn(metrics_recorder::upkeep(metrics, background.clone()));

        tracing::info!(
            listen = %addr,
            admin = %admin_addr,
            upstream = %config.upstream,
            store = %config.store,
            "listening"
        );
        if config.idempotency.scope_headers.is_empty() {
            tracing::warn!(
                "scoping is off: every caller shares one key space, so two callers that send \
                 the same key get one execution and each other's responses (set --scope-header)"
            );
        }

        let connections = Connections::new(config.max_connections as usize, config.idle_timeout);
        accept::until_shutdown(
            listener,
            &connections,
            service,
            config.idempotency.key_header.clone(),
            config.idle_timeout,
            shutdown,
        )
        .await;

        draining.store(true, Ordering::SeqCst);
        tracing::info!("shutting down: finishing open requests");
        let deadline = Instant::now() + config.shutdown_timeout;
        if !connections.shutdown(config.shutdown_timeout).await {
            tracing::warn!(
                timeout = %HumanDuration(config.shutdown_timeout),
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
                timeout = %HumanDuration(config.shutdown_timeout),
                "keys left processing at the shutdown timeout; their leases free them"
            );
        }
        background.cancel();
        if let Err(error) = admin_task.await {
            tracing::warn!(%error, "the admin listener failed");
        }
        tracing::info!(processing, "stopped");
        Ok(())
    }
}
