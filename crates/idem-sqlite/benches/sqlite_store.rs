//! `SqliteStore` acquire + complete on new keys, against a baseline of the same SQL issued
//! directly with sqlx, one key per `BEGIN IMMEDIATE` transaction, on a pool of 4 connections:
//!
//! - `sqlite_acquire_complete`: one caller at a time, both with `synchronous = NORMAL`, so that
//!   the numbers measure the code rather than the disk's flush latency: the ratio is the store's
//!   overhead (its reader's look first, the writer task, planning, decoding);
//! - `sqlite_full_concurrent`: 1, 8, 32 and 128 concurrent callers with `synchronous = FULL`,
//!   the default: the store commits the writes of many callers with one flush (group commit),
//!   the baseline flushes once per transaction, twice per key.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use idem_core::{
    Acquisition, Address, Clock, Fingerprint, Outcome, Policy, Scope, Store, StoredResponse,
    SystemClock, Terms, transition::processing_expiry,
};
use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};
use tokio::runtime::Runtime;

const PROCESSING: i64 = 1;
const COMPLETED: i64 = 2;

fn response() -> Outcome {
    StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(r#"{"id":"ch_1","amount":1000,"currency":"eur"}"#)
        .into()
}

/// A new address per call, built the same way for both benchmarks.
fn next_address(scope: Scope) -> Address {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Address::new(scope, format!("key-{n}").parse().expect("valid key"))
}

/// A sqlx pool of 4 connections with the store's settings (WAL, busy timeout), writing.
async fn baseline_pool(path: &std::path::Path, synchronous: SqliteSynchronous) -> SqlitePool {
    let connect = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(5));
    SqlitePoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .connect_with(connect)
        .await
        .expect("baseline pool")
}

