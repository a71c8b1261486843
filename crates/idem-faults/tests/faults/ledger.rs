//! The consumer's database, where the outbox and the inbox live too: a database of the test's own
//! with a `ledger` table of the effects (one row per message handled) and a `sent` table of the
//! messages committed, on PostgreSQL ([`TestSchema`], a schema) or on MySQL ([`TestDatabase`], a
//! database), behind [`FaultDb`].

#![allow(unreachable_pub)] // shared with the other modules of this test only

use std::{future::Future, ops::Deref};

use idem_messaging::{Inbox, InboxDatabase, InboxOptions, Outbox, OutboxDatabase, OutboxOptions};
use idem_test_support::{Ledger, MysqlDatabase, Server};
use sqlx::{AssertSqlSafe, MySql, MySqlPool, Pool, Postgres, mysql::MySqlPoolOptions};

/// The consumer's database of a fault run. Its statements name it `{schema}`.
pub trait FaultDb: Send + Sync + Sized + 'static {
    type DB: InboxDatabase + OutboxDatabase;

    /// The server, for the table's title.
    const NAME: &'static str;

    /// Creates it on the server its variable names, with its `ledger` and `sent` tables, or
    /// `None` after saying that the test is skipped.
    fn create() -> impl Future<Output = Option<Self>> + Send;

    /// The store URL the relay processes connect to.
    fn url(&self) -> String;

    /// The schema the outbox and the inbox are in.
    fn schema(&self) -> &str;

    fn pool(&self) -> &Pool<Self::DB>;

    /// `sql` with `{schema}` replaced by the schema's name, quoted.
    fn sql(&self, sql: &str) -> AssertSqlSafe<String>;

    /// The inbox, migrated.
    fn inbox(&self) -> impl Future<Output = Inbox<Self::DB>> + Send {
        async {
            let inbox = Inbox::new(InboxOptions::new().schema(self.schema().parse().unwrap()));
            inbox.migrate(self.pool()).await.unwrap();
            inbox
        }
    }

    /// The outbox, migrated.
    fn outbox(&self) -> impl Future<Output = Outbox<Self::DB>> + Send {
        async {
            let outbox = Outbox::new(OutboxOptions::new().schema(self.schema().parse().unwrap()));
            outbox.migrate(self.pool()).await.unwrap();
            outbox
        }
    }

    /// Books the effect of handling `message_id` (`book`), or records a message committed in a
    /// business transaction (`sent`): a row of `table`, in the caller's transaction.
    fn insert<'a>(
        &'a self,
        connection: &'a mut <Self::DB as sqlx::Database>::Connection,
        table: Table,
        message_id: &'a str,
        entry: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a;

    /// The integer that `sql` (with `{schema}`) selects.
    fn count(&self, sql: &str) -> impl Future<Output = i64> + Send;

    /// Every ledger entry, in the order they were booked.
    fn entries(&self) -> impl Future<Output = Vec<String>> + Send;
}

/// The tables a fault run writes in its transactions.
#[derive(Debug, Clone, Copy)]
pub enum Table {
    /// The effects, in the consumer's inbox transactions.
    Ledger,
    /// The messages, in the producers' business transactions.
    Sent,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Self::Ledger => "ledger",
            Self::Sent => "sent",
        }
    }
}

/// A [`Ledger`] (a PostgreSQL schema of the test's own with its `ledger` table) with a `sent`
/// table, where the inbox and the outbox live too.
pub struct TestSchema(Ledger);

impl Deref for TestSchema {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        &self.0
    }
}

impl FaultDb for TestSchema {
    type DB = Postgres;
    const NAME: &'static str = "PostgreSQL";

    async fn create() -> Option<Self> {
        let url = Server::Postgres.url()?;
        let this = Self(Ledger::create(&url).await);
        sqlx::query(
            this.sql(
                "CREATE TABLE {schema}.sent (message_id text PRIMARY KEY, entry text NOT NULL)",
            ),
        )
        .execute(&this.pool)
        .await
        .unwrap();
        Some(this)
    }

