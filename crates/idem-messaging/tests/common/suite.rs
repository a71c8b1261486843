//! The broker conformance suite: what every broker must do for the inbox and the relay, written
//! once as plain async functions over a [`Broker`] fixture, and stamped out by each broker's
//! tests with [`broker_suite!`](broker_suite).
//!
//! Each scenario gets a fresh fixture (a queue, stream or topic of its own, on the shared test
//! server or on a server the fixture owns) and, when it needs one, a database of its own for the
//! inbox, the outbox and the ledger of effects: each is stamped out on PostgreSQL and on MySQL
//! (with the `mysql` feature). A scenario skips, saying so, when its database's variable
//! (`IDEM_TEST_POSTGRES_URL`, `IDEM_TEST_MYSQL_URL`) is not set.

#![allow(unused_imports, unused_macros)] // each test file stamps a part

use std::{collections::HashMap, future::Future, time::Duration};

use idem_messaging::{
    Confirmations, Envelope, Error, Handled, Inbox, Incoming, MessageId, Outbox, OutboxMessage,
    PublishError, Publisher, Relay,
};
use tokio_util::sync::CancellationToken;

use super::{EVENTUALLY, TestDb, consumer};

/// How long a scenario watches for a message that must not come (again). Longer than every
/// fixture's redelivery delay, so that a message wrongly given back would show within it.
pub const QUIET: Duration = Duration::from_secs(3);

/// A broker under test, with a destination of the test's own.
pub trait Broker: Send + Sync + Sized + 'static {
    /// The broker's publisher, as the relay uses it.
    type Publisher: Publisher + 'static;
    /// A consumer of the destination, as one consumer process holds it.
    type Consumer: Send;
    /// A message the consumer was given.
    type Message: Incoming + 'static;

    /// How long after a message the broker itself drops a copy published under its id (NATS
    /// JetStream's duplicate window); zero for a broker that stores every copy.
    const DUPLICATE_WINDOW: Duration = Duration::ZERO;

    /// The queue, subject or topic the scenarios publish to and consume from.
    fn destination(&self) -> String;

    /// A new publisher to the broker.
    fn publisher(&self) -> Self::Publisher;

    /// Publishes `payload` to the destination with the broker's own client and no message id,
    /// as a producer that does not go through the outbox would.
    fn publish_without_id(&self, payload: &str) -> impl Future<Output = ()> + Send;

    /// A new consumer of the destination, on a connection of its own, as a consumer process
    /// that starts (or restarts) would open it. Every consumer of a fixture is the same logical
    /// consumer (one queue, one durable JetStream consumer, one Kafka consumer group): what one
    /// left unacknowledged goes to the next.
    fn consumer(&self) -> impl Future<Output = Self::Consumer> + Send;

    /// The next message `consumer` is given, or `None` when none comes within `within`.
    fn next(
        &self,
        consumer: &mut Self::Consumer,
        within: Duration,
    ) -> impl Future<Output = Option<Self::Message>> + Send;

    /// Ends `consumer` as a crash of its process would: what it acknowledged stays
    /// acknowledged, what it did not goes back to the broker for the next consumer.
    fn kill(&self, consumer: Self::Consumer) -> impl Future<Output = ()> + Send;

    /// Stops the broker and starts it again on the same data, or an equivalent the fixture
    /// documents; publishers and consumers reconnect by themselves.
    fn restart(&self) -> impl Future<Output = ()> + Send;
}

/// The names of every scenario, which each stamping must list as run or as not run.
pub const SCENARIOS: &[&str] = &[
    "a_confirmed_publish_reaches_the_consumer_with_its_id",
    "a_copy_delivered_twice_is_processed_once",
    "a_failed_handler_redelivers_and_the_retry_commits_once",
    "a_message_without_an_id_is_dead_lettered_not_retried",
    "a_consumer_killed_between_its_commit_and_its_ack_skips_the_copy",
    "two_relays_deliver_every_message_once",
    "per_key_order_holds_through_the_relay",
    "a_broker_restarted_under_a_running_relay_loses_nothing",
];

