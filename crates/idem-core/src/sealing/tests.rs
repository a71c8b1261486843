use std::sync::Arc;

use crate::{
    Acquisition, Address, Clock, FencingToken, Fingerprint, MemoryStore, Outcome, Policy,
    RecordState, Scope, Store, StoreError, StoredResponse, SystemClock, Terms,
    sealing::{
        KeyRing, Sealed,
        envelope::{self, Binding},
    },
};

const KEY_A: &str = "a:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "b:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
const SECRET: &[u8] = b"card 4242424242424242";

fn ring(text: &str) -> KeyRing {
    text.parse().unwrap()
}

fn terms() -> Terms {
    (&Policy::default()).into()
}

fn address(key: &str) -> Address {
    Address::new(
        Scope::from_identity([b"Bearer alice".as_slice()]),
        key.parse().unwrap(),
    )
}

fn response() -> StoredResponse {
    StoredResponse::new(201)
        .header("content-type", "text/plain")
        .header("x-card", "4242424242424242")
        .body(SECRET)
        .trailer("grpc-status", "0")
}

/// Acquires `address` and completes it with `response` through `store`.
async fn write(store: &impl Store, address: &Address, response: &StoredResponse) {
    complete(store, address, &response.clone().into()).await;
}

/// Acquires `address` and completes it with `outcome` through `store`.
async fn complete(store: &impl Store, address: &Address, outcome: &Outcome) {
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let Acquisition::Acquired(lease) = store.acquire(address, &fingerprint, terms()).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    store
        .complete(address, lease.token, outcome, terms().ttl)
        .await
        .unwrap();
}

async fn replay(store: &impl Store, address: &Address) -> Result<Acquisition, StoreError> {
    store
        .acquire(address, &Fingerprint::from_bytes([1; 32]), terms())
        .await
}

/// The response the inner store holds.
async fn held(store: &MemoryStore, address: &Address) -> StoredResponse {
    match store.get(address).await.unwrap().unwrap().state {
        RecordState::Completed {
            outcome: Outcome::Response(response),
            ..
        } => response,
        state => panic!("expected a completed record, got {state:?}"),
    }
}

fn corruption(result: Result<Acquisition, StoreError>) -> String {
    match result {
        Err(StoreError::Corrupted(source)) => source.to_string(),
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn the_inner_store_holds_no_status_header_or_body_in_clear() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    let address = address("pay-1");
    write(&store, &address, &response()).await;

    let sealed = held(&inner, &address).await;
    assert_eq!(sealed.status, 500);
    assert_eq!(sealed.headers, []);
    assert_eq!(sealed.trailers, None);
    let encoded = sealed.encode();
    for clear in [
        SECRET,
        b"4242424242424242",
        b"x-card",
        b"grpc-status",
        b"text/plain",
    ] {
        assert!(
            !contains(&encoded, clear),
            "{:?} in clear",
            String::from_utf8_lossy(clear)
        );
    }
    // Framing, id, token, expiry, nonce, the encoded response and the tag: nothing more.
    assert_eq!(
        sealed.body.len(),
        12 + 1 + 1 + 1 + 8 + 8 + 24 + response().encoded_len() + 16
    );

    assert_eq!(
        replay(&store, &address).await.unwrap(),
        Acquisition::Completed(response().into())
    );
    let record = store.get(&address).await.unwrap().unwrap();
    assert_eq!(record.state.name(), "completed");
    assert!(matches!(
        record.state,
        RecordState::Completed { outcome: Outcome::Response(r), .. } if r == response()
    ));
}

#[tokio::test]
async fn each_seal_draws_a_new_nonce() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    write(&store, &address("one"), &response()).await;
    write(&store, &address("two"), &response()).await;
    let one = held(&inner, &address("one")).await.body;
    let two = held(&inner, &address("two")).await.body;
    assert_eq!(one[..15], two[..15]);
    assert_ne!(one[31..55], two[31..55]);
}

