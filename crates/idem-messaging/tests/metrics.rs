//! The relay's metrics, read back through a recorder of the test's own, on PostgreSQL and on
//! MySQL.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use idem_messaging::{OutboxMessage, PublishError, Relay, metrics as names};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

use common::{Recorder as Broker, TestDb, TestSchema};

/// Runs each generic test on PostgreSQL (`postgres::name`, skipped without
/// `IDEM_TEST_POSTGRES_URL`) and on MySQL (`mysql::name`, with the `mysql` feature, skipped
/// without `IDEM_TEST_MYSQL_URL`). The default runtime of `tokio::test` is one thread, so the
/// thread's local recorder sees everything the relay records.
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
    a_cycle_counts_published_failed_and_dead_lettered_messages,
    record_pending_counts_the_waiting_messages_into_the_gauge,
);

/// The outbox's label: its table's name, as its database quotes it.
fn table<D: TestDb>(db: &D) -> String {
    let q = D::QUOTE;
    format!("{q}{}{q}.{q}idem_outbox{q}", db.schema())
}

/// Every value recorded, by metric name and labels.
#[derive(Default)]
struct Values(Mutex<BTreeMap<String, Vec<f64>>>);

struct Handle {
    key: String,
    values: Arc<Values>,
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        self.values
            .0
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default()
            .push(value as f64);
    }

    fn absolute(&self, value: u64) {
        CounterFn::increment(self, value);
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        self.values
            .0
            .lock()
            .unwrap()
            .entry(self.key.clone())
            .or_default()
            .push(value);
    }
}

impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        self.record(value);
    }

    fn decrement(&self, value: f64) {
        self.record(-value);
    }

    fn set(&self, value: f64) {
        self.record(value);
    }
}

#[derive(Default)]
struct TestRecorder(Arc<Values>);

impl TestRecorder {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        Arc::new(Handle {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            values: Arc::clone(&self.0),
        })
    }

    fn values(&self) -> BTreeMap<String, Vec<f64>> {
        self.0.0.lock().unwrap().clone()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

async fn a_cycle_counts_published_failed_and_dead_lettered_messages<D: TestDb>(schema: D) {
    let outbox = schema.outbox().await;
    let mut tx = schema.pool().begin().await.unwrap();
    for destination in ["orders", "nowhere", "orders"] {
        outbox
            .enqueue(&mut *tx, OutboxMessage::new(destination, "x"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let broker = Broker::refusing(|envelope| {
        (envelope.message().destination == "nowhere").then(|| PublishError::Rejected {
            reason: "NO_ROUTE".into(),
        })
    });
    let relay = Relay::new(schema.pool().clone(), outbox, broker).max_attempts(1);

    let recorder = TestRecorder::default();
    let guard = metrics::set_default_local_recorder(&recorder);
    relay.run_once().await.unwrap();
    relay.run_once().await.unwrap(); // claims nothing: records nothing
    drop(guard);

    let label = format!("outbox={}", table(&schema));
    let values = recorder.values();
    let counter = |name: &str| values.get(&format!("{name}{{{label}}}")).cloned();
    assert_eq!(counter(names::PUBLISHED), Some(vec![2.0]));
    assert_eq!(counter(names::FAILED), Some(vec![1.0]));
    assert_eq!(counter(names::DEAD_LETTERED), Some(vec![1.0]));
    assert_eq!(counter(names::RELEASED), None);
    let batches = counter(names::BATCH_SECONDS).unwrap();
    assert_eq!(batches.len(), 1);
    assert!(batches[0] > 0.0);
    assert_eq!(values.len(), 4, "{values:?}");
}

async fn record_pending_counts_the_waiting_messages_into_the_gauge<D: TestDb>(schema: D) {
    let outbox = schema.outbox().await;
    let mut tx = schema.pool().begin().await.unwrap();
    for _ in 0..2 {
        outbox
            .enqueue(&mut *tx, OutboxMessage::new("orders", "x"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let recorder = TestRecorder::default();
    let guard = metrics::set_default_local_recorder(&recorder);
    let pending = names::record_pending(&outbox, schema.pool()).await.unwrap();
    drop(guard);

    let table = table(&schema);
    assert_eq!(pending, 2);
    assert_eq!(names::outbox_label(&outbox), table);
    assert_eq!(
        recorder.values(),
        BTreeMap::from([(format!("{}{{outbox={table}}}", names::PENDING), vec![2.0])])
    );
}
