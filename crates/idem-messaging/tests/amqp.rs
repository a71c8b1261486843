//! RabbitMQ end to end: the broker conformance suite (`common::suite`) on a queue of the test's
//! own, and what is RabbitMQ's alone: the publisher's properties and headers, returns of
//! unroutable messages, a relay that dies between publish and mark-sent, a poison message.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures_util::StreamExt;
use idem_messaging::{
    BrokerUrl, ConsumerName, Envelope, Error, Handled, Incoming, Outbox, OutboxMessage, PgInbox,
    PublishError, Publisher, Received, Relay, SubscribeOptions, Subscription, amqp::AmqpPublisher,
};
use idem_test_support::{Server, require, unique_name};
use lapin::{
    Channel, Connection, ConnectionProperties,
    message::Delivery,
    options::{
        BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
        ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
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
        Self::with_arguments(url, FieldTable::default()).await
    }

    /// A queue whose rejected messages go to the queue `dead` (through the default exchange).
    async fn dead_lettering_to(url: &str, dead: &TestQueue) -> Self {
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString("".into()),
        );
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(dead.name.as_str().into()),
        );
        Self::with_arguments(url, arguments).await
    }

    async fn with_arguments(url: &str, mut arguments: FieldTable) -> Self {
        let name = unique_name("idem_test_");
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .expect("connect to the test broker");
        let channel = connection.create_channel().await.unwrap();
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

    fn publisher(&self) -> AmqpPublisher {
        AmqpPublisher::new(self.url.clone())
    }

    /// How many messages the queue holds ready (neither delivered nor held unacknowledged),
    /// and how many consumers it has.
    async fn state(&self) -> (u32, u32) {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let queue = self
            .channel
            .queue_declare(self.name.as_str().into(), passive, FieldTable::default())
            .await
            .unwrap();
        (queue.message_count(), queue.consumer_count())
    }

    /// Waits until the queue holds no message, neither ready nor delivered and unacknowledged:
    /// every message was acknowledged, or rejected (an ack is not confirmed by the broker, and
    /// the counts are the queue's own, through `rabbitmqctl`). For a queue of the virtual host
    /// `/`, the shared server's.
    async fn wait_until_empty(&self) {
        tokio::time::timeout(EVENTUALLY, async {
            loop {
                let output = tokio::process::Command::new("rabbitmqctl")
                    .args(["-q", "list_queues", "-p", "/", "name", "messages_ready"])
                    .args(["messages_unacknowledged", "--no-table-headers"])
                    .output()
                    .await
                    .expect("run rabbitmqctl");
                let listed = String::from_utf8_lossy(&output.stdout).into_owned();
                let counts = listed.lines().find_map(|line| {
                    let mut fields = line.split_whitespace();
                    (fields.next() == Some(self.name.as_str())).then(|| fields.collect::<Vec<_>>())
                });
                if counts.as_deref() == Some(&["0", "0"][..]) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the queue empties");
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

/// A virtual host of the test's own, deleted when this is dropped: its connections can be closed
/// and refused without disturbing the other tests on the server.
struct TestVhost {
    name: String,
    url: String,
}

impl TestVhost {
    /// Creates the virtual host next to the one of `url`, with the same user's permissions.
    async fn create(url: &str) -> Self {
        let name = unique_name("idem_test_");
        let (server, _) = url.rsplit_once('/').expect("an amqp URL with a vhost");
        let user = server
            .split_once("://")
            .and_then(|(_, rest)| rest.split([':', '@']).next())
            .unwrap_or("guest");
        rabbitmqctl(&["add_vhost", &name]).await;
        rabbitmqctl(&["set_permissions", "-p", &name, user, ".*", ".*", ".*"]).await;
        Self {
            url: format!("{server}/{name}"),
            name,
        }
    }
}

impl Drop for TestVhost {
    fn drop(&mut self) {
        let deleted = std::process::Command::new("rabbitmqctl")
            .args(["-q", "delete_vhost", &self.name])
            .output();
        if !deleted.is_ok_and(|output| output.status.success()) {
            eprintln!("could not delete the test vhost {}", self.name);
        }
    }
}

/// Runs `rabbitmqctl` on the server's machine (the test server is local).
async fn rabbitmqctl(arguments: &[&str]) {
    let output = tokio::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(arguments)
        .output()
        .await
        .expect("run rabbitmqctl");
    assert!(
        output.status.success(),
        "rabbitmqctl {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The suite's fixture: a queue of the test's own, on the shared server, or in a virtual host of
/// its own for the scenarios that restart the broker.
struct Rabbit {
    queue: TestQueue,
    vhost: Option<TestVhost>,
}

impl Rabbit {
    async fn shared() -> Option<Self> {
        let amqp = Server::Amqp.url()?;
        Some(Self {
            queue: TestQueue::new(&amqp).await,
            vhost: None,
        })
    }

    async fn own_vhost() -> Option<Self> {
        let amqp = Server::Amqp.url()?;
        let vhost = TestVhost::create(&amqp).await;
        Some(Self {
            queue: TestQueue::new(&vhost.url).await,
            vhost: Some(vhost),
        })
    }
}

/// A consumer process: its connection, and the deliveries of its channel (prefetch 64).
struct RabbitConsumer {
    connection: Connection,
    deliveries: lapin::Consumer,
}

impl common::suite::Broker for Rabbit {
    type Publisher = AmqpPublisher;
    type Consumer = RabbitConsumer;
    type Message = Delivery;

    fn destination(&self) -> String {
        self.queue.name.clone()
    }

    fn publisher(&self) -> AmqpPublisher {
        self.queue.publisher()
    }

    async fn publish_without_id(&self, payload: &str) {
        let channel = self.queue.channel().await;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let confirm = channel
            .basic_publish(
                "".into(),
                self.queue.name.as_str().into(),
                BasicPublishOptions::default(),
                payload.as_bytes(),
                lapin::BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(confirm.is_ack(), "{confirm:?}");
    }

    async fn consumer(&self) -> RabbitConsumer {
        let connection = Connection::connect(&self.queue.url, ConnectionProperties::default())
            .await
            .expect("connect to the test broker");
        let channel = connection.create_channel().await.unwrap();
        channel
            .basic_qos(64, BasicQosOptions::default())
            .await
            .unwrap();
        let deliveries = channel
            .basic_consume(
                self.queue.name.as_str().into(),
                unique_name("ledger-").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        RabbitConsumer {
            connection,
            deliveries,
        }
    }

    async fn next(&self, consumer: &mut RabbitConsumer, within: Duration) -> Option<Delivery> {
        let delivery = tokio::time::timeout(within, consumer.deliveries.next())
            .await
            .ok()?;
        Some(delivery.expect("the consumer goes on").unwrap())
    }

    /// Closes the consumer's connection: RabbitMQ requeues what it had not acknowledged.
    async fn kill(&self, consumer: RabbitConsumer) {
        consumer
            .connection
            .close(320, "killed".into())
            .await
            .unwrap();
    }

    /// Not a restart of the server, which the other tests share: every connection to the test's
    /// virtual host is closed by the server (`rabbitmqctl close_all_connections -p`) and new
    /// ones are refused for a second (`max-connections` 0), then let in again.
    async fn restart(&self) {
        let vhost = &self
            .vhost
            .as_ref()
            .expect("a fixture with a vhost of its own")
            .name;
        rabbitmqctl(&["set_vhost_limits", "-p", vhost, r#"{"max-connections": 0}"#]).await;
        rabbitmqctl(&["close_all_connections", "-p", vhost, "restart"]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        rabbitmqctl(&["clear_vhost_limits", "-p", vhost]).await;
    }
}

common::suite::broker_suite! {
    run Rabbit::shared() => [
        a_confirmed_publish_reaches_the_consumer_with_its_id,
        a_copy_delivered_twice_is_processed_once,
        a_failed_handler_redelivers_and_the_retry_commits_once,
        a_message_without_an_id_is_dead_lettered_not_retried,
        a_consumer_killed_between_its_commit_and_its_ack_skips_the_copy,
        two_relays_deliver_every_message_once,
        per_key_order_holds_through_the_relay,
    ],
    run Rabbit::own_vhost() => [a_broker_restarted_under_a_running_relay_loses_nothing],
    not_run => [],
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

    let before = seconds_now();
    publisher.publish(&envelope("m-1", message)).await.unwrap();

    let delivery = queue.get(&queue.channel).await;
    assert_eq!(delivery.message_id(), Some("m-1"));
    assert_eq!(delivery.payload(), b"hello");
    assert_eq!(delivery.properties.delivery_mode(), &Some(2));
    let stamped = UNIX_EPOCH + Duration::from_secs(delivery.properties.timestamp().unwrap());
    assert!(
        before <= stamped && stamped <= SystemTime::now(),
        "{stamped:?}"
    );
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

/// A subscription to `queue` through its broker's URL, as `idem-deliver`'s would be.
async fn subscribe(queue: &TestQueue, options: SubscribeOptions) -> Subscription {
    let url: BrokerUrl = queue.url.parse().unwrap();
    url.subscribe(options).await.unwrap()
}

/// The subscription's next message, waiting for it to arrive.
async fn received(subscription: &mut Subscription) -> Received {
    tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .expect("a message arrives")
        .expect("the subscription goes on")
        .unwrap()
}

/// Now, to the second: AMQP's timestamps are whole seconds.
fn seconds_now() -> SystemTime {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    UNIX_EPOCH + Duration::from_secs(since.as_secs())
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[tokio::test]
async fn a_subscription_gives_each_message_with_its_ids_queue_headers_and_time() {
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let mut subscription = subscribe(&queue, SubscribeOptions::new(queue.name.clone())).await;
    let before = seconds_now();
    let confirmed = queue
        .publisher()
        .publish_batch(&[
            envelope(
                "m-1",
                OutboxMessage::new(queue.name.clone(), "one")
                    .header("trace", "t-1")
                    .header("content-type", "text/plain"),
            ),
            envelope("m-2", OutboxMessage::new(queue.name.clone(), "two")),
        ])
        .await;
    assert!(confirmed.iter().all(Result::is_ok), "{confirmed:?}");

    let first = received(&mut subscription).await;
    let message = first.message();
    assert_eq!(message.message_id.as_deref(), Some("m-1"));
    assert_eq!(message.broker_id, None);
    assert_eq!(message.source, queue.name);
    assert_eq!(message.ordering_key.as_deref(), Some(queue.name.as_str()));
    assert_eq!(
        message.headers,
        pairs(&[("content-type", "text/plain"), ("trace", "t-1")])
    );
    assert_eq!(message.payload.as_ref(), b"one");
    let time = message.time.expect("the publisher stamps a time");
    assert!(before <= time && time <= SystemTime::now(), "{time:?}");
    assert!(!message.redelivered);
    assert_eq!(Incoming::message_id(&first), Some("m-1"));
    first.ack().await.unwrap();

    let second = received(&mut subscription).await;
    let message = second.message();
    assert_eq!(message.message_id.as_deref(), Some("m-2"));
    assert_eq!(message.source, queue.name);
    assert_eq!(message.headers, pairs(&[]));
    assert_eq!(message.payload.as_ref(), b"two");
    assert!(!message.redelivered);
    second.ack().await.unwrap();
    queue.wait_until_empty().await;
}

#[tokio::test]
async fn requeued_comes_again_redelivered_acked_and_rejected_are_gone_rejected_dead_lettered() {
    let amqp = require!(Amqp);
    let dead = TestQueue::new(&amqp).await;
    let queue = TestQueue::dead_lettering_to(&amqp, &dead).await;
    let mut subscription = subscribe(&queue, SubscribeOptions::new(queue.name.clone())).await;
    let publisher = queue.publisher();
    let message = |payload: &str| OutboxMessage::new(queue.name.clone(), payload.to_owned());
    publisher
        .publish(&envelope("m-1", message("refused")))
        .await
        .unwrap();

    let first = received(&mut subscription).await;
    assert_eq!(first.message().message_id.as_deref(), Some("m-1"));
    assert!(!first.message().redelivered);
    first.requeue().await.unwrap();
    let again = received(&mut subscription).await;
    assert_eq!(again.message().message_id.as_deref(), Some("m-1"));
    assert_eq!(again.message().payload.as_ref(), b"refused");
    assert!(again.message().redelivered);
    again.reject().await.unwrap();

    let dead_lettered = dead.get(&dead.channel).await;
    assert_eq!(dead_lettered.message_id(), Some("m-1"));
    assert_eq!(dead_lettered.payload(), b"refused");
    dead_lettered.ack().await.unwrap();

    publisher
        .publish(&envelope("m-2", message("accepted")))
        .await
        .unwrap();
    let accepted = received(&mut subscription).await;
    assert_eq!(accepted.message().message_id.as_deref(), Some("m-2"));
    assert!(!accepted.message().redelivered);
    accepted.ack().await.unwrap();
    // Neither ready nor held: the rejected message went, the acknowledged one too.
    queue.wait_until_empty().await;
    assert_eq!(queue.state().await, (0, 1));
}

#[tokio::test]
async fn a_third_message_waits_until_one_of_two_held_is_settled() {
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let options = SubscribeOptions::new(queue.name.clone()).max_in_flight(2);
    let mut subscription = subscribe(&queue, options).await;
    let batch: Vec<Envelope> = (1..=3)
        .map(|n| {
            let message = OutboxMessage::new(queue.name.clone(), format!("{n}"));
            envelope(&format!("m-{n}"), message)
        })
        .collect();
    let confirmed = queue.publisher().publish_batch(&batch).await;
    assert!(confirmed.iter().all(Result::is_ok), "{confirmed:?}");

    let first = received(&mut subscription).await;
    let second = received(&mut subscription).await;
    assert_eq!(first.message().message_id.as_deref(), Some("m-1"));
    assert_eq!(second.message().message_id.as_deref(), Some("m-2"));
    // The broker keeps the third ready: the prefetch is full.
    assert_eq!(queue.state().await, (1, 1));
    let early = tokio::time::timeout(Duration::from_millis(500), subscription.next()).await;
    assert!(early.is_err(), "{early:?}");

    second.ack().await.unwrap();
    let third = received(&mut subscription).await;
    assert_eq!(third.message().message_id.as_deref(), Some("m-3"));
    first.ack().await.unwrap();
    third.ack().await.unwrap();
    queue.wait_until_empty().await;
}

#[tokio::test]
async fn a_missing_queue_is_refused_at_subscribe_naming_it() {
    let amqp = require!(Amqp);
    let url: BrokerUrl = amqp.parse().unwrap();
    let missing = unique_name("idem_test_missing_");

    let refused = url
        .subscribe(SubscribeOptions::new(missing.clone()))
        .await
        .unwrap_err();

    assert!(matches!(refused, Error::Receive(_)), "{refused:?}");
    assert_eq!(
        common::chain(&refused),
        format!(
            "cannot receive messages from the broker: cannot consume the queue {missing:?}: it \
             does not exist, or may not be used: protocol error: AMQP soft error: NOT-FOUND: \
             NOT_FOUND - no queue '{missing}' in vhost '/'"
        )
    );
}

#[tokio::test]
async fn a_deleted_queue_ends_the_subscription_with_an_error() {
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let mut subscription = subscribe(&queue, SubscribeOptions::new(queue.name.clone())).await;

    queue
        .channel
        .queue_delete(queue.name.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();

    let ended = tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .expect("the subscription hears of it")
        .expect("an error before the end")
        .unwrap_err();
    assert_eq!(
        common::chain(&ended),
        format!(
            "cannot receive messages from the broker: RabbitMQ cancelled the consumer of the \
             queue {:?} (the queue was deleted, or its node went down): the subscription ends",
            queue.name
        )
    );
    assert!(subscription.next().await.is_none());
}

#[tokio::test]
async fn a_message_held_when_its_subscription_is_dropped_can_still_be_settled() {
    let amqp = require!(Amqp);
    let queue = TestQueue::new(&amqp).await;
    let mut subscription = subscribe(&queue, SubscribeOptions::new(queue.name.clone())).await;
    queue
        .publisher()
        .publish(&envelope(
            "m-1",
            OutboxMessage::new(queue.name.clone(), "held"),
        ))
        .await
        .unwrap();
    let held = received(&mut subscription).await;

    drop(subscription);
    tokio::time::timeout(EVENTUALLY, async {
        while queue.state().await.1 != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the consumer is cancelled");

    held.ack().await.unwrap();
    queue.wait_until_empty().await;
}

#[tokio::test]
async fn a_lost_connection_ends_the_subscription_and_its_held_message_comes_back() {
    let amqp = require!(Amqp);
    let vhost = TestVhost::create(&amqp).await;
    let queue = TestQueue::new(&vhost.url).await;
    let mut subscription = subscribe(&queue, SubscribeOptions::new(queue.name.clone())).await;
    queue
        .publisher()
        .publish(&envelope(
            "m-1",
            OutboxMessage::new(queue.name.clone(), "held"),
        ))
        .await
        .unwrap();
    let held = received(&mut subscription).await;

    rabbitmqctl(&["close_all_connections", "-p", &vhost.name, "lost"]).await;

    let ended = tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .expect("the subscription hears of it")
        .expect("an error before the end")
        .unwrap_err();
    let said = common::chain(&ended);
    assert!(
        said.starts_with(&format!(
            "cannot receive messages from the broker: the consumer of the queue {:?} failed: \
             the subscription ends: ",
            queue.name
        )),
        "{said}"
    );
    assert!(subscription.next().await.is_none());
    let unsettled = held.ack().await.unwrap_err();
    assert!(matches!(unsettled, Error::Settle(_)), "{unsettled:?}");

    // Subscribed again: the message the lost connection held comes back, flagged.
    let mut again = subscribe(&queue, SubscribeOptions::new(queue.name.clone())).await;
    let redelivered = received(&mut again).await;
    assert_eq!(redelivered.message().message_id.as_deref(), Some("m-1"));
    assert!(redelivered.message().redelivered);
    redelivered.ack().await.unwrap();
}
