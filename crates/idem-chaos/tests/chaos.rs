//! The short form of the chaos runs, as CI runs them: `idem-chaos run` for each store and each
//! `--ambiguous` mode, and for each store once more with `--in-flight wait`, 8 seconds of every
//! fault each (pauses and partitions included), checked on the JSON report.
//!
//! The runs take turns (each starts two gateways, a store and 16 callers on a 2-core machine).
//! PostgreSQL and Redis runs start servers of their own, but run only when the suites of those
//! stores are enabled (`IDEM_TEST_POSTGRES_URL`, `IDEM_TEST_REDIS_URL`), as the other server
//! suites of the repository do; so does one Redis Cluster run, in reject mode, with failovers
//! for store restarts. MySQL runs start a MariaDB server of their own, and run wherever one is
//! installed: without it they say they are skipped, and fail when `CI` is set (`scripts/test`
//! installs it). `scripts/chaos` runs the long form.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    collections::BTreeSet,
    fs::File,
    process::Command,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use idem_chaos::{Ambiguous, Failure, GatewayId, InFlight, Report, StoreKind, store::MysqlServer};
use idem_test_support::{MysqlDatabase, Server};

/// How long a short run may take in all, faults, waits and checks included: far above the
/// minute one takes, so that only a hang reaches it, and fails the test instead of stalling CI.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// One run at a time.
static RUNS: Mutex<()> = Mutex::new(());

/// The seed of every run, so that a failure can be replayed.
const SEED: &str = "20261130";

/// The short form: 8 seconds of every fault, at means short enough for at least one of each.
/// (The last pause or partition may end up to 3 leases after the 8 seconds.)
const SHORT: &[&str] = &[
    "--duration",
    "8s",
    "--kill-every",
    "2s",
    "--pause-every",
    "3s",
    "--store-restart-every",
    "3s",
    "--slow-every",
    "4s",
    "--errors-every",
    "4s",
    "--window",
    "1s",
    "--partition-every",
    "2s",
    "--clock-step-every",
    "2s",
];

/// The short form for `store`, `--ambiguous mode`, `--in-flight in_flight`.
fn chaos(store: &str, mode: &str, in_flight: InFlight, more: &[&str]) -> (Option<i32>, Report) {
    let in_flight = in_flight.to_string();
    let args = ["--in-flight", &in_flight, "--sample-every", "2s"];
    run(store, mode, &[SHORT, &args, more].concat())
}

