//! [`PostgresOptions`]: where a [`PostgresStore`](crate::PostgresStore) keeps its records.

use std::{fmt, time::Duration};

use idem_core::ManualClock;
use sqlx::{
    ConnectOptions, Connection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use crate::{Error, SchemaName, TableName};

/// Where a [`PostgresStore`](crate::PostgresStore) keeps its records: the schema and the table
/// (`public.idem_records` by default), the pool that
/// [`PostgresStore::connect`](crate::PostgresStore::connect) opens, and, when made from a URL
/// ([`from_url`](Self::from_url)), the server to connect to and how (TLS included).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_postgres::PostgresOptions;
///
/// let options = PostgresOptions::new()
///     .schema("billing".parse()?)
///     .table("payment_keys".parse()?)
///     .pool_size(16)
///     .pool_timeout(Duration::from_secs(2));
/// # drop(options);
/// # Ok::<(), idem_postgres::InvalidName>(())
/// ```
#[derive(Clone)]
pub struct PostgresOptions {
    pub(crate) schema: SchemaName,
    pub(crate) table: TableName,
    pub(crate) pool_size: u32,
    pub(crate) pool_timeout: Duration,
    pub(crate) statement_timeout: Option<Duration>,
    pub(crate) batch_size: usize,
    pub(crate) batches_in_flight: usize,
    pub(crate) queue_size: usize,
    pub(crate) test_clock: Option<ManualClock>,
    pub(crate) connection: Option<PgConnectOptions>,
    /// The URL the options were made from, password hidden.
    pub(crate) url: Option<String>,
}

impl PostgresOptions {
    /// The schema of the table unless [`schema`](Self::schema) says otherwise: `public`.
    pub const DEFAULT_SCHEMA: SchemaName = SchemaName::from_static("public");
    /// The table unless [`table`](Self::table) says otherwise: `idem_records`.
    pub const DEFAULT_TABLE: TableName = TableName::from_static("idem_records");

    /// How many writes of one kind one statement commits at most, unless
    /// [`batch_size`](Self::batch_size) says otherwise: 64.
    pub const DEFAULT_BATCH_SIZE: usize = 64;
    /// How many batches of one kind of write run at once at most, unless
    /// [`batches_in_flight`](Self::batches_in_flight) says otherwise: 2.
    pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 2;
    /// How many writes of one kind wait for a batch at most, unless
    /// [`queue_size`](Self::queue_size) says otherwise: 1024.
    pub const DEFAULT_QUEUE_SIZE: usize = 1024;

    /// `public.idem_records`, a pool of 10 connections with a 5-second timeout, batches of at
    /// most [64](Self::DEFAULT_BATCH_SIZE) writes, [2](Self::DEFAULT_BATCHES_IN_FLIGHT) at a time,
    /// from queues of [1024](Self::DEFAULT_QUEUE_SIZE), the database server's clock.
    pub fn new() -> Self {
        Self {
            schema: Self::DEFAULT_SCHEMA,
            table: Self::DEFAULT_TABLE,
            pool_size: 10,
            pool_timeout: Duration::from_secs(5),
            statement_timeout: None,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            batches_in_flight: Self::DEFAULT_BATCHES_IN_FLIGHT,
            queue_size: Self::DEFAULT_QUEUE_SIZE,
            test_clock: None,
            connection: None,
            url: None,
        }
    }

    /// Sets the schema that holds the table. [`PostgresStore::migrate`](crate::PostgresStore::migrate)
    /// creates it when missing.
    #[must_use]
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.schema = schema;
        self
    }

    /// Sets the table that holds the records. Its migrations are tracked in
    /// `<table>_migrations`, in the same schema.
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// Sets how many connections the store opens for its own operations (at least 1), and the
    /// size of the sqlx pool that [`PostgresStore::connect`](crate::PostgresStore::connect) opens
    /// for the rest (purging, readiness checks). A store built on a pool of your own with
    /// [`PostgresStore::open`](crate::PostgresStore::open) opens its connections with that pool's
    /// connect options.
    #[must_use]
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Sets how long [`PostgresStore::connect`](crate::PostgresStore::connect) tries to open its
    /// first connection, and how long an operation then waits for a free connection, or for room
    /// in its [queue](Self::queue_size), before the store reports itself unavailable (HTTP front
    /// ends answer 503).
    #[must_use]
    pub fn pool_timeout(mut self, timeout: Duration) -> Self {
        self.pool_timeout = timeout;
        self
    }

    /// Sets how long a statement of the store may run (PostgreSQL's `statement_timeout`) and wait
    /// for a lock (`lock_timeout`), on every connection the store opens: a statement stuck
    /// behind a lock or a slow server fails instead of holding its caller, and the store reports
    /// itself unavailable (SQLSTATE 57014 or 55P03; HTTP front ends answer 503). A zero duration
    /// turns both limits off, as it does in PostgreSQL. Unset, the server's settings apply.
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout);
        self
    }

    /// Sets how many writes of one kind (acquisitions, completions, renewals, releases) the store
    /// commits together at most, in one statement (at least 1; 1 turns batching off).
    ///
    /// Each kind of write has a queue and runs [a statement or two](Self::batches_in_flight) at a
    /// time: the writes that arrive while they run wait, and the next statement takes them
    /// together, one round trip and one commit for all, each caller answered after the commit
    /// with its own result. A write that finds room runs at once, so batching adds no wait when
    /// the store is idle. Several writes on one key run in the order they came, in successive
    /// batches (acquisitions may share one, where only the first may write). When the server rejects a batch for what one write may have caused (a
    /// data exception, a deadlock), each write runs again on its own, so that only the faulty one
    /// fails; when a batch fails as a whole otherwise (a connection lost, a statement timeout),
    /// every write in it gets the error, and none of them was acknowledged.
    ///
    /// A batch waits for the row locks its writes need: a write on a key that a transaction of
    /// yours holds ([`PostgresStore::acquire_in`](crate::PostgresStore::acquire_in)) holds its
    /// batch up until that transaction ends, or until the [statement
    /// timeout](Self::statement_timeout) fails the batch.
    #[must_use]
    pub fn batch_size(mut self, size: usize) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// Sets how many batches of one kind of write may run at once, each on its own connection (at
    /// least 1). While they run, the writes that arrive wait and form the next batch; a write on a
    /// key that a running batch holds waits for that batch. A second batch lets one execute while
    /// the other commits.
    #[must_use]
    pub fn batches_in_flight(mut self, batches: usize) -> Self {
        self.batches_in_flight = batches.max(1);
        self
    }

    /// Sets how many writes of one kind may wait for a batch (at least 1), besides those of the
    /// batches being formed and run (at most [`batch_size`](Self::batch_size) each). A write that finds
    /// its queue full waits for room up to the [pool timeout](Self::pool_timeout), then fails with
    /// [`StoreError::Unavailable`](idem_core::StoreError::Unavailable)
    /// ([`BatchError::QueueFull`](crate::BatchError::QueueFull); HTTP front ends answer 503).
    #[must_use]
    pub fn queue_size(mut self, size: usize) -> Self {
        self.queue_size = size.max(1);
        self
    }

    /// Sets the server to connect to and how, for
    /// [`PostgresStore::connect_with`](crate::PostgresStore::connect_with) and
    /// [`connect_pool`](Self::connect_pool). [`from_url`](Self::from_url) sets it from the URL.
    #[must_use]
    pub fn connection(mut self, options: PgConnectOptions) -> Self {
        self.connection = Some(options);
        self
    }

    /// The schema that holds the table.
    pub fn schema_name(&self) -> &SchemaName {
        &self.schema
    }

    /// The table that holds the records.
    pub fn table_name(&self) -> &TableName {
        &self.table
    }

    /// The URL these options were made from, password hidden: for messages and logs.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// How the store connects: the [connection](Self::connection) (by default sqlx's, from the
    /// `PG*` environment variables), with the [statement timeout](Self::statement_timeout).
    pub fn connect_options(&self) -> PgConnectOptions {
        let connection = self.connection.clone().unwrap_or_default();
        self.with_timeouts(connection)
    }

    /// Opens the pool [`PostgresStore::connect_with`](crate::PostgresStore::connect_with) opens:
    /// [`pool_size`](Self::pool_size) connections with the [connect
    /// options](Self::connect_options), waiting [`pool_timeout`](Self::pool_timeout) for one.
    ///
    /// One connection is opened first, so that an unreachable server, a refused login or a
    /// certificate that TLS refuses is reported at once with its cause: the pool would retry
    /// until its timeout, then only say that it timed out.
    pub async fn connect_pool(&self) -> Result<PgPool, Error> {
        let connect = self.connect_options();
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
        PgPoolOptions::new()
            .max_connections(self.pool_size)
            .acquire_timeout(self.pool_timeout)
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(Error::Connect)
    }

    /// `options` with the statement and lock timeouts, unless they already have them.
    pub(crate) fn with_timeouts(&self, options: PgConnectOptions) -> PgConnectOptions {
        let Some(timeout) = self.statement_timeout else {
            return options;
        };
        // Whole milliseconds, rounded up: a short timeout must not become 0, which is "none".
        let millis = timeout.as_nanos().div_ceil(1_000_000).to_string();
        let ours = format!("-c statement_timeout={millis} -c lock_timeout={millis}");
        if options
            .get_options()
            .is_some_and(|set| set.ends_with(&ours))
        {
            return options;
        }
        options.options([("statement_timeout", &millis), ("lock_timeout", &millis)])
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

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connect options hold the password: only the URL, password hidden, is shown.
        f.debug_struct("PostgresOptions")
            .field("url", &self.url)
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("pool_timeout", &self.pool_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("batch_size", &self.batch_size)
            .field("batches_in_flight", &self.batches_in_flight)
            .field("queue_size", &self.queue_size)
            .field("test_clock", &self.test_clock.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_is_public_idem_records() {
        let options = PostgresOptions::new();
        assert_eq!(options.schema_name().as_str(), "public");
        assert_eq!(options.table_name().as_str(), "idem_records");
    }

    #[test]
    fn batches_and_queues_hold_at_least_one_write() {
        let options = PostgresOptions::new();
        assert_eq!((options.batch_size, options.queue_size), (64, 1024));
        assert_eq!(options.batches_in_flight, 2);
        let options = options.batch_size(0).queue_size(0).batches_in_flight(0);
        assert_eq!((options.batch_size, options.queue_size), (1, 1));
        assert_eq!(options.batches_in_flight, 1);
    }
}
