//! New keys per second (acquire then complete) at 1, 8, 32 and 128 concurrent tasks, through
//! `RedisStore` (which batches the operations of concurrent calls into one script call) and
//! through the baseline that sends the same script with `EVALSHA`, one operation per call, in a
//! tight loop: keys/s, `EVALSHA` calls per key and the CPU that redis-server and this
//! process spend per key, all in one run on a `redis-server` of the bench's own (on a free
//! port, no persistence), whose `INFO commandstats` and `INFO cpu` count only this bench.
//!
//! ```sh
//! cargo bench -p idem-redis --bench batching              # 3 s per case, one round
//! IDEM_BENCH_SECONDS=5 IDEM_BENCH_ROUNDS=5 cargo bench -p idem-redis --bench batching
//! IDEM_BENCH_BATCH_SIZE=16 cargo bench -p idem-redis --bench batching   # default 64
//! ```
//!
//! Each round measures the two sides at each concurrency next to each other, in the reverse
//! order in every other round; the table shows each figure's median over the rounds, and the
//! range of the rounds' ratios.
//!
//! Skipped unless `IDEM_TEST_REDIS_URL` is set (it says Redis is installed); under `cargo test`
//! each case runs for a moment, as a smoke test.

#![allow(clippy::unwrap_used)] // bench code: a failed unwrap is a failed run

