//! `PostgresStore` beyond the shared contract: several instances on one database, wake-ups through
//! `LISTEN`/`NOTIFY`, round trips, fencing tokens across deletions, the purger, and how failures
//! are classified.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    pin::pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures_util::FutureExt;
use idem_core::{
    Acquisition, Address, DecodeError, Engine, Execution, InFlight, ManualClock, Outcome, Policy,
    RunOutcome, Store, StoreError, StoredResponse,
};
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_test_support::require;
use tokio::{net::TcpListener, time::timeout};

use common::{TERMS, TestSchema, acquired, address, fingerprint};

/// Long enough for anything that should happen to happen on a loaded machine; reaching it means
/// the behaviour is missing, not slow.
const EVENTUALLY: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_elect_exactly_one_holder_among_64_callers() {
    const CALLERS: usize = 64;
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    // Two pools, as two processes would have.
    let stores = [
        schema.server_clock_store().await,
        schema.server_clock_store().await,
    ];
    for round in 0..20 {
        let a = address(&format!("contended-{round}"));
        let (acquired, in_flight) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let tasks: Vec<_> = (0..CALLERS)
            .map(|n| {
                let (store, a) = (stores[n % 2].clone(), a.clone());
                let (acquired, in_flight) = (acquired.clone(), in_flight.clone());
                tokio::spawn(async move {
                    match store.acquire(&a, &fingerprint(1), TERMS).await.unwrap() {
                        Acquisition::Acquired(_) => acquired.fetch_add(1, Ordering::SeqCst),
                        Acquisition::InFlight { .. } => in_flight.fetch_add(1, Ordering::SeqCst),
                        other => panic!("unexpected {other:?}"),
                    };
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(acquired.load(Ordering::SeqCst), 1, "round {round}");
        assert_eq!(
            in_flight.load(Ordering::SeqCst),
            CALLERS - 1,
            "round {round}"
        );
    }
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        r#"SELECT count(*) FROM "{}".idem_records"#,
        schema.name
    )))
    .fetch_one(stores[1].pool())
    .await
    .unwrap();
    assert_eq!(rows, 20);
}

/// Polls `future` once: whether it has resolved.
fn resolved(future: std::pin::Pin<&mut (impl Future<Output = ()> + ?Sized)>) -> bool {
    future.now_or_never().is_some()
}

/// The first `changed` starts the listener, which wakes everything registered before it listened;
/// once that happened, the listener is up.
async fn wait_until_listening(store: &PostgresStore) {
    let probe = store.changed(&address("probe"));
    timeout(EVENTUALLY, probe)
        .await
        .expect("the listener starts and wakes earlier waiters");
}

/// As the engine waits: interest first, then an acquire that finds the key in flight.
async fn watch(
    store: &PostgresStore,
    key: &Address,
) -> futures_util::future::BoxFuture<'static, ()> {
    let changed = Box::pin(store.changed(key));
    let got = store.acquire(key, &fingerprint(1), TERMS).await.unwrap();
    assert!(matches!(got, Acquisition::InFlight { .. }), "{got:?}");
    changed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_on_another_instance_wake_on_completion_release_and_forget() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let (a, b) = (
        schema.server_clock_store().await,
        schema.server_clock_store().await,
    );
    wait_until_listening(&b).await;

    let (done, released, forgotten, unwatched) = (
        address("done"),
        address("released"),
        address("forgotten"),
        address("unwatched"),
    );
    let lease = acquired(&a, &done).await;
    let held = acquired(&a, &released).await;
    acquired(&a, &forgotten).await;
    let quiet = acquired(&a, &unwatched).await;
    let mut on_done = watch(&b, &done).await;
    let on_released = watch(&b, &released).await;
    let on_forgotten = watch(&b, &forgotten).await;
    // Interest without an in-flight answer: the record is not watched.
    let mut on_unwatched = pin!(b.changed(&unwatched));
    assert!(!resolved(on_done.as_mut()));

    // Unwatched: no notification. Notifications arrive in commit order, so once the next one is
    // heard, this one would have been.
    a.complete(
        &unwatched,
        quiet.token,
        &StoredResponse::new(200).into(),
        TERMS.ttl,
    )
    .await
    .unwrap();
    a.complete(
        &done,
        lease.token,
        &StoredResponse::new(200).into(),
        TERMS.ttl,
    )
    .await
    .unwrap();
    timeout(EVENTUALLY, on_done)
        .await
        .expect("woken by complete");
    assert!(!resolved(on_unwatched.as_mut()));

    a.release(&released, held.token).await.unwrap();
    timeout(EVENTUALLY, on_released)
        .await
        .expect("woken by release");
    assert!(a.forget(&forgotten).await.unwrap());
    timeout(EVENTUALLY, on_forgotten)
        .await
        .expect("woken by forget");
}

