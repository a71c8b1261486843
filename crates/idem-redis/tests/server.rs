//! The Redis store's own behaviour on a real server: wake-ups across instances, restarts with and
//! without an append-only file, server-side expiry, unreadable records and connection failures.
//!
//! Tests on the shared test server (`IDEM_TEST_REDIS_URL`) use their own key prefix; those that
//! kill or restart Redis start a `redis-server` of their own on a free port (and are skipped with
//! the others when the variable is not set: it says Redis is installed).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod support;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures_util::FutureExt as _;
use idem_conformance::checks::{self, LEASE, TERMS, TTL, acquired, address, fingerprint, response};
use idem_core::{
    Acquisition, Address, Census, Clock, DecodeError, Engine, Execution, FencingToken, Fingerprint,
    InFlight, ListCursor, ListPage, ListQuery, Listed, ManualClock, Outcome, Pace, Policy,
    RecordState, RunOutcome, Scope, StateFilter, Store, StoreError, StoredResponse, Terms,
    Timestamp,
};
use idem_redis::{Error, KeyPrefix, RedisOptions, RedisStore};
use redis::Commands;

use support::{
    RedisSubject, Server, calls, free_port, fresh_prefix, in_order, inspect,
    operations_on_one_key_keep_their_order, redis_url, round_trips, watch,
};
use tokio::time::timeout;

async fn open(url: &str, prefix: &KeyPrefix) -> RedisStore {
    let options = RedisOptions::new(url).prefix(prefix.clone());
    RedisStore::open_with(options)
        .await
        .expect("open the store")
}

/// Waits until `store` has subscribed to `address`'s changes: the first wait resolves when
/// Redis confirms the subscription.
async fn subscribed(store: &RedisStore, address: &Address) {
    timeout(Duration::from_secs(5), store.changed(address))
        .await
        .expect("woken once Redis confirms the subscription");
}

async fn assert_not_woken(waiting: std::pin::Pin<&mut (impl Future<Output = ()> + Send + ?Sized)>) {
    let early = timeout(Duration::from_millis(200), waiting).await;
    assert!(early.is_err(), "woken before anything changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changed_wakes_a_waiter_on_another_instance() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let (a, b) = (
        open(&redis_url(), &prefix).await,
        open(&redis_url(), &prefix).await,
    );
    for change in ["complete", "release", "forget"] {
        let at = address(&format!("wake-on-{change}"));
        subscribed(&b, &at).await;
        let lease = acquired(&a, &at, &fingerprint(1)).await;
        let mut waiting = watch(&b, &at).await;
        assert_not_woken(waiting.as_mut()).await;
        match change {
            "complete" => a
                .complete(&at, lease.token, &response(1).into(), TTL)
                .await
                .unwrap(),
            "release" => a.release(&at, lease.token).await.unwrap(),
            _ => assert!(a.forget(&at).await.unwrap()),
        }
        timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap_or_else(|_| panic!("a waiter on the other instance is woken by {change}"));
    }
}

/// A part of a streamed response, for the tests on parts.
fn part(index: u32) -> Bytes {
    Bytes::from(format!("part {index}"))
}

/// The Redis key of the parts list of `address`'s execution `token`.
fn parts_key(store: &RedisStore, address: &Address, token: FencingToken) -> String {
    format!("{}:parts:{}", store.record_key(address), token.get())
}

