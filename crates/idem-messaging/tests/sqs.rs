//! Amazon SQS end to end, against an SQS-compatible server (moto's): the broker conformance
//! suite (`common::suite`) on a queue of the test's own, and what is SQS's alone: message
//! attributes, queues by name or by URL, the refusal of one entry of a batch, FIFO group and
//! deduplication ids, and the consumer's visibility heartbeat; and the subscription by URL
//! (`subscription`): its messages' fields, requeue and ack, the in-flight limit, a missing queue,
//! a FIFO queue's groups.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use aws_sdk_sqs::{
    Client,
    config::{BehaviorVersion, Credentials, Region},
    types::{MessageSystemAttributeName, QueueAttributeName},
};
use idem_messaging::{
    Envelope, Error, Handled, Incoming, OutboxMessage, PublishError, Publisher,
    sqs::{MESSAGE_ID_ATTRIBUTE, SqsConsumer, SqsMessage, SqsPublisher, http_client},
};
use idem_test_support::{Server, TcpProxy, require, unique_name};
use tokio_util::sync::CancellationToken;

use common::{EVENTUALLY, TestSchema, consumer};

/// Both servers, or the test returns.
macro_rules! require_servers {
    () => {{
        let postgres = require!(Postgres);
        let sqs = require!(Sqs);
        (postgres, sqs)
    }};
}

/// A client of the test server, with credentials of its own (the server takes any).
fn client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "idem-tests"))
        .http_client(http_client())
        .build();
    Client::from_conf(config)
}

/// A queue of the test's own, deleted when this is dropped.
struct TestQueue {
    client: Client,
    name: String,
    url: String,
}

impl TestQueue {
    /// A standard queue, or a FIFO one, whose messages stay hidden `visibility` once received.
    async fn new(endpoint: &str, fifo: bool, visibility: Duration) -> Self {
        let client = client(endpoint);
        let mut name = unique_name("idem-test-");
        let mut request = client.create_queue().attributes(
            QueueAttributeName::VisibilityTimeout,
            visibility.as_secs().to_string(),
        );
        if fifo {
            name.push_str(".fifo");
            request = request.attributes(QueueAttributeName::FifoQueue, "true");
        }
        let created = request.queue_name(&name).send().await.unwrap();
        let url = created.queue_url().unwrap().to_owned();
        Self { client, name, url }
    }

    fn publisher(&self) -> SqsPublisher {
        SqsPublisher::new(self.client.clone())
    }

    /// A consumer with short polls, so that an empty queue answers in a second.
    fn consumer(&self, visibility: Duration) -> SqsConsumer {
        SqsConsumer::new(self.client.clone(), &self.url)
            .visibility_timeout(visibility)
            .wait_time(Duration::from_secs(1))
    }

    fn message(&self, payload: &str) -> OutboxMessage {
        OutboxMessage::new(self.name.clone(), payload.to_owned())
    }

