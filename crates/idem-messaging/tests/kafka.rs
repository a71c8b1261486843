//! Kafka end to end, against librdkafka's mock cluster (an in-process Kafka-protocol cluster: no
//! Kafka broker can run on the project's machines): the publisher's delivery reports, id, key
//! and headers; the consumer's offsets stored after the inbox commit, redeliveries skipped and
//! failures sought back; and the outbox → relay → Kafka → inbox → ledger path with two relays.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{collections::HashMap, sync::Arc, time::Duration};

use idem_messaging::{
    Envelope, Error, Handled, Incoming, MessageId, OutboxMessage, PgInbox, PublishError, Publisher,
    Relay,
    kafka::{KafkaMessage, KafkaPublisher, MESSAGE_ID_HEADER, consumer_config},
};
use idem_test_support::{require, unique_name};
use rdkafka::{
    ClientConfig, Message,
    consumer::{CommitMode, Consumer, StreamConsumer},
    message::Headers,
    mocking::MockCluster,
};
use tokio_util::sync::CancellationToken;

use common::{EVENTUALLY, TestSchema, consumer};

const TOPIC: &str = "payments";

/// A mock cluster of three brokers with `TOPIC` in `partitions` partitions.
fn cluster(partitions: i32) -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = MockCluster::new(3).unwrap();
    cluster.create_topic(TOPIC, partitions, 3).unwrap();
    cluster
}

