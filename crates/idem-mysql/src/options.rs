//! [`MysqlOptions`]: where a [`MysqlStore`](crate::MysqlStore) keeps its records, and how it
//! connects.

use std::{fmt, str::FromStr, time::Duration};

use idem_core::{
    ManualClock,
    store_url::{InvalidStoreUrl, UrlParts, UrlProblem, count},
};
use sqlx::{
    ConnectOptions, Connection, MySqlPool,
    mysql::{MySqlConnectOptions, MySqlPoolOptions},
};

use crate::{BatchForm, Error, TableName};

/// What an unknown parameter's error says is known.
const KNOWN: &str = "idem takes table, pool_size, batch_size, batches_in_flight, \
                     batch_overlap_ms, queue_size; the others go to MySQL's driver: ssl-mode, ssl-ca, ssl-cert, ssl-key, charset, \
                     collation, socket, statement-cache-capacity";
/// The parameters sqlx reads (`sqlx-mysql`'s `options/parse.rs`), passed on as they are.
const DRIVER_PARAMETERS: &[&str] = &[
    "ssl-mode",
    "sslmode",
    "ssl-ca",
    "sslca",
    "ssl-cert",
    "sslcert",
    "ssl-key",
    "sslkey",
    "charset",
    "collation",
    "socket",
    "statement-cache-capacity",
];

/// Where a [`MysqlStore`](crate::MysqlStore) keeps its records: the table (`idem_records` by
/// default) in the connection's database, the connections it opens, how it batches its writes,
/// and, when made from a URL ([`from_url`](Self::from_url)), the server to connect to and how
/// (TLS included).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_mysql::MysqlOptions;
///
/// let options = MysqlOptions::new()
///     .table("payment_keys".parse()?)
///     .pool_size(16)
///     .pool_timeout(Duration::from_secs(2));
/// # drop(options);
/// # Ok::<(), idem_mysql::InvalidName>(())
/// ```
#[derive(Clone)]
pub struct MysqlOptions {
    pub(crate) table: TableName,
    pub(crate) pool_size: u32,
    pub(crate) pool_timeout: Duration,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) batch_size: usize,
    pub(crate) batches_in_flight: usize,
    pub(crate) batch_overlap: Duration,
    pub(crate) queue_size: usize,
    pub(crate) test_clock: Option<ManualClock>,
    pub(crate) batch_form: Option<BatchForm>,
    pub(crate) connection: Option<MySqlConnectOptions>,
    /// The URL the options were made from, password hidden.
    pub(crate) url: Option<String>,
}

impl MysqlOptions {
    /// The table unless [`table`](Self::table) says otherwise: `idem_records`.
    pub const DEFAULT_TABLE: TableName = TableName::from_static("idem_records");
    /// How many writes of one kind one round trip commits at most, unless
    /// [`batch_size`](Self::batch_size) says otherwise: 64.
    pub const DEFAULT_BATCH_SIZE: usize = 64;
    /// How many batches of one kind of write run at once at most, unless
    /// [`batches_in_flight`](Self::batches_in_flight) says otherwise: 2.
    pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 2;
    /// How long a batch runs before the next one of its kind starts beside it, unless
    /// [`batch_overlap`](Self::batch_overlap) says otherwise: 50 ms.
    pub const DEFAULT_BATCH_OVERLAP: Duration = Duration::from_millis(50);
    /// How many writes of one kind wait for a batch at most, unless
    /// [`queue_size`](Self::queue_size) says otherwise: 1024.
    pub const DEFAULT_QUEUE_SIZE: usize = 1024;

    /// `idem_records`, a pool of 10 connections with a 5-second timeout, batches of at most
    /// [64](Self::DEFAULT_BATCH_SIZE) writes, [2](Self::DEFAULT_BATCHES_IN_FLIGHT) at a time, from
    /// queues of [1024](Self::DEFAULT_QUEUE_SIZE), the database server's clock.
    pub fn new() -> Self {
        Self {
            table: Self::DEFAULT_TABLE,
            pool_size: 10,
            pool_timeout: Duration::from_secs(5),
            statement_timeout: None,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            batches_in_flight: Self::DEFAULT_BATCHES_IN_FLIGHT,
            batch_overlap: Self::DEFAULT_BATCH_OVERLAP,
            queue_size: Self::DEFAULT_QUEUE_SIZE,
            test_clock: None,
            batch_form: None,
            connection: None,
            url: None,
        }
    }

