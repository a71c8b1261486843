//! The transactional API: the key's acquisition and completion in the caller's own transaction,
//! committed or rolled back with the business rows, on MySQL and MariaDB.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use idem_core::{Acquisition, Address, ManualClock, Outcome, Store, StoreError, StoredResponse};
use idem_mysql::MysqlStore;
use idem_test_support::require;
use sqlx::MySqlPool;
use tokio::time::timeout;

use common::{TERMS, TestDatabase, acquired, address, fingerprint};

const EVENTUALLY: Duration = Duration::from_secs(20);

/// A store in its own database, with a business table `orders` next to the records.
struct Shop {
    store: MysqlStore,
    database: TestDatabase,
}

impl Shop {
    async fn new(url: &str, clock: Option<&ManualClock>) -> Self {
        let database = TestDatabase::new(url).await;
        let store = match clock {
            Some(clock) => database.manual_clock_store(clock).await,
            None => database.store(database.options()).await,
        };
        sqlx::query("CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)")
            .execute(store.pool())
            .await
            .unwrap();
        Self { store, database }
    }

    fn pool(&self) -> &MySqlPool {
        self.store.pool()
    }

    /// The business write: one order row.
    async fn insert_order(&self, connection: &mut sqlx::MySqlConnection, id: &str) {
        sqlx::query("INSERT INTO orders (id, amount) VALUES (?, 10)")
            .bind(id)
            .execute(connection)
            .await
            .unwrap();
    }

    async fn orders(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    /// Waits until a statement of the store on this database has been waiting for a second: for
    /// the row lock the open transaction holds. (InnoDB's own view of lock waits,
    /// `information_schema.INNODB_TRX`, does not always list a transaction waiting at its first
    /// statement.)
    async fn wait_until_blocked(&self) {
        timeout(EVENTUALLY, async {
            loop {
                let blocked: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM information_schema.PROCESSLIST \
                     WHERE DB = ? AND COMMAND = 'Query' AND TIME >= 1 \
                     AND INFO LIKE '%`idem_records`%'",
                )
                .bind(self.database.database.name())
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
    let url = require!(Mysql);
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
    let url = require!(Mysql);
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
    let url = require!(Mysql);
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
    let url = require!(Mysql);
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

/// The store runs one batch of acquisitions at a time while they are quick; one that waits for a
/// caller's transaction must not hold up the acquisitions of other keys until the lock wait
/// times out: neither the batch, nor its lock. The transaction runs at `READ COMMITTED`, as the
/// crate's documentation asks: under `REPEATABLE READ` InnoDB would lock the gap before the
/// record in the `address` index too, and hold up the new keys that fall in it itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn other_keys_are_acquired_while_a_takeover_waits_for_a_transaction() {
    let url = require!(Mysql);
    let clock = ManualClock::default();
    let shop = Shop::new(&url, Some(&clock)).await;
    let key = address("pay-held");
    let lease = acquired(&shop.store, &key).await;
    clock.advance(TERMS.lease);

    let mut tx = shop
        .pool()
        .begin_with(idem_mysql::BEGIN_READ_COMMITTED)
        .await
        .unwrap();
    shop.store
        .complete_in(&mut tx, &key, lease.token, &charged(), TERMS.ttl)
        .await
        .unwrap();
    let duplicate = shop.acquire_concurrently(&key);
    shop.wait_until_blocked().await;

    for n in 0..3 {
        let other = address(&format!("pay-other-{n}"));
        let got = timeout(
            EVENTUALLY,
            shop.store.acquire(&other, &fingerprint(1), TERMS),
        )
        .await
        .expect("another key is not held up by the lock wait")
        .unwrap();
        assert!(matches!(got, Acquisition::Acquired(_)), "{got:?}");
    }
    assert!(!duplicate.is_finished());

    tx.commit().await.unwrap();
    assert_eq!(
        duplicate.await.unwrap().unwrap(),
        Acquisition::Completed(charged())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_an_uncommitted_completion_and_takes_over_after_a_rollback() {
    let url = require!(Mysql);
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
    let url = require!(Mysql);
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
    let url = require!(Mysql);
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
