use std::{sync::Arc, time::Duration};

use crate::{
    Acquisition, Address, DigestKey, Fingerprint, KeyedAddresses, ListQuery, ManualClock,
    MemoryStore, Outcome, Scope, Store, StoredResponse, Terms,
};

const TERMS: Terms = Terms {
    lease: Duration::from_secs(2),
    ttl: Duration::from_secs(60),
};
const FP: Fingerprint = Fingerprint::from_bytes([1; 32]);

fn address(key: &str) -> Address {
    Address::new(
        Scope::from_identity([b"Bearer alice".as_slice()]),
        key.parse().unwrap(),
    )
}

fn response(n: u16) -> Outcome {
    StoredResponse::new(200 + n)
        .body(format!("response {n}"))
        .into()
}

/// A memory store on a manual clock, and the wrapper over it, changing over for one TTL.
fn stores() -> (
    Arc<MemoryStore>,
    KeyedAddresses<Arc<MemoryStore>>,
    ManualClock,
) {
    let clock = ManualClock::default();
    let inner = Arc::new(MemoryStore::with_clock(clock.clone()));
    let keyed = KeyedAddresses::new(inner.clone(), &DigestKey::new([7; 32]))
        .with_clock(clock.clone())
        .changeover_for(TERMS.ttl);
    (inner, keyed, clock)
}

/// Acquires and completes `address` with `outcome` in `store`.
async fn complete(
    store: &impl Store,
    address: &Address,
    fingerprint: &Fingerprint,
    outcome: &Outcome,
) {
    let Acquisition::Acquired(lease) = store.acquire(address, fingerprint, TERMS).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    store
        .complete(address, lease.token, outcome, TERMS.ttl)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_inner_store_holds_neither_the_scope_nor_the_key() {
    let (inner, store, _) = stores();
    let address = address("order-42");
    complete(&store, &address, &FP, &response(1)).await;

    assert_eq!(inner.get(&address).await.unwrap(), None);
    let page = inner.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(page.records.len(), 1);
    let listed = &page.records[0];
    let keyed = store.keyed(&address);
    assert_eq!(listed.scope, keyed.scope);
    assert_eq!(listed.key_sha256, keyed.key.sha256());
    assert_ne!(listed.scope, address.scope);
    assert_ne!(listed.key_sha256, address.key.sha256());
    assert_eq!(keyed.key.as_str().len(), 64);
    // The same digest key gives the same addresses; another gives others.
    let again = KeyedAddresses::new(inner.clone(), &DigestKey::new([7; 32]));
    assert_eq!(again.keyed(&address), keyed);
    let other = KeyedAddresses::new(inner.clone(), &DigestKey::new([8; 32]));
    assert_ne!(other.keyed(&address).scope, keyed.scope);
    assert_ne!(other.keyed(&address).key, keyed.key);

    assert_eq!(
        store.acquire(&address, &FP, TERMS).await.unwrap(),
        Acquisition::Completed(response(1))
    );
}

#[tokio::test]
async fn during_the_changeover_a_record_under_its_plain_address_is_replayed() {
    let (inner, store, _) = stores();
    let address = address("before");
    complete(&*inner, &address, &FP, &response(1)).await;

    for _ in 0..2 {
        assert_eq!(
            store.acquire(&address, &FP, TERMS).await.unwrap(),
            Acquisition::Completed(response(1))
        );
    }
    // The keyed acquisition made on the way was released.
    assert_eq!(inner.get(&store.keyed(&address)).await.unwrap(), None);
    assert_eq!(
        store
            .acquire(&address, &Fingerprint::from_bytes([2; 32]), TERMS)
            .await
            .unwrap(),
        Acquisition::Mismatch
    );
    assert_eq!(
        store
            .get(&address)
            .await
            .unwrap()
            .map(|record| record.fingerprint),
        Some(FP)
    );
    assert!(store.forget(&address).await.unwrap());
    assert_eq!(inner.get(&address).await.unwrap(), None);
}

#[tokio::test]
async fn during_the_changeover_a_plain_record_in_flight_answers_in_flight_until_its_lease_ends() {
    let (inner, store, clock) = stores();
    let address = address("running");
    let Acquisition::Acquired(_) = inner.acquire(&address, &FP, TERMS).await.unwrap() else {
        panic!("a new key is acquired");
    };
    clock.advance(Duration::from_millis(500));
    assert_eq!(
        store.acquire(&address, &FP, TERMS).await.unwrap(),
        Acquisition::InFlight {
            retry_after: Duration::from_millis(1500)
        }
    );
    assert_eq!(inner.get(&store.keyed(&address)).await.unwrap(), None);

    // Its holder died: the lease runs out, the plain record is cleared, the key runs keyed.
    clock.advance(Duration::from_secs(2));
    let Acquisition::Acquired(lease) = store.acquire(&address, &FP, TERMS).await.unwrap() else {
        panic!("the key is acquired once the plain lease ran out");
    };
    assert!(!lease.took_over);
    assert_eq!(inner.get(&address).await.unwrap(), None);
    store
        .complete(&address, lease.token, &response(2), TERMS.ttl)
        .await
        .unwrap();
    assert_eq!(
        inner
            .get(&store.keyed(&address))
            .await
            .unwrap()
            .map(|r| r.state.name()),
        Some("completed")
    );
}

#[tokio::test]
async fn after_the_changeover_plain_addresses_are_not_looked_at() {
    let (inner, store, clock) = stores();
    let address = address("long-ago");
    // Written under its plain address with a TTL longer than the window (which it should not
    // be: the window is the longest TTL), to show that the window ends.
    let Acquisition::Acquired(lease) = inner.acquire(&address, &FP, TERMS).await.unwrap() else {
        panic!("a new key is acquired");
    };
    inner
        .complete(&address, lease.token, &response(1), TERMS.ttl * 10)
        .await
        .unwrap();
    clock.advance(TERMS.ttl);
    assert!(matches!(
        store.acquire(&address, &FP, TERMS).await.unwrap(),
        Acquisition::Acquired(_)
    ));
    assert!(inner.get(&address).await.unwrap().is_some());

    // Without a change-over, never.
    let (inner, _, _) = stores();
    complete(&*inner, &address, &FP, &response(1)).await;
    let direct = KeyedAddresses::new(inner.clone(), &DigestKey::new([7; 32]));
    assert!(matches!(
        direct.acquire(&address, &FP, TERMS).await.unwrap(),
        Acquisition::Acquired(_)
    ));
    assert_eq!(
        direct
            .get(&Address::anonymous("absent".parse().unwrap()))
            .await
            .unwrap(),
        None
    );
}
