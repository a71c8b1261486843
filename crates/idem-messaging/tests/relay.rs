//! The outbox and its relay on PostgreSQL, publishing to brokers in memory that confirm, refuse,
//! stall or die: what is published, how often, and in which order.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{collections::HashMap, sync::Arc, time::Duration};

use idem_messaging::{
    BatchReport, Confirmations, DeadLetter, Envelope, Outbox, OutboxMessage, PublishError,
    Publisher, Relay,
};
use idem_test_support::require;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use common::{DiesAfterPublish, EVENTUALLY, Gated, Recorder, TestSchema};

/// Counts the pending messages no claim holds and no attempt was counted for: those any relay
/// could take now.
const FREE: &str = "SELECT count(*) FROM (
    SELECT 1 FROM {schema}.idem_outbox
    WHERE state = 'pending' AND attempts = 0 AND available_at <= now()
    FOR UPDATE SKIP LOCKED
) AS free";

/// Enqueues `messages` in one transaction.
async fn enqueue(
    schema: &TestSchema,
    outbox: &Outbox,
    messages: Vec<OutboxMessage>,
) -> Vec<String> {
    let mut tx = schema.pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for message in messages {
        ids.push(outbox.enqueue(&mut tx, message).await.unwrap().to_string());
    }
    tx.commit().await.unwrap();
    ids
}

/// Enqueues `good` messages to `orders` and, at position `at` among them, a message to `nowhere`;
/// returns the good ones' ids, in order, and the other's.
async fn enqueue_with_poison(
    schema: &TestSchema,
    outbox: &Outbox,
    good: usize,
    at: usize,
) -> (Vec<String>, String) {
    let mut messages: Vec<_> = (0..good)
        .map(|n| OutboxMessage::new("orders", format!("good {n}")))
        .collect();
    messages.insert(at, OutboxMessage::new("nowhere", "poison"));
    let mut ids = enqueue(schema, outbox, messages).await;
    let poison = ids.remove(at);
    (ids, poison)
}

/// The outbox's one dead letter.
async fn only_dead_letter(schema: &TestSchema, outbox: &Outbox) -> DeadLetter {
    let mut dead = outbox.dead_letters(&schema.pool, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    dead.remove(0)
}

/// The failed attempts, dead letters and published messages of `reports`, summed.
fn failed_dead_published(reports: &[BatchReport]) -> (usize, usize, usize) {
    reports.iter().fold((0, 0, 0), |(f, d, p), r| {
        (f + r.failed, d + r.dead_lettered, p + r.published)
    })
}

fn relay<P: Publisher>(schema: &TestSchema, outbox: &Outbox, publisher: P) -> Relay<P> {
    Relay::new(schema.pool.clone(), outbox.clone(), publisher)
        .backoff(Duration::ZERO, Duration::ZERO)
        .poll_interval(Duration::from_millis(50))
}

/// Runs cycles until one claims nothing and no message is pending.
async fn drain<P: Publisher>(
    relay: &Relay<P>,
    outbox: &Outbox,
    schema: &TestSchema,
) -> Vec<BatchReport> {
    let mut reports = Vec::new();
    loop {
        let report = relay.run_once().await.unwrap();
        reports.push(report);
        if report.claimed == 0 && outbox.pending(&schema.pool).await.unwrap() == 0 {
            return reports;
        }
    }
}

#[tokio::test]
async fn a_committed_message_is_published_with_its_id_headers_and_payload() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let message = OutboxMessage::new("orders.paid", r#"{"order":42}"#)
        .ordering_key("order-42")
        .header("content-type", "application/json")
        .header("trace", "abc");
    let ids = enqueue(&schema, &outbox, vec![message.clone()]).await;
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 1);
    let uuid = uuid::Uuid::parse_str(&ids[0]).unwrap();
    assert_eq!(uuid.get_version_num(), 7);

    let recorder = Recorder::default();
    let relay = relay(&schema, &outbox, recorder.clone());
    let report = relay.run_once().await.unwrap();

    assert_eq!((report.claimed, report.published, report.failed), (1, 1, 0));
    let confirmed = recorder.confirmed();
    assert_eq!(confirmed.len(), 1);
    assert_eq!(confirmed[0].id().as_str(), ids[0]);
    assert_eq!(confirmed[0].message(), &message);
    assert_eq!(confirmed[0].attempt(), 1);
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
    assert_eq!(relay.run_once().await.unwrap(), BatchReport::default());
}

