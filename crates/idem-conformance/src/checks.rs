//! The checks: one `async fn` per rule of the [`Store`] contract, each asserting exact outcomes.

use std::time::Duration;

use bytes::Bytes;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, FencingToken, Fingerprint,
    IdempotencyKey, Lease, ListCursor, ListQuery, Listed, ManualClock, Outcome, Pace, RecordState,
    Scope, StateFilter, Store, StoreError, StoredResponse, Terms, Timestamp,
    sealing::{DEFAULT_CLOCK_SKEW, KeyRing, Sealed},
};

use crate::Subject;

/// The lease every check acquires with.
pub const LEASE: Duration = Duration::from_secs(2);
/// The TTL every check acquires and completes with.
pub const TTL: Duration = Duration::from_secs(10);
/// The terms every check acquires with.
pub const TERMS: Terms = Terms {
    lease: LEASE,
    ttl: TTL,
};

/// A fingerprint made of one repeated byte.
pub fn fingerprint(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

/// The address of `key` in the anonymous scope.
pub fn address(key: &str) -> Address {
    Address::anonymous(key.parse::<IdempotencyKey>().expect("valid test key"))
}

/// A small response that identifies `n`.
pub fn response(n: u16) -> StoredResponse {
    StoredResponse::new(200 + n % 100)
        .header("content-type", "text/plain")
        .body(format!("response {n}"))
}

/// Acquires and expects a fresh lease.
pub async fn acquired<S: Store>(store: &S, address: &Address, fp: &Fingerprint) -> Lease {
    match store
        .acquire(address, fp, TERMS)
        .await
        .expect("store is up")
    {
        Acquisition::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// How the concurrent acquires of one address were answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Race {
    /// How many acquired the key: exactly one, for a store that keeps the contract.
    pub acquired: usize,
    /// How many found it in flight.
    pub in_flight: usize,
}

/// Acquires `address` (fingerprint 1, [`TERMS`]) from `callers` concurrent tasks, caller `n`
/// through `stores[n % stores.len()]`, so that several handles (pools, processes) can race; any
/// answer but `Acquired` or `InFlight` fails. `stores` holds at least one store.
pub async fn race_to_acquire<S: Store + Clone>(
    stores: &[S],
    address: &Address,
    callers: usize,
) -> Race {
    let tasks: Vec<_> = (0..callers)
        .map(|n| {
            let (store, address) = (stores[n % stores.len()].clone(), address.clone());
            tokio::spawn(async move { store.acquire(&address, &fingerprint(1), TERMS).await })
        })
        .collect();
    let mut race = Race::default();
    for task in tasks {
        match task.await.unwrap().unwrap() {
            Acquisition::Acquired(_) => race.acquired += 1,
            Acquisition::InFlight { .. } => race.in_flight += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    race
}

fn assert_close(actual: Duration, expected: Duration, tolerance: Duration) {
    let diff = actual.abs_diff(expected);
    assert!(
        diff <= tolerance,
        "expected {expected:?} (± {tolerance:?}), got {actual:?}"
    );
}

fn assert_lease_lost<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::LeaseLost)),
        "expected LeaseLost, got {result:?}"
    );
}

/// Item 1: The first acquire gets the key; a second gets `InFlight` with the lease's remaining time.
pub async fn first_acquire_wins_and_the_second_is_in_flight(subject: &impl Subject) {
    let store = subject.store();
    let a = address("first");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    assert!(!lease.took_over);

    subject.advance(Duration::from_millis(500)).await;
    match store.acquire(&a, &fingerprint(1), TERMS).await.unwrap() {
        Acquisition::InFlight { retry_after } => assert_close(
            retry_after,
            LEASE - Duration::from_millis(500),
            subject.tolerance(),
        ),
        other => panic!("expected InFlight, got {other:?}"),
    }
}

/// Item 2a: After `complete`, the same fingerprint gets the stored response, byte for byte, every time.
pub async fn completed_key_replays_the_response_byte_for_byte(subject: &impl Subject) {
    let store = subject.store();
    let a = address("replay");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    let stored = response(1)
        .header("x-empty", "")
        .trailer("grpc-status", "0");
    let stored = Outcome::from(stored);
    store.complete(&a, lease.token, &stored, TTL).await.unwrap();
    for _ in 0..2 {
        assert_eq!(
            store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(stored.clone())
        );
    }
}

/// Item 2c: A key completed with an unknown outcome replays it, and its record holds it, every
/// time; a mismatch stays a mismatch.
pub async fn unknown_outcome_round_trips(subject: &impl Subject) {
    let store = subject.store();
    let a = address("unknown");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    store
        .complete(&a, lease.token, &Outcome::Unknown, TTL)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(Outcome::Unknown)
        );
    }
    let record = store.get(&a).await.unwrap().expect("record");
    let RecordState::Completed { token, outcome, .. } = record.state else {
        panic!("expected completed, got {:?}", record.state);
    };
    assert_eq!((token, outcome), (lease.token, Outcome::Unknown));
    assert_eq!(
        store.acquire(&a, &fingerprint(2), TERMS).await.unwrap(),
        Acquisition::Mismatch
    );
}

