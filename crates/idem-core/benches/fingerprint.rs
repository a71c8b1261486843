//! Throughput of request fingerprints on 64 KiB bodies: blake3 alone, the builder on raw bytes, and
//! the builder on canonical JSON, with serde_json's own parser as the yardstick for parsing cost.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{fmt::Write, hint::black_box};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use idem_core::{Fingerprint, FingerprintMode};

/// Body size: every body here is exactly this long.
const SIZE: usize = 64 * 1024;

/// A JSON array of order-like objects, padded to [`SIZE`] with trailing white space: strings
/// (a few with escapes and non-ASCII), integers, decimals, nested objects, keys out of order.
fn document() -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let statuses = ["pending", "succeeded", "failed", "requires_action"];
    let cities = ["Lyon", "São Paulo", "Zürich", "Kraków", "Oslo"];
    let mut doc = String::from("[");
    while doc.len() < SIZE - 600 {
        if doc.len() > 1 {
            doc.push(',');
        }
        write!(
            doc,
            r#"{{"status":"{status}","id":"ord_{id:016x}","amount":{euros}.{cents:02},"quantity":{quantity},"customer":{{"name":"Customer {customer}","email":"c{customer}@example.com","address":{{"zip":"{zip:05}","city":"{city}","line1":"{street} Main Street"}},"vip":{vip}}},"tags":["t{tag_a}","t{tag_b}"],"created":{created},"rate":0.{rate:04},"note":{note}}}"#,
            status = statuses[next(4) as usize],
            id = next(u64::MAX),
            euros = next(10_000),
            cents = next(100),
            quantity = next(20) + 1,
            customer = next(100_000),
            zip = next(100_000),
            city = cities[next(5) as usize],
            street = next(500) + 1,
            vip = next(2) == 0,
            tag_a = next(50),
            tag_b = next(50),
            created = 1_790_000_000 + next(10_000_000),
            rate = next(10_000),
            note = match next(4) {
                0 => r#""leave at the \"back\" door\n\u00e9tage 2""#,
                1 => r#""""#,
                _ => "null",
            },
        )
        .unwrap();
    }
    doc.push(']');
    let mut doc = doc.into_bytes();
    doc.resize(SIZE, b' ');
    doc
}

fn benches(c: &mut Criterion) {
    let body = document();
    assert_eq!(body.len(), SIZE);
    let bytes = Throughput::Bytes(SIZE as u64);
    let fingerprint = |mode| {
        Fingerprint::builder(mode)
            .method("POST")
            .path("/v1/orders")
            .query(None)
            .body(Some("application/json"), black_box(&body))
    };
    // Equal fingerprints would mean the document fell back to raw bytes.
    assert_ne!(
        fingerprint(FingerprintMode::Json),
        fingerprint(FingerprintMode::Raw)
    );

    let mut group = c.benchmark_group("raw_blake3_64k");
    group.throughput(bytes.clone());
    group.bench_function("blake3_hash", |b| b.iter(|| blake3::hash(black_box(&body))));
    group.finish();

    let mut group = c.benchmark_group("fingerprint_raw_64k");
    group.throughput(bytes.clone());
    group.bench_function("builder", |b| b.iter(|| fingerprint(FingerprintMode::Raw)));
    group.finish();

    let mut group = c.benchmark_group("canonical_json_64k");
    group.throughput(bytes.clone());
    group.bench_function("builder", |b| b.iter(|| fingerprint(FingerprintMode::Json)));
    group.finish();

    let mut group = c.benchmark_group("serde_json_parse_64k");
    group.throughput(bytes);
    group.bench_function("value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)).unwrap())
    });
    group.finish();
}

criterion_group!(fingerprint, benches);
criterion_main!(fingerprint);
