//! `RedisStore` acquire + complete on new keys at a fixed concurrency, against its own limit: the
//! very same Lua script sent with `EVALSHA`, one operation per call, at the same concurrency
//! (`baseline/mod.rs`). `benches/batching.rs` compares the two at several concurrencies.
//!
//! Needs `IDEM_TEST_REDIS_URL` (skipped without it). Records get a one-minute TTL, so the keys
//! the bench leaves behind expire by themselves.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group};
use idem_redis::{RedisOptions, RedisStore};
use idem_test_support::Server;

mod support;

use support::{baseline::Baseline, new_key};

/// Tasks issuing operations at once.
const CONCURRENCY: u64 = 16;
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
    let baseline: &'static Baseline = Box::leak(Box::new(runtime.block_on(Baseline::connect(
        &url,
        &format!("idem-bench-baseline:{run}"),
    ))));

    let mut group = c.benchmark_group(format!("redis_acquire_complete_c{CONCURRENCY}"));
    group.throughput(Throughput::Elements(1));
    group.bench_function("store", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let store = store.clone();
            concurrently(iters, move || {
                let store = store.clone();
                async move {
                    let lease = new_key(&store).await;
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