use std::{
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use idem_redis::{RedisOptions, RedisStore};
use idem_test_support::{Server, free_port};

mod support;

use support::{baseline::Baseline, new_key};

const CONCURRENCY: [usize; 4] = [1, 8, 32, 128];
/// A `redis-server` on a free port, killed with this process (`setpriv --pdeathsig KILL`).
struct RedisServer {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "redis-server"])
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let url = format!("redis://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while redis::Client::open(url.as_str())
            .and_then(|client| client.get_connection())
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_err()
        {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            url,
            _dir: dir,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the server counted: `EVALSHA` calls and its CPU time.
#[derive(Clone, Copy)]
struct ServerStats {
    evalsha: u64,
    cpu: Duration,
}

fn server_stats(redis: &mut redis::Connection) -> ServerStats {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .query(redis)
        .unwrap();
    let mut stats = ServerStats {
        evalsha: 0,
        cpu: Duration::ZERO,
    };
    for line in info.lines() {
        if let Some(fields) = line.strip_prefix("cmdstat_evalsha:") {
            let calls = fields.strip_prefix("calls=").unwrap().split(',').next();
            stats.evalsha = calls.unwrap().parse().unwrap();
        }
        if let Some(seconds) = line
            .strip_prefix("used_cpu_user:")
            .or_else(|| line.strip_prefix("used_cpu_sys:"))
        {
            stats.cpu += Duration::from_secs_f64(seconds.trim().parse().unwrap());
        }
    }
    stats
}

/// The CPU time this process has used (`/proc/self/stat`, in clock ticks of 10 ms).
fn own_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Runs `tasks` tasks, each calling `op` for a new key until `time` has passed, and returns
/// the keys done.
async fn run<F, Fut>(tasks: usize, time: Duration, op: F) -> u64
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (op, stop, done) = (op.clone(), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    op().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed)
}

fn main() {
    if Server::Redis.url().is_none() {
        return;
    }
    let measuring = std::env::args().any(|arg| arg == "--bench");
    let time = if measuring {
        let seconds = std::env::var("IDEM_BENCH_SECONDS").map_or(3.0, |s| s.parse().unwrap());
        Duration::from_secs_f64(seconds)
    } else {
        Duration::from_millis(100)
    };
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let batch_size: usize =
        std::env::var("IDEM_BENCH_BATCH_SIZE").map_or(64, |s| s.parse().unwrap());
    let store = runtime.block_on(async {
        let options = RedisOptions::new(server.url.as_str())
            .prefix("bench".parse().unwrap())
            .batch_size(batch_size);
        RedisStore::open_with(options).await.unwrap()
    });
    let baseline = Arc::new(runtime.block_on(Baseline::connect(&server.url, "baseline")));
    let mut redis = redis::Client::open(server.url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();

    let rounds: usize = std::env::var("IDEM_BENCH_ROUNDS").map_or(1, |s| s.parse().unwrap());
    println!(
        "new keys (acquire + complete), {} s per case, {rounds} round(s), the median shown \
         (ratios: median and range), redis-server {} with no persistence, RedisStore batches of \
         up to {batch_size}",
        time.as_secs_f64(),
        redis_version(&mut redis)
    );
    println!(
        "| tasks | EVALSHA baseline keys/s | RedisStore keys/s | ratio | EVALSHA per key \
         (baseline, store) | redis-server CPU µs per key (baseline, store) | bench CPU µs per \
         key (baseline, store) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for tasks in CONCURRENCY {
        let (mut baselines, mut stores, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // Each side first in every other round, so that a slow moment hits both alike.
            let mut cases = ["baseline", "store"];
            if round % 2 == 1 {
                cases.reverse();
            }
            for case in cases {
                let op = {
                    let (store, baseline) = (store.clone(), Arc::clone(&baseline));
                    move || {
                        let (store, baseline) = (store.clone(), Arc::clone(&baseline));
                        async move {
                            match case {
                                "baseline" => baseline.new_key().await,
                                _ => drop(new_key(&store).await),
                            }
                        }
                    }
                };
                runtime.block_on(run(tasks, time / 5, op.clone())); // warm-up
                let (before, cpu, start) = (server_stats(&mut redis), own_cpu(), Instant::now());
                let keys = runtime.block_on(run(tasks, time, op));
                let elapsed = start.elapsed();
                let (after, cpu) = (server_stats(&mut redis), own_cpu() - cpu);
                let per_key = |d: Duration| d.as_secs_f64() * 1e6 / keys as f64;
                let measured = Measured {
                    keys_per_second: keys as f64 / elapsed.as_secs_f64(),
                    evalsha_per_key: (after.evalsha - before.evalsha) as f64 / keys as f64,
                    server_cpu: per_key(after.cpu - before.cpu),
                    own_cpu: per_key(cpu),
                };
                match case {
                    "baseline" => baselines.push(measured),
                    _ => stores.push(measured),
                }
            }
            let (b, s) = (&baselines[round], &stores[round]);
            ratios.push(s.keys_per_second / b.keys_per_second);
        }
        let median = |of: &[Measured], field: fn(&Measured) -> f64| {
            median_of(of.iter().map(field).collect())
        };
        let (b, s) = (&baselines[..], &stores[..]);
        let range = |mut all: Vec<f64>| {
            all.sort_by(f64::total_cmp);
            (all[0], all[all.len() - 1])
        };
        let (low, high) = range(ratios.clone());
        println!(
            "| {tasks} | {:.0} | {:.0} | **{:.2}×** ({low:.2}–{high:.2}) | {:.2}, {:.2} | \
             {:.1}, {:.1} | {:.1}, {:.1} |",
            median(b, |m| m.keys_per_second),
            median(s, |m| m.keys_per_second),
            median_of(ratios),
            median(b, |m| m.evalsha_per_key),
            median(s, |m| m.evalsha_per_key),
            median(b, |m| m.server_cpu),
            median(s, |m| m.server_cpu),
            median(b, |m| m.own_cpu),
            median(s, |m| m.own_cpu),
        );
    }
}

/// One case's figures in one round.
struct Measured {
    keys_per_second: f64,
    evalsha_per_key: f64,
    /// redis-server's CPU time per key, in µs.
    server_cpu: f64,
    /// This process's CPU time per key, in µs.
    own_cpu: f64,
}

fn median_of(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

fn redis_version(redis: &mut redis::Connection) -> String {
    let info: String = redis::cmd("INFO").arg("server").query(redis).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}
