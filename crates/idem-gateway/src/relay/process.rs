//! [`RelayProcess`]: a relay as a process of its own.

use std::{
    fmt,
    future::Future,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use idem_messaging::{
    BoxPublisher, BrokerUrl, Confirmations, Envelope, Error, Outbox, OutboxDatabase, OutboxOptions,
    Publisher, Relay, metrics,
};
use sqlx::{
    MySql, Pool, Postgres, Sqlite,
    mysql::{MySqlConnectOptions, MySqlPoolOptions},
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};
use tokio_util::sync::CancellationToken;

use crate::store::{RetryWaits, unreachable, warn_if_downgradable, warn_if_mysql_downgradable};

/// How long a statement waits for a connection; at start, how long the database may take to
/// answer before the process gives up.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

type Configure<DB> = Box<dyn FnOnce(Relay<BoxPublisher, DB>) -> Relay<BoxPublisher, DB> + Send>;
type Wrap = Box<dyn FnOnce(BoxPublisher) -> BoxPublisher + Send>;

/// A relay run as a process: connects to the database (PostgreSQL, MySQL or MariaDB, or an SQLite
/// file), optionally migrates the outbox, publishes
/// to the broker of a [`BrokerUrl`] until shut down, and reports its progress in the logs
/// (`tracing`, every 10 s by default) and in the metrics (the relay's counters, and the gauge
/// `idem_outbox_pending`). What `idem relay` runs.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_gateway::{relay::RelayProcess, shutdown_signal};
///
/// // SIGTERM or SIGINT: finish the batch in flight, then stop.
/// RelayProcess::new("postgres://postgres@127.0.0.1/app", "amqp://127.0.0.1:5672/%2f".parse()?)
///     .migrate(true)
///     .relay(|relay| relay.batch_size(200).ordering(true))
///     .run(shutdown_signal())
///     .await?;
/// # Ok(())
/// # }
/// ```
pub struct RelayProcess {
    store: String,
    broker: BrokerUrl,
    outbox: OutboxOptions,
    migrate: bool,
    max_connections: u32,
    progress_interval: Duration,
    configure: Option<Configure<Postgres>>,
    configure_mysql: Option<Configure<MySql>>,
    configure_sqlite: Option<Configure<Sqlite>>,
    wrap: Option<Wrap>,
}

impl RelayProcess {
    /// A relay of the outbox in the database at `store` to `broker`: a PostgreSQL database
    /// (`postgres://…`), a MySQL or MariaDB database (`mysql://…/DATABASE` or
    /// `mariadb://…/DATABASE`: the URL names the database), or an SQLite file (`sqlite://PATH`,
    /// relative, or `sqlite:///ABSOLUTE/PATH`, opened in WAL mode, as the service that enqueues
    /// should open it too). The outbox `idem_outbox` in the database's default schema (on MySQL,
    /// the URL's database), not migrated, a pool of 4 connections, progress every 10 s, and
    /// [`Relay`]'s defaults.
    pub fn new(store: impl Into<String>, broker: BrokerUrl) -> Self {
        Self {
            store: store.into(),
            broker,
            outbox: OutboxOptions::new(),
            migrate: false,
            max_connections: 4,
            progress_interval: Duration::from_secs(10),
            configure: None,
            configure_mysql: None,
            configure_sqlite: None,
            wrap: None,
        }
    }

    /// Sets the outbox's schema and table.
    #[must_use]
    pub fn outbox(mut self, options: OutboxOptions) -> Self {
        self.outbox = options;
        self
    }

    /// Sets whether to create the outbox, or bring it up to date, before relaying (off by
    /// default: migrations are usually a deployment step).
    #[must_use]
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Sets the most connections the relay's pool opens (at least 3: the batch being published
    /// and the next one each hold a claim transaction, and the progress report counts; the
    /// `LISTEN` connection is separate).
    #[must_use]
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.max_connections = connections.max(3);
        self
    }

    /// Sets how often the progress is logged.
    #[must_use]
    pub fn progress_interval(mut self, interval: Duration) -> Self {
        self.progress_interval = interval.max(Duration::from_millis(100));
        self
    }

    /// Sets the relay's settings on PostgreSQL: `configure` gets the relay with its defaults and
    /// returns it with the setters applied. A store on MySQL takes
    /// [`mysql_relay`](Self::mysql_relay)'s instead, one on SQLite
    /// [`sqlite_relay`](Self::sqlite_relay)'s.
    #[must_use]
    pub fn relay(
        mut self,
        configure: impl FnOnce(Relay<BoxPublisher>) -> Relay<BoxPublisher> + Send + 'static,
    ) -> Self {
        self.configure = Some(Box::new(configure));
        self
    }

    /// Sets the relay's settings on MySQL and MariaDB, as [`relay`](Self::relay) does on
    /// PostgreSQL.
    #[must_use]
    pub fn mysql_relay(
        mut self,
        configure: impl FnOnce(Relay<BoxPublisher, MySql>) -> Relay<BoxPublisher, MySql>
        + Send
        + 'static,
    ) -> Self {
        self.configure_mysql = Some(Box::new(configure));
        self
    }

    /// Sets the relay's settings on SQLite, as [`relay`](Self::relay) does on PostgreSQL.
    #[must_use]
    pub fn sqlite_relay(
        mut self,
        configure: impl FnOnce(Relay<BoxPublisher, Sqlite>) -> Relay<BoxPublisher, Sqlite>
        + Send
        + 'static,
    ) -> Self {
        self.configure_sqlite = Some(Box::new(configure));
        self
    }

    /// Wraps the broker's publisher, to add behaviour around publishing (fault injection in
    /// tests, tracing, a rate limit).
    #[must_use]
    pub fn wrap_publisher(
        mut self,
        wrap: impl FnOnce(BoxPublisher) -> BoxPublisher + Send + 'static,
    ) -> Self {
        self.wrap = Some(Box::new(wrap));
        self
    }

    /// Connects, migrates if asked, and relays until `shutdown` completes (give it
    /// [`shutdown_signal()`](crate::shutdown_signal) for SIGTERM and SIGINT); then finishes the
    /// batch in flight (within the relay's shutdown grace) and returns.
    ///
    /// A PostgreSQL, MySQL or MariaDB database that cannot be reached at start (the connection
    /// refused, reset or timed out) is tried again, after 100 ms and then at most every 5 s, until it answers or
    /// `shutdown` comes: under an orchestrator, a database that blinks during a deploy costs a
    /// wait, not a crash loop.
    ///
    /// Fails when the store URL is invalid (a MySQL URL without its database), the database
    /// answers and refuses (credentials, TLS), an SQLite file does not exist (unless it is to be
    /// migrated), or the migration fails. Once running, failures of the database or the broker are logged and retried,
    /// never returned.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let stop = CancellationToken::new();
        let watch = tokio::spawn({
            let stop = stop.clone();
            async move {
                shutdown.await;
                stop.cancel();
            }
        });
        let relayed = self.connect_and_relay(&stop).await;
        watch.abort();
        relayed
    }

    async fn connect_and_relay(mut self, stop: &CancellationToken) -> Result<(), Error> {
        if self.store.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(&self.store)?
                .create_if_missing(self.migrate)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(ACQUIRE_TIMEOUT);
            let pool = SqlitePoolOptions::new()
                .max_connections(self.max_connections)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options)
                .await?;
            let configure = self.configure_sqlite.take();
            self.relay_on(pool, configure, stop).await
        } else if self.store.starts_with("mysql:") || self.store.starts_with("mariadb:") {
            let connect = MySqlConnectOptions::from_str(&self.store)?;
            warn_if_mysql_downgradable(&connect, "the outbox's database");
            // The outbox's table is the URL's database's, where its migrations take their lock.
            if connect.get_database().is_none() {
                return Err(sqlx::Error::Configuration(
                    "a MySQL store URL names its database: mysql://user@host/DATABASE".into(),
                )
                .into());
            }
            let pool = MySqlPoolOptions::new()
                .max_connections(self.max_connections)
                .acquire_timeout(ACQUIRE_TIMEOUT);
            let connecting = until_reached(stop, || pool.clone().connect_with(connect.clone()));
            let Some(pool) = connecting.await? else {
                return Ok(()); // shut down before the database was reached
            };
            let configure = self.configure_mysql.take();
            self.relay_on(pool, configure, stop).await
        } else {
            let connect = PgConnectOptions::from_str(&self.store)?;
            warn_if_downgradable(&connect, "the outbox's database");
            let pool = PgPoolOptions::new()
                .max_connections(self.max_connections)
                .acquire_timeout(ACQUIRE_TIMEOUT);
            let connecting = until_reached(stop, || pool.clone().connect_with(connect.clone()));
            let Some(pool) = connecting.await? else {
                return Ok(()); // shut down before the database was reached
            };
            let configure = self.configure.take();
            self.relay_on(pool, configure, stop).await
        }
    }
}

