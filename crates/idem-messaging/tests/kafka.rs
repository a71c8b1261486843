//! Kafka end to end, against tansu, a broker that speaks the Kafka protocol (`IDEM_TEST_KAFKA_URL`;
//! `scripts/services.sh` starts it): the broker conformance suite (`common::suite`) on a topic
//! and a consumer group of each test's own, consumer groups (offsets committed only after the
//! inbox transaction, a rebalance while messages flow), and what is Kafka's alone: the
//! publisher's delivery reports, key and headers, a message too large, an unreachable cluster;
//! and the subscription by URL (`subscription`): its messages' fields, requeue and ack, the
//! in-flight limit and polling while at it, a missing topic.
//! librdkafka's mock cluster (an in-process Kafka-protocol cluster) stands in only for the
//! failure tansu cannot produce here: a restart that keeps the data (see [`Kafka::mock`]).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{EVENTUALLY, TestSchema};
use idem_messaging::{
    Envelope, Error, Handled, Incoming, OutboxMessage, PgInbox, PublishError, Publisher,
    kafka::{KafkaMessage, KafkaPublisher, MESSAGE_ID_HEADER, consumer_config},
};
use idem_test_support::{Server, require, unique_name};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{CommitMode, Consumer, StreamConsumer},
    message::Headers,
    mocking::MockCluster,
    producer::{FutureProducer, FutureRecord},
    types::{RDKafkaApiKey, RDKafkaRespErr},
};
use tokio_util::sync::CancellationToken;

use crate::common::suite::Broker as _;

/// Producer settings for tansu: one record per batch. tansu 0.6 answers a fetch that starts
/// inside a batch of several records with nothing, so a consumer that resumes mid-batch (after a
/// rebalance, a crash or a seek back) would stall.
fn producer_config(servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", servers)
        .set("linger.ms", "0")
        .set("batch.num.messages", "1");
    config
}

/// A consumer of `topic` in `group`, configured as the inbox needs it.
fn subscribe(servers: &str, topic: &str, group: &str) -> Arc<StreamConsumer> {
    let consumer: StreamConsumer = consumer_config(servers, group)
        .set("session.timeout.ms", "6000")
        .set("auto.commit.interval.ms", "100")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    Arc::new(consumer)
}

/// The next message, waiting for it.
async fn next(consumer: &Arc<StreamConsumer>) -> KafkaMessage {
    let message = tokio::time::timeout(EVENTUALLY, consumer.recv())
        .await
        .expect("a message arrives")
        .unwrap();
    KafkaMessage::new(&message, Arc::clone(consumer))
}

fn envelope(id: &str, message: OutboxMessage) -> Envelope {
    Envelope::new(id.parse().unwrap(), message, 1)
}

fn headers(message: &KafkaMessage) -> Vec<(String, String)> {
    let headers = message.message().headers().unwrap();
    headers
        .iter()
        .map(|h| {
            (
                h.key.to_owned(),
                String::from_utf8(h.value.unwrap().to_vec()).unwrap(),
            )
        })
        .collect()
}

/// The suite's fixture, and what the other tests work on: a topic of the test's own and a
/// consumer group of its own, on tansu or on a mock cluster of the test's own.
struct Kafka {
    servers: String,
    topic: String,
    group: String,
    /// The thread that owns the mock cluster, for a fixture on one.
    mock: Option<std::sync::mpsc::Sender<Command>>,
}