    /// The messages in the queue: visible, and received but not deleted.
    async fn held(&self) -> (u64, u64) {
        let attributes = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let attributes = attributes.attributes().unwrap();
        let number = |name| attributes.get(&name).unwrap().parse::<u64>().unwrap();
        (
            number(QueueAttributeName::ApproximateNumberOfMessages),
            number(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        let (client, url) = (self.client.clone(), self.url.clone());
        // Drop is synchronous and may run inside a runtime: a thread with a runtime of its own.
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(client.delete_queue().queue_url(url).send())?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
        .join();
        if !matches!(deleted, Ok(Ok(()))) {
            eprintln!("could not delete the test queue {}", self.name);
        }
    }
}

/// The suite's fixture: a queue of the test's own, with the shortest visibility timeout the
/// consumer allows (3 s), so that what a killed consumer held comes back within seconds. A
/// standard queue stores every copy published (no duplicate window); a FIFO queue keeps each
/// key's order but drops a copy republished within five minutes, so it runs only the scenario
/// that needs the order. For the broker restart, the fixture's clients reach SQS through a
/// proxy of its own (moto keeps its queues in memory: a real restart would lose them).
struct Sqs {
    queue: TestQueue,
    /// The client of the publishers and consumers: through the proxy, when there is one.
    client: Client,
    proxy: Option<TcpProxy>,
}

/// A consumer of the fixture's queue, and the messages of its last receive not given out yet.
struct Receiver {
    consumer: SqsConsumer,
    received: VecDeque<SqsMessage>,
}

impl Sqs {
    const VISIBILITY: Duration = Duration::from_secs(3);

    async fn standard() -> Option<Self> {
        Self::new(false, false).await
    }

    async fn fifo() -> Option<Self> {
        Self::new(true, false).await
    }

    async fn behind_a_proxy() -> Option<Self> {
        Self::new(false, true).await
    }

    async fn new(fifo: bool, proxied: bool) -> Option<Self> {
        let sqs = Server::Sqs.url()?;
        let queue = TestQueue::new(&sqs, fifo, Self::VISIBILITY).await;
        let proxy = if proxied {
            let server = sqs.trim_start_matches("http://").trim_end_matches('/');
            Some(TcpProxy::start(server).await)
        } else {
            None
        };
        let client = proxy.as_ref().map_or_else(
            || queue.client.clone(),
            |proxy| client(&format!("http://{}", proxy.address())),
        );
        Some(Self {
            queue,
            client,
            proxy,
        })
    }
}

impl common::suite::Broker for Sqs {
    type Publisher = SqsPublisher;
    type Consumer = Receiver;
    type Message = SqsMessage;

    fn destination(&self) -> String {
        self.queue.name.clone()
    }

    fn publisher(&self) -> SqsPublisher {
        SqsPublisher::new(self.client.clone())
    }

    async fn publish_without_id(&self, payload: &str) {
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue.url)
            .message_body(payload);
        if self.queue.name.ends_with(".fifo") {
            request = request
                .message_group_id("anonymous")
                .message_deduplication_id(unique_name("anonymous-"));
        }
        request.send().await.unwrap();
    }

    /// Up to ten messages a receive, hidden 3 s, with polls of a second.
    async fn consumer(&self) -> Receiver {
        Receiver {
            consumer: SqsConsumer::new(self.client.clone(), &self.queue.url)
                .visibility_timeout(Self::VISIBILITY)
                .wait_time(Duration::from_secs(1)),
            received: VecDeque::new(),
        }
    }

    /// Never cuts a receive short (a message it took would stay hidden, unseen): the last poll
    /// may end up to a second after `within`.
    async fn next(&self, receiver: &mut Receiver, within: Duration) -> Option<SqsMessage> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(message) = receiver.received.pop_front() {
                return Some(message);
            }
            if Instant::now() >= deadline {
                return None;
            }
            receiver
                .received
                .extend(receiver.consumer.receive().await.unwrap());
        }
    }

    /// Drops the consumer and the messages it held: their visibility is no longer extended, and
    /// they come back once the 3 s visibility timeout has passed.
    async fn kill(&self, receiver: Receiver) {
        drop(receiver);
    }

    /// An outage rather than a restart: the proxy closes every connection, and refuses new ones
    /// for a second.
    async fn restart(&self) {
        self.proxy
            .as_ref()
            .expect("a fixture behind a proxy")
            .outage(Duration::from_secs(1))
            .await;
    }
}

common::suite::broker_suite! {
    run Sqs::standard() => [
        a_confirmed_publish_reaches_the_consumer_with_its_id,
        a_copy_delivered_twice_is_processed_once,
        a_failed_handler_redelivers_and_the_retry_commits_once,
        a_message_without_an_id_is_dead_lettered_not_retried,
        a_consumer_killed_between_its_commit_and_its_ack_skips_the_copy,
        two_relays_deliver_every_message_once,
    ],
    run Sqs::fifo() => [per_key_order_holds_through_the_relay],
    run Sqs::behind_a_proxy() => [a_broker_restarted_under_a_running_relay_loses_nothing],
    not_run => [],
}

/// The next messages the consumer receives, waiting for at least one.
async fn next(consumer: &SqsConsumer) -> Vec<SqsMessage> {
    tokio::time::timeout(EVENTUALLY, async {
        loop {
            let messages = consumer.receive().await.unwrap();
            if !messages.is_empty() {
                return messages;
            }
        }
    })
    .await
    .expect("a message arrives")
}

fn envelope(id: &str, message: OutboxMessage) -> Envelope {
    Envelope::new(id.parse().unwrap(), message, 1)
}