    /// `mysql://[user[:password]@]host[:port]/database[?parameters]` (or `mariadb://`).
    ///
    /// idem reads these parameters:
    ///
    /// - `table`: the records table (default `idem_records`), in the URL's database;
    /// - `pool_size`: the connections of the pool (default 10, [`pool_size`](Self::pool_size));
    /// - `batch_size`: the most writes of one kind one round trip commits (default 64,
    ///   [`batch_size`](Self::batch_size));
    /// - `batches_in_flight`: the most batches of one kind running at once (default 2,
    ///   [`batches_in_flight`](Self::batches_in_flight));
    /// - `batch_overlap_ms`: how long a batch runs, in milliseconds, before another of its kind
    ///   starts beside it (default 50, [`batch_overlap`](Self::batch_overlap); 0 starts it at once);
    /// - `queue_size`: the most writes of one kind waiting for a batch (default 1024,
    ///   [`queue_size`](Self::queue_size)).
    ///
    /// Each count is a whole number, at least 1. The others go to the driver, under MySQL's own
    /// names: `ssl-mode` (`DISABLED`, `PREFERRED`, the default, `REQUIRED`, `VERIFY_CA`,
    /// `VERIFY_IDENTITY`), `ssl-ca` (the CA that signed the server's certificate), `ssl-cert` and
    /// `ssl-key` (a client certificate), `charset`, `collation`, `socket`,
    /// `statement-cache-capacity`. Without `ssl-ca`, `VERIFY_CA` and `VERIFY_IDENTITY` trust the
    /// Mozilla root certificates built into idem. TLS is rustls.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_mysql::MysqlOptions;
    ///
    /// let options = MysqlOptions::from_url(
    ///     "mysql://app:pw@db/pay?table=keys&ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem",
    /// )?;
    /// assert_eq!(options.url(), Some(
    ///     "mysql://app:***@db/pay?table=keys&ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem"
    /// ));
    /// assert_eq!(options.connect_options().get_host(), "db");
    /// assert_eq!(options.table_name().as_str(), "keys");
    ///
    /// let error = MysqlOptions::from_url("mysql://db/pay?tabel=keys").unwrap_err();
    /// assert!(error.to_string().contains("unknown parameter `tabel`"));
    /// # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, InvalidStoreUrl> {
        let mut parts = UrlParts::split(url)?;
        if !matches!(parts.scheme(), "mysql" | "mariadb") {
            return Err(parts.error("expected mysql://… or mariadb://…"));
        }
        if parts.path().trim_start_matches('/').is_empty() {
            return Err(parts.error("no database: give one as the path, mysql://HOST/DATABASE"));
        }
        let table = parts.take("table", TableName::from_str)?;
        let pool_size = parts.take("pool_size", count::<u32>)?;
        let batch_size = parts.take("batch_size", count::<usize>)?;
        let batches_in_flight = parts.take("batches_in_flight", count::<usize>)?;
        let batch_overlap = parts.take("batch_overlap_ms", u64::from_str)?;
        let queue_size = parts.take("queue_size", count::<usize>)?;
        parts.refuse_unknown(|name| DRIVER_PARAMETERS.contains(&name), KNOWN)?;
        let connect = format!(
            "mysql://{}{}{}{}",
            parts.credentials(),
            parts.hosts(),
            parts.path(),
            parts.remaining_query()
        );
        let connection = MySqlConnectOptions::from_str(&connect)
            .map_err(|error| parts.invalid(UrlProblem::Driver(driver_reason(error))))?;
        let mut options = Self::new()
            .table(table.unwrap_or(Self::DEFAULT_TABLE))
            .connection(connection);
        if let Some(size) = pool_size {
            options = options.pool_size(size);
        }
        if let Some(size) = batch_size {
            options = options.batch_size(size);
        }
        if let Some(batches) = batches_in_flight {
            options = options.batches_in_flight(batches);
        }
        if let Some(millis) = batch_overlap {
            options = options.batch_overlap(Duration::from_millis(millis));
        }
        if let Some(size) = queue_size {
            options = options.queue_size(size);
        }
        options.url = Some(parts.shown().to_owned());
        Ok(options)
    }

    /// Sets the table that holds the records, in the connection's database.
    /// [`MysqlStore::migrate`](crate::MysqlStore::migrate) creates it next to
    /// `<table>_tokens`, `<table>_census`, `<table>_parts` (the parts of streamed responses)
    /// and `<table>_migrations`.
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// Sets how many connections the store opens for its own operations (at least 1), and the
    /// size of the sqlx pool that [`MysqlStore::connect`](crate::MysqlStore::connect) opens for
    /// the rest (purging, the census, readiness checks).
    #[must_use]
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Sets how long [`MysqlStore::connect`](crate::MysqlStore::connect) tries to open its first
    /// connection, and how long an operation then waits for a free connection, or for room in its
    /// [queue](Self::queue_size), before the store reports itself unavailable (HTTP front ends
    /// answer 503).
    #[must_use]
    pub fn pool_timeout(mut self, timeout: Duration) -> Self {
        self.pool_timeout = timeout;
        self
    }

    /// Sets how long one round trip of the store's own operations may take, waiting for locks
    /// included: past it the connection is closed (the server rolls its transaction back) and the
    /// operation fails as unavailable (HTTP front ends answer 503). The store's connections also
    /// wait at most this long for a row lock (`innodb_lock_wait_timeout`, in whole seconds,
    /// rounded up). Unset, the server's settings apply (a lock wait of 50 s by default).
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout);
        self
    }

    /// Sets how many writes of one kind (acquisitions, completions, renewals, releases) the store
    /// commits together at most, in one round trip and one transaction (at least 1; 1 turns
    /// batching off).
    ///
    /// Each kind of write has a queue and runs [a batch or two](Self::batches_in_flight) at a
    /// time: the writes that arrive while they run wait, and the next batch takes them together,
    /// each caller answered after the commit with its own result. A write that finds room runs at
    /// once, so batching adds no wait when the store is idle. When the server rejects a batch for
    /// what one write may have caused (a data exception, a deadlock), each write runs again on its
    /// own; when a batch fails as a whole otherwise (a connection lost, a timeout), every write in
    /// it gets the error, and none of them was acknowledged.
    #[must_use]
    pub fn batch_size(mut self, size: usize) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// Sets how many batches of one kind of write may run at once, each on its own connection (at
    /// least 1). Beyond the first, a batch starts only once the running ones have run for the
    /// [overlap delay](Self::batch_overlap).
    #[must_use]
    pub fn batches_in_flight(mut self, batches: usize) -> Self {
        self.batches_in_flight = batches.max(1);
        self
    }

    /// Sets how long a batch runs before the next batch of its kind may start beside it (default
    /// [50 ms](Self::DEFAULT_BATCH_OVERLAP); zero starts it as soon as one is waiting).
    ///
    /// Concurrent batches of new records insert at the end of the same indexes, and InnoDB makes
    /// them contend there: one batch at a time commits more keys per second, at less server CPU
    /// per key, than two. But a batch can wait on a row lock (a key your own transaction holds,
    /// [`complete_in`](crate::MysqlStore::complete_in)) for up to the server's lock wait timeout;
    /// after this delay the writes that arrived meanwhile run beside it instead of behind it.
    #[must_use]
    pub fn batch_overlap(mut self, delay: Duration) -> Self {
        self.batch_overlap = delay;
        self
    }

    /// Sets how many writes of one kind may wait for a batch (at least 1). A write that finds its
    /// queue full waits for room up to the [pool timeout](Self::pool_timeout), then fails with
    /// [`StoreError::Unavailable`](idem_core::StoreError::Unavailable)
    /// ([`BatchError::QueueFull`](crate::BatchError::QueueFull)).
    #[must_use]
    pub fn queue_size(mut self, size: usize) -> Self {
        self.queue_size = size.max(1);
        self
    }

    /// Sets the server to connect to and how, for
    /// [`MysqlStore::connect_with`](crate::MysqlStore::connect_with) and
    /// [`connect_pool`](Self::connect_pool). [`from_url`](Self::from_url) sets it from the URL.
    #[must_use]
    pub fn connection(mut self, options: MySqlConnectOptions) -> Self {
        self.connection = Some(options);
        self
    }

    /// The table that holds the records.
    pub fn table_name(&self) -> &TableName {
        &self.table
    }

    /// The URL these options were made from, password hidden: for messages and logs.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// How the store connects: the [connection](Self::connection), by default sqlx's
    /// (`localhost:3306` as `root`).
    pub fn connect_options(&self) -> MySqlConnectOptions {
        self.connection.clone().unwrap_or_default()
    }

    /// Opens the pool [`MysqlStore::connect_with`](crate::MysqlStore::connect_with) opens:
    /// [`pool_size`](Self::pool_size) connections with the [connect
    /// options](Self::connect_options), waiting [`pool_timeout`](Self::pool_timeout) for one.
    ///
    /// One connection is opened first, so that an unreachable server, a refused login or a
    /// certificate that TLS refuses is reported at once with its cause.
    pub async fn connect_pool(&self) -> Result<MySqlPool, Error> {
        let connect = self.connect_options();
        if connect.get_database().is_none() {
            return Err(Error::NoDatabase);
        }
        let connection = tokio::time::timeout(self.pool_timeout, connect.connect())
            .await
            .map_err(|_| {
                Error::Connect(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", self.pool_timeout),
                )))
            })?
            .map_err(Error::Connect)?;
        let _ = connection.close().await;
        MySqlPoolOptions::new()
            .max_connections(self.pool_size)
            .acquire_timeout(self.pool_timeout)
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(Error::Connect)
    }

    /// How each round trip's statements are sent ([`BatchForm`]). Unless set, the server's
    /// `VERSION()` decides when the store opens: one compound statement on MariaDB, which
    /// answers it with one packet and one per result set, and `;`-separated statements on MySQL,
    /// which answers each statement with its own packet. Both forms run the same statements.
    #[must_use]
    pub fn batch_form(mut self, form: BatchForm) -> Self {
        self.batch_form = Some(form);
        self
    }

    /// **For tests only**: reads "now" from `clock` instead of the database server's clock, so
    /// that a test can move time by hand (lease expiry, takeover, TTL) without waiting.
    ///
    /// In production the store always uses the server's clock, so that every instance sharing the
    /// database agrees on time whatever its own clock says; never set this outside tests.
    #[must_use]
    pub fn test_clock(mut self, clock: ManualClock) -> Self {
        self.test_clock = Some(clock);
        self
    }
}

