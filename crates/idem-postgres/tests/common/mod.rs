//! What the server tests share: a schema of their own, and stores in it. (The database URL and
//! the skip are `idem_test_support`'s.)

#![allow(dead_code, unreachable_pub)] // each test file uses a part

pub mod round_trips;

use std::{str::FromStr, time::Duration};

use idem_core::{Acquisition, Address, Fingerprint, Lease, ManualClock, Store, Terms};
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_test_support::PgSchema;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use round_trips::RoundTripCounter;

/// A schema of the test's own, with a random name, dropped when this is.
pub struct TestSchema {
    pub url: String,
    pub name: String,
    _schema: PgSchema,
}

impl TestSchema {
    pub fn new(url: &str) -> Self {
        let schema = PgSchema::new(url);
        Self {
            url: url.to_owned(),
            name: schema.name().to_owned(),
            _schema: schema,
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

    /// Migrates the schema and opens a store whose connections, its pool's (one) and its own, go
    /// through a proxy that counts their round trips.
    pub async fn counted_store(
        &self,
        options: PostgresOptions,
    ) -> (PostgresStore, RoundTripCounter) {
        PostgresStore::migrate(&self.pool().await, &options)
            .await
            .expect("migrate");
        let direct = PgConnectOptions::from_str(&self.url).expect("a valid URL");
        let upstream = tokio::net::lookup_host((direct.get_host(), direct.get_port()))
            .await
            .expect("the server's address")
            .next()
            .expect("an address");
        let counter = RoundTripCounter::start(upstream).await;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(direct.host("127.0.0.1").port(counter.address.port()))
            .await
            .expect("connect through the proxy");
        let store = PostgresStore::open(pool, options).await.expect("open");
        (store, counter)
    }

    /// Migrates the schema and opens a store on a pool of `connections` whose connections, and
    /// the store's own, show as `name` in `pg_stat_activity`; and a pool of the test's own to
    /// find them with.
    pub async fn named_store(
        &self,
        name: &str,
        connections: u32,
        options: PostgresOptions,
    ) -> (PostgresStore, PgPool) {
        let observer = self.pool().await;
        PostgresStore::migrate(&observer, &options)
            .await
            .expect("migrate");
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect_with(
                PgConnectOptions::from_str(&self.url)
                    .expect("a valid URL")
                    .application_name(name),
            )
            .await
            .expect("connect to the test server");
        let store = PostgresStore::open(pool, options).await.expect("open");
        (store, observer)
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
