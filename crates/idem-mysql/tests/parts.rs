//! The parts of streamed responses beyond the conformance checks: appends that race each other
//! store each part once and in order, and the parts table is a migration of its own, checked
//! when a store opens.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use bytes::Bytes;
use idem_core::{Outcome, Store, StoreError, StoredResponse};
use idem_mysql::{Error, Migration, MysqlStore};
use idem_test_support::require;

use common::{TERMS, TestDatabase, acquired, address};

const WRITERS: u32 = 16;

/// Appends of one index from many connections at once store one of them; appends of the next
/// indexes, each retried until its predecessor is stored, store each once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_appends_store_each_part_once_in_order() {
    let url = require!(Mysql);
    let database = TestDatabase::new(&url).await;
    let store = database.store(database.options().pool_size(8)).await;
    let a = address("raced");
    let lease = acquired(&store, &a).await;

    let same: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (store, a) = (store.clone(), a.clone());
            tokio::spawn(async move {
                let part = Bytes::from(format!("first from {writer}"));
                store.append_part(&a, lease.token, 0, &part).await
            })
        })
        .collect();
    for append in same {
        append.await.unwrap().unwrap();
    }
    let stored = store
        .read_parts(&a, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0].starts_with(b"first from "), "{stored:?}");

    let next: Vec<_> = (1..=WRITERS)
        .map(|index| {
            let (store, a) = (store.clone(), a.clone());
            tokio::spawn(async move {
                let part = Bytes::from(format!("part {index}"));
                loop {
                    match store.append_part(&a, lease.token, index, &part).await {
                        Ok(()) => return,
                        Err(StoreError::PartOutOfOrder { next, given }) => {
                            assert!(next < given, "{next} < {given}");
                            tokio::task::yield_now().await;
                        }
                        Err(error) => panic!("append {index}: {error:?}"),
                    }
                }
            })
        })
        .collect();
    for append in next {
        append.await.unwrap();
    }
    let stored = store
        .read_parts(&a, lease.token, 1, usize::MAX)
        .await
        .unwrap();
    let expected: Vec<Bytes> = (1..=WRITERS)
        .map(|index| Bytes::from(format!("part {index}")))
        .collect();
    assert_eq!(stored, expected);

    // After the completion, no append gets through, and the parts are still read.
    let outcome: Outcome = StoredResponse::new(200).body("done").into();
    store
        .complete(&a, lease.token, &outcome, TERMS.ttl)
        .await
        .unwrap();
    let late = store
        .append_part(&a, lease.token, WRITERS + 1, &Bytes::from_static(b"late"))
        .await;
    assert!(matches!(late, Err(StoreError::LeaseLost)), "{late:?}");
    let all = store
        .read_parts(&a, lease.token, 0, usize::MAX)
        .await
        .unwrap();
    assert_eq!(all.len(), 1 + WRITERS as usize);
}

/// A table migrated before the parts table existed lacks migration 2: it is refused until
/// migrated, then served; a parts table that is not this build's is refused.
#[tokio::test]
async fn the_parts_table_is_migration_2_and_checked_on_open() {
    let url = require!(Mysql);
    let database = TestDatabase::new(&url).await;
    let options = database.options();
    let pool = database.pool().await;
    assert_eq!(
        MysqlStore::migrate(&pool, &options).await.unwrap(),
        Migration::Created
    );
    sqlx::raw_sql(
        "DROP TABLE idem_records_parts; DELETE FROM idem_records_migrations WHERE version = 2",
    )
    .execute(&pool)
    .await
    .unwrap();
    match MysqlStore::open(pool.clone(), options.clone()).await {
        Err(Error::MigrationPending { version: 2, .. }) => {}
        other => panic!("expected migration 2 pending, got {other:?}"),
    }
    assert_eq!(
        MysqlStore::migrate(&pool, &options).await.unwrap(),
        Migration::Applied { from: 2 }
    );
    let store = MysqlStore::open(pool.clone(), options.clone())
        .await
        .unwrap();
    let a = address("migrated");
    let lease = acquired(&store, &a).await;
    let part = Bytes::from_static(b"part");
    store.append_part(&a, lease.token, 0, &part).await.unwrap();
    assert_eq!(
        store.read_parts(&a, lease.token, 0, 1).await.unwrap(),
        [part]
    );
    store.close().await;

    let pool = database.pool().await;
    sqlx::raw_sql("ALTER TABLE idem_records_parts MODIFY part BLOB NOT NULL")
        .execute(&pool)
        .await
        .unwrap();
    let refused = MysqlStore::open(pool, options).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "the column part of the idem table `idem_records_parts` should be longblob, found blob"
    );
}