    fn url(&self) -> String {
        self.0.url.clone()
    }

    fn schema(&self) -> &str {
        &self.name
    }

    fn pool(&self) -> &Pool<Postgres> {
        &self.pool
    }

    fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        self.0.sql(sql)
    }

    fn insert<'a>(
        &'a self,
        connection: &'a mut sqlx::PgConnection,
        table: Table,
        message_id: &'a str,
        entry: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a {
        let statement = format!(
            "INSERT INTO {{schema}}.{} (message_id, entry) VALUES ($1, $2)",
            table.name()
        );
        async move {
            sqlx::query(self.sql(&statement))
                .bind(message_id)
                .bind(entry)
                .execute(connection)
                .await
                .unwrap();
        }
    }

    fn count(&self, sql: &str) -> impl Future<Output = i64> + Send {
        self.0.count(sql)
    }

    async fn entries(&self) -> Vec<String> {
        sqlx::query_scalar(self.sql("SELECT entry FROM {schema}.ledger ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }
}

/// The peer of [`TestSchema`] on MySQL: a database of the test's own, with its `ledger` and
/// `sent` tables, dropped at the end.
pub struct TestDatabase {
    pool: MySqlPool,
    database: MysqlDatabase,
}

impl FaultDb for TestDatabase {
    type DB = MySql;
    const NAME: &'static str = "MySQL";

    async fn create() -> Option<Self> {
        let url = Server::Mysql.url()?;
        let database = MysqlDatabase::create(&url).await;
        let pool = MySqlPoolOptions::new()
            .max_connections(20)
            .connect_with(database.connect_options())
            .await
            .unwrap();
        let this = Self { pool, database };
        // Compared byte for byte, as PostgreSQL compares text.
        for statement in [
            "CREATE TABLE {schema}.ledger (
                id BIGINT AUTO_INCREMENT PRIMARY KEY,
                message_id VARCHAR(255) NOT NULL,
                entry TEXT NOT NULL
            ) ENGINE = InnoDB DEFAULT CHARACTER SET = utf8mb4 COLLATE = utf8mb4_bin",
            "CREATE TABLE {schema}.sent (
                message_id VARCHAR(255) PRIMARY KEY,
                entry TEXT NOT NULL
            ) ENGINE = InnoDB DEFAULT CHARACTER SET = utf8mb4 COLLATE = utf8mb4_bin",
        ] {
            sqlx::query(this.sql(statement))
                .execute(&this.pool)
                .await
                .unwrap();
        }
        Some(this)
    }

    fn url(&self) -> String {
        self.database.url()
    }

    fn schema(&self) -> &str {
        self.database.name()
    }

    fn pool(&self) -> &Pool<MySql> {
        &self.pool
    }

    fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(sql.replace("{schema}", &format!("`{}`", self.database.name())))
    }

    fn insert<'a>(
        &'a self,
        connection: &'a mut sqlx::MySqlConnection,
        table: Table,
        message_id: &'a str,
        entry: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a {
        let statement = format!(
            "INSERT INTO {{schema}}.{} (message_id, entry) VALUES (?, ?)",
            table.name()
        );
        async move {
            sqlx::query(self.sql(&statement))
                .bind(message_id)
                .bind(entry)
                .execute(connection)
                .await
                .unwrap();
        }
    }

    fn count(&self, sql: &str) -> impl Future<Output = i64> + Send {
        // A count comes back as a BIGINT whatever MySQL makes of the expression.
        let sql = self.sql(&format!("SELECT CAST(({sql}) AS SIGNED)"));
        async move { sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap() }
    }

    async fn entries(&self) -> Vec<String> {
        sqlx::query_scalar(self.sql("SELECT entry FROM {schema}.ledger ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }
}