/// Stamps out the scenarios as `#[tokio::test]`s, each group with its fixture: an `async`
/// expression yielding `Option<impl Broker>` (`None` when its server is not configured, after
/// saying so). Each scenario is a module of two tests, `postgres` and `mysql` (with the `mysql`
/// feature), its database's. Scenarios a broker cannot run are listed under `not_run`, each with
/// its reason; a test checks that every scenario is listed exactly once.
///
/// ```text
/// broker_suite! {
///     run shared_queue() => [a_copy_delivered_twice_is_processed_once, …],
///     run own_server() => [a_broker_restarted_under_a_running_relay_loses_nothing],
///     not_run => [a_scenario: "why this broker cannot run it"],
/// }
/// ```
macro_rules! broker_suite {
    (
        $( run $fixture:expr => [ $( $scenario:ident ),* $(,)? ] ),+ ,
        not_run => [ $( $skipped:ident : $reason:literal ),* $(,)? ] $(,)?
    ) => {
        $( $(
            mod $scenario {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let Some(broker) = $fixture.await else { return };
                    crate::common::suite::$scenario::<_, crate::common::TestSchema>(broker).await;
                }

                #[cfg(feature = "mysql")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn mysql() {
                    let Some(broker) = $fixture.await else { return };
                    crate::common::suite::$scenario::<_, crate::common::TestDatabase>(broker)
                        .await;
                }
            }
        )* )+

        #[test]
        fn every_scenario_of_the_suite_is_stamped_once() {
            $(
                const _: &str = $reason;
                let _ = crate::common::suite::$skipped::<
                    crate::common::suite::Never,
                    crate::common::TestSchema,
                >;
            )*
            let mut listed: Vec<&str> = vec![
                $( $( stringify!($scenario), )* )+
                $( stringify!($skipped), )*
            ];
            listed.sort_unstable();
            let mut expected = crate::common::suite::SCENARIOS.to_vec();
            expected.sort_unstable();
            assert_eq!(listed, expected);
        }
    };
}
pub(crate) use broker_suite;

/// A broker no fixture is: names a scenario in `not_run` (so that a misspelt name does not
/// compile) without running it.
pub enum Never {}

impl Broker for Never {
    type Publisher = super::Recorder;
    type Consumer = ();
    type Message = NeverMessage;

    fn destination(&self) -> String {
        match *self {}
    }
    fn publisher(&self) -> Self::Publisher {
        match *self {}
    }
    async fn publish_without_id(&self, _: &str) {
        match *self {}
    }
    async fn consumer(&self) {
        match *self {}
    }
    async fn next(&self, (): &mut (), _: Duration) -> Option<NeverMessage> {
        match *self {}
    }
    async fn kill(&self, (): ()) {
        match *self {}
    }
    async fn restart(&self) {
        match *self {}
    }
}

/// The message of [`Never`].
pub enum NeverMessage {}

impl Incoming for NeverMessage {
    fn message_id(&self) -> Option<&str> {
        match *self {}
    }
    fn payload(&self) -> &[u8] {
        match *self {}
    }
    async fn ack(self) -> Result<(), idem_messaging::BoxError> {
        match self {}
    }
    async fn requeue(self) -> Result<(), idem_messaging::BoxError> {
        match self {}
    }
    async fn reject(self) -> Result<(), idem_messaging::BoxError> {
        match self {}
    }
}

fn envelope(id: &str, message: OutboxMessage) -> Envelope {
    Envelope::new(id.parse().unwrap(), message, 1)
}

fn message<B: Broker>(broker: &B, payload: &str) -> OutboxMessage {
    OutboxMessage::new(broker.destination(), payload.to_owned())
}

