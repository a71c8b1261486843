//! [`Ledger`]: the consumer's database of a messaging test, a PostgreSQL schema of the test's own
//! with a `ledger` table of the effects, one row per message handled.

use sqlx::{AssertSqlSafe, PgPool, postgres::PgPoolOptions};

use crate::PgSchema;

/// A schema of the test's own with a `ledger` table, dropped when this is. Duplicated effects
/// show as repeated message ids.
///
/// # Examples
///
/// ```no_run
/// # async fn test(url: &str) {
/// let ledger = idem_test_support::Ledger::create(url).await;
/// assert_eq!(ledger.ledger().await, 0);
/// # }
/// ```
#[derive(Debug)]
pub struct Ledger {
    /// The server's URL.
    pub url: String,
    /// The schema's name.
    pub name: String,
    /// A pool on the server, of up to 20 connections.
    pub pool: PgPool,
    _schema: PgSchema,
}

impl Ledger {
    /// Creates the schema and its `ledger` table on the server at `url`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses.
    pub async fn create(url: &str) -> Self {
        let schema = PgSchema::create(url).await;
        let pool = PgPoolOptions::new()
            .max_connections(20)
            .connect(url)
            .await
            .expect("connect to the test server");
        let this = Self {
            url: url.to_owned(),
            name: schema.name().to_owned(),
            pool,
            _schema: schema,
        };
        sqlx::query(this.sql(
            "CREATE TABLE {schema}.ledger (
                id bigserial PRIMARY KEY,
                message_id text NOT NULL,
                entry text NOT NULL
            )",
        ))
        .execute(&this.pool)
        .await
        .expect("create the ledger table");
        this
    }

    /// `sql` with `{schema}` replaced by this schema's name, quoted.
    pub fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(sql.replace("{schema}", &format!(r#""{}""#, self.name)))
    }

    /// The effect of handling `message_id`, written in the handler's transaction.
    ///
    /// # Panics
    ///
    /// When the insert fails.
    pub async fn book(&self, connection: &mut sqlx::PgConnection, message_id: &str, entry: &str) {
        sqlx::query(self.sql("INSERT INTO {schema}.ledger (message_id, entry) VALUES ($1, $2)"))
            .bind(message_id)
            .bind(entry)
            .execute(connection)
            .await
            .expect("book the effect");
    }

    /// The `bigint` that `sql` (with `{schema}`) selects.
    ///
    /// # Panics
    ///
    /// When the query fails.
    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(self.sql(sql))
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    /// The ledger's rows: the effects booked.
    pub async fn ledger(&self) -> i64 {
        self.count("SELECT count(*) FROM {schema}.ledger").await
    }

    /// Effects beyond the first for each message id.
    pub async fn duplicated_effects(&self) -> i64 {
        self.count("SELECT count(*) - count(DISTINCT message_id) FROM {schema}.ledger")
            .await
    }
}
