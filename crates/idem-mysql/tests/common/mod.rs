//! What the server tests share: a database of their own, and stores in it. (The server's URL and
//! the skip are `idem_test_support`'s.)

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::time::Duration;

use idem_core::{Acquisition, Address, Fingerprint, Lease, ManualClock, Store, Terms};
use idem_mysql::{MysqlOptions, MysqlStore};
use idem_test_support::MysqlDatabase;
use sqlx::{MySqlPool, mysql::MySqlPoolOptions};

/// A lease of a minute and a TTL of an hour.
pub const TERMS: Terms = Terms {
    lease: Duration::from_secs(60),
    ttl: Duration::from_secs(3_600),
};

/// A database of the test's own, dropped when this is.
pub struct TestDatabase {
    pub database: MysqlDatabase,
}

impl TestDatabase {
    pub async fn new(server: &str) -> Self {
        Self {
            database: MysqlDatabase::create(server).await,
        }
    }

    /// The database's URL.
    pub fn url(&self) -> String {
        self.database.url()
    }

    /// Options for this database and the default table.
    pub fn options(&self) -> MysqlOptions {
        MysqlOptions::from_url(&self.url()).expect("a valid URL")
    }

    /// A new pool, as another process would have.
    pub async fn pool(&self) -> MySqlPool {
        MySqlPoolOptions::new()
            .max_connections(8)
            .test_before_acquire(false)
            .connect_with(self.database.connect_options())
            .await
            .expect("connect to the test server")
    }

    /// Migrates the database and opens a store on a new pool.
    pub async fn store(&self, options: MysqlOptions) -> MysqlStore {
        let pool = self.pool().await;
        MysqlStore::migrate(&pool, &options).await.expect("migrate");
        MysqlStore::open(pool, options).await.expect("open")
    }

    /// A store on `clock`.
    pub async fn manual_clock_store(&self, clock: &ManualClock) -> MysqlStore {
        self.store(self.options().test_clock(clock.clone())).await
    }
}

pub fn address(key: &str) -> Address {
    Address::anonymous(key.parse().unwrap())
}

pub fn fingerprint(byte: u8) -> Fingerprint {
    Fingerprint::from_bytes([byte; 32])
}

/// The lease of an acquisition of `address` that must succeed.
pub async fn acquired(store: &impl Store, address: &Address) -> Lease {
    match store.acquire(address, &fingerprint(1), TERMS).await {
        Ok(Acquisition::Acquired(lease)) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}