async fn next<B: Broker>(broker: &B, consumer: &mut B::Consumer) -> B::Message {
    broker
        .next(consumer, EVENTUALLY)
        .await
        .expect("a message arrives")
}

/// The consumer's handler: one ledger row per message, keyed by its id, holding its payload.
async fn consume<M: Incoming, D: TestDb>(
    schema: &D,
    inbox: &Inbox<D::DB>,
    message: M,
) -> Result<Handled<()>, Error> {
    inbox
        .consume(
            schema.pool(),
            &consumer("ledger"),
            message,
            |tx, message| {
                Box::pin(async move {
                    let entry = std::str::from_utf8(message.payload()).unwrap();
                    schema
                        .book(&mut **tx, message.message_id().unwrap(), entry)
                        .await;
                    Ok(())
                })
            },
        )
        .await
}

/// Consumes one message at a time until `count` were processed; returns the copies skipped.
async fn drain<B: Broker, D: TestDb>(
    broker: &B,
    consumer: &mut B::Consumer,
    schema: &D,
    inbox: &Inbox<D::DB>,
    count: usize,
) -> usize {
    let (mut processed, mut duplicates) = (0, 0);
    while processed < count {
        let message = next(broker, consumer).await;
        match consume(schema, inbox, message).await {
            Ok(Handled::Processed(())) => processed += 1,
            Ok(Handled::Duplicate) => duplicates += 1,
            Err(error) => panic!("the ledger consumer failed: {error}"),
        }
    }
    duplicates
}