impl Kafka {
    /// A topic of the test's own in `partitions` partitions on the shared tansu broker, or
    /// `None` after saying so when `IDEM_TEST_KAFKA_URL` is not set.
    async fn tansu(partitions: i32) -> Option<Self> {
        let servers = Server::Kafka.url()?;
        let topic = unique_name("payments-");
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .create()
            .unwrap();
        let created = admin
            .create_topics(
                &[NewTopic::new(
                    &topic,
                    partitions,
                    TopicReplication::Fixed(1),
                )],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .unwrap();
        assert_eq!(created, [Ok(topic.clone())]);
        Some(Self {
            servers,
            topic,
            group: unique_name("ledger-"),
            mock: None,
        })
    }

    /// A mock cluster of three brokers of the test's own with a topic in one partition, for
    /// the one failure tansu cannot produce here: a broker restart that keeps the data. tansu's
    /// memory storage starts empty again, and its durable engines need what its crates.io
    /// package does not bring: the schema it ships is SQLite's (PostgreSQL refuses its
    /// `integer primary key autoincrement`), for an engine (`libsql`) the installed broker
    /// leaves out, and the PostgreSQL engine's own schema is not in it; the S3 engine needs an
    /// object store. The cluster lives on a thread of its own (it cannot be shared between
    /// threads) and is destroyed when this is dropped.
    async fn mock() -> Option<Self> {
        const TOPIC: &str = "payments";
        let (servers, started) = tokio::sync::oneshot::channel();
        let (commands, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let cluster = MockCluster::new(3).unwrap();
            cluster.create_topic(TOPIC, 1, 3).unwrap();
            let _ = servers.send(cluster.bootstrap_servers());
            for Command::Restart(done) in received {
                for broker in 1..=3 {
                    cluster.broker_down(broker).unwrap();
                }
                std::thread::sleep(Duration::from_secs(1));
                for broker in 1..=3 {
                    cluster.broker_up(broker).unwrap();
                }
                let _ = done.send(());
            }
        });
        Some(Self {
            servers: started.await.unwrap(),
            topic: TOPIC.to_owned(),
            group: unique_name("ledger-"),
            mock: Some(commands),
        })
    }

    /// The group's committed offset of the topic's partition 0, as `consumer` reads it.
    fn committed(&self, consumer: &StreamConsumer) -> Offset {
        consumer
            .committed(Duration::from_secs(10))
            .unwrap()
            .find_partition(&self.topic, 0)
            .unwrap()
            .offset()
    }
}

/// Deletes a topic made on tansu, which outlives the tests.
impl Drop for Kafka {
    fn drop(&mut self) {
        if self.mock.is_some() {
            return;
        }
        let (servers, topic) = (self.servers.clone(), self.topic.clone());
        // Drop is synchronous and may run inside a runtime, which must not block: a thread with
        // a runtime of its own.
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                    .set("bootstrap.servers", &servers)
                    .create()?;
                admin
                    .delete_topics(
                        &[topic.as_str()],
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                    )
                    .await
            })
        })
        .join();
        if !matches!(deleted, Ok(Ok(ref results)) if results.iter().all(Result::is_ok)) {
            eprintln!(
                "could not delete the test topic {}: {deleted:?}",
                self.topic
            );
        }
    }
}

/// What the thread that owns a mock cluster is asked to do.
enum Command {
    /// Takes every broker down for a second, then up again; answers when they are up.
    Restart(tokio::sync::oneshot::Sender<()>),
}

impl common::suite::Broker for Kafka {
    type Publisher = KafkaPublisher;
    type Consumer = Arc<StreamConsumer>;
    type Message = KafkaMessage;

    fn destination(&self) -> String {
        self.topic.clone()
    }

    fn publisher(&self) -> KafkaPublisher {
        KafkaPublisher::with_config(producer_config(&self.servers))
    }

