//! Two gateway processes on one store (PostgreSQL, MySQL, Redis, a SQLite file): concurrent
//! duplicates spread over both execute once, and in wait mode the waiters on the other gateway
//! replay: woken by the store's notifications (PostgreSQL, Redis), or by polling it with backoff
//! (MySQL and SQLite, which have none).

use std::{collections::HashMap, sync::Arc};

use axum::{body::Body, http::Request};
use idem_gateway::{StoreUrl, testing::InstrumentedStore};
use serde_json::json;
use tokio::{sync::Semaphore, task::JoinSet};

use crate::{
    servers::{MysqlDb, PgSchema, RedisCluster, RedisPrefix},
    support::{Client, Gateway, Reply, Upstream, idem, sqlite_url},
};

/// Keys of the reject-mode run, each sent this many times at once.
const KEYS: usize = 500;
const DUPLICATES: usize = 16;
/// Keys whose duplicates are in flight at the same time.
const KEYS_AT_ONCE: usize = 8;

/// `POST /orders` with `key` on `gateway`, the upstream taking `delay_ms`.
fn order(gateway: &Gateway, key: &str, delay_ms: u64) -> Request<Body> {
    Request::post(gateway.url("/orders"))
        .header("idempotency-key", key)
        .header("x-delay-ms", delay_ms.to_string())
        .header("content-type", "application/json")
        .body(Body::from(format!(r#"{{"order":"{key}"}}"#)))
        .unwrap()
}

/// Sends every key's duplicates at once, alternately to each gateway, `keys_at_once` keys at a
/// time, and returns the replies by key.
async fn send_duplicates(
    gateways: &[Gateway; 2],
    keys: &[String],
    keys_at_once: usize,
    delay_ms: u64,
) -> HashMap<String, Vec<Reply>> {
    let client = Client::new();
    let permits = Arc::new(Semaphore::new(keys_at_once));
    let mut running = JoinSet::new();
    for key in keys {
        let permit = Arc::clone(&permits).acquire_owned().await.unwrap();
        let requests: Vec<_> = (0..DUPLICATES)
            .map(|i| order(&gateways[i % 2], key, delay_ms))
            .collect();
        let (client, key) = (client.clone(), key.clone());
        running.spawn(async move {
            let sends = requests.into_iter().map(|request| client.send(request));
            let replies = futures_util::future::join_all(sends).await;
            drop(permit);
            (key, replies)
        });
    }
    running.join_all().await.into_iter().collect()
}

/// Two gateways on `store` in reject mode: every duplicate is the execution, its replay, or a
/// 409, and the upstream ran each key once.
async fn each_key_executes_once_across_two_gateways(store: &str) {
    let upstream = Upstream::start().await;
    let args = ["--store", store, "--in-flight", "reject"];
    let gateways = [
        Gateway::start(&upstream.url(), &args),
        Gateway::start(&upstream.url(), &args),
    ];
    let keys: Vec<String> = (0..KEYS).map(|i| format!("shared-{i}")).collect();

    let replies = send_duplicates(&gateways, &keys, KEYS_AT_ONCE, 0).await;

    assert_eq!(upstream.hits("orders"), KEYS);
    let executions = upstream.executions();
    assert_eq!(executions.len(), KEYS);
    assert!(executions.values().all(|&n| n == 1), "{executions:?}");
    for (key, replies) in &replies {
        let mut executed = 0;
        for reply in replies {
            match reply.status.as_u16() {
                201 => {
                    assert_eq!(reply.json(), json!({ "key": key, "execution": 1 }));
                    executed += usize::from(!reply.replayed());
                }
                409 => {
                    assert_eq!(reply.json()["type"], "urn:idem:problem:in-flight");
                    assert!(reply.header("retry-after").parse::<u64>().unwrap() >= 1);
                }
                _ => panic!("{key}: {reply:?}"),
            }
        }
        assert_eq!(executed, 1, "{key}: {replies:?}");
    }
    for gateway in gateways {
        gateway.stop().await;
    }
}

/// Two gateways on `store` in wait mode, a slow upstream: all the duplicates of a key get its
/// one response, half of them from the gateway that did not execute it.
async fn waiters_on_the_other_gateway_replay(store: &str) {
    const SLOW_KEYS: usize = 20;
    let upstream = Upstream::start().await;
    let args = [
        "--store",
        store,
        "--in-flight",
        "wait",
        "--wait-timeout",
        "20s",
    ];
    let gateways = [
        Gateway::start(&upstream.url(), &args),
        Gateway::start(&upstream.url(), &args),
    ];
    let keys: Vec<String> = (0..SLOW_KEYS).map(|i| format!("waited-{i}")).collect();

    let replies = send_duplicates(&gateways, &keys, SLOW_KEYS, 1000).await;

    let executions = upstream.executions();
    assert_eq!(executions.len(), SLOW_KEYS);
    assert!(executions.values().all(|&n| n == 1), "{executions:?}");
    for (key, replies) in &replies {
        for reply in replies {
            assert_eq!(reply.status, 201, "{key}: {reply:?}");
            assert_eq!(reply.json(), json!({ "key": key, "execution": 1 }));
        }
        let replayed = replies.iter().filter(|reply| reply.replayed()).count();
        assert_eq!(replayed, DUPLICATES - 1, "{key}");
    }
    for gateway in gateways {
        gateway.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_postgres_execute_each_key_once() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    assert_eq!(
        idem(&["migrate", "--store", &schema.store_url()]).code,
        Some(0)
    );
    each_key_executes_once_across_two_gateways(&schema.store_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_redis_execute_each_key_once() {
    let Some(prefix) = RedisPrefix::new() else {
        return;
    };
    each_key_executes_once_across_two_gateways(&prefix.store_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_a_redis_cluster_execute_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cluster) = RedisCluster::start(dir.path()) else {
        return;
    };
    each_key_executes_once_across_two_gateways(&cluster.store_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_waiters_on_the_other_gateway_wake_up_and_replay() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    assert_eq!(
        idem(&["migrate", "--store", &schema.store_url()]).code,
        Some(0)
    );
    waiters_on_the_other_gateway_replay(&schema.store_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_waiters_on_the_other_gateway_wake_up_and_replay() {
    let Some(prefix) = RedisPrefix::new() else {
        return;
    };
    waiters_on_the_other_gateway_replay(&prefix.store_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_mysql_execute_each_key_once() {
    let Some(database) = MysqlDb::new().await else {
        return;
    };
    let store = database.store_url();
    assert_eq!(idem(&["migrate", "--store", &store]).code, Some(0));
    each_key_executes_once_across_two_gateways(&store).await;
}

/// MySQL has no notifications: the waiters on the other gateway poll the store, with backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql_waiters_on_the_other_gateway_poll_and_replay() {
    let Some(database) = MysqlDb::new().await else {
        return;
    };
    let store = database.store_url();
    assert_eq!(idem(&["migrate", "--store", &store]).code, Some(0));
    the_gateway_store_has_no_wake_ups(&store).await;
    waiters_on_the_other_gateway_replay(&store).await;
}

/// Two gateway processes on one SQLite file: nothing tells one that the other completed a key,
/// so its waiters poll the file, with backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_waiters_on_the_other_gateway_poll_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "shared.db");
    the_gateway_store_has_no_wake_ups(&store).await;
    waiters_on_the_other_gateway_replay(&store).await;
}

/// The gateway's store opened from `store` never wakes a waiter: `changed` stays pending after
/// another process completed the key, so the replays of
/// [`waiters_on_the_other_gateway_replay`] come from polling alone.
async fn the_gateway_store_has_no_wake_ups(store: &str) {
    use idem_core::{
        Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse, Terms,
    };

    let url: StoreUrl = store.parse().unwrap();
    let waiting = InstrumentedStore::new(url.open().await.unwrap());
    let other = url.open().await.unwrap();
    let address = Address::anonymous("polled".parse().unwrap());
    let fingerprint = Fingerprint::from_bytes([3; 32]);
    let terms = Terms::from(&Policy::default());
    let Acquisition::Acquired(lease) = other.acquire(&address, &fingerprint, terms).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    assert!(matches!(
        waiting
            .acquire(&address, &fingerprint, terms)
            .await
            .unwrap(),
        Acquisition::InFlight { .. }
    ));
    let changed = waiting.changed(&address);
    let response = Outcome::from(StoredResponse::new(201).body("done"));
    other
        .complete(&address, lease.token, &response, terms.ttl)
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(500), changed)
            .await
            .is_err(),
        "no wake-up: the waiter polls"
    );
    assert_eq!(
        waiting
            .acquire(&address, &fingerprint, terms)
            .await
            .unwrap(),
        Acquisition::Completed(response)
    );
}

/// The gateway's store, opened from `store` (already migrated), passes the store's wake-ups on:
/// a waiter's `changed` resolves when another process completes the key it found in flight.
/// (Without them, waiters would only poll: each replay up to a second late.)
async fn the_gateway_store_passes_wake_ups_on(store: &str) {
    use idem_core::{
        Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse, Terms,
    };

    let url: StoreUrl = store.parse().unwrap();
    let holder = url.open().await.unwrap();
    let waiter = InstrumentedStore::new(url.open().await.unwrap());
    let address = Address::anonymous("woken".parse().unwrap());
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let terms = Terms::from(&Policy::default());

    let Acquisition::Acquired(lease) = holder.acquire(&address, &fingerprint, terms).await.unwrap()
    else {
        panic!("a new key is acquired");
    };
    let changed = waiter.changed(&address);
    assert!(matches!(
        waiter.acquire(&address, &fingerprint, terms).await.unwrap(),
        Acquisition::InFlight { .. }
    ));
    let response = Outcome::from(StoredResponse::new(201).body("done"));
    holder
        .complete(&address, lease.token, &response, terms.ttl)
        .await
        .unwrap();
    // Not a timing assertion: without the wake-up this would never resolve.
    tokio::time::timeout(std::time::Duration::from_secs(20), changed)
        .await
        .expect("the waiter is woken");
    assert_eq!(
        waiter.acquire(&address, &fingerprint, terms).await.unwrap(),
        Acquisition::Completed(response)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_store_passes_postgres_notifications_on() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    assert_eq!(
        idem(&["migrate", "--store", &schema.store_url()]).code,
        Some(0)
    );
    the_gateway_store_passes_wake_ups_on(&schema.store_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_store_passes_redis_messages_on() {
    let Some(prefix) = RedisPrefix::new() else {
        return;
    };
    the_gateway_store_passes_wake_ups_on(&prefix.store_url()).await;
}
