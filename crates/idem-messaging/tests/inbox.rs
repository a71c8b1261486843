//! The inbox on PostgreSQL and MySQL: duplicates skipped, failures leave no trace, concurrent
//! copies apply one effect, old rows purged in batches. Each behaviour is a generic function, run
//! on both servers by `stamp!`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use idem_messaging::{Arrival, Error, Handled, Inbox, MessageId};

use common::{TestDb, TestSchema, consumer};

/// Runs each generic test on PostgreSQL (`postgres::name`, skipped without
/// `IDEM_TEST_POSTGRES_URL`) and on MySQL (`mysql::name`, with the `mysql` feature, skipped
/// without `IDEM_TEST_MYSQL_URL`).
macro_rules! stamp {
    ($($test:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    use super::TestDb as _;
                    let Some(db) = super::TestSchema::create().await else { return };
                    super::$test(db).await;
                }
            )*
        }

        #[cfg(feature = "mysql")]
        mod mysql {
            $(
                #[tokio::test]
                async fn $test() {
                    use super::TestDb as _;
                    let Some(db) = super::common::TestDatabase::create().await else { return };
                    super::$test(db).await;
                }
            )*
        }
    };
}

stamp!(
    a_copy_of_a_processed_message_is_skipped,
    process_records_in_the_callers_transaction,
    a_failed_handler_leaves_no_row_and_no_effect,
    concurrent_copies_apply_the_effect_once,
    a_copy_waiting_on_a_rolled_back_first_is_processed,
    rows_older_than_the_window_are_purged_in_batches,
    the_purger_task_empties_the_old_rows,
    message_ids_and_consumers_are_compared_exactly,
    a_failed_record_is_an_error_never_a_duplicate,
);

fn id(value: &str) -> MessageId {
    value.parse().unwrap()
}

async fn a_copy_of_a_processed_message_is_skipped<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");
    let calls = AtomicUsize::new(0);

    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let outcome = inbox
            .handle(schema.pool(), &ledger, &id("m-1"), |tx| {
                Box::pin(async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    schema.book(&mut **tx, "m-1", "+10").await;
                    Ok::<_, Error>("booked")
                })
            })
            .await
            .unwrap();
        outcomes.push(outcome);
    }

    assert_eq!(
        outcomes,
        [
            Handled::Processed("booked"),
            Handled::Duplicate,
            Handled::Duplicate
        ]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
}

async fn process_records_in_the_callers_transaction<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");

    let mut tx = schema.pool().begin().await.unwrap();
    assert_eq!(
        inbox.process(&mut *tx, &ledger, &id("m-1")).await.unwrap(),
        Arrival::First
    );
    schema.book(&mut *tx, "m-1", "+10").await;
    tx.commit().await.unwrap();

    let mut tx = schema.pool().begin().await.unwrap();
    assert_eq!(
        inbox.process(&mut *tx, &ledger, &id("m-1")).await.unwrap(),
        Arrival::Duplicate
    );
    tx.rollback().await.unwrap();

    // Each consumer processes the message once.
    let mut tx = schema.pool().begin().await.unwrap();
    assert_eq!(
        inbox
            .process(&mut tx, &consumer("mailer"), &id("m-1"))
            .await
            .unwrap(),
        Arrival::First
    );
    tx.commit().await.unwrap();
    assert_eq!(schema.inbox_rows().await, 2);
    assert_eq!(schema.ledger().await, 1);
}

async fn a_failed_handler_leaves_no_row_and_no_effect<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");

    let failed = inbox
        .handle(schema.pool(), &ledger, &id("m-1"), |tx| {
            Box::pin(async {
                schema.book(&mut **tx, "m-1", "+10").await;
                Err::<(), _>(anyhow::anyhow!("the handler failed after its write"))
            })
        })
        .await;
    assert_eq!(
        failed.unwrap_err().to_string(),
        "the handler failed after its write"
    );
    assert_eq!(schema.inbox_rows().await, 0);
    assert_eq!(schema.ledger().await, 0);

    // The redelivery is processed.
    let retried = inbox
        .handle(schema.pool(), &ledger, &id("m-1"), |tx| {
            Box::pin(async {
                schema.book(&mut **tx, "m-1", "+10").await;
                Ok::<_, anyhow::Error>(())
            })
        })
        .await
        .unwrap();
    assert_eq!(retried, Handled::Processed(()));
    assert_eq!(schema.inbox_rows().await, 1);
    assert_eq!(schema.ledger().await, 1);
}

