//! What sealing costs: acquire, complete, replay and forget of new keys on a MemoryStore, bare and
//! wrapped in `Sealed`, for a small JSON response and a 64 KiB one.
//!
//! `cargo bench -p idem-core --features sealing --bench sealing`

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::FutureExt;
use idem_core::{
    Acquisition, Address, Fingerprint, MemoryStore, Policy, Store, StoredResponse, Terms,
    sealing::{KeyRing, Sealed},
};

const FP: Fingerprint = Fingerprint::from_bytes([9; 32]);

/// One request's store work: acquire, complete, then a retry's replay.
fn round(store: &impl Store, address: &Address, response: &StoredResponse, terms: Terms) {
    let Some(Ok(Acquisition::Acquired(lease))) = store.acquire(address, &FP, terms).now_or_never()
    else {
        unreachable!("a new key is acquired");
    };
    store
        .complete(address, lease.token, &response.clone().into(), terms.ttl)
        .now_or_never()
        .unwrap()
        .unwrap();
    let replay = store.acquire(address, &FP, terms).now_or_never().unwrap();
    assert!(matches!(replay, Ok(Acquisition::Completed(_))));
    // Forgotten, so that the store stays within its bounds however many rounds run.
    assert!(matches!(
        store.forget(address).now_or_never(),
        Some(Ok(true))
    ));
}

fn bench(c: &mut Criterion) {
    let terms = Terms::from(&Policy::default());
    let small = StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(Bytes::from_static(br#"{"id":"ch_123","amount":1000}"#));
    let large = StoredResponse::new(200).body(vec![7u8; 64 << 10]);
    let mut group = c.benchmark_group("sealing_round");
    group.throughput(Throughput::Elements(1));
    for (size, response) in [("small", &small), ("64KiB", &large)] {
        let bare = Arc::new(MemoryStore::new());
        let sealed = Sealed::new(Arc::new(MemoryStore::new()), KeyRing::single("k", [1; 32]));
        let mut n = 0u64;
        group.bench_function(BenchmarkId::new("memory", size), |b| {
            b.iter(|| {
                n += 1;
                let address = Address::anonymous(format!("k-{n}").parse().unwrap());
                round(&bare, &address, response, terms);
            });
        });
        group.bench_function(BenchmarkId::new("sealed_memory", size), |b| {
            b.iter(|| {
                n += 1;
                let address = Address::anonymous(format!("k-{n}").parse().unwrap());
                round(&sealed, &address, response, terms);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
