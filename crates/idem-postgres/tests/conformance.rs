//! The store contract, checked in a schema of its own per test, on a manual clock (the store's
//! test clock), so that lease expiry and TTLs are exact.
//!
//! Every test returns at once, saying so on stderr, when `IDEM_TEST_POSTGRES_URL` is not set.
//! `tests/server_clock.rs` runs the checks on the server's clock.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

mod suite {
    use std::time::Duration;

    use idem_conformance::{ManualSubject, Subject, checks};
    use idem_core::ManualClock;
    use idem_postgres::PostgresStore;

    use idem_test_support::Server;

    use crate::common::TestSchema;

    /// A store in its own schema, which lives as long as the subject.
    struct PostgresSubject {
        manual: ManualSubject<PostgresStore>,
        schema: TestSchema,
    }

    impl Subject for PostgresSubject {
        type Store = PostgresStore;

        fn store(&self) -> PostgresStore {
            self.manual.store()
        }

        async fn advance(&self, by: Duration) {
            self.manual.advance(by).await;
        }
    }

    async fn subject() -> PostgresSubject {
        let url = Server::Postgres
            .configured()
            .expect("the server is checked before the subject is built");
        let schema = TestSchema::new(&url);
        let clock = ManualClock::default();
        let store = schema.manual_clock_store(&clock).await;
        PostgresSubject {
            manual: ManualSubject { store, clock },
            schema,
        }
    }

    idem_conformance::conformance_tests!(subject(), if Server::Postgres.url().is_some());

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn records_survive_a_restart() {
        if Server::Postgres.url().is_none() {
            return;
        }
        let subject = subject().await;
        let (schema, clock) = (&subject.schema, subject.manual.clock.clone());
        checks::records_survive_a_restart(&subject, |store| async move {
            // A new pool, as a restarted process would open.
            store.close().await;
            schema.manual_clock_store(&clock).await
        })
        .await;
    }
}