/// The absolute expiry of `key` in ms (`PEXPIRETIME`): -2 when there is no such key.
fn expire_time(redis: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(redis).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_wakes_a_waiter_on_another_instance() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let (a, b) = (
        open(&redis_url(), &prefix).await,
        open(&redis_url(), &prefix).await,
    );
    let at = address("wake-on-append");
    subscribed(&b, &at).await;
    let lease = acquired(&a, &at, &fingerprint(1)).await;
    // As a follower on `b` does: wait, read what came, wait again.
    for index in 0..3 {
        let mut waiting = watch(&b, &at).await;
        assert_not_woken(waiting.as_mut()).await;
        a.append_part(&at, lease.token, index, &part(index))
            .await
            .unwrap();
        timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap_or_else(|_| {
                panic!("the waiter on the other instance is woken by part {index}")
            });
        let read = b
            .read_parts(&at, lease.token, index, usize::MAX)
            .await
            .unwrap();
        assert_eq!(read, [part(index)]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changed_survives_a_lost_subscriber_connection() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let prefix = fresh_prefix();
    let (a, b) = (
        open(&server.url(), &prefix).await,
        open(&server.url(), &prefix).await,
    );
    let at = address("reconnect");
    subscribed(&b, &at).await;
    let waiting = b.changed(&at);
    tokio::pin!(waiting);
    assert_not_woken(waiting.as_mut()).await;

    let killed: usize = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"][..])
        .query(&mut inspect(&server.url()))
        .unwrap();
    assert_eq!(killed, 1, "the one subscriber connection");
    timeout(Duration::from_secs(5), waiting)
        .await
        .expect("a lost connection wakes the waiters: a change may have been missed");

    // The subscriber reconnects by itself, and messages reach new waiters again.
    subscribed(&b, &at).await;
    let lease = acquired(&a, &at, &fingerprint(1)).await;
    let mut waiting = watch(&b, &at).await;
    assert_not_woken(waiting.as_mut()).await;
    a.complete(&at, lease.token, &response(1).into(), TTL)
        .await
        .unwrap();
    timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the completion after the reconnection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn engines_on_two_instances_execute_once_and_every_waiter_replays() {
    const CALLERS: usize = 16;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let policy = Policy::default().in_flight(InFlight::Wait {
        timeout: Duration::from_secs(20),
    });
    let engines = [
        Engine::new(open(&redis_url(), &prefix).await, policy),
        Engine::new(open(&redis_url(), &prefix).await, policy),
    ];
    let executions = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|n| {
            let (engine, executions) = (engines[n % 2].clone(), Arc::clone(&executions));
            tokio::spawn(async move {
                engine
                    .run(address("charge"), fingerprint(1), |_lease| async move {
                        executions.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let response = StoredResponse::new(201).body("charged once");
                        Execution::Final {
                            value: (),
                            response,
                        }
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let (mut executed, mut replayed) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            RunOutcome::Executed(()) => executed += 1,
            RunOutcome::Replayed(Outcome::Response(r)) => {
                assert_eq!((r.status, &r.body[..]), (201, &b"charged once"[..]));
                replayed += 1;
            }
            other => panic!("expected a replay, got {other:?}"),
        }
    }
    assert_eq!(executions.load(Ordering::SeqCst), 1);
    assert_eq!((executed, replayed), (1, CALLERS - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_survive_a_restart_with_appendfsync_always() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut server = Server::start(dir.path(), free_port(), &args);
    let subject = RedisSubject::open(RedisOptions::new(server.url())).await;
    let (prefix, clock) = (subject.store.prefix().clone(), subject.clock.clone());
    let server = &mut server; // not moved in: dropping it would stop the server
    checks::records_survive_a_restart(&subject, |store| async move {
        server.kill(); // as a crash would: no save on shutdown
        let down = store.ping().await;
        assert!(matches!(down, Err(StoreError::Unavailable(_))), "{down:?}");
        drop(store);
        server.restart();
        let options = RedisOptions::new(server.url())
            .prefix(prefix)
            .manual_clock(clock);
        RedisStore::open_with(options)
            .await
            .expect("reopen the store")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_without_an_append_only_file_loses_records_but_not_fencing() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let prefix = fresh_prefix();
    let store = open(&server.url(), &prefix).await;
    let done = address("completed-before-restart");
    let lease = acquired(&store, &done, &fingerprint(1)).await;
    store
        .complete(&done, lease.token, &response(1).into(), TTL)
        .await
        .unwrap();
    assert_eq!(
        store.acquire(&done, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );

    server.kill();
    server.restart();
    let store = open(&server.url(), &prefix).await;
    // The completion is gone: a retry now would execute the operation a second time.
    assert_eq!(store.get(&done).await.unwrap(), None);
    let again = acquired(&store, &done, &fingerprint(1)).await;
    assert!(!again.took_over);
    // Tokens come from the server's clock, so they still grow past the ones the restart lost.
    assert!(again.token > lease.token, "{again:?} after {lease:?}");
    assert_lease_lost(
        store
            .complete(&done, lease.token, &response(2).into(), TTL)
            .await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_expires_records_itself_so_purge_finds_none() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let store = open(&redis_url(), &fresh_prefix()).await;
    let mut redis = inspect(&redis_url());
    let at = address("expiring");
    let lease = acquired(&store, &at, &fingerprint(1)).await;
    let key = store.record_key(&at);
    let ttl: i64 = redis.pttl(&key).unwrap();
    assert!(
        (9_000..=10_000).contains(&ttl),
        "a processing record lives its TTL: {ttl}"
    );

    let short = Duration::from_millis(300);
    store
        .complete(&at, lease.token, &response(1).into(), short)
        .await
        .unwrap();
    let ttl: i64 = redis.pttl(&key).unwrap();
    assert!(
        (1..=300).contains(&ttl),
        "a completed record lives its TTL: {ttl}"
    );

    tokio::time::sleep(short + Duration::from_millis(50)).await;
    assert_eq!(store.purge_expired(100).await.unwrap(), 0);
    assert_eq!(store.get(&at).await.unwrap(), None);
    let exists: bool = redis.exists(&key).unwrap();
    assert!(!exists, "Redis removed the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_released_record_leaves_a_fence_that_expires_with_it() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let store = open(&redis_url(), &fresh_prefix()).await;
    let mut redis = inspect(&redis_url());
    let at = address("fenced");
    let first = acquired(&store, &at, &fingerprint(1)).await;
    store.release(&at, first.token).await.unwrap();

    let fence = format!("{}:fence", store.record_key(&at));
    let kept: u64 = redis.get(&fence).unwrap();
    assert_eq!(kept, first.token.get());
    let ttl: i64 = redis.pttl(&fence).unwrap();
    assert!(
        (9_000..=10_000).contains(&ttl),
        "as long as the record would have lived: {ttl}"
    );
    let second = acquired(&store, &at, &fingerprint(2)).await;
    assert!(second.token > first.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unreadable_records_are_corrupted_not_unavailable() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let store = open(&redis_url(), &fresh_prefix()).await;
    let mut redis = inspect(&redis_url());
    let at = address("corrupt");
    let lease = acquired(&store, &at, &fingerprint(1)).await;
    store
        .complete(&at, lease.token, &response(1).into(), TTL)
        .await
        .unwrap();
    let key = store.record_key(&at);

    let () = redis.hset(&key, "r", "IDR").unwrap();
    for result in [
        store.acquire(&at, &fingerprint(1), TERMS).await.map(drop),
        store.get(&at).await.map(drop),
    ] {
        let Err(StoreError::Corrupted(source)) = result else {
            panic!("expected Corrupted, got {result:?}");
        };
        assert_eq!(source.downcast_ref(), Some(&DecodeError::Truncated));
    }

    let () = redis.hset(&key, "s", "7").unwrap();
    let result = store.get(&at).await;
    let Err(StoreError::Corrupted(source)) = result else {
        panic!("expected Corrupted, got {result:?}");
    };
    assert!(
        matches!(source.downcast_ref(), Some(Error::UnknownState(s)) if s == "7"),
        "{source:?}"
    );
    // The scripts refuse it too, with their own error code.
    let result = store.acquire(&at, &fingerprint(1), TERMS).await;
    let Err(StoreError::Corrupted(source)) = result else {
        panic!("expected Corrupted, got {result:?}");
    };
    let code = source
        .downcast_ref::<redis::RedisError>()
        .and_then(|e| e.code());
    assert_eq!(code, Some("IDEMCORRUPT"));

    let () = redis.set(&key, "not a hash").unwrap();
    let result = store.acquire(&at, &fingerprint(1), TERMS).await;
    let Err(StoreError::Corrupted(source)) = result else {
        panic!("expected Corrupted, got {result:?}");
    };
    let code = source
        .downcast_ref::<redis::RedisError>()
        .and_then(|e| e.code());
    assert_eq!(code, Some("WRONGTYPE"));
}

#[tokio::test]
async fn bad_settings_and_unreachable_servers_fail_to_open() {
    let invalid = RedisStore::open("http://127.0.0.1:6379").await;
    assert!(matches!(invalid, Err(Error::Settings(_))), "{invalid:?}");
    let options = RedisOptions::new(format!("redis://127.0.0.1:{}", free_port()))
        .connection_timeout(Duration::from_millis(200));
    let unreachable = RedisStore::open_with(options).await;
    assert!(
        matches!(unreachable, Err(Error::Connect(_))),
        "{unreachable:?}"
    );
}

/// A store on a `redis-server` of the test's own, whose statistics count only what the test
/// does, and a connection to read them; the server lives as long as the first value.
async fn counted() -> ((Server, tempfile::TempDir), RedisStore, redis::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let store = open(&server.url(), &fresh_prefix()).await;
    let redis = inspect(&server.url());
    ((server, dir), store, redis)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_key_takes_two_round_trips_and_a_replay_one() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let (_server, store, mut redis) = counted().await;
    let at = address("counted");

    let before = round_trips(&mut redis);
    let lease = acquired(&store, &at, &fingerprint(1)).await;
    store
        .complete(&at, lease.token, &response(1).into(), TTL)
        .await
        .unwrap();
    let after_new_key = round_trips(&mut redis);
    assert_eq!(after_new_key - before, 2, "acquire and complete");

    assert_eq!(
        store.acquire(&at, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(response(1).into())
    );
    assert_eq!(round_trips(&mut redis) - after_new_key, 1, "acquire");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_a_record_found_in_flight_announces_its_change() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let (_server, store, mut redis) = counted().await;
    let change = |n: usize, lease: idem_core::Lease, at: Address| {
        let store = store.clone();
        async move {
            match n {
                0 => store
                    .complete(&at, lease.token, &response(1).into(), TTL)
                    .await
                    .unwrap(),
                1 => store.release(&at, lease.token).await.unwrap(),
                _ => assert!(store.forget(&at).await.unwrap()),
            }
        }
    };
    for n in 0..3 {
        let at = address(&format!("unwatched-{n}"));
        let lease = acquired(&store, &at, &fingerprint(1)).await;
        change(n, lease, at).await;
    }
    assert_eq!(
        calls(&mut redis, &["publish"]),
        0,
        "nobody found them in flight"
    );

    for n in 0..3 {
        let at = address(&format!("watched-{n}"));
        let lease = acquired(&store, &at, &fingerprint(1)).await;
        let marks = calls(&mut redis, &["hset"]);
        drop(watch(&store, &at).await);
        assert_eq!(
            calls(&mut redis, &["hset"]) - marks,
            1,
            "the first one marks it"
        );
        drop(watch(&store, &at).await);
        assert_eq!(
            calls(&mut redis, &["hset"]) - marks,
            1,
            "later ones only read"
        );
        change(n, lease, at).await;
    }
    assert_eq!(calls(&mut redis, &["publish"]), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_takes_one_round_trip_and_is_announced_only_when_found_in_flight() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let (_server, store, mut redis) = counted().await;
    let at = address("appended");
    let lease = acquired(&store, &at, &fingerprint(1)).await;

    let before = round_trips(&mut redis);
    store
        .append_part(&at, lease.token, 0, &part(0))
        .await
        .unwrap();
    assert_eq!(round_trips(&mut redis) - before, 1, "one script call");
    assert_eq!(
        calls(&mut redis, &["publish"]),
        0,
        "nobody found it in flight"
    );

    drop(watch(&store, &at).await);
    store
        .append_part(&at, lease.token, 1, &part(1))
        .await
        .unwrap();
    assert_eq!(calls(&mut redis, &["publish"]), 1);
    // A retried append, or one out of order, stores nothing and announces nothing.
    store
        .append_part(&at, lease.token, 1, &part(1))
        .await
        .unwrap();
    let skipped = store.append_part(&at, lease.token, 3, &part(3)).await;
    assert!(
        matches!(
            skipped,
            Err(StoreError::PartOutOfOrder { next: 2, given: 3 })
        ),
        "{skipped:?}"
    );
    assert_eq!(calls(&mut redis, &["publish"]), 1);

    let before = round_trips(&mut redis);
    let read = store
        .read_parts(&at, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(read, [part(0), part(1)]);
    assert_eq!(round_trips(&mut redis) - before, 1, "one script call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parts_lists_expire_with_their_record_on_the_server_clock() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let store = open(&redis_url(), &fresh_prefix()).await;
    let mut redis = inspect(&redis_url());
    let at = address("expiring-parts");
    let lease = acquired(&store, &at, &fingerprint(1)).await;
    let (record, parts) = (store.record_key(&at), parts_key(&store, &at, lease.token));
    store
        .append_part(&at, lease.token, 0, &part(0))
        .await
        .unwrap();
    let expires_at = expire_time(&mut redis, &record);
    assert!(expires_at > 0, "{expires_at}");
    assert_eq!(expire_time(&mut redis, &parts), expires_at);
    let stored: Vec<Vec<u8>> = redis.lrange(&parts, 0, -1).unwrap();
    assert_eq!(
        stored,
        [expires_at.to_string().into_bytes(), b"part 0".to_vec()],
        "the list's expiry, then the parts"
    );

    // A renewal past the record's expiry: the next append carries the list (part 0 too) along.
    store.renew(&at, lease.token, TTL * 2).await.unwrap();
    let renewed = expire_time(&mut redis, &record);
    assert!(renewed > expires_at, "{renewed} after {expires_at}");
    assert_eq!(
        expire_time(&mut redis, &parts),
        expires_at,
        "until an append"
    );
    store
        .append_part(&at, lease.token, 1, &part(1))
        .await
        .unwrap();
    assert_eq!(expire_time(&mut redis, &parts), renewed);
    // A completion sets the record's expiry, not the parts'.
    store
        .complete(
            &at,
            lease.token,
            &response(1).into(),
            Duration::from_millis(300),
        )
        .await
        .unwrap();
    assert_eq!(expire_time(&mut redis, &parts), renewed);

    // A short-lived record: Redis removes its parts when it expires.
    let brief = address("brief-parts");
    let short = Duration::from_millis(300);
    let terms = Terms {
        lease: short,
        ttl: short,
    };
    let Acquisition::Acquired(lease) = store.acquire(&brief, &fingerprint(1), terms).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    store
        .append_part(&brief, lease.token, 0, &part(0))
        .await
        .unwrap();
    tokio::time::sleep(short + Duration::from_millis(50)).await;
    let exists: bool = redis
        .exists(parts_key(&store, &brief, lease.token))
        .unwrap();
    assert!(!exists, "Redis removed the list");
    let read = store
        .read_parts(&brief, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert!(read.is_empty(), "{read:?}");
    assert_eq!(store.purge_expired(100).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forget_removes_the_parts_of_the_record_and_of_the_last_one_removed_early() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let subject = RedisSubject::open(RedisOptions::new(redis_url())).await;
    let store = &subject.store;
    let mut redis = inspect(&redis_url());
    let at = address("forget-parts");
    let exists = |redis: &mut redis::Connection, token| -> bool {
        redis.exists(parts_key(store, &at, token)).unwrap()
    };

    // Released: the fence keeps its token, so a later forget finds its parts.
    let released = acquired(store, &at, &fingerprint(1)).await;
    store
        .append_part(&at, released.token, 0, &part(0))
        .await
        .unwrap();
    store.release(&at, released.token).await.unwrap();
    // Taken over: its token is named nowhere once the next one holds the record.
    let taken_over = acquired(store, &at, &fingerprint(1)).await;
    store
        .append_part(&at, taken_over.token, 0, &part(0))
        .await
        .unwrap();
    subject.clock.advance(LEASE);
    let current = acquired(store, &at, &fingerprint(1)).await;
    assert!(current.took_over);
    store
        .append_part(&at, current.token, 0, &part(0))
        .await
        .unwrap();

    assert!(store.forget(&at).await.unwrap());
    assert!(!exists(&mut redis, released.token), "the fence's token");
    assert!(!exists(&mut redis, current.token), "the record's token");
    assert!(
        exists(&mut redis, taken_over.token),
        "left to expire with the record it was written for"
    );

    // Forgetting an address whose record is gone (released) also removes the fence's parts.
    let gone = address("forget-released-parts");
    let lease = acquired(store, &gone, &fingerprint(1)).await;
    store
        .append_part(&gone, lease.token, 0, &part(0))
        .await
        .unwrap();
    store.release(&gone, lease.token).await.unwrap();
    assert!(!store.forget(&gone).await.unwrap(), "no live record");
    let read = store
        .read_parts(&gone, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert!(read.is_empty(), "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purging_under_a_manual_clock_removes_expired_parts_within_its_limit() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let subject = RedisSubject::open(RedisOptions::new(redis_url())).await;
    let store = &subject.store;
    let at = address("purged-parts");
    let lease = acquired(store, &at, &fingerprint(1)).await;
    for index in 0..3 {
        store
            .append_part(&at, lease.token, index, &part(index))
            .await
            .unwrap();
    }
    subject.clock.advance(TTL);
    // The record, then one part: the limit holds across both.
    assert_eq!(store.purge_expired(2).await.unwrap(), 2);
    let read = store
        .read_parts(&at, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert!(read.is_empty(), "{read:?}");
    assert_eq!(store.purge_expired(10).await.unwrap(), 2, "the other two");
    assert_eq!(store.purge_expired(10).await.unwrap(), 0);
    let mut redis = inspect(&redis_url());
    let exists: bool = redis.exists(parts_key(store, &at, lease.token)).unwrap();
    assert!(!exists, "the list is gone");
}

/// A store on `server` under a fresh prefix, on a manual clock, with `batch_size` and `lanes`.
async fn batching_store(
    server: &Server,
    clock: &ManualClock,
    batch_size: usize,
    lanes: usize,
) -> RedisStore {
    let options = RedisOptions::new(server.url())
        .prefix(fresh_prefix())
        .manual_clock(clock.clone())
        .batch_size(batch_size)
        .lanes(lanes);
    RedisStore::open_with(options)
        .await
        .expect("open the store")
}

// The batching tests run on one thread: every operation a test queues enters the store's queue
// before any reply is read, so the script calls they take are an exact count.

#[tokio::test]
async fn operations_on_one_key_keep_their_order_across_and_within_batches_and_lanes() {
    const ADDRESSES: usize = 20;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let mut redis = inspect(&server.url());
    for lanes in [1, 2, 4] {
        for batch_size in [1, 3, 7, 64] {
            let store = batching_store(&server, &ManualClock::default(), batch_size, lanes).await;
            // An address's lane is the last hex digit of its record key's hash, modulo the
            // lanes; each address makes 5 operations. In each lane the first operation finds
            // the lane idle and goes alone, whatever the other lanes have on their way; the
            // others queue behind it and go in batches of at most `batch_size`, so batches end
            // inside every address's run (one lane: 100 operations in 1 + 99 / `batch_size`
            // calls).
            let mut per_lane = vec![0_u64; lanes];
            for n in 0..ADDRESSES {
                let record = store.record_key(&address(&format!("ordered-{n}")));
                let digit = record.as_bytes()[record.len() - 2];
                per_lane[usize::from(digit) % lanes] += 5;
            }
            assert!(
                per_lane.iter().all(|&operations| operations > 0),
                "{per_lane:?}"
            );
            let batch = u64::try_from(batch_size).unwrap();
            let script_calls: u64 = per_lane
                .iter()
                .map(|&operations| 1 + (operations - 1).div_ceil(batch))
                .sum();
            let before = round_trips(&mut redis);
            operations_on_one_key_keep_their_order(&store, "ordered", ADDRESSES).await;
            assert_eq!(
                round_trips(&mut redis) - before,
                script_calls,
                "{lanes} lanes, batch size {batch_size}, operations per lane {per_lane:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_failing_operation_leaves_its_neighbours_in_the_batch_their_results() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let mut redis = inspect(&server.url());
    let clock = ManualClock::default();
    let store = batching_store(&server, &clock, 64, 1).await;
    let (held, done, fresh) = (address("held"), address("done"), address("fresh"));
    let (not_a_hash, unknown_state) = (address("not-a-hash"), address("unknown-state"));
    let lease = acquired(&store, &held, &fingerprint(1)).await;
    let finished = acquired(&store, &done, &fingerprint(1)).await;
    store
        .complete(&done, finished.token, &response(1).into(), TTL)
        .await
        .unwrap();
    acquired(&store, &unknown_state, &fingerprint(1)).await;
    let () = redis.set(store.record_key(&not_a_hash), "x").unwrap();
    let () = redis
        .hset(store.record_key(&unknown_state), "s", "7")
        .unwrap();
    let stale = FencingToken::new(lease.token.get() - 1);
    let fp = fingerprint(1);

    let before = round_trips(&mut redis);
    let replies = in_order(vec![
        store.get(&fresh).map(Answer::Found).boxed(), // goes alone
        store
            .acquire(&not_a_hash, &fp, TERMS)
            .map(Answer::Acquired)
            .boxed(),
        store
            .complete(&held, stale, &response(2).into(), TTL)
            .map(Answer::Held)
            .boxed(),
        store
            .acquire(&unknown_state, &fp, TERMS)
            .map(Answer::Acquired)
            .boxed(),
        store
            .acquire(&done, &fp, TERMS)
            .map(Answer::Acquired)
            .boxed(),
        store
            .renew(&held, lease.token, TERMS.lease * 2)
            .map(Answer::Renewed)
            .boxed(),
        store
            .acquire(&fresh, &fp, TERMS)
            .map(Answer::Acquired)
            .boxed(),
    ])
    .await;
    assert_eq!(
        round_trips(&mut redis) - before,
        2,
        "one alone, then one batch"
    );

    let now = clock.now();
    let [
        Answer::Found(Ok(None)),
        Answer::Acquired(wrong_type),
        Answer::Held(Err(StoreError::LeaseLost)),
        Answer::Acquired(unknown),
        Answer::Acquired(Ok(replayed)),
        Answer::Renewed(Ok(renewed)),
        Answer::Acquired(Ok(Acquisition::Acquired(new))),
    ] = &replies[..]
    else {
        panic!("unexpected replies {replies:?}");
    };
    // Redis's own error and idem's, each in its operation's place.
    assert_eq!(redis_code(wrong_type), "WRONGTYPE");
    assert_eq!(redis_code(unknown), "IDEMCORRUPT");
    assert_eq!(replayed, &Acquisition::Completed(response(1).into()));
    assert_eq!(*renewed, now + TERMS.lease * 2);
    assert_eq!((new.until, new.took_over), (now + TERMS.lease, false));
    assert_eq!(
        store.get(&held).await.unwrap().unwrap().state,
        RecordState::Processing {
            token: lease.token,
            lease_until: now + TERMS.lease * 2
        }
    );
}

/// What a store call of a test answered.
#[derive(Debug)]
enum Answer {
    Acquired(Result<Acquisition, StoreError>),
    Held(Result<(), StoreError>),
    Renewed(Result<idem_core::Timestamp, StoreError>),
    Found(Result<Option<idem_core::Record>, StoreError>),
}

/// The code of the Redis error that made `result` `Corrupted`.
fn redis_code<T: std::fmt::Debug>(result: &Result<T, StoreError>) -> String {
    let Err(StoreError::Corrupted(source)) = result else {
        panic!("expected Corrupted, got {result:?}");
    };
    let error = source.downcast_ref::<redis::RedisError>();
    error
        .and_then(|e| e.code())
        .expect("a Redis error")
        .to_owned()
}

#[tokio::test]
async fn the_queue_holds_at_most_queue_size_operations() {
    const CAPACITY: usize = 3;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let mut redis = inspect(&server.url());
    let options = RedisOptions::new(server.url())
        .prefix(fresh_prefix())
        .queue_size(CAPACITY)
        .lanes(1);
    let store = RedisStore::open_with(options).await.unwrap();

    // Redis answers nothing for a second: the first acquire goes and waits for its answer, the
    // next CAPACITY wait in the queue, the others wait for room in it.
    let () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "1000", "ALL"][..])
        .query(&mut redis)
        .unwrap();
    let callers: Vec<_> = (0..10)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let at = address(&format!("queued-{n}"));
                store.acquire(&at, &fingerprint(1), TERMS).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for caller in &callers {
        caller.abort(); // an operation in the queue runs all the same; one waiting for room not
    }
    // Queued after the others, so answered after them.
    let store = &store;
    let ran: Vec<bool> = in_order(
        (0..10)
            .map(|n| {
                let at = address(&format!("queued-{n}"));
                async move { store.get(&at).await.unwrap().is_some() }.boxed()
            })
            .collect(),
    )
    .await;
    let expected: Vec<bool> = (0..10).map(|n| n < 1 + CAPACITY).collect();
    assert_eq!(ran, expected);
}

#[tokio::test]
async fn batches_load_the_script_again_after_a_script_flush() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), free_port(), &["--appendonly", "no"]);
    let store = batching_store(&server, &ManualClock::default(), 3, 1).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut inspect(&server.url()))
        .unwrap();
    operations_on_one_key_keep_their_order(&store, "after-flush", 5).await;
}

/// Every page of a listing of `store`, from `query`'s first page to the last.
async fn pages(store: &RedisStore, mut query: ListQuery) -> Vec<ListPage> {
    let mut pages = Vec::new();
    loop {
        let page = store.list(&query).await.unwrap();
        let next = page.next;
        pages.push(page);
        match next {
            Some(next) => query.cursor = Some(next),
            None => return pages,
        }
    }
}

/// The scope and key digest of each listed record, sorted.
fn identities<'a>(listed: impl IntoIterator<Item = &'a Listed>) -> Vec<(Scope, [u8; 32])> {
    let mut found: Vec<_> = listed
        .into_iter()
        .map(|l| (l.scope, l.key_sha256))
        .collect();
    found.sort_unstable();
    found
}

fn identity(address: &Address) -> (Scope, [u8; 32]) {
    (address.scope, address.key.sha256())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_keep_their_scope_and_key_digest_and_older_ones_are_counted_but_not_listed() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let subject = RedisSubject::open(RedisOptions::new(redis_url())).await;
    let (store, clock) = (&subject.store, &subject.clock);
    let mut redis = inspect(&redis_url());
    let alice = Scope::from_identity([b"alice".as_slice()]);
    let new = Address::new(alice, "new".parse().unwrap());
    let lease = acquired(store, &new, &fingerprint(1)).await;
    let fields: HashMap<String, Vec<u8>> = redis.hgetall(store.record_key(&new)).unwrap();
    assert_eq!(fields["a"], alice.as_bytes());
    assert_eq!(fields["k"], new.key.sha256());

    // A record as a version without listing wrote it: no `a`, no `k`; acquired before `new`.
    let old = address("old");
    let now = clock.now().as_millis();
    let () = redis
        .hset_multiple(
            store.record_key(&old),
            &[
                ("s", b"1".to_vec()),
                ("f", [2; 32].to_vec()),
                ("t", b"7".to_vec()),
                ("c", (now - 1_000).to_string().into_bytes()),
                ("e", (now + 9_000).to_string().into_bytes()),
                ("l", (now + 1_000).to_string().into_bytes()),
            ],
        )
        .unwrap();
    let () = redis.pexpire(store.record_key(&old), 60_000).unwrap();
    assert_eq!(
        store
            .get(&old)
            .await
            .unwrap()
            .map(|r| r.created_at.as_millis()),
        Some(now - 1_000),
        "the other operations read it"
    );

    // A store whose prefix extends this one's with a colon is not walked.
    let longer: KeyPrefix = format!("{}:more", store.prefix()).parse().unwrap();
    let other = open(&redis_url(), &longer).await;
    acquired(&other, &address("other"), &fingerprint(3)).await;

    let page = store.list(&ListQuery::new(10)).await.unwrap();
    assert_eq!(page.next, None);
    assert_eq!(identities(&page.records), [identity(&new)]);
    assert_eq!(
        page.records[0].record.state,
        RecordState::Processing {
            token: lease.token,
            lease_until: lease.until
        }
    );
    assert_eq!(
        store.census(Pace::UNPACED).await.unwrap(),
        Census {
            processing: 2,
            completed: 0,
            oldest_processing: Some(Timestamp::from_millis(now - 1_000)),
        }
    );

    let beyond = ListCursor::Scan {
        shard: 1,
        cursor: 0,
        after: 0,
    };
    let refused = store.list(&ListQuery::new(10).after(beyond)).await;
    assert!(
        matches!(refused, Err(StoreError::InvalidCursor)),
        "a single server has one shard: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_splits_large_scan_steps_and_lists_each_record_once() {
    const RECORDS: usize = 2_500;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    // A database of its own, emptied first, so that every `SCAN` step is dense with this test's
    // records and pages of 300 must split steps.
    let url = format!("{}/11", redis_url().trim_end_matches('/'));
    let () = redis::cmd("FLUSHDB").query(&mut inspect(&url)).unwrap();
    let subject = RedisSubject::open(RedisOptions::new(url)).await;
    let store = &subject.store;
    let addresses: Vec<Address> = (0..RECORDS)
        .map(|n| address(&format!("many-{n}")))
        .collect();
    let tasks = addresses.iter().enumerate().map(|(n, at)| async move {
        let lease = acquired(store, at, &fingerprint(1)).await;
        if n % 3 == 0 {
            store
                .complete(at, lease.token, &response(1).into(), TTL)
                .await
                .unwrap();
        }
    });
    futures_util::future::join_all(tasks).await;

    for (query, expected) in [
        (ListQuery::new(300), addresses.iter().collect::<Vec<_>>()),
        (
            ListQuery::new(7).state(StateFilter::Completed),
            addresses.iter().step_by(3).collect(),
        ),
    ] {
        let pages = pages(store, query.clone()).await;
        for page in &pages {
            assert!(page.records.len() <= query.limit);
            assert!(
                page.records
                    .windows(2)
                    .all(|pair| Listed::newest_first(&pair[0], &pair[1]).is_lt()),
                "each page is newest first"
            );
        }
        let mut wanted: Vec<_> = expected.into_iter().map(identity).collect();
        wanted.sort_unstable();
        assert_eq!(
            identities(pages.iter().flat_map(|page| &page.records)),
            wanted,
            "every record once, for {query:?}"
        );
        let split = pages
            .iter()
            .filter(|page| matches!(page.next, Some(ListCursor::Scan { after, .. }) if after > 0))
            .count();
        assert!(split > 0, "some step is taken over several pages");
    }
    assert_eq!(
        store.census(Pace::UNPACED).await.unwrap(),
        Census {
            processing: (RECORDS - RECORDS.div_ceil(3)) as u64,
            completed: RECORDS.div_ceil(3) as u64,
            oldest_processing: Some(subject.clock.now()),
        }
    );
}

/// The `no_run` examples of the crate docs and of `RedisStore`, on the test server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_documented_examples_work() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let store = open(&redis_url(), &fresh_prefix()).await;
    let address = Address::anonymous("order-42".parse().unwrap());
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let terms = (&Policy::default()).into();
    let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await.unwrap()
    else {
        unreachable!("a new key is acquired");
    };
    let response = Outcome::from(StoredResponse::new(201).body("charged"));
    store
        .complete(&address, lease.token, &response, terms.ttl)
        .await
        .unwrap();
    let replay = store.acquire(&address, &fingerprint, terms).await.unwrap();
    assert_eq!(replay, Acquisition::Completed(response));

    let options = RedisOptions::new(redis_url()).prefix(fresh_prefix());
    let engine = Engine::new(
        RedisStore::open_with(options).await.unwrap(),
        Policy::default(),
    );
    let address = Address::anonymous("pay-1".parse().unwrap());
    let outcome = engine
        .run(address, Fingerprint::from_bytes([1; 32]), |_lease| async {
            Execution::Final {
                value: "paid",
                response: StoredResponse::new(201),
            }
        })
        .await
        .unwrap();
    assert!(matches!(outcome, RunOutcome::Executed("paid")));
}

fn assert_lease_lost<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::LeaseLost)),
        "expected LeaseLost, got {result:?}"
    );
}
