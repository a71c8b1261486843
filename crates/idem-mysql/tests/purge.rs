//! The purge's transaction: it ends before `purge_expired` returns, and it locks no record it
//! does not delete, so that the next purge, from this process or another, finds every expired
//! record.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use idem_core::{ManualClock, Outcome, Store, StoredResponse};
use idem_mysql::MysqlStore;
use idem_test_support::require;
use sqlx::mysql::MySqlPoolOptions;

use common::{TestDatabase, acquired, address};

/// A pool that takes its connections back a second late, as a busy runtime might: whatever a
/// purge left open on its connection stays open while the next purge runs on another one.
async fn slow_to_take_back(database: &TestDatabase) -> sqlx::MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .after_release(|_, _| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(true)
            })
        })
        .connect_with(database.database.connect_options())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_purge_leaves_nothing_locked_for_the_next() {
    let url = require!(Mysql);
    let database = TestDatabase::new(&url).await;
    let clock = ManualClock::default();
    let options = database.options().test_clock(clock.clone());
    MysqlStore::migrate(&database.pool().await, &options)
        .await
        .unwrap();
    let store = MysqlStore::open(slow_to_take_back(&database).await, options)
        .await
        .unwrap();

    let outcome: Outcome = StoredResponse::new(200).body("done").into();
    for (key, ttl) in [("first", 1), ("second", 2)] {
        let key = address(key);
        let lease = acquired(&store, &key).await;
        store
            .complete(&key, lease.token, &outcome, Duration::from_secs(ttl))
            .await
            .unwrap();
    }

    // Nothing has expired: the walk down the expiry index stops at "first", and must not leave
    // it locked.
    assert_eq!(store.purge_expired(10).await.unwrap(), 0);
    clock.advance(Duration::from_millis(1_500));
    assert_eq!(store.purge_expired(10).await.unwrap(), 1);
    assert_eq!(store.get(&address("first")).await.unwrap(), None);

    // The same with a record deleted: the purge that deleted "first" stopped at "second".
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.purge_expired(10).await.unwrap(), 1);
    assert_eq!(store.get(&address("second")).await.unwrap(), None);
    assert_eq!(store.purge_expired(10).await.unwrap(), 0);
}
