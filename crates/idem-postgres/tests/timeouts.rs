//! `PostgresOptions::statement_timeout`: every connection the store opens stops a statement
//! that runs, or waits for a lock, longer than it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::{Duration, Instant};

use idem_core::{Acquisition, Store, StoreError};
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_test_support::require;

use common::{TERMS, TestSchema, address, fingerprint};

const TIMEOUT: Duration = Duration::from_millis(300);

/// The SQLSTATE of a database error, found among `error`'s sources.
fn sqlstate(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(sqlx::Error::Database(db)) = error.downcast_ref::<sqlx::Error>() {
            return db.code().map(|code| code.into_owned());
        }
        next = error.source();
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statement_timeout_bounds_every_connection_of_the_store() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    schema.server_clock_store().await.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    let options = PostgresOptions::from_url(&format!("{url}{separator}schema={}", schema.name))
        .unwrap()
        .statement_timeout(TIMEOUT);
    let store = PostgresStore::connect_with(options).await.unwrap();

    // The pool's connections: purging, readiness checks, the caller's transactions.
    for setting in ["statement_timeout", "lock_timeout"] {
        let shown: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(shown, "300ms", "{setting}");
    }
    let slow = sqlx::query("SELECT pg_sleep(5)")
        .execute(store.pool())
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&slow).as_deref(), Some("57014"));

    // The store's own connections: an acquire stuck behind an uncommitted acquisition of the
    // same key gives up and reports the store unavailable.
    let key = address("timeout-1");
    let mut tx = store.pool().begin().await.unwrap();
    let held = store
        .acquire_in(&mut tx, &key, &fingerprint(1), TERMS)
        .await
        .unwrap();
    assert!(matches!(held, Acquisition::Acquired(_)), "{held:?}");
    let started = Instant::now();
    let blocked = store.acquire(&key, &fingerprint(1), TERMS).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the timeout fired"
    );
    let Err(StoreError::Unavailable(source)) = blocked else {
        panic!("expected Unavailable, got {blocked:?}");
    };
    // The statement's timer started first, so it usually fires first; a lock timeout is the
    // same setting.
    let code = sqlstate(source.as_ref()).unwrap();
    assert!(["57014", "55P03"].contains(&code.as_str()), "{code}");
    tx.rollback().await.unwrap();

    // Once the lock is gone, the same connections work.
    let free = store.acquire(&key, &fingerprint(1), TERMS).await.unwrap();
    assert!(matches!(free, Acquisition::Acquired(_)), "{free:?}");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_statement_timeout_the_server_settings_apply() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url);
    let store = schema.server_clock_store().await;
    let shown: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(shown, "0");
    store.close().await;
}