/// Item 2b: Another fingerprint is a mismatch while processing, after completion, and after the lease
/// ran out; it changes nothing.
pub async fn other_fingerprint_is_a_mismatch_while_processing_and_after_completion(
    subject: &impl Subject,
) {
    let store = subject.store();
    let a = address("mismatch");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    assert_eq!(
        store.acquire(&a, &fingerprint(2), TERMS).await.unwrap(),
        Acquisition::Mismatch
    );

    subject.advance(LEASE).await;
    assert_eq!(
        store.acquire(&a, &fingerprint(2), TERMS).await.unwrap(),
        Acquisition::Mismatch
    );
    // The mismatch did not take the key: its holder can still complete.
    store
        .complete(&a, lease.token, &response(2).into(), TTL)
        .await
        .unwrap();
    assert_eq!(
        store.acquire(&a, &fingerprint(2), TERMS).await.unwrap(),
        Acquisition::Mismatch
    );
    assert_eq!(
        store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(2).into())
    );
}

/// Item 3: 64 concurrent acquires of one address elect exactly one holder; repeated for 200 addresses.
pub async fn concurrent_acquires_elect_exactly_one_holder(subject: &impl Subject) {
    const ADDRESSES: usize = 200;
    const CALLERS: usize = 64;
    let (mut acquired, mut in_flight) = (0, 0);
    for n in 0..ADDRESSES {
        let a = address(&format!("race-{n}"));
        let race = race_to_acquire(&[subject.store()], &a, CALLERS).await;
        acquired += race.acquired;
        in_flight += race.in_flight;
        assert_eq!(acquired, n + 1, "address {n}");
    }
    assert_eq!(acquired, ADDRESSES);
    assert_eq!(in_flight, ADDRESSES * (CALLERS - 1));
}

/// Item 4: A released key is free for the next request, whatever its fingerprint, with a larger token.
pub async fn released_key_is_free_for_any_request_with_a_larger_token(subject: &impl Subject) {
    let store = subject.store();
    let a = address("release");
    let first = acquired(&store, &a, &fingerprint(1)).await;
    store.release(&a, first.token).await.unwrap();
    assert_eq!(store.get(&a).await.unwrap(), None);

    let second = acquired(&store, &a, &fingerprint(2)).await;
    assert!(second.token > first.token, "{second:?} after {first:?}");
    assert!(!second.took_over);
    assert_lease_lost(store.release(&a, first.token).await);
}

/// Item 5: A lease that ran out is taken over with a larger token; the old token's `complete`, `renew`
/// and `release` get `LeaseLost` and leave the record as the new holder has it.
pub async fn expired_lease_is_taken_over_and_the_old_token_is_fenced(subject: &impl Subject) {
    let store = subject.store();
    let a = address("takeover");
    let old = acquired(&store, &a, &fingerprint(1)).await;
    subject.advance(LEASE).await;

    let new = acquired(&store, &a, &fingerprint(1)).await;
    assert!(new.took_over);
    assert!(new.token > old.token, "{new:?} after {old:?}");

    let before = store.get(&a).await.unwrap().expect("record");
    assert_lease_lost(
        store
            .complete(&a, old.token, &response(9).into(), TTL)
            .await,
    );
    assert_lease_lost(store.renew(&a, old.token, LEASE).await);
    assert_lease_lost(store.release(&a, old.token).await);
    assert_eq!(store.get(&a).await.unwrap(), Some(before));

    store
        .complete(&a, new.token, &response(1).into(), TTL)
        .await
        .unwrap();
    assert_eq!(
        store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );
}

/// A holder whose lease ran out, but that nobody took over, may still complete.
pub async fn late_completion_by_the_current_holder_is_accepted(subject: &impl Subject) {
    let store = subject.store();
    let a = address("late");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    subject.advance(LEASE + Duration::from_millis(100)).await;
    store
        .complete(&a, lease.token, &response(3).into(), TTL)
        .await
        .unwrap();
    assert_eq!(
        store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(3).into())
    );
}

