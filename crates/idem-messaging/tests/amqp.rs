//! RabbitMQ end to end: the publisher's confirms, id and headers; the consumer helper's acks,
//! requeues and skipped redeliveries; and the outbox → relay → RabbitMQ → inbox → ledger path,
//! with competing relays, a relay that dies between publish and mark-sent, a poison message and
//! per-key order.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures_util::StreamExt;
use idem_messaging::{
    Confirmations, ConsumerName, Envelope, Error, Handled, Incoming, MessageId, Outbox,
    OutboxMessage, PgInbox, PublishError, Publisher, Relay, amqp::AmqpPublisher,
};
use idem_test_support::{require, unique_name};
use lapin::{
    Channel, Connection, ConnectionProperties,
    message::Delivery,
    options::{
        BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
        QueueDeclareOptions, QueueDeleteOptions,
    },
    types::{AMQPValue, FieldTable},
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use common::{DiesAfterPublish, EVENTUALLY, TestSchema, consumer};

/// Both servers, or the test returns.
macro_rules! require_servers {
    () => {{
        let postgres = require!(Postgres);
        let amqp = require!(Amqp);
        (postgres, amqp)
    }};
}

/// A queue of the test's own on the default exchange, deleted when this is dropped (and by the
/// broker ten minutes after its last use, should the test die first).
struct TestQueue {
    url: String,
    name: String,
    connection: Connection,
    channel: Channel,
}

impl TestQueue {
    async fn new(url: &str) -> Self {
        let name = unique_name("idem_test_");
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .expect("connect to the test broker");
        let channel = connection.create_channel().await.unwrap();
        let mut arguments = FieldTable::default();
        arguments.insert("x-expires".into(), AMQPValue::LongUInt(600_000));
        channel
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                arguments,
            )
            .await
            .unwrap();
        Self {
            url: url.to_owned(),
            name,
            connection,
            channel,
        }
    }

    /// A new channel, as another consumer process would have.
    async fn channel(&self) -> Channel {
        self.connection.create_channel().await.unwrap()
    }

    /// Takes one message, unacknowledged, waiting for it to arrive.
    async fn get(&self, channel: &Channel) -> Delivery {
        tokio::time::timeout(EVENTUALLY, async {
            loop {
                let got = channel
                    .basic_get(self.name.as_str().into(), BasicGetOptions::default())
                    .await
                    .unwrap();
                if let Some(message) = got {
                    return message.delivery;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("a message arrives")
    }

    /// How many messages wait in the queue (not counting unacknowledged ones).
    async fn ready(&self) -> u32 {
        self.channel
            .queue_declare(
                self.name.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
    }

    fn publisher(&self) -> AmqpPublisher {
        AmqpPublisher::new(self.url.clone())
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
                let channel = connection.create_channel().await?;
                channel
                    .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                    .await?;
                connection.close(200, "done".into()).await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(error)) = deleted {
            eprintln!("could not delete the test queue {}: {error:#}", self.name);
        }
    }
}

/// The consumer's handler: one ledger row per message, keyed by its id, holding its payload.
async fn consume(
    schema: &TestSchema,
    inbox: &PgInbox,
    name: &ConsumerName,
    delivery: Delivery,
) -> Result<Handled<()>, Error> {
    inbox
        .consume(&schema.pool, name, delivery, |tx, delivery| {
            Box::pin(async move {
                let entry = std::str::from_utf8(delivery.payload()).unwrap();
                schema.book(tx, delivery.message_id().unwrap(), entry).await;
                Ok(())
            })
        })
        .await
}

/// Consumes `queue` in a task until `stop`, one delivery at a time; counts duplicates skipped.
fn spawn_consumer(
    schema: Arc<TestSchema>,
    inbox: PgInbox,
    channel: Channel,
    queue: String,
    duplicates: Arc<AtomicUsize>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        channel
            .basic_qos(64, BasicQosOptions::default())
            .await
            .unwrap();
        let mut deliveries = channel
            .basic_consume(
                queue.as_str().into(),
                "ledger".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let name = consumer("ledger");
        loop {
            let delivery = tokio::select! {
                next = deliveries.next() => next,
                () = stop.cancelled() => return,
            };
            let Some(delivery) = delivery else { return };
            match consume(&schema, &inbox, &name, delivery.unwrap()).await {
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
    .unwrap_or_else(|_| panic!("the ledger reaches {count} rows"));
}

fn envelope(id: &str, message: OutboxMessage) -> Envelope {
    Envelope::new(id.parse().unwrap(), message, 1)
}

#[tokio::test]
async fn a_confirmed_publish_carries_the_id_headers_and_payload() {
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let publisher = AmqpPublisher::connect(amqp.clone()).await.unwrap();
    let message = OutboxMessage::new(queue.name.clone(), "hello")
        .header("content-type", "text/plain")
        .header("trace", "t-1");

    publisher.publish(&envelope("m-1", message)).await.unwrap();

    let delivery = queue.get(&queue.channel).await;
    assert_eq!(delivery.message_id(), Some("m-1"));
    assert_eq!(delivery.payload(), b"hello");
    assert_eq!(delivery.properties.delivery_mode(), &Some(2));
    let headers = delivery.properties.headers().clone().unwrap();
    let header = |name: &str| match headers.inner().get(name) {
        Some(AMQPValue::LongString(value)) => value.to_string(),
        other => panic!("header {name}: {other:?}"),
    };
    assert_eq!(header("content-type"), "text/plain");
    assert_eq!(header("trace"), "t-1");
    assert_eq!(headers.inner().len(), 2);
    delivery.ack().await.unwrap();
}

#[tokio::test]
async fn an_unroutable_message_is_rejected_and_the_channel_survives() {
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let publisher = queue.publisher();
    let batch = [
        envelope(
            "m-1",
            OutboxMessage::new(format!("{}_nowhere", queue.name), "lost"),
        ),
        envelope("m-2", OutboxMessage::new(queue.name.clone(), "kept")),
    ];

    let confirmations = publisher.publish_batch(&batch).await;

    match &confirmations[0] {
        Err(PublishError::Rejected { reason }) => assert!(reason.contains("312"), "{reason}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(matches!(confirmations[1], Ok(())), "{:?}", confirmations[1]);
    assert_eq!(confirmations.len(), 2);
    assert_eq!(queue.get(&queue.channel).await.message_id(), Some("m-2"));
}

#[tokio::test]
async fn a_return_is_matched_to_its_message_among_many_confirmations() {
    // The broker acknowledges a busy channel's messages several at a time (`multiple`), and
    // lapin hands a return to whichever confirmation it resolves first: only the message id
    // says which message came back.
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let publisher = queue.publisher();
    let batch: Vec<Envelope> = (0..300)
        .map(|n| {
            let destination = if n == 150 {
                format!("{}_nowhere", queue.name)
            } else {
                queue.name.clone()
            };
            envelope(
                &format!("m-{n}"),
                OutboxMessage::new(destination, format!("{n}")),
            )
        })
        .collect();

    let confirmations = publisher.publish_batch(&batch).await;

    let rejected: Vec<usize> = confirmations
        .iter()
        .enumerate()
        .filter(|(_, confirmation)| confirmation.is_err())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(rejected, [150]);
    match &confirmations[150] {
        Err(PublishError::Rejected { reason }) => assert!(reason.contains("312"), "{reason}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn a_redelivery_after_a_crash_before_the_ack_is_skipped() {
    let (postgres, amqp) = require_servers!();
    let (schema, queue) = (
        TestSchema::new(&postgres).await,
        TestQueue::new(&amqp).await,
    );
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");
    queue
        .publisher()
        .publish(&envelope(
            "m-1",
            OutboxMessage::new(queue.name.clone(), "+10"),
        ))
        .await
        .unwrap();

    // The first consumer commits its effects, then dies before acknowledging.
    let doomed = queue.channel().await;
    let delivery = queue.get(&doomed).await;
    assert!(!delivery.redelivered);
    let id: MessageId = delivery.message_id().unwrap().parse().unwrap();
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
    doomed.close(200, "crash".into()).await.unwrap();

    // The broker hands the message to the next consumer, which skips and acknowledges it.
    let survivor = queue.channel().await;
    let redelivery = queue.get(&survivor).await;
    assert!(redelivery.redelivered);
    assert_eq!(redelivery.message_id(), Some("m-1"));
    let second = consume(&schema, &inbox, &ledger, redelivery).await.unwrap();
    assert_eq!(second, Handled::Duplicate);

    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
    survivor.close(200, "done".into()).await.unwrap();
    assert_eq!(queue.ready().await, 0, "the duplicate was acknowledged");
}

#[tokio::test]
async fn a_failed_handler_requeues_and_leaves_no_inbox_row() {
    let (postgres, amqp) = require_servers!();
    let (schema, queue) = (
        TestSchema::new(&postgres).await,
        TestQueue::new(&amqp).await,
    );
    let inbox = schema.inbox().await;
    let ledger = consumer("ledger");
    queue
        .publisher()
        .publish(&envelope(
            "m-1",
            OutboxMessage::new(queue.name.clone(), "+10"),
        ))
        .await
        .unwrap();

    let delivery = queue.get(&queue.channel).await;
    let failed = inbox
        .consume(&schema.pool, &ledger, delivery, |tx, delivery| {
            let schema = &schema;
            Box::pin(async move {
                schema.book(tx, delivery.message_id().unwrap(), "+10").await;
                Err::<(), _>(anyhow::anyhow!("the ledger is closed"))
            })
        })
        .await;
    assert_eq!(failed.unwrap_err().to_string(), "the ledger is closed");
    assert_eq!(schema.inbox_rows().await, 0);
    assert_eq!(schema.ledger().await, 0);

    // Requeued: it comes back, and this time it is processed.
    let redelivery = queue.get(&queue.channel).await;
    assert!(redelivery.redelivered);
    assert_eq!(
        consume(&schema, &inbox, &ledger, redelivery).await.unwrap(),
        Handled::Processed(())
    );
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
}

#[tokio::test]
async fn a_message_without_an_id_is_rejected_not_requeued() {
    let (postgres, amqp) = require_servers!();
    let (schema, queue) = (
        TestSchema::new(&postgres).await,
        TestQueue::new(&amqp).await,
    );
    let inbox = schema.inbox().await;
    queue
        .channel
        .basic_publish(
            "".into(),
            queue.name.as_str().into(),
            BasicPublishOptions::default(),
            b"anonymous",
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap();

    let delivery = queue.get(&queue.channel).await;
    let outcome = consume(&schema, &inbox, &consumer("ledger"), delivery).await;
    assert!(
        matches!(outcome, Err(Error::MissingMessageId)),
        "{outcome:?}"
    );
    assert_eq!(schema.ledger().await, 0);
    assert_eq!(queue.ready().await, 0);
}

#[tokio::test]
async fn two_relays_deliver_a_thousand_messages_each_applied_once() {
    let (postgres, amqp) = require_servers!();
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let queue = TestQueue::new(&amqp).await;
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    const N: usize = 1000;

    let stop = CancellationToken::new();
    let duplicates = Arc::new(AtomicUsize::new(0));
    let consumer_task = spawn_consumer(
        Arc::clone(&schema),
        inbox,
        queue.channel().await,
        queue.name.clone(),
        Arc::clone(&duplicates),
        stop.clone(),
    );
    let relays: Vec<_> = (0..2)
        .map(|n| {
            let relay = Relay::new(schema.pool.clone(), outbox.clone(), queue.publisher())
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
            let (schema, outbox, queue) = (Arc::clone(&schema), outbox.clone(), queue.name.clone());
            tokio::spawn(async move {
                for chunk in 0..N / 4 / 50 {
                    let mut tx = schema.pool.begin().await.unwrap();
                    for n in 0..50 {
                        let payload = format!("{producer}/{chunk}/{n}");
                        outbox
                            .enqueue(&mut tx, OutboxMessage::new(queue.clone(), payload))
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
    // Give a stray copy, if any, the time to arrive and be counted.
    tokio::time::sleep(Duration::from_millis(300)).await;
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
    eprintln!(
        "{N} messages, {} redeliveries skipped",
        duplicates.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn a_relay_killed_between_publish_and_mark_sent_causes_one_skipped_copy() {
    let (postgres, amqp) = require_servers!();
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let queue = TestQueue::new(&amqp).await;
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let mut tx = schema.pool.begin().await.unwrap();
    let id = outbox
        .enqueue(&mut tx, OutboxMessage::new(queue.name.clone(), "+10"))
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let published = Arc::new(Notify::new());
    let dying = Relay::new(
        schema.pool.clone(),
        outbox.clone(),
        DiesAfterPublish {
            inner: queue.publisher(),
            published: Arc::clone(&published),
        },
    )
    .lease(Duration::from_millis(500));
    let task = tokio::spawn(async move { dying.run_once().await });
    published.notified().await;
    task.abort(); // killed after the broker's confirmation, before marking the message sent
    let _ = task.await;

    let stop = CancellationToken::new();
    let survivor = Relay::new(schema.pool.clone(), outbox.clone(), queue.publisher())
        .poll_interval(Duration::from_millis(50));
    let relay = tokio::spawn({
        let stop = stop.clone();
        async move { survivor.run(stop).await }
    });
    let duplicates = Arc::new(AtomicUsize::new(0));
    let consumer_task = spawn_consumer(
        Arc::clone(&schema),
        inbox,
        queue.channel().await,
        queue.name.clone(),
        Arc::clone(&duplicates),
        stop.clone(),
    );

    wait_for_ledger(&schema, &outbox, 1).await;
    tokio::time::timeout(EVENTUALLY, async {
        while duplicates.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the second copy reaches the consumer");
    stop.cancel();
    relay.await.unwrap();
    consumer_task.await.unwrap();

    assert_eq!(duplicates.load(Ordering::SeqCst), 1);
    assert_eq!(schema.ledger().await, 1);
    let booked: String = sqlx::query_scalar(schema.sql("SELECT message_id FROM {schema}.ledger"))
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert_eq!(booked, id.as_str());
}

#[tokio::test]
async fn a_poison_message_is_dead_lettered_while_the_others_flow() {
    let (postgres, amqp) = require_servers!();
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let queue = TestQueue::new(&amqp).await;
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let mut tx = schema.pool.begin().await.unwrap();
    for n in 0..20 {
        if n == 5 {
            // No queue is bound to this routing key: the broker returns it, every time.
            let poison = OutboxMessage::new(format!("{}_unbound", queue.name), "poison");
            outbox.enqueue(&mut tx, poison).await.unwrap();
        }
        let message = OutboxMessage::new(queue.name.clone(), format!("good {n}"));
        outbox.enqueue(&mut tx, message).await.unwrap();
    }
    tx.commit().await.unwrap();

    let stop = CancellationToken::new();
    let relay = Relay::new(schema.pool.clone(), outbox.clone(), queue.publisher())
        .max_attempts(3)
        .backoff(Duration::from_millis(10), Duration::from_millis(40))
        .batch_size(8)
        .poll_interval(Duration::from_millis(20));
    let relay = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });
    let duplicates = Arc::new(AtomicUsize::new(0));
    let consumer_task = spawn_consumer(
        Arc::clone(&schema),
        inbox,
        queue.channel().await,
        queue.name.clone(),
        Arc::clone(&duplicates),
        stop.clone(),
    );

    wait_for_ledger(&schema, &outbox, 20).await;
    stop.cancel();
    relay.await.unwrap();
    consumer_task.await.unwrap();

    assert_eq!(schema.ledger().await, 20);
    assert_eq!(schema.duplicated_effects().await, 0);
    let dead = outbox.dead_letters(&schema.pool, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.payload.as_ref(), b"poison");
    assert_eq!(dead[0].attempts, 3);
    let error = dead[0].last_error.as_deref().unwrap();
    assert!(error.contains("312 NO_ROUTE"), "{error}");
}

/// Refuses the first attempt of every message whose payload ends in `:1` or `:6`, and publishes
/// the rest through `inner`: retries that would reorder a key without the relay's ordering.
struct RefuseSomeFirstAttempts<P>(P);

impl<P: Publisher> Publisher for RefuseSomeFirstAttempts<P> {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let refused = |envelope: &Envelope| {
            let payload = &envelope.message().payload;
            envelope.attempt() == 1 && (payload.ends_with(b":1") || payload.ends_with(b":6"))
        };
        let passed: Vec<Envelope> = batch.iter().filter(|e| !refused(e)).cloned().collect();
        let mut confirmed = self.0.publish_batch(&passed).await.into_iter();
        batch
            .iter()
            .map(|envelope| {
                if refused(envelope) {
                    Err(PublishError::Rejected {
                        reason: "refused by the test".into(),
                    })
                } else {
                    confirmed
                        .next()
                        .unwrap_or_else(|| Err(PublishError::unavailable("no confirmation")))
                }
            })
            .collect()
    }
}

#[tokio::test]
async fn per_key_order_reaches_the_consumer() {
    let (postgres, amqp) = require_servers!();
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let queue = TestQueue::new(&amqp).await;
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    const KEYS: usize = 5;
    const PER_KEY: usize = 10;
    for n in 0..PER_KEY {
        let mut tx = schema.pool.begin().await.unwrap();
        for key in 0..KEYS {
            let message = OutboxMessage::new(queue.name.clone(), format!("k{key}:{n}"))
                .ordering_key(format!("k{key}"));
            outbox.enqueue(&mut tx, message).await.unwrap();
        }
        tx.commit().await.unwrap();
    }

    let stop = CancellationToken::new();
    let relays: Vec<_> = (0..2)
        .map(|_| {
            let relay = Relay::new(
                schema.pool.clone(),
                outbox.clone(),
                RefuseSomeFirstAttempts(queue.publisher()),
            )
            .ordering(true)
            .backoff(Duration::from_millis(5), Duration::from_millis(20))
            .poll_interval(Duration::from_millis(20));
            let stop = stop.clone();
            tokio::spawn(async move { relay.run(stop).await })
        })
        .collect();
    let duplicates = Arc::new(AtomicUsize::new(0));
    let consumer_task = spawn_consumer(
        Arc::clone(&schema),
        inbox,
        queue.channel().await,
        queue.name.clone(),
        duplicates,
        stop.clone(),
    );
    wait_for_ledger(&schema, &outbox, (KEYS * PER_KEY) as i64).await;
    stop.cancel();
    for relay in relays {
        relay.await.unwrap();
    }
    consumer_task.await.unwrap();

    // The ledger's ids are in the consumer's processing order.
    let entries: Vec<String> =
        sqlx::query_scalar(schema.sql("SELECT entry FROM {schema}.ledger ORDER BY id"))
            .fetch_all(&schema.pool)
            .await
            .unwrap();
    let mut sequences: HashMap<&str, Vec<usize>> = HashMap::new();
    for entry in &entries {
        let (key, n) = entry.split_once(':').unwrap();
        sequences.entry(key).or_default().push(n.parse().unwrap());
    }
    assert_eq!(sequences.len(), KEYS);
    for (key, sequence) in sequences {
        assert_eq!(sequence, (0..PER_KEY).collect::<Vec<_>>(), "key {key}");
    }
}
