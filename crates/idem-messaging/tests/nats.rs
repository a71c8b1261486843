//! NATS JetStream end to end: the publisher's `PubAck`s, id and headers; the stream's duplicate
//! window; the consumer helper's acks, naks and skipped redeliveries; and the outbox → relay →
//! JetStream → inbox → ledger path, with competing relays and a relay that dies between publish
//! and mark-sent.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_nats::{
    HeaderMap,
    jetstream::{
        self, Message,
        consumer::{AckPolicy, PullConsumer, pull},
    },
};
use futures_util::StreamExt;
use idem_messaging::{
    ConsumerName, Envelope, Error, Handled, Incoming, MessageId, Outbox, OutboxMessage, PgInbox,
    PublishError, Publisher, Relay, nats::NatsPublisher,
};
use idem_test_support::{NatsStream, require};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use common::{DiesAfterPublish, EVENTUALLY, TestSchema, consumer};

/// Both servers, or the test returns.
macro_rules! require_servers {
    () => {{
        let postgres = require!(Postgres);
        let nats = require!(Nats);
        (postgres, nats)
    }};
}

/// A stream of the test's own, capturing one subject, deleted when this is dropped.
struct TestStream(NatsStream);

impl TestStream {
    /// A stream whose duplicate window is `window`.
    async fn new(url: &str, window: Duration) -> Self {
        Self(NatsStream::create(url, window).await)
    }

    /// A durable pull consumer with explicit acks, redelivering after `ack_wait`.
    async fn consumer(&self, ack_wait: Duration) -> PullConsumer {
        let stream = self.0.jetstream().get_stream(self.0.name()).await.unwrap();
        stream
            .create_consumer(pull::Config {
                durable_name: Some("ledger".into()),
                ack_policy: AckPolicy::Explicit,
                ack_wait,
                ..pull::Config::default()
            })
            .await
            .unwrap()
    }

    fn publisher(&self) -> NatsPublisher {
        NatsPublisher::new(self.0.url().to_owned())
    }

    fn message(&self, payload: &str) -> OutboxMessage {
        OutboxMessage::new(self.0.subject().to_owned(), payload.to_owned())
    }
}

impl std::ops::Deref for TestStream {
    type Target = NatsStream;

    fn deref(&self) -> &NatsStream {
        &self.0
    }
}

/// The next message the consumer is given, waiting for it to arrive.
async fn next(messages: &mut pull::Stream) -> Message {
    tokio::time::timeout(EVENTUALLY, messages.next())
        .await
        .expect("a message arrives")
        .expect("the consumer's stream goes on")
        .unwrap()
}