/// Runs `idem-chaos run --store STORE --ambiguous MODE ARGS…` with 16 callers to its end, and
/// returns its exit code and report.
fn run(store: &str, mode: &str, args: &[&str]) -> (Option<i32>, Report) {
    let _turn = RUNS.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    // Files rather than pipes: nobody reads a pipe while the run goes on.
    let (stdout, stderr) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem-chaos"))
        .args(["run", "--store", store, "--ambiguous", mode, "--seed", SEED])
        .args(["--callers", "16"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let read = |path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let deadline = Instant::now() + RUN_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "idem-chaos run did not end within {RUN_LIMIT:?}:\n{}",
                read(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (read(&stdout), read(&stderr));
    // Shown when the test fails.
    println!("{stderr}\n{stdout}");
    let report = std::fs::read(&json).unwrap_or_else(|_| panic!("no report: {stderr}"));
    (status.code(), serde_json::from_slice(&report).unwrap())
}

/// The expectations of both modes, and that every kind of fault happened.
fn assert_sound(code: Option<i32>, report: &Report) {
    let f = &report.verdict.figures;
    assert_eq!(report.verdict.failures, []);
    assert_eq!(code, Some(0));
    assert_eq!(f.stale_writes_applied, 0);
    assert_eq!(f.lost, 0);
    assert_eq!(f.stuck, 0);
    assert_eq!(f.forgotten, 0);
    assert_eq!(f.wrong_answers, 0);
    assert_eq!(f.unexpected_answers, 0);
    // Every operation got an answer, and every 2xx answer names one of its executions.
    assert_eq!(f.succeeded + f.refused + f.outcome_unknown, f.operations);
    assert!(f.executions >= f.succeeded, "{f:?}");
    assert!(f.attempts > f.operations, "{f:?}");

    let faults = &report.verdict.faults;
    assert!(faults.gateway_kills > 0, "{faults:?}");
    assert!(faults.gateway_pauses > 0, "{faults:?}");
    if report.store == StoreKind::RedisCluster {
        assert!(faults.failovers > 0, "{faults:?}");
        assert_eq!(faults.store_restarts, 0);
    } else {
        assert!(faults.store_restarts > 0, "{faults:?}");
        assert_eq!(faults.failovers, 0);
    }
    assert!(faults.dropped_answers > 0, "{faults:?}");
    assert!(faults.slow_windows > 0, "{faults:?}");
    assert!(faults.error_windows > 0, "{faults:?}");
    assert!(faults.partitions > 0, "{faults:?}");
    // Only SQLite reads the gateways' clocks: the other stores' runs step none.
    if report.store == StoreKind::Sqlite {
        assert!(faults.clock_steps > 0, "{faults:?}");
    } else {
        assert_eq!(faults.clock_steps, 0, "{faults:?}");
    }
    assert_eq!(report.gateways, 2);
    // Sampled from the start, every 2 s, until the faults stop.
    let samples = &report.resources.samples;
    assert!(samples.len() >= 4, "{samples:?}");
    assert!(samples.iter().all(|s| s.store_bytes > 0), "{samples:?}");
    assert!(
        samples
            .iter()
            .flat_map(|s| &s.gateways)
            .all(|p| p.rss_bytes > 0 && p.fds > 0),
        "{samples:?}"
    );
    assert_eq!(report.resources.watched, None);
}

/// `--ambiguous reject`: nothing executes twice; each execution a kill, a pause or a partition
/// cut off became an "outcome unknown".
fn reject_never_executes_twice(store: &str, in_flight: InFlight, more: &[&str]) {
    let (code, report) = chaos(store, "reject", in_flight, more);
    assert_eq!(report.ambiguous, Ambiguous::Reject);
    assert_eq!(report.in_flight, in_flight);
    assert_sound(code, &report);
    let f = &report.verdict.figures;
    assert_eq!(f.duplicates, 0);
    assert_eq!(f.explained_duplicates, 0);
    assert_eq!(f.lost_to_failover, 0);
    assert!(
        f.interrupted + f.interrupted_by_pause + f.interrupted_by_partition <= f.outcome_unknown,
        "{f:?}"
    );
}

/// `--ambiguous retry`: an operation executes again only after a kill, a pause or a partition
/// cut its execution off, one extra execution for each.
fn retry_executes_again_only_after_a_kill_pause_or_partition(
    store: &str,
    in_flight: InFlight,
    more: &[&str],
) {
    let (code, report) = chaos(store, "retry", in_flight, more);
    assert_eq!(report.ambiguous, Ambiguous::Retry);
    assert_eq!(report.in_flight, in_flight);
    assert_sound(code, &report);
    let f = &report.verdict.figures;
    assert_eq!(f.duplicates, f.explained_duplicates);
    assert!(
        f.interrupted
            + f.interrupted_by_pause
            + f.interrupted_by_partition
            + f.interrupted_by_clock_step
            >= f.duplicates,
        "{f:?}"
    );
    assert_eq!(f.outcome_unknown, 0);
    assert_eq!(f.refused, 0);
}

/// A soak spares its watched gateway from kills and SQLite's store restarts, and judges its
/// memory and descriptors over the last two thirds of the run.
#[test]
fn a_soak_watches_one_gateway_that_is_never_killed() {
    let (code, report) = run(
        "sqlite",
        "reject",
        &[SHORT, &["--soak", "--sample-every", "500ms"]].concat(),
    );
    assert_eq!(code, Some(0), "{:?}", report.verdict.failures);
    assert!(report.verdict.faults.gateway_kills > 0);
    let watched = report.resources.watched.expect("a soak's trend");
    assert_eq!(watched.gateway, GatewayId(0));
    assert_eq!(watched.from_ms, 8_000 / 3);
    // One process all along: gateway 0 was never killed.
    let pids: BTreeSet<u32> = report
        .resources
        .samples
        .iter()
        .flat_map(|s| &s.gateways)
        .filter(|p| p.gateway == GatewayId(0))
        .map(|p| p.pid)
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(watched.samples >= 8, "{watched:?}");
}

#[test]
fn sqlite_reject_never_executes_twice() {
    reject_never_executes_twice("sqlite", InFlight::Reject, &[]);
}

#[test]
fn sqlite_retry_executes_again_only_after_a_kill_pause_or_partition() {
    retry_executes_again_only_after_a_kill_pause_or_partition("sqlite", InFlight::Reject, &[]);
}

#[test]
fn sqlite_wait_mode_keeps_the_expectations() {
    retry_executes_again_only_after_a_kill_pause_or_partition("sqlite", InFlight::Wait, &[]);
}

/// The upstream answers in chunks over the execution's time: kills, pauses and partitions land
/// mid-stream, and both modes keep their expectations.
#[test]
fn sqlite_streamed_answers_keep_both_expectations() {
    reject_never_executes_twice("sqlite", InFlight::Reject, &["--streamed"]);
    retry_executes_again_only_after_a_kill_pause_or_partition(
        "sqlite",
        InFlight::Reject,
        &["--streamed"],
    );
}

#[test]
fn postgres_reject_never_executes_twice() {
    if Server::Postgres.url().is_some() {
        reject_never_executes_twice("postgres", InFlight::Reject, &[]);
    }
}

#[test]
fn postgres_retry_executes_again_only_after_a_kill_pause_or_partition() {
    if Server::Postgres.url().is_some() {
        retry_executes_again_only_after_a_kill_pause_or_partition(
            "postgres",
            InFlight::Reject,
            &[],
        );
    }
}

#[test]
fn postgres_wait_mode_keeps_the_expectations() {
    if Server::Postgres.url().is_some() {
        reject_never_executes_twice("postgres", InFlight::Wait, &[]);
    }
}

/// Whether MariaDB is installed for the MySQL runs; where it is not, the test says it is skipped,
/// or fails when `CI` is set: CI installs `mariadb-server`, and a run there skips nothing.
fn mariadb_installed() -> bool {
    if MysqlServer::installed() {
        return true;
    }
    let missing = "no MariaDB server: mariadbd (or mysqld) and mariadb-install-db (or \
                   mysql_install_db), on PATH or in /usr/sbin (install mariadb-server)";
    assert!(std::env::var_os("CI").is_none(), "{missing}");
    let test = std::thread::current();
    eprintln!("skipped: {missing} ({})", test.name().unwrap_or("?"));
    false
}

/// The run's MariaDB on its own: the store's database is there at the start, a database created
/// before a SIGKILL is there after the restart, and the server is gone once dropped.
#[test]
fn a_mariadb_server_keeps_its_data_across_a_sigkill() {
    if !mariadb_installed() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut server = MysqlServer::start(dir.path()).await.unwrap();
        let addr = server.addr();
        assert_ne!(addr.port(), 3306);
        assert_eq!(server.url(), format!("mysql://root@{addr}/idem"));
        // Connects to the store's database, and creates one of its own beside it.
        let database = MysqlDatabase::create(&server.url()).await;
        server.restart().await.unwrap();
        drop(database.connect().await);
        drop(database);
        drop(server);
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            assert!(Instant::now() < deadline, "MariaDB still listens on {addr}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn mysql_reject_never_executes_twice() {
    if mariadb_installed() {
        reject_never_executes_twice("mysql", InFlight::Reject, &[]);
    }
}

#[test]
fn mysql_retry_executes_again_only_after_a_kill_pause_or_partition() {
    if mariadb_installed() {
        retry_executes_again_only_after_a_kill_pause_or_partition("mysql", InFlight::Reject, &[]);
    }
}

#[test]
fn mysql_wait_mode_keeps_the_expectations() {
    if mariadb_installed() {
        reject_never_executes_twice("mysql", InFlight::Wait, &[]);
    }
}

#[test]
fn redis_reject_never_executes_twice() {
    if Server::Redis.url().is_some() {
        reject_never_executes_twice("redis", InFlight::Reject, &[]);
    }
}

#[test]
fn redis_retry_executes_again_only_after_a_kill_pause_or_partition() {
    if Server::Redis.url().is_some() {
        retry_executes_again_only_after_a_kill_pause_or_partition("redis", InFlight::Reject, &[]);
    }
}

#[test]
fn redis_wait_mode_keeps_the_expectations() {
    if Server::Redis.url().is_some() {
        retry_executes_again_only_after_a_kill_pause_or_partition("redis", InFlight::Wait, &[]);
    }
}

/// On a Redis Cluster (6 servers of the run's own), a store restart is a failover. In reject
/// mode an operation executes twice only when a failover lost its record (replication is
/// asynchronous), and every such operation is counted as lost to failover; everything else
/// holds as on one server. Needs `redis-server` and `redis-cli`: without them the run fails.
#[test]
fn redis_cluster_reject_executes_twice_only_after_a_failover_lost_the_record() {
    if Server::Redis.url().is_none() {
        return;
    }
    let (code, report) = chaos("redis-cluster", "reject", InFlight::Reject, &[]);
    assert_eq!(report.store, StoreKind::RedisCluster);
    assert_eq!(report.ambiguous, Ambiguous::Reject);
    assert_sound(code, &report);
    let f = &report.verdict.figures;
    // No duplicate but those a failover explains; each is an operation lost to failover, and
    // the others lost to it are the ones no retry executed again.
    assert_eq!(f.duplicates, f.explained_duplicates);
    assert_eq!(f.explained_duplicates, f.explained_by_failover);
    assert_eq!(
        f.lost_to_failover,
        f.explained_by_failover + f.lost_to_failover_at_end
    );
    assert!(
        f.interrupted + f.interrupted_by_pause <= f.outcome_unknown,
        "{f:?}"
    );
}

/// The harness catches a store that forgets: a Redis without persistence loses the completed
/// keys at each restart, and the run fails with exit code 1.
#[test]
fn a_redis_without_persistence_fails_the_run() {
    if Server::Redis.url().is_none() {
        return;
    }
    let (code, report) = run(
        "redis",
        "reject",
        &[
            "--duration",
            "4s",
            "--faults",
            "store-restarts,two-gateways",
            "--store-restart-every",
            "2s",
            "--redis-persistence",
            "none",
            "--keep",
            "never",
        ],
    );
    assert_eq!(report.store, StoreKind::Redis);
    assert_eq!(code, Some(1));
    assert!(!report.passed());
    let forgotten = report.verdict.figures.forgotten;
    assert!(forgotten > 0, "{:?}", report.verdict.figures);
    assert!(
        report
            .verdict
            .failures
            .contains(&Failure::Forgotten { count: forgotten }),
        "{:?}",
        report.verdict.failures
    );
}
