//! The inbox on SQLite: the same guarantees in an embedded file, no server needed.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use idem_messaging::{Arrival, ConsumerName, Error, Handled, InboxOptions, MessageId, SqliteInbox};
use sqlx::{
    SqliteConnection, SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};

struct Db {
    pool: SqlitePool,
    inbox: SqliteInbox,
    _dir: tempfile::TempDir,
}

impl Db {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("consumer.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE ledger (message_id TEXT NOT NULL, entry TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        let inbox = SqliteInbox::new(InboxOptions::new().table("consumer_inbox".parse().unwrap()));
        inbox.migrate(&pool).await.unwrap();
        inbox.migrate(&pool).await.unwrap();
        Self {
            pool,
            inbox,
            _dir: dir,
        }
    }

    async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

async fn book(connection: &mut SqliteConnection, message_id: &str) {
    sqlx::query("INSERT INTO ledger (message_id, entry) VALUES (?1, '+10')")
        .bind(message_id)
        .execute(connection)
        .await
        .unwrap();
}

fn consumer() -> ConsumerName {
    "ledger".parse().unwrap()
}

fn id(value: &str) -> MessageId {
    value.parse().unwrap()
}

#[tokio::test]
async fn a_copy_of_a_processed_message_is_skipped() {
    let db = Db::new().await;
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        outcomes.push(
            db.inbox
                .handle(&db.pool, &consumer(), &id("m-1"), |tx| {
                    Box::pin(async {
                        book(tx, "m-1").await;
                        Ok::<_, Error>(7)
                    })
                })
                .await
                .unwrap(),
        );
    }
    assert_eq!(outcomes, [Handled::Processed(7), Handled::Duplicate]);
    assert_eq!(db.count("ledger").await, 1);
    assert_eq!(db.count("consumer_inbox").await, 1);
}

#[tokio::test]
async fn a_failed_handler_leaves_no_row_and_no_effect() {
    let db = Db::new().await;
    let failed = db
        .inbox
        .handle(&db.pool, &consumer(), &id("m-1"), |tx| {
            Box::pin(async {
                book(tx, "m-1").await;
                Err::<(), _>(anyhow::anyhow!("boom"))
            })
        })
        .await;
    assert_eq!(failed.unwrap_err().to_string(), "boom");
    assert_eq!(db.count("ledger").await, 0);
    assert_eq!(db.count("consumer_inbox").await, 0);

    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        db.inbox
            .process(&mut tx, &consumer(), &id("m-1"))
            .await
            .unwrap(),
        Arrival::First
    );
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn concurrent_copies_apply_the_effect_once() {
    let db = Arc::new(Db::new().await);
    let executions = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (db, executions) = (Arc::clone(&db), Arc::clone(&executions));
            tokio::spawn(async move {
                db.inbox
                    .handle(&db.pool, &consumer(), &id("m-1"), |tx| {
                        Box::pin(async {
                            executions.fetch_add(1, Ordering::SeqCst);
                            book(tx, "m-1").await;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            Ok::<_, Error>(())
                        })
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut processed = 0;
    for task in tasks {
        if task.await.unwrap() == Handled::Processed(()) {
            processed += 1;
        }
    }
    assert_eq!(processed, 1);
    assert_eq!(executions.load(Ordering::SeqCst), 1);
    assert_eq!(db.count("ledger").await, 1);
}

#[tokio::test]
async fn rows_older_than_the_window_are_purged_in_batches() {
    let db = Db::new().await;
    for n in 0..12 {
        let mut tx = db.pool.begin().await.unwrap();
        let _ = db
            .inbox
            .process(&mut tx, &consumer(), &id(&format!("m-{n:02}")))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    // Ten of them were processed eight days ago.
    sqlx::query(
        "UPDATE consumer_inbox SET processed_at = processed_at - 8 * 86400000
         WHERE message_id >= 'm-02'",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    assert_eq!(db.inbox.purge(&db.pool, 4).await.unwrap(), 4);
    assert_eq!(db.inbox.purge(&db.pool, 4).await.unwrap(), 4);
    assert_eq!(db.inbox.purge(&db.pool, 4).await.unwrap(), 2);
    assert_eq!(db.inbox.purge(&db.pool, 4).await.unwrap(), 0);
    let left: Vec<String> = sqlx::query_scalar("SELECT message_id FROM consumer_inbox ORDER BY 1")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, ["m-00", "m-01"]);
}