impl FromStr for MysqlOptions {
    type Err = InvalidStoreUrl;

    /// [`MysqlOptions::from_url`].
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::from_url(url)
    }
}

impl fmt::Debug for MysqlOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connect options hold the password: only the URL, password hidden, is shown.
        f.debug_struct("MysqlOptions")
            .field("url", &self.url)
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("pool_timeout", &self.pool_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("batch_size", &self.batch_size)
            .field("batches_in_flight", &self.batches_in_flight)
            .field("batch_overlap", &self.batch_overlap)
            .field("queue_size", &self.queue_size)
            .field("test_clock", &self.test_clock.is_some())
            .field("batch_form", &self.batch_form)
            .finish_non_exhaustive()
    }
}

impl Default for MysqlOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// What the driver says is wrong, without the "error with configuration" sqlx wraps it in.
fn driver_reason(error: sqlx::Error) -> Box<dyn std::error::Error + Send + Sync> {
    let mut reason: Box<dyn std::error::Error + Send + Sync> = Box::new(error);
    loop {
        match reason.downcast::<sqlx::Error>() {
            Ok(error) => match *error {
                sqlx::Error::Configuration(inner) => reason = inner,
                other => return Box::new(other),
            },
            Err(other) => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> MysqlOptions {
        MysqlOptions::from_url(url).unwrap()
    }

    fn error(url: &str) -> String {
        MysqlOptions::from_url(url).unwrap_err().to_string()
    }

    #[test]
    fn idem_parameters_are_taken_out_and_the_others_passed_on() {
        let options = parse(
            "mysql://app:pw@db:3307/pay?ssl-mode=DISABLED&table=keys&pool_size=16&batch_size=32&\
             batches_in_flight=3&batch_overlap_ms=0&queue_size=4096",
        );
        assert_eq!(
            (
                options.table.as_str(),
                options.pool_size,
                options.batch_size,
                options.batches_in_flight,
                options.batch_overlap,
                options.queue_size
            ),
            ("keys", 16, 32, 3, Duration::ZERO, 4096)
        );
        let connect = options.connect_options();
        assert_eq!(connect.get_host(), "db");
        assert_eq!(connect.get_port(), 3307);
        assert_eq!(connect.get_username(), "app");
        assert_eq!(connect.get_database(), Some("pay"));
        assert_eq!(format!("{:?}", connect.get_ssl_mode()), "Disabled");
        assert_eq!(
            options.url(),
            Some(
                "mysql://app:***@db:3307/pay?ssl-mode=DISABLED&table=keys&pool_size=16&\
                 batch_size=32&batches_in_flight=3&batch_overlap_ms=0&queue_size=4096"
            )
        );
        let options = parse("mariadb://db/pay");
        assert_eq!(options.table.as_str(), "idem_records");
        assert_eq!(options.connect_options().get_database(), Some("pay"));
    }

    #[test]
    fn ssl_modes_are_mysqls() {
        let mode = |url: &str| format!("{:?}", parse(url).connect_options().get_ssl_mode());
        assert_eq!(mode("mysql://db/pay"), "Preferred");
        assert_eq!(mode("mysql://db/pay?ssl-mode=REQUIRED"), "Required");
        assert_eq!(
            mode("mysql://db/pay?ssl-mode=VERIFY_CA&ssl-ca=/ca.pem"),
            "VerifyCa"
        );
        assert_eq!(
            mode(
                "mysql://db/pay?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&ssl-cert=/c.pem&ssl-key=/k.pem"
            ),
            "VerifyIdentity"
        );
        assert_eq!(
            error("mysql://db/pay?ssl-mode=SOMETIMES"),
            "invalid store URL `mysql://db/pay?ssl-mode=SOMETIMES`: unknown value \"SOMETIMES\" \
             for `ssl_mode`"
        );
    }

    #[test]
    fn bad_parameters_are_explained_in_one_line() {
        assert_eq!(
            error("mysql://db/pay?table=Keys"),
            "invalid store URL `mysql://db/pay?table=Keys`: `table=Keys`: a table name has \
             lower-case ASCII letters, digits and `_` only, and does not start with a digit; 'K' \
             at byte 0 is not allowed"
        );
        assert_eq!(
            error("mysql://db/pay?pool_size=0"),
            "invalid store URL `mysql://db/pay?pool_size=0`: `pool_size=0`: expected 1 or more"
        );
        assert_eq!(
            error("mysql://u:pw@db/pay?tabel=keys"),
            "invalid store URL `mysql://u:***@db/pay?tabel=keys`: unknown parameter `tabel` (idem \
             takes table, pool_size, batch_size, batches_in_flight, batch_overlap_ms, queue_size; \
             the others go to MySQL's driver: ssl-mode, ssl-ca, ssl-cert, ssl-key, charset, \
             collation, socket, statement-cache-capacity)"
        );
        assert_eq!(
            error("mysql://db/pay?batch_overlap_ms=-1"),
            "invalid store URL `mysql://db/pay?batch_overlap_ms=-1`: `batch_overlap_ms=-1`: \
             invalid digit found in string"
        );
        assert_eq!(
            error("mysql://u:pw@db"),
            "invalid store URL `mysql://u:***@db`: no database: give one as the path, \
             mysql://HOST/DATABASE"
        );
        assert_eq!(
            error("mysql://db/?table=keys"),
            "invalid store URL `mysql://db/?table=keys`: no database: give one as the path, \
             mysql://HOST/DATABASE"
        );
        assert_eq!(
            error("postgres://db/pay"),
            "invalid store URL `postgres://db/pay`: expected mysql://… or mariadb://…"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let shown = format!("{:?}", parse("mysql://app:s3cr3t@db/pay"));
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("mysql://app:***@db/pay"), "{shown}");
    }
}
