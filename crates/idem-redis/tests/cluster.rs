//! The store on a Redis Cluster of three masters that this test binary starts on loopback ports
//! (`redis-server --cluster-enabled yes` ×3, `redis-cli --cluster create`), shared by its tests,
//! each under its own key prefix: the whole contract on a manual clock, records spread over the
//! shards, contended acquires from two instances, wake-ups over sharded pub/sub, queues per
//! slot (order kept, a stalled master holding up its own slots only).
//!
//! The servers are started from a thread that never ends, through `setpriv --pdeathsig KILL`:
//! the kernel kills them when the test process ends, however it ends (see `support`).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod support;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use idem_conformance::checks::{TERMS, TTL, acquired, address, fingerprint, response};
use idem_core::{
    Acquisition, Census, Clock, ListCursor, ListQuery, Listed, ManualClock, Pace, StateFilter,
    Store,
};
use idem_redis::{KeyPrefix, RedisOptions, RedisStore};

use support::{
    RedisSubject, Server, free_port, fresh_prefix, inspect, operations_on_one_key_keep_their_order,
    watch,
};

/// The seed URLs of the cluster, started on first use.
fn cluster() -> &'static [String] {
    static NODES: OnceLock<Vec<String>> = OnceLock::new();
    NODES.get_or_init(|| {
        let (ready, started) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("redis-cluster".into())
            .spawn(move || {
                let dir = cluster_dir();
                let servers: Vec<Server> = (0..3)
                    .map(|_| {
                        let port = free_port();
                        let config = format!("nodes-{port}.conf");
                        let args = ["--cluster-enabled", "yes", "--cluster-config-file", &config];
                        Server::start(&dir, port, &[&args[..], &["--appendonly", "no"]].concat())
                    })
                    .collect();
                create_cluster(&servers);
                ready
                    .send(servers.iter().map(Server::url).collect())
                    .expect("the test waits");
                // Keep the servers (and their directory) until the process ends.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the cluster thread");
        started.recv().expect("the cluster started")
    })
}

/// The directory of this process's cluster (`nodes-PORT.conf`, logs), in Cargo's temporary
/// directory. It outlives the process with its servers' files, so the directories of processes
/// that have ended are removed first.
fn cluster_dir() -> PathBuf {
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mine = format!("redis-cluster-{}", std::process::id());
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix("redis-cluster-"));
        if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = parent.join(mine);
    std::fs::create_dir_all(&dir).expect("cluster dir");
    dir
}