/// A consumer of `TOPIC` in `group`, configured as the inbox needs it.
fn subscribe(servers: &str, group: &str) -> Arc<StreamConsumer> {
    let consumer: StreamConsumer = consumer_config(servers, group)
        .set("session.timeout.ms", "6000")
        .set("auto.commit.interval.ms", "100")
        .create()
        .unwrap();
    consumer.subscribe(&[TOPIC]).unwrap();
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

#[tokio::test]
async fn a_delivered_message_carries_the_id_the_key_and_the_headers() {
    let cluster = cluster(1);
    let publisher = KafkaPublisher::new(&cluster.bootstrap_servers());
    let batch = [
        envelope(
            "m-1",
            OutboxMessage::new(TOPIC, "one")
                .ordering_key("order-42")
                .header("content-type", "text/plain")
                .header(MESSAGE_ID_HEADER, "forged"),
        ),
        envelope("m-2", OutboxMessage::new(TOPIC, "two")),
    ];
    let confirmations = publisher.publish_batch(&batch).await;
    assert_eq!(confirmations.len(), 2);
    assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");

    let consumer = subscribe(&cluster.bootstrap_servers(), "check");
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

#[tokio::test]
async fn an_oversized_message_is_rejected() {
    let cluster = cluster(1);
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("message.max.bytes", "1000");
    let publisher = KafkaPublisher::with_config(config);
    let outcome = publisher
        .publish(&envelope(
            "m-1",
            OutboxMessage::new(TOPIC, vec![b'x'; 5000]),
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
        .publish(&envelope("m-1", OutboxMessage::new(TOPIC, "x")))
        .await;
    assert!(
        matches!(outcome, Err(PublishError::Unavailable(_))),
        "{outcome:?}"
    );
}

/// The consumer's handler: one ledger row per message, keyed by its id, holding its payload.
async fn consume(
    schema: &TestSchema,
    inbox: &PgInbox,
    message: KafkaMessage,
) -> Result<Handled<()>, Error> {
    inbox
        .consume(&schema.pool, &consumer("ledger"), message, |tx, message| {
            Box::pin(async move {
                let entry = std::str::from_utf8(message.payload()).unwrap();
                schema.book(tx, message.message_id().unwrap(), entry).await;
                Ok(())
            })
        })
        .await
}

#[tokio::test]
async fn a_redelivery_after_a_crash_before_the_commit_is_skipped() {
    let postgres = require!(Postgres);
    let schema = TestSchema::new(&postgres).await;
    let inbox = schema.inbox().await;
    let cluster = cluster(1);
    let servers = cluster.bootstrap_servers();
    KafkaPublisher::new(&servers)
        .publish(&envelope("m-1", OutboxMessage::new(TOPIC, "+10")))
        .await
        .unwrap();
    let group = unique_name("ledger-");

    // The first consumer commits its effects, then dies before storing the offset.
    let doomed = subscribe(&servers, &group);
    let message = next(&doomed).await;
    let id: MessageId = message.message_id().unwrap().parse().unwrap();
    let first = inbox
        .handle(&schema.pool, &consumer("ledger"), &id, |tx| {
            Box::pin(async {
                schema.book(tx, id.as_str(), "+10").await;
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap();
    assert_eq!(first, Handled::Processed(()));
    drop(message);
    drop(doomed);

    // The next consumer of the group reads it again; the inbox skips it, the offset advances.
    let survivor = subscribe(&servers, &group);
    let redelivery = next(&survivor).await;
    assert_eq!(redelivery.message_id(), Some("m-1"));
    assert_eq!(redelivery.message().offset(), 0);
    assert_eq!(
        consume(&schema, &inbox, redelivery).await.unwrap(),
        Handled::Duplicate
    );
    survivor.commit_consumer_state(CommitMode::Sync).unwrap();
    drop(survivor);
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);

    // A third consumer starts past it.
    let third = subscribe(&servers, &group);
    let nothing = tokio::time::timeout(Duration::from_secs(3), third.recv()).await;
    assert!(
        nothing.is_err(),
        "consumed again: {:?}",
        nothing.map(|m| m.map(|m| m.offset()))
    );
}

#[tokio::test]
async fn a_failed_handler_seeks_back_and_leaves_no_inbox_row() {
    let postgres = require!(Postgres);
    let schema = TestSchema::new(&postgres).await;
    let inbox = schema.inbox().await;
    let cluster = cluster(1);
    let servers = cluster.bootstrap_servers();
    let publisher = KafkaPublisher::new(&servers);
    for n in 1..=2 {
        publisher
            .publish(&envelope(
                &format!("m-{n}"),
                OutboxMessage::new(TOPIC, "+10"),
            ))
            .await
            .unwrap();
    }
    let consumer = subscribe(&servers, &unique_name("ledger-"));

    let message = next(&consumer).await;
    let failed = inbox
        .consume(
            &schema.pool,
            &common::consumer("ledger"),
            message,
            |tx, message| {
                let schema = &schema;
                Box::pin(async move {
                    schema.book(tx, message.message_id().unwrap(), "+10").await;
                    Err::<(), _>(anyhow::anyhow!("the ledger is closed"))
                })
            },
        )
        .await;
    assert_eq!(failed.unwrap_err().to_string(), "the ledger is closed");
    assert_eq!(schema.inbox_rows().await, 0);
    assert_eq!(schema.ledger().await, 0);

    // Sought back: the same message comes again, before the next one.
    let again = next(&consumer).await;
    assert_eq!(
        (again.message_id(), again.message().offset()),
        (Some("m-1"), 0)
    );
    assert_eq!(
        consume(&schema, &inbox, again).await.unwrap(),
        Handled::Processed(())
    );
    let second = next(&consumer).await;
    assert_eq!(second.message_id(), Some("m-2"));
    assert_eq!(
        consume(&schema, &inbox, second).await.unwrap(),
        Handled::Processed(())
    );
    assert_eq!(schema.ledger().await, 2);
    assert_eq!(schema.inbox_rows().await, 2);
}

#[tokio::test]
async fn two_relays_deliver_through_kafka_each_applied_once_in_key_order() {
    let postgres = require!(Postgres);
    let schema = Arc::new(TestSchema::new(&postgres).await);
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let cluster = cluster(3);
    let servers = cluster.bootstrap_servers();
    const KEYS: usize = 10;
    const PER_KEY: usize = 50;

    let stop = CancellationToken::new();
    let relays: Vec<_> = (0..2)
        .map(|n| {
            let relay = Relay::new(
                schema.pool.clone(),
                outbox.clone(),
                KafkaPublisher::new(&servers),
            )
            .name(format!("relay-{n}"))
            .batch_size(20)
            .ordering(true)
            .poll_interval(Duration::from_millis(50));
            let stop = stop.clone();
            tokio::spawn(async move { relay.run(stop).await })
        })
        .collect();
    for n in 0..PER_KEY {
        let mut tx = schema.pool.begin().await.unwrap();
        for key in 0..KEYS {
            let message =
                OutboxMessage::new(TOPIC, format!("k{key}:{n}")).ordering_key(format!("k{key}"));
            outbox.enqueue(&mut tx, message).await.unwrap();
        }
        tx.commit().await.unwrap();
    }

    let consumer = subscribe(&servers, &unique_name("ledger-"));
    let expected = (KEYS * PER_KEY) as i64;
    tokio::time::timeout(EVENTUALLY, async {
        while schema.ledger().await < expected {
            let message = next(&consumer).await;
            assert_eq!(
                consume(&schema, &inbox, message).await.unwrap(),
                Handled::Processed(())
            );
        }
    })
    .await
    .expect("every message reaches the ledger");
    stop.cancel();
    for relay in relays {
        relay.await.unwrap();
    }

    assert_eq!(schema.ledger().await, expected);
    assert_eq!(schema.duplicated_effects().await, 0);
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
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