#[tokio::test]
async fn a_rotated_ring_opens_old_and_new_records_and_seals_with_the_new_key() {
    let inner = Arc::new(MemoryStore::new());
    let before = Sealed::new(inner.clone(), ring(KEY_A));
    write(&before, &address("old"), &response()).await;

    let rotated = Sealed::new(inner.clone(), ring(&format!("{KEY_B}\n{KEY_A}\n")));
    let newer = StoredResponse::new(200).body("after rotation");
    write(&rotated, &address("new"), &newer).await;

    assert_eq!(
        replay(&rotated, &address("old")).await.unwrap(),
        Acquisition::Completed(response().into())
    );
    assert_eq!(
        replay(&rotated, &address("new")).await.unwrap(),
        Acquisition::Completed(newer.into())
    );
    // The id byte and the id: `b` seals after the rotation.
    assert_eq!(held(&inner, &address("new")).await.body[13..15], [1, b'b']);
    assert_eq!(held(&inner, &address("old")).await.body[13..15], [1, b'a']);

    // Once `a` leaves the ring, its records no longer open.
    let retired = Sealed::new(inner.clone(), ring(KEY_B));
    assert_eq!(
        corruption(replay(&retired, &address("old")).await),
        "the record is sealed with key `a`, which is not in the key ring"
    );
}

#[tokio::test]
async fn a_sealed_response_copied_to_another_address_does_not_open() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    write(&store, &address("victim"), &response()).await;
    let sealed = held(&inner, &address("victim")).await;

    // The copy is written straight into the inner store, as someone with access to it could.
    write(&*inner, &address("attacker"), &sealed).await;
    assert_eq!(
        corruption(replay(&store, &address("attacker")).await),
        "the record sealed with key `a` does not open: it was altered or copied from another address"
    );
    // Same key, other scope.
    let other_scope = Address::anonymous("victim".parse().unwrap());
    write(&*inner, &other_scope, &sealed).await;
    assert!(matches!(
        store.get(&other_scope).await,
        Err(StoreError::Corrupted(_))
    ));
}

#[tokio::test]
async fn a_sealed_response_under_another_key_with_the_same_id_does_not_open() {
    let inner = Arc::new(MemoryStore::new());
    write(
        &Sealed::new(inner.clone(), ring(KEY_A)),
        &address("k"),
        &response(),
    )
    .await;
    let impostor = Sealed::new(inner.clone(), ring(&KEY_B.replacen('b', "a", 1)));
    assert_eq!(
        corruption(replay(&impostor, &address("k")).await),
        "the record sealed with key `a` does not open: it was altered or copied from another address"
    );
}

#[tokio::test]
async fn every_altered_byte_makes_the_record_corrupted() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    let len = seal(&store, &address("probe")).body.len();
    // After the magic: version, id length, id, token, expiry, nonce, ciphertext, tag.
    for at in 12..len {
        let address = address(&format!("tampered-{at}"));
        let sealed = seal(&store, &address);
        let mut body = sealed.body.to_vec();
        body[at] ^= 0x01;
        let tampered = StoredResponse {
            body: body.into(),
            ..sealed
        };
        write(&*inner, &address, &tampered).await;
        assert!(
            matches!(
                replay(&store, &address).await,
                Err(StoreError::Corrupted(_))
            ),
            "byte {at}"
        );
    }
}

/// `response()` sealed for `address` with the store's ring, as the request that `write` and
/// `replay` send.
fn seal(store: &Sealed<Arc<MemoryStore>>, address: &Address) -> StoredResponse {
    let binding = Binding {
        fingerprint: Fingerprint::from_bytes([1; 32]),
        token: FencingToken::new(1),
        expires: SystemClock.now() + terms().ttl,
    };
    envelope::seal(store.ring(), address, &binding, &response().into()).unwrap()
}

#[tokio::test]
async fn a_truncated_sealed_record_is_corrupted() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    let address = address("short");
    let sealed = seal(&store, &address);
    let truncated = StoredResponse {
        body: sealed.body.slice(..12 + 2 + 1 + 24 + 15),
        ..sealed
    };
    write(&*inner, &address, &truncated).await;
    assert_eq!(
        corruption(replay(&store, &address).await),
        "the sealed record is truncated"
    );
}