/// A follower on another instance (interest, then an acquire that finds the key in flight) is
/// woken by each part the holder appends, as by a completion; an append that stores nothing (a
/// retry, or an index out of order) and one to a record nobody watches send nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_on_another_instance_wake_on_each_appended_part() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let (a, b) = (
        schema.server_clock_store().await,
        schema.server_clock_store().await,
    );
    wait_until_listening(&b).await;
    let part = |s: &'static str| bytes::Bytes::from_static(s.as_bytes());

    let (streamed, unwatched) = (address("streamed"), address("unwatched-stream"));
    let lease = acquired(&a, &streamed).await;
    let quiet = acquired(&a, &unwatched).await;
    let on_first = watch(&b, &streamed).await;
    let mut on_unwatched = pin!(b.changed(&unwatched));

    // Unwatched: no notification (notifications arrive in commit order: see above).
    a.append_part(&unwatched, quiet.token, 0, &part("quiet"))
        .await
        .unwrap();
    a.append_part(&streamed, lease.token, 0, &part("first"))
        .await
        .unwrap();
    timeout(EVENTUALLY, on_first)
        .await
        .expect("woken by the first part");
    assert!(!resolved(on_unwatched.as_mut()));
    assert_eq!(
        b.read_parts(&streamed, lease.token, 0, usize::MAX)
            .await
            .unwrap(),
        [part("first")]
    );

    // The record stays watched: the next part wakes the next wait, as the follower waits. An
    // append that stores nothing does not: once a later notification is heard, it would have been.
    let mut on_second = pin!(b.changed(&streamed));
    a.append_part(&streamed, lease.token, 0, &part("first"))
        .await
        .unwrap();
    assert!(matches!(
        a.append_part(&streamed, lease.token, 2, &part("third"))
            .await,
        Err(StoreError::PartOutOfOrder { next: 1, given: 2 })
    ));
    let barrier = address("barrier");
    let held = acquired(&a, &barrier).await;
    let on_barrier = watch(&b, &barrier).await;
    a.release(&barrier, held.token).await.unwrap();
    timeout(EVENTUALLY, on_barrier)
        .await
        .expect("woken by release");
    assert!(!resolved(on_second.as_mut()));
    a.append_part(&streamed, lease.token, 1, &part("second"))
        .await
        .unwrap();
    timeout(EVENTUALLY, on_second.as_mut())
        .await
        .expect("woken by the second part");
    assert_eq!(
        b.read_parts(&streamed, lease.token, 1, usize::MAX)
            .await
            .unwrap(),
        [part("second")]
    );

    // And the completion still wakes the last wait.
    let on_done = b.changed(&streamed);
    a.complete(
        &streamed,
        lease.token,
        &StoredResponse::new(200).into(),
        TERMS.ttl,
    )
    .await
    .unwrap();
    timeout(EVENTUALLY, on_done)
        .await
        .expect("woken by complete");
    assert!(!resolved(on_unwatched.as_mut()));
}

