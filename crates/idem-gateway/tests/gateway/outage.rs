//! The store fails during a run: PostgreSQL and MySQL connections terminated, Redis killed and
//! restarted.
//! Requests get 503 with `Retry-After` and are not forwarded while the store is down, the
//! gateway recovers by itself, and no key executes twice.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{body::Body, http::Request};
use serde_json::json;
use tokio::{sync::Mutex, task::JoinSet};

use crate::{
    servers::{MysqlDb, PgSchema, RedisPrefix, RedisServer},
    support::{Client, Gateway, Upstream, idem},
};

/// Logical requests, each with its own key, and the clients that send them at once.
const KEYS: usize = 600;
const CLIENTS: usize = 16;
/// How long the upstream takes: most of the time, every client has a request executing, whose
/// key the gateway must complete after the upstream answered.
const UPSTREAM_DELAY_MS: &str = "50";
/// The gateways' lease: a key whose holder lost its answer (the store failed as it was
/// acquired) is free again after it.
const LEASE: &str = "3s";

/// What the clients saw.
#[derive(Default)]
struct Tally {
    unavailable: AtomicUsize,
    conflicts: AtomicUsize,
}

/// Sends every key to `gateway` from [`CLIENTS`] clients, each logical request retried until it
/// gets an answer that is neither 503 nor 409, which must be the order's 201. Every 503 must
/// carry `Retry-After`.
async fn run_all_keys(gateway: &Gateway, prefix: &str, tally: Arc<Tally>) {
    let keys: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        (0..KEYS).map(|i| format!("{prefix}-{i}")).collect(),
    ));
    let client = Client::new();
    let url = gateway.url("/orders");
    let mut clients = JoinSet::new();
    for _ in 0..CLIENTS {
        let (keys, client, url, tally) = (
            Arc::clone(&keys),
            client.clone(),
            url.clone(),
            Arc::clone(&tally),
        );
        clients.spawn(async move {
            loop {
                let next = keys.lock().await.pop();
                let Some(key) = next else { break };
                loop {
                    let request = Request::post(&url)
                        .header("idempotency-key", &key)
                        .header("x-delay-ms", UPSTREAM_DELAY_MS)
                        .body(Body::from(format!("order {key}")))
                        .unwrap();
                    let reply = client.send(request).await;
                    match reply.status.as_u16() {
                        503 => {
                            assert_eq!(reply.json()["type"], "urn:idem:problem:store-unavailable");
                            assert_eq!(reply.header("retry-after"), "1");
                            tally.unavailable.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        409 => {
                            tally.conflicts.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        _ => {
                            assert_eq!(reply.status, 201, "{key}: {reply:?}");
                            assert_eq!(reply.json()["key"], key.as_str());
                            break;
                        }
                    }
                }
            }
        });
    }
    clients.join_all().await;
}

/// Every key ran exactly once upstream.
fn assert_each_key_executed_once(upstream: &Upstream, prefix: &str) {
    let executions = upstream.executions();
    let ours: Vec<(&String, &usize)> = executions
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{prefix}-")))
        .collect();
    assert_eq!(ours.len(), KEYS);
    let twice: Vec<_> = ours.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        twice.is_empty(),
        "keys not executed exactly once: {twice:?}"
    );
}

