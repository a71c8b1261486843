//! Migration 3, which keys the records by an `AUTO_INCREMENT` id: a table migrated before it is
//! refused until migrated, and its records come through whole: completed ones replay, held ones
//! stay held by their tokens, and new records are served beside them.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use idem_core::{Acquisition, Outcome, Pace, Store, StoreError, StoredResponse};
use idem_mysql::{Error, Migration, MysqlStore};
use idem_test_support::require;

use common::{TERMS, TestDatabase, acquired, address, fingerprint};

/// The records table as migrations 1 and 2 left it: keyed by address, the listing index
/// completed by it.
const BEFORE_MIGRATION_3: &str = "ALTER TABLE idem_records \
     DROP PRIMARY KEY, DROP COLUMN id, DROP KEY address, DROP KEY idem_records_state_created, \
     ADD PRIMARY KEY (scope, key_digest), \
     ADD KEY idem_records_state_created (state, created_at); \
     DELETE FROM idem_records_migrations WHERE version = 3";

#[tokio::test]
async fn records_stored_before_migration_3_are_served_after_it() {
    let url = require!(Mysql);
    let database = TestDatabase::new(&url).await;
    let options = database.options();
    let store = database.store(options.clone()).await;
    let (paid, held, released) = (address("paid"), address("held"), address("released"));
    let paid_lease = acquired(&store, &paid).await;
    let outcome = Outcome::from(StoredResponse::new(201).body("charged 10"));
    store
        .complete(&paid, paid_lease.token, &outcome, TERMS.ttl)
        .await
        .unwrap();
    let held_lease = acquired(&store, &held).await;
    let released_lease = acquired(&store, &released).await;
    store
        .release(&released, released_lease.token)
        .await
        .unwrap();
    store.close().await;

    let pool = database.pool().await;
    sqlx::raw_sql(BEFORE_MIGRATION_3)
        .execute(&pool)
        .await
        .unwrap();
    match MysqlStore::open(pool.clone(), options.clone()).await {
        Err(Error::MigrationPending { version: 3, .. }) => {}
        other => panic!("expected migration 3 pending, got {other:?}"),
    }
    assert_eq!(
        MysqlStore::migrate(&pool, &options).await.unwrap(),
        Migration::Applied { from: 3 }
    );
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM idem_records ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(ids, [1, 2]);
    let store = MysqlStore::open(pool, options).await.unwrap();

    assert_eq!(
        store.acquire(&paid, &fingerprint(1), TERMS).await.unwrap(),
        Acquisition::Completed(outcome.clone())
    );
    let in_flight = store.acquire(&held, &fingerprint(1), TERMS).await.unwrap();
    assert!(
        matches!(in_flight, Acquisition::InFlight { .. }),
        "{in_flight:?}"
    );
    let stale = store
        .complete(&held, paid_lease.token, &outcome, TERMS.ttl)
        .await;
    assert!(matches!(stale, Err(StoreError::LeaseLost)), "{stale:?}");
    store
        .complete(&held, held_lease.token, &outcome, TERMS.ttl)
        .await
        .unwrap();
    let again = acquired(&store, &released).await;
    assert!(
        again.token > held_lease.token,
        "{again:?} after {held_lease:?}"
    );
    let new = acquired(&store, &address("new")).await;
    assert!(new.token > again.token, "{new:?} after {again:?}");

    let census = store.census(Pace::UNPACED).await.unwrap();
    assert_eq!((census.processing, census.completed), (2, 2));
    store.close().await;
}
