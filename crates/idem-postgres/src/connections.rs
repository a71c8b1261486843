//! The connections the store runs its own operations on.
//!
//! A sqlx pool pings every connection it takes back (a round trip to the server, from a task it
//! spawns): two extra round trips per new key, on top of the two statements. These connections
//! come from a [`deadpool`] pool instead, opened with the sqlx pool's options, and go back to it
//! as they are once a statement has finished. A connection whose statement failed or was
//! cancelled half-way may hold a half-read answer: it is closed instead.
//!
//! They always use the generic plan of a prepared statement (`plan_cache_mode`): the writes take
//! arrays, whose length a custom plan would see, so PostgreSQL would plan every execution again.
//! A connection keeps that plan for its whole life, and it is made from the table's statistics at
//! the first execution: on a new table, or one whose statistics are stale (autovacuum off, or
//! behind), PostgreSQL believes the table tiny and plans to read all of it (a sequential scan and
//! a hash join for `acquire`, every live record through the `expires_at` index for the others),
//! work that then grows with the table at every batch. Every statement on given records finds
//! them by primary key, so these connections rule the other ways out ([`PLANNER`]): the plans
//! are index lookups by `(scope, key)` in nested loops, whatever the statistics say. (The writes
//! check a record's state in a form no index serves, so that the operators' index on
//! `(state, created_at)` is no other way either.) The operators' listing walks that index, with
//! no sort: its plan cannot depend on the statistics either.

use std::ops::{Deref, DerefMut};

use deadpool::managed::{self, Metrics, Object, PoolError, RecycleResult, Timeouts};
use idem_core::StoreError;
use sqlx::{ConnectOptions, PgConnection, postgres::PgConnectOptions};

/// The planner settings of the store's connections (see the module's docs). JIT compilation is
/// off too: a plan that only a disabled method could make costs more than `jit_above_cost`, and
/// compiling a single-row statement would cost far more than running it.
pub(crate) const PLANNER: [(&str, &str); 7] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
    ("enable_material", "off"),
    ("jit", "off"),
];

/// Opens connections as the sqlx pool it was made from would.
#[derive(Debug)]
pub(crate) struct Manager {
    options: PgConnectOptions,
}

impl managed::Manager for Manager {
    type Type = PgConnection;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<PgConnection, sqlx::Error> {
        self.options.connect().await
    }

    async fn recycle(&self, _: &mut PgConnection, _: &Metrics) -> RecycleResult<sqlx::Error> {
        // Only connections whose last statement completed come back (see `Checkout::keep`).
        Ok(())
    }
}

/// The pool of the store's connections.
#[derive(Debug)]
pub(crate) struct Connections {
    pool: managed::Pool<Manager>,
}

impl Connections {
    /// At most `size` connections opened with `options`, waiting at most `timeout` for one.
    pub(crate) fn new(
        options: PgConnectOptions,
        size: usize,
        timeout: std::time::Duration,
    ) -> Self {
        let options = options.options(PLANNER);
        let manager = Manager { options };
        let pool = managed::Pool::builder(manager)
            .max_size(size)
            .timeouts(Timeouts {
                wait: Some(timeout),
                create: Some(timeout),
                recycle: None,
            })
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .expect("a runtime is set, so timeouts are allowed");
        Self { pool }
    }

    /// A connection, idle or new.
    pub(crate) async fn get(&self, table: &str) -> Result<Checkout, StoreError> {
        match self.pool.get().await {
            Ok(object) => Ok(Checkout {
                object: Some(object),
            }),
            Err(PoolError::Backend(error)) => Err(crate::error::store_error(error, table)),
            Err(error) => Err(StoreError::unavailable(error)),
        }
    }

    /// Closes the idle connections; later [`get`](Self::get)s fail.
    pub(crate) fn close(&self) {
        self.pool.close();
    }
}

/// A connection taken from [`Connections`]: closed when dropped, unless [`kept`](Self::keep).
pub(crate) struct Checkout {
    object: Option<Object<Manager>>,
}

impl Checkout {
    /// Gives the connection back for the next operation, unless `result`, the operation's,
    /// says that it failed (a lost lease is an answer like any other; everything else might
    /// have broken it); returns `result`.
    pub(crate) fn keep<T>(mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if matches!(result, Ok(_) | Err(StoreError::LeaseLost)) {
            drop(self.object.take());
        }
        result
    }
}

impl Deref for Checkout {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.object.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Checkout {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.object.as_mut().expect("present until dropped")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            drop(Object::take(object));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use std::time::Duration;

    use idem_test_support::{PgSchema, require};
    use sqlx::{AssertSqlSafe, PgPool};

    use super::*;
    use crate::{PostgresOptions, PostgresStore, Statement, sql::Sql};