/// A new key after the outage: executed, then replayed. The pool may still hold connections
/// the outage broke: each costs one request a 503 as it is found and dropped.
async fn works_again(gateway: &Gateway, upstream: &Upstream) {
    let client = Client::new();
    for replayed in [false, true] {
        let mut reply = client
            .post(&gateway.url("/orders"), "after-the-outage", "{}")
            .await;
        for _ in 0..20 {
            if reply.status != 503 {
                break;
            }
            reply = client
                .post(&gateway.url("/orders"), "after-the-outage", "{}")
                .await;
        }
        assert_eq!(reply.status, 201);
        assert_eq!(reply.replayed(), replayed);
        assert_eq!(
            reply.json(),
            json!({ "key": "after-the-outage", "execution": 1 })
        );
    }
    assert_eq!(upstream.executions()["after-the-outage"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connections_terminated_during_a_run_never_execute_a_key_twice() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    let store = schema.store_url();
    assert_eq!(idem(&["migrate", "--store", &store]).code, Some(0));
    let channel = schema.channel().await;
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &store, "--lease", LEASE]);

    let tally = Arc::new(Tally::default());
    let done = Arc::new(AtomicBool::new(false));
    let terminator = tokio::spawn({
        let done = Arc::clone(&done);
        async move {
            let mut rounds = 0;
            let mut terminated = 0;
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(150)).await;
                terminated += schema.terminate_connections(&channel).await;
                rounds += 1;
            }
            (schema, rounds, terminated)
        }
    });
    run_all_keys(&gateway, "pg-outage", Arc::clone(&tally)).await;
    done.store(true, Ordering::Relaxed);
    let (schema, rounds, terminated) = terminator.await.unwrap();

    assert_each_key_executed_once(&upstream, "pg-outage");
    let unavailable = tally.unavailable.load(Ordering::Relaxed);
    assert!(unavailable > 0, "no request met a terminated connection");
    eprintln!(
        "{rounds} rounds terminated {terminated} connections; clients got {unavailable} 503s and \
         {} 409s",
        tally.conflicts.load(Ordering::Relaxed)
    );
    works_again(&gateway, &upstream).await;
    gateway.stop().await;
    drop(schema);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_connections_killed_during_a_run_never_execute_a_key_twice() {
    let Some(database) = MysqlDb::new().await else {
        return;
    };
    let store = database.store_url();
    assert_eq!(idem(&["migrate", "--store", &store]).code, Some(0));
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &store, "--lease", LEASE]);

    let tally = Arc::new(Tally::default());
    let done = Arc::new(AtomicBool::new(false));
    let killer = tokio::spawn({
        let done = Arc::clone(&done);
        async move {
            let mut rounds = 0;
            let mut killed = 0;
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(150)).await;
                killed += database.kill_connections().await;
                rounds += 1;
            }
            (database, rounds, killed)
        }
    });
    run_all_keys(&gateway, "mysql-outage", Arc::clone(&tally)).await;
    done.store(true, Ordering::Relaxed);
    let (database, rounds, killed) = killer.await.unwrap();

    assert_each_key_executed_once(&upstream, "mysql-outage");
    let unavailable = tally.unavailable.load(Ordering::Relaxed);
    assert!(unavailable > 0, "no request met a killed connection");
    eprintln!(
        "{rounds} rounds killed {killed} connections; clients got {unavailable} 503s and {} 409s",
        tally.conflicts.load(Ordering::Relaxed)
    );
    works_again(&gateway, &upstream).await;
    gateway.stop().await;
    drop(database);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_during_a_run_never_executes_a_key_twice() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut server) = RedisServer::durable(dir.path()) else {
        return;
    };
    let prefix = RedisPrefix::on(&server.url());
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", &prefix.store_url(), "--lease", LEASE],
    );
    let tally = Arc::new(Tally::default());

    let run = run_all_keys(&gateway, "redis-outage", Arc::clone(&tally));
    let outages = async {
        let probe = Client::new();
        for outage in 0..2 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            server.kill();
            // Requests that had their key before the kill are forwarded at once (and wait, while
            // the engine keeps trying to record their results); after that, nothing reaches the
            // upstream until Redis is back.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before = upstream.hits("orders");
            // A new request meanwhile is refused, not forwarded. (The run's own clients may all
            // be waiting on requests that were forwarded before the kill.)
            let refused = probe
                .post(&gateway.url("/orders"), &format!("probe-{outage}"), "{}")
                .await;
            assert_eq!(refused.status, 503, "{refused:?}");
            assert_eq!(refused.header("retry-after"), "1");
            assert_eq!(refused.json()["type"], "urn:idem:problem:store-unavailable");
            tokio::time::sleep(Duration::from_millis(1000)).await;
            assert_eq!(
                upstream.hits("orders"),
                before,
                "forwarded while Redis was down"
            );
            server.restart();
        }
    };
    tokio::join!(run, outages);

    assert_each_key_executed_once(&upstream, "redis-outage");
    eprintln!(
        "clients got {} 503s and {} 409s",
        tally.unavailable.load(Ordering::Relaxed),
        tally.conflicts.load(Ordering::Relaxed)
    );
    works_again(&gateway, &upstream).await;
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_started_while_its_store_is_down_serves_once_the_store_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut server) = RedisServer::durable(dir.path()) else {
        return;
    };
    server.kill();
    let upstream = Upstream::start().await;
    // The store refuses connections: the gateway starts anyway, not ready.
    let gateway = Gateway::start(&upstream.url(), &["--store", &server.url()]);
    let client = Client::new();
    let ready = || async {
        let request = Request::get(gateway.admin_url("/readyz"))
            .body(Body::empty())
            .unwrap();
        client.send(request).await.status
    };
    assert_eq!(ready().await, 503);
    let refused = client
        .post(&gateway.url("/orders"), "before-the-store", "{}")
        .await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["type"], "urn:idem:problem:store-unavailable");
    assert_eq!(upstream.hits("orders"), 0);

    // Once the store is up, the gateway reaches it by itself (it tries at least every 5 s).
    server.restart();
    let mut waited = 0;
    while ready().await != 200 {
        assert!(waited < 100, "not ready 10 s after the store came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
    works_again(&gateway, &upstream).await;
}
