//! Group commit: concurrent writes share one statement per batch, each with its own answer, in
//! the order they were queued, and nothing is acknowledged that was not committed.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    collections::HashMap,
    pin::pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use idem_core::{
    Acquisition, Clock, DecodeError, FencingToken, ManualClock, Outcome, Store, StoreError,
    StoredResponse, Terms, Timestamp,
};
use idem_postgres::BatchError;
use idem_test_support::{in_order, require};
use sqlx::AssertSqlSafe;
use tokio::time::timeout;

use common::{TERMS, TestSchema, acquired, address, fingerprint};

const EVENTUALLY: Duration = Duration::from_secs(20);

fn response(n: usize) -> Outcome {
    StoredResponse::new(201)
        .body(format!("response {n}"))
        .into()
}

/// On a single-threaded runtime every call below is queued before the store's tasks run, so the
/// batches are exactly these.
#[tokio::test]
async fn concurrent_writes_of_one_kind_share_one_round_trip() {
    const KEYS: usize = 32;
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let (store, counter) = schema.counted_store(schema.options().pool_size(1)).await;
    // Each statement is prepared once per connection; count from then on.
    let warm = address("warm-up");
    let lease = acquired(&store, &warm).await;
    store.renew(&warm, lease.token, TERMS.lease).await.unwrap();
    store.release(&warm, lease.token).await.unwrap();
    let lease = acquired(&store, &warm).await;
    store
        .complete(&warm, lease.token, &response(0), TERMS.ttl)
        .await
        .unwrap();
    let round_trips = || counter.statements.swap(0, Ordering::SeqCst);
    round_trips();
    counter.pings.swap(0, Ordering::SeqCst);

    let keys: Vec<_> = (0..KEYS).map(|n| address(&format!("key-{n}"))).collect();
    let one = fingerprint(1);
    let acquisitions = in_order(keys.iter().map(|key| store.acquire(key, &one, TERMS))).await;
    assert_eq!(round_trips(), 1, "{KEYS} acquisitions");
    let tokens: Vec<FencingToken> = acquisitions
        .into_iter()
        .map(|got| match got.unwrap() {
            Acquisition::Acquired(lease) => lease.token,
            other => panic!("expected Acquired, got {other:?}"),
        })
        .collect();

    let renewals = in_order(
        keys.iter()
            .zip(&tokens)
            .map(|(key, token)| store.renew(key, *token, TERMS.lease)),
    )
    .await;
    assert_eq!(round_trips(), 1, "{KEYS} renewals");
    assert!(renewals.iter().all(Result::is_ok), "{renewals:?}");

    let (completed, released) = keys.split_at(KEYS / 2);
    let outcomes: Vec<_> = (0..completed.len()).map(response).collect();
    let completions = in_order(
        completed
            .iter()
            .zip(&tokens)
            .zip(&outcomes)
            .map(|((key, token), outcome)| store.complete(key, *token, outcome, TERMS.ttl)),
    )
    .await;
    assert_eq!(round_trips(), 1, "{} completions", KEYS / 2);
    assert!(completions.iter().all(Result::is_ok), "{completions:?}");
    let releases = in_order(
        released
            .iter()
            .zip(&tokens[KEYS / 2..])
            .map(|(key, token)| store.release(key, *token)),
    )
    .await;
    assert_eq!(round_trips(), 1, "{} releases", KEYS / 2);
    assert!(releases.iter().all(Result::is_ok), "{releases:?}");

    for (n, key) in completed.iter().enumerate() {
        assert_eq!(
            store.acquire(key, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(response(n))
        );
    }
    for key in released {
        assert_eq!(store.get(key).await.unwrap(), None);
    }
    assert_eq!(counter.pings.load(Ordering::SeqCst), 0);
}

/// Batches of three, so that the operations on the hot key fall into successive batches.
#[tokio::test]
async fn a_batch_boundary_never_reorders_two_operations_on_one_key() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let clock = ManualClock::default();
    let store = schema
        .store(schema.options().test_clock(clock.clone()).batch_size(3))
        .await;
    let hot = address("hot");

    // Eight acquisitions of the hot key among eight of other keys: the first one queued gets it.
    let others: Vec<_> = (0..8).map(|n| address(&format!("cold-{n}"))).collect();
    let one = fingerprint(1);
    let mut calls = Vec::new();
    for other in &others {
        calls.push(store.acquire(&hot, &one, TERMS));
        calls.push(store.acquire(other, &one, TERMS));
    }
    let got = in_order(calls).await;
    for (n, got) in got.into_iter().enumerate() {
        match (n, got.unwrap()) {
            (0, Acquisition::Acquired(lease)) => assert!(!lease.took_over),
            (n, Acquisition::InFlight { retry_after }) if n % 2 == 0 => {
                assert_eq!(retry_after, TERMS.lease, "call {n}");
            }
            (n, Acquisition::Acquired(_)) if n % 2 == 1 => {}
            (n, other) => panic!("call {n}: unexpected {other:?}"),
        }
    }

    // Seven renewals of the hot key, each with a longer lease, among renewals of the others:
    // the last one queued is the lease the record keeps.
    let hot_token = store.get(&hot).await.unwrap().unwrap().state.token();
    let mut tokens = HashMap::new();
    for other in &others {
        tokens.insert(
            other.clone(),
            store.get(other).await.unwrap().unwrap().state.token(),
        );
    }
    let now = clock.now();
    let mut calls = Vec::new();
    for (n, other) in others.iter().enumerate().skip(1) {
        let lease = Duration::from_secs(n as u64);
        calls.push(store.renew(&hot, hot_token, lease));
        calls.push(store.renew(other, tokens[other], TERMS.lease));
    }
    let renewed = in_order(calls).await;
    let until =
        |lease: Duration| Timestamp::from_millis(now.as_millis() + lease.as_millis() as u64);
    for (n, got) in renewed.into_iter().enumerate() {
        let lease = match n % 2 {
            0 => Duration::from_secs(n as u64 / 2 + 1),
            _ => TERMS.lease,
        };
        assert_eq!(got.unwrap(), until(lease), "renewal {n}");
    }
    let record = store.get(&hot).await.unwrap().unwrap();
    let idem_core::RecordState::Processing { lease_until, .. } = record.state else {
        panic!("still processing: {record:?}");
    };
    assert_eq!(lease_until, until(Duration::from_secs(7)));
}

