//! The outbox and its relay on PostgreSQL, MySQL and SQLite, publishing to brokers in memory that
//! confirm, refuse, stall or die: what is published, how often, and in which order. Each
//! behaviour is a generic function, run on every database it applies to by `stamp!`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{collections::HashMap, sync::Arc, time::Duration};

use idem_messaging::{
    BatchReport, Confirmations, DeadLetter, Envelope, Outbox, OutboxDatabase, OutboxMessage,
    OutboxOptions, PublishError, Publisher, Relay, SqliteOutbox,
};
use sqlx::{
    AssertSqlSafe, Pool, Postgres, Sqlite, SqlitePool, Transaction,
    pool::PoolOptions,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use common::{DiesAfterPublish, EVENTUALLY, Gated, Recorder, TestDb, TestSchema};

/// An outbox in a database of the test's own, with a ledger table for the business writes.
trait Store: Send + Sync + 'static {
    type DB: OutboxDatabase;

    fn pool(&self) -> &Pool<Self::DB>;

    fn outbox(&self) -> Outbox<Self::DB>;

    /// The `bigint` that `sql` selects, `{schema}` standing for the outbox's schema.
    async fn count(&self, sql: &str) -> i64;

    /// The pending messages no claim holds and no attempt was counted for: those any relay
    /// could take now.
    async fn free(&self) -> i64;

    /// A business write in `tx`.
    async fn book(&self, tx: &mut Transaction<'static, Self::DB>);

    /// The business writes committed.
    async fn ledger(&self) -> i64;
}

/// The outbox in a database of the test's own on a server: a PostgreSQL schema, or a MySQL
/// database.
struct Server<D: TestDb> {
    database: D,
    outbox: Outbox<D::DB>,
}

impl<D: TestDb> Server<D> {
    /// The outbox on `D`'s server, or `None` when its variable is not set.
    async fn new() -> Option<Self> {
        let database = D::create().await?;
        let outbox = database.outbox().await;
        Some(Self { database, outbox })
    }
}

/// A claim on a server holds its rows locked: the messages a relay could take now are the
/// pending ones without an attempt that a locking read can take.
const FREE: &str = "SELECT count(*) FROM (
        SELECT 1 FROM {schema}.idem_outbox
        WHERE state = 'pending' AND attempts = 0 AND available_at <= {now}
        FOR UPDATE SKIP LOCKED
    ) AS free";

impl Store for Server<TestSchema> {
    type DB = Postgres;

    fn pool(&self) -> &Pool<Postgres> {
        self.database.pool()
    }

    fn outbox(&self) -> Outbox<Postgres> {
        self.outbox.clone()
    }

    async fn count(&self, sql: &str) -> i64 {
        self.database.count(sql).await
    }

    async fn free(&self) -> i64 {
        self.count(&FREE.replace("{now}", "now()")).await
    }

    async fn book(&self, tx: &mut Transaction<'static, Postgres>) {
        self.database.book(tx, "business", "order paid").await;
    }

    async fn ledger(&self) -> i64 {
        self.database.ledger().await
    }
}

#[cfg(feature = "mysql")]
impl Store for Server<common::TestDatabase> {
    type DB = sqlx::MySql;

    fn pool(&self) -> &Pool<sqlx::MySql> {
        self.database.pool()
    }

    fn outbox(&self) -> Outbox<sqlx::MySql> {
        self.outbox.clone()
    }

    async fn count(&self, sql: &str) -> i64 {
        self.database.count(sql).await
    }

    async fn free(&self) -> i64 {
        self.count(&FREE.replace("{now}", "UTC_TIMESTAMP(6)")).await
    }

    async fn book(&self, tx: &mut Transaction<'static, sqlx::MySql>) {
        self.database.book(tx, "business", "order paid").await;
    }

    async fn ledger(&self) -> i64 {
        self.database.ledger().await
    }
}

