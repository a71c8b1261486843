//! What group commit saves: commits per new key, and new keys per second, at 1, 8, 32 and 128
//! concurrent tasks, for `PostgresStore` against a baseline measured in the same run.
//!
//! ```text
//! IDEM_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo run --release -p idem-postgres --example group_commit [seconds per run = 5] \
//!     [batches in flight = PostgresOptions::DEFAULT_BATCHES_IN_FLIGHT]
//! ```
//!
//! Each task acquires and completes new keys, one after the other. The baseline sends the store's
//! own statements for a batch of one (`PostgresStore::sql`) straight through sqlx, one key at a
//! time per task, each statement its own transaction: what the store cost without group commit.
//! Both use 10 connections (the store's default pool size) and generic plans. Commits are
//! `xact_commit` of `pg_stat_database` for a scratch database that the run creates and drops, so
//! that nothing else on the server is counted (opening a store, which reads the catalog, adds a
//! handful to each run); every statement is its own transaction and one round trip, so commits
//! per key are also round trips per key.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use idem_core::{
    Acquisition, Address, Fingerprint, Outcome, Policy, Scope, Store, StoredResponse, Terms,
};
use idem_postgres::{PostgresOptions, PostgresStore, Statement};
use sha2::{Digest, Sha256};
use sqlx::{
    AssertSqlSafe, Connection, PgConnection, PgPool, Row,
    postgres::{PgConnectOptions, PgPoolOptions},
};

const CONCURRENCY: [usize; 4] = [1, 8, 32, 128];
const POOL_SIZE: u32 = 10;

/// One configuration's run.
struct Run {
    keys: u64,
    commits: i64,
    elapsed: Duration,
}

impl Run {
    fn keys_per_second(&self) -> f64 {
        self.keys as f64 / self.elapsed.as_secs_f64()
    }

    fn commits_per_key(&self) -> f64 {
        self.commits as f64 / self.keys as f64
    }
}

/// What every task shares.
struct Load {
    scope: Scope,
    fingerprint: Fingerprint,
    terms: Terms,
    response: Outcome,
    encoded: Vec<u8>,
    next: AtomicU64,
}

impl Load {
    fn address(&self) -> Address {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Address::new(self.scope, format!("key-{n}").parse().unwrap())
    }

    async fn store_key(&self, store: &PostgresStore) {
        let address = self.address();
        let Acquisition::Acquired(lease) = store
            .acquire(&address, &self.fingerprint, self.terms)
            .await
            .unwrap()
        else {
            panic!("a new key is acquired");
        };
        store
            .complete(&address, lease.token, &self.response, self.terms.ttl)
            .await
            .unwrap();
    }

    async fn baseline_key(&self, pool: &PgPool, sql: &Sql) {
        let address = self.address();
        let key: [u8; 32] = Sha256::digest(address.key.as_str().as_bytes()).into();
        let (scope, key) = ([address.scope.as_bytes().as_slice()], [key.as_slice()]);
        let row = sqlx::query(AssertSqlSafe(sql.acquire.as_str()))
            .bind(None::<i64>)
            .bind(scope)
            .bind(key)
            .bind([self.fingerprint.as_bytes().as_slice()])
            .bind([self.terms.lease.as_millis() as i64])
            .bind([self.terms.ttl.as_millis() as i64])
            .fetch_one(pool)
            .await
            .unwrap();
        let token: i64 = row.get("token");
        let done = sqlx::query(AssertSqlSafe(sql.complete.as_str()))
            .bind(None::<i64>)
            .bind(scope)
            .bind(key)
            .bind([token])
            .bind([self.encoded.as_slice()])
            .bind([self.terms.ttl.as_millis() as i64])
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

/// The store's statements, for the baseline.
struct Sql {
    acquire: String,
    complete: String,
}

/// `xact_commit` of the scratch `database`, read from another one, once every session in it has
/// ended (a session reports its commits at the latest when it ends).
async fn commits(monitor: &mut PgConnection, database: &str) -> anyhow::Result<i64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sessions: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                .bind(database)
                .fetch_one(&mut *monitor)
                .await?;
        if sessions == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *monitor)
        .await?;
    Ok(
        sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
            .bind(database)
            .fetch_one(&mut *monitor)
            .await?,
    )
}

