//! The consumer's database: a schema of the test's own holding the outbox, the inbox and a
//! `ledger` table of the effects, one row per message handled.

#![allow(unreachable_pub)] // shared with the other modules of this test only

use idem_messaging::{InboxOptions, Outbox, OutboxOptions, PgInbox};
use idem_test_support::PgSchema;
use sqlx::{AssertSqlSafe, PgPool, postgres::PgPoolOptions};

/// A schema of the test's own with a `ledger` table, dropped when this is.
pub struct TestSchema {
    pub url: String,
    pub name: String,
    pub pool: PgPool,
    _schema: PgSchema,
}

impl TestSchema {
    pub async fn new(url: &str) -> Self {
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
        // One row per effect: duplicates would show as repeated message ids.
        sqlx::query(this.sql(
            "CREATE TABLE {schema}.ledger (
                id bigserial PRIMARY KEY,
                message_id text NOT NULL,
                entry text NOT NULL
            )",
        ))
        .execute(&this.pool)
        .await
        .unwrap();
        this
    }

    pub async fn inbox(&self) -> PgInbox {
        let inbox = PgInbox::new(InboxOptions::new().schema(self.name.parse().unwrap()));
        inbox.migrate(&self.pool).await.unwrap();
        inbox
    }

    pub async fn outbox(&self) -> Outbox {
        let outbox = Outbox::new(OutboxOptions::new().schema(self.name.parse().unwrap()));
        outbox.migrate(&self.pool).await.unwrap();
        outbox
    }

    /// `sql` with `{schema}` replaced by this schema's name.
    pub fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(sql.replace("{schema}", &format!(r#""{}""#, self.name)))
    }

    /// The ledger write, in the handler's transaction.
    pub async fn book(&self, connection: &mut sqlx::PgConnection, message_id: &str, entry: &str) {
        sqlx::query(self.sql("INSERT INTO {schema}.ledger (message_id, entry) VALUES ($1, $2)"))
            .bind(message_id)
            .bind(entry)
            .execute(connection)
            .await
            .unwrap();
    }

    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(self.sql(sql))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn ledger(&self) -> i64 {
        self.count("SELECT count(*) FROM {schema}.ledger").await
    }

    /// Ledger rows beyond the first for each message id.
    pub async fn duplicated_effects(&self) -> i64 {
        self.count("SELECT count(*) - count(DISTINCT message_id) FROM {schema}.ledger")
            .await
    }
}
