//! `PostgresStore` acquire + complete on new keys at a fixed concurrency (16 tasks), against a
//! baseline of the same two statements issued directly with sqlx: the store's own SQL text
//! (`PostgresStore::sql`), the same binds, an identical pool, without the store's Rust (row
//! decoding into an `Acquisition`, error mapping, encoding the response per call). The ratio of
//! the two is the store's overhead; `scripts/pgbench-store.sh` measures the same statements with
//! pgbench, the database's own limit.
//!
//! Needs `IDEM_TEST_POSTGRES_URL`; works in a scratch schema that it drops at the end.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput};
use idem_core::{
    Acquisition, Address, Fingerprint, Outcome, Policy, Scope, Store, StoredResponse, Terms,
};
use idem_postgres::{PostgresOptions, PostgresStore, Statement};
use idem_test_support::{PgSchema, Server};
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, PgPool, Row, postgres::PgPoolOptions};
use tokio::runtime::Runtime;

/// Tasks issuing operations at once, and connections in each pool.
const CONCURRENCY: u64 = 16;

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

/// The pool `PostgresStore::connect` opens with these options.
async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(CONCURRENCY as u32)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect")
}

/// Everything one operation needs, shared by the tasks.
struct Bench {
    store: PostgresStore,
    baseline: PgPool,
    scope: Scope,
    fingerprint: Fingerprint,
    terms: Terms,
    response: Outcome,
    encoded: Vec<u8>,
}

impl Bench {
    async fn store_op(&self) {
        let address = next_address(self.scope);
        let Acquisition::Acquired(lease) = self
            .store
            .acquire(&address, &self.fingerprint, self.terms)
            .await
            .unwrap()
        else {
            panic!("a new key is acquired");
        };
        self.store
            .complete(&address, lease.token, &self.response, self.terms.ttl)
            .await
            .unwrap();
    }

    /// What the store sends for a new key, through sqlx directly: its statements for a batch of
    /// one.
    async fn baseline_op(&self) {
        let address = next_address(self.scope);
        // The store keeps SHA-256 of the key, not the key.
        let key: [u8; 32] = Sha256::digest(address.key.as_str().as_bytes()).into();
        let (scope, key) = ([address.scope.as_bytes().as_slice()], [key.as_slice()]);
        let row = sqlx::query(AssertSqlSafe(self.store.sql(Statement::Acquire)))
            .bind(None::<i64>)
            .bind(scope)
            .bind(key)
            .bind([self.fingerprint.as_bytes().as_slice()])
            .bind([self.terms.lease.as_millis() as i64])
            .bind([self.terms.ttl.as_millis() as i64])
            .fetch_one(&self.baseline)
            .await
            .unwrap();
        let token: i64 = row.get("token");
        let done = sqlx::query(AssertSqlSafe(self.store.sql(Statement::Complete)))
            .bind(None::<i64>)
            .bind(scope)
            .bind(key)
            .bind([token])
            .bind([self.encoded.as_slice()])
            .bind([self.terms.ttl.as_millis() as i64])
            .execute(&self.baseline)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

/// Runs `iters` operations on each of `CONCURRENCY` tasks (an iteration is one operation per
/// task: `CONCURRENCY` elements) and returns the wall time.
async fn concurrently<F, Fut>(bench: &Arc<Bench>, iters: u64, op: F) -> Duration
where
    F: Fn(Arc<Bench>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let bench = Arc::clone(bench);
            tokio::spawn(async move {
                for _ in 0..iters {
                    op(Arc::clone(&bench)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

fn main() {
    let Some(url) = Server::Postgres.url() else {
        return;
    };
    let runtime = Runtime::new().expect("tokio runtime");
    let schema = PgSchema::new(&url);
    let options = PostgresOptions::new()
        .schema(schema.name().parse().expect("valid schema"))
        .pool_size(CONCURRENCY as u32);
    let bench = runtime.block_on(async {
        let baseline = pool(&url).await;
        PostgresStore::migrate(&baseline, &options)
            .await
            .expect("migrate");
        let response = response();
        Arc::new(Bench {
            store: PostgresStore::connect(&url, options).await.expect("store"),
            baseline,
            scope: Scope::from_identity([b"Bearer sk_test_bench".as_slice()]),
            fingerprint: Fingerprint::from_bytes([7; 32]),
            terms: Terms::from(&Policy::default()),
            encoded: response.encode(),
            response,
        })
    });

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("postgres_acquire_complete_16_tasks");
    group.throughput(Throughput::Elements(CONCURRENCY));
    group.bench_function("store", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let bench = Arc::clone(&bench);
            async move { concurrently(&bench, iters, |b| async move { b.store_op().await }).await }
        });
    });
    group.bench_function("baseline_sqlx", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let bench = Arc::clone(&bench);
            async move {
                concurrently(&bench, iters, |b| async move { b.baseline_op().await }).await
            }
        });
    });
    group.finish();

    runtime.block_on(bench.store.close());
    drop(schema);
    criterion.final_summary();
}
