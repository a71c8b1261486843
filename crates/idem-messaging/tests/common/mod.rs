//! What the server tests share: a database of the test's own with a ledger table (a PostgreSQL
//! schema or a MySQL database, behind one trait), and publishers that record, refuse or stall.
//! (The servers' URLs and the skip are `idem_test_support`'s.)

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::{
    future::Future,
    ops::Deref,
    sync::{Arc, Mutex},
    time::Duration,
};

use idem_messaging::{
    Confirmations, ConsumerName, Envelope, Inbox, InboxDatabase, InboxOptions, Outbox,
    OutboxDatabase, OutboxOptions, PgInbox, PublishError, Publisher,
};
use idem_test_support::{Ledger, Server};
use sqlx::{AssertSqlSafe, Pool, Postgres, pool::PoolOptions};
use tokio::sync::Notify;

/// How long a test waits for something that should happen in milliseconds.
pub const EVENTUALLY: Duration = Duration::from_secs(60);

/// A [`Ledger`] (a schema of the test's own, with a `ledger` table) where the inbox and the
/// outbox live too.
pub struct TestSchema(Ledger);

impl Deref for TestSchema {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        &self.0
    }
}

impl TestSchema {
    pub async fn new(url: &str) -> Self {
        Self(Ledger::create(url).await)
    }

    pub fn inbox_options(&self) -> InboxOptions {
        InboxOptions::new().schema(self.name.parse().unwrap())
    }

    pub async fn inbox(&self) -> PgInbox {
        let inbox = PgInbox::new(self.inbox_options());
        inbox.migrate(&self.pool).await.unwrap();
        inbox
    }

    pub async fn outbox(&self) -> Outbox {
        let outbox = Outbox::new(OutboxOptions::new().schema(self.name.parse().unwrap()));
        outbox.migrate(&self.pool).await.unwrap();
        outbox
    }

    pub async fn inbox_rows(&self) -> i64 {
        self.count("SELECT count(*) FROM {schema}.idem_inbox").await
    }
}