/// `connect()`'s pool, tried again while the database cannot be reached, or `None` once `stop` is
/// cancelled first. A database that answers and refuses is an error at once.
async fn until_reached<P, F>(
    stop: &CancellationToken,
    connect: impl Fn() -> F,
) -> Result<Option<P>, Error>
where
    F: Future<Output = Result<P, sqlx::Error>>,
{
    let mut waits = RetryWaits::new();
    loop {
        let wait = waits.next_wait();
        match connect().await {
            Ok(pool) => return Ok(Some(pool)),
            Err(error) if unreachable(&error) => {
                tracing::warn!(
                    error = &error as &(dyn std::error::Error + 'static),
                    retry_in = ?wait,
                    "the outbox's database cannot be reached; trying again"
                );
            }
            Err(error) => return Err(error.into()),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(None),
            () = tokio::time::sleep(wait) => {}
        }
    }
}

impl RelayProcess {
    /// Migrates if asked, and relays on `pool` until `stop` is cancelled.
    async fn relay_on<DB: OutboxDatabase>(
        self,
        pool: Pool<DB>,
        configure: Option<Configure<DB>>,
        stop: &CancellationToken,
    ) -> Result<(), Error> {
        let outbox = Outbox::<DB>::new(self.outbox);
        if self.migrate {
            outbox.migrate(&pool).await?;
        }
        let confirmed = Arc::new(AtomicU64::new(0));
        let mut publisher = self.broker.publisher();
        if let Some(wrap) = self.wrap {
            publisher = wrap(publisher);
        }
        let publisher = BoxPublisher::new(Counting {
            inner: publisher,
            confirmed: Arc::clone(&confirmed),
        });
        let mut relay = Relay::new(pool.clone(), outbox.clone(), publisher);
        if let Some(configure) = configure {
            relay = configure(relay);
        }
        let location = metrics::outbox_label(&outbox);
        tracing::info!(
            outbox = %location,
            broker = %self.broker,
            relay = ?relay,
            "the outbox relay is running"
        );
        let progress = tokio::spawn(progress(
            pool.clone(),
            outbox,
            Arc::clone(&confirmed),
            self.progress_interval,
        ));
        relay.run(stop.clone()).await;
        progress.abort();
        tracing::info!(
            outbox = %location,
            confirmed = confirmed.load(Ordering::Relaxed),
            "the outbox relay stopped"
        );
        pool.close().await;
        Ok(())
    }
}

impl fmt::Debug for RelayProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The store URL may hold a password.
        f.debug_struct("RelayProcess")
            .field("broker", &self.broker)
            .field("outbox", &self.outbox)
            .field("migrate", &self.migrate)
            .field("max_connections", &self.max_connections)
            .field("progress_interval", &self.progress_interval)
            .finish_non_exhaustive()
    }
}