    /// The generic plan of `text`, whose parameters have `types`, on `connection`: its lines.
    /// A migrated records table in a schema of its own, and a pool of one of the store's
    /// connections to it.
    async fn migrated(url: &str) -> (PgSchema, Sql, Connections) {
        let schema = PgSchema::new(url);
        let options = PostgresOptions::new().schema(schema.name().parse().unwrap());
        let pool = PgPool::connect(url).await.unwrap();
        PostgresStore::migrate(&pool, &options).await.unwrap();
        pool.close().await;
        let sql = Sql::new(&options.schema, &options.table);
        let connections = Connections::new(url.parse().unwrap(), 1, Duration::from_secs(5));
        (schema, sql, connections)
    }

    /// The scans of the records table in a plan's `lines`.
    fn scans(lines: &[String]) -> Vec<&str> {
        lines
            .iter()
            .map(|line| line.trim_start_matches([' ', '-', '>']))
            .filter(|line| line.contains("Scan") && line.contains(" on idem_records"))
            .collect()
    }

    async fn plan(connection: &mut PgConnection, text: &str, types: &[&str]) -> Vec<String> {
        let prepare = format!("PREPARE planned ({}) AS {text}", types.join(", "));
        sqlx::raw_sql(AssertSqlSafe(prepare))
            .execute(&mut *connection)
            .await
            .unwrap();
        let nulls = vec!["NULL"; types.len()].join(", ");
        let explain = format!("EXPLAIN (COSTS OFF) EXECUTE planned ({nulls})");
        let lines = sqlx::query_scalar(AssertSqlSafe(explain))
            .fetch_all(&mut *connection)
            .await
            .unwrap();
        sqlx::raw_sql("DEALLOCATE planned")
            .execute(&mut *connection)
            .await
            .unwrap();
        lines
    }

    #[tokio::test]
    async fn on_a_table_without_statistics_every_statement_looks_records_up_by_primary_key() {
        let url = require!(Postgres);
        let (_schema, sql, connections) = migrated(&url).await;
        let mut connection = connections.get(&sql.table).await.unwrap();
        let arrays = |kinds: &[&'static str]| {
            let mut types = vec!["bigint"];
            types.extend(kinds);
            types
        };
        // Each statement, its parameters' types, and how many times it looks a record up.
        let statements = [
            (
                Statement::Acquire,
                arrays(&["bytea[]", "bytea[]", "bytea[]", "bigint[]", "bigint[]"]),
                3,
            ),
            (
                Statement::Complete,
                arrays(&["bytea[]", "bytea[]", "bigint[]", "bytea[]", "bigint[]"]),
                1,
            ),
            (
                Statement::Renew,
                arrays(&["bytea[]", "bytea[]", "bigint[]", "bigint[]"]),
                1,
            ),
            (
                Statement::Release,
                arrays(&["bytea[]", "bytea[]", "bigint[]"]),
                1,
            ),
            (Statement::Get, arrays(&["bytea", "bytea"]), 1),
            (Statement::Forget, arrays(&["bytea", "bytea"]), 1),
        ];
        for (statement, types, lookups) in statements {
            let lines = plan(&mut connection, sql.text(statement), &types).await;
            let scans = scans(&lines);
            let by_key = scans
                .iter()
                .filter(|scan| scan.starts_with("Index Scan using idem_records_pkey on "))
                .count();
            assert_eq!(
                (scans.len(), by_key),
                (lookups, lookups),
                "{statement:?}:\n{}",
                lines.join("\n")
            );
        }
        drop(connection);
        connections.close();
    }

    #[tokio::test]
    async fn listing_processing_records_walks_the_state_index_backwards_from_the_page_bound() {
        let url = require!(Postgres);
        let (_schema, sql, connections) = migrated(&url).await;
        let mut connection = connections.get(&sql.table).await.unwrap();
        let types = [
            "bigint", "text[]", "bigint", "bytea", "bigint", "bytea", "bytea", "bigint",
        ];
        let lines = plan(&mut connection, sql.text(Statement::List), &types).await;
        let scans = scans(&lines);
        // No sort: the walk yields the records newest first, and stops at the limit.
        assert_eq!(
            (scans, lines.iter().any(|line| line.contains("Sort"))),
            (
                vec!["Index Scan Backward using idem_records_state_created on idem_records r"],
                false
            ),
            "{}",
            lines.join("\n")
        );
        // It starts at the page's bound (the row comparison, as far as the index holds it).
        let start = lines
            .iter()
            .map(|line| line.trim())
            .find(|line| line.starts_with("Index Cond:"))
            .unwrap();
        assert!(
            start.starts_with("Index Cond: ((state = s.state) AND (created_at <= LEAST("),
            "{}",
            lines.join("\n")
        );
        drop(connection);
        connections.close();
    }
}
