//! NATS JetStream end to end: the broker conformance suite (`common::suite`) on a stream of the
//! test's own, and what is JetStream's alone: the publisher's `PubAck`s and headers, the stream's
//! duplicate window, and a relay that dies between publish and mark-sent, whose copy the window
//! absorbs.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use async_nats::{
    HeaderMap,
    jetstream::{
        self, Message,
        consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
    },
};
use futures_util::StreamExt;
use idem_messaging::{
    BrokerUrl, ConsumerName, Envelope, Error, Handled, Incoming, Outbox, OutboxMessage, PgInbox,
    PublishError, Publisher, Received, Relay, SubscribeOptions, Subscription, nats::NatsPublisher,
};
use idem_test_support::{NatsStream, Server, free_port, require, unique_name};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use common::{DiesAfterPublish, EVENTUALLY, TestSchema};

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

/// A `nats-server -js` of the test's own on a free loopback port, with a store directory of its
/// own, killed when this is dropped.
struct OwnServer {
    port: u16,
    store: tempfile::TempDir,
    process: tokio::sync::Mutex<Option<tokio::process::Child>>,
}

impl OwnServer {
    async fn start() -> Self {
        let server = Self {
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            process: tokio::sync::Mutex::new(None),
        };
        server.launch().await;
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn launch(&self) {
        let child = tokio::process::Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start nats-server");
        *self.process.lock().await = Some(child);
        wait_until_listening(self.port, true).await;
    }

    /// SIGTERM (JetStream flushes its store), then the same server again on the same store.
    async fn restart(&self) {
        let mut child = self.process.lock().await.take().expect("a running server");
        let pid = child.id().expect("a running server").to_string();
        let status = tokio::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        child.wait().await.unwrap();
        wait_until_listening(self.port, false).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.launch().await;
    }
}

async fn wait_until_listening(port: u16, listening: bool) {
    tokio::time::timeout(EVENTUALLY, async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
            != listening
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("nats-server starts or stops");
}

/// The suite's fixture: a stream of the test's own, on the shared server or on a server of its
/// own for the scenarios that restart the broker. Its duplicate window is JetStream's shortest
/// (100 ms), so that the copy a scenario publishes past it reaches the consumers.
struct Jet {
    stream: TestStream,
    server: Option<OwnServer>,
}

impl Jet {
    const WINDOW: Duration = Duration::from_millis(100);

    async fn shared() -> Option<Self> {
        let nats = Server::Nats.url()?;
        Some(Self {
            stream: TestStream::new(&nats, Self::WINDOW).await,
            server: None,
        })
    }

    /// Only where the shared server is configured: `nats-server` is installed there.
    async fn own_server() -> Option<Self> {
        Server::Nats.url()?;
        let server = OwnServer::start().await;
        Some(Self {
            stream: TestStream::new(&server.url(), Self::WINDOW).await,
            server: Some(server),
        })
    }
}

impl common::suite::Broker for Jet {
    type Publisher = NatsPublisher;
    type Consumer = pull::Stream;
    type Message = Message;

    const DUPLICATE_WINDOW: Duration = Self::WINDOW;

    fn destination(&self) -> String {
        self.stream.subject().to_owned()
    }

    fn publisher(&self) -> NatsPublisher {
        self.stream.publisher()
    }

    async fn publish_without_id(&self, payload: &str) {
        self.stream
            .jetstream()
            .publish(self.stream.subject().to_owned(), payload.to_owned().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// The durable consumer `ledger` (explicit acks, redelivery after 2 s), on a new connection.
    async fn consumer(&self) -> pull::Stream {
        let client = async_nats::connect(self.stream.url())
            .await
            .expect("connect to the test server");
        let stream = jetstream::new(client)
            .get_stream(self.stream.name())
            .await
            .unwrap();
        let consumer: PullConsumer = stream
            .get_or_create_consumer(
                "ledger",
                pull::Config {
                    durable_name: Some("ledger".into()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(2),
                    ..pull::Config::default()
                },
            )
            .await
            .unwrap();
        consumer.messages().await.unwrap()
    }

    async fn next(&self, messages: &mut pull::Stream, within: Duration) -> Option<Message> {
        let message = tokio::time::timeout(within, messages.next()).await.ok()?;
        Some(message.expect("the consumer's stream goes on").unwrap())
    }

    /// Drops the consumer's connection: JetStream redelivers what it had not acknowledged once
    /// the ack wait (2 s) has passed.
    async fn kill(&self, messages: pull::Stream) {
        drop(messages);
    }

    async fn restart(&self) {
        self.server
            .as_ref()
            .expect("a fixture with a server of its own")
            .restart()
            .await;
    }
}

common::suite::broker_suite! {
    run Jet::shared() => [
        a_confirmed_publish_reaches_the_consumer_with_its_id,
        a_copy_delivered_twice_is_processed_once,
        a_failed_handler_redelivers_and_the_retry_commits_once,
        a_message_without_an_id_is_dead_lettered_not_retried,
        a_consumer_killed_between_its_commit_and_its_ack_skips_the_copy,
        two_relays_deliver_every_message_once,
        per_key_order_holds_through_the_relay,
    ],
    run Jet::own_server() => [a_broker_restarted_under_a_running_relay_loses_nothing],
    not_run => [],
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

/// A subscription through the server's URL, as `idem-deliver`'s would be.
async fn subscribe(url: &str, options: SubscribeOptions) -> Subscription {
    let url: BrokerUrl = url.parse().unwrap();
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

/// The durable consumer `name` of `stream`, as the server has it now.
async fn consumer_info(stream: &NatsStream, name: &str) -> jetstream::consumer::Info {
    let handle = stream.jetstream().get_stream(stream.name()).await.unwrap();
    handle.consumer_info(name).await.unwrap()
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// A stream of the test's own capturing `{prefix}.>`, its prefix `idem_wild.` and 16 hex digits,
/// deleted when this is dropped.
struct WildStream {
    url: String,
    name: String,
    prefix: String,
}

impl WildStream {
    async fn create(url: &str) -> Self {
        let suffix = unique_name("");
        let (name, prefix) = (format!("IDEM_WILD_{suffix}"), format!("idem_wild.{suffix}"));
        let context = jetstream::new(async_nats::connect(url).await.unwrap());
        context
            .create_stream(jetstream::stream::Config {
                name: name.clone(),
                subjects: vec![format!("{prefix}.>")],
                ..jetstream::stream::Config::default()
            })
            .await
            .unwrap();
        Self {
            url: url.to_owned(),
            name,
            prefix,
        }
    }
}

impl Drop for WildStream {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = async_nats::connect(url).await?;
                jetstream::new(client).delete_stream(name).await?;
                anyhow::Ok(())
            })
        })
        .join();
        if !matches!(deleted, Ok(Ok(()))) {
            eprintln!("could not delete the test stream {}", self.name);
        }
    }
}

#[tokio::test]
async fn a_subscription_gives_each_message_with_its_ids_subject_headers_and_time() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let options = SubscribeOptions::new(stream.subject()).group("ledger");
    let mut subscription = subscribe(&nats, options).await;
    let before = SystemTime::now();
    let confirmed = stream
        .publisher()
        .publish_batch(&[
            envelope(
                "m-1",
                stream
                    .message("one")
                    .header("trace", "a")
                    .header("content-type", "text/plain")
                    .header("trace", "b"),
            ),
            envelope("m-2", stream.message("two")),
        ])
        .await;
    assert!(confirmed.iter().all(Result::is_ok), "{confirmed:?}");

    let first = received(&mut subscription).await;
    let message = first.message();
    assert_eq!(message.message_id.as_deref(), Some("m-1"));
    assert_eq!(
        message.broker_id.as_deref(),
        Some(format!("{}/1", stream.name()).as_str())
    );
    assert_eq!(message.source, stream.subject());
    assert_eq!(message.ordering_key.as_deref(), Some(stream.subject()));
    assert_eq!(
        message.headers,
        pairs(&[
            ("content-type", "text/plain"),
            ("trace", "a"),
            ("trace", "b")
        ])
    );
    assert_eq!(message.payload.as_ref(), b"one");
    let time = message.time.expect("JetStream stamps a time");
    assert!(before <= time && time <= SystemTime::now(), "{time:?}");
    assert!(!message.redelivered);
    assert_eq!(Incoming::message_id(&first), Some("m-1"));
    first.ack().await.unwrap();

    let second = received(&mut subscription).await;
    let message = second.message();
    assert_eq!(message.message_id.as_deref(), Some("m-2"));
    assert_eq!(
        message.broker_id.as_deref(),
        Some(format!("{}/2", stream.name()).as_str())
    );
    assert_eq!(message.headers, pairs(&[]));
    assert_eq!(message.payload.as_ref(), b"two");
    assert!(!message.redelivered);
    second.ack().await.unwrap();

    // The durable consumer it made, and the acknowledgements the server has.
    let info = consumer_info(&stream, "ledger").await;
    assert_eq!(info.config.durable_name.as_deref(), Some("ledger"));
    assert_eq!(info.config.filter_subject, stream.subject());
    assert_eq!(info.config.ack_policy, AckPolicy::Explicit);
    assert_eq!(info.config.deliver_policy, DeliverPolicy::All);
    assert_eq!(info.config.max_ack_pending, 64);
    assert_eq!(info.config.ack_wait, Duration::from_secs(30));
    assert_eq!((info.num_ack_pending, info.num_pending), (0, 0));
    assert_eq!(info.ack_floor.stream_sequence, 2);
}

#[tokio::test]
async fn requeued_comes_again_with_its_broker_id_acked_and_rejected_are_gone() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let options = SubscribeOptions::new(stream.subject()).group("ledger");
    let mut subscription = subscribe(&nats, options).await;
    let publisher = stream.publisher();
    publisher
        .publish(&envelope("m-1", stream.message("refused")))
        .await
        .unwrap();

    let first = received(&mut subscription).await;
    let broker_id = first.message().broker_id.clone();
    assert_eq!(broker_id, Some(format!("{}/1", stream.name())));
    assert!(!first.message().redelivered);
    first.requeue().await.unwrap();
    let again = received(&mut subscription).await;
    assert_eq!(again.message().message_id.as_deref(), Some("m-1"));
    assert_eq!(again.message().broker_id, broker_id);
    assert_eq!(again.message().payload.as_ref(), b"refused");
    assert!(again.message().redelivered);
    again.reject().await.unwrap();
    // Terminated: the server holds it for nobody, and will not deliver it again.
    let info = consumer_info(&stream, "ledger").await;
    assert_eq!((info.num_ack_pending, info.num_pending), (0, 0));
    assert_eq!(info.ack_floor.stream_sequence, 1);

    publisher
        .publish(&envelope("m-2", stream.message("accepted")))
        .await
        .unwrap();
    let accepted = received(&mut subscription).await;
    assert_eq!(
        accepted.message().broker_id,
        Some(format!("{}/2", stream.name()))
    );
    assert!(!accepted.message().redelivered);
    accepted.ack().await.unwrap();
    let info = consumer_info(&stream, "ledger").await;
    assert_eq!((info.num_ack_pending, info.num_pending), (0, 0));
    assert_eq!(info.ack_floor.stream_sequence, 2);
    assert_eq!(info.num_redelivered, 0);
}

#[tokio::test]
async fn a_third_message_waits_until_one_of_two_held_is_settled() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let options = SubscribeOptions::new(stream.subject())
        .group("ledger")
        .max_in_flight(2);
    let mut subscription = subscribe(&nats, options).await;
    let batch: Vec<Envelope> = (1..=3)
        .map(|n| envelope(&format!("m-{n}"), stream.message(&n.to_string())))
        .collect();
    let confirmed = stream.publisher().publish_batch(&batch).await;
    assert!(confirmed.iter().all(Result::is_ok), "{confirmed:?}");