#[tokio::test]
async fn the_id_and_the_headers_travel_as_attributes_to_a_queue_by_name_or_by_url() {
    let sqs = require!(Sqs);
    let queue = TestQueue::new(&sqs, false, Duration::from_secs(30)).await;
    let batch = [
        envelope(
            "m-1",
            queue
                .message("one")
                .header("content-type", "text/plain")
                .header("trace", "a")
                .header("trace", "b"),
        ),
        // By URL rather than by name.
        envelope("m-2", OutboxMessage::new(queue.url.clone(), "two")),
        envelope(
            "m-3",
            OutboxMessage::new(format!("{}-nowhere", queue.name), "lost"),
        ),
        envelope(
            "m-4",
            OutboxMessage::new(queue.name.clone(), vec![0xff, 0xfe]),
        ),
    ];
    let confirmations = queue.publisher().publish_batch(&batch).await;
    assert_eq!(confirmations.len(), 4);
    assert!(confirmations[0].is_ok(), "{:?}", confirmations[0]);
    assert!(confirmations[1].is_ok(), "{:?}", confirmations[1]);
    match &confirmations[2] {
        Err(PublishError::Rejected { reason }) => {
            assert!(reason.contains("NonExistentQueue"), "{reason}")
        }
        other => panic!("a missing queue is a rejection, got {other:?}"),
    }
    match &confirmations[3] {
        Err(PublishError::Rejected { reason }) => assert_eq!(
            reason,
            "an SQS message body is text, and the payload is not UTF-8"
        ),
        other => panic!("a binary payload is a rejection, got {other:?}"),
    }

    let consumer = queue.consumer(Duration::from_secs(30));
    let mut received = Vec::new();
    while received.len() < 2 {
        received.extend(next(&consumer).await);
    }
    received.sort_by_key(|m| m.message_id().unwrap().to_owned());
    assert_eq!(received[0].message_id(), Some("m-1"));
    assert_eq!(received[0].payload(), b"one");
    let attributes: HashMap<&str, &str> = received[0]
        .message()
        .message_attributes()
        .unwrap()
        .iter()
        .map(|(name, value)| (name.as_str(), value.string_value().unwrap()))
        .collect();
    assert_eq!(
        attributes,
        HashMap::from([
            (MESSAGE_ID_ATTRIBUTE, "m-1"),
            ("content-type", "text/plain"),
            ("trace", "b"),
        ])
    );
    assert_eq!(received[1].message_id(), Some("m-2"));
    assert_eq!(received[1].payload(), b"two");
    for message in received {
        message.ack().await.unwrap();
    }
    assert_eq!(queue.held().await, (0, 0));
}

#[tokio::test]
async fn a_message_sqs_refuses_is_refused_alone_and_the_rest_of_its_batch_confirmed() {
    let sqs = require!(Sqs);
    let queue = TestQueue::new(&sqs, false, Duration::from_secs(30)).await;
    let batch = [
        envelope("m-1", queue.message("one")),
        // Attribute names are letters, digits, `_`, `-` and `.`; values are not empty.
        envelope("m-2", queue.message("two").header("bad name!", "")),
        envelope("m-3", queue.message("three")),
    ];
    let confirmations = queue.publisher().publish_batch(&batch).await;
    assert_eq!(confirmations.len(), 3);
    assert!(confirmations[0].is_ok(), "{:?}", confirmations[0]);
    assert!(
        matches!(&confirmations[1], Err(PublishError::Rejected { .. })),
        "{:?}",
        confirmations[1]
    );
    assert!(confirmations[2].is_ok(), "{:?}", confirmations[2]);
    // What the queue then holds is not checked: moto stores a message before it validates its
    // attributes, so the refused one is there too.
}

