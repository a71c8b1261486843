//! MemoryStore acquire + complete on new keys, against a bare concurrent map (DashMap) doing the
//! same insert-then-update, on 1 and 2 threads; and the operators' calls over a million records
//! (a page of the listing, the census) against one pass over a map of as many entries.
//!
//! `cargo bench -p idem-core --bench memory_store`
//!
//! The store's futures never wait, so both sides are driven without an async runtime
//! (`now_or_never`): the comparison is the store's logic against the map alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    hint::black_box,
    sync::Barrier,
    time::{Duration, Instant},
};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dashmap::DashMap;
use futures_util::FutureExt;
use idem_core::{
    Acquisition, Address, Fingerprint, ListQuery, MemoryStore, Outcome, Pace, Policy, Scope,
    StateFilter, Store, StoredResponse, Terms,
};

const FP: Fingerprint = Fingerprint::from_bytes([9; 32]);

fn response() -> StoredResponse {
    StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(Bytes::from_static(br#"{"id":"ch_123","amount":1000}"#))
}

fn addresses(run: u64, threads: usize, per_thread: u64) -> Vec<Vec<Address>> {
    let scope = Scope::from_identity([b"Bearer bench".as_slice()]);
    (0..threads)
        .map(|t| {
            (0..per_thread)
                .map(|i| Address::new(scope, format!("k-{run}-{t}-{i}").parse().unwrap()))
                .collect()
        })
        .collect()
}

/// Times `work` on `threads` threads started together, each over its own keys.
fn timed<K: Sync>(keys: &[Vec<K>], work: impl Fn(&[K]) + Sync) -> Duration {
    let barrier = Barrier::new(keys.len() + 1);
    std::thread::scope(|s| {
        for mine in keys {
            let (barrier, work) = (&barrier, &work);
            s.spawn(move || {
                barrier.wait();
                work(mine);
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every thread before returning.
        start
    })
    .elapsed()
}

/// The baseline's record: what a minimal map-based store would keep (written, never read back:
/// the baseline's cost is the write).
#[allow(dead_code)]
enum Entry {
    Processing {
        fingerprint: Fingerprint,
        token: u64,
    },
    Completed {
        fingerprint: Fingerprint,
        response: StoredResponse,
    },
}

fn bench(c: &mut Criterion) {
    let terms = Terms::from(&Policy::default());
    let mut group = c.benchmark_group("memory_acquire_complete");
    for threads in [1usize, 2] {
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("dashmap_baseline", threads), |b| {
            let mut run = 0;
            b.iter_custom(|iters| {
                run += 1;
                let per_thread = iters.div_ceil(threads as u64);
                let keys: Vec<Vec<(Scope, String)>> = addresses(run, threads, per_thread)
                    .into_iter()
                    .map(|v| {
                        v.into_iter()
                            .map(|a| (a.scope, a.key.as_str().to_owned()))
                            .collect()
                    })
                    .collect();
                let map: DashMap<(Scope, String), Entry> = DashMap::new();
                let response = response();
                timed(&keys, |mine| {
                    for (token, key) in mine.iter().enumerate() {
                        let entry = Entry::Processing {
                            fingerprint: FP,
                            token: token as u64,
                        };
                        if map.insert(key.clone(), entry).is_some() {
                            unreachable!("new keys only");
                        }
                        let mut slot = map.get_mut(key).unwrap();
                        *slot = Entry::Completed {
                            fingerprint: FP,
                            response: response.clone(),
                        };
                    }
                })
            })
        });
        group.bench_function(BenchmarkId::new("memory_store", threads), |b| {
            let mut run = 0;
            b.iter_custom(|iters| {
                run += 1;
                let per_thread = iters.div_ceil(threads as u64);
                let keys = addresses(run, threads, per_thread);
                let store = MemoryStore::new();
                let response = Outcome::from(response());
                timed(&keys, |mine| {
                    for address in mine {
                        let acquired = store.acquire(address, &FP, terms).now_or_never();
                        let Some(Ok(Acquisition::Acquired(lease))) = acquired else {
                            unreachable!("new keys are acquired at once");
                        };
                        black_box(
                            store
                                .complete(address, lease.token, &response, terms.ttl)
                                .now_or_never(),
                        );
                    }
                })
            })
        });
    }
    group.finish();
}

/// Records in the store for the operators' calls: one in ten processing.
const RECORDS: u64 = 1_000_000;

fn operators(c: &mut Criterion) {
    let terms = Terms::from(&Policy::default());
    let store = MemoryStore::new().max_keys(2 * RECORDS as usize);
    let response = Outcome::from(response());
    let mut baseline = std::collections::HashMap::with_capacity(RECORDS as usize);
    for (n, address) in addresses(0, 1, RECORDS).remove(0).into_iter().enumerate() {
        let Some(Ok(Acquisition::Acquired(lease))) =
            store.acquire(&address, &FP, terms).now_or_never()
        else {
            unreachable!("new keys are acquired at once");
        };
        if n % 10 != 0 {
            let completed = store.complete(&address, lease.token, &response, terms.ttl);
            completed.now_or_never().unwrap().unwrap();
        }
        baseline.insert(address, n as u64);
    }
    let mut group = c.benchmark_group("operators_1m_records");
    group.sample_size(10);
    group.bench_function("hashmap_pass_baseline", |b| {
        b.iter(|| black_box(baseline.values().filter(|n| *n % 10 == 0).count()))
    });
    group.bench_function("list_100_processing", |b| {
        let query = ListQuery::new(100).state(StateFilter::Processing);
        b.iter(|| black_box(store.list(&query).now_or_never().unwrap().unwrap()))
    });
    group.bench_function("census", |b| {
        b.iter(|| black_box(store.census(Pace::UNPACED).now_or_never().unwrap().unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench, operators);
criterion_main!(benches);