/// Item 6: `renew` extends the lease: the key stays in flight past the original lease's end.
pub async fn renew_extends_the_lease(subject: &impl Subject) {
    let store = subject.store();
    let a = address("renew");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    let step = Duration::from_millis(1_300); // past two thirds of the lease
    subject.advance(step).await;
    let until = store.renew(&a, lease.token, LEASE).await.unwrap();
    assert_close(
        until.saturating_since(lease.until),
        step,
        subject.tolerance(),
    );

    subject.advance(step).await; // past the original lease, within the renewed one
    match store.acquire(&a, &fingerprint(1), TERMS).await.unwrap() {
        Acquisition::InFlight { retry_after } => {
            assert_close(retry_after, LEASE - step, subject.tolerance());
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
    match store.get(&a).await.unwrap().map(|r| r.state) {
        Some(RecordState::Processing { token, lease_until }) => {
            assert_eq!((token, lease_until), (lease.token, until));
        }
        other => panic!("expected processing, got {other:?}"),
    }
}

/// Item 7a: A completed record counts until its TTL ends; then the key starts a new operation.
pub async fn completed_key_expires_after_its_ttl(subject: &impl Subject) {
    let store = subject.store();
    let a = address("ttl");
    let ttl = Duration::from_secs(1);
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    store
        .complete(&a, lease.token, &response(1).into(), ttl)
        .await
        .unwrap();
    assert_eq!(
        store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );

    subject.advance(ttl).await;
    assert_eq!(store.get(&a).await.unwrap(), None);
    let next = acquired(&store, &a, &fingerprint(2)).await;
    assert!(next.token > lease.token);
    assert!(!next.took_over);
}

/// Item 7b: `purge_expired` removes expired records only, at most `limit` at a time; processing
/// records with a live lease survive even when their TTL is shorter than the lease.
pub async fn purge_removes_only_expired_records_in_bounded_batches(subject: &impl Subject) {
    let store = subject.store();
    let short = Duration::from_secs(1);
    for n in 0..5 {
        let a = address(&format!("expiring-{n}"));
        let lease = acquired(&store, &a, &fingerprint(1)).await;
        store
            .complete(&a, lease.token, &response(n).into(), short)
            .await
            .unwrap();
    }
    for n in 0..3 {
        let a = address(&format!("kept-{n}"));
        let lease = acquired(&store, &a, &fingerprint(1)).await;
        store
            .complete(&a, lease.token, &response(n).into(), TTL)
            .await
            .unwrap();
    }
    let short_ttl = Terms {
        lease: Duration::from_secs(5),
        ttl: short,
    };
    for n in 0..2 {
        let a = address(&format!("processing-{n}"));
        let got = store.acquire(&a, &fingerprint(1), short_ttl).await.unwrap();
        assert!(matches!(got, Acquisition::Acquired(_)), "{got:?}");
    }
    assert_eq!(store.purge_expired(100).await.unwrap(), 0);

    subject.advance(short).await;
    assert_eq!(store.purge_expired(2).await.unwrap(), 2);
    assert_eq!(store.purge_expired(2).await.unwrap(), 2);
    assert_eq!(store.purge_expired(2).await.unwrap(), 1);
    assert_eq!(store.purge_expired(2).await.unwrap(), 0);

    for n in 0..3 {
        let a = address(&format!("kept-{n}"));
        assert!(store.get(&a).await.unwrap().is_some(), "kept-{n}");
    }
    for n in 0..2 {
        let a = address(&format!("processing-{n}"));
        let state = store.get(&a).await.unwrap().map(|r| r.state.name());
        assert_eq!(state, Some("processing"));
    }
}

/// Item 8: Two scopes with the same key are independent records.
pub async fn scopes_are_independent(subject: &impl Subject) {
    let store = subject.store();
    let key: IdempotencyKey = "shared-key".parse().unwrap();
    let alice = Address::new(Scope::from_identity([b"alice".as_slice()]), key.clone());
    let bob = Address::new(Scope::from_identity([b"bob".as_slice()]), key.clone());
    let anonymous = Address::anonymous(key);

    let a = acquired(&store, &alice, &fingerprint(1)).await;
    let b = acquired(&store, &bob, &fingerprint(2)).await;
    acquired(&store, &anonymous, &fingerprint(3)).await;
    store
        .complete(&alice, a.token, &response(1).into(), TTL)
        .await
        .unwrap();
    store
        .complete(&bob, b.token, &response(2).into(), TTL)
        .await
        .unwrap();

    assert_eq!(
        store.acquire(&alice, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );
    assert_eq!(
        store.acquire(&bob, &fingerprint(2), TERMS).await.unwrap(),
        Acquisition::Completed(response(2).into())
    );
    assert!(store.forget(&alice).await.unwrap());
    assert_eq!(
        store.acquire(&bob, &fingerprint(2), TERMS).await.unwrap(),
        Acquisition::Completed(response(2).into())
    );
}

/// Item 9: A 1 MiB binary body with many repeated headers and trailers round-trips byte-exact.
pub async fn large_binary_response_round_trips(subject: &impl Subject) {
    let store = subject.store();
    let a = address("large");
    let body: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut large = StoredResponse::new(200).body(body);
    for i in 0..200u32 {
        large = large.header("set-cookie", format!("c{i}={}", "x".repeat(i as usize)));
        large = large.header("x-binary", Bytes::from(vec![0xff, 0x00, i as u8]));
    }
    large = large
        .trailer("grpc-status", "0")
        .trailer("grpc-message", "");

    let lease = acquired(&store, &a, &fingerprint(1)).await;
    store
        .complete(&a, lease.token, &large.clone().into(), TTL)
        .await
        .unwrap();
    match store.acquire(&a, &fingerprint(1), TERMS).await.unwrap() {
        Acquisition::Completed(Outcome::Response(replayed)) => {
            assert_eq!(replayed.body, large.body, "body differs");
            assert_eq!(replayed, large);
        }
        other => panic!("expected Completed, got {other:?}"),
    }
}

/// `forget` removes a record in any state; its holder is fenced out.
pub async fn forget_removes_any_record_and_fences_its_holder(subject: &impl Subject) {
    let store = subject.store();
    let a = address("forget");
    assert!(!store.forget(&a).await.unwrap());

    let lease = acquired(&store, &a, &fingerprint(1)).await;
    assert!(store.forget(&a).await.unwrap());
    assert_eq!(store.get(&a).await.unwrap(), None);
    assert_lease_lost(
        store
            .complete(&a, lease.token, &response(1).into(), TTL)
            .await,
    );
    assert_eq!(store.get(&a).await.unwrap(), None);

    let next = acquired(&store, &a, &fingerprint(2)).await;
    assert!(next.token > lease.token);
    store
        .complete(&a, next.token, &response(2).into(), TTL)
        .await
        .unwrap();
    assert!(store.forget(&a).await.unwrap());
    assert!(!store.forget(&a).await.unwrap());
}

/// A completed record refuses `complete`, `renew` and `release`, even with its own token; an
/// unknown address refuses them too.
pub async fn settled_records_refuse_every_token(subject: &impl Subject) {
    let store = subject.store();
    let a = address("settled");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    store
        .complete(&a, lease.token, &response(1).into(), TTL)
        .await
        .unwrap();
    assert_lease_lost(
        store
            .complete(&a, lease.token, &response(2).into(), TTL)
            .await,
    );
    assert_lease_lost(store.renew(&a, lease.token, LEASE).await);
    assert_lease_lost(store.release(&a, lease.token).await);
    assert_eq!(
        store.acquire(&a, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );

    let unknown = address("never-acquired");
    let token = FencingToken::new(lease.token.get() + 1_000);
    assert_lease_lost(
        store
            .complete(&unknown, token, &response(1).into(), TTL)
            .await,
    );
    assert_lease_lost(store.renew(&unknown, token, LEASE).await);
    assert_lease_lost(store.release(&unknown, token).await);
    assert_eq!(store.get(&unknown).await.unwrap(), None);
}

/// `get` shows the record's fingerprint, state, token and times as the terms set them.
pub async fn record_timestamps_follow_the_terms(subject: &impl Subject) {
    let store = subject.store();
    let a = address("times");
    let lease = acquired(&store, &a, &fingerprint(4)).await;
    let record = store.get(&a).await.unwrap().expect("record");
    assert_eq!(record.fingerprint, fingerprint(4));
    assert_eq!(
        record.state,
        RecordState::Processing {
            token: lease.token,
            lease_until: lease.until
        }
    );
    assert_eq!(lease.until.saturating_since(record.created_at), LEASE);
    assert_eq!(record.expires_at.saturating_since(record.created_at), TTL);

    subject.advance(Duration::from_millis(300)).await;
    store
        .complete(&a, lease.token, &response(4).into(), TTL)
        .await
        .unwrap();
    let record = store.get(&a).await.unwrap().expect("record");
    let RecordState::Completed {
        token,
        outcome: stored,
        completed_at,
    } = record.state
    else {
        panic!("expected completed, got {:?}", record.state);
    };
    assert_eq!((token, stored), (lease.token, Outcome::from(response(4))));
    assert_close(
        completed_at.saturating_since(record.created_at),
        Duration::from_millis(300),
        subject.tolerance(),
    );
    assert_eq!(record.expires_at.saturating_since(completed_at), TTL);
}

/// Item 10: Records survive closing and reopening the store: a completed record still replays, a
/// processing one still blocks until its lease ends. `reopen` closes the given store and opens
/// a new one on the same data with the same clock.
pub async fn records_survive_a_restart<S, F, Fut>(subject: &impl Subject<Store = S>, reopen: F)
where
    S: Store + Clone,
    F: FnOnce(S) -> Fut,
    Fut: std::future::Future<Output = S>,
{
    let store = subject.store();
    let done = address("done-before-restart");
    let busy = address("busy-before-restart");
    let lease = acquired(&store, &done, &fingerprint(1)).await;
    store
        .complete(&done, lease.token, &response(1).into(), TTL)
        .await
        .unwrap();
    let held = acquired(&store, &busy, &fingerprint(2)).await;

    let store = reopen(store).await;
    assert_eq!(
        store.acquire(&done, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );
    match store.acquire(&busy, &fingerprint(2), TERMS).await.unwrap() {
        Acquisition::InFlight { retry_after } => {
            assert_close(retry_after, LEASE, subject.tolerance());
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
    subject.advance(LEASE).await;
    let next = acquired(&store, &busy, &fingerprint(2)).await;
    assert!(next.took_over);
    assert!(next.token > held.token);
}

/// Every page of `query`, in order, until the last.
async fn pages<S: Store>(store: &S, query: ListQuery) -> Vec<Vec<Listed>> {
    let mut pages = Vec::new();
    let mut query = query;
    loop {
        let page = store.list(&query).await.expect("store is up");
        assert!(
            page.records.len() <= query.limit,
            "a page holds at most `limit` records"
        );
        pages.push(page.records);
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => return pages,
        }
        assert!(pages.len() <= 100, "the listing never ends");
    }
}

/// The addresses of `listed`, as (scope, key digest).
fn identities(listed: &[Listed]) -> Vec<(Scope, [u8; 32])> {
    listed.iter().map(|l| (l.scope, l.key_sha256)).collect()
}

/// The addresses of `listed`, sorted: each once, from a store that walks its keys in its own
/// order (Redis' `SCAN`, which returns a key twice when the server resizes its table during the
/// walk, as other clients' writes can make it do), and as listed from any other.
fn found(subject: &impl Subject, listed: &[Listed]) -> Vec<(Scope, [u8; 32])> {
    let mut found = identities(listed);
    found.sort();
    if !subject.lists_in_global_order() {
        found.dedup();
    }
    found
}

/// How `subject`'s store lists the record of `address`, as (scope, key digest).
fn identity(subject: &impl Subject, address: &Address) -> (Scope, [u8; 32]) {
    let stored = subject.stored(address);
    (stored.scope, stored.key.sha256())
}

/// `scope` as `subject`'s store lists it, and as a listing's filter takes it.
fn stored_scope(subject: &impl Subject, scope: Scope) -> Scope {
    subject
        .stored(&Address::new(scope, "any".parse().expect("valid test key")))
        .scope
}

/// Whether `records` are newest first.
fn is_newest_first(records: &[Listed]) -> bool {
    records
        .windows(2)
        .all(|pair| Listed::newest_first(&pair[0], &pair[1]).is_lt())
}

/// Acquires `count` keys named `{prefix}-{i}` in `scope`, `step` apart, completing the even ones.
async fn populate(
    subject: &impl Subject,
    scope: Scope,
    prefix: &str,
    count: usize,
    step: Duration,
) -> Vec<Address> {
    let store = subject.store();
    let mut addresses = Vec::new();
    for i in 0..count {
        let address = Address::new(scope, format!("{prefix}-{i}").parse().unwrap());
        let lease = acquired(&store, &address, &fingerprint(i as u8)).await;
        if i % 2 == 0 {
            store
                .complete(&address, lease.token, &response(i as u16).into(), TTL)
                .await
                .unwrap();
        }
        addresses.push(address);
        subject.advance(step).await;
    }
    addresses
}

/// Item 11: Listing pages through every live record once, newest first, each record as `get`
/// reads it and named by its scope and its key's SHA-256; a cursor from another kind of store is
/// refused.
pub async fn listing_pages_through_every_record_newest_first(subject: &impl Subject) {
    let store = subject.store();
    assert_eq!(
        store.list(&ListQuery::new(10)).await.unwrap().records,
        Vec::new()
    );
    let alice = Scope::from_identity([b"alice".as_slice()]);
    let mut addresses = populate(subject, alice, "a", 4, Duration::from_millis(5)).await;
    addresses.extend(populate(subject, Scope::ANONYMOUS, "b", 3, Duration::from_millis(5)).await);

    let pages = pages(&store, ListQuery::new(3)).await;
    let listed: Vec<Listed> = pages.iter().flatten().cloned().collect();
    let found = found(subject, &listed);
    let mut expected: Vec<_> = addresses.iter().map(|a| identity(subject, a)).collect();
    expected.sort();
    assert_eq!(found, expected, "every record exactly once");
    for page in &pages {
        assert!(is_newest_first(page), "each page is newest first");
    }
    if subject.lists_in_global_order() {
        assert!(is_newest_first(&listed), "newest first across pages");
        assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    }
    for address in &addresses {
        let record = store.get(address).await.unwrap().expect("record");
        let shown = listed
            .iter()
            .find(|l| (l.scope, l.key_sha256) == identity(subject, address))
            .expect("listed");
        // Under sealing, a listing shows a completed outcome sealed: it opens only with the key,
        // which listings do not have. Everything else is as `get` reads it.
        let mut shown = shown.record.clone();
        if let RecordState::Completed { outcome, .. } = &mut shown.state
            && outcome
                .response()
                .is_some_and(idem_core::sealing::is_sealed)
            && let RecordState::Completed {
                outcome: opened, ..
            } = &record.state
        {
            *outcome = opened.clone();
        }
        assert_eq!(shown, record, "{address:?} as `get` reads it");
    }

    let foreign = if subject.lists_in_global_order() {
        ListCursor::Scan {
            shard: 0,
            cursor: 7,
            after: 0,
        }
    } else {
        listed[0].position()
    };
    let refused = store.list(&ListQuery::new(3).after(foreign)).await;
    assert!(
        matches!(refused, Err(StoreError::InvalidCursor)),
        "expected InvalidCursor, got {refused:?}"
    );
}

/// Item 12: Listing filters by state, by age (by the store's clock) and by scope, together, and
/// leaves expired records out.
pub async fn listing_filters_by_state_age_and_scope(subject: &impl Subject) {
    let store = subject.store();
    let alice = Scope::from_identity([b"alice".as_slice()]);
    // a-0 and a-2 completed, a-1 and a-3 processing.
    let old = populate(subject, alice, "a", 4, Duration::ZERO).await;
    // One that expires: completed with a TTL of one second.
    let short = address("short");
    let lease = acquired(&store, &short, &fingerprint(9)).await;
    store
        .complete(
            &short,
            lease.token,
            &response(9).into(),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    subject.advance(Duration::from_millis(1500)).await;
    let new = populate(subject, Scope::ANONYMOUS, "b", 2, Duration::ZERO).await;

    let listed = |query: ListQuery| {
        let store = store.clone();
        async move { found(subject, &pages(&store, query).await.concat()) }
    };
    let of = |addresses: &[&Address]| {
        let mut expected: Vec<_> = addresses.iter().map(|a| identity(subject, a)).collect();
        expected.sort();
        expected
    };
    let query = || ListQuery::new(2);
    assert_eq!(
        listed(query()).await,
        of(&[&old[0], &old[1], &old[2], &old[3], &new[0], &new[1]]),
        "the expired record is not listed"
    );
    assert_eq!(
        listed(query().state(StateFilter::Processing)).await,
        of(&[&old[1], &old[3], &new[1]])
    );
    assert_eq!(
        listed(query().state(StateFilter::Completed)).await,
        of(&[&old[0], &old[2], &new[0]])
    );
    assert_eq!(
        listed(query().older_than(Duration::from_secs(1))).await,
        of(&[&old[0], &old[1], &old[2], &old[3]])
    );
    assert_eq!(
        listed(query().scope(stored_scope(subject, Scope::ANONYMOUS))).await,
        of(&[&new[0], &new[1]])
    );
    assert_eq!(
        listed(
            query()
                .scope(stored_scope(subject, alice))
                .state(StateFilter::Processing)
                .older_than(Duration::from_secs(1))
        )
        .await,
        of(&[&old[1], &old[3]])
    );
    assert_eq!(
        listed(query().older_than(Duration::from_secs(3600))).await,
        Vec::new()
    );
}

/// Item 13: The census counts live records by state and names the oldest processing one;
/// expired, released and forgotten records do not count.
pub async fn census_counts_live_records_by_state(subject: &impl Subject) {
    let store = subject.store();
    assert_eq!(
        store.census(Pace::UNPACED).await.unwrap(),
        Census::default()
    );

    // c-0 and c-2 completed, c-1 and c-3 processing.
    let addresses = populate(subject, Scope::ANONYMOUS, "c", 4, Duration::from_millis(5)).await;
    let released = address("released");
    let lease = acquired(&store, &released, &fingerprint(7)).await;
    store.release(&released, lease.token).await.unwrap();
    let forgotten = address("forgotten");
    acquired(&store, &forgotten, &fingerprint(8)).await;
    assert!(store.forget(&forgotten).await.unwrap());

    let oldest: Timestamp = store.get(&addresses[1]).await.unwrap().unwrap().created_at;
    assert_eq!(
        store.census(Pace::UNPACED).await.unwrap(),
        Census {
            processing: 2,
            completed: 2,
            oldest_processing: Some(oldest),
        }
    );

    // Past the TTL every record has expired, purged or not.
    subject.advance(TTL + LEASE).await;
    assert_eq!(
        store.census(Pace::UNPACED).await.unwrap(),
        Census::default()
    );
}

/// The census board: one claimant counts at a time and renews its claim; the others wait and
/// read what it posts; a claim that runs out passes to another, and a claimant that lost its
/// claim cannot post over the newer census. Steps count in their census what the walk reads,
/// paced or not.
pub async fn one_census_at_a_time_among_the_processes_sharing_the_store(subject: &impl Subject) {
    const HOLD: Duration = Duration::from_secs(60);
    let store = subject.store();
    let claim = |claimant| CensusClaim {
        claimant,
        hold: HOLD,
    };
    let waits = |turn: CensusTurn| match turn {
        CensusTurn::Wait { last, retry_after } => (last, retry_after),
        CensusTurn::Count { .. } => panic!("{turn:?}: expected to wait"),
    };
    let close_to = |got: Duration, expected: Duration| {
        assert!(
            got.abs_diff(expected) <= subject.tolerance() + Duration::from_millis(1),
            "waits {got:?}, expected {expected:?}"
        );
    };

    assert_eq!(
        store.claim_census(claim(1)).await.unwrap(),
        CensusTurn::Count { last: None }
    );
    let (last, retry_after) = waits(store.claim_census(claim(2)).await.unwrap());
    assert_eq!(last, None);
    close_to(retry_after, HOLD);
    // The holder renews its claim halfway through.
    subject.advance(HOLD / 2).await;
    assert_eq!(
        store.claim_census(claim(1)).await.unwrap(),
        CensusTurn::Count { last: None }
    );
    subject.advance(HOLD / 2).await;
    let (_, retry_after) = waits(store.claim_census(claim(2)).await.unwrap());
    close_to(retry_after, HOLD / 2);

    // A census of paced steps counts what an unpaced one does.
    populate(subject, Scope::ANONYMOUS, "b", 4, Duration::from_millis(5)).await;
    let census = store.census(Pace::share(0.5)).await.unwrap();
    assert_eq!(census, store.census(Pace::UNPACED).await.unwrap());
    assert_eq!((census.processing, census.completed), (2, 2));

    let rest = Duration::from_secs(10);
    assert!(store.post_census(1, &census, rest).await.unwrap());
    // Nobody counts until the next census is due; everyone reads the posted one.
    let (last, retry_after) = waits(store.claim_census(claim(2)).await.unwrap());
    let posted = last.expect("the census is posted");
    assert_eq!(posted.census, census);
    assert_eq!(posted.next, posted.at + rest);
    close_to(retry_after, rest);
    let (last, _) = waits(store.claim_census(claim(1)).await.unwrap());
    assert_eq!(last, Some(posted));

    // Due: claimant 2 counts, then stops; past its claim, claimant 1 takes over, and 2's census
    // no longer posts.
    subject.advance(rest).await;
    assert_eq!(
        store.claim_census(claim(2)).await.unwrap(),
        CensusTurn::Count { last: Some(posted) }
    );
    waits(store.claim_census(claim(1)).await.unwrap());
    subject.advance(HOLD).await;
    assert_eq!(
        store.claim_census(claim(1)).await.unwrap(),
        CensusTurn::Count { last: Some(posted) }
    );
    assert!(
        !store
            .post_census(2, &Census::default(), rest)
            .await
            .unwrap()
    );
    let (last, _) = waits(store.claim_census(claim(2)).await.unwrap());
    assert_eq!(last, Some(posted));
    assert!(
        store
            .post_census(1, &Census::default(), rest)
            .await
            .unwrap()
    );
    let (last, _) = waits(store.claim_census(claim(2)).await.unwrap());
    assert_eq!(last.map(|posted| posted.census), Some(Census::default()));
}

/// A sealed outcome is bound to everything a replay reads. A store writer who holds no key
/// rewrites a record's fingerprint, token or expiry (here through the store itself: forget, then
/// acquire and complete again with the sealed outcome copied, which every store allows) and the
/// record is refused, never replayed nor executed again.
pub async fn sealed_outcomes_are_bound_to_what_replays_read(subject: &impl Subject) {
    let inner = subject.store();
    let clock = ManualClock::default();
    let store =
        Sealed::new(inner.clone(), KeyRing::single("bound", [5; 32])).with_clock(clock.clone());
    let sealed = |key: &'static str| {
        let (store, inner) = (store.clone(), inner.clone());
        async move {
            let address = address(key);
            let lease = acquired(&store, &address, &fingerprint(1)).await;
            store
                .complete(&address, lease.token, &response(1).into(), TTL)
                .await
                .unwrap();
            let Some(RecordState::Completed { token, outcome, .. }) = inner
                .get(&address)
                .await
                .unwrap()
                .map(|record| record.state)
            else {
                panic!("{key} is completed");
            };
            (address, token, outcome)
        }
    };

    // The fingerprint: another request body would be answered with this outcome.
    let (moved, _, outcome) = sealed("bound-fingerprint").await;
    rewrite(&inner, &moved, &fingerprint(2), &outcome, TTL).await;
    assert_eq!(
        corruption(store.acquire(&moved, &fingerprint(2), TERMS).await),
        "the record sealed with key `bound` does not open: it was altered or copied from another address"
    );

    // The token: the record read whole names the execution that sealed its outcome.
    let (relabelled, sealed_token, outcome) = sealed("bound-token").await;
    let token = rewrite(&inner, &relabelled, &fingerprint(1), &outcome, TTL).await;
    assert!(token > sealed_token);
    assert_eq!(
        corruption(store.get(&relabelled).await.map(|_| Acquisition::Mismatch)),
        format!(
            "the record's fencing token {} is not the token {} its outcome was sealed with",
            token.get(),
            sealed_token.get()
        )
    );

    // The expiry: kept past its TTL by the store writer, refused once the sealed expiry and the
    // allowed clock skew have passed; the record left alone expires with the store's clock.
    let (kept, _, outcome) = sealed("bound-expiry").await;
    let (left, _, _) = sealed("bound-expiry-control").await;
    rewrite(&inner, &kept, &fingerprint(1), &outcome, TTL * 1000).await;
    subject.advance(TTL + DEFAULT_CLOCK_SKEW).await;
    clock.advance(TTL + DEFAULT_CLOCK_SKEW);
    assert!(matches!(
        store.acquire(&left, &fingerprint(1), TERMS).await,
        Ok(Acquisition::Acquired(_))
    ));
    assert_eq!(
        store.acquire(&kept, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into()),
        "within the allowed clock skew"
    );
    subject.advance(Duration::from_millis(1)).await;
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        corruption(store.acquire(&kept, &fingerprint(1), TERMS).await),
        "the record is served 1ms past the expiry it was sealed with"
    );
}

/// Writes `outcome` at `address` under `fingerprint`, as whoever can write to the store could:
/// forgets the record, acquires it again and completes it. Returns the new token.
async fn rewrite<S: Store>(
    store: &S,
    address: &Address,
    fingerprint: &Fingerprint,
    outcome: &Outcome,
    ttl: Duration,
) -> FencingToken {
    assert!(store.forget(address).await.unwrap());
    let lease = acquired(store, address, fingerprint).await;
    store
        .complete(address, lease.token, outcome, ttl)
        .await
        .unwrap();
    lease.token
}

/// The message of the [`StoreError::Corrupted`] that `result` must be.
fn corruption(result: Result<Acquisition, StoreError>) -> String {
    match result {
        Err(StoreError::Corrupted(source)) => source.to_string(),
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

/// No part.
const NONE: [Bytes; 0] = [];

/// The parts of a stream, for the checks on parts: a head, a binary part and a text part.
fn stream_parts() -> [Bytes; 3] {
    [
        Bytes::from_static(b"head"),
        Bytes::from((0..=255u8).collect::<Vec<_>>()),
        Bytes::from_static(b"data: third\n\n"),
    ]
}

/// Parts of a streamed response are appended in order under the holder's token, each once, and
/// read back from any index, within a byte budget that always lets one through.
pub async fn streamed_parts_are_appended_in_order_and_read_from_any_index(subject: &impl Subject) {
    let store = subject.store();
    let a = address("parts");
    let lease = acquired(&store, &a, &fingerprint(1)).await;
    let parts = stream_parts();
    assert_eq!(
        store
            .read_parts(&a, lease.token, 0, usize::MAX)
            .await
            .unwrap(),
        NONE
    );
    for (index, part) in (0..).zip(&parts) {
        store
            .append_part(&a, lease.token, index, part)
            .await
            .unwrap();
    }
    let read = |from, max| store.read_parts(&a, lease.token, from, max);
    assert_eq!(read(0, usize::MAX).await.unwrap(), parts);
    assert_eq!(read(1, usize::MAX).await.unwrap(), parts[1..]);
    assert_eq!(read(3, usize::MAX).await.unwrap(), NONE);
    // One part at least, however small the budget; then as many as fit.
    assert_eq!(read(0, 1).await.unwrap(), parts[..1]);
    assert_eq!(read(0, 4 + 256).await.unwrap(), parts[..2]);
    assert_eq!(read(1, 256 + 12).await.unwrap(), parts[1..2]);

    // An append retried after its answer was lost changes nothing.
    store
        .append_part(&a, lease.token, 1, &Bytes::from_static(b"other"))
        .await
        .unwrap();
    assert_eq!(read(0, usize::MAX).await.unwrap(), parts);
    // A part past the next one is refused.
    let skipped = store
        .append_part(&a, lease.token, 5, &Bytes::from_static(b"late"))
        .await;
    assert!(
        matches!(
            skipped,
            Err(StoreError::PartOutOfOrder { next: 3, given: 5 })
        ),
        "expected PartOutOfOrder, got {skipped:?}"
    );
    assert_eq!(read(0, usize::MAX).await.unwrap(), parts);

    // Another token's parts, another address's: none.
    let other = FencingToken::new(lease.token.get() + 1);
    assert_eq!(
        store.read_parts(&a, other, 0, usize::MAX).await.unwrap(),
        NONE
    );
    let b = address("parts-elsewhere");
    assert_eq!(
        store
            .read_parts(&b, lease.token, 0, usize::MAX)
            .await
            .unwrap(),
        NONE
    );
}

/// Only the current holder of a processing record appends; the parts of an execution stay
/// readable after it is taken over, completed or released, until they are discarded, and
/// `forget` removes them.
pub async fn streamed_parts_are_fenced_and_outlive_the_settlement_until_discarded(
    subject: &impl Subject,
) {
    let store = subject.store();
    let part = |s: &'static str| Bytes::from_static(s.as_bytes());
    let a = address("parts-fenced");
    let first = acquired(&store, &a, &fingerprint(1)).await;
    store
        .append_part(&a, first.token, 0, &part("first"))
        .await
        .unwrap();

    subject.advance(LEASE).await;
    let second = acquired(&store, &a, &fingerprint(1)).await;
    assert!(second.took_over);
    assert_lease_lost(store.append_part(&a, first.token, 1, &part("stale")).await);
    // Each execution's parts count from 0.
    store
        .append_part(&a, second.token, 0, &part("second"))
        .await
        .unwrap();
    let read = |token| store.read_parts(&a, token, 0, usize::MAX);
    assert_eq!(read(first.token).await.unwrap(), [part("first")]);
    assert_eq!(read(second.token).await.unwrap(), [part("second")]);

    store
        .complete(&a, second.token, &response(1).into(), TTL)
        .await
        .unwrap();
    assert_lease_lost(store.append_part(&a, second.token, 1, &part("after")).await);
    assert_eq!(read(second.token).await.unwrap(), [part("second")]);
    store.discard_parts(&a, second.token).await.unwrap();
    assert_eq!(read(second.token).await.unwrap(), NONE);
    store.discard_parts(&a, second.token).await.unwrap();
    assert_eq!(read(first.token).await.unwrap(), [part("first")]);

    let released = address("parts-released");
    let lease = acquired(&store, &released, &fingerprint(1)).await;
    store
        .append_part(&released, lease.token, 0, &part("kept"))
        .await
        .unwrap();
    store.release(&released, lease.token).await.unwrap();
    assert_lease_lost(
        store
            .append_part(&released, lease.token, 1, &part("no"))
            .await,
    );
    let kept = store
        .read_parts(&released, lease.token, 0, usize::MAX)
        .await;
    assert_eq!(kept.unwrap(), [part("kept")]);

    let forgotten = address("parts-forgotten");
    let lease = acquired(&store, &forgotten, &fingerprint(1)).await;
    store
        .append_part(&forgotten, lease.token, 0, &part("gone"))
        .await
        .unwrap();
    assert!(store.forget(&forgotten).await.unwrap());
    let gone = store
        .read_parts(&forgotten, lease.token, 0, usize::MAX)
        .await;
    assert_eq!(gone.unwrap(), NONE);

    let unknown = address("parts-unknown");
    assert_lease_lost(
        store
            .append_part(&unknown, first.token, 0, &part("no"))
            .await,
    );
}

/// A part lives as long as its record did when it was appended: it is read no more once that
/// has passed, and `purge_expired` removes it, counted with the records.
pub async fn streamed_parts_expire_with_their_record(subject: &impl Subject) {
    let store = subject.store();
    let short = Duration::from_secs(1);
    let terms = Terms {
        lease: short,
        ttl: short,
    };
    let a = address("parts-expiring");
    let Acquisition::Acquired(lease) = store.acquire(&a, &fingerprint(1), terms).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    for index in 0..2 {
        let part = Bytes::from(format!("part {index}"));
        store
            .append_part(&a, lease.token, index, &part)
            .await
            .unwrap();
    }
    assert_eq!(store.purge_expired(10).await.unwrap(), 0);

    subject.advance(short).await;
    assert_eq!(
        store
            .read_parts(&a, lease.token, 0, usize::MAX)
            .await
            .unwrap(),
        NONE
    );
    // The record and its two parts.
    assert_eq!(store.purge_expired(10).await.unwrap(), 3);
    assert_eq!(store.purge_expired(10).await.unwrap(), 0);
}