#[tokio::test]
async fn records_in_clear_are_replayed_unless_refused() {
    let inner = Arc::new(MemoryStore::new());
    let address = address("before-sealing");
    write(&*inner, &address, &response()).await;

    // By default a record in clear is refused: it may have been planted.
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    assert_eq!(
        corruption(replay(&store, &address).await),
        "the record is not sealed, and only sealed records are accepted"
    );
    // Accepted while the records written before sealing age out, each one counted.
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let lenient = store.accept_plaintext(true).on_plaintext({
        let accepted = Arc::clone(&accepted);
        move || {
            accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    for _ in 0..2 {
        assert_eq!(
            replay(&lenient, &address).await.unwrap(),
            Acquisition::Completed(response().into())
        );
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[tokio::test]
async fn an_unknown_outcome_is_sealed_and_opens_as_unknown() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    let address = address("lost");
    complete(&store, &address, &Outcome::Unknown).await;

    let sealed = held(&inner, &address).await;
    assert_eq!(sealed.status, 500);
    assert_eq!(
        sealed.body.len(),
        12 + 1 + 1 + 1 + 8 + 8 + 24 + Outcome::Unknown.encoded_len() + 16
    );
    assert_eq!(
        replay(&store, &address).await.unwrap(),
        Acquisition::Completed(Outcome::Unknown)
    );
    let record = store.get(&address).await.unwrap().unwrap();
    assert!(matches!(
        record.state,
        RecordState::Completed {
            outcome: Outcome::Unknown,
            ..
        }
    ));
}

#[tokio::test]
async fn an_unknown_outcome_in_clear_is_replayed_unless_refused() {
    let inner = Arc::new(MemoryStore::new());
    let address = address("lost-before-sealing");
    complete(&*inner, &address, &Outcome::Unknown).await;

    let store = Sealed::new(inner.clone(), ring(KEY_A));
    assert_eq!(
        replay(&store.clone().accept_plaintext(true), &address)
            .await
            .unwrap(),
        Acquisition::Completed(Outcome::Unknown)
    );
    assert_eq!(
        corruption(replay(&store, &address).await),
        "the record is not sealed, and only sealed records are accepted"
    );
}

#[tokio::test]
async fn a_version_1_record_still_opens_bound_to_its_address() {
    // Sealed by an earlier build: the address and the key id were the whole associated data.
    // The same key and address, the same layout without token and expiry.
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A));
    let address = address("sealed-before");
    let current = seal(&store, &address);
    let v1 = version_1(&store, &address);
    assert_eq!(v1.len(), current.body.len() - 16);
    write(
        &*inner,
        &address,
        &StoredResponse {
            body: v1.into(),
            ..current
        },
    )
    .await;
    assert_eq!(
        replay(&store, &address).await.unwrap(),
        Acquisition::Completed(response().into())
    );
    let elsewhere = self::address("sealed-before-elsewhere");
    let copied = held(&inner, &address).await;
    write(&*inner, &elsewhere, &copied).await;
    assert_eq!(
        corruption(replay(&store, &elsewhere).await),
        "the record sealed with key `a` does not open: it was altered or copied from another address"
    );
}

/// `response()` sealed for `address` as version 1 of the framing was.
fn version_1(store: &Sealed<Arc<MemoryStore>>, address: &Address) -> Vec<u8> {
    use chacha20poly1305::{AeadInOut, XNonce};
    let key = store.ring().sealing_key();
    let mut body = b"\xffidem-sealed\x01\x01a".to_vec();
    let nonce = [3; 24];
    body.extend_from_slice(&nonce);
    let start = body.len();
    Outcome::from(response()).encode_into(&mut body);
    let mut aad = address.scope.as_bytes().to_vec();
    aad.push(address.key.as_str().len() as u8);
    aad.extend_from_slice(address.key.as_str().as_bytes());
    aad.extend_from_slice(b"\x01a");
    let tag = key
        .cipher
        .encrypt_inout_detached(&XNonce::from(nonce), &aad, (&mut body[start..]).into())
        .unwrap();
    body.extend_from_slice(&tag);
    body
}

#[tokio::test]
async fn a_completion_through_another_sealed_store_reads_the_fingerprint_back() {
    let inner = Arc::new(MemoryStore::new());
    let acquiring = Sealed::new(inner.clone(), ring(KEY_A));
    let completing = Sealed::new(inner.clone(), ring(KEY_A));
    let address = address("handed-over");
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let Acquisition::Acquired(lease) = acquiring
        .acquire(&address, &fingerprint, terms())
        .await
        .unwrap()
    else {
        panic!("a new key is acquired");
    };
    completing
        .complete(&address, lease.token, &response().into(), terms().ttl)
        .await
        .unwrap();
    assert_eq!(
        replay(&acquiring, &address).await.unwrap(),
        Acquisition::Completed(response().into())
    );
    // A token the record does not hold is refused before anything is sealed.
    let Acquisition::Acquired(stale) = completing
        .acquire(&self::address("taken-over"), &fingerprint, terms())
        .await
        .unwrap()
    else {
        panic!("a new key is acquired");
    };
    inner.forget(&self::address("taken-over")).await.unwrap();
    assert!(matches!(
        acquiring
            .complete(
                &self::address("taken-over"),
                stale.token,
                &response().into(),
                terms().ttl
            )
            .await,
        Err(StoreError::LeaseLost)
    ));
}

#[tokio::test]
async fn the_fingerprints_of_executions_in_progress_are_bounded() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(inner.clone(), ring(KEY_A)).held_capacity(8);
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let mut leases = Vec::new();
    for i in 0..18 {
        let address = address(&format!("held-{i}"));
        let Acquisition::Acquired(lease) = store
            .acquire(&address, &fingerprint, terms())
            .await
            .unwrap()
        else {
            panic!("a new key is acquired");
        };
        leases.push((address, lease.token));
    }
    assert_eq!(store.held_len(), 8);
    // Every one completes: those forgotten read their fingerprint back from the store.
    for (address, token) in &leases {
        store
            .complete(address, *token, &response().into(), terms().ttl)
            .await
            .unwrap();
    }
    assert_eq!(store.held_len(), 0);
    assert_eq!(
        replay(&store, &leases[0].0).await.unwrap(),
        Acquisition::Completed(response().into())
    );
}

#[tokio::test]
async fn parts_are_sealed_each_bound_to_its_execution_and_place() {
    let inner = Arc::new(MemoryStore::new());
    let store = Sealed::new(Arc::clone(&inner), ring(KEY_A));
    let a = address("streamed");
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let Acquisition::Acquired(lease) = store.acquire(&a, &fingerprint, terms()).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    let parts = [
        bytes::Bytes::from_static(SECRET),
        bytes::Bytes::from_static(b"tail"),
    ];
    for (index, part) in (0..).zip(&parts) {
        store
            .append_part(&a, lease.token, index, part)
            .await
            .unwrap();
    }
    assert_eq!(
        store
            .read_parts(&a, lease.token, 0, usize::MAX)
            .await
            .unwrap(),
        parts
    );
    let held = inner
        .read_parts(&a, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(held.len(), 2);
    assert!(
        !held[0].windows(4).any(|w| w == b"4242"),
        "sealed in the store"
    );

    // The same bytes under another execution, place or address do not open.
    let unopened = |result: Result<bytes::Bytes, _>| {
        assert!(
            matches!(
                result,
                Err(crate::sealing::SealingError::Inauthentic { .. })
            ),
            "{result:?}"
        );
    };
    let other = FencingToken::new(lease.token.get() + 1);
    unopened(envelope::open_part(
        &ring(KEY_A),
        &a,
        other,
        0,
        held[0].clone(),
    ));
    unopened(envelope::open_part(
        &ring(KEY_A),
        &a,
        lease.token,
        1,
        held[0].clone(),
    ));
    let b = address("elsewhere");
    unopened(envelope::open_part(
        &ring(KEY_A),
        &b,
        lease.token,
        0,
        held[0].clone(),
    ));
    assert_eq!(
        envelope::open_part(&ring(KEY_A), &a, lease.token, 0, held[0].clone()).unwrap(),
        parts[0]
    );

    // A part in clear in the store is refused.
    let c = address("planted");
    let Acquisition::Acquired(planted) = inner.acquire(&c, &fingerprint, terms()).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    inner
        .append_part(
            &c,
            planted.token,
            0,
            &bytes::Bytes::from_static(b"in clear"),
        )
        .await
        .unwrap();
    let refused = store.read_parts(&c, planted.token, 0, usize::MAX).await;
    assert!(
        matches!(refused, Err(StoreError::Corrupted(_))),
        "{refused:?}"
    );
}