    let first = received(&mut subscription).await;
    let second = received(&mut subscription).await;
    assert_eq!(first.message().message_id.as_deref(), Some("m-1"));
    assert_eq!(second.message().message_id.as_deref(), Some("m-2"));
    // The server keeps the third back: the consumer's max_ack_pending is reached.
    let info = consumer_info(&stream, "ledger").await;
    assert_eq!(info.config.max_ack_pending, 2);
    assert_eq!((info.num_ack_pending, info.num_pending), (2, 1));
    let early = tokio::time::timeout(Duration::from_millis(500), subscription.next()).await;
    assert!(early.is_err(), "{early:?}");

    second.ack().await.unwrap();
    let third = received(&mut subscription).await;
    assert_eq!(third.message().message_id.as_deref(), Some("m-3"));
    first.ack().await.unwrap();
    third.ack().await.unwrap();
    let info = consumer_info(&stream, "ledger").await;
    assert_eq!((info.num_ack_pending, info.num_pending), (0, 0));
}

#[tokio::test]
async fn a_message_held_past_its_ack_wait_is_kept_until_dropped_then_redelivered() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let options = SubscribeOptions::new(stream.subject())
        .group("ledger")
        .ack_wait(Duration::from_secs(3));
    let mut subscription = subscribe(&nats, options).await;
    stream
        .publisher()
        .publish(&envelope("m-1", stream.message("slow")))
        .await
        .unwrap();
    let held = received(&mut subscription).await;
    let broker_id = held.message().broker_id.clone();

    // Longer than the ack wait: the in-progress acknowledgements keep it from redelivery.
    let meanwhile = tokio::time::timeout(Duration::from_secs(5), subscription.next()).await;
    assert!(meanwhile.is_err(), "{meanwhile:?}");
    let info = consumer_info(&stream, "ledger").await;
    assert_eq!(info.config.ack_wait, Duration::from_secs(3));
    assert_eq!((info.num_ack_pending, info.num_redelivered), (1, 0));

    drop(held);
    let again = received(&mut subscription).await;
    assert_eq!(again.message().message_id.as_deref(), Some("m-1"));
    assert_eq!(again.message().broker_id, broker_id);
    assert!(again.message().redelivered);
    again.ack().await.unwrap();
}