#[tokio::test]
async fn a_rolled_back_enqueue_publishes_nothing() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;

    let mut tx = schema.pool.begin().await.unwrap();
    schema.book(&mut tx, "business", "order paid").await;
    outbox
        .enqueue(&mut tx, OutboxMessage::new("orders.paid", "42"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let recorder = Recorder::default();
    let report = relay(&schema, &outbox, recorder.clone())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report, BatchReport::default());
    assert!(recorder.confirmed().is_empty());
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
    assert_eq!(schema.ledger().await, 0);
}

#[tokio::test]
async fn a_refused_message_is_retried_then_dead_lettered_while_others_flow() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let (good, poison) = enqueue_with_poison(&schema, &outbox, 10, 3).await;

    let recorder = Recorder::refusing(|envelope| {
        (envelope.message().destination == "nowhere").then(|| PublishError::Rejected {
            reason: "NO_ROUTE".into(),
        })
    });
    let relay = relay(&schema, &outbox, recorder.clone())
        .batch_size(4)
        .max_attempts(3);
    let reports = drain(&relay, &outbox, &schema).await;

    assert_eq!(failed_dead_published(&reports), (3, 1, 10));
    assert_eq!(recorder.ids(), good);

    let dead = only_dead_letter(&schema, &outbox).await;
    assert_eq!(dead.id.as_str(), poison);
    assert_eq!(dead.attempts, 3);
    assert_eq!(dead.message.payload.as_ref(), b"poison");
    assert_eq!(dead.last_error.as_deref(), Some("NO_ROUTE"));
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);

    // Revived, it gets three attempts again.
    assert!(outbox.revive(&schema.pool, &dead.id).await.unwrap());
    assert!(!outbox.revive(&schema.pool, &dead.id).await.unwrap());
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 1);
    let report = relay.run_once().await.unwrap();
    assert_eq!(
        (report.claimed, report.failed, report.dead_lettered),
        (1, 1, 0)
    );
}

/// Panics on a batch that holds a message for `nowhere`; publishes the others through `inner`.
struct PanicsOnNowhere {
    inner: Recorder,
}

impl Publisher for PanicsOnNowhere {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        assert!(
            batch.iter().all(|e| e.message().destination != "nowhere"),
            "cannot publish to nowhere"
        );
        self.inner.publish_batch(batch).await
    }
}

#[tokio::test]
async fn a_message_the_publisher_panics_on_is_dead_lettered_and_the_others_published() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let (good, poison) = enqueue_with_poison(&schema, &outbox, 4, 2).await;

    let recorder = Recorder::default();
    let relay = relay(
        &schema,
        &outbox,
        PanicsOnNowhere {
            inner: recorder.clone(),
        },
    )
    .batch_size(5)
    .max_attempts(2);
    let reports = drain(&relay, &outbox, &schema).await;

    assert_eq!(failed_dead_published(&reports), (2, 1, 4));
    assert_eq!(recorder.ids(), good);
    let dead = only_dead_letter(&schema, &outbox).await;
    assert_eq!(dead.id.as_str(), poison);
    assert_eq!(dead.attempts, 2);
    assert_eq!(
        dead.last_error.as_deref(),
        Some("the publisher panicked: cannot publish to nowhere")
    );
}

#[tokio::test]
async fn an_unavailable_broker_costs_no_attempt() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    enqueue(
        &schema,
        &outbox,
        vec![
            OutboxMessage::new("orders", "1"),
            OutboxMessage::new("orders", "2"),
        ],
    )
    .await;

    let down = Recorder::refusing(|_| Some(PublishError::unavailable("connection refused")));
    let relay_down = relay(&schema, &outbox, down).max_attempts(1);
    for _ in 0..3 {
        let report = relay_down.run_once().await.unwrap();
        assert_eq!((report.claimed, report.released, report.failed), (2, 2, 0));
    }
    assert_eq!(
        schema
            .count("SELECT sum(attempts) FROM {schema}.idem_outbox")
            .await,
        0
    );
    assert_eq!(schema.count(FREE).await, 2);

    let up = Recorder::default();
    let report = relay(&schema, &outbox, up.clone())
        .max_attempts(1)
        .run_once()
        .await
        .unwrap();
    assert_eq!((report.published, report.dead_lettered), (2, 0));
    assert_eq!(up.confirmed().len(), 2);
}

