//! The store contract, checked on a fresh SQLite file and a manual clock per test.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{path::Path, time::Duration};

use idem_conformance::{ManualSubject, Subject, checks};
use idem_core::ManualClock;
use idem_sqlite::{SqliteOptions, SqliteStore};
use tempfile::TempDir;

/// A store on a file in its own temporary directory, which lives as long as the subject.
struct SqliteSubject {
    manual: ManualSubject<SqliteStore>,
    dir: TempDir,
}

impl Subject for SqliteSubject {
    type Store = SqliteStore;

    fn store(&self) -> SqliteStore {
        self.manual.store()
    }

    async fn advance(&self, by: Duration) {
        self.manual.advance(by).await;
    }
}

async fn open(dir: &Path, clock: ManualClock) -> SqliteStore {
    let options = SqliteOptions::new(dir.join("idem.db")).clock(clock);
    SqliteStore::open_with(options)
        .await
        .expect("open the store")
}

async fn subject() -> SqliteSubject {
    let dir = tempfile::tempdir().expect("temporary directory");
    let clock = ManualClock::default();
    let store = open(dir.path(), clock.clone()).await;
    SqliteSubject {
        manual: ManualSubject { store, clock },
        dir,
    }
}

idem_conformance::conformance_tests!(subject());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_survive_a_restart() {
    let subject = subject().await;
    let (dir, clock) = (subject.dir.path(), subject.manual.clock.clone());
    checks::records_survive_a_restart(&subject, |store| async move {
        store.close().await;
        open(dir, clock).await
    })
    .await;
}