/// What `SqliteStore::acquire` then `complete` send for a new key.
async fn baseline_acquire_complete(
    pool: &SqlitePool,
    address: &Address,
    fingerprint: &Fingerprint,
    terms: Terms,
    encoded: &[u8],
) {
    let (scope, key) = (address.scope.as_bytes().as_slice(), address.key.as_str());
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let now = SystemClock.now();
    let found = sqlx::query(include_str!("../sql/acquire_read.sql"))
        .bind(scope)
        .bind(key)
        .fetch_optional(&mut *tx)
        .await
        .unwrap();
    assert!(found.is_none());
    let token: i64 = sqlx::query_scalar(include_str!("../sql/next_token.sql"))
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let lease_until = (now + terms.lease).as_millis() as i64;
    sqlx::query(include_str!("../sql/create.sql"))
        .bind(scope)
        .bind(key)
        .bind(fingerprint.as_bytes().as_slice())
        .bind(PROCESSING)
        .bind(token)
        .bind(lease_until)
        .bind(now.as_millis() as i64)
        .bind(processing_expiry(now, terms).as_millis() as i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let now = SystemClock.now();
    let done = sqlx::query(include_str!("../sql/complete.sql"))
        .bind(scope)
        .bind(key)
        .bind(token)
        .bind(PROCESSING)
        .bind(now.as_millis() as i64)
        .bind(COMPLETED)
        .bind((now + terms.ttl).as_millis() as i64)
        .bind(encoded)
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
}

/// Runs `iters` acquire + complete of new keys as `tasks` concurrent tasks; the time they took.
fn concurrently<F, Fut>(runtime: &Runtime, iters: u64, tasks: u64, one: F) -> Duration
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    runtime.block_on(async {
        let start = std::time::Instant::now();
        let workers: Vec<_> = (0..tasks)
            .map(|task| {
                let one = one.clone();
                // The first `iters % tasks` tasks take one more.
                let share = iters / tasks + u64::from(task < iters % tasks);
                tokio::spawn(async move {
                    for _ in 0..share {
                        one().await;
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.await.unwrap();
        }
        start.elapsed()
    })
}

fn acquire_complete(c: &mut Criterion) {
    let runtime = Runtime::new().expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let terms = Terms::from(&Policy::default());
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let scope = Scope::from_identity([b"Bearer sk_test_bench".as_slice()]);
    let response = response();

    let store = runtime.block_on(async {
        let options =
            SqliteOptions::new(dir.path().join("store.db")).synchronous(Synchronous::Normal);
        SqliteStore::open_with(options).await.expect("store")
    });
    let pool = runtime.block_on(async {
        let path = dir.path().join("baseline.db");
        // The store creates the schema; the baseline then runs on its own pool.
        SqliteStore::open(&path)
            .await
            .expect("schema")
            .close()
            .await;
        baseline_pool(&path, SqliteSynchronous::Normal).await
    });

    let mut group = c.benchmark_group("sqlite_acquire_complete");
    group.throughput(Throughput::Elements(1));
    group.bench_function("store", |b| {
        b.to_async(&runtime).iter(|| async {
            let address = next_address(scope);
            let Acquisition::Acquired(lease) =
                store.acquire(&address, &fingerprint, terms).await.unwrap()
            else {
                panic!("a new key is acquired");
            };
            store
                .complete(&address, lease.token, &response, terms.ttl)
                .await
                .unwrap();
            black_box(lease);
        });
    });
    let encoded = response.encode();
    group.bench_function("baseline_sqlx", |b| {
        b.to_async(&runtime).iter(|| async {
            let address = next_address(scope);
            baseline_acquire_complete(&pool, &address, &fingerprint, terms, &encoded).await;
        });
    });
    group.finish();
}

/// Group commit: new keys at 1, 8, 32 and 128 concurrent callers with `synchronous = FULL` (a
/// flush per commit), the store against the same SQL committed one key per transaction, as a
/// store without group commit does.
fn concurrent_acquire_complete(c: &mut Criterion) {
    let runtime = Runtime::new().expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let terms = Terms::from(&Policy::default());
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let scope = Scope::from_identity([b"Bearer sk_test_bench".as_slice()]);
    let response = response();
    let encoded = response.encode();

    let store = runtime.block_on(async {
        SqliteStore::open(dir.path().join("grouped.db"))
            .await
            .expect("store")
    });
    let pool = runtime.block_on(async {
        let path = dir.path().join("one_per_key.db");
        SqliteStore::open(&path)
            .await
            .expect("schema")
            .close()
            .await;
        baseline_pool(&path, SqliteSynchronous::Full).await
    });

    let mut group = c.benchmark_group("sqlite_full_concurrent");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    for tasks in [1u64, 8, 32, 128] {
        let (store, response) = (store.clone(), response.clone());
        group.bench_function(format!("store/{tasks}"), |b| {
            b.iter_custom(|iters| {
                let (store, response) = (store.clone(), response.clone());
                concurrently(&runtime, iters, tasks, move || {
                    let (store, response) = (store.clone(), response.clone());
                    async move {
                        let address = next_address(scope);
                        let Acquisition::Acquired(lease) =
                            store.acquire(&address, &fingerprint, terms).await.unwrap()
                        else {
                            panic!("a new key is acquired");
                        };
                        store
                            .complete(&address, lease.token, &response, terms.ttl)
                            .await
                            .unwrap();
                    }
                })
            });
        });
        let (pool, encoded) = (pool.clone(), encoded.clone());
        group.bench_function(format!("one_transaction_per_key/{tasks}"), |b| {
            b.iter_custom(|iters| {
                let (pool, encoded) = (pool.clone(), encoded.clone());
                concurrently(&runtime, iters, tasks, move || {
                    let (pool, encoded) = (pool.clone(), encoded.clone());
                    async move {
                        let address = next_address(scope);
                        baseline_acquire_complete(&pool, &address, &fingerprint, terms, &encoded)
                            .await;
                    }
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, acquire_complete, concurrent_acquire_complete);
criterion_main!(benches);