/// Runs `tasks` tasks, each calling `op` until `duration` is over; returns the keys done.
async fn drive<F, Fut>(tasks: usize, duration: Duration, op: F) -> (u64, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (op, stop) = (op.clone(), stop.clone());
            tokio::spawn(async move {
                let mut done = 0;
                while !stop.load(Ordering::Relaxed) {
                    op().await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut keys = 0;
    for handle in handles {
        keys += handle.await.unwrap();
    }
    (keys, start.elapsed())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("IDEM_TEST_POSTGRES_URL").context("IDEM_TEST_POSTGRES_URL")?;
    let seconds: u64 = std::env::args().nth(1).map_or(Ok(5), |s| s.parse())?;
    let duration = Duration::from_secs(seconds);
    let in_flight: usize = std::env::args()
        .nth(2)
        .map_or(Ok(PostgresOptions::DEFAULT_BATCHES_IN_FLIGHT), |s| {
            s.parse()
        })?;
    let server = PgConnectOptions::from_str(&url)?;
    let database = format!("idem_group_commit_{}", std::process::id());
    let mut admin = PgConnection::connect_with(&server).await?;
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let result = measure(
        &server.clone().database(&database),
        &mut admin,
        &database,
        duration,
        in_flight,
    )
    .await;
    sqlx::query(AssertSqlSafe(format!(
        "DROP DATABASE {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    result
}

async fn measure(
    connect: &PgConnectOptions,
    monitor: &mut PgConnection,
    database: &str,
    duration: Duration,
    in_flight: usize,
) -> anyhow::Result<()> {
    let generic = connect
        .clone()
        .options([("plan_cache_mode", "force_generic_plan")]);
    let pool = |options: PgConnectOptions| {
        PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .test_before_acquire(false)
            .connect_with(options)
    };
    let options = PostgresOptions::new()
        .pool_size(POOL_SIZE)
        .batches_in_flight(in_flight);
    {
        let setup = pool(connect.clone()).await?;
        PostgresStore::migrate(&setup, &options).await?;
        setup.close().await;
    }
    let response = StoredResponse::new(201)
        .header("content-type", "application/json")
        .body(r#"{"id":"ch_1","amount":1000,"currency":"eur"}"#)
        .into();
    let load = Arc::new(Load {
        scope: Scope::from_identity([b"Bearer sk_test_bench".as_slice()]),
        fingerprint: Fingerprint::from_bytes([7; 32]),
        terms: Terms::from(&Policy::default()),
        encoded: Outcome::encode(&response),
        response,
        next: AtomicU64::new(0),
    });

    println!(
        "duration per run: {duration:?}; {POOL_SIZE} connections each; {in_flight} batches in flight"
    );
    println!(
        "| tasks | store keys/s | store commits/key | baseline keys/s | baseline commits/key | keys/s ratio |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for tasks in CONCURRENCY {
        let before = commits(monitor, database).await?;
        let store = PostgresStore::open(pool(connect.clone()).await?, options.clone()).await?;
        let (keys, elapsed) = drive(tasks, duration, {
            let (load, store) = (load.clone(), store.clone());
            move || {
                let (load, store) = (load.clone(), store.clone());
                async move { load.store_key(&store).await }
            }
        })
        .await;
        store.close().await;
        drop(store);
        let store = Run {
            keys,
            commits: commits(monitor, database).await? - before,
            elapsed,
        };

        let before = commits(monitor, database).await?;
        let baseline_pool = pool(generic.clone()).await?;
        let sql = {
            let probe = PostgresStore::open(baseline_pool.clone(), options.clone()).await?;
            let sql = Arc::new(Sql {
                acquire: probe.sql(Statement::Acquire).to_owned(),
                complete: probe.sql(Statement::Complete).to_owned(),
            });
            drop(probe);
            sql
        };
        let (keys, elapsed) = drive(tasks, duration, {
            let (load, baseline_pool, sql) = (load.clone(), baseline_pool.clone(), sql.clone());
            move || {
                let (load, pool, sql) = (load.clone(), baseline_pool.clone(), sql.clone());
                async move { load.baseline_key(&pool, &sql).await }
            }
        })
        .await;
        baseline_pool.close().await;
        let baseline = Run {
            keys,
            commits: commits(monitor, database).await? - before,
            elapsed,
        };
        println!(
            "| {tasks} | {:.0} | {:.3} | {:.0} | {:.3} | {:.2}× |",
            store.keys_per_second(),
            store.commits_per_key(),
            baseline.keys_per_second(),
            baseline.commits_per_key(),
            store.keys_per_second() / baseline.keys_per_second(),
        );
    }
    Ok(())
}