/// A database of the test's own with a `ledger` table of effects (one row per message handled),
/// where the inbox and the outbox live too: a PostgreSQL schema ([`TestSchema`]) or a MySQL
/// database ([`TestDatabase`]). Its statements name it `{schema}`.
pub trait TestDb: Send + Sync + Sized + 'static {
    type DB: InboxDatabase + OutboxDatabase;

    /// How the database quotes a name.
    const QUOTE: char;

    /// Creates it on the server its variable names, or `None` after saying that the test is
    /// skipped.
    fn create() -> impl Future<Output = Option<Self>> + Send;

    /// A pool on the database, of up to 20 connections.
    fn pool(&self) -> &Pool<Self::DB>;

    /// A pool of its own on the same database: a process of its own, as far as the server can
    /// tell.
    fn another_pool(&self) -> impl Future<Output = Pool<Self::DB>> + Send {
        async {
            PoolOptions::<Self::DB>::new()
                .max_connections(4)
                .connect_with((*self.pool().connect_options()).clone())
                .await
                .unwrap()
        }
    }

    /// The schema the inbox and the outbox go in.
    fn schema(&self) -> &str;

    /// The inbox's options: its table in this schema.
    fn inbox_options(&self) -> InboxOptions {
        InboxOptions::new().schema(self.schema().parse().unwrap())
    }

    /// The inbox, migrated.
    fn inbox(&self) -> impl Future<Output = Inbox<Self::DB>> + Send {
        async {
            let inbox = Inbox::new(self.inbox_options());
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

    /// `sql` with `{schema}` replaced by the schema's name, quoted.
    fn sql(&self, sql: &str) -> AssertSqlSafe<String>;

    /// The effect of handling `message_id`, written in the handler's transaction.
    fn book<'a>(
        &'a self,
        connection: &'a mut <Self::DB as sqlx::Database>::Connection,
        message_id: &'a str,
        entry: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a;

    /// The integer that `sql` (with `{schema}`) selects.
    fn count(&self, sql: &str) -> impl Future<Output = i64> + Send;

    /// Runs `sql` (with `{schema}`).
    fn execute(&self, sql: &str) -> impl Future<Output = ()> + Send;

    /// The ledger's rows: the effects booked.
    fn ledger(&self) -> impl Future<Output = i64> + Send {
        self.count("SELECT count(*) FROM {schema}.ledger")
    }

    /// Effects beyond the first for each message id.
    fn duplicated_effects(&self) -> impl Future<Output = i64> + Send {
        self.count("SELECT count(*) - count(DISTINCT message_id) FROM {schema}.ledger")
    }

    /// The inbox's rows.
    fn inbox_rows(&self) -> impl Future<Output = i64> + Send {
        self.count("SELECT count(*) FROM {schema}.idem_inbox")
    }

    /// Every ledger entry, in the order they were booked.
    fn entries(&self) -> impl Future<Output = Vec<String>> + Send;

    /// Sets the processed time of the inbox rows whose message ids are not in `kept` to `ago`
    /// before now.
    fn age_inbox_rows(&self, ago: Duration, kept: &[&str]) -> impl Future<Output = ()> + Send;
}

impl TestDb for TestSchema {
    type DB = Postgres;
    const QUOTE: char = '"';

    async fn create() -> Option<Self> {
        let url = Server::Postgres.url()?;
        Some(Self::new(&url).await)
    }

    fn pool(&self) -> &Pool<Postgres> {
        &self.pool
    }

    fn schema(&self) -> &str {
        &self.name
    }

    fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        self.0.sql(sql)
    }

    fn book<'a>(
        &'a self,
        connection: &'a mut sqlx::PgConnection,
        message_id: &'a str,
        entry: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.0.book(connection, message_id, entry)
    }

    fn count(&self, sql: &str) -> impl Future<Output = i64> + Send {
        self.0.count(sql)
    }

    async fn execute(&self, sql: &str) {
        sqlx::query(self.sql(sql))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn entries(&self) -> Vec<String> {
        sqlx::query_scalar(self.sql("SELECT entry FROM {schema}.ledger ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }

    async fn age_inbox_rows(&self, ago: Duration, kept: &[&str]) {
        sqlx::query(self.sql(
            "UPDATE {schema}.idem_inbox
             SET processed_at = now() - $1::bigint * interval '1 millisecond'
             WHERE NOT message_id = ANY($2)",
        ))
        .bind(i64::try_from(ago.as_millis()).unwrap())
        .bind(kept)
        .execute(&self.pool)
        .await
        .unwrap();
    }
}

#[cfg(feature = "mysql")]
#[allow(unused_imports)] // the tests that use MySQL
pub use mysql::TestDatabase;

#[cfg(feature = "mysql")]
mod mysql {
    use std::{future::Future, time::Duration};

    use idem_test_support::{MysqlDatabase, Server};
    use sqlx::{AssertSqlSafe, MySql, MySqlPool, Pool, mysql::MySqlPoolOptions};

    use super::TestDb;

    /// [`TestSchema`](super::TestSchema)'s peer on MySQL: a database of the test's own with a
    /// `ledger` table, dropped at the end.
    pub struct TestDatabase {
        pub pool: MySqlPool,
        database: MysqlDatabase,
    }

    impl TestDatabase {
        pub async fn new(url: &str) -> Self {
            let database = MysqlDatabase::create(url).await;
            let pool = MySqlPoolOptions::new()
                .max_connections(20)
                .connect_with(database.connect_options())
                .await
                .unwrap();
            let this = Self { pool, database };
            sqlx::query(this.sql(
                "CREATE TABLE {schema}.ledger (
                id BIGINT AUTO_INCREMENT PRIMARY KEY,
                message_id VARCHAR(255) NOT NULL,
                entry TEXT NOT NULL
            ) ENGINE = InnoDB DEFAULT CHARACTER SET = utf8mb4",
            ))
            .execute(&this.pool)
            .await
            .unwrap();
            this
        }
    }

    impl TestDb for TestDatabase {
        type DB = MySql;
        const QUOTE: char = '`';

        async fn create() -> Option<Self> {
            let url = Server::Mysql.url()?;
            Some(Self::new(&url).await)
        }

        fn pool(&self) -> &Pool<MySql> {
            &self.pool
        }

        fn schema(&self) -> &str {
            self.database.name()
        }

        fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
            AssertSqlSafe(sql.replace("{schema}", &format!("`{}`", self.database.name())))
        }

        async fn book(
            &self,
            connection: &mut sqlx::MySqlConnection,
            message_id: &str,
            entry: &str,
        ) {
            sqlx::query(self.sql("INSERT INTO {schema}.ledger (message_id, entry) VALUES (?, ?)"))
                .bind(message_id)
                .bind(entry)
                .execute(connection)
                .await
                .unwrap();
        }

        fn count(&self, sql: &str) -> impl Future<Output = i64> + Send {
            // MySQL sums into a DECIMAL: every count comes back as a BIGINT.
            let sql = self.sql(&format!("SELECT CAST(({sql}) AS SIGNED)"));
            async move { sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap() }
        }

        async fn execute(&self, sql: &str) {
            sqlx::query(self.sql(sql))
                .execute(&self.pool)
                .await
                .unwrap();
        }

        async fn entries(&self) -> Vec<String> {
            sqlx::query_scalar(self.sql("SELECT entry FROM {schema}.ledger ORDER BY id"))
                .fetch_all(&self.pool)
                .await
                .unwrap()
        }

        async fn age_inbox_rows(&self, ago: Duration, kept: &[&str]) {
            sqlx::query(self.sql(
                "UPDATE {schema}.idem_inbox
             SET processed_at = UTC_TIMESTAMP(6) - INTERVAL ? * 1000 MICROSECOND
             WHERE NOT JSON_CONTAINS(?, JSON_QUOTE(CONVERT(message_id USING utf8mb4)))",
            ))
            .bind(i64::try_from(ago.as_millis()).unwrap())
            .bind(serde_json::to_string(kept).unwrap())
            .execute(&self.pool)
            .await
            .unwrap();
        }
    }
}

pub fn consumer(name: &str) -> ConsumerName {
    name.parse().unwrap()
}

/// Decides, per message, whether the broker refuses it.
pub type Refusal = Box<dyn Fn(&Envelope) -> Option<PublishError> + Send + Sync>;

/// A broker in memory: records what it confirms, in order, and refuses what `refuse` says.
#[derive(Clone, Default)]
pub struct Recorder {
    pub confirmed: Arc<Mutex<Vec<Envelope>>>,
    pub batches: Arc<Mutex<Vec<Vec<Envelope>>>>,
    refuse: Option<Arc<Refusal>>,
}

impl Recorder {
    pub fn refusing(
        refuse: impl Fn(&Envelope) -> Option<PublishError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            refuse: Some(Arc::new(Box::new(refuse))),
            ..Self::default()
        }
    }

    pub fn confirmed(&self) -> Vec<Envelope> {
        self.confirmed.lock().unwrap().clone()
    }

    /// The ids confirmed, in order.
    pub fn ids(&self) -> Vec<String> {
        self.confirmed()
            .iter()
            .map(|e| e.id().as_str().to_owned())
            .collect()
    }
}

