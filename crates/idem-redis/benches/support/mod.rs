//! What the benches share: every key's terms and response, the store's side of a new key, and
//! the baseline that sends the same script without the store (`baseline.rs`).

pub(crate) mod baseline;

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use idem_core::{
    Acquisition, Address, Fingerprint, Lease, Outcome, Scope, Store, StoredResponse, Terms,
};
use idem_redis::RedisStore;

/// Every key's terms: records outlive a run by a minute at most.
pub(crate) const TERMS: Terms = Terms {
    lease: Duration::from_secs(30),
    ttl: Duration::from_secs(60),
};

/// Every key's response.
pub(crate) fn response() -> Outcome {
    StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(r#"{"id":"ch_1","amount":1000,"currency":"eur"}"#)
        .into()
}

/// A number no other key of this process uses.
fn next() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Acquires and completes a new key through `store`, as a caller with an API key would; its
/// lease.
pub(crate) async fn new_key(store: &RedisStore) -> Lease {
    let scope = Scope::from_identity([b"Bearer sk_test_bench".as_slice()]);
    let address = Address::new(
        scope,
        format!("key-{}", next()).parse().expect("a valid key"),
    );
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let Acquisition::Acquired(lease) = store
        .acquire(&address, &fingerprint, TERMS)
        .await
        .expect("acquire")
    else {
        panic!("a new key is acquired");
    };
    store
        .complete(&address, lease.token, &response(), TERMS.ttl)
        .await
        .expect("complete");
    lease
}