/// Counts the messages the broker confirmed.
struct Counting {
    inner: BoxPublisher,
    confirmed: Arc<AtomicU64>,
}

impl Publisher for Counting {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let confirmations = self.inner.publish_batch(batch).await;
        let ok = confirmations.iter().filter(|c| c.is_ok()).count();
        self.confirmed
            .fetch_add(u64::try_from(ok).unwrap_or(u64::MAX), Ordering::Relaxed);
        confirmations
    }
}

/// Logs, every `interval`, how many messages were confirmed since the last time and how many
/// are pending, and sets the pending gauge.
async fn progress<DB: OutboxDatabase>(
    pool: Pool<DB>,
    outbox: Outbox<DB>,
    confirmed: Arc<AtomicU64>,
    interval: Duration,
) {
    let location = metrics::outbox_label(&outbox);
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let (mut last, mut since) = (0, Instant::now());
    loop {
        ticks.tick().await;
        let total = confirmed.load(Ordering::Relaxed);
        let elapsed = since.elapsed().as_secs_f64();
        match metrics::record_pending(&outbox, &pool).await {
            Ok(pending) => tracing::info!(
                outbox = %location,
                confirmed = total - last,
                per_second = ((total - last) as f64 / elapsed).round(),
                pending,
                "outbox relay progress"
            ),
            Err(error) => tracing::warn!(
                outbox = %location,
                confirmed = total - last,
                error = &error as &dyn std::error::Error,
                "outbox relay progress: cannot count the pending messages"
            ),
        }
        (last, since) = (total, Instant::now());
    }
}
