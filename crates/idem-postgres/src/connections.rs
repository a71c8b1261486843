//! The connections the store runs its own operations on ([`idem_sql::connections`]: not a sqlx
//! pool, which pings every connection it takes back), opened with the sqlx pool's options.
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

use idem_sql::connections::Connect;
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

/// Opens the store's connections: the sqlx pool's options, with the [`PLANNER`] settings.
#[derive(Debug)]
pub(crate) struct Session {
    options: PgConnectOptions,
}

impl Session {
    pub(crate) fn new(options: PgConnectOptions) -> Self {
        Self {
            options: options.options(PLANNER),
        }
    }
}

impl Connect for Session {
    type Connection = PgConnection;

    async fn connect(&self) -> Result<PgConnection, sqlx::Error> {
        self.options.connect().await
    }
}

/// The pool of the store's connections.
pub(crate) type Connections = idem_sql::connections::Connections<Session>;
/// A connection of the store's.
pub(crate) type Checkout = idem_sql::connections::Checkout<Session>;

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
        let connections = Connections::new(
            Session::new(url.parse().unwrap()),
            1,
            Duration::from_secs(5),
        );
        (schema, sql, connections)
    }

    /// The scans of the records table in a plan's `lines`.
    fn scans(lines: &[String]) -> Vec<&str> {
        scans_of(lines, "idem_records")
    }

    /// The scans of `table` in a plan's `lines`.
    fn scans_of<'l>(lines: &'l [String], table: &str) -> Vec<&'l str> {
        let on = format!(" on {table}");
        lines
            .iter()
            .map(|line| line.trim_start_matches([' ', '-', '>']))
            .filter(|line| {
                line.contains("Scan")
                    && line
                        .split_once(&on)
                        .is_some_and(|(_, rest)| rest.is_empty() || rest.starts_with(' '))
            })
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
        let mut connection = connections
            .get(|e| crate::error::store_error(e, &sql.table))
            .await
            .unwrap();
        let arrays = |kinds: &[&'static str]| {
            let mut types = vec!["bigint"];
            types.extend(kinds);
            types
        };
        // Each statement, its parameters' types, and how many times it looks a record up and
        // how many times it reads a range of an execution's parts.
        let statements = [
            (
                Statement::Acquire,
                arrays(&["bytea[]", "bytea[]", "bytea[]", "bigint[]", "bigint[]"]),
                3,
                0,
            ),
            (
                Statement::Complete,
                arrays(&["bytea[]", "bytea[]", "bigint[]", "bytea[]", "bigint[]"]),
                1,
                0,
            ),
            (
                Statement::Renew,
                arrays(&["bytea[]", "bytea[]", "bigint[]", "bigint[]"]),
                1,
                0,
            ),
            (
                Statement::Release,
                arrays(&["bytea[]", "bytea[]", "bigint[]"]),
                1,
                0,
            ),
            (Statement::Get, arrays(&["bytea", "bytea"]), 1, 0),
            (Statement::Forget, arrays(&["bytea", "bytea"]), 1, 1),
            (Statement::ForgetParts, arrays(&["bytea", "bytea"]), 0, 1),
            (
                Statement::AppendPart,
                arrays(&["bytea", "bytea", "bigint", "bigint", "bytea"]),
                1,
                1,
            ),
            (
                Statement::ReadParts,
                arrays(&["bytea", "bytea", "bigint", "bigint", "bigint"]),
                0,
                1,
            ),
            (
                Statement::DiscardParts,
                arrays(&["bytea", "bytea", "bigint"]),
                0,
                1,
            ),
        ];
        for (statement, types, lookups, ranges) in statements {
            let lines = plan(&mut connection, sql.text(statement), &types).await;
            let scans = scans(&lines);
            let by_key = scans
                .iter()
                .filter(|scan| scan.starts_with("Index Scan using idem_records_pkey on "))
                .count();
            let parts = scans_of(&lines, "idem_records_parts");
            let parts_by_key = parts
                .iter()
                .filter(|scan| {
                    scan.starts_with("Index Scan using idem_records_parts_pkey on ")
                        || scan.starts_with("Index Scan Backward using idem_records_parts_pkey on ")
                        || scan.starts_with("Index Only Scan using idem_records_parts_pkey on ")
                        || scan.starts_with(
                            "Index Only Scan Backward using idem_records_parts_pkey on ",
                        )
                })
                .count();
            assert_eq!(
                (scans.len(), by_key, parts.len(), parts_by_key),
                (lookups, lookups, ranges, ranges),
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
        let mut connection = connections
            .get(|e| crate::error::store_error(e, &sql.table))
            .await
            .unwrap();
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