#[tokio::test]
async fn a_fifo_queue_gets_the_key_as_group_and_drops_a_republished_copy() {
    let sqs = require!(Sqs);
    let queue = TestQueue::new(&sqs, true, Duration::from_secs(30)).await;
    let publisher = queue.publisher();
    let keyed = envelope("m-1", queue.message("one").ordering_key("order-7"));
    publisher.publish(&keyed).await.unwrap();
    // A relay that died before marking it sent publishes it again, under the same id.
    publisher.publish(&keyed).await.unwrap();
    publisher
        .publish(&envelope("m-2", queue.message("two")))
        .await
        .unwrap();

    let received = queue
        .client
        .receive_message()
        .queue_url(&queue.url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let system = |i: usize, name| {
        received.messages()[i]
            .attributes()
            .unwrap()
            .get(&name)
            .cloned()
    };
    assert_eq!(received.messages().len(), 2);
    assert_eq!(received.messages()[0].body(), Some("one"));
    assert_eq!(
        system(0, MessageSystemAttributeName::MessageGroupId).as_deref(),
        Some("order-7")
    );
    assert_eq!(
        system(0, MessageSystemAttributeName::MessageDeduplicationId).as_deref(),
        Some("m-1")
    );
    // Without a key, the message is a group of its own.
    assert_eq!(received.messages()[1].body(), Some("two"));
    assert_eq!(
        system(1, MessageSystemAttributeName::MessageGroupId).as_deref(),
        Some("m-2")
    );
}

#[tokio::test]
async fn a_handler_slower_than_the_visibility_timeout_is_not_redelivered_mid_run() {
    let (postgres, sqs) = require_servers!();
    let schema = TestSchema::new(&postgres).await;
    let inbox = schema.inbox().await;
    let visibility = Duration::from_secs(3);
    let queue = TestQueue::new(&sqs, false, visibility).await;
    queue
        .publisher()
        .publish(&envelope("payment-3", queue.message("+30")))
        .await
        .unwrap();
    let sqs_consumer = queue.consumer(visibility);
    let [message] = <[_; 1]>::try_from(next(&sqs_consumer).await).unwrap();

    // Another instance polls the queue while the handler runs for three visibility timeouts.
    let stop = CancellationToken::new();
    let other = tokio::spawn({
        let (other, stop) = (queue.consumer(visibility), stop.clone());
        async move {
            let mut stolen = 0;
            while !stop.is_cancelled() {
                for message in other.receive().await.unwrap() {
                    stolen += 1;
                    drop(message);
                }
            }
            stolen
        }
    });
    let books = &schema;
    let handled = inbox
        .consume(&schema.pool, &consumer("ledger"), message, |tx, message| {
            Box::pin(async move {
                tokio::time::sleep(visibility * 3).await;
                books.book(tx, message.message_id().unwrap(), "+30").await;
                Ok::<_, Error>(())
            })
        })
        .await
        .unwrap();
    stop.cancel();
    assert_eq!(handled, Handled::Processed(()));
    assert_eq!(other.await.unwrap(), 0);
    assert_eq!(schema.ledger().await, 1);
    assert_eq!(queue.held().await, (0, 0));
}

#[tokio::test]
async fn a_message_whose_handler_always_fails_goes_to_the_dead_letter_queue_by_redrive() {
    let (postgres, sqs) = require_servers!();
    let schema = TestSchema::new(&postgres).await;
    let inbox = schema.inbox().await;
    let visibility = Duration::from_secs(3);
    let dead_letters = TestQueue::new(&sqs, false, visibility).await;
    let queue = TestQueue::new(&sqs, false, visibility).await;
    let arn = queue
        .client
        .get_queue_attributes()
        .queue_url(&dead_letters.url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    queue
        .client
        .set_queue_attributes()
        .queue_url(&queue.url)
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"3"}}"#),
        )
        .send()
        .await
        .unwrap();
    queue
        .publisher()
        .publish(&envelope("payment-4", queue.message("+40")))
        .await
        .unwrap();

    // Each failure requeues the message (visible again at once); past its third receive, SQS
    // moves it to the dead-letter queue instead of handing it out again.
    let sqs_consumer = queue.consumer(visibility);
    let mut attempts = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        for message in sqs_consumer.receive().await.unwrap() {
            attempts += 1;
            let failed = inbox
                .consume(&schema.pool, &consumer("ledger"), message, |_, _| {
                    Box::pin(async { Err::<(), _>(anyhow::anyhow!("the ledger is closed")) })
                })
                .await;
            assert_eq!(failed.unwrap_err().to_string(), "the ledger is closed");
        }
        if dead_letters.held().await == (1, 0) {
            break;
        }
    }
    assert_eq!(attempts, 3);
    assert_eq!(schema.inbox_rows().await, 0);
    assert_eq!(queue.held().await, (0, 0));

    // The dead letter keeps its body and its id.
    let [dead] = <[_; 1]>::try_from(next(&dead_letters.consumer(visibility)).await).unwrap();
    assert_eq!(dead.message_id(), Some("payment-4"));
    assert_eq!(dead.payload(), b"+40");
}

/// What a subscription by URL is tested with: the URL's client takes its credentials from the
/// usual chain, and a test cannot set its own process's environment (tests run on threads, and
/// `set_var` is unsafe): each such test runs again in a process of its own, this test binary
/// started for it alone with the test server's credentials in its environment.
mod subscription {
    use std::time::{Duration, SystemTime};

    use idem_messaging::{
        BrokerUrl, Error, OutboxMessage, Publisher, SubscribeOptions, Subscription,
        consume::{Message, Received},
        sqs::UnknownQueue,
    };

    use super::{EVENTUALLY, TestQueue, envelope};

    /// Set in the process a test runs again in.
    const CHILD: &str = "IDEM_TEST_SQS_SUBSCRIPTION_CHILD";