async fn concurrent_copies_apply_the_effect_once<D: TestDb>(schema: D) {
    let schema = Arc::new(schema);
    let inbox = schema.inbox().await;
    let executions = Arc::new(AtomicUsize::new(0));
    const COPIES: usize = 16;

    let tasks: Vec<_> = (0..COPIES)
        .map(|_| {
            let (schema, inbox, executions) =
                (Arc::clone(&schema), inbox.clone(), Arc::clone(&executions));
            tokio::spawn(async move {
                inbox
                    .handle(schema.pool(), &consumer("ledger"), &id("m-1"), |tx| {
                        Box::pin(async {
                            executions.fetch_add(1, Ordering::SeqCst);
                            schema.book(&mut **tx, "m-1", "+10").await;
                            // Hold the row while the other copies arrive.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok::<_, Error>(())
                        })
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut processed = 0;
    let mut duplicates = 0;
    for task in tasks {
        match task.await.unwrap() {
            Handled::Processed(()) => processed += 1,
            Handled::Duplicate => duplicates += 1,
        }
    }

    assert_eq!((processed, duplicates), (1, COPIES - 1));
    assert_eq!(executions.load(Ordering::SeqCst), 1);
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
}

async fn a_copy_waiting_on_a_rolled_back_first_is_processed<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");

    let mut first = schema.pool().begin().await.unwrap();
    assert_eq!(
        inbox
            .process(&mut *first, &ledger, &id("m-1"))
            .await
            .unwrap(),
        Arrival::First
    );
    // The second copy waits on the first's uncommitted row…
    let second = {
        let (pool, inbox, ledger) = (schema.pool().clone(), inbox.clone(), ledger.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let delivery = inbox.process(&mut *tx, &ledger, &id("m-1")).await.unwrap();
            tx.commit().await.unwrap();
            delivery
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!second.is_finished());
    // …and takes over when the first rolls back.
    first.rollback().await.unwrap();
    assert_eq!(second.await.unwrap(), Arrival::First);
    assert_eq!(schema.inbox_rows().await, 1);
}

async fn rows_older_than_the_window_are_purged_in_batches<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    assert_eq!(inbox.dedup_window(), Duration::from_secs(7 * 24 * 3600));
    let ledger = consumer("ledger");
    for n in 0..25 {
        let mut tx = schema.pool().begin().await.unwrap();
        assert_eq!(
            inbox
                .process(&mut tx, &ledger, &id(&format!("m-{n}")))
                .await
                .unwrap(),
            Arrival::First
        );
        tx.commit().await.unwrap();
    }
    // Twenty of them were processed eight days ago.
    schema
        .age_inbox_rows(
            Duration::from_secs(8 * 24 * 3600),
            &["m-0", "m-1", "m-2", "m-3", "m-4"],
        )
        .await;

    let mut batches = Vec::new();
    loop {
        let purged = inbox.purge(schema.pool(), 7).await.unwrap();
        batches.push(purged);
        if purged < 7 {
            break;
        }
    }
    assert_eq!(batches, [7, 7, 6]);
    assert_eq!(schema.inbox_rows().await, 5);

    // A purged message is forgotten: a copy arriving now is processed again.
    let mut tx = schema.pool().begin().await.unwrap();
    assert_eq!(
        inbox.process(&mut *tx, &ledger, &id("m-9")).await.unwrap(),
        Arrival::First
    );
    assert_eq!(
        inbox.process(&mut *tx, &ledger, &id("m-0")).await.unwrap(),
        Arrival::Duplicate
    );
    tx.rollback().await.unwrap();
}

async fn the_purger_task_empties_the_old_rows<D: TestDb>(schema: D) {
    let inbox = Inbox::<D::DB>::new(
        schema
            .inbox_options()
            .dedup_window(Duration::from_secs(3600)),
    );
    inbox.migrate(schema.pool()).await.unwrap();
    // Migrating again is a no-op.
    inbox.migrate(schema.pool()).await.unwrap();
    for n in 0..10 {
        let mut tx = schema.pool().begin().await.unwrap();
        let _ = inbox
            .process(&mut tx, &consumer("ledger"), &id(&format!("m-{n}")))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    schema
        .age_inbox_rows(Duration::from_secs(2 * 3600), &["m-7", "m-8", "m-9"])
        .await;

    let purger = inbox.spawn_purger(schema.pool().clone(), Duration::from_millis(20), 2);
    tokio::time::timeout(common::EVENTUALLY, async {
        while schema.inbox_rows().await != 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the purger removes the seven old rows");
    purger.stop().await;
    assert_eq!(schema.inbox_rows().await, 3);
}

async fn message_ids_and_consumers_are_compared_exactly<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    let mut tx = schema.pool().begin().await.unwrap();
    // No case folding, no trailing space padding, no accent folding: five messages.
    for message in ["m-1", "M-1", "m-1 ", "é", "e"] {
        assert_eq!(
            inbox
                .process(&mut *tx, &consumer("ledger"), &id(message))
                .await
                .unwrap(),
            Arrival::First,
            "{message:?}"
        );
    }
    assert_eq!(
        inbox
            .process(&mut *tx, &consumer("Ledger"), &id("m-1"))
            .await
            .unwrap(),
        Arrival::First
    );
    assert_eq!(
        inbox
            .process(&mut *tx, &consumer("ledger"), &id("m-1 "))
            .await
            .unwrap(),
        Arrival::Duplicate
    );
    tx.commit().await.unwrap();
    assert_eq!(schema.inbox_rows().await, 6);
}

async fn a_failed_record_is_an_error_never_a_duplicate<D: TestDb>(schema: D) {
    let inbox = schema.inbox().await;
    schema.execute("DROP TABLE {schema}.idem_inbox").await;
    let handled = inbox
        .handle(schema.pool(), &consumer("ledger"), &id("m-1"), |_| {
            Box::pin(async { Ok::<_, Error>(()) })
        })
        .await;
    assert!(matches!(handled, Err(Error::Database(_))), "{handled:?}");
}
