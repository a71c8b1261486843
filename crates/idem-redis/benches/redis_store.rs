//! `RedisStore` acquire + complete on new keys at a fixed concurrency, against its own limit: the
//! very same Lua script sent with `EVALSHA`, one operation per call, at the same concurrency
//! (`baseline/mod.rs`). `benches/batching.rs` compares the two at several concurrencies.
//!
//! Needs `IDEM_TEST_REDIS_URL` (skipped without it). Records get a one-minute TTL, so the keys
//! the bench leaves behind expire by themselves.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group};
use idem_core::{Acquisition, Address, Fingerprint, Outcome, Scope, Store, StoredResponse, Terms};
use idem_redis::{RedisOptions, RedisStore};
use idem_test_support::Server;
use redis::aio::ConnectionManager;

mod baseline;

use baseline::Baseline;

/// Tasks issuing operations at once.
const CONCURRENCY: u64 = 16;
const TERMS: Terms = Terms {
    lease: Duration::from_secs(30),
    ttl: Duration::from_secs(60),
};

fn response() -> Outcome {
    StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(r#"{"id":"ch_1","amount":1000,"currency":"eur"}"#)
        .into()
}

/// A number no other operation of this process uses, for a new key each time.
fn next() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Runs `iters` calls of `op` spread over [`CONCURRENCY`] tasks and returns the wall time.
async fn concurrently<F, Fut>(iters: u64, op: F) -> Duration
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|task| {
            let op = op.clone();
            let share = iters / CONCURRENCY + u64::from(task < iters % CONCURRENCY);
            tokio::spawn(async move {
                for _ in 0..share {
                    op().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    start.elapsed()
}

fn acquire_complete(c: &mut Criterion) {
    let Some(url) = Server::Redis.url() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let run = std::process::id();
    let store = runtime.block_on(async {
        let prefix = format!("idem-bench:{run}").parse().expect("prefix");
        RedisStore::open_with(RedisOptions::new(url.as_str()).prefix(prefix))
            .await
            .expect("store")
    });
    let connection = runtime.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("client");
        ConnectionManager::new(client).await.expect("connection")
    });
    let baseline: &'static Baseline = Box::leak(Box::new(Baseline::new(
        connection,
        TERMS,
        response().encode(),
        &format!("idem-bench-baseline:{run}"),
    )));
    let scope = Scope::from_identity([b"Bearer sk_test_bench".as_slice()]);
    let fingerprint = Fingerprint::from_bytes([7; 32]);

    let mut group = c.benchmark_group(format!("redis_acquire_complete_c{CONCURRENCY}"));
    group.throughput(Throughput::Elements(1));
    group.bench_function("store", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let store = store.clone();
            concurrently(iters, move || {
                let store = store.clone();
                async move {
                    let address = Address::new(scope, format!("key-{}", next()).parse().unwrap());
                    let Acquisition::Acquired(lease) =
                        store.acquire(&address, &fingerprint, TERMS).await.unwrap()
                    else {
                        panic!("a new key is acquired");
                    };
                    store
                        .complete(&address, lease.token, &response(), TERMS.ttl)
                        .await
                        .unwrap();
                    black_box(lease);
                }
            })
        });
    });
    group.bench_function("baseline_evalsha", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| concurrently(iters, move || baseline.new_key()));
    });
    group.finish();
}

criterion_group!(benches, acquire_complete);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