/// The outbox in an SQLite file of the test's own, in WAL mode, as a service would open it.
struct Lite {
    pool: SqlitePool,
    outbox: SqliteOutbox,
    _dir: tempfile::TempDir,
}

impl Lite {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let pool = sqlite_pool(&dir.path().join("service.db")).await;
        sqlx::query("CREATE TABLE ledger (entry TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        let outbox = SqliteOutbox::new(OutboxOptions::new());
        outbox.migrate(&pool).await.unwrap();
        outbox.migrate(&pool).await.unwrap();
        Self {
            pool,
            outbox,
            _dir: dir,
        }
    }
}

async fn sqlite_pool(path: &std::path::Path) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap()
}

impl Store for Lite {
    type DB = Sqlite;

    fn pool(&self) -> &Pool<Sqlite> {
        &self.pool
    }

    fn outbox(&self) -> Outbox<Sqlite> {
        self.outbox.clone()
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(AssertSqlSafe(sql.replace("{schema}", "main")))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    async fn free(&self) -> i64 {
        // A claim writes its token on its rows.
        self.count(
            "SELECT count(*) FROM {schema}.idem_outbox
            WHERE state = 'pending' AND attempts = 0 AND claim IS NULL
              AND available_at <= CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        )
        .await
    }

    async fn book(&self, tx: &mut Transaction<'static, Sqlite>) {
        sqlx::query("INSERT INTO ledger (entry) VALUES ('order paid')")
            .execute(&mut **tx)
            .await
            .unwrap();
    }

    async fn ledger(&self) -> i64 {
        self.count("SELECT count(*) FROM ledger").await
    }
}

/// Runs each generic test on the databases its list names: `all` on PostgreSQL
/// (`postgres::name`, skipped without `IDEM_TEST_POSTGRES_URL`), MySQL (`mysql::name`, with the
/// `mysql` feature, skipped without `IDEM_TEST_MYSQL_URL`) and SQLite (`sqlite::name`, always);
/// `servers` on PostgreSQL and MySQL, where a claim is a transaction holding row locks; `polled`
/// on MySQL and SQLite, which send no notifications; `postgres` and `sqlite` on that database
/// only.
macro_rules! stamp {
    (
        all: [$($all:ident),* $(,)?],
        servers: [$($servers:ident),* $(,)?],
        polled: [$($polled:ident),* $(,)?],
        postgres: [$($pg:ident),* $(,)?],
        sqlite: [$($lite:ident),* $(,)?] $(,)?
    ) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $all() {
                    let Some(store) = super::postgres().await else { return };
                    super::$all(store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $servers() {
                    let Some(store) = super::postgres().await else { return };
                    super::$servers(store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $pg() {
                    let Some(store) = super::postgres().await else { return };
                    super::$pg(store).await;
                }
            )*
        }

        #[cfg(feature = "mysql")]
        mod mysql {
            $(
                #[tokio::test]
                async fn $all() {
                    let Some(store) = super::mysql().await else { return };
                    super::$all(store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $servers() {
                    let Some(store) = super::mysql().await else { return };
                    super::$servers(store).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $polled() {
                    let Some(store) = super::mysql().await else { return };
                    super::$polled(store).await;
                }
            )*
        }

        mod sqlite {
            $(
                #[tokio::test]
                async fn $all() {
                    super::$all(super::Lite::new().await).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $polled() {
                    super::$polled(super::Lite::new().await).await;
                }
            )*
            $(
                #[tokio::test]
                async fn $lite() {
                    super::$lite(super::Lite::new().await).await;
                }
            )*
        }
    };
}

async fn postgres() -> Option<Server<TestSchema>> {
    Server::new().await
}

#[cfg(feature = "mysql")]
async fn mysql() -> Option<Server<common::TestDatabase>> {
    Server::new().await
}

stamp!(
    all: [
        a_committed_message_is_published_with_its_id_headers_and_payload,
        a_rolled_back_enqueue_publishes_nothing,
        a_refused_message_is_retried_then_dead_lettered_while_others_flow,
        a_message_the_publisher_panics_on_is_dead_lettered_and_the_others_published,
        an_unavailable_broker_costs_no_attempt,
        a_relay_whose_lease_ran_out_does_not_mark_the_new_claim,
        per_key_order_holds_through_retries,
        shutdown_gives_back_what_could_not_be_published,
        two_relays_publish_every_message_once,
        two_relays_on_their_own_connections_publish_each_message_once_in_key_order,
        behind_a_backlog_the_next_batch_is_claimed_early_and_given_back_at_shutdown,
    ],
    servers: [
        a_relay_that_dies_after_publishing_releases_its_claim_at_once_and_costs_no_attempt,
    ],
    polled: [a_relay_finds_an_enqueued_message_when_it_polls],
    postgres: [a_notification_wakes_an_idle_relay],
    sqlite: [
        a_relay_that_dies_after_publishing_holds_its_claim_until_the_lease_ends_and_costs_no_attempt,
    ],
);

/// Enqueues `messages` in one transaction.
async fn enqueue<S: Store>(store: &S, messages: Vec<OutboxMessage>) -> Vec<String> {
    let outbox = store.outbox();
    let mut tx = store.pool().begin().await.unwrap();
    let mut ids = Vec::new();
    for message in messages {
        ids.push(outbox.enqueue(&mut *tx, message).await.unwrap().to_string());
    }
    tx.commit().await.unwrap();
    ids
}

/// Enqueues `good` messages to `orders` and, at position `at` among them, a message to `nowhere`;
/// returns the good ones' ids, in order, and the other's.
async fn enqueue_with_poison<S: Store>(store: &S, good: usize, at: usize) -> (Vec<String>, String) {
    let mut messages: Vec<_> = (0..good)
        .map(|n| OutboxMessage::new("orders", format!("good {n}")))
        .collect();
    messages.insert(at, OutboxMessage::new("nowhere", "poison"));
    let mut ids = enqueue(store, messages).await;
    let poison = ids.remove(at);
    (ids, poison)
}

/// The outbox's one dead letter.
async fn only_dead_letter<S: Store>(store: &S) -> DeadLetter {
    let mut dead = store.outbox().dead_letters(store.pool(), 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    dead.remove(0)
}

/// The failed attempts, dead letters and published messages of `reports`, summed.
fn failed_dead_published(reports: &[BatchReport]) -> (usize, usize, usize) {
    reports.iter().fold((0, 0, 0), |(f, d, p), r| {
        (f + r.failed, d + r.dead_lettered, p + r.published)
    })
}

fn relay<S: Store, P: Publisher>(store: &S, publisher: P) -> Relay<P, S::DB> {
    Relay::new(store.pool().clone(), store.outbox(), publisher)
        .backoff(Duration::ZERO, Duration::ZERO)
        .poll_interval(Duration::from_millis(50))
}

/// Runs cycles until one claims nothing and no message is pending.
async fn drain<S: Store, P: Publisher>(relay: &Relay<P, S::DB>, store: &S) -> Vec<BatchReport> {
    let mut reports = Vec::new();
    loop {
        let report = relay.run_once().await.unwrap();
        reports.push(report);
        if report.claimed == 0 && store.outbox().pending(store.pool()).await.unwrap() == 0 {
            return reports;
        }
    }
}

async fn a_committed_message_is_published_with_its_id_headers_and_payload<S: Store>(store: S) {
    let outbox = store.outbox();
    let message = OutboxMessage::new("orders.paid", r#"{"order":42}"#)
        .ordering_key("order-42")
        .header("content-type", "application/json")
        .header("trace", "abc");
    let ids = enqueue(&store, vec![message.clone()]).await;
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 1);
    let uuid = uuid::Uuid::parse_str(&ids[0]).unwrap();
    assert_eq!(uuid.get_version_num(), 7);

    let recorder = Recorder::default();
    let relay = relay(&store, recorder.clone());
    let report = relay.run_once().await.unwrap();

    assert_eq!((report.claimed, report.published, report.failed), (1, 1, 0));
    let confirmed = recorder.confirmed();
    assert_eq!(confirmed.len(), 1);
    assert_eq!(confirmed[0].id().as_str(), ids[0]);
    assert_eq!(confirmed[0].message(), &message);
    assert_eq!(confirmed[0].attempt(), 1);
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);
    assert_eq!(relay.run_once().await.unwrap(), BatchReport::default());
}

async fn a_rolled_back_enqueue_publishes_nothing<S: Store>(store: S) {
    let outbox = store.outbox();

    let mut tx = store.pool().begin().await.unwrap();
    store.book(&mut tx).await;
    outbox
        .enqueue(&mut tx, OutboxMessage::new("orders.paid", "42"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let recorder = Recorder::default();
    let report = relay(&store, recorder.clone()).run_once().await.unwrap();
    assert_eq!(report, BatchReport::default());
    assert!(recorder.confirmed().is_empty());
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);
    assert_eq!(store.ledger().await, 0);
}

async fn a_refused_message_is_retried_then_dead_lettered_while_others_flow<S: Store>(store: S) {
    let outbox = store.outbox();
    let (good, poison) = enqueue_with_poison(&store, 10, 3).await;

    let recorder = Recorder::refusing(|envelope| {
        (envelope.message().destination == "nowhere").then(|| PublishError::Rejected {
            reason: "NO_ROUTE".into(),
        })
    });
    let relay = relay(&store, recorder.clone())
        .batch_size(4)
        .max_attempts(3);
    let reports = drain(&relay, &store).await;

    assert_eq!(failed_dead_published(&reports), (3, 1, 10));
    assert_eq!(recorder.ids(), good);

    let dead = only_dead_letter(&store).await;
    assert_eq!(dead.id.as_str(), poison);
    assert_eq!(dead.attempts, 3);
    assert_eq!(dead.message.payload.as_ref(), b"poison");
    assert_eq!(dead.last_error.as_deref(), Some("NO_ROUTE"));
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);

    // Revived, it gets three attempts again.
    assert!(outbox.revive(store.pool(), &dead.id).await.unwrap());
    assert!(!outbox.revive(store.pool(), &dead.id).await.unwrap());
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 1);
    let report = relay.run_once().await.unwrap();
    assert_eq!(
        (report.claimed, report.failed, report.dead_lettered),
        (1, 1, 0)
    );
}

/// Panics on a batch that holds a message for `nowhere`; publishes the others through `inner`.
struct PanicsOnNowhere {
    inner: Recorder,
}

impl Publisher for PanicsOnNowhere {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        assert!(
            batch.iter().all(|e| e.message().destination != "nowhere"),
            "cannot publish to nowhere"
        );
        self.inner.publish_batch(batch).await
    }
}

async fn a_message_the_publisher_panics_on_is_dead_lettered_and_the_others_published<S: Store>(
    store: S,
) {
    let (good, poison) = enqueue_with_poison(&store, 4, 2).await;

    let recorder = Recorder::default();
    let relay = relay(
        &store,
        PanicsOnNowhere {
            inner: recorder.clone(),
        },
    )
    .batch_size(5)
    .max_attempts(2);
    let reports = drain(&relay, &store).await;

    assert_eq!(failed_dead_published(&reports), (2, 1, 4));
    assert_eq!(recorder.ids(), good);
    let dead = only_dead_letter(&store).await;
    assert_eq!(dead.id.as_str(), poison);
    assert_eq!(dead.attempts, 2);
    assert_eq!(
        dead.last_error.as_deref(),
        Some("the publisher panicked: cannot publish to nowhere")
    );
}

async fn an_unavailable_broker_costs_no_attempt<S: Store>(store: S) {
    enqueue(
        &store,
        vec![
            OutboxMessage::new("orders", "1"),
            OutboxMessage::new("orders", "2"),
        ],
    )
    .await;

    let down = Recorder::refusing(|_| Some(PublishError::unavailable("connection refused")));
    let relay_down = relay(&store, down).max_attempts(1);
    for _ in 0..3 {
        let report = relay_down.run_once().await.unwrap();
        assert_eq!((report.claimed, report.released, report.failed), (2, 2, 0));
    }
    assert_eq!(
        store
            .count("SELECT sum(attempts) FROM {schema}.idem_outbox")
            .await,
        0
    );
    assert_eq!(store.free().await, 2);

    let up = Recorder::default();
    let report = relay(&store, up.clone())
        .max_attempts(1)
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.published, report.dead_lettered), (2, 0));
    assert_eq!(up.confirmed().len(), 2);
}

async fn a_relay_that_dies_after_publishing_releases_its_claim_at_once_and_costs_no_attempt<
    S: Store,
>(
    store: S,
) {
    let outbox = store.outbox();
    let ids = enqueue(&store, vec![OutboxMessage::new("orders", "1")]).await;

    let broker = Recorder::default();
    let published = Arc::new(Notify::new());
    // A lease far longer than the test: only the end of the claim's transaction frees the
    // message.
    let dying = relay(
        &store,
        DiesAfterPublish {
            inner: broker.clone(),
            published: Arc::clone(&published),
        },
    )
    .lease(Duration::from_secs(600))
    .max_attempts(1);
    let task = tokio::spawn(async move { dying.run_once().await });
    published.notified().await;
    task.abort(); // killed between the broker's confirmation and marking the message sent
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 1);

    // Another relay takes the message over as soon as the dead claim is rolled back.
    let survivor = relay(&store, broker.clone()).max_attempts(1);
    let report = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let report = survivor.run_once().await.unwrap();
            if report.claimed > 0 {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (report.published, report.taken_over, report.dead_lettered),
        (1, 0, 0)
    );
    assert_eq!(broker.ids(), [ids[0].clone(), ids[0].clone()]);
    // The death was not the message's fault: with one attempt allowed, it is still a first.
    assert_eq!(broker.confirmed()[1].attempt(), 1);
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);
    assert!(
        outbox
            .dead_letters(store.pool(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_relay_whose_lease_ran_out_does_not_mark_the_new_claim<S: Store>(store: S) {
    let outbox = store.outbox();
    enqueue(&store, vec![OutboxMessage::new("orders", "1")]).await;
    let broker = Recorder::default();
    let gate = |open: &Arc<Semaphore>, waiting: &Arc<Notify>| Gated {
        inner: broker.clone(),
        open: Arc::clone(open),
        waiting: Arc::clone(waiting),
    };
    let (open_a, waiting_a) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let (open_b, waiting_b) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let slow = relay(&store, gate(&open_a, &waiting_a)).lease(Duration::from_millis(200));
    let other = relay(&store, gate(&open_b, &waiting_b)).lease(Duration::from_secs(60));

    let a = tokio::spawn(async move { slow.run_once().await.unwrap() });
    waiting_a.notified().await;
    // A's lease runs out while it waits for its confirmation; B claims the message.
    let b = tokio::spawn(async move {
        loop {
            let report = other.run_once().await.unwrap();
            if report.claimed > 0 {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    waiting_b.notified().await;
    open_a.add_permits(1);
    let late = a.await.unwrap();
    assert_eq!((late.published, late.taken_over), (1, 1));
    // B's claim still holds the message.
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 1);

    open_b.add_permits(1);
    let report = b.await.unwrap();
    assert_eq!((report.published, report.taken_over), (1, 0));
    assert_eq!(broker.confirmed().len(), 2);
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);
}

async fn per_key_order_holds_through_retries<S: Store>(store: S) {
    const KEYS: usize = 4;
    const PER_KEY: usize = 12;
    // Interleaved keys; every third message of a key is enqueued in a transaction of its own.
    let mut pending = Vec::new();
    for n in 0..PER_KEY {
        for key in 0..KEYS {
            pending.push(
                OutboxMessage::new("orders", format!("{key}:{n}")).ordering_key(format!("k{key}")),
            );
        }
        if n % 3 == 2 {
            enqueue(&store, std::mem::take(&mut pending)).await;
        }
    }
    enqueue(&store, pending).await;

    // The broker refuses the first attempt of every fifth message: with ordering on, the rest of
    // its key waits for the retry.
    let recorder = Recorder::refusing(|envelope| {
        let payload = std::str::from_utf8(&envelope.message().payload)
            .unwrap()
            .to_owned();
        let n: usize = payload.split(':').nth(1).unwrap().parse().unwrap();
        (n % 5 == 1 && envelope.attempt() == 1).then(|| PublishError::Rejected {
            reason: "try again".into(),
        })
    });
    let relay = relay(&store, recorder.clone())
        .ordering(true)
        .batch_size(16);
    drain(&relay, &store).await;

    let mut sequences: HashMap<String, Vec<usize>> = HashMap::new();
    for envelope in recorder.confirmed() {
        let payload = std::str::from_utf8(&envelope.message().payload)
            .unwrap()
            .to_owned();
        let (key, n) = payload.split_once(':').unwrap();
        sequences
            .entry(key.to_owned())
            .or_default()
            .push(n.parse().unwrap());
    }
    assert_eq!(sequences.len(), KEYS);
    for (key, sequence) in sequences {
        assert_eq!(sequence, (0..PER_KEY).collect::<Vec<_>>(), "key {key}");
    }
    // Never two messages of one key in a batch.
    for batch in recorder.batches.lock().unwrap().iter() {
        let mut keys: Vec<_> = batch
            .iter()
            .map(|e| e.message().ordering_key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), batch.len());
    }
}

async fn a_notification_wakes_an_idle_relay(store: Server<TestSchema>) {
    let recorder = Recorder::default();
    // Without the notification it would not look again for an hour.
    let relay = relay(&store, recorder.clone()).poll_interval(Duration::from_secs(3600));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    // Let it find the outbox empty and go to sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids = enqueue(&store, vec![OutboxMessage::new("orders", "1")]).await;

    tokio::time::timeout(EVENTUALLY, async {
        while recorder.confirmed().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the relay is woken by the enqueue's notification");
    assert_eq!(recorder.ids(), ids);
    shutdown.cancel();
    task.await.unwrap();
}

async fn shutdown_gives_back_what_could_not_be_published<S: Store>(store: S) {
    enqueue(
        &store,
        vec![
            OutboxMessage::new("orders", "1"),
            OutboxMessage::new("orders", "2"),
        ],
    )
    .await;
    let (open, waiting) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let stalled = Gated {
        inner: Recorder::default(),
        open,
        waiting: Arc::clone(&waiting),
    };
    let relay = relay(&store, stalled).shutdown_grace(Duration::from_millis(100));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    waiting.notified().await;
    shutdown.cancel();
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .unwrap()
        .unwrap();

    // Both messages are due again, unclaimed, their attempt not counted.
    assert_eq!(store.free().await, 2);
    assert_eq!(
        store
            .count("SELECT count(*) FROM {schema}.idem_outbox WHERE attempts = 0")
            .await,
        2
    );
}

async fn two_relays_publish_every_message_once<S: Store>(store: S) {
    let outbox = store.outbox();
    let mut ids = Vec::new();
    for chunk in 0..10 {
        let messages = (0..100)
            .map(|n| OutboxMessage::new("orders", format!("{chunk}-{n}")))
            .collect();
        ids.extend(enqueue(&store, messages).await);
    }
    let broker = Recorder::default();
    let relays: Vec<_> = (0..2)
        .map(|n| {
            let relay = relay(&store, broker.clone())
                .name(format!("relay-{n}"))
                .batch_size(25);
            tokio::spawn(async move { drain_owned(relay).await })
        })
        .collect();
    let mut per_relay = Vec::new();
    for relay in relays {
        per_relay.push(relay.await.unwrap());
    }
    assert_eq!(per_relay.iter().sum::<usize>(), 1000);
    let mut published = broker.ids();
    published.sort();
    ids.sort();
    assert_eq!(published, ids);
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);
}

/// Runs cycles until one claims nothing; returns how many messages it published.
async fn drain_owned<P: Publisher, DB: OutboxDatabase>(relay: Relay<P, DB>) -> usize {
    let mut published = 0;
    loop {
        let report = relay.run_once().await.unwrap();
        if report.claimed == 0 {
            return published;
        }
        published += report.published;
    }
}

async fn behind_a_backlog_the_next_batch_is_claimed_early_and_given_back_at_shutdown<S: Store>(
    store: S,
) {
    let outbox = store.outbox();
    let messages = (0..30)
        .map(|n| OutboxMessage::new("orders", n.to_string()))
        .collect();
    let ids = enqueue(&store, messages).await;
    let broker = Recorder::default();
    let (open, waiting) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let relay = relay(
        &store,
        Gated {
            inner: broker.clone(),
            open: Arc::clone(&open),
            waiting: Arc::clone(&waiting),
        },
    )
    .batch_size(10);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });

    // The first batch waits for its confirmations; meanwhile the second is claimed.
    waiting.notified().await;
    tokio::time::timeout(EVENTUALLY, async {
        while store.free().await > 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the next batch is claimed while the first is in flight");
    shutdown.cancel();
    open.add_permits(1);
    task.await.unwrap();

    // The first batch was published; the second is back in line, its attempt not counted.
    assert_eq!(broker.ids(), ids[..10]);
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 20);
    assert_eq!(store.free().await, 20);
    assert_eq!(
        store
            .count("SELECT sum(attempts) FROM {schema}.idem_outbox")
            .await,
        0
    );
}

/// A second pool on the store's database: a relay in another process, as far as the database
/// can tell.
async fn another_pool<DB: OutboxDatabase>(pool: &Pool<DB>) -> Pool<DB> {
    PoolOptions::<DB>::new()
        .max_connections(4)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap()
}

async fn two_relays_on_their_own_connections_publish_each_message_once_in_key_order<S: Store>(
    store: S,
) {
    const KEYS: usize = 5;
    const PER_KEY: usize = 40;
    let outbox = store.outbox();
    let mut ids = Vec::new();
    for n in 0..PER_KEY {
        let messages = (0..KEYS)
            .map(|key| {
                OutboxMessage::new("orders", format!("{key}:{n}")).ordering_key(format!("k{key}"))
            })
            .collect();
        ids.extend(enqueue(&store, messages).await);
    }
    let broker = Recorder::default();
    let shutdown = CancellationToken::new();
    let mut tasks = Vec::new();
    for n in 0..2 {
        let relay = Relay::new(
            another_pool(store.pool()).await,
            outbox.clone(),
            broker.clone(),
        )
        .name(format!("relay-{n}"))
        .ordering(true)
        .batch_size(3)
        .poll_interval(Duration::from_millis(10));
        let shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move { relay.run(shutdown).await }));
    }
    tokio::time::timeout(EVENTUALLY, async {
        while outbox.pending(store.pool()).await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the relays publish the outbox");
    shutdown.cancel();
    for task in tasks {
        task.await.unwrap();
    }

    // Each message once, and each key's messages in enqueue order.
    let mut published = broker.ids();
    assert_eq!(published.len(), KEYS * PER_KEY);
    published.sort();
    ids.sort();
    assert_eq!(published, ids);
    let mut sequences: HashMap<String, Vec<usize>> = HashMap::new();
    for envelope in broker.confirmed() {
        let payload = std::str::from_utf8(&envelope.message().payload).unwrap();
        let (key, n) = payload.split_once(':').unwrap();
        sequences
            .entry(key.to_owned())
            .or_default()
            .push(n.parse().unwrap());
    }
    assert_eq!(sequences.len(), KEYS);
    for (key, sequence) in sequences {
        assert_eq!(sequence, (0..PER_KEY).collect::<Vec<_>>(), "key {key}");
    }
}

async fn a_relay_that_dies_after_publishing_holds_its_claim_until_the_lease_ends_and_costs_no_attempt(
    store: Lite,
) {
    let outbox = store.outbox();
    let ids = enqueue(&store, vec![OutboxMessage::new("orders", "1")]).await;

    let broker = Recorder::default();
    let published = Arc::new(Notify::new());
    let dying = relay(
        &store,
        DiesAfterPublish {
            inner: broker.clone(),
            published: Arc::clone(&published),
        },
    )
    .name("dying")
    .lease(Duration::from_millis(500))
    .max_attempts(1);
    let task = tokio::spawn(async move { dying.run_once().await });
    published.notified().await;
    task.abort(); // killed between the broker's confirmation and marking the message sent
    assert!(task.await.unwrap_err().is_cancelled());

    // The claim is written on the row: no other relay takes it while the lease runs.
    assert_eq!(store.free().await, 0);
    assert_eq!(
        store
            .count("SELECT count(*) FROM {schema}.idem_outbox WHERE claimed_by = 'dying'")
            .await,
        1
    );
    let survivor = relay(&store, broker.clone()).max_attempts(1);
    let report = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let report = survivor.run_once().await.unwrap();
            if report.claimed > 0 {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (report.published, report.taken_over, report.dead_lettered),
        (1, 0, 0)
    );
    assert_eq!(broker.ids(), [ids[0].clone(), ids[0].clone()]);
    // The death was not the message's fault: with one attempt allowed, it is still a first.
    assert_eq!(broker.confirmed()[1].attempt(), 1);
    assert_eq!(outbox.pending(store.pool()).await.unwrap(), 0);
    assert!(
        outbox
            .dead_letters(store.pool(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_relay_finds_an_enqueued_message_when_it_polls<S: Store>(store: S) {
    let recorder = Recorder::default();
    let relay = relay(&store, recorder.clone()).poll_interval(Duration::from_millis(20));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    // Let it find the outbox empty and go to sleep.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ids = enqueue(&store, vec![OutboxMessage::new("orders", "1")]).await;

    tokio::time::timeout(EVENTUALLY, async {
        while recorder.confirmed().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the relay polls the outbox");
    assert_eq!(recorder.ids(), ids);
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(store.outbox().pending(store.pool()).await.unwrap(), 0);
}

/// No propagator is set in this binary: the relay's spans are recorded, but it reads and writes
/// no trace header, and the message goes out as it was stored, byte for byte.
#[cfg(feature = "opentelemetry")]
#[tokio::test]
async fn without_a_propagator_a_traced_relay_publishes_the_headers_as_stored() {
    use common::traces::{TRACEPARENT, Traces, attribute};

    let traces = Traces::start();
    let store = Lite::new().await;
    let message = OutboxMessage::new("orders.paid", "1")
        .header("traceparent", TRACEPARENT)
        .header("tracestate", "congo=t61rcWkgMzE")
        .header("content-type", "application/json");
    enqueue(&store, vec![message.clone()]).await;
    let recorder = Recorder::default();

    relay(&store, recorder.clone()).run_once().await.unwrap();

    assert_eq!(recorder.confirmed()[0].message(), &message);
    let spans = traces.ended("idem.publish");
    assert_eq!(spans.len(), 1);
    // Nothing read the stored context: a trace of its own.
    assert_eq!(
        spans[0].parent_span_id,
        opentelemetry::trace::SpanId::INVALID
    );
    assert_eq!(
        attribute(&spans[0], "idem.outcome").as_deref(),
        Some("published")
    );
}
