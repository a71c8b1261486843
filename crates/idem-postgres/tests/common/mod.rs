//! What the server tests share: the database URL, a schema of their own, and stores in it.

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::{
    hash::{BuildHasher, RandomState},
    io::Write,
    time::Duration,
};

use idem_core::{Acquisition, Address, Fingerprint, Lease, ManualClock, Store, Terms};
use idem_postgres::{PostgresOptions, PostgresStore};
use sqlx::{PgPool, postgres::PgPoolOptions};

/// The variable that points the tests at a server.
pub const URL_VARIABLE: &str = "IDEM_TEST_POSTGRES_URL";

/// The server's URL, or `None` after telling why the test is skipped.
pub fn database_url() -> Option<String> {
    match std::env::var(URL_VARIABLE) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            // Straight to stderr: the test harness captures `eprintln!` of passing tests.
            let _ = writeln!(std::io::stderr(), "skipped: {URL_VARIABLE} is not set");
            None
        }
    }
}

/// Returns from the test when no server is configured.
#[macro_export]
macro_rules! require_postgres {
    () => {
        match common::database_url() {
            Some(url) => url,
            None => return,
        }
    };
}

/// A schema of the test's own, with a random name, dropped when this is.
pub struct TestSchema {
    pub url: String,
    pub name: String,
}

impl TestSchema {
    pub fn new(url: &str) -> Self {
        let random = RandomState::new().hash_one(std::process::id());
        Self {
            url: url.to_owned(),
            name: format!("idem_test_{random:016x}"),
        }
    }

    /// Options for this schema and the default table.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions::new().schema(self.name.parse().expect("valid schema name"))
    }

    /// A new pool, as another process would have.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(8)
            .test_before_acquire(false)
            .connect(&self.url)
            .await
            .expect("connect to the test server")
    }

    /// Migrates the schema and opens a store on a new pool.
    pub async fn store(&self, options: PostgresOptions) -> PostgresStore {
        let pool = self.pool().await;
        PostgresStore::migrate(&pool, &options)
            .await
            .expect("migrate");
        PostgresStore::open(pool, options).await.expect("open")
    }

    /// A store on the server's clock.
    pub async fn server_clock_store(&self) -> PostgresStore {
        self.store(self.options()).await
    }

    /// A store on `clock`.
    pub async fn manual_clock_store(&self, clock: &ManualClock) -> PostgresStore {
        self.store(self.options().test_clock(clock.clone())).await
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop is synchronous and may run inside a runtime: use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    r#"DROP SCHEMA IF EXISTS "{name}" CASCADE"#
                )))
                .execute(&pool)
                .await?;
                pool.close().await;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(error)) = dropped {
            eprintln!("could not drop the test schema {}: {error:#}", self.name);
        }
    }
}

/// The terms the tests acquire with.
pub const TERMS: Terms = Terms {
    lease: Duration::from_secs(2),
    ttl: Duration::from_secs(10),
};

/// A fingerprint made of one repeated byte.
pub fn fingerprint(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

/// The address of `key` in the anonymous scope.
pub fn address(key: &str) -> Address {
    Address::anonymous(key.parse().expect("valid key"))
}

/// Acquires and expects a fresh lease.
pub async fn acquired(store: &impl Store, address: &Address) -> Lease {
    match store.acquire(address, &fingerprint(1), TERMS).await {
        Ok(Acquisition::Acquired(lease)) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}