#[tokio::test]
async fn a_wildcard_subject_of_one_stream_gives_each_message_its_own_subject() {
    let nats = require!(Nats);
    let stream = WildStream::create(&nats).await;
    let options = SubscribeOptions::new(format!("{}.*", stream.prefix)).group("ledger");
    let mut subscription = subscribe(&nats, options).await;
    let publisher = NatsPublisher::new(nats.clone());
    for (id, region) in [("m-eu", "eu"), ("m-us", "us")] {
        let subject = format!("{}.{region}", stream.prefix);
        publisher
            .publish(&envelope(id, OutboxMessage::new(subject, region)))
            .await
            .unwrap();
    }

    for (n, region) in [(1, "eu"), (2, "us")] {
        let message = received(&mut subscription).await;
        let subject = format!("{}.{region}", stream.prefix);
        assert_eq!(message.message().source, subject);
        assert_eq!(message.message().ordering_key, Some(subject));
        assert_eq!(
            message.message().broker_id,
            Some(format!("{}/{n}", stream.name))
        );
        message.ack().await.unwrap();
    }
}

#[tokio::test]
async fn a_subject_no_stream_captures_is_refused_at_subscribe() {
    let nats = require!(Nats);
    let url: BrokerUrl = nats.parse().unwrap();
    let subject = unique_name("idem_test_nowhere.");

    let refused = url
        .subscribe(SubscribeOptions::new(subject.clone()))
        .await
        .unwrap_err();

    assert!(matches!(refused, Error::Receive(_)), "{refused:?}");
    assert_eq!(
        common::chain(&refused),
        format!(
            "cannot receive messages from the broker: no JetStream stream captures the subject \
             {subject:?}"
        )
    );
}

