//! The transactional API: the key's acquisition and completion in the caller's own transaction,
//! committed or rolled back with the business rows.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{pin::pin, time::Duration};

use futures_util::FutureExt;
use idem_core::{Acquisition, Address, ManualClock, Outcome, Store, StoreError, StoredResponse};
use idem_postgres::PostgresStore;
use idem_test_support::require;
use sqlx::{AssertSqlSafe, PgPool};
use tokio::time::timeout;

use common::{TERMS, TestSchema, acquired, address, fingerprint};

const EVENTUALLY: Duration = Duration::from_secs(20);

/// A store in its own schema, with a business table `orders` next to the records.
struct Shop {
    store: PostgresStore,
    schema: TestSchema,
}

impl Shop {
    async fn new(url: &str, clock: Option<&ManualClock>) -> Self {
        let schema = TestSchema::new(url);
        let store = match clock {
            Some(clock) => schema.manual_clock_store(clock).await,
            None => schema.server_clock_store().await,
        };
        sqlx::query(AssertSqlSafe(format!(
            r#"CREATE TABLE "{}".orders (id text PRIMARY KEY, amount bigint NOT NULL)"#,
            schema.name
        )))
        .execute(store.pool())
        .await
        .unwrap();
        Self { store, schema }
    }

    fn pool(&self) -> &PgPool {
        self.store.pool()
    }

    /// The business write: one order row.
    async fn insert_order(&self, connection: &mut sqlx::PgConnection, id: &str) {
        sqlx::query(AssertSqlSafe(format!(
            r#"INSERT INTO "{}".orders (id, amount) VALUES ($1, 10)"#,
            self.schema.name
        )))
        .bind(id)
        .execute(connection)
        .await
        .unwrap();
    }

    async fn orders(&self) -> i64 {
        sqlx::query_scalar(AssertSqlSafe(format!(
            r#"SELECT count(*) FROM "{}".orders"#,
            self.schema.name
        )))
        .fetch_one(self.pool())
        .await
        .unwrap()
    }