#[tokio::test]
async fn a_relay_that_dies_after_publishing_releases_its_claim_at_once_and_costs_no_attempt() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let ids = enqueue(&schema, &outbox, vec![OutboxMessage::new("orders", "1")]).await;

    let broker = Recorder::default();
    let published = Arc::new(Notify::new());
    // A lease far longer than the test: only the end of the claim's transaction frees the
    // message.
    let dying = relay(
        &schema,
        &outbox,
        DiesAfterPublish {
            inner: broker.clone(),
            published: Arc::clone(&published),
        },
    )
    .lease(Duration::from_secs(600))
    .max_attempts(1);
    let task = tokio::spawn(async move { dying.run_once().await });
    published.notified().await;
    task.abort(); // killed between the broker's confirmation and marking the message sent
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 1);

    // Another relay takes the message over as soon as the dead claim is rolled back.
    let survivor = relay(&schema, &outbox, broker.clone()).max_attempts(1);
    let report = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let report = survivor.run_once().await.unwrap();
            if report.claimed > 0 {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        (report.published, report.taken_over, report.dead_lettered),
        (1, 0, 0)
    );
    assert_eq!(broker.ids(), [ids[0].clone(), ids[0].clone()]);
    // The death was not the message's fault: with one attempt allowed, it is still a first.
    assert_eq!(broker.confirmed()[1].attempt(), 1);
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
    assert!(
        outbox
            .dead_letters(&schema.pool, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_relay_whose_lease_ran_out_does_not_mark_the_new_claim() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    enqueue(&schema, &outbox, vec![OutboxMessage::new("orders", "1")]).await;
    let broker = Recorder::default();
    let gate = |open: &Arc<Semaphore>, waiting: &Arc<Notify>| Gated {
        inner: broker.clone(),
        open: Arc::clone(open),
        waiting: Arc::clone(waiting),
    };
    let (open_a, waiting_a) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let (open_b, waiting_b) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let slow = relay(&schema, &outbox, gate(&open_a, &waiting_a)).lease(Duration::from_millis(200));
    let other = relay(&schema, &outbox, gate(&open_b, &waiting_b)).lease(Duration::from_secs(60));

    let a = tokio::spawn(async move { slow.run_once().await.unwrap() });
    waiting_a.notified().await;
    // A's lease runs out while it waits for its confirmation; B claims the message.
    let b = tokio::spawn(async move {
        loop {
            let report = other.run_once().await.unwrap();
            if report.claimed > 0 {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    waiting_b.notified().await;
    open_a.add_permits(1);
    let late = a.await.unwrap();
    assert_eq!((late.published, late.taken_over), (1, 1));
    // B's claim still holds the message.
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 1);

    open_b.add_permits(1);
    let report = b.await.unwrap();
    assert_eq!((report.published, report.taken_over), (1, 0));
    assert_eq!(broker.confirmed().len(), 2);
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
}

#[tokio::test]
async fn per_key_order_holds_through_retries() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    const KEYS: usize = 4;
    const PER_KEY: usize = 12;
    // Interleaved keys; every third message of a key is enqueued in a transaction of its own.
    let mut pending = Vec::new();
    for n in 0..PER_KEY {
        for key in 0..KEYS {
            pending.push(
                OutboxMessage::new("orders", format!("{key}:{n}")).ordering_key(format!("k{key}")),
            );
        }
        if n % 3 == 2 {
            enqueue(&schema, &outbox, std::mem::take(&mut pending)).await;
        }
    }
    enqueue(&schema, &outbox, pending).await;

    // The broker refuses the first attempt of every fifth message: with ordering on, the rest of
    // its key waits for the retry.
    let recorder = Recorder::refusing(|envelope| {
        let payload = std::str::from_utf8(&envelope.message().payload)
            .unwrap()
            .to_owned();
        let n: usize = payload.split(':').nth(1).unwrap().parse().unwrap();
        (n % 5 == 1 && envelope.attempt() == 1).then(|| PublishError::Rejected {
            reason: "try again".into(),
        })
    });
    let relay = relay(&schema, &outbox, recorder.clone())
        .ordering(true)
        .batch_size(16);
    drain(&relay, &outbox, &schema).await;

    let mut sequences: HashMap<String, Vec<usize>> = HashMap::new();
    for envelope in recorder.confirmed() {
        let payload = std::str::from_utf8(&envelope.message().payload)
            .unwrap()
            .to_owned();
        let (key, n) = payload.split_once(':').unwrap();
        sequences
            .entry(key.to_owned())
            .or_default()
            .push(n.parse().unwrap());
    }
    assert_eq!(sequences.len(), KEYS);
    for (key, sequence) in sequences {
        assert_eq!(sequence, (0..PER_KEY).collect::<Vec<_>>(), "key {key}");
    }
    // Never two messages of one key in a batch.
    for batch in recorder.batches.lock().unwrap().iter() {
        let mut keys: Vec<_> = batch
            .iter()
            .map(|e| e.message().ordering_key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), batch.len());
    }
}

#[tokio::test]
async fn a_notification_wakes_an_idle_relay() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let recorder = Recorder::default();
    // Without the notification it would not look again for an hour.
    let relay = relay(&schema, &outbox, recorder.clone()).poll_interval(Duration::from_secs(3600));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    // Let it find the outbox empty and go to sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids = enqueue(&schema, &outbox, vec![OutboxMessage::new("orders", "1")]).await;

    tokio::time::timeout(EVENTUALLY, async {
        while recorder.confirmed().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the relay is woken by the enqueue's notification");
    assert_eq!(recorder.ids(), ids);
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn shutdown_gives_back_what_could_not_be_published() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    enqueue(
        &schema,
        &outbox,
        vec![
            OutboxMessage::new("orders", "1"),
            OutboxMessage::new("orders", "2"),
        ],
    )
    .await;
    let (open, waiting) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let stalled = Gated {
        inner: Recorder::default(),
        open,
        waiting: Arc::clone(&waiting),
    };
    let relay = relay(&schema, &outbox, stalled).shutdown_grace(Duration::from_millis(100));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    waiting.notified().await;
    shutdown.cancel();
    tokio::time::timeout(EVENTUALLY, task)
        .await
        .unwrap()
        .unwrap();

    // Both messages are due again, unclaimed, their attempt not counted.
    assert_eq!(schema.count(FREE).await, 2);
    assert_eq!(
        schema
            .count("SELECT count(*) FROM {schema}.idem_outbox WHERE attempts = 0")
            .await,
        2
    );
}

#[tokio::test]
async fn two_relays_publish_every_message_once() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let mut ids = Vec::new();
    for chunk in 0..10 {
        let messages = (0..100)
            .map(|n| OutboxMessage::new("orders", format!("{chunk}-{n}")))
            .collect();
        ids.extend(enqueue(&schema, &outbox, messages).await);
    }
    let broker = Recorder::default();
    let relays: Vec<_> = (0..2)
        .map(|n| {
            let relay = relay(&schema, &outbox, broker.clone())
                .name(format!("relay-{n}"))
                .batch_size(25);
            tokio::spawn(async move { drain_owned(relay).await })
        })
        .collect();
    let mut per_relay = Vec::new();
    for relay in relays {
        per_relay.push(relay.await.unwrap());
    }
    assert_eq!(per_relay.iter().sum::<usize>(), 1000);
    let mut published = broker.ids();
    published.sort();
    ids.sort();
    assert_eq!(published, ids);
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
}

/// Runs cycles until one claims nothing; returns how many messages it published.
async fn drain_owned<P: Publisher>(relay: Relay<P>) -> usize {
    let mut published = 0;
    loop {
        let report = relay.run_once().await.unwrap();
        if report.claimed == 0 {
            return published;
        }
        published += report.published;
    }
}

#[tokio::test]
async fn behind_a_backlog_the_next_batch_is_claimed_early_and_given_back_at_shutdown() {
    let url = require!(Postgres);
    let schema = TestSchema::new(&url).await;
    let outbox = schema.outbox().await;
    let messages = (0..30)
        .map(|n| OutboxMessage::new("orders", n.to_string()))
        .collect();
    let ids = enqueue(&schema, &outbox, messages).await;
    let broker = Recorder::default();
    let (open, waiting) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
    let relay = relay(
        &schema,
        &outbox,
        Gated {
            inner: broker.clone(),
            open: Arc::clone(&open),
            waiting: Arc::clone(&waiting),
        },
    )
    .batch_size(10);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });

    // The first batch waits for its confirmations; meanwhile the second is claimed.
    waiting.notified().await;
    tokio::time::timeout(EVENTUALLY, async {
        while schema.count(FREE).await > 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the next batch is claimed while the first is in flight");
    shutdown.cancel();
    open.add_permits(1);
    task.await.unwrap();

    // The first batch was published; the second is back in line, its attempt not counted.
    assert_eq!(broker.ids(), ids[..10]);
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 20);
    assert_eq!(schema.count(FREE).await, 20);
    assert_eq!(
        schema
            .count("SELECT sum(attempts) FROM {schema}.idem_outbox")
            .await,
        0
    );
}