fn create_cluster(servers: &[Server]) {
    let status = std::process::Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(servers.iter().map(|s| format!("127.0.0.1:{}", s.port())))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run redis-cli");
    assert!(status.success(), "redis-cli --cluster create failed");
    let deadline = Instant::now() + Duration::from_secs(30);
    for server in servers {
        loop {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut inspect(&server.url()))
                .expect("CLUSTER INFO");
            if info.contains("cluster_state:ok") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

async fn open(prefix: &KeyPrefix) -> RedisStore {
    let options = RedisOptions::cluster(cluster()).prefix(prefix.clone());
    RedisStore::open_with(options)
        .await
        .expect("open the store")
}

async fn subject() -> RedisSubject {
    RedisSubject::open(RedisOptions::cluster(cluster())).await
}

idem_conformance::conformance_tests!(subject(), if idem_test_support::Server::Redis.url().is_some());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_spread_over_the_masters() {
    const ADDRESSES: usize = 64;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let store = open(&prefix).await;
    for n in 0..ADDRESSES {
        acquired(&store, &address(&format!("spread-{n}")), &fingerprint(1)).await;
    }
    let mut per_node = HashMap::new();
    for node in cluster() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{{prefix}:*}}"))
            .query(&mut inspect(node))
            .expect("KEYS");
        per_node.insert(node.clone(), keys.len());
    }
    assert_eq!(per_node.values().sum::<usize>(), ADDRESSES, "{per_node:?}");
    let holding = per_node.values().filter(|&&n| n > 0).count();
    assert!(holding >= 2, "records on {holding} node(s): {per_node:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_and_census_walk_every_master() {
    const ADDRESSES: usize = 64;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let subject = RedisSubject::open(RedisOptions::cluster(cluster())).await;
    let store = &subject.store;
    let mut expected = Vec::new();
    for n in 0..ADDRESSES {
        let at = address(&format!("listed-{n}"));
        let lease = acquired(store, &at, &fingerprint(1)).await;
        if n % 2 == 0 {
            store
                .complete(&at, lease.token, &response(1).into(), TTL)
                .await
                .unwrap();
        }
        expected.push((at.scope, at.key.sha256()));
    }
    expected.sort_unstable();

    let mut query = ListQuery::new(5);
    let (mut listed, mut shards) = (Vec::<Listed>::new(), Vec::new());
    loop {
        let page = store.list(&query).await.unwrap();
        assert!(page.records.len() <= 5);
        listed.extend(page.records);
        match page.next {
            Some(next @ ListCursor::Scan { shard, .. }) => {
                shards.push(shard);
                query.cursor = Some(next);
            }
            Some(other) => panic!("a Redis cursor is a SCAN cursor: {other:?}"),
            None => break,
        }
    }
    let mut found: Vec<_> = listed.iter().map(|l| (l.scope, l.key_sha256)).collect();
    found.sort_unstable();
    assert_eq!(found, expected, "every record once");
    assert!(shards.iter().any(|&shard| shard > 0), "{shards:?}");

    let processing = store
        .list(&ListQuery::new(100).state(StateFilter::Processing))
        .await
        .unwrap();
    assert_eq!(processing.records.len(), ADDRESSES / 2);
    assert_eq!(
        store.census(Pace::UNPACED).await.unwrap(),
        Census {
            processing: ADDRESSES as u64 / 2,
            completed: ADDRESSES as u64 / 2,
            oldest_processing: Some(subject.clock.now()),
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquires_from_two_instances_elect_one_holder_per_address() {
    const ADDRESSES: usize = 100;
    const CALLERS: usize = 64;
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let stores = [open(&prefix).await, open(&prefix).await];
    let acquired = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut holders: Vec<_> = (0..ADDRESSES)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    let tasks: Vec<_> = (0..ADDRESSES * CALLERS)
        .map(|n| {
            let store = stores[n % 2].clone();
            let at = address(&format!("race-{}", n % ADDRESSES));
            let holder = Arc::clone(&holders[n % ADDRESSES]);
            let (acquired, in_flight) = (Arc::clone(&acquired), Arc::clone(&in_flight));
            tokio::spawn(async move {
                match store.acquire(&at, &fingerprint(1), TERMS).await.unwrap() {
                    Acquisition::Acquired(_) => {
                        holder.fetch_add(1, Ordering::SeqCst);
                        acquired.fetch_add(1, Ordering::SeqCst)
                    }
                    Acquisition::InFlight { .. } => in_flight.fetch_add(1, Ordering::SeqCst),
                    other => panic!("unexpected {other:?}"),
                };
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    for (n, holder) in holders.drain(..).enumerate() {
        assert_eq!(holder.load(Ordering::SeqCst), 1, "address {n}");
    }
    assert_eq!(acquired.load(Ordering::SeqCst), ADDRESSES);
    assert_eq!(in_flight.load(Ordering::SeqCst), ADDRESSES * (CALLERS - 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changed_wakes_a_waiter_on_another_instance_over_sharded_pub_sub() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let (a, b) = (open(&prefix).await, open(&prefix).await);
    for n in 0..6 {
        let at = address(&format!("wake-{n}"));
        tokio::time::timeout(Duration::from_secs(5), b.changed(&at))
            .await
            .expect("woken once Redis confirms the subscription");
        let lease = acquired(&a, &at, &fingerprint(1)).await;
        let mut waiting = watch(&b, &at).await;
        let early = tokio::time::timeout(Duration::from_millis(200), waiting.as_mut()).await;
        assert!(early.is_err(), "woken before anything changed");
        a.complete(&at, lease.token, &response(1).into(), TTL)
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the completion on the other instance");
        assert_eq!(
            b.acquire(&at, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(response(1).into())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_wakes_a_waiter_on_another_instance_over_sharded_pub_sub() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let (a, b) = (open(&prefix).await, open(&prefix).await);
    for n in 0..6 {
        let at = address(&format!("append-{n}"));
        tokio::time::timeout(Duration::from_secs(5), b.changed(&at))
            .await
            .expect("woken once Redis confirms the subscription");
        let lease = acquired(&a, &at, &fingerprint(1)).await;
        let mut waiting = watch(&b, &at).await;
        let early = tokio::time::timeout(Duration::from_millis(200), waiting.as_mut()).await;
        assert!(early.is_err(), "woken before anything changed");
        let part = bytes::Bytes::from(format!("part of {n}"));
        a.append_part(&at, lease.token, 0, &part).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the append on the other instance");
        let read = b.read_parts(&at, lease.token, 0, usize::MAX).await.unwrap();
        assert_eq!(read, [part]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operations_on_one_key_keep_their_order_in_the_queues_per_slot() {
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    for batch_size in [1, 3, 64] {
        let options = RedisOptions::cluster(cluster())
            .prefix(fresh_prefix())
            .manual_clock(ManualClock::default())
            .batch_size(batch_size);
        let store = RedisStore::open_with(options)
            .await
            .expect("open the store");
        operations_on_one_key_keep_their_order(&store, "ordered", 40).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_master_holds_up_its_own_slots_only() {
    const ADDRESSES: usize = 32;
    const PAUSE: Duration = Duration::from_millis(1500);
    if idem_test_support::Server::Redis.url().is_none() {
        return;
    }
    let prefix = fresh_prefix();
    let store = open(&prefix).await;
    let stalled = &cluster()[0];
    let keys_on_stalled = || -> usize {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{{prefix}:*}}"))
            .query(&mut inspect(stalled))
            .expect("KEYS");
        keys.len()
    };
    // An address on the stalled master: the one whose record appears there.
    let mut probe = 0;
    let (held, lease) = loop {
        let held = address(&format!("probe-{probe}"));
        let before = keys_on_stalled();
        let lease = acquired(&store, &held, &fingerprint(1)).await;
        if keys_on_stalled() > before {
            break (held, lease);
        }
        probe += 1;
    };
    let before = keys_on_stalled();
    // The master runs no write, scripts included, until the pause ends; reads still answer.
    let paused_at = Instant::now();
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(PAUSE.as_millis().to_string())
        .arg("WRITE")
        .query(&mut inspect(stalled))
        .expect("CLIENT PAUSE");
    // A completion on its way to the stalled master, which answers it after the pause.
    let completing = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .complete(&held, lease.token, &response(1).into(), TTL)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let acquires: Vec<_> = (0..ADDRESSES)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                acquired(&store, &address(&format!("stall-{n}")), &fingerprint(1)).await;
                Instant::now()
            })
        })
        .collect();
    let mut before_the_pause_ended = 0;
    for acquire in acquires {
        let done = acquire.await.expect("the acquire ran");
        before_the_pause_ended += usize::from(done < paused_at + PAUSE);
    }
    completing.await.expect("the completion ran").unwrap();
    let on_the_stalled_master = keys_on_stalled() - before;
    assert!(
        on_the_stalled_master > 0,
        "no address of {ADDRESSES} on {stalled}"
    );
    // Each acquire on another master was answered while the stalled one held the completion
    // and its own acquires.
    assert_eq!(before_the_pause_ended, ADDRESSES - on_the_stalled_master);
}
