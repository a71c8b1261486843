//! The store contract, checked in a database of its own per test, on a manual clock (the store's
//! test clock), so that lease expiry and TTLs are exact.
//!
//! The suite runs twice: with the batches in the form the server calls for (one compound statement
//! on MariaDB), and as `;`-separated statements, the form MySQL gets.
//!
//! Every test returns at once, saying so on stderr, when `IDEM_TEST_MYSQL_URL` is not set.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

mod suite {
    use std::time::Duration;

    use idem_conformance::{ManualSubject, Subject, checks};
    use idem_core::ManualClock;
    use idem_mysql::{BatchForm, MysqlStore};
    use idem_test_support::Server;

    use crate::common::TestDatabase;

    /// A store in its own database, which lives as long as the subject.
    pub(crate) struct MysqlSubject {
        manual: ManualSubject<MysqlStore>,
        database: TestDatabase,
    }

    impl Subject for MysqlSubject {
        type Store = MysqlStore;

        fn store(&self) -> MysqlStore {
            self.manual.store()
        }

        async fn advance(&self, by: Duration) {
            self.manual.advance(by).await;
        }
    }

    /// A subject whose batches take `form`, or the server's form.
    pub(crate) async fn subject(form: Option<BatchForm>) -> MysqlSubject {
        let url = Server::Mysql
            .configured()
            .expect("the server is checked before the subject is built");
        let database = TestDatabase::new(&url).await;
        let clock = ManualClock::default();
        let mut options = database.options().test_clock(clock.clone());
        if let Some(form) = form {
            options = options.batch_form(form);
        }
        let store = database.store(options).await;
        MysqlSubject {
            manual: ManualSubject { store, clock },
            database,
        }
    }

    idem_conformance::conformance_tests!(subject(None), if Server::Mysql.url().is_some());

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn records_survive_a_restart() {
        if Server::Mysql.url().is_none() {
            return;
        }
        let subject = subject(None).await;
        let (database, clock) = (&subject.database, subject.manual.clock.clone());
        checks::records_survive_a_restart(&subject, |store| async move {
            // A new pool, as a restarted process would open.
            store.close().await;
            database.manual_clock_store(&clock).await
        })
        .await;
    }
}

/// The suite with every batch sent as `;`-separated statements.
mod statements {
    use idem_mysql::BatchForm;
    use idem_test_support::Server;

    use crate::suite::subject;

    idem_conformance::conformance_tests!(
        subject(Some(BatchForm::Statements)),
        if Server::Mysql.url().is_some()
    );
}
