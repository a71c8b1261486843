//! `Outbox::counts` on PostgreSQL, MySQL and SQLite: messages enqueued, claimed by relays that
//! hold them, refused into a backoff or into the dead letters, counted exactly at each step. Each
//! behaviour is a generic function, run on every database.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use idem_messaging::{
    Outbox, OutboxCounts, OutboxDatabase, OutboxMessage, OutboxOptions, PublishError, Relay,
    SqliteOutbox,
};
use idem_test_support::require;
use sqlx::{
    AssertSqlSafe, Pool, Postgres, Sqlite, SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};
use tokio::sync::{Notify, Semaphore};

use common::{EVENTUALLY, Gated, Recorder, TestDb, TestSchema};

/// An outbox in a database of the test's own.
trait Store: Send + Sync + 'static {
    type DB: OutboxDatabase;

    fn pool(&self) -> &Pool<Self::DB>;

    fn outbox(&self) -> Outbox<Self::DB>;

    /// The due time of the message `id`, read from its row.
    async fn due_time(&self, id: &str) -> SystemTime;
}

/// The outbox in a PostgreSQL schema of the test's own.
struct Pg {
    schema: TestSchema,
    outbox: Outbox<Postgres>,
}

impl Store for Pg {
    type DB = Postgres;

    fn pool(&self) -> &Pool<Postgres> {
        &self.schema.pool
    }

    fn outbox(&self) -> Outbox<Postgres> {
        self.outbox.clone()
    }

    async fn due_time(&self, id: &str) -> SystemTime {
        let millis = self
            .schema
            .count(&format!(
                "SELECT floor(extract(epoch FROM available_at) * 1000)::bigint
                 FROM {{schema}}.idem_outbox WHERE id = '{id}'"
            ))
            .await;
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis.try_into().unwrap())
    }
}

/// The outbox in a MySQL database of the test's own.
#[cfg(feature = "mysql")]
struct My {
    database: common::TestDatabase,
    outbox: Outbox<sqlx::MySql>,
}

#[cfg(feature = "mysql")]
impl Store for My {
    type DB = sqlx::MySql;

    fn pool(&self) -> &Pool<sqlx::MySql> {
        self.database.pool()
    }

    fn outbox(&self) -> Outbox<sqlx::MySql> {
        self.outbox.clone()
    }

    async fn due_time(&self, id: &str) -> SystemTime {
        let millis = self
            .database
            .count(&format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', available_at) DIV 1000
                 FROM {{schema}}.idem_outbox WHERE id = UNHEX(REPLACE('{id}', '-', ''))"
            ))
            .await;
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis.try_into().unwrap())
    }
}

/// The outbox in an SQLite file of the test's own, in WAL mode.
struct Lite {
    pool: SqlitePool,
    outbox: SqliteOutbox,
    _dir: tempfile::TempDir,
}

impl Store for Lite {
    type DB = Sqlite;

    fn pool(&self) -> &Pool<Sqlite> {
        &self.pool
    }

    fn outbox(&self) -> Outbox<Sqlite> {
        self.outbox.clone()
    }

    async fn due_time(&self, id: &str) -> SystemTime {
        let millis: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT available_at FROM main.idem_outbox WHERE id = '{id}'"
        )))
        .fetch_one(&self.pool)
        .await
        .unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis.try_into().unwrap())
    }
}

async fn postgres(url: &str) -> Pg {
    let schema = TestSchema::new(url).await;
    let outbox = schema.outbox().await;
    Pg { schema, outbox }
}

#[cfg(feature = "mysql")]
async fn mysql() -> Option<My> {
    let database = common::TestDatabase::create().await?;
    let outbox = database.outbox().await;
    Some(My { database, outbox })
}

async fn sqlite() -> Lite {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("service.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    let outbox = SqliteOutbox::new(OutboxOptions::new());
    outbox.migrate(&pool).await.unwrap();
    Lite {
        pool,
        outbox,
        _dir: dir,
    }
}

/// Runs each generic test on PostgreSQL (`postgres::name`, skipped without
/// `IDEM_TEST_POSTGRES_URL`), on MySQL (`mysql::name`, with the `mysql` feature, skipped without
/// `IDEM_TEST_MYSQL_URL`) and on SQLite (`sqlite::name`).
macro_rules! on_each {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let url = super::require!(Postgres);
                    super::$test(super::postgres(&url).await).await;
                }
            )*
        }

        #[cfg(feature = "mysql")]
        mod mysql {
            $(
                #[tokio::test]
                async fn $test() {
                    let Some(store) = super::mysql().await else { return };
                    super::$test(store).await;
                }
            )*
        }

        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::sqlite().await).await;
                }
            )*
        }
    };
}

on_each!(
    due_in_flight_backing_off_and_dead_messages_are_each_counted_once,
    a_claim_whose_lease_ran_out_counts_as_due_again,
);

/// Enqueues one message to `destination` per payload, in one transaction; their ids, in order.
async fn enqueue<S: Store>(store: &S, destination: &str, payloads: &[&str]) -> Vec<String> {
    let outbox = store.outbox();
    let mut tx = store.pool().begin().await.unwrap();
    let mut ids = Vec::new();
    for payload in payloads {
        let message = OutboxMessage::new(destination, (*payload).to_owned());
        ids.push(outbox.enqueue(&mut *tx, message).await.unwrap().to_string());
    }
    tx.commit().await.unwrap();
    ids
}

