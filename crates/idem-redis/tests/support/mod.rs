//! What the server tests share: the test server's URL and a fresh key prefix per test (both
//! `idem_test_support`'s), and `redis-server` processes of their own.
//!
//! No server outlives the test process. Each is started through `setpriv --pdeathsig KILL`, so
//! the kernel kills it when the thread that started it ends, whatever way the process ends
//! (even `SIGKILL`). A test's own server is also killed when its [`Server`] is dropped; the
//! servers of the shared cluster are started from a thread that never ends, so they live until
//! the test process does.

#![allow(dead_code, unreachable_pub)] // each test binary uses a part of it

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use futures_util::{FutureExt as _, future::BoxFuture};
use idem_conformance::{
    Subject,
    checks::{TERMS, address, fingerprint},
};
use idem_core::{Acquisition, Address, ManualClock, Record, RecordState, Store};
use idem_redis::{KeyPrefix, RedisOptions, RedisStore};
use idem_test_support::unique_name;

/// The test server's URL, once `idem_test_support::Server::Redis.url()` said it is there.
pub fn redis_url() -> String {
    idem_test_support::Server::Redis
        .configured()
        .expect("checked by Server::Redis.url()")
}

/// A prefix no other test uses, so that tests run in parallel on one server.
pub fn fresh_prefix() -> KeyPrefix {
    unique_name("idem-test:").parse().expect("valid prefix")
}

/// The store contract's subject: a store on a manual clock, which lists records in `SCAN`'s
/// order across pages.
pub struct RedisSubject {
    pub store: RedisStore,
    pub clock: ManualClock,
}

impl RedisSubject {
    /// A subject on a fresh prefix of the store `options` open, on a new manual clock.
    pub async fn open(options: RedisOptions) -> Self {
        let clock = ManualClock::default();
        let options = options.prefix(fresh_prefix()).manual_clock(clock.clone());
        let store = RedisStore::open_with(options)
            .await
            .expect("open the store");
        Self { store, clock }
    }
}

impl Subject for RedisSubject {
    type Store = RedisStore;

    fn store(&self) -> RedisStore {
        self.store.clone()
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn lists_in_global_order(&self) -> bool {
        false
    }
}

/// A plain (synchronous) connection for looking at what the store wrote.
pub fn inspect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .expect("connect to Redis")
}

/// A port that was free a moment ago, with its cluster bus port (+10,000) free too.
pub fn free_port() -> u16 {
    loop {
        let port = idem_test_support::free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A `redis-server` of a test's own, killed when dropped.
pub struct Server {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
}

impl Server {
    /// Starts `redis-server` on `port` with its files in `dir` and `args` (`--appendonly yes`),
    /// no RDB snapshots, and waits until it answers.
    pub fn start(dir: &Path, port: u16, args: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port,
            dir: dir.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        server.restart();
        server
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server as a crash would (`SIGKILL`: no shutdown save).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and files (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        let log = self.dir.join(format!("redis-{}.log", self.port));
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--", "redis-server"])
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(["--save", "", "--daemonize", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command
            .spawn()
            .expect("start redis-server (setpriv from util-linux and redis-server installed)");
        self.child = Some(child);
        wait_until_ready(&self.url());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until the server at `url` answers `PING` (it refuses connections while starting and
/// answers `LOADING` while it reads its append-only file).
pub fn wait_until_ready(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pong = redis::Client::open(url)
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
        match pong {
            Ok(_) => return,
            Err(error) if Instant::now() > deadline => panic!("{url} did not start: {error}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The calls a store sends, counted from `INFO commandstats`: script calls, script loads and
/// pings. (The statistics also count the commands that scripts run inside Redis, which are not
/// round trips.)
pub fn round_trips(redis: &mut redis::Connection) -> u64 {
    calls(redis, &["evalsha", "eval", "script|load", "ping"])
}

/// How many times the server has run the `commands` (lower case, as `INFO commandstats` names
/// them), those that scripts run included.
pub fn calls(redis: &mut redis::Connection, commands: &[&str]) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(redis).unwrap();
    stats
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            commands.contains(&name).then_some(fields)
        })
        .filter_map(|fields| {
            fields
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// As the engine waits on `store`: interest in `address` first, then an acquire that finds it in
/// flight (which marks the record watched: only then is its change announced). The interest's
/// future.
pub async fn watch(store: &RedisStore, address: &Address) -> BoxFuture<'static, ()> {
    let changed = store.changed(address).boxed();
    let found = store
        .acquire(address, &fingerprint(1), TERMS)
        .await
        .unwrap();
    assert!(matches!(found, Acquisition::InFlight { .. }), "{found:?}");
    changed
}

/// Runs `calls` to the end, polling them in turn each time, so that the first poll of each
/// comes in the vector's order: that is the order they enter the store's queue. (`join_all`
/// does not promise it: past a number of futures it may yield between them.)
pub async fn in_order<T>(mut calls: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut replies: Vec<Option<T>> = calls.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (call, reply) in calls.iter_mut().zip(&mut replies) {
            if reply.is_none()
                && let std::task::Poll::Ready(done) = call.as_mut().poll(cx)
            {
                *reply = Some(done);
            }
        }
        if replies.iter().all(Option::is_some) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    replies.into_iter().flatten().collect()
}

/// What one of [`operations_on_one_key_keep_their_order`]'s operations answered.
#[derive(Debug)]
enum Reply {
    Acquired(Acquisition),
    Forgot(bool),
    Found(Option<Record>),
}

/// Queues five operations on each of `addresses` new addresses (`{name}-N`), all at once in a
/// known order ([`in_order`]), on a store with a manual clock that does not move meanwhile:
/// acquire, acquire again, forget, acquire, get. Checks that every address saw them in that
/// order, however they were cut into batches: the second acquire finds the first in flight, the
/// forget removes it, the third acquire gets a larger token, and the get finds that lease.
pub async fn operations_on_one_key_keep_their_order(
    store: &RedisStore,
    name: &str,
    addresses: usize,
) {
    let at: Vec<Address> = (0..addresses)
        .map(|n| address(&format!("{name}-{n}")))
        .collect();
    let fp = fingerprint(1);
    let mut calls: Vec<BoxFuture<'_, Reply>> = Vec::new();
    for at in &at {
        let acquire = || {
            store
                .acquire(at, &fp, TERMS)
                .map(|r| Reply::Acquired(r.unwrap()))
        };
        calls.push(acquire().boxed());
        calls.push(acquire().boxed());
        calls.push(store.forget(at).map(|r| Reply::Forgot(r.unwrap())).boxed());
        calls.push(acquire().boxed());
        calls.push(store.get(at).map(|r| Reply::Found(r.unwrap())).boxed());
    }
    let replies = in_order(calls).await;
    for (n, replies) in replies.chunks(5).enumerate() {
        let [
            Reply::Acquired(Acquisition::Acquired(first)),
            Reply::Acquired(Acquisition::InFlight { retry_after }),
            Reply::Forgot(true),
            Reply::Acquired(Acquisition::Acquired(again)),
            Reply::Found(Some(record)),
        ] = replies
        else {
            panic!("address {n} saw its operations out of order: {replies:?}");
        };
        assert_eq!(*retry_after, TERMS.lease, "address {n}");
        assert!(!first.took_over && !again.took_over, "address {n}");
        // On a manual clock the time is the same for both: the fence's token, plus one.
        assert_eq!(again.token.get(), first.token.get() + 1, "address {n}");
        assert_eq!(
            record.state,
            RecordState::Processing {
                token: again.token,
                lease_until: again.until,
            },
            "address {n}"
        );
    }
}