/// Waits until the outbox has nothing left to publish.
async fn published<D: TestDb>(schema: &D, outbox: &Outbox<D::DB>) {
    tokio::time::timeout(EVENTUALLY, async {
        while outbox.pending(schema.pool()).await.unwrap() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the relay publishes every message");
}

/// Two messages published in one batch are confirmed, and reach a consumer in order with the
/// outbox ids as their message ids, their payloads intact, and their headers readable through
/// [`Incoming::header`].
pub async fn a_confirmed_publish_reaches_the_consumer_with_its_id<B: Broker, D: TestDb>(broker: B) {
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let batch = [
        envelope(
            "m-1",
            message(&broker, "one").header("traceparent", traceparent),
        ),
        envelope("m-2", message(&broker, "two")),
    ];
    let confirmations = broker.publisher().publish_batch(&batch).await;
    let confirmed: Vec<bool> = confirmations.iter().map(Result::is_ok).collect();
    assert_eq!(confirmed, [true, true], "{confirmations:?}");

    let mut consumer = broker.consumer().await;
    let first = next(&broker, &mut consumer).await;
    assert_eq!(
        (first.message_id(), first.payload()),
        (Some("m-1"), &b"one"[..])
    );
    // A header reads as it was published (the inbox continues a trace from it).
    assert_eq!(first.header("traceparent"), Some(traceparent));
    let second = next(&broker, &mut consumer).await;
    assert_eq!(
        (second.message_id(), second.payload()),
        (Some("m-2"), &b"two"[..])
    );
    assert_eq!(second.header("traceparent"), None);
    first.ack().await.unwrap();
    second.ack().await.unwrap();
}

/// The same message published twice (a relay that publishes again after a lost confirmation,
/// past the broker's own duplicate window if it has one) reaches the consumer twice: the first
/// copy is processed, the second skipped and acknowledged.
pub async fn a_copy_delivered_twice_is_processed_once<B: Broker, D: TestDb>(broker: B) {
    let Some(schema) = D::create().await else {
        return;
    };
    let inbox = schema.inbox().await;
    let publisher = broker.publisher();
    let copy = envelope("m-1", message(&broker, "+10"));
    let mut consumer = broker.consumer().await;

    publisher.publish(&copy).await.unwrap();
    let first = next(&broker, &mut consumer).await;
    assert_eq!(
        consume(&schema, &inbox, first).await.unwrap(),
        Handled::Processed(())
    );
    tokio::time::sleep(B::DUPLICATE_WINDOW * 2).await;
    publisher.publish(&copy).await.unwrap();
    let second = next(&broker, &mut consumer).await;
    assert_eq!(second.message_id(), Some("m-1"));
    assert_eq!(
        consume(&schema, &inbox, second).await.unwrap(),
        Handled::Duplicate
    );

    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
    let again = broker
        .next(&mut consumer, QUIET)
        .await
        .map(|m| m.payload().to_vec());
    assert_eq!(again, None, "a settled copy came back");
}

/// A handler that fails rolls back its effects and its inbox row and gives the message back;
/// the broker delivers it again and the retry's effects commit, once.
pub async fn a_failed_handler_redelivers_and_the_retry_commits_once<B: Broker, D: TestDb>(
    broker: B,
) {
    let Some(schema) = D::create().await else {
        return;
    };
    let inbox = schema.inbox().await;
    broker
        .publisher()
        .publish(&envelope("m-1", message(&broker, "+10")))
        .await
        .unwrap();
    let mut consumer = broker.consumer().await;

    let delivery = next(&broker, &mut consumer).await;
    let failed = inbox
        .consume(
            schema.pool(),
            &super::consumer("ledger"),
            delivery,
            |tx, delivery| {
                let schema = &schema;
                Box::pin(async move {
                    schema
                        .book(&mut **tx, delivery.message_id().unwrap(), "+10")
                        .await;
                    Err::<(), _>(anyhow::anyhow!("the ledger is closed"))
                })
            },
        )
        .await;
    assert_eq!(failed.unwrap_err().to_string(), "the ledger is closed");
    assert_eq!(schema.inbox_rows().await, 0);
    assert_eq!(schema.ledger().await, 0);

    let retry = next(&broker, &mut consumer).await;
    assert_eq!(retry.message_id(), Some("m-1"));
    assert_eq!(
        consume(&schema, &inbox, retry).await.unwrap(),
        Handled::Processed(())
    );
    assert_eq!(schema.entries().await, ["+10"]);
    assert_eq!(schema.inbox_rows().await, 1);
    let again = broker
        .next(&mut consumer, QUIET)
        .await
        .map(|m| m.payload().to_vec());
    assert_eq!(again, None, "a processed message came back");
}

/// A message without an id cannot be deduplicated: the consumer refuses it for good (the
/// broker drops or dead-letters it) instead of retrying it forever, and the messages behind it
/// flow, even to the next consumer after a crash.
pub async fn a_message_without_an_id_is_dead_lettered_not_retried<B: Broker, D: TestDb>(broker: B) {
    let Some(schema) = D::create().await else {
        return;
    };
    let inbox = schema.inbox().await;
    broker.publish_without_id("anonymous").await;
    broker
        .publisher()
        .publish(&envelope("m-2", message(&broker, "+20")))
        .await
        .unwrap();
    let mut consumer = broker.consumer().await;

    let anonymous = next(&broker, &mut consumer).await;
    assert_eq!(anonymous.payload(), b"anonymous");
    let outcome = consume(&schema, &inbox, anonymous).await;
    assert!(
        matches!(outcome, Err(Error::MissingMessageId)),
        "{outcome:?}"
    );
    assert_eq!(schema.ledger().await, 0);

    // The consumer dies; the next one is given the message behind, never the anonymous one.
    broker.kill(consumer).await;
    let mut consumer = broker.consumer().await;
    let behind = next(&broker, &mut consumer).await;
    assert_eq!(behind.message_id(), Some("m-2"));
    assert_eq!(
        consume(&schema, &inbox, behind).await.unwrap(),
        Handled::Processed(())
    );
    let again = broker
        .next(&mut consumer, QUIET)
        .await
        .map(|m| m.payload().to_vec());
    assert_eq!(again, None, "a refused or processed message came back");
    assert_eq!(schema.entries().await, ["+20"]);
}

/// A consumer that commits its inbox transaction and dies before acknowledging: the broker
/// gives the message to the next consumer, whose inbox skips and acknowledges it.
pub async fn a_consumer_killed_between_its_commit_and_its_ack_skips_the_copy<
    B: Broker,
    D: TestDb,
>(
    broker: B,
) {
    let Some(schema) = D::create().await else {
        return;
    };
    let inbox = schema.inbox().await;
    broker
        .publisher()
        .publish(&envelope("m-1", message(&broker, "+10")))
        .await
        .unwrap();

    let mut doomed = broker.consumer().await;
    let delivery = next(&broker, &mut doomed).await;
    let id: MessageId = delivery.message_id().unwrap().parse().unwrap();
    let first = inbox
        .handle(schema.pool(), &consumer("ledger"), &id, |tx| {
            Box::pin(async {
                schema.book(&mut **tx, id.as_str(), "+10").await;
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap();
    assert_eq!(first, Handled::Processed(()));
    drop(delivery); // never acknowledged
    broker.kill(doomed).await;

    let mut survivor = broker.consumer().await;
    let copy = next(&broker, &mut survivor).await;
    assert_eq!(copy.message_id(), Some("m-1"));
    assert_eq!(
        consume(&schema, &inbox, copy).await.unwrap(),
        Handled::Duplicate
    );
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(schema.inbox_rows().await, 1);
    let again = broker
        .next(&mut survivor, QUIET)
        .await
        .map(|m| m.payload().to_vec());
    assert_eq!(again, None, "the acknowledged copy came back");
}

/// Two relays compete on one outbox while four producers enqueue a thousand messages in
/// transactions of 50: every message reaches the ledger once.
pub async fn two_relays_deliver_every_message_once<B: Broker, D: TestDb>(broker: B) {
    const N: usize = 1000;
    let Some(schema) = D::create().await else {
        return;
    };
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let mut consumer = broker.consumer().await;

    let stop = CancellationToken::new();
    let relays: Vec<_> = (0..2)
        .map(|n| {
            let relay = Relay::new(schema.pool().clone(), outbox.clone(), broker.publisher())
                .name(format!("relay-{n}"))
                .batch_size(50)
                .poll_interval(Duration::from_millis(100));
            let stop = stop.clone();
            tokio::spawn(async move { relay.run(stop).await })
        })
        .collect();
    let producers = futures_util::future::join_all((0..4).map(|producer| {
        let (schema, outbox, broker) = (&schema, &outbox, &broker);
        async move {
            for chunk in 0..N / 4 / 50 {
                let mut tx = schema.pool().begin().await.unwrap();
                for n in 0..50 {
                    let payload = format!("{producer}/{chunk}/{n}");
                    outbox
                        .enqueue(&mut *tx, message(broker, &payload))
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
            }
        }
    }));
    let (_, duplicates) =
        tokio::join!(producers, drain(&broker, &mut consumer, &schema, &inbox, N));
    published(&schema, &outbox).await;
    stop.cancel();
    for relay in relays {
        relay.await.unwrap();
    }

    assert_eq!(schema.ledger().await, N as i64);
    assert_eq!(schema.duplicated_effects().await, 0);
    assert_eq!(schema.inbox_rows().await, N as i64);
    assert_eq!(
        schema
            .count("SELECT count(DISTINCT entry) FROM {schema}.ledger")
            .await,
        N as i64
    );
    eprintln!("{N} messages, {duplicates} copies skipped");
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

/// Two relays with ordering on, whose publisher refuses some first attempts: one consumer
/// processing one message at a time sees each key's messages in their enqueue order.
pub async fn per_key_order_holds_through_the_relay<B: Broker, D: TestDb>(broker: B) {
    const KEYS: usize = 5;
    const PER_KEY: usize = 10;
    let Some(schema) = D::create().await else {
        return;
    };
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    for n in 0..PER_KEY {
        let mut tx = schema.pool().begin().await.unwrap();
        for key in 0..KEYS {
            let message = message(&broker, &format!("k{key}:{n}")).ordering_key(format!("k{key}"));
            outbox.enqueue(&mut *tx, message).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
    let mut consumer = broker.consumer().await;

    let stop = CancellationToken::new();
    let relays: Vec<_> = (0..2)
        .map(|_| {
            let relay = Relay::new(
                schema.pool().clone(),
                outbox.clone(),
                RefuseSomeFirstAttempts(broker.publisher()),
            )
            .ordering(true)
            .backoff(Duration::from_millis(5), Duration::from_millis(20))
            .poll_interval(Duration::from_millis(20));
            let stop = stop.clone();
            tokio::spawn(async move { relay.run(stop).await })
        })
        .collect();
    drain(&broker, &mut consumer, &schema, &inbox, KEYS * PER_KEY).await;
    stop.cancel();
    for relay in relays {
        relay.await.unwrap();
    }

    let entries = schema.entries().await;
    let mut sequences: HashMap<&str, Vec<usize>> = HashMap::new();
    for entry in &entries {
        let (key, n) = entry.split_once(':').unwrap();
        sequences.entry(key).or_default().push(n.parse().unwrap());
    }
    assert_eq!(sequences.len(), KEYS);
    for (key, sequence) in sequences {
        assert_eq!(sequence, (0..PER_KEY).collect::<Vec<_>>(), "key {key}");
    }
    assert_eq!(outbox.pending(schema.pool()).await.unwrap(), 0);
}

/// The broker restarts while a relay publishes and producers keep enqueueing: the relay gives
/// back what it could not publish and publishes it once the broker is back, and every committed
/// message reaches the ledger once, none dead-lettered.
pub async fn a_broker_restarted_under_a_running_relay_loses_nothing<B: Broker, D: TestDb>(
    broker: B,
) {
    const TRANSACTIONS: usize = 20;
    const PER_TRANSACTION: usize = 10;
    let Some(schema) = D::create().await else {
        return;
    };
    let (inbox, outbox) = (schema.inbox().await, schema.outbox().await);
    let stop = CancellationToken::new();
    let relay = Relay::new(schema.pool().clone(), outbox.clone(), broker.publisher())
        .batch_size(20)
        .publish_timeout(Duration::from_secs(3))
        .lease(Duration::from_secs(8))
        .backoff(Duration::from_millis(50), Duration::from_millis(500))
        .poll_interval(Duration::from_millis(20));
    let relay = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });
    let enqueue = |from: usize, to: usize| {
        let (schema, outbox, broker) = (&schema, &outbox, &broker);
        async move {
            for t in from..to {
                let mut tx = schema.pool().begin().await.unwrap();
                for n in 0..PER_TRANSACTION {
                    let payload = format!("{t}/{n}");
                    outbox
                        .enqueue(&mut *tx, message(broker, &payload))
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // Half before the restart, published (the relay is connected); half while it happens.
    enqueue(0, TRANSACTIONS / 2).await;
    published(&schema, &outbox).await;
    tokio::join!(broker.restart(), enqueue(TRANSACTIONS / 2, TRANSACTIONS));
    published(&schema, &outbox).await;

    let mut consumer = broker.consumer().await;
    let count = TRANSACTIONS * PER_TRANSACTION;
    let duplicates = drain(&broker, &mut consumer, &schema, &inbox, count).await;
    stop.cancel();
    relay.await.unwrap();

    assert_eq!(schema.ledger().await, count as i64);
    assert_eq!(schema.duplicated_effects().await, 0);
    assert_eq!(
        schema
            .count("SELECT count(DISTINCT entry) FROM {schema}.ledger")
            .await,
        count as i64
    );
    assert_eq!(
        outbox.dead_letters(schema.pool(), 10).await.unwrap().len(),
        0
    );
    eprintln!("{count} messages across the restart, {duplicates} copies skipped");
}