/// A forget that starts while an append holds the record (its transaction not yet committed)
/// waits for it, and removes the part it stored too: none is left behind for the token's readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forget_racing_an_append_leaves_no_part() {
    use sha2::{Digest, Sha256};
    use sqlx::Row;

    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let store = schema.server_clock_store().await;
    let a = address("racing");
    let lease = acquired(&store, &a).await;
    let token = i64::try_from(lease.token.get()).unwrap();

    // The append's statement, in a transaction left open: it holds the record `FOR SHARE`.
    let mut append = store.pool().begin().await.unwrap();
    let row = sqlx::query(sqlx::AssertSqlSafe(
        store.sql(idem_postgres::Statement::AppendPart).to_owned(),
    ))
    .bind(None::<i64>)
    .bind(a.scope.as_bytes().as_slice())
    .bind(Sha256::digest(a.key.as_str().as_bytes()).as_slice())
    .bind(token)
    .bind(0_i64)
    .bind(b"part".as_slice())
    .fetch_one(&mut *append)
    .await
    .unwrap();
    assert!(row.get::<bool, _>("appended"));

    let forget = tokio::spawn({
        let (store, a) = (store.clone(), a.clone());
        async move { store.forget(&a).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!forget.is_finished(), "the forget waits for the append");
    append.commit().await.unwrap();
    assert!(timeout(EVENTUALLY, forget).await.unwrap().unwrap().unwrap());

    assert_eq!(
        store
            .read_parts(&a, lease.token, 0, usize::MAX)
            .await
            .unwrap(),
        Vec::<bytes::Bytes>::new()
    );
    let parts: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        r#"SELECT count(*) FROM "{}".idem_records_parts"#,
        schema.name
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(parts, 0);
}

/// The store's own connections are not the pool's: one that the server closed fails the operation
/// that finds out, is closed, and the next operation opens a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_connection_fails_one_operation_and_is_replaced() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    // The store opens its connections with its pool's options, name included.
    let name = format!("idem-test-{}", std::process::id());
    let (store, observer) = schema
        .named_store(&name, 1, schema.options().pool_size(1))
        .await;
    let first = address("before");
    acquired(&store, &first).await;
    let backend = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '-- Acquire%'",
        )
        .bind(&name)
        .fetch_optional(&observer)
        .await
        .unwrap()
    };
    let pid = backend()
        .await
        .expect("the store's connection ran the acquire");
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&observer)
        .await
        .unwrap();
    assert!(terminated);

    let failed = store
        .acquire(&address("during"), &fingerprint(1), TERMS)
        .await;
    assert!(
        matches!(failed, Err(StoreError::Unavailable(_))),
        "{failed:?}"
    );
    let lease = acquired(&store, &address("after")).await;
    let replaced = backend().await.expect("a new connection ran the acquire");
    assert_ne!(replaced, pid);
    store
        .complete(
            &address("after"),
            lease.token,
            &StoredResponse::new(201).into(),
            TERMS.ttl,
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_listener_reconnects_after_its_connection_is_terminated() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let (a, b) = (
        schema.server_clock_store().await,
        schema.server_clock_store().await,
    );
    wait_until_listening(&b).await;
    let listener_pid = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE query = $1 AND state = 'idle'",
        )
        .bind(format!(r#"LISTEN "{}""#, b.channel()))
        .fetch_optional(a.pool())
        .await
        .unwrap()
    };
    let first = listener_pid().await.expect("the listener's session");

    // A waiter registered before the connection dies is woken once the listener is back (the
    // notification itself may have been lost meanwhile).
    let key = address("across-the-outage");
    let mut waiter = pin!(b.changed(&key));
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(first)
        .fetch_one(a.pool())
        .await
        .unwrap();
    assert!(terminated);
    timeout(EVENTUALLY, waiter.as_mut())
        .await
        .expect("woken after the reconnection");

    let second = loop {
        match listener_pid().await {
            Some(pid) if pid != first => break pid,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_ne!(second, first);

    // And notifications flow again on the new connection.
    let lease = acquired(&a, &key).await;
    let after = watch(&b, &key).await;
    a.complete(
        &key,
        lease.token,
        &StoredResponse::new(201).into(),
        TERMS.ttl,
    )
    .await
    .unwrap();
    timeout(EVENTUALLY, after)
        .await
        .expect("woken by a notification on the new connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_engine_on_another_instance_replays_the_first_ones_response() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let policy = Policy::default().in_flight(InFlight::Wait {
        timeout: Duration::from_secs(30),
    });
    let first = Engine::new(schema.server_clock_store().await, policy);
    let second = Engine::new(schema.server_clock_store().await, policy);
    let key = address("shared");
    let executions = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Notify::new());
    let finish = Arc::new(tokio::sync::Notify::new());

    let running = tokio::spawn({
        let (executions, started, finish) = (executions.clone(), started.clone(), finish.clone());
        let key = key.clone();
        async move {
            first
                .run(key, fingerprint(1), move |_lease| async move {
                    executions.fetch_add(1, Ordering::SeqCst);
                    started.notify_one();
                    finish.notified().await;
                    let response = StoredResponse::new(201).body("once");
                    Execution::Final {
                        value: (),
                        response,
                    }
                })
                .await
        }
    });
    started.notified().await;
    let waiting = tokio::spawn({
        let executions = executions.clone();
        async move {
            second
                .run(key, fingerprint(1), move |_lease| async move {
                    executions.fetch_add(1, Ordering::SeqCst);
                    Execution::Final {
                        value: (),
                        response: StoredResponse::new(500),
                    }
                })
                .await
        }
    });
    finish.notify_one();
    assert!(matches!(
        running.await.unwrap().unwrap(),
        RunOutcome::Executed(())
    ));
    match waiting.await.unwrap().unwrap() {
        RunOutcome::Replayed(response) => {
            assert_eq!(
                response,
                Outcome::from(StoredResponse::new(201).body("once"))
            );
        }
        other => panic!("expected a replay, got {other:?}"),
    }
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}