#[tokio::test]
async fn a_failing_operation_in_a_batch_does_not_fail_its_neighbours() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let store = schema.server_clock_store().await;
    let table = format!(r#""{}".idem_records"#, schema.name);
    let keys: Vec<_> = (0..4).map(|n| address(&format!("held-{n}"))).collect();
    let mut leases = Vec::new();
    for key in &keys {
        leases.push(acquired(&store, key).await);
    }

    // A completion with a token that does not hold its key: that one's lease is lost.
    let stale = FencingToken::new(leases[1].token.get() + 1_000);
    let tokens = [leases[0].token, stale, leases[2].token];
    let outcomes: Vec<_> = (0..tokens.len()).map(response).collect();
    let done = in_order(
        keys.iter()
            .zip(tokens)
            .zip(&outcomes)
            .map(|((key, token), outcome)| store.complete(key, token, outcome, TERMS.ttl)),
    )
    .await;
    assert!(matches!(done[0], Ok(())), "{:?}", done[0]);
    assert!(
        matches!(done[1], Err(StoreError::LeaseLost)),
        "{:?}",
        done[1]
    );
    assert!(matches!(done[2], Ok(())), "{:?}", done[2]);
    let state = |n: usize| {
        let (store, key) = (&store, &keys[n]);
        async move { store.get(key).await.unwrap().unwrap().state.name() }
    };
    assert_eq!(
        [state(0).await, state(1).await, state(2).await],
        ["completed", "processing", "completed"]
    );

    // An acquisition that finds a record it cannot read, between two new keys.
    sqlx::query(AssertSqlSafe(format!(
        r"UPDATE {table} SET response = '\x494452' WHERE state = 'completed'"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let fresh = [address("fresh-1"), address("fresh-2")];
    let one = fingerprint(1);
    let got = in_order([
        store.acquire(&fresh[0], &one, TERMS),
        store.acquire(&keys[0], &one, TERMS),
        store.acquire(&fresh[1], &one, TERMS),
    ])
    .await;
    assert!(
        matches!(got[0], Ok(Acquisition::Acquired(_))),
        "{:?}",
        got[0]
    );
    let Err(StoreError::Corrupted(source)) = &got[1] else {
        panic!("expected Corrupted, got {:?}", got[1]);
    };
    assert_eq!(
        source.downcast_ref::<DecodeError>(),
        Some(&DecodeError::Truncated)
    );
    assert!(
        matches!(got[2], Ok(Acquisition::Acquired(_))),
        "{:?}",
        got[2]
    );

    // A completion that the server refuses fails the whole statement: the batch runs again one
    // completion at a time, and only the refused one fails.
    sqlx::raw_sql(AssertSqlSafe(format!(
        r#"CREATE FUNCTION "{0}".refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               IF position('poison'::bytea IN NEW.response) > 0 THEN
                   RAISE EXCEPTION 'poisoned response' USING ERRCODE = '22023';
               END IF;
               RETURN NEW;
           END $$;
           CREATE TRIGGER refuse_poison BEFORE UPDATE ON {table}
               FOR EACH ROW EXECUTE FUNCTION "{0}".refuse_poison()"#,
        schema.name
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let more: Vec<_> = (0..3).map(|n| address(&format!("poison-{n}"))).collect();
    let mut held = Vec::new();
    for key in &more {
        held.push(acquired(&store, key).await.token);
    }
    let poison = Outcome::from(StoredResponse::new(200).body("poison"));
    let outcomes = [response(0), poison, response(2)];
    let done = in_order(
        more.iter()
            .zip(&held)
            .zip(&outcomes)
            .map(|((key, token), outcome)| store.complete(key, *token, outcome, TERMS.ttl)),
    )
    .await;
    assert!(matches!(done[0], Ok(())), "{:?}", done[0]);
    assert!(
        matches!(done[1], Err(StoreError::Corrupted(_))),
        "{:?}",
        done[1]
    );
    assert!(matches!(done[2], Ok(())), "{:?}", done[2]);
    for (n, expected) in ["completed", "processing", "completed"].iter().enumerate() {
        let record = store.get(&more[n]).await.unwrap().unwrap();
        assert_eq!(record.state.name(), *expected, "{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_fails_the_write_after_the_pool_timeout() {
    const WAIT: Duration = Duration::from_millis(300);
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let store = schema
        .store(
            schema
                .options()
                .batch_size(1)
                .batches_in_flight(1)
                .queue_size(1)
                .pool_timeout(WAIT),
        )
        .await;
    // A transaction holds a new key: the batch that acquires it waits for the transaction.
    let held = address("held");
    let mut tx = store.pool().begin().await.unwrap();
    let mine = store
        .acquire_in(&mut tx, &held, &fingerprint(1), TERMS)
        .await
        .unwrap();
    assert!(matches!(mine, Acquisition::Acquired(_)), "{mine:?}");
    let blocked = tokio::spawn({
        let (store, held) = (store.clone(), held.clone());
        async move { store.acquire(&held, &fingerprint(1), TERMS).await }
    });
    let pattern = format!("%{}%", schema.name);
    timeout(EVENTUALLY, async {
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
            )
            .bind(&pattern)
            .fetch_one(store.pool())
            .await
            .unwrap();
            if waiting > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the batch waits for the transaction");

    // The next acquisition waits in the queue, which it fills; the one after finds no room.
    let (queued_key, one) = (address("queued"), fingerprint(1));
    let mut queued = pin!(store.acquire(&queued_key, &one, TERMS));
    assert!(futures_util::poll!(queued.as_mut()).is_pending());
    let refused = store
        .acquire(&address("refused"), &fingerprint(1), TERMS)
        .await;
    let Err(StoreError::Unavailable(source)) = refused else {
        panic!("expected Unavailable, got {refused:?}");
    };
    match source.downcast_ref::<BatchError>() {
        Some(BatchError::QueueFull { capacity, waited }) => {
            assert_eq!((*capacity, *waited), (1, WAIT))
        }
        other => panic!("expected QueueFull, got {other:?}"),
    }

    tx.rollback().await.unwrap();
    let first = blocked.await.unwrap().unwrap();
    assert!(matches!(first, Acquisition::Acquired(_)), "{first:?}");
    let second = queued.await.unwrap();
    assert!(matches!(second, Acquisition::Acquired(_)), "{second:?}");
}

/// Workers acquire and complete new keys while every connection of the store is terminated, again
/// and again: operations fail, but every completion the store acknowledged is there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_completion_survives_terminated_connections() {
    const WORKERS: usize = 16;
    const KILLS: usize = 8;
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let name = format!("idem-batch-kill-{}", std::process::id());
    let (store, observer) = schema.named_store(&name, 2, schema.options()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));

    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let (store, stop, failures) = (store.clone(), stop.clone(), failures.clone());
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let key = address(&format!("w{worker}-{n}"));
                    let terms = Terms {
                        lease: Duration::from_secs(30),
                        ttl: Duration::from_secs(600),
                    };
                    let lease = match store.acquire(&key, &fingerprint(1), terms).await {
                        Ok(Acquisition::Acquired(lease)) => lease,
                        Ok(other) => panic!("a new key: {other:?}"),
                        Err(StoreError::Unavailable(_)) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        Err(other) => panic!("{other:?}"),
                    };
                    let outcome = response(worker * 100_000 + n);
                    match store.complete(&key, lease.token, &outcome, terms.ttl).await {
                        Ok(()) => acknowledged.push((key, outcome)),
                        Err(StoreError::Unavailable(_)) => {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(other) => panic!("{other:?}"),
                    }
                }
                acknowledged
            })
        })
        .collect();

    let mut terminated = 0;
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&name)
        .fetch_all(&observer)
        .await
        .unwrap();
        terminated += killed.into_iter().filter(|&k| k).count();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acknowledged = Vec::new();
    for worker in workers {
        acknowledged.extend(worker.await.unwrap());
    }
    assert!(terminated > 0, "no connection was terminated");
    assert!(failures.load(Ordering::SeqCst) > 0, "no operation failed");
    assert!(!acknowledged.is_empty(), "no completion was acknowledged");

    // As a restarted process would see them: a new store on a new pool.
    store.close().await;
    let reopened = schema.server_clock_store().await;
    for (key, outcome) in &acknowledged {
        assert_eq!(
            reopened.acquire(key, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(outcome.clone()),
            "{key:?}"
        );
    }
}