async fn counts<S: Store>(store: &S) -> OutboxCounts {
    store.outbox().counts(store.pool()).await.unwrap()
}

/// `(due, in_flight, dead_letters, pending)`.
fn numbers(counts: OutboxCounts) -> (u64, u64, u64, u64) {
    (
        counts.due,
        counts.in_flight,
        counts.dead_letters,
        counts.pending,
    )
}

/// A relay whose broker refuses every message.
fn refusing<S: Store>(store: &S) -> Relay<Recorder, S::DB> {
    let broker = Recorder::refusing(|_| {
        Some(PublishError::Rejected {
            reason: "no such queue".to_owned(),
        })
    });
    Relay::new(store.pool().clone(), store.outbox(), broker)
}

async fn due_in_flight_backing_off_and_dead_messages_are_each_counted_once<S: Store>(store: S) {
    let outbox = store.outbox();
    let empty = counts(&store).await;
    assert_eq!(numbers(empty), (0, 0, 0, 0));
    assert_eq!(empty.oldest_due, None);

    // Two messages out of attempts at their first refusal: dead letters.
    let dead = enqueue(&store, "nowhere", &["lost 1", "lost 2"]).await;
    let report = refusing(&store)
        .max_attempts(1)
        .batch_size(2)
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.claimed, report.dead_lettered), (2, 2));
    assert_eq!(numbers(counts(&store).await), (0, 0, 2, 0));

    enqueue(&store, "orders", &["a", "b", "c"]).await;
    // Later than a, b and c by a clear margin, so that the oldest due time tells them apart.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let later = enqueue(&store, "orders", &["d", "e"]).await;
    let counted = counts(&store).await;
    assert_eq!(numbers(counted), (5, 0, 2, 5));

    // One of a, b, c refused: it waits out its backoff, neither due nor in flight.
    let report = refusing(&store)
        .max_attempts(3)
        .backoff(Duration::from_secs(600), Duration::from_secs(600))
        .batch_size(1)
        .run_once()
        .await
        .unwrap();
    assert_eq!(
        (report.claimed, report.failed, report.dead_lettered),
        (1, 1, 0)
    );
    assert_eq!(numbers(counts(&store).await), (4, 0, 2, 5));

    // The two others claimed by a relay whose broker has not confirmed yet: in flight.
    let broker = Recorder::default();
    let (open, waiting) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let holding = Relay::new(
        store.pool().clone(),
        outbox.clone(),
        Gated {
            inner: broker.clone(),
            open: Arc::clone(&open),
            waiting: Arc::clone(&waiting),
        },
    )
    .batch_size(2)
    .lease(Duration::from_secs(60));
    let cycle = tokio::spawn(async move { holding.run_once().await.unwrap() });
    waiting.notified().await;
    let counted = counts(&store).await;
    assert_eq!(numbers(counted), (2, 2, 2, 5));
    // d and e are the due ones: the held and the backing-off messages, due earlier, are not.
    let (d, e) = (
        store.due_time(&later[0]).await,
        store.due_time(&later[1]).await,
    );
    assert_eq!(counted.oldest_due, Some(d.min(e)));

    // Confirmed: deleted, no longer counted.
    open.add_permits(1);
    let report = cycle.await.unwrap();
    assert_eq!((report.claimed, report.published), (2, 2));
    assert_eq!(numbers(counts(&store).await), (2, 0, 2, 3));
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 3);

    // A revived dead letter is due again.
    assert!(
        outbox
            .revive(store.pool(), &dead[0].parse().unwrap())
            .await
            .unwrap()
    );
    assert_eq!(numbers(counts(&store).await), (3, 0, 1, 4));
    assert_eq!(broker.confirmed().len(), 2);
}

async fn a_claim_whose_lease_ran_out_counts_as_due_again<S: Store>(store: S) {
    let id = enqueue(&store, "orders", &["a"]).await.remove(0);
    let (open, waiting) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let stalled = Relay::new(
        store.pool().clone(),
        store.outbox(),
        Gated {
            inner: Recorder::default(),
            open: Arc::clone(&open),
            waiting: Arc::clone(&waiting),
        },
    )
    .lease(Duration::from_millis(300));
    let cycle = tokio::spawn(async move { stalled.run_once().await.unwrap() });
    waiting.notified().await;
    assert_eq!(numbers(counts(&store).await), (0, 1, 0, 1));

    // The relay stalls past its lease: PostgreSQL and MySQL end its claim's transaction (MySQL
    // after a whole second), SQLite's lease written on the row runs out. Either way the message
    // is due again, for any relay.
    let counted = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let counted = counts(&store).await;
            if counted.in_flight == 0 {
                return counted;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(numbers(counted), (1, 0, 0, 1));
    // Due since its enqueue on PostgreSQL and MySQL, since the lease's end on SQLite: its row
    // says which.
    assert_eq!(counted.oldest_due, Some(store.due_time(&id).await));

    open.add_permits(1);
    assert_eq!(cycle.await.unwrap().published, 1);
}