    /// Runs the test `name` (its path in this binary) again in a child process with the test
    /// server's credentials, and checks that it passed there: `true` in that child, where the
    /// test goes on, `false` in the test's own process, which then returns.
    async fn in_a_process_with_credentials(name: &str) -> bool {
        if std::env::var_os(CHILD).is_some() {
            return true;
        }
        let output = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("AWS_CONFIG_FILE", "/nonexistent/idem-test/config")
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/idem-test/credentials",
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        eprintln!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{name} failed in its own process");
        // A filter that matched nothing would pass too.
        assert!(
            stdout.contains(&format!("test {name} ... ok")),
            "{name} did not run"
        );
        false
    }

    /// The test server's URL, or the test returns; in the test's own process, runs it in a
    /// process with credentials and returns.
    macro_rules! sqs_with_credentials {
        ($name:ident) => {{
            let sqs = idem_test_support::require!(Sqs);
            if !in_a_process_with_credentials(concat!("subscription::", stringify!($name))).await {
                return;
            }
            sqs
        }};
    }

    async fn subscribe(sqs: &str, options: SubscribeOptions) -> Result<Subscription, Error> {
        let url: BrokerUrl = format!("sqs://us-east-1?endpoint={sqs}").parse().unwrap();
        url.subscribe(options).await
    }

    async fn next(subscription: &mut Subscription) -> Received {
        tokio::time::timeout(EVENTUALLY, subscription.next())
            .await
            .expect("a message arrives")
            .expect("the subscription goes on")
            .unwrap()
    }

    /// The time `SentTimestamp` can say of a message sent after `time`: whole milliseconds.
    fn millis(time: SystemTime) -> SystemTime {
        let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(since.as_millis() as u64)
    }

    #[tokio::test]
    async fn a_message_received_by_url_carries_its_ids_headers_and_time() {
        let sqs = sqs_with_credentials!(a_message_received_by_url_carries_its_ids_headers_and_time);
        let queue = TestQueue::new(&sqs, false, Duration::from_secs(30)).await;
        let before = millis(SystemTime::now());
        queue
            .publisher()
            .publish(&envelope(
                "m-1",
                queue
                    .message("one")
                    .ordering_key("order-42")
                    .header("trace", "a")
                    .header("content-type", "text/plain"),
            ))
            .await
            .unwrap();
        let after = SystemTime::now();

        // By the queue's URL; its name is the source. One at a time: see below.
        let mut subscription = subscribe(&sqs, SubscribeOptions::new(&queue.url).max_in_flight(1))
            .await
            .unwrap();
        let received = next(&mut subscription).await;
        let message = received.message();
        let time = message.time.unwrap();
        assert!(before <= time && time <= after, "{time:?}");
        let mut expected = Message::new(queue.name.clone(), "one");
        expected.message_id = Some("m-1".into());
        expected.broker_id = message.broker_id.clone();
        // A standard queue orders nothing: the key is not sent.
        expected.ordering_key = None;
        // By name: SQS keeps no order.
        expected.headers = vec![
            ("content-type".into(), "text/plain".into()),
            ("trace".into(), "a".into()),
        ];
        expected.time = Some(time);
        expected.redelivered = false;
        assert_eq!(*message, expected);

        // The broker id is SQS's MessageId, as another receive of the message shows. The
        // subscription, which holds its one message, has no receive under way: dropped, it
        // takes nothing more.
        let broker_id = message.broker_id.clone().unwrap();
        drop(subscription);
        received.requeue().await.unwrap();
        let again = queue
            .client
            .receive_message()
            .queue_url(&queue.url)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        assert_eq!(again.messages().len(), 1);
        assert_eq!(again.messages()[0].message_id(), Some(broker_id.as_str()));
    }

    #[tokio::test]
    async fn a_requeued_message_comes_again_as_redelivered_and_an_acked_one_is_deleted() {
        let sqs = sqs_with_credentials!(
            a_requeued_message_comes_again_as_redelivered_and_an_acked_one_is_deleted
        );
        let queue = TestQueue::new(&sqs, false, Duration::from_secs(30)).await;
        queue
            .publisher()
            .publish(&envelope("m-1", queue.message("one")))
            .await
            .unwrap();
        // By the queue's name.
        let mut subscription = subscribe(&sqs, SubscribeOptions::new(&queue.name))
            .await
            .unwrap();
        let first = next(&mut subscription).await;
        assert_eq!(first.message().message_id.as_deref(), Some("m-1"));
        assert!(!first.message().redelivered);
        let broker_id = first.message().broker_id.clone();
        first.requeue().await.unwrap();

        let again = next(&mut subscription).await;
        assert_eq!(again.message().message_id.as_deref(), Some("m-1"));
        assert_eq!(again.message().broker_id, broker_id);
        assert_eq!(again.message().payload, "one");
        assert!(again.message().redelivered);
        assert_eq!(queue.held().await, (0, 1));
        again.ack().await.unwrap();
        // Deleted: neither visible nor held by anyone.
        assert_eq!(queue.held().await, (0, 0));
    }