    /// Waits until a statement on this schema waits for a row lock held by another transaction.
    async fn wait_until_blocked(&self) {
        let pattern = format!("%{}%", self.schema.name);
        timeout(EVENTUALLY, async {
            loop {
                let blocked: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND query LIKE $1",
                )
                .bind(&pattern)
                .fetch_one(self.pool())
                .await
                .unwrap();
                if blocked > 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the concurrent statement waits for the transaction");
    }

    /// Acquires `address` on the pool, in a task (it may have to wait for a transaction).
    fn acquire_concurrently(
        &self,
        address: &Address,
    ) -> tokio::task::JoinHandle<Result<Acquisition, StoreError>> {
        let (store, address) = (self.store.clone(), address.clone());
        tokio::spawn(async move { store.acquire(&address, &fingerprint(1), TERMS).await })
    }
}

fn charged() -> Outcome {
    StoredResponse::new(201).body("charged 10").into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_committed_transaction_keeps_both_the_order_and_the_completion() {
    let url = require!(Postgres);
    let shop = Shop::new(&url, None).await;
    let key = address("pay-1");
    let lease = acquired(&shop.store, &key).await;

    let mut tx = shop.pool().begin().await.unwrap();
    shop.insert_order(&mut tx, "order-1").await;
    shop.store
        .complete_in(&mut tx, &key, lease.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(shop.orders().await, 1);
    assert_eq!(
        shop.store
            .acquire(&key, &fingerprint(1), TERMS)
            .await
            .unwrap(),
        Acquisition::Completed(charged())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolled_back_transaction_keeps_neither_and_the_retry_charges_once() {
    let url = require!(Postgres);
    let shop = Shop::new(&url, None).await;
    let key = address("pay-2");
    let lease = acquired(&shop.store, &key).await;

    let mut tx = shop.pool().begin().await.unwrap();
    shop.insert_order(&mut tx, "order-2").await;
    shop.store
        .complete_in(&mut tx, &key, lease.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert_eq!(shop.orders().await, 0);
    let record = shop.store.get(&key).await.unwrap().expect("still held");
    assert_eq!(record.state.name(), "processing");
    assert_eq!(record.state.token(), lease.token);

    // The worker gives the key back; the client's retry executes again, this time to the end.
    shop.store.release(&key, lease.token).await.unwrap();
    let retry = acquired(&shop.store, &key).await;
    let mut tx = shop.pool().begin().await.unwrap();
    shop.insert_order(&mut tx, "order-2").await;
    shop.store
        .complete_in(&mut tx, &key, retry.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(shop.orders().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_token_cannot_complete_and_the_caller_rolls_back() {
    let url = require!(Postgres);
    let clock = ManualClock::default();
    let shop = Shop::new(&url, Some(&clock)).await;
    let key = address("pay-3");
    let stale = acquired(&shop.store, &key).await;
    clock.advance(TERMS.lease);
    let current = acquired(&shop.store, &key).await;
    assert!(current.took_over);

    let mut tx = shop.pool().begin().await.unwrap();
    shop.insert_order(&mut tx, "order-3").await;
    let result = shop
        .store
        .complete_in(&mut tx, &key, stale.token, &charged(), TERMS.ttl)
        .await;
    assert!(matches!(result, Err(StoreError::LeaseLost)), "{result:?}");
    tx.rollback().await.unwrap();
    assert_eq!(shop.orders().await, 0);
    let record = shop.store.get(&key).await.unwrap().expect("held");
    assert_eq!(record.state.token(), current.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_an_uncommitted_completion_then_replays_it() {
    let url = require!(Postgres);
    let clock = ManualClock::default();
    let shop = Shop::new(&url, Some(&clock)).await;
    let key = address("pay-4");
    let lease = acquired(&shop.store, &key).await;
    clock.advance(TERMS.lease); // the lease ran out while the worker was charging

    let mut tx = shop.pool().begin().await.unwrap();
    shop.insert_order(&mut tx, "order-4").await;
    shop.store
        .complete_in(&mut tx, &key, lease.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    let duplicate = shop.acquire_concurrently(&key);
    shop.wait_until_blocked().await;
    tx.commit().await.unwrap();

    assert_eq!(
        duplicate.await.unwrap().unwrap(),
        Acquisition::Completed(charged())
    );
    assert_eq!(shop.orders().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_an_uncommitted_completion_and_takes_over_after_a_rollback() {
    let url = require!(Postgres);
    let clock = ManualClock::default();
    let shop = Shop::new(&url, Some(&clock)).await;
    let key = address("pay-5");
    let lease = acquired(&shop.store, &key).await;
    clock.advance(TERMS.lease);

    let mut tx = shop.pool().begin().await.unwrap();
    shop.insert_order(&mut tx, "order-5").await;
    shop.store
        .complete_in(&mut tx, &key, lease.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    let duplicate = shop.acquire_concurrently(&key);
    shop.wait_until_blocked().await;
    tx.rollback().await.unwrap();

    match duplicate.await.unwrap().unwrap() {
        Acquisition::Acquired(next) => {
            assert!(next.took_over);
            assert!(next.token > lease.token);
        }
        other => panic!("expected a takeover, got {other:?}"),
    }
    assert_eq!(shop.orders().await, 0);
    let result = shop.store.release(&key, lease.token).await;
    assert!(matches!(result, Err(StoreError::LeaseLost)), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_one_transaction_a_duplicate_waits_then_replays_the_committed_result() {
    let url = require!(Postgres);
    let shop = Shop::new(&url, None).await;
    let key = address("pay-6");

    let mut tx = shop.pool().begin().await.unwrap();
    let Acquisition::Acquired(lease) = shop
        .store
        .acquire_in(&mut tx, &key, &fingerprint(1), TERMS)
        .await
        .unwrap()
    else {
        panic!("a new key is acquired");
    };
    // Invisible to everyone else until the commit.
    assert_eq!(shop.store.get(&key).await.unwrap(), None);
    let duplicate = shop.acquire_concurrently(&key);
    shop.wait_until_blocked().await;

    shop.insert_order(&mut tx, "order-6").await;
    shop.store
        .complete_in(&mut tx, &key, lease.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    assert_eq!(
        duplicate.await.unwrap().unwrap(),
        Acquisition::Completed(charged())
    );
    assert_eq!(shop.orders().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_one_transaction_a_rollback_leaves_no_trace_and_frees_the_key() {
    let url = require!(Postgres);
    let shop = Shop::new(&url, None).await;
    let key = address("pay-7");

    let mut tx = shop.pool().begin().await.unwrap();
    let got = shop
        .store
        .acquire_in(&mut tx, &key, &fingerprint(1), TERMS)
        .await
        .unwrap();
    assert!(matches!(got, Acquisition::Acquired(_)), "{got:?}");
    shop.insert_order(&mut tx, "order-7").await;
    let duplicate = shop.acquire_concurrently(&key);
    shop.wait_until_blocked().await;
    tx.rollback().await.unwrap();

    // The waiting duplicate starts the operation afresh: no record was ever committed.
    match duplicate.await.unwrap().unwrap() {
        Acquisition::Acquired(lease) => assert!(!lease.took_over),
        other => panic!("expected Acquired, got {other:?}"),
    }
    assert_eq!(shop.orders().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn other_instances_hear_of_a_completion_only_when_it_commits() {
    let url = require!(Postgres);
    let shop = Shop::new(&url, None).await;
    let listener = shop.schema.server_clock_store().await;
    let warm = listener.changed(&address("probe"));
    timeout(EVENTUALLY, warm)
        .await
        .expect("the listener starts");

    let (rolled_back, committed) = (address("rolled-back"), address("committed"));
    let first = acquired(&shop.store, &rolled_back).await;
    let second = acquired(&shop.store, &committed).await;
    // As the engine waits: interest, then an acquire that finds the key in flight.
    let mut on_rolled_back = pin!(listener.changed(&rolled_back));
    let on_committed = pin!(listener.changed(&committed));
    for key in [&rolled_back, &committed] {
        let got = listener.acquire(key, &fingerprint(1), TERMS).await.unwrap();
        assert!(matches!(got, Acquisition::InFlight { .. }), "{got:?}");
    }

    let mut tx = shop.pool().begin().await.unwrap();
    shop.store
        .complete_in(&mut tx, &rolled_back, first.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = shop.pool().begin().await.unwrap();
    shop.store
        .complete_in(&mut tx, &committed, second.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    timeout(EVENTUALLY, on_committed)
        .await
        .expect("the committed completion is heard");
    // Notifications arrive in commit order: had the rollback sent one, it would be here already.
    assert!(on_rolled_back.as_mut().now_or_never().is_none());
}