#[tokio::test]
async fn a_wildcard_spanning_two_streams_is_refused_naming_them() {
    let nats = require!(Nats);
    let one = WildStream::create(&nats).await;
    let other = WildStream::create(&nats).await;
    let url: BrokerUrl = nats.parse().unwrap();

    let refused = url
        .subscribe(SubscribeOptions::new("idem_wild.>"))
        .await
        .unwrap_err();

    let said = common::chain(&refused);
    assert!(
        said.starts_with(
            "cannot receive messages from the broker: the subject \"idem_wild.>\" spans several \
             JetStream streams ("
        ),
        "{said}"
    );
    assert!(
        said.contains(&one.name) && said.contains(&other.name),
        "{said}"
    );
}

#[tokio::test]
async fn a_durable_consumer_of_another_subject_is_refused_not_changed() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    // The durable `ledger`, filtering nothing.
    stream.consumer(Duration::from_secs(30)).await;
    let url: BrokerUrl = nats.parse().unwrap();

    let refused = url
        .subscribe(SubscribeOptions::new(stream.subject()).group("ledger"))
        .await
        .unwrap_err();

    assert_eq!(
        common::chain(&refused),
        format!(
            "cannot receive messages from the broker: the JetStream consumer \"ledger\" of the \
             stream {:?} does not fit: it filters no subject, or several, not {:?}: delete it, \
             or subscribe as another group",
            stream.name(),
            stream.subject()
        )
    );
    assert_eq!(
        consumer_info(&stream, "ledger").await.config.filter_subject,
        ""
    );
}

#[tokio::test]
async fn an_existing_durable_consumer_takes_the_subscriptions_bound_and_ack_wait() {
    let nats = require!(Nats);
    let stream = TestStream::new(&nats, Duration::from_secs(120)).await;
    let handle = stream.jetstream().get_stream(stream.name()).await.unwrap();
    handle
        .create_consumer(pull::Config {
            durable_name: Some("ledger".into()),
            filter_subject: stream.subject().to_owned(),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 1000,
            ack_wait: Duration::from_secs(30),
            ..pull::Config::default()
        })
        .await
        .unwrap();

    let options = SubscribeOptions::new(stream.subject())
        .group("ledger")
        .max_in_flight(2)
        .ack_wait(Duration::from_secs(5));
    let _subscription = subscribe(&nats, options).await;

    let info = consumer_info(&stream, "ledger").await;
    assert_eq!(info.config.max_ack_pending, 2);
    assert_eq!(info.config.ack_wait, Duration::from_secs(5));
    assert_eq!(info.config.filter_subject, stream.subject());
}