/// The consumer's state once it has no message in flight (every ack has reached the server).
async fn settled(consumer: &PullConsumer) -> jetstream::consumer::Info {
    tokio::time::timeout(EVENTUALLY, async {
        loop {
            let info = consumer.get_info().await.unwrap();
            if info.num_ack_pending == 0 {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the consumer settles its messages")
}

fn envelope(id: &str, message: OutboxMessage) -> Envelope {
    Envelope::new(id.parse().unwrap(), message, 1)
}

/// The consumer's handler: one ledger row per message, keyed by its id, holding its payload.
async fn consume(
    schema: &TestSchema,
    inbox: &PgInbox,
    name: &ConsumerName,
    message: Message,
) -> Result<Handled<()>, Error> {
    inbox
        .consume(&schema.pool, name, message, |tx, message| {
            Box::pin(async move {
                let entry = std::str::from_utf8(message.payload()).unwrap();
                schema.book(tx, message.message_id().unwrap(), entry).await;
                Ok(())
            })
        })
        .await
}

#[tokio::test]
async fn a_confirmed_publish_carries_the_id_and_the_headers() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let publisher = NatsPublisher::connect(nats.clone()).await.unwrap();
    let batch = [
        envelope(
            "m-1",
            stream
                .message("one")
                .header("content-type", "text/plain")
                .header("trace", "a")
                .header("trace", "b"),
        ),
        envelope("m-2", stream.message("two")),
        envelope(
            "m-3",
            OutboxMessage::new(format!("{}_nowhere", stream.subject()), "lost"),
        ),
    ];
    let confirmations = publisher.publish_batch(&batch).await;

    assert_eq!(confirmations.len(), 3);
    assert!(confirmations[0].is_ok(), "{:?}", confirmations[0]);
    assert!(confirmations[1].is_ok(), "{:?}", confirmations[1]);
    match &confirmations[2] {
        Err(PublishError::Rejected { reason }) => {
            assert_eq!(reason, "no stream found for given subject");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(stream.stored().await, 2);

    let consumer = stream.consumer(Duration::from_secs(30)).await;
    let mut messages = consumer.messages().await.unwrap();
    let first = next(&mut messages).await;
    assert_eq!(first.message_id(), Some("m-1"));
    assert_eq!(first.payload(), b"one");
    assert_eq!(first.subject.as_str(), stream.subject());
    let headers = first.headers.as_ref().unwrap();
    assert_eq!(headers.get("content-type").unwrap().as_str(), "text/plain");
    let traces: Vec<&str> = headers.get_all("trace").map(|v| v.as_str()).collect();
    assert_eq!(traces, ["a", "b"]);
    let second = next(&mut messages).await;
    assert_eq!(second.message_id(), Some("m-2"));
    assert_eq!(second.payload(), b"two");
    Incoming::ack(first).await.unwrap();
    Incoming::ack(second).await.unwrap();
    let info = settled(&consumer).await;
    assert_eq!((info.num_pending, info.delivered.stream_sequence), (0, 2));
}

#[tokio::test]
async fn the_duplicate_window_drops_a_republish_of_the_same_id() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let publisher = stream.publisher();
    let message = envelope("m-1", stream.message("+10"));

    publisher.publish(&message).await.unwrap();
    // A relay that lost its claim publishes the same message again: confirmed, not stored.
    publisher.publish(&message).await.unwrap();
    assert_eq!(stream.stored().await, 1);

    // What JetStream answered the copy, seen through the raw client.
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", "m-1");
    let ack = stream
        .jetstream()
        .publish_with_headers(stream.subject().to_owned(), headers, "+10".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(ack.duplicate);
    assert_eq!(ack.sequence, 1);

    publisher
        .publish(&envelope("m-2", stream.message("+20")))
        .await
        .unwrap();
    assert_eq!(stream.stored().await, 2);
}

#[tokio::test]
async fn a_redelivery_after_a_crash_before_the_ack_is_skipped() {
    let (postgres, nats) = require_servers!();
    let (schema, stream) = (
        TestSchema::new(&postgres).await,
        TestStream::new(&nats, Duration::from_secs(120)).await,
    );
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");
    stream
        .publisher()
        .publish(&envelope("m-1", stream.message("+10")))
        .await
        .unwrap();
    let consumer = stream.consumer(Duration::from_millis(500)).await;
    let mut messages = consumer.messages().await.unwrap();

    // The consumer commits its effects, then dies before acknowledging.
    let doomed = next(&mut messages).await;
    assert_eq!(doomed.info().unwrap().delivered, 1);
    let id: MessageId = doomed.message_id().unwrap().parse().unwrap();
    let first = inbox
        .handle(&schema.pool, &ledger, &id, |tx| {
            Box::pin(async {
                schema.book(tx, id.as_str(), "+10").await;
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap();
    assert_eq!(first, Handled::Processed(()));
    drop(doomed);

    // Past the ack wait, JetStream delivers it again; the inbox skips and acknowledges it.
    let redelivery = next(&mut messages).await;
    assert_eq!(redelivery.info().unwrap().delivered, 2);
    assert_eq!(redelivery.message_id(), Some("m-1"));
    let second = consume(&schema, &inbox, &ledger, redelivery).await.unwrap();
    assert_eq!(second, Handled::Duplicate);

    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
    let info = settled(&consumer).await;
    assert_eq!((info.num_pending, info.num_redelivered), (0, 0));
    assert_eq!(info.ack_floor.stream_sequence, 1);
}

#[tokio::test]
async fn a_failed_handler_naks_and_leaves_no_inbox_row() {
    let (postgres, nats) = require_servers!();
    let (schema, stream) = (
        TestSchema::new(&postgres).await,
        TestStream::new(&nats, Duration::from_secs(120)).await,
    );
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");
    stream
        .publisher()
        .publish(&envelope("m-1", stream.message("+10")))
        .await
        .unwrap();
    // An ack wait of an hour: only the nak can bring the message back within the test.
    let consumer = stream.consumer(Duration::from_secs(3600)).await;
    let mut messages = consumer.messages().await.unwrap();

    let message = next(&mut messages).await;
    let failed = inbox
        .consume(&schema.pool, &ledger, message, |tx, message| {
            let schema = &schema;
            Box::pin(async move {
                schema.book(tx, message.message_id().unwrap(), "+10").await;
                Err::<(), _>(anyhow::anyhow!("the ledger is closed"))
            })
        })
        .await;
    assert_eq!(failed.unwrap_err().to_string(), "the ledger is closed");
    assert_eq!(schema.inbox_rows().await, 0);
    assert_eq!(schema.ledger().await, 0);

    // Nakked: it comes back at once, and this time it is processed.
    let redelivery = next(&mut messages).await;
    assert_eq!(redelivery.info().unwrap().delivered, 2);
    assert_eq!(
        consume(&schema, &inbox, &ledger, redelivery).await.unwrap(),
        Handled::Processed(())
    );
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
    let info = settled(&consumer).await;
    assert_eq!(info.ack_floor.stream_sequence, 1);
}

#[tokio::test]
async fn a_message_without_an_id_is_terminated_not_redelivered() {
    let (postgres, nats) = require_servers!();
    let (schema, stream) = (
        TestSchema::new(&postgres).await,
        TestStream::new(&nats, Duration::from_secs(120)).await,
    );
    let inbox = schema.inbox().await;
    stream
        .jetstream()
        .publish(stream.subject().to_owned(), "anonymous".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let consumer = stream.consumer(Duration::from_millis(300)).await;
    let mut messages = consumer.messages().await.unwrap();

    let message = next(&mut messages).await;
    let outcome = consume(&schema, &inbox, &common::consumer("ledger"), message).await;
    assert!(
        matches!(outcome, Err(Error::MissingMessageId)),
        "{outcome:?}"
    );
    assert_eq!(schema.ledger().await, 0);
    // Several ack waits later, it has not come back.
    let again = tokio::time::timeout(Duration::from_secs(1), messages.next()).await;
    assert!(again.is_err(), "redelivered: {again:?}");
    let info = settled(&consumer).await;
    assert_eq!((info.num_pending, info.num_redelivered), (0, 0));
}

/// Consumes the stream in a task until `stop`; counts the duplicates skipped.
fn spawn_consumer(
    schema: Arc<TestSchema>,
    inbox: PgInbox,
    consumer: PullConsumer,
    duplicates: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut messages = consumer.messages().await.unwrap();
        let name = common::consumer("ledger");
        loop {
            let message = tokio::select! {
                next = messages.next() => next,
                () = stop.cancelled() => return,
            };
            let Some(message) = message else { return };
            match consume(&schema, &inbox, &name, message.unwrap()).await {
                Ok(Handled::Processed(())) => {}
                Ok(Handled::Duplicate) => {
                    duplicates.fetch_add(1, Ordering::SeqCst);
                }
                Err(error) => panic!("the ledger consumer failed: {error}"),
            }
        }
    })
}

/// Waits until the ledger holds `count` rows and the outbox is empty.
async fn wait_for_ledger(schema: &TestSchema, outbox: &Outbox, count: i64) {
    tokio::time::timeout(EVENTUALLY, async {
        while schema.ledger().await < count || outbox.pending(&schema.pool).await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every message reaches the ledger");
}

#[tokio::test]
async fn two_relays_deliver_a_thousand_messages_each_applied_once() {
    let (postgres, nats) = require_servers!();
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    const N: usize = 1000;

    let stop = CancellationToken::new();
    let duplicates = Arc::new(AtomicUsize::new(0));
    let consumer = stream.consumer(Duration::from_secs(30)).await;
    let consumer_task = spawn_consumer(
        Arc::clone(&schema),
        inbox,
        consumer.clone(),
        Arc::clone(&duplicates),
        stop.clone(),
    );
    let relays: Vec<_> = (0..2)
        .map(|n| {
            let relay = Relay::new(schema.pool.clone(), outbox.clone(), stream.publisher())
                .name(format!("relay-{n}"))
                .batch_size(50)
                .poll_interval(Duration::from_millis(100));
            let stop = stop.clone();
            tokio::spawn(async move { relay.run(stop).await })
        })
        .collect();

    // Enqueued while the relays run, in transactions of 50 from four producers.
    let producers: Vec<_> = (0..4)
        .map(|producer| {
            let (schema, outbox, subject) = (
                Arc::clone(&schema),
                outbox.clone(),
                stream.subject().to_owned(),
            );
            tokio::spawn(async move {
                for chunk in 0..N / 4 / 50 {
                    let mut tx = schema.pool.begin().await.unwrap();
                    for n in 0..50 {
                        let payload = format!("{producer}/{chunk}/{n}");
                        outbox
                            .enqueue(&mut tx, OutboxMessage::new(subject.clone(), payload))
                            .await
                            .unwrap();
                    }
                    tx.commit().await.unwrap();
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.unwrap();
    }

    wait_for_ledger(&schema, &outbox, N as i64).await;
    settled(&consumer).await;
    stop.cancel();
    for relay in relays {
        relay.await.unwrap();
    }
    consumer_task.await.unwrap();

    assert_eq!(schema.ledger().await, N as i64);
    assert_eq!(schema.duplicated_effects().await, 0);
    assert_eq!(schema.inbox_rows().await, N as i64);
    assert_eq!(
        schema
            .count("SELECT count(DISTINCT entry) FROM {schema}.ledger")
            .await,
        N as i64
    );
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
    // Every message was stored once: two relays never published one twice here, and any copy
    // would have fallen in the duplicate window.
    assert_eq!(stream.stored().await, N as u64);
    assert_eq!(duplicates.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_relay_killed_between_publish_and_mark_sent_is_absorbed_by_the_duplicate_window() {
    let (postgres, nats) = require_servers!();
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let mut tx = schema.pool.begin().await.unwrap();
    let id = outbox
        .enqueue(&mut tx, stream.message("+10"))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let published = Arc::new(Notify::new());
    let dying = Relay::new(
        schema.pool.clone(),
        outbox.clone(),
        DiesAfterPublish {
            inner: stream.publisher(),
            published: Arc::clone(&published),
        },
    )
    .lease(Duration::from_millis(500));
    let task = tokio::spawn(async move { dying.run_once().await });
    published.notified().await;
    task.abort(); // killed after the PubAck, before marking the message sent
    let _ = task.await;

    // The survivor publishes the message again once the lease has run out.
    let survivor = Relay::new(schema.pool.clone(), outbox.clone(), stream.publisher())
        .poll_interval(Duration::from_millis(50));
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
    assert_eq!((report.published, report.taken_over), (1, 0));
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
    assert_eq!(stream.stored().await, 1, "the stream dropped the copy");

    let stop = CancellationToken::new();
    let duplicates = Arc::new(AtomicUsize::new(0));
    let consumer = stream.consumer(Duration::from_secs(30)).await;
    let consumer_task = spawn_consumer(
        Arc::clone(&schema),
        inbox,
        consumer.clone(),
        Arc::clone(&duplicates),
        stop.clone(),
    );
    wait_for_ledger(&schema, &outbox, 1).await;
    settled(&consumer).await;
    stop.cancel();
    consumer_task.await.unwrap();

    assert_eq!(duplicates.load(Ordering::SeqCst), 0);
    assert_eq!(schema.ledger().await, 1);
    let booked: String = sqlx::query_scalar(schema.sql("SELECT message_id FROM {schema}.ledger"))
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert_eq!(booked, id.as_str());
}

#[tokio::test]
async fn an_unreachable_server_makes_the_broker_unavailable() {
    // A port nothing listens on: connecting fails, which says nothing about the message.
    let publisher = NatsPublisher::new("nats://127.0.0.1:1");
    let outcome = publisher
        .publish(&envelope("m-1", OutboxMessage::new("orders", "x")))
        .await;
    assert!(
        matches!(outcome, Err(PublishError::Unavailable(_))),
        "{outcome:?}"
    );
}