impl Publisher for Recorder {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        self.batches.lock().unwrap().push(batch.to_vec());
        batch
            .iter()
            .map(|envelope| {
                if let Some(error) = self.refuse.as_ref().and_then(|refuse| refuse(envelope)) {
                    return Err(error);
                }
                self.confirmed.lock().unwrap().push(envelope.clone());
                Ok(())
            })
            .collect()
    }
}

/// Publishes through `inner`, then tells `published` and never returns: a relay that dies
/// between the broker's confirmation and marking the messages sent (the test aborts it).
pub struct DiesAfterPublish<P> {
    pub inner: P,
    pub published: Arc<Notify>,
}

impl<P: Publisher> Publisher for DiesAfterPublish<P> {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let _ = self.inner.publish_batch(batch).await;
        self.published.notify_one();
        std::future::pending().await
    }
}

/// Publishes through `inner` once `open` gives a permit; tells `waiting` when a batch arrives.
pub struct Gated<P> {
    pub inner: P,
    pub open: Arc<tokio::sync::Semaphore>,
    pub waiting: Arc<Notify>,
}

impl<P: Publisher> Publisher for Gated<P> {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        self.waiting.notify_one();
        self.open.acquire().await.unwrap().forget();
        self.inner.publish_batch(batch).await
    }
}

pub mod suite;
#[cfg(feature = "opentelemetry")]
pub mod traces;

/// The error and its sources, joined by `: `, a source that the text before it already ends with
/// said once (an `io::Error` and rdkafka's errors repeat what they wrap): as `idem` prints an
/// error.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