/// The round trips: one per operation, so two for a new key (acquire, complete) and one for a
/// replay. None more: a sqlx pool pings each connection it takes back (`PgConnection::ping`, a
/// lone `Sync`), which is why the store runs its operations on connections of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_key_takes_two_round_trips_and_a_replay_one() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let (store, counter) = schema.counted_store(schema.options()).await;
    let response = Outcome::from(StoredResponse::new(201).body("charged"));

    // Each statement is prepared once per connection; count from then on.
    let warm = address("warm-up");
    let lease = acquired(&store, &warm).await;
    store
        .complete(&warm, lease.token, &response, TERMS.ttl)
        .await
        .unwrap();
    store.acquire(&warm, &fingerprint(1), TERMS).await.unwrap();
    counter.statements.swap(0, Ordering::SeqCst);
    counter.pings.swap(0, Ordering::SeqCst);

    const KEYS: usize = 10;
    let round_trips = || counter.statements.swap(0, Ordering::SeqCst);
    for n in 0..KEYS {
        let key = address(&format!("new-{n}"));
        let lease = acquired(&store, &key).await;
        assert_eq!(round_trips(), 1, "acquire of a new key");
        let got = store.acquire(&key, &fingerprint(1), TERMS).await.unwrap();
        assert!(matches!(got, Acquisition::InFlight { .. }), "{got:?}");
        assert_eq!(round_trips(), 1, "an in-flight answer");
        store
            .complete(&key, lease.token, &response, TERMS.ttl)
            .await
            .unwrap();
        assert_eq!(round_trips(), 1, "complete");
        assert_eq!(
            store.acquire(&key, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(response.clone())
        );
        assert_eq!(round_trips(), 1, "a replay");
    }
    assert_eq!(counter.pings.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_keep_increasing_across_release_takeover_forget_and_purge() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let clock = ManualClock::default();
    let store = schema.manual_clock_store(&clock).await;
    let a = address("reused");
    let short = Duration::from_secs(1);
    let mut tokens = Vec::new();

    let lease = acquired(&store, &a).await;
    tokens.push(lease.token);
    store.release(&a, lease.token).await.unwrap();

    tokens.push(acquired(&store, &a).await.token);
    clock.advance(TERMS.lease);
    let lease = acquired(&store, &a).await;
    assert!(lease.took_over);
    tokens.push(lease.token);

    assert!(store.forget(&a).await.unwrap());
    let lease = acquired(&store, &a).await;
    tokens.push(lease.token);

    let done = Outcome::from(StoredResponse::new(200));
    store.complete(&a, lease.token, &done, short).await.unwrap();
    clock.advance(short);
    assert_eq!(store.purge_expired(10).await.unwrap(), 1);
    let lease = acquired(&store, &a).await;
    tokens.push(lease.token);

    // Expired but not purged: replaced in place.
    store.complete(&a, lease.token, &done, short).await.unwrap();
    clock.advance(short);
    tokens.push(acquired(&store, &a).await.token);

    assert!(tokens.is_sorted_by(|a, b| a < b), "{tokens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_purger_removes_expired_records_in_batches_until_none_is_left() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let clock = ManualClock::default();
    let store = schema.manual_clock_store(&clock).await;
    for n in 0..25 {
        let a = address(&format!("short-{n}"));
        let lease = acquired(&store, &a).await;
        store
            .complete(
                &a,
                lease.token,
                &StoredResponse::new(200).into(),
                Duration::from_secs(1),
            )
            .await
            .unwrap();
    }
    let kept = address("kept");
    acquired(&store, &kept).await;
    clock.advance(Duration::from_secs(1));

    let purger = store.spawn_purger(Duration::from_millis(10), 4);
    let count = || async {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
            r#"SELECT count(*) FROM "{}".idem_records"#,
            schema.name
        )))
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    timeout(EVENTUALLY, async {
        while count().await > 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the purger removes every expired record");
    purger.stop().await;
    assert_eq!(count().await, 1);
    assert_eq!(
        store.get(&kept).await.unwrap().map(|r| r.state.name()),
        Some("processing")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unreadable_rows_are_corrupted_not_unavailable() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let store = schema.server_clock_store().await;
    let a = address("corrupt");
    let lease = acquired(&store, &a).await;
    store
        .complete(&a, lease.token, &StoredResponse::new(200).into(), TERMS.ttl)
        .await
        .unwrap();
    let table = format!(r#""{}".idem_records"#, schema.name);

    sqlx::query(sqlx::AssertSqlSafe(format!(
        r"UPDATE {table} SET response = '\x494452'"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    for result in [
        store.acquire(&a, &fingerprint(1), TERMS).await.map(drop),
        store.get(&a).await.map(drop),
    ] {
        let Err(StoreError::Corrupted(source)) = result else {
            panic!("expected Corrupted, got {result:?}");
        };
        assert_eq!(
            source.downcast_ref::<DecodeError>(),
            Some(&DecodeError::Truncated)
        );
    }

    sqlx::query(sqlx::AssertSqlSafe(format!(
        r"UPDATE {table} SET fingerprint = '\x0102'"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let result = store.get(&a).await;
    assert!(
        matches!(result, Err(StoreError::Corrupted(_))),
        "expected Corrupted, got {result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_table_is_misconfigured_and_a_closed_pool_unavailable() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let store = schema.server_clock_store().await;
    let other = schema.server_clock_store().await;

    sqlx::query(sqlx::AssertSqlSafe(format!(
        r#"DROP TABLE "{}".idem_records"#,
        schema.name
    )))
    .execute(other.pool())
    .await
    .unwrap();
    let result = store.acquire(&address("k"), &fingerprint(1), TERMS).await;
    let Err(StoreError::Misconfigured { message, source }) = result else {
        panic!("expected Misconfigured, got {result:?}");
    };
    assert!(message.contains("SQLSTATE 42P01"), "{message}");
    // The server's own words stay reachable as the source.
    let source = source
        .expect("the database error is the source")
        .to_string();
    assert!(source.contains("idem_records"), "{source}");

    other.close().await;
    let result = other.ping().await;
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "expected Unavailable, got {result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connecting_to_a_closed_port_is_a_connect_error() {
    // No server needed: nothing listens on this port.
    let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = unused.local_addr().unwrap().port();
    drop(unused);
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    let options = PostgresOptions::new().pool_timeout(Duration::from_millis(200));
    let result = PostgresStore::connect(&url, options).await;
    assert!(
        matches!(result, Err(idem_postgres::Error::Connect(_))),
        "{result:?}"
    );
}
