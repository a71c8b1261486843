//! [`PostgresOptions`]: where a [`PostgresStore`](crate::PostgresStore) keeps its records.

use std::time::Duration;

use idem_core::ManualClock;

use crate::{SchemaName, TableName};

/// Where a [`PostgresStore`](crate::PostgresStore) keeps its records: the schema and the table
/// (`public.idem_records` by default), and the pool that
/// [`PostgresStore::connect`](crate::PostgresStore::connect) opens.
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
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pub(crate) schema: SchemaName,
    pub(crate) table: TableName,
    pub(crate) pool_size: u32,
    pub(crate) pool_timeout: Duration,
    pub(crate) test_clock: Option<ManualClock>,
}

impl PostgresOptions {
    /// `public.idem_records`, a pool of 10 connections with a 5-second timeout, the database
    /// server's clock.
    pub fn new() -> Self {
        Self {
            schema: SchemaName::default(),
            table: TableName::default(),
            pool_size: 10,
            pool_timeout: Duration::from_secs(5),
            test_clock: None,
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
    /// first connection, and how long an operation then waits for a free connection before the
    /// store reports itself unavailable (HTTP front ends answer 503).
    #[must_use]
    pub fn pool_timeout(mut self, timeout: Duration) -> Self {
        self.pool_timeout = timeout;
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

impl Default for PostgresOptions {
    fn default() -> Self {
        Self::new()
    }
}