    async fn publish_without_id(&self, payload: &str) {
        let producer: FutureProducer = producer_config(&self.servers).create().unwrap();
        producer
            .send(
                FutureRecord::<(), str>::to(&self.topic).payload(payload),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }

    /// A member of the fixture's consumer group.
    async fn consumer(&self) -> Arc<StreamConsumer> {
        subscribe(&self.servers, &self.topic, &self.group)
    }

    async fn next(
        &self,
        consumer: &mut Arc<StreamConsumer>,
        within: Duration,
    ) -> Option<KafkaMessage> {
        let message = tokio::time::timeout(within, consumer.recv()).await.ok()?;
        Some(KafkaMessage::new(&message.unwrap(), Arc::clone(consumer)))
    }

    /// Commits the offsets the consumer stored (its acks, which the background commit would
    /// have committed by then), then closes it without storing any other: its group's next
    /// member reads from there.
    async fn kill(&self, consumer: Arc<StreamConsumer>) {
        let _ = consumer.commit_consumer_state(CommitMode::Sync); // nothing stored is no error here
        drop(consumer);
    }

    /// Takes every broker of the mock cluster down, then up again: the mock keeps its data.
    async fn restart(&self) {
        let (done, restarted) = tokio::sync::oneshot::channel();
        self.mock
            .as_ref()
            .expect("a fixture on a mock cluster")
            .send(Command::Restart(done))
            .unwrap();
        restarted.await.unwrap();
    }
}

common::suite::broker_suite! {
    run Kafka::tansu(1) => [
        a_confirmed_publish_reaches_the_consumer_with_its_id,
        a_copy_delivered_twice_is_processed_once,
        a_failed_handler_redelivers_and_the_retry_commits_once,
        a_message_without_an_id_is_dead_lettered_not_retried,
        a_consumer_killed_between_its_commit_and_its_ack_skips_the_copy,
        two_relays_deliver_every_message_once,
        per_key_order_holds_through_the_relay,
    ],
    // tansu cannot restart on its data here: see `Kafka::mock`.
    run Kafka::mock() => [a_broker_restarted_under_a_running_relay_loses_nothing],
    not_run => [],
}

#[tokio::test]
async fn a_delivered_message_carries_the_id_the_key_and_the_headers() {
    let Some(kafka) = Kafka::tansu(1).await else {
        return;
    };
    let batch = [
        envelope(
            "m-1",
            OutboxMessage::new(&kafka.topic, "one")
                .ordering_key("order-42")
                .header("content-type", "text/plain")
                .header(MESSAGE_ID_HEADER, "forged"),
        ),
        envelope("m-2", OutboxMessage::new(&kafka.topic, "two")),
    ];
    let confirmations = kafka.publisher().publish_batch(&batch).await;
    assert_eq!(confirmations.len(), 2);
    assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");

    let consumer = kafka.consumer().await;
    let first = next(&consumer).await;
    assert_eq!(first.message_id(), Some("m-1"));
    assert_eq!(first.payload(), b"one");
    assert_eq!(first.message().key(), Some(&b"order-42"[..]));
    assert_eq!(
        headers(&first),
        [
            ("content-type".to_owned(), "text/plain".to_owned()),
            (MESSAGE_ID_HEADER.to_owned(), "m-1".to_owned()),
        ]
    );
    let second = next(&consumer).await;
    assert_eq!(second.message_id(), Some("m-2"));
    assert_eq!(second.message().key(), None);
    assert_eq!(
        (first.message().offset(), second.message().offset()),
        (0, 1)
    );
}

/// A consumer that resumes in the middle of what one publish sent gets the record it resumes
/// at: what the producer settings for tansu (one record per batch) are for. tansu 0.6 answers
/// a fetch at an offset inside a batch of ten records with nothing.
#[tokio::test]
async fn a_consumer_resuming_mid_publish_gets_the_record_it_resumes_at() {
    let Some(kafka) = Kafka::tansu(1).await else {
        return;
    };
    let batch: Vec<Envelope> = (0..10)
        .map(|n| {
            let message = OutboxMessage::new(&kafka.topic, format!("{n}"));
            envelope(&format!("m-{n}"), message)
        })
        .collect();
    let confirmations = kafka.publisher().publish_batch(&batch).await;
    assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");

    let consumer: Arc<StreamConsumer> = Arc::new(
        consumer_config(&kafka.servers, &kafka.group)
            .create()
            .unwrap(),
    );
    let mut resume = TopicPartitionList::new();
    resume
        .add_partition_offset(&kafka.topic, 0, Offset::Offset(5))
        .unwrap();
    consumer.assign(&resume).unwrap();
    let message = next(&consumer).await;
    assert_eq!(
        (
            message.message().offset(),
            message.message_id(),
            message.payload()
        ),
        (5, Some("m-5"), &b"5"[..])
    );
}

#[tokio::test]
async fn an_oversized_message_is_rejected() {
    let Some(kafka) = Kafka::tansu(1).await else {
        return;
    };
    let mut config = producer_config(&kafka.servers);
    config.set("message.max.bytes", "1000");
    let publisher = KafkaPublisher::with_config(config);
    let outcome = publisher
        .publish(&envelope(
            "m-1",
            OutboxMessage::new(&kafka.topic, vec![b'x'; 5000]),
        ))
        .await;
    match outcome {
        Err(PublishError::Rejected { reason }) => {
            assert!(reason.contains("MessageSizeTooLarge"), "{reason}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_cluster_makes_the_broker_unavailable() {
    let publisher = KafkaPublisher::new("127.0.0.1:1").delivery_timeout(Duration::from_millis(500));
    let outcome = publisher
        .publish(&envelope("m-1", OutboxMessage::new("payments", "x")))
        .await;
    assert!(
        matches!(outcome, Err(PublishError::Unavailable(_))),
        "{outcome:?}"
    );
}

/// An idempotent producer that loses track of its sequence numbers (the broker says it missed
/// some, as after messages timed out while it was away) fails with librdkafka's fatal error, and
/// every message after it would fail too: the publisher makes a new producer for the next batch.
#[tokio::test]
async fn a_producer_that_failed_for_good_is_replaced() {
    a_producer_refused_is_replaced(
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
        "OutOfOrderSequenceNumber",
    )
    .await;
}

/// A producer the broker fences (its epoch superseded, as tansu answers after an outage) gets
/// the same refusal for every message after: it is replaced too.
#[tokio::test]
async fn a_fenced_producer_is_replaced() {
    a_producer_refused_is_replaced(
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED,
        "ProducerFenced",
    )
    .await;
}

/// Publishes m-1, has the mock broker refuse the next produce request with `refusal`, then
/// publishes m-2 (refused, its error naming `name`), m-3 and m-4, which must land.
async fn a_producer_refused_is_replaced(refusal: RDKafkaRespErr, name: &str) {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("payments", 1, 1).unwrap();
    let servers = cluster.bootstrap_servers();
    let publisher = KafkaPublisher::new(&servers).delivery_timeout(Duration::from_secs(5));
    let publish = async |id: &'static str| {
        publisher
            .publish(&envelope(id, OutboxMessage::new("payments", id)))
            .await
    };

    publish("m-1").await.unwrap();
    cluster.request_errors(RDKafkaApiKey::Produce, &[refusal]);
    match publish("m-2").await {
        Err(PublishError::Unavailable(error)) => {
            assert!(error.to_string().contains(name), "{error}");
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
    publish("m-3").await.unwrap();
    publish("m-4").await.unwrap();

    let consumer = subscribe(&servers, "payments", &unique_name("ledger-"));
    let mut ids = Vec::new();
    while ids.last().map(String::as_str) != Some("m-4") {
        ids.push(next(&consumer).await.message_id().unwrap().to_owned());
    }
    assert_eq!(ids, ["m-1", "m-3", "m-4"]);
}

/// The consumer's handler: one ledger row per message, keyed by its id, holding its payload.
async fn consume(
    schema: &TestSchema,
    inbox: &PgInbox,
    message: KafkaMessage,
) -> Result<Handled<()>, Error> {
    inbox
        .consume(
            &schema.pool,
            &common::consumer("ledger"),
            message,
            |tx, message| {
                Box::pin(async move {
                    let entry = std::str::from_utf8(message.payload()).unwrap();
                    schema.book(tx, message.message_id().unwrap(), entry).await;
                    Ok(())
                })
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offset_is_committed_only_after_the_inbox_transaction() {
    let postgres = require!(Postgres);
    let Some(kafka) = Kafka::tansu(1).await else {
        return;
    };
    let schema = TestSchema::new(&postgres).await;
    let inbox = schema.inbox().await;
    kafka
        .publisher()
        .publish(&envelope("m-1", OutboxMessage::new(&kafka.topic, "+10")))
        .await
        .unwrap();
    let consumer = kafka.consumer().await;

    let message = next(&consumer).await;
    let during = inbox
        .consume(
            &schema.pool,
            &common::consumer("ledger"),
            message,
            |tx, message| {
                let (schema, kafka, consumer) = (&schema, &kafka, &consumer);
                Box::pin(async move {
                    schema.book(tx, message.message_id().unwrap(), "+10").await;
                    // Five auto-commit intervals inside the transaction: nothing is committed.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok::<_, Error>(kafka.committed(consumer))
                })
            },
        )
        .await
        .unwrap();
    assert_eq!(during, Handled::Processed(Offset::Invalid));

    // Acknowledged after the commit: the next auto-commit moves the group past the message.
    let after = tokio::time::timeout(EVENTUALLY, async {
        loop {
            let offset = kafka.committed(&consumer);
            if offset != Offset::Invalid {
                return offset;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the offset is committed");
    assert_eq!(after, Offset::Offset(1));
    assert_eq!(schema.ledger().await, 1);
}

/// A member of the fixture's consumer group, consuming one message at a time until `stop`, then
/// leaving the group (a rebalance); counts what it processed and what it skipped.
fn spawn_member(
    kafka: Arc<Kafka>,
    schema: Arc<TestSchema>,
    inbox: PgInbox,
    counts: Arc<[AtomicUsize; 2]>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let consumer = kafka.consumer().await;
        loop {
            let received = tokio::select! {
                received = consumer.recv() => received.unwrap(),
                () = stop.cancelled() => break,
            };
            let message = KafkaMessage::new(&received, Arc::clone(&consumer));
            drop(received);
            match consume(&schema, &inbox, message).await {
                Ok(Handled::Processed(())) => counts[0].fetch_add(1, Ordering::SeqCst),
                Ok(Handled::Duplicate) => counts[1].fetch_add(1, Ordering::SeqCst),
                Err(error) => panic!("the ledger consumer failed: {error}"),
            };
        }
        let _ = consumer.commit_consumer_state(CommitMode::Sync);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebalance_while_messages_flow_commits_each_effect_once() {
    const N: usize = 400;
    let postgres = require!(Postgres);
    let Some(kafka) = Kafka::tansu(4).await else {
        return;
    };
    let kafka = Arc::new(kafka);
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let inbox = schema.inbox().await;
    let counts = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let processed = |at_least: usize| {
        let counts = Arc::clone(&counts);
        async move {
            tokio::time::timeout(EVENTUALLY, async {
                while counts[0].load(Ordering::SeqCst) < at_least {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{at_least} messages are processed"));
        }
    };

    // 40 batches of 10 over 20 keys (so, all four partitions), one every 100 ms.
    let producer = tokio::spawn({
        let kafka = Arc::clone(&kafka);
        async move {
            let publisher = kafka.publisher();
            for batch in 0..N / 10 {
                let envelopes: Vec<Envelope> = (batch * 10..batch * 10 + 10)
                    .map(|n| {
                        let message = OutboxMessage::new(&kafka.topic, format!("{n}"))
                            .ordering_key(format!("k{}", n % 20));
                        envelope(&format!("m-{n}"), message)
                    })
                    .collect();
                let confirmations = publisher.publish_batch(&envelopes).await;
                assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let member = |stop: &CancellationToken| {
        spawn_member(
            Arc::clone(&kafka),
            Arc::clone(&schema),
            inbox.clone(),
            Arc::clone(&counts),
            stop.clone(),
        )
    };
    let (first_stop, second_stop) = (CancellationToken::new(), CancellationToken::new());
    let first = member(&first_stop);
    processed(100).await;
    let second = member(&second_stop); // joins: the partitions are shared out again
    processed(200).await;
    first_stop.cancel(); // leaves: its partitions go to the second member
    first.await.unwrap();
    producer.await.unwrap();
    processed(N).await;
    second_stop.cancel();
    second.await.unwrap();

    assert_eq!(counts[0].load(Ordering::SeqCst), N);
    assert_eq!(schema.ledger().await, N as i64);
    assert_eq!(schema.duplicated_effects().await, 0);
    assert_eq!(schema.inbox_rows().await, N as i64);
    eprintln!(
        "{N} messages, {} copies skipped across the rebalances",
        counts[1].load(Ordering::SeqCst)
    );
}

/// A subscription by URL (`BrokerUrl::subscribe`), on the fixture's topic and group.
mod subscription {
    use std::time::{Duration, SystemTime};

    use idem_messaging::{
        BrokerUrl, Error, OutboxMessage, Publisher, SubscribeOptions, Subscription,
        consume::{Message, Received},
        kafka::{UnknownTopic, consumer_config},
    };
    use idem_test_support::unique_name;
    use rdkafka::{
        Offset, TopicPartitionList,
        consumer::{BaseConsumer, Consumer},
        message::{Header, OwnedHeaders},
        producer::{FutureProducer, FutureRecord},
    };

    use super::{EVENTUALLY, Kafka, envelope, producer_config};
    use crate::common::suite::Broker as _;

    async fn subscribe(servers: &str, options: SubscribeOptions) -> Result<Subscription, Error> {
        let url: BrokerUrl = format!("kafka://{servers}").parse().unwrap();
        url.subscribe(options).await
    }

    /// The fixture's topic, as its group.
    fn options(kafka: &Kafka) -> SubscribeOptions {
        SubscribeOptions::new(&kafka.topic).group(&kafka.group)
    }

    async fn next(subscription: &mut Subscription) -> Received {
        tokio::time::timeout(EVENTUALLY, subscription.next())
            .await
            .expect("a message arrives")
            .expect("the subscription goes on")
            .unwrap()
    }

    async fn publish(kafka: &Kafka, batch: &[idem_messaging::Envelope]) {
        let confirmations = kafka.publisher().publish_batch(batch).await;
        assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");
    }

    /// The offset the fixture's group committed for partition 0, read by a consumer of the group
    /// that does not join it.
    async fn committed(kafka: &Kafka) -> Offset {
        let (servers, group, topic) = (
            kafka.servers.clone(),
            kafka.group.clone(),
            kafka.topic.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = consumer_config(&servers, &group).create().unwrap();
            let mut partitions = TopicPartitionList::new();
            partitions.add_partition(&topic, 0);
            let committed = consumer
                .committed_offsets(partitions, Duration::from_secs(10))
                .unwrap();
            committed.find_partition(&topic, 0).unwrap().offset()
        })
        .await
        .unwrap()
    }

    /// What a timestamp in milliseconds can say of a message sent after `time`.
    fn millis(time: SystemTime) -> SystemTime {
        let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(since.as_millis() as u64)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_received_by_url_carries_its_ids_key_headers_and_time() {
        let Some(kafka) = Kafka::tansu(1).await else {
            return;
        };
        let topic = &kafka.topic;
        let before = millis(SystemTime::now());
        publish(
            &kafka,
            &[
                envelope(
                    "m-1",
                    OutboxMessage::new(topic, "one")
                        .ordering_key("order-42")
                        .header("trace", "a")
                        .header("content-type", "text/plain")
                        .header("trace", "b"),
                ),
                envelope("m-2", OutboxMessage::new(topic, "two")),
            ],
        )
        .await;
        let after = SystemTime::now();
        // Not from the outbox: no id, and a header whose value is not text, one without a value.
        let producer: FutureProducer = producer_config(&kafka.servers).create().unwrap();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "binary",
                value: Some(&[0xff, 0xfe][..]),
            })
            .insert(Header {
                key: "empty",
                value: None::<&[u8]>,
            })
            .insert(Header {
                key: "kind",
                value: Some("raw"),
            });
        producer
            .send(
                FutureRecord::<(), str>::to(topic)
                    .payload("three")
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .unwrap();

        let mut subscription = subscribe(&kafka.servers, options(&kafka)).await.unwrap();
        let first = next(&mut subscription).await;
        let time = first.message().time.unwrap();
        assert!(before <= time && time <= after, "{time:?}");
        let mut expected = Message::new(topic.clone(), "one");
        expected.message_id = Some("m-1".into());
        expected.broker_id = Some(format!("{topic}/0/0"));
        expected.ordering_key = Some(format!("{topic}/0"));
        // In order, repeated names kept, without the id's.
        expected.headers = vec![
            ("trace".into(), "a".into()),
            ("content-type".into(), "text/plain".into()),
            ("trace".into(), "b".into()),
        ];
        expected.time = Some(time);
        // Kafka does not say.
        expected.redelivered = false;
        assert_eq!(*first.message(), expected);

        let second = next(&mut subscription).await;
        let mut expected = Message::new(topic.clone(), "two");
        expected.message_id = Some("m-2".into());
        expected.broker_id = Some(format!("{topic}/0/1"));
        expected.ordering_key = Some(format!("{topic}/0"));
        expected.time = second.message().time;
        assert_eq!(*second.message(), expected);

        let third = next(&mut subscription).await;
        let mut expected = Message::new(topic.clone(), "three");
        expected.broker_id = Some(format!("{topic}/0/2"));
        expected.ordering_key = Some(format!("{topic}/0"));
        expected.headers = vec![("kind".into(), "raw".into())];
        expected.time = third.message().time;
        assert_eq!(*third.message(), expected);
        assert!(expected.time.unwrap() >= time);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_requeued_message_comes_again_and_an_acked_one_not_even_to_the_group_after() {
        let Some(kafka) = Kafka::tansu(1).await else {
            return;
        };
        let topic = &kafka.topic;
        let batch: Vec<_> = (1..=3)
            .map(|n| envelope(&format!("m-{n}"), OutboxMessage::new(topic, format!("{n}"))))
            .collect();
        publish(&kafka, &batch).await;

        // One at a time, so that what comes next is the message sought back to.
        let mut subscription = subscribe(&kafka.servers, options(&kafka).max_in_flight(1))
            .await
            .unwrap();
        let first = next(&mut subscription).await;
        assert_eq!(first.message().message_id.as_deref(), Some("m-1"));
        assert_eq!(first.message().broker_id, Some(format!("{topic}/0/0")));
        first.requeue().await.unwrap();
        let again = next(&mut subscription).await;
        assert_eq!(again.message().message_id.as_deref(), Some("m-1"));
        assert_eq!(again.message().broker_id, Some(format!("{topic}/0/0")));
        again.ack().await.unwrap();
        for n in 2..=3 {
            let message = next(&mut subscription).await;
            assert_eq!(message.message().message_id, Some(format!("m-{n}")));
            assert_eq!(
                message.message().broker_id,
                Some(format!("{topic}/0/{}", n - 1))
            );
            message.ack().await.unwrap();
        }
        drop(subscription);

        // Committed in the background, or when the consumer closes.
        tokio::time::timeout(EVENTUALLY, async {
            while committed(&kafka).await != Offset::Offset(3) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the acked offsets are committed");
        publish(&kafka, &[envelope("m-4", OutboxMessage::new(topic, "4"))]).await;
        let mut after = subscribe(&kafka.servers, options(&kafka)).await.unwrap();
        let next_one = next(&mut after).await;
        assert_eq!(next_one.message().message_id.as_deref(), Some("m-4"));
        assert_eq!(next_one.message().broker_id, Some(format!("{topic}/0/3")));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_than_max_in_flight_messages_are_handed_over_until_one_is_settled() {
        let Some(kafka) = Kafka::tansu(1).await else {
            return;
        };
        let topic = &kafka.topic;
        let batch: Vec<_> = (1..=3)
            .map(|n| envelope(&format!("m-{n}"), OutboxMessage::new(topic, format!("{n}"))))
            .collect();
        publish(&kafka, &batch).await;

        let mut subscription = subscribe(&kafka.servers, options(&kafka).max_in_flight(2))
            .await
            .unwrap();
        let first = next(&mut subscription).await;
        let second = next(&mut subscription).await;
        assert_eq!(
            [&first, &second].map(|m| m.message().message_id.clone().unwrap()),
            ["m-1", "m-2"]
        );
        let waited = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
        assert!(waited.is_err(), "{waited:?}");

        // Settled out of order: the third comes, and nothing is stored past the first, which is
        // still held when the subscription closes.
        second.ack().await.unwrap();
        let third = next(&mut subscription).await;
        assert_eq!(third.message().message_id.as_deref(), Some("m-3"));
        assert_eq!(third.message().broker_id, Some(format!("{topic}/0/2")));
        third.ack().await.unwrap();
        drop(subscription);
        drop(first);
        let mut after = subscribe(&kafka.servers, options(&kafka)).await.unwrap();
        let message = next(&mut after).await;
        assert_eq!(message.message().message_id.as_deref(), Some("m-1"));
        assert_eq!(message.message().broker_id, Some(format!("{topic}/0/0")));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_dropped_unsettled_comes_again() {
        let Some(kafka) = Kafka::tansu(1).await else {
            return;
        };
        let topic = &kafka.topic;
        let batch: Vec<_> = (1..=2)
            .map(|n| envelope(&format!("m-{n}"), OutboxMessage::new(topic, format!("{n}"))))
            .collect();
        publish(&kafka, &batch).await;
        let mut subscription = subscribe(&kafka.servers, options(&kafka).max_in_flight(1))
            .await
            .unwrap();
        let first = next(&mut subscription).await;
        assert_eq!(first.message().message_id.as_deref(), Some("m-1"));
        drop(first);
        for n in 1..=2 {
            let message = next(&mut subscription).await;
            assert_eq!(message.message().message_id, Some(format!("m-{n}")));
            assert_eq!(
                message.message().broker_id,
                Some(format!("{topic}/0/{}", n - 1))
            );
            message.ack().await.unwrap();
        }
    }

    /// A subscription holding its limit still polls: a member that joins its group gets
    /// partitions, which takes the holder's part in the rebalance.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscription_at_its_limit_keeps_its_group_and_lets_a_rebalance_through() {
        let Some(kafka) = Kafka::tansu(2).await else {
            return;
        };
        let topic = &kafka.topic;
        // Keyed over both partitions.
        let batch: Vec<_> = (0..10)
            .map(|n| {
                let message =
                    OutboxMessage::new(topic, format!("{n}")).ordering_key(format!("k-{n}"));
                envelope(&format!("m-{n}"), message)
            })
            .collect();
        publish(&kafka, &batch).await;

        let mut holder = subscribe(&kafka.servers, options(&kafka).max_in_flight(1))
            .await
            .unwrap();
        let held = next(&mut holder).await;
        let mut joiner = subscribe(&kafka.servers, options(&kafka)).await.unwrap();
        let received = next(&mut joiner).await;
        let key = received.message().ordering_key.clone().unwrap();
        assert!(
            key == format!("{topic}/0") || key == format!("{topic}/1"),
            "{key}"
        );
        drop(held);
    }

    #[tokio::test]
    async fn a_missing_topic_is_refused_at_subscribe() {
        let Some(kafka) = Kafka::tansu(1).await else {
            return;
        };
        let missing = unique_name("missing-");
        match subscribe(&kafka.servers, SubscribeOptions::new(&missing)).await {
            Err(Error::Receive(source)) => {
                let unknown = source.downcast_ref::<UnknownTopic>().unwrap();
                assert_eq!(
                    *unknown,
                    UnknownTopic {
                        topic: missing.clone()
                    }
                );
                assert_eq!(
                    unknown.to_string(),
                    format!("the Kafka topic `{missing}` does not exist")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_refused_at_subscribe() {
        match subscribe("127.0.0.1:1", SubscribeOptions::new("payments")).await {
            Err(Error::Receive(source)) => {
                let error = source.downcast_ref::<rdkafka::error::KafkaError>().unwrap();
                assert!(
                    matches!(error, rdkafka::error::KafkaError::MetadataFetch(_)),
                    "{error:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