    #[tokio::test]
    async fn no_more_than_max_in_flight_messages_are_received_until_one_is_settled() {
        let sqs = sqs_with_credentials!(
            no_more_than_max_in_flight_messages_are_received_until_one_is_settled
        );
        let queue = TestQueue::new(&sqs, false, Duration::from_secs(30)).await;
        let batch: Vec<_> = (1..=3)
            .map(|n| envelope(&format!("m-{n}"), queue.message(&format!("{n}"))))
            .collect();
        let confirmations = queue.publisher().publish_batch(&batch).await;
        assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");

        let mut subscription = subscribe(
            &sqs,
            SubscribeOptions::new(&queue.name)
                .max_in_flight(2)
                .ack_wait(Duration::from_secs(3)),
        )
        .await
        .unwrap();
        let id = |received: &Received| received.message().message_id.clone().unwrap();
        let first = next(&mut subscription).await;
        let second = next(&mut subscription).await;
        let mut ids = vec![id(&first), id(&second)];
        // Two held: the third stays in the queue, visible, however long they are held (past
        // their visibility timeout: they are extended).
        let waited = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
        assert!(waited.is_err(), "{waited:?}");
        assert_eq!(queue.held().await, (1, 2));

        first.ack().await.unwrap();
        let third = next(&mut subscription).await;
        ids.push(id(&third));
        ids.sort();
        assert_eq!(ids, ["m-1", "m-2", "m-3"]);
        assert_eq!(queue.held().await, (0, 2));
        second.ack().await.unwrap();
        third.ack().await.unwrap();
        assert_eq!(queue.held().await, (0, 0));
    }

    #[tokio::test]
    async fn a_missing_queue_is_refused_at_subscribe_by_name_and_by_url() {
        let sqs = sqs_with_credentials!(a_missing_queue_is_refused_at_subscribe_by_name_and_by_url);
        let queue = TestQueue::new(&sqs, false, Duration::from_secs(30)).await;
        for missing in [
            format!("{}-nowhere", queue.name),
            format!("{}-nowhere", queue.url),
        ] {
            match subscribe(&sqs, SubscribeOptions::new(&missing)).await {
                Err(Error::Receive(source)) => {
                    let unknown = source.downcast_ref::<UnknownQueue>().unwrap();
                    assert_eq!(unknown.queue, missing);
                    assert_eq!(
                        unknown.to_string(),
                        format!("the SQS queue `{missing}` does not exist")
                    );
                }
                other => panic!("{missing}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_fifo_queue_orders_by_message_group() {
        let sqs = sqs_with_credentials!(a_fifo_queue_orders_by_message_group);
        let queue = TestQueue::new(&sqs, true, Duration::from_secs(30)).await;
        let batch = [
            envelope("m-1", queue.message("one").ordering_key("order-7")),
            envelope("m-2", queue.message("two").ordering_key("order-7")),
            // Without a key, the message is a group of its own.
            envelope("m-3", OutboxMessage::new(queue.name.clone(), "three")),
        ];
        let confirmations = queue.publisher().publish_batch(&batch).await;
        assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");

        let mut subscription = subscribe(&sqs, SubscribeOptions::new(&queue.name))
            .await
            .unwrap();
        let mut received = Vec::new();
        for _ in 0..3 {
            let message = next(&mut subscription).await;
            let fields = message.message();
            received.push((
                fields.message_id.clone().unwrap(),
                fields.ordering_key.clone(),
                fields.source.clone(),
            ));
            message.ack().await.unwrap();
        }
        received.sort();
        let name = &queue.name;
        assert_eq!(
            received,
            [
                ("m-1".into(), Some("order-7".into()), name.clone()),
                ("m-2".into(), Some("order-7".into()), name.clone()),
                ("m-3".into(), Some("m-3".into()), name.clone()),
            ]
        );
        assert_eq!(queue.held().await, (0, 0));
    }
}
