//! `idem deliver` end to end on each broker: RabbitMQ, NATS JetStream, Kafka (the `kafka`
//! feature) and Amazon SQS (the `sqs` feature). A [`Deliverer`] runs in-process and posts to a
//! consumer service behind a real gateway (in-process, `memory://`), so that the idempotency key
//! makes duplicates harmless as in production; the messages are published with the crate's own
//! publisher, the same way on every broker. Each broker runs the same four scenarios (Kafka the
//! two where nothing is given back, see its module) on a queue, stream or topic of the test's
//! own ([`TestBroker`]):
//!
//! 1. duplicated publishes, and a deliverer aborted while requests are in flight (nothing
//!    settled: the broker redelivers) then replaced: every message has exactly one effect, and
//!    nothing is left unsettled;
//! 2. a message the endpoint refuses (422) is dead-lettered after `max_attempts`, with its
//!    reason, its source and its key, and the others are delivered (on RabbitMQ also without a
//!    destination: the queue's own dead-letter exchange takes it);
//! 3. each message's first attempt failing with 503, the effects of each ordering key are in
//!    publish order, a message's retry before the next message;
//! 4. a graceful shutdown with requests in flight and messages queued acknowledges exactly what
//!    was delivered and gives back the rest, which a new deliverer delivers once.
//!
//! And `idem deliver` as a process: its refusals in one line with exit 2, its `/healthz`, and
//! SIGTERM with exit 0.

use std::{
    collections::BTreeMap,
    future::Future,
    net::SocketAddr,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::State,
    http::{HeaderMap, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use idem_gateway::{Config, Gateway, deliver::Deliverer};
use idem_messaging::{
    BrokerUrl, Envelope, MessageId, OutboxMessage, Publisher, SubscribeOptions,
    consume::{Message, Received},
};
use idem_test_support::{Server, unique_name};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{
    servers::free_port,
    support::{Client, idem, idem_command},
};

/// How long a test waits for what should happen within seconds.
const EVENTUALLY: Duration = Duration::from_secs(25);
/// How long the consumer holds the answers a scenario holds.
const HOLD: Duration = Duration::from_millis(1200);
/// The redelivery timeout the subscriptions ask for (the least they take).
const ACK_WAIT: Duration = Duration::from_secs(3);

/// A place of the test's own on a broker, removed when dropped: what the deliverer consumes,
/// where each ordering key's messages are published, where dead letters go, and how many
/// messages the deliverers' group has not settled.
trait TestBroker: Sync {
    /// The lanes, and the messages of each, of the scenarios where messages come again (1 and 4).
    const REDELIVERED: (u8, u8) = (4, 5);
    /// The lanes, and the messages of each, of the scenario of order (3).
    const ORDERED: (u8, u8) = (3, 5);

    /// The broker.
    fn url(&self) -> BrokerUrl;
    /// What the deliverer consumes.
    fn from(&self) -> String;
    /// The deliverers' group.
    fn group(&self) -> String;
    /// Where the messages of `lane` are published (also their source, as the deliverer says it).
    fn destination(&self, lane: &str) -> String;
    /// Where dead letters are published.
    fn dead_letter(&self) -> String;
    /// The group that reads the dead letters back.
    fn dead_letter_group(&self) -> String {
        format!("{}-dead", self.group())
    }
    /// How many messages of `from` the group has neither acknowledged nor rejected: waiting,
    /// and delivered but not settled.
    fn unsettled(&self) -> impl Future<Output = u64> + Send;
}

/// One message of a scenario: its lane (the ordering key it is published under: a queue, a
/// subject, a Kafka key, an SQS message group) and its place in the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Msg {
    lane: u8,
    seq: u8,
}

impl Msg {
    /// `lanes` lanes of `each` messages, in publish order: each lane's first, then each lane's
    /// second, and so on.
    fn all(lanes: u8, each: u8) -> Vec<Self> {
        (0..each)
            .flat_map(|seq| (0..lanes).map(move |lane| Self { lane, seq }))
            .collect()
    }

    /// Its id: the outbox id, the idempotency key.
    fn id(self) -> String {
        format!("m-{}-{}", self.lane, self.seq)
    }

    fn lane_name(self) -> String {
        format!("k{}", self.lane)
    }

    /// Its payload, which the consumer reads it back from: `k0/3`.
    fn payload(self) -> String {
        format!("{}/{}", self.lane_name(), self.seq)
    }

    fn parse(payload: &str) -> Self {
        let (lane, seq) = payload
            .strip_prefix('k')
            .and_then(|rest| rest.split_once('/'))
            .unwrap_or_else(|| panic!("not a scenario's payload: {payload:?}"));
        Self {
            lane: lane.parse().unwrap(),
            seq: seq.parse().unwrap(),
        }
    }
}

/// Publishes `messages` to `broker`, one at a time (so in order), each under its id.
async fn publish(broker: &impl TestBroker, messages: &[Msg]) {
    let publisher = broker.url().publisher();
    for &message in messages {
        let outbox =
            OutboxMessage::new(broker.destination(&message.lane_name()), message.payload())
                .ordering_key(message.lane_name());
        let id = MessageId::try_from(message.id()).unwrap();
        publisher
            .publish(&Envelope::new(id, outbox, 1))
            .await
            .unwrap_or_else(|error| panic!("publish {message:?}: {error}"));
    }
}

/// How the consumer answers an execution: from the message and which execution of it this is
/// (from 1), a status and how long to hold it.
type Script = dyn Fn(Msg, usize) -> (StatusCode, Duration) + Send + Sync;

/// What the consumer service saw.
#[derive(Debug, Default)]
struct Ledger {
    /// Every execution the gateway forwarded, in arrival order, with the status it got.
    executions: Vec<(Msg, StatusCode)>,
    /// The effects, in the order applied: an execution answered 2xx applies its effect when it
    /// starts, so that one the gateway abandoned would show as a second effect.
    effects: Vec<Msg>,
    /// Executions in progress.
    running: usize,
    /// Executions answered.
    answered: usize,
}

/// The consumer service, behind a gateway of its own: `to()` is where the deliverer posts.
struct Endpoint {
    ledger: Arc<Mutex<Ledger>>,
    gateway: SocketAddr,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Clone)]
struct Service {
    ledger: Arc<Mutex<Ledger>>,
    script: Arc<Script>,
}

impl Endpoint {
    /// Starts the consumer, answering as `script` says, and a gateway on `memory://` in front.
    async fn start(
        script: impl Fn(Msg, usize) -> (StatusCode, Duration) + Send + Sync + 'static,
    ) -> Self {
        let ledger: Arc<Mutex<Ledger>> = Arc::default();
        let service = Service {
            ledger: Arc::clone(&ledger),
            script: Arc::new(script),
        };
        let app = Router::new()
            .route("/events", post(apply))
            .with_state(service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let consumer = tokio::spawn({
            let stop = stop.clone();
            async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                    .unwrap();
            }
        });
        let mut config = Config::new(upstream.parse().unwrap());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.admin_listen = "127.0.0.1:0".parse().unwrap();
        config.store = "memory://".parse().unwrap();
        // A 409's Retry-After is the first request's remaining lease, which the deliverer
        // honours: with the default 30 s, a redelivered message whose first execution is still
        // running would wait that long.
        config.idempotency.policy = config.idempotency.policy.lease(Duration::from_secs(3));
        let gateway = Gateway::bind(config).await.unwrap();
        let addr = gateway.addr();
        let running = tokio::spawn({
            let stop = stop.clone();
            async move { gateway.run(stop.cancelled_owned()).await.unwrap() }
        });
        Self {
            ledger,
            gateway: addr,
            stop,
            tasks: vec![consumer, running],
        }
    }

    /// The gateway's URL for the consumer's `/events`.
    fn to(&self) -> reqwest::Url {
        format!("http://{}/events", self.gateway).parse().unwrap()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap()
    }

    /// How many effects each message had, by id.
    fn effects_by_id(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for message in &self.ledger().effects {
            *counts.entry(message.id()).or_default() += 1;
        }
        counts
    }

    /// How many effects each lane had.
    fn effects_by_lane(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for message in &self.ledger().effects {
            *counts.entry(message.lane_name()).or_default() += 1;
        }
        counts
    }

    /// The places of `lane`'s messages, in the order of their effects.
    fn effect_order(&self, lane: u8) -> Vec<u8> {
        let ledger = self.ledger();
        let effects = ledger.effects.iter().filter(|m| m.lane == lane);
        effects.map(|m| m.seq).collect()
    }

    /// The places of `lane`'s messages, in the order of their executions.
    fn execution_order(&self, lane: u8) -> Vec<u8> {
        let ledger = self.ledger();
        let executions = ledger.executions.iter().filter(|(m, _)| m.lane == lane);
        executions.map(|(m, _)| m.seq).collect()
    }

    /// Waits until `ready` holds of the ledger.
    async fn until(&self, what: &str, ready: impl Fn(&Ledger) -> bool) {
        let waited = tokio::time::timeout(EVENTUALLY, async {
            while !ready(&self.ledger()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{what}: {:?}", self.ledger());
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The consumer's one route: records the execution (and the effect of one answered 2xx), holds
/// the answer as the script says, answers.
async fn apply(State(service): State<Service>, headers: HeaderMap, body: String) -> Response {
    let message = Msg::parse(&body);
    assert_eq!(headers["ce-id"], message.id().as_str());
    let (status, hold) = {
        let mut ledger = service.ledger.lock().unwrap();
        let execution = ledger
            .executions
            .iter()
            .filter(|(m, _)| *m == message)
            .count()
            + 1;
        let (status, hold) = (service.script)(message, execution);
        ledger.executions.push((message, status));
        if status.is_success() {
            ledger.effects.push(message);
        }
        ledger.running += 1;
        (status, hold)
    };
    tokio::time::sleep(hold).await;
    let mut ledger = service.ledger.lock().unwrap();
    ledger.running -= 1;
    ledger.answered += 1;
    status.into_response()
}

/// A deliverer of `broker`'s group to `endpoint`: quick backoffs, the shortest redelivery
/// timeout, dead letters to the broker's destination.
fn deliverer(broker: &impl TestBroker, endpoint: &Endpoint) -> Deliverer {
    let subscribe = SubscribeOptions::new(broker.from())
        .group(broker.group())
        .ack_wait(ACK_WAIT);
    Deliverer::new(broker.url(), subscribe, endpoint.to())
        .backoff(Duration::from_millis(50), Duration::from_millis(400))
        .request_timeout(Duration::from_secs(10))
        .dead_letter(broker.dead_letter())
}

/// A deliverer running in a task of its own.
struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    fn start(deliverer: Deliverer) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(deliverer.run(stop.clone().cancelled_owned()));
        Self { stop, task }
    }

    /// Shuts it down gracefully and waits until it has returned.
    async fn shut_down(self) {
        self.stop.cancel();
        tokio::time::timeout(EVENTUALLY, self.task)
            .await
            .expect("the deliverer stops")
            .unwrap();
    }

    /// Aborts its task, as a crash would: nothing is settled.
    async fn abort(self) {
        self.task.abort();
        let aborted = self.task.await.unwrap_err();
        assert!(aborted.is_cancelled(), "{aborted:?}");
    }
}

/// Waits until `broker` has `expected` messages unsettled; returns how many it has then.
async fn until_unsettled(broker: &impl TestBroker, expected: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let unsettled = broker.unsettled().await;
        if unsettled == expected || tokio::time::Instant::now() >= deadline {
            return unsettled;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The next message of `subscription`, acknowledged.
async fn next_message(subscription: &mut idem_messaging::Subscription) -> Message {
    let received: Received = tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .expect("a message arrives")
        .expect("the subscription goes on")
        .unwrap();
    let message = received.message().clone();
    received.ack().await.unwrap();
    message
}

/// A message's headers whose names start with `prefix`, sorted.
fn headers_starting(message: &Message, prefix: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = message
        .headers
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .cloned()
        .collect();
    headers.sort();
    headers
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Scenario 1: [`TestBroker::REDELIVERED`]'s messages (20 on 4 lanes), each published twice
/// under one id; each lane's first message holds its first execution, and the first deliverer
/// is aborted while it does (its held and queued messages unsettled: the broker delivers them
/// again), a second deliverer of the group taking over. Every message has one effect, and
/// nothing is left unsettled.
async fn each_message_has_one_effect_despite_duplicates_and_an_aborted_deliverer<B: TestBroker>(
    broker: &B,
) {
    let (lanes, each) = B::REDELIVERED;
    let messages = Msg::all(lanes, each);
    let endpoint = Endpoint::start(|message, execution| {
        let hold = if message.seq == 0 && execution == 1 {
            HOLD
        } else {
            Duration::ZERO
        };
        (StatusCode::CREATED, hold)
    })
    .await;
    publish(broker, &messages).await;
    publish(broker, &messages).await;

    let first = Running::start(deliverer(broker, &endpoint));
    endpoint
        .until("a held execution", |ledger| ledger.running >= 1)
        .await;
    first.abort().await;
    let second = Running::start(deliverer(broker, &endpoint));
    let unsettled = until_unsettled(broker, 0).await;
    second.shut_down().await;

    assert_eq!(unsettled, 0, "{:?}", endpoint.ledger());
    let once: BTreeMap<String, usize> = messages.iter().map(|m| (m.id(), 1)).collect();
    assert_eq!(endpoint.effects_by_id(), once);
    let by_lane: BTreeMap<String, usize> = (0..lanes)
        .map(|lane| (format!("k{lane}"), usize::from(each)))
        .collect();
    assert_eq!(endpoint.effects_by_lane(), by_lane);
    // Each execution was an effect: the redelivered copies were the gateway's replays.
    assert_eq!(endpoint.ledger().executions.len(), messages.len());
    assert_eq!(broker.unsettled().await, 0);
}

/// Scenario 2: the endpoint refuses one message with 422; after two attempts (the second the
/// gateway's replay of the first's answer) it is published to the dead-letter destination under
/// an id of its own, with its payload, its id, reason, source and key, and acknowledged; the
/// others are delivered.
async fn a_refused_message_is_dead_lettered_with_its_reason(broker: &impl TestBroker) {
    let messages = Msg::all(2, 3);
    let refused = Msg { lane: 0, seq: 1 };
    let endpoint = Endpoint::start(move |message, _| {
        let status = if message == refused {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::CREATED
        };
        (status, Duration::ZERO)
    })
    .await;
    publish(broker, &messages).await;
    let running = Running::start(deliverer(broker, &endpoint).max_attempts(2));
    let unsettled = until_unsettled(broker, 0).await;
    running.shut_down().await;
    assert_eq!(unsettled, 0, "{:?}", endpoint.ledger());

    let mut dead_letters = broker
        .url()
        .subscribe(SubscribeOptions::new(broker.dead_letter()).group(broker.dead_letter_group()))
        .await
        .unwrap();
    let dead = next_message(&mut dead_letters).await;
    assert_new_id(&dead);
    assert_eq!(dead.payload, "k0/1");
    assert_eq!(
        headers_starting(&dead, "idem-"),
        pairs(&[
            ("idem-dead-letter-id", "m-0-1"),
            (
                "idem-dead-letter-reason",
                "the endpoint answered 422 Unprocessable Entity"
            ),
            ("idem-dead-letter-source", &broker.destination("k0")),
            ("idem-delivery-key", "m-0-1"),
        ])
    );

    let mut expected: BTreeMap<String, usize> = messages.iter().map(|m| (m.id(), 1)).collect();
    expected.remove("m-0-1");
    assert_eq!(endpoint.effects_by_id(), expected);
    assert_eq!(endpoint.effect_order(0), [0, 2]);
    assert_eq!(endpoint.effect_order(1), [0, 1, 2]);
    let executions = endpoint.ledger().executions.clone();
    let refusals: Vec<_> = executions.iter().filter(|(m, _)| *m == refused).collect();
    assert_eq!(refusals, [&(refused, StatusCode::UNPROCESSABLE_ENTITY)]);
}

/// That a dead letter has an id of its own, made when it was published (a UUIDv7), not its
/// message's.
fn assert_new_id(dead: &Message) {
    let id = dead.message_id.as_deref().expect("a dead letter has an id");
    let fields: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(fields, [8, 4, 4, 4, 12], "{id}");
    assert_eq!(id.as_bytes()[14], b'7', "{id}");
}

/// Scenario 3: [`TestBroker::ORDERED`]'s messages (15 on 3 lanes), each message's first
/// execution answered 503 (no effect: the gateway releases the key, the deliverer tries again):
/// each lane's effects are in publish order, and each message's two executions come before the
/// next message's.
async fn each_lanes_effects_are_in_publish_order_through_retries<B: TestBroker>(broker: &B) {
    let (lanes, each) = B::ORDERED;
    let messages = Msg::all(lanes, each);
    let endpoint = Endpoint::start(|_, execution| {
        let status = if execution == 1 {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::CREATED
        };
        (status, Duration::from_millis(10))
    })
    .await;
    publish(broker, &messages).await;
    let running = Running::start(deliverer(broker, &endpoint).concurrency(8));
    let unsettled = until_unsettled(broker, 0).await;
    running.shut_down().await;
    assert_eq!(unsettled, 0, "{:?}", endpoint.ledger());

    let in_order: Vec<u8> = (0..each).collect();
    let twice: Vec<u8> = (0..each).flat_map(|seq| [seq, seq]).collect();
    for lane in 0..lanes {
        assert_eq!(endpoint.effect_order(lane), in_order, "lane k{lane}");
        assert_eq!(endpoint.execution_order(lane), twice, "lane k{lane}");
    }
    assert_eq!(endpoint.ledger().effects.len(), messages.len());
}

/// Scenario 4: [`TestBroker::REDELIVERED`]'s messages (20 on 4 lanes), each execution held
/// 250 ms, two at a time; the deliverer is shut down once one was answered while another is in
/// flight: what was in flight finishes within the grace, and the broker then holds exactly the
/// messages without an effect (nothing undelivered was acknowledged, nothing delivered left
/// unacknowledged); a new deliverer delivers them, each once.
async fn a_shutdown_acknowledges_what_was_delivered_and_gives_back_the_rest<B: TestBroker>(
    broker: &B,
) {
    let (lanes, each) = B::REDELIVERED;
    let messages = Msg::all(lanes, each);
    let endpoint = Endpoint::start(|_, _| (StatusCode::CREATED, Duration::from_millis(250))).await;
    publish(broker, &messages).await;
    let deliver = || {
        deliverer(broker, &endpoint)
            .concurrency(2)
            .shutdown_grace(Duration::from_secs(10))
    };
    let first = Running::start(deliver());
    endpoint
        .until("an answer, and a request in flight", |ledger| {
            ledger.answered >= 1 && ledger.running >= 1
        })
        .await;
    first.shut_down().await;

    let delivered = {
        let ledger = endpoint.ledger();
        assert_eq!(ledger.running, 0, "{ledger:?}");
        assert_eq!(ledger.answered, ledger.executions.len(), "{ledger:?}");
        ledger.effects.len()
    };
    assert!(
        (2..messages.len()).contains(&delivered),
        "{:?}",
        endpoint.ledger()
    );
    let left = u64::try_from(messages.len() - delivered).unwrap();
    assert_eq!(until_unsettled(broker, left).await, left);

    let second = Running::start(deliver());
    let unsettled = until_unsettled(broker, 0).await;
    second.shut_down().await;
    assert_eq!(unsettled, 0, "{:?}", endpoint.ledger());
    let once: BTreeMap<String, usize> = messages.iter().map(|m| (m.id(), 1)).collect();
    assert_eq!(endpoint.effects_by_id(), once);
    assert_eq!(endpoint.ledger().executions.len(), messages.len());
}

/// The scenarios, as tests of a broker fixture (all four on `$broker::create()`, or those
/// listed on the fixture `$create()` makes), whose constructor gives `None` (the test then
/// returns) when its server is not configured.
macro_rules! scenarios {
    ($create:path: $($scenario:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let Some(broker) = $create().await else {
                    return;
                };
                super::$scenario(&broker).await;
            }
        )+
    };
    ($broker:ident) => {
        scenarios!(
            $broker::create:
            each_message_has_one_effect_despite_duplicates_and_an_aborted_deliverer,
            a_refused_message_is_dead_lettered_with_its_reason,
            each_lanes_effects_are_in_publish_order_through_retries,
            a_shutdown_acknowledges_what_was_delivered_and_gives_back_the_rest,
        );
    };
}

/// RabbitMQ: one queue, one ordering key; its rejected messages go to a queue of their own
/// through the default exchange.
mod rabbitmq {
    use lapin::{
        Channel, Connection, ConnectionProperties,
        options::{QueueDeclareOptions, QueueDeleteOptions},
        types::{AMQPValue, FieldTable},
    };

    use super::*;

    /// Three queues of the test's own: the one consumed (dead-lettering to `rejected`), the
    /// dead-letter destination, and the target of the queue's dead-letter exchange.
    pub(super) struct Rabbit {
        url: String,
        queue: String,
        dead: String,
        rejected: String,
        group: String,
        _connection: Connection,
        channel: Channel,
    }

    impl Rabbit {
        pub(super) async fn create() -> Option<Self> {
            let url = Server::Amqp.url()?;
            let connection = Connection::connect(&url, ConnectionProperties::default())
                .await
                .expect("connect to the test broker");
            let channel = connection.create_channel().await.unwrap();
            let name = unique_name("idem_test_deliver_");
            let (dead, rejected) = (format!("{name}.dead"), format!("{name}.rejected"));
            for queue in [&dead, &rejected] {
                declare(&channel, queue, FieldTable::default()).await;
            }
            let mut arguments = FieldTable::default();
            arguments.insert(
                "x-dead-letter-exchange".into(),
                AMQPValue::LongString("".into()),
            );
            arguments.insert(
                "x-dead-letter-routing-key".into(),
                AMQPValue::LongString(rejected.as_str().into()),
            );
            declare(&channel, &name, arguments).await;
            Some(Self {
                url,
                queue: name,
                dead,
                rejected,
                group: unique_name("deliver-"),
                _connection: connection,
                channel,
            })
        }
    }

    /// Declares `queue`, durable, removed by the broker ten minutes after its last use should
    /// the test die before it deletes it.
    async fn declare(channel: &Channel, queue: &str, mut arguments: FieldTable) {
        arguments.insert("x-expires".into(), AMQPValue::LongUInt(600_000));
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare(queue.into(), durable, arguments)
            .await
            .unwrap();
    }

    impl TestBroker for Rabbit {
        fn url(&self) -> BrokerUrl {
            self.url.parse().unwrap()
        }

        fn from(&self) -> String {
            self.queue.clone()
        }

        fn group(&self) -> String {
            self.group.clone()
        }

        fn destination(&self, _lane: &str) -> String {
            self.queue.clone()
        }

        fn dead_letter(&self) -> String {
            self.dead.clone()
        }

        /// Ready and unacknowledged, as the broker counts them (`rabbitmqctl`: AMQP says only
        /// how many are ready).
        async fn unsettled(&self) -> u64 {
            let output = tokio::task::spawn_blocking(|| {
                std::process::Command::new("rabbitmqctl")
                    .args(["-q", "list_queues", "-p", "/", "name", "messages_ready"])
                    .args(["messages_unacknowledged", "--no-table-headers"])
                    .output()
                    .expect("run rabbitmqctl")
            })
            .await
            .unwrap();
            let listed = String::from_utf8_lossy(&output.stdout).into_owned();
            listed
                .lines()
                .find_map(|line| {
                    let mut fields = line.split_whitespace();
                    (fields.next() == Some(self.queue.as_str()))
                        .then(|| fields.map(|n| n.parse::<u64>().unwrap()).sum())
                })
                .unwrap_or_else(|| panic!("no queue {} in {listed}", self.queue))
        }
    }

    impl Drop for Rabbit {
        fn drop(&mut self) {
            let (channel, queues) = (
                self.channel.clone(),
                [&self.queue, &self.dead, &self.rejected].map(Clone::clone),
            );
            // Drop may run inside a runtime, which must not block: a thread with its own.
            let deleted = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async {
                    for queue in queues {
                        channel
                            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                            .await?;
                    }
                    anyhow::Ok(())
                })
            })
            .join();
            if let Ok(Err(error)) = deleted {
                eprintln!("could not delete the test queues {}: {error:#}", self.queue);
            }
        }
    }

    scenarios!(Rabbit);

    /// Without a dead-letter destination, the refused message is rejected, and the queue's
    /// dead-letter exchange routes it to the queue it names, as RabbitMQ says why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_a_destination_the_queues_dead_letter_exchange_takes_a_refused_message() {
        let Some(broker) = Rabbit::create().await else {
            return;
        };
        let messages = Msg::all(1, 3);
        let endpoint = Endpoint::start(|message, _| {
            let status = if message.seq == 1 {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::OK
            };
            (status, Duration::ZERO)
        })
        .await;
        publish(&broker, &messages).await;
        let subscribe = SubscribeOptions::new(broker.from()).group(broker.group());
        let deliverer = Deliverer::new(broker.url(), subscribe, endpoint.to())
            .backoff(Duration::from_millis(50), Duration::from_millis(400))
            .max_attempts(2);
        let running = Running::start(deliverer);
        let unsettled = until_unsettled(&broker, 0).await;
        running.shut_down().await;
        assert_eq!(unsettled, 0, "{:?}", endpoint.ledger());

        let mut rejected = broker
            .url()
            .subscribe(SubscribeOptions::new(&broker.rejected))
            .await
            .unwrap();
        let dead = next_message(&mut rejected).await;
        assert_eq!(dead.message_id.as_deref(), Some("m-0-1"));
        assert_eq!(dead.payload, "k0/1");
        assert_eq!(
            headers_starting(&dead, "x-first-death-"),
            pairs(&[
                ("x-first-death-exchange", ""),
                ("x-first-death-queue", &broker.queue),
                ("x-first-death-reason", "rejected"),
            ])
        );
        assert_eq!(endpoint.effect_order(0), [0, 2]);
        assert_eq!(
            endpoint.ledger().executions,
            [
                (Msg { lane: 0, seq: 0 }, StatusCode::OK),
                (Msg { lane: 0, seq: 1 }, StatusCode::UNPROCESSABLE_ENTITY),
                (Msg { lane: 0, seq: 2 }, StatusCode::OK),
            ]
        );
    }
}

/// NATS JetStream: a stream of the test's own, each lane a subject under it, consumed through
/// a wildcard; dead letters to the subject of another stream, or of the same one.
mod nats {
    use async_nats::jetstream::stream;
    use idem_test_support::NatsStream;

    use super::*;

    pub(super) struct Nats {
        /// The stream that captures the lanes' subjects (`S.>`).
        stream: NatsStream,
        /// Where the lanes' subjects are: `S.k0`, or `S.in.k0`.
        lanes: String,
        /// The dead-letter subject.
        dead_letter: String,
        /// The stream of the dead letters, when it is another.
        _dead: Option<NatsStream>,
        group: String,
    }

    /// How long the streams remember a message's id: longer than a test.
    const WINDOW: Duration = Duration::from_secs(120);

    /// A stream of the test's own that captures every subject under its own (`S.>`).
    async fn stream(url: &str) -> NatsStream {
        let stream = NatsStream::create(url, WINDOW).await;
        let subject = stream.subject().to_owned();
        stream
            .jetstream()
            .update_stream(stream::Config {
                name: stream.name().to_owned(),
                subjects: vec![format!("{subject}.>")],
                duplicate_window: WINDOW,
                ..stream::Config::default()
            })
            .await
            .unwrap();
        stream
    }

    impl Nats {
        /// The lanes `S.k0`… consumed as `S.>`, dead letters to another stream.
        pub(super) async fn create() -> Option<Self> {
            let url = Server::Nats.url()?;
            let stream = stream(&url).await;
            let dead = NatsStream::create(&url, WINDOW).await;
            Some(Self {
                lanes: stream.subject().to_owned(),
                dead_letter: dead.subject().to_owned(),
                stream,
                _dead: Some(dead),
                group: unique_name("deliver-"),
            })
        }

        /// The lanes `S.in.k0`… consumed as `S.in.>`, dead letters to `S.dead`: one stream
        /// captures them all, within one duplicate window.
        async fn sharing_its_stream() -> Option<Self> {
            let url = Server::Nats.url()?;
            let stream = stream(&url).await;
            let subject = stream.subject().to_owned();
            Some(Self {
                lanes: format!("{subject}.in"),
                dead_letter: format!("{subject}.dead"),
                stream,
                _dead: None,
                group: unique_name("deliver-"),
            })
        }
    }

    impl TestBroker for Nats {
        fn url(&self) -> BrokerUrl {
            self.stream.url().parse().unwrap()
        }

        fn from(&self) -> String {
            format!("{}.>", self.lanes)
        }

        fn group(&self) -> String {
            self.group.clone()
        }

        fn destination(&self, lane: &str) -> String {
            format!("{}.{lane}", self.lanes)
        }

        fn dead_letter(&self) -> String {
            self.dead_letter.clone()
        }

        /// The durable consumer's messages not delivered yet and delivered but not settled;
        /// all of the stream's until the consumer exists.
        async fn unsettled(&self) -> u64 {
            let jetstream = self.stream.jetstream();
            let mut stream = jetstream.get_stream(self.stream.name()).await.unwrap();
            match stream.consumer_info(&self.group).await {
                Ok(info) => info.num_pending + u64::try_from(info.num_ack_pending).unwrap(),
                Err(_) => stream.info().await.unwrap().state.messages,
            }
        }
    }

    scenarios!(Nats);

    /// A dead letter published to a subject of the stream its message is in arrives: it has an
    /// id of its own (JetStream dropped one under its message's id, within the duplicate
    /// window, as a copy of it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_letter_in_the_stream_of_its_message_is_not_taken_for_a_copy() {
        let Some(broker) = Nats::sharing_its_stream().await else {
            return;
        };
        assert_eq!(
            broker.dead_letter(),
            format!("{}.dead", broker.stream.subject())
        );
        super::a_refused_message_is_dead_lettered_with_its_reason(&broker).await;
        assert_eq!(broker.stream.stored().await, 7);
    }
}

/// Kafka: a topic of the test's own in three partitions, each lane a key (so a partition),
/// and a dead-letter topic; on tansu, or on a librdkafka mock cluster of the test's own for the
/// scenarios where messages are given back (see [`Kafka::mock`]).
#[cfg(feature = "kafka")]
mod kafka {
    use idem_messaging::kafka::rdkafka::{
        ClientConfig, Offset, TopicPartitionList,
        admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
        client::DefaultClientContext,
        consumer::{BaseConsumer, Consumer},
        mocking::MockCluster,
    };

    use super::*;

    const PARTITIONS: i32 = 3;

    pub(super) struct Kafka {
        servers: String,
        topic: String,
        dead: String,
        group: String,
        /// On a mock cluster of the test's own, which outlives it: nothing to delete.
        mock: bool,
    }

    fn admin(servers: &str) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", servers)
            .create()
            .unwrap()
    }

    fn options() -> AdminOptions {
        AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)))
    }

    impl Kafka {
        /// The topics on the shared tansu broker, or `None` when `IDEM_TEST_KAFKA_URL` is not
        /// set.
        pub(super) async fn tansu() -> Option<Self> {
            let servers = Server::Kafka.url()?;
            let topic = unique_name("deliver-");
            let dead = format!("{topic}.dead");
            let created = admin(&servers)
                .create_topics(
                    &[
                        NewTopic::new(&topic, PARTITIONS, TopicReplication::Fixed(1)),
                        NewTopic::new(&dead, 1, TopicReplication::Fixed(1)),
                    ],
                    &options(),
                )
                .await
                .unwrap();
            assert_eq!(created, [Ok(topic.clone()), Ok(dead.clone())]);
            Some(Self {
                servers,
                topic,
                dead,
                group: unique_name("deliver-"),
                mock: false,
            })
        }

        /// The topics on a librdkafka mock cluster of one broker (an in-process Kafka-protocol
        /// cluster, with consumer groups and committed offsets), for the scenarios where a
        /// consumer seeks back to what it gives back and closes: tansu 0.6 answers such a
        /// consumer's fetch with a zero topic id and a leader, which librdkafka 2.12 takes for
        /// a leader change of a topic it then looks up by a NULL name, and crashes the test
        /// binary about one run in four (see `Drop for Kafka`). The cluster cannot be shared
        /// between threads: it lives on a thread of its own until the process ends, so that
        /// the consumers the subscriptions close in the background (librdkafka's close waits
        /// for the cluster) still find it.
        pub(super) async fn mock() -> Option<Self> {
            let topic = unique_name("deliver-");
            let dead = format!("{topic}.dead");
            let (servers, started) = tokio::sync::oneshot::channel();
            std::thread::spawn({
                let (topic, dead) = (topic.clone(), dead.clone());
                move || {
                    let cluster = MockCluster::new(1).unwrap();
                    cluster.create_topic(&topic, PARTITIONS, 1).unwrap();
                    cluster.create_topic(&dead, 1, 1).unwrap();
                    let _ = servers.send(cluster.bootstrap_servers());
                    loop {
                        std::thread::park();
                    }
                }
            });
            Some(Self {
                servers: started.await.unwrap(),
                topic,
                dead,
                group: unique_name("deliver-"),
                mock: true,
            })
        }
    }

    impl TestBroker for Kafka {
        fn url(&self) -> BrokerUrl {
            // The mock cluster gives a vanished member's partitions to the others a session
            // timeout after it left (librdkafka's default, 45 s): 6 s here.
            let group = if self.mock {
                "?session.timeout.ms=6000&heartbeat.interval.ms=1000"
            } else {
                ""
            };
            format!("kafka://{}{group}", self.servers).parse().unwrap()
        }

        fn from(&self) -> String {
            self.topic.clone()
        }

        fn group(&self) -> String {
            self.group.clone()
        }

        fn destination(&self, _lane: &str) -> String {
            self.topic.clone()
        }

        fn dead_letter(&self) -> String {
            self.dead.clone()
        }

        /// Past the group's committed offset of each partition (its start without one), up to
        /// the partition's end: an acknowledged message counts as settled once its offset is
        /// committed, within librdkafka's commit interval.
        async fn unsettled(&self) -> u64 {
            let (servers, topic, group) =
                (self.servers.clone(), self.topic.clone(), self.group.clone());
            tokio::task::spawn_blocking(move || {
                let consumer: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &servers)
                    .set("group.id", &group)
                    .create()
                    .unwrap();
                let timeout = Duration::from_secs(10);
                let mut partitions = TopicPartitionList::new();
                for partition in 0..PARTITIONS {
                    partitions.add_partition(&topic, partition);
                }
                let committed = consumer.committed_offsets(partitions, timeout).unwrap();
                (0..PARTITIONS)
                    .map(|partition| {
                        let (low, high) = consumer
                            .fetch_watermarks(&topic, partition, timeout)
                            .unwrap();
                        let from = match committed
                            .find_partition(&topic, partition)
                            .map(|found| found.offset())
                        {
                            Some(Offset::Offset(offset)) => offset,
                            _ => low,
                        };
                        u64::try_from(high - from).unwrap()
                    })
                    .sum()
            })
            .await
            .unwrap()
        }
    }

    /// Whether the groups' consumers have all left (the subscriptions close theirs in the
    /// background once dropped).
    fn left(servers: &str, groups: &[String]) -> bool {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", servers)
            .create()
            .unwrap();
        groups.iter().all(|group| {
            consumer
                .fetch_group_list(Some(group), Duration::from_secs(5))
                .is_ok_and(|list| list.groups().iter().all(|g| g.members().is_empty()))
        })
    }

    /// Deletes the topics once their consumers have left (a subscription closes its consumer in
    /// the background): tansu answers a fetch from a topic it does not know with a zero topic id
    /// and a leader for each partition, which librdkafka 2.12 takes for a leader change of a
    /// topic it then looks up by a NULL name, and crashes.
    impl Drop for Kafka {
        fn drop(&mut self) {
            if self.mock {
                return;
            }
            let (servers, topics) = (
                self.servers.clone(),
                [self.topic.clone(), self.dead.clone()],
            );
            let groups = [self.group(), self.dead_letter_group()];
            // Drop may run inside a runtime, which must not block: a thread with its own.
            let deleted = std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + EVENTUALLY;
                while !left(&servers, &groups) && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let names = topics.each_ref().map(String::as_str);
                    admin(&servers).delete_topics(&names, &options()).await
                })
            })
            .join();
            if !matches!(deleted, Ok(Ok(ref results)) if results.iter().all(Result::is_ok)) {
                eprintln!(
                    "could not delete the test topics {}: {deleted:?}",
                    self.topic
                );
            }
        }
    }

    scenarios!(
        Kafka::tansu:
        a_refused_message_is_dead_lettered_with_its_reason,
        each_lanes_effects_are_in_publish_order_through_retries,
    );
    // On a mock cluster: on tansu, the consumers that give messages back (seeking to them) and
    // close crash librdkafka about one run in four (see `Kafka::mock`).
    scenarios!(
        Kafka::mock:
        each_message_has_one_effect_despite_duplicates_and_an_aborted_deliverer,
        a_shutdown_acknowledges_what_was_delivered_and_gives_back_the_rest,
    );
}

/// Amazon SQS: a FIFO queue of the test's own (each lane a message group, content-based
/// deduplication off: the id is the deduplication id), and a standard dead-letter queue.
///
/// The test server (moto 5.2) keeps a FIFO queue's message groups its own way: a receive skips
/// the groups that had a message in flight when it began, even once that message is deleted, so
/// the subscription's long poll (20 s) sees a group's next message only when it ends; and of a
/// group's messages that are visible again, it returns the last first. The scenarios where
/// messages come again therefore put one message in each group, and the one of order no more
/// than one receive takes (10).
///
/// The URL's client takes its credentials from the usual chain, and a test cannot set its own
/// process's environment (`set_var` is unsafe, tests run on threads): each test runs again in a
/// process of its own, this test binary started for it alone with the server's credentials.
#[cfg(feature = "sqs")]
mod sqs {
    use idem_messaging::sqs::{
        aws_sdk_sqs::{
            Client, Config as SqsConfig,
            config::{BehaviorVersion, Credentials, Region},
            types::QueueAttributeName,
        },
        http_client,
    };

    use super::*;

    /// Set in the process a test runs again in.
    const CHILD: &str = "IDEM_TEST_DELIVER_SQS_CHILD";

    pub(super) struct Sqs {
        endpoint: String,
        client: Client,
        queue: String,
        queue_url: String,
        dead: String,
        dead_url: String,
    }

    impl Sqs {
        /// The queues, in the process with credentials; in the test's own process, runs the
        /// test again in one and gives `None`.
        pub(super) async fn create() -> Option<Self> {
            let endpoint = Server::Sqs.url()?;
            if !in_a_process_with_credentials().await {
                return None;
            }
            let client = Client::from_conf(
                SqsConfig::builder()
                    .behavior_version(BehaviorVersion::latest())
                    .region(Region::new("us-east-1"))
                    .endpoint_url(&endpoint)
                    .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
                    .http_client(http_client())
                    .build(),
            );
            let name = unique_name("idem-test-deliver-");
            let (queue, dead) = (format!("{name}.fifo"), format!("{name}-dead"));
            let queue_url = client
                .create_queue()
                .queue_name(&queue)
                .attributes(QueueAttributeName::FifoQueue, "true")
                .attributes(QueueAttributeName::ContentBasedDeduplication, "false")
                .send()
                .await
                .unwrap()
                .queue_url()
                .unwrap()
                .to_owned();
            let dead_url = client
                .create_queue()
                .queue_name(&dead)
                .send()
                .await
                .unwrap()
                .queue_url()
                .unwrap()
                .to_owned();
            Some(Self {
                endpoint,
                client,
                queue,
                queue_url,
                dead,
                dead_url,
            })
        }
    }

    /// `true` in the process with credentials, where the test goes on; in the test's own
    /// process, runs the test (named after the thread, as the harness names it) in a child
    /// process with the test server's credentials, checks that it passed there, and gives
    /// `false`.
    async fn in_a_process_with_credentials() -> bool {
        if std::env::var_os(CHILD).is_some() {
            return true;
        }
        let thread = std::thread::current();
        let test = thread
            .name()
            .expect("a test's thread is named after it")
            .to_owned();
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args([&test, "--exact", "--nocapture", "--test-threads=1"])
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
            .env("AWS_EC2_METADATA_DISABLED", "true");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        eprintln!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{test} failed in its own process");
        // A filter that matched nothing would pass too.
        assert!(
            stdout.contains(&format!("test {test} ... ok")),
            "{test} did not run"
        );
        false
    }

    impl TestBroker for Sqs {
        const REDELIVERED: (u8, u8) = (8, 1);
        const ORDERED: (u8, u8) = (3, 3);

        fn url(&self) -> BrokerUrl {
            format!("sqs://us-east-1?endpoint={}", self.endpoint)
                .parse()
                .unwrap()
        }

        fn from(&self) -> String {
            self.queue.clone()
        }

        /// Unused by SQS: every consumer of a queue shares its messages.
        fn group(&self) -> String {
            "idem-deliver".to_owned()
        }

        fn destination(&self, _lane: &str) -> String {
            self.queue.clone()
        }

        fn dead_letter(&self) -> String {
            self.dead.clone()
        }

        /// Visible, in flight (received, not deleted) and delayed, as SQS counts them.
        async fn unsettled(&self) -> u64 {
            let attributes = self
                .client
                .get_queue_attributes()
                .queue_url(&self.queue_url)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
                .send()
                .await
                .unwrap();
            let attributes = attributes.attributes().unwrap();
            [
                QueueAttributeName::ApproximateNumberOfMessages,
                QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                QueueAttributeName::ApproximateNumberOfMessagesDelayed,
            ]
            .iter()
            .map(|name| attributes[name].parse::<u64>().unwrap())
            .sum()
        }
    }

    impl Drop for Sqs {
        fn drop(&mut self) {
            let client = self.client.clone();
            let urls = [self.queue_url.clone(), self.dead_url.clone()];
            // Deleted in the background: the test's runtime may be shutting down.
            tokio::spawn(async move {
                for url in urls {
                    let _ = client.delete_queue().queue_url(url).send().await;
                }
            });
        }
    }

    scenarios!(Sqs);
}

#[test]
fn an_unknown_key_source_is_one_line_and_exit_2() {
    let output = idem(&[
        "deliver",
        "--broker",
        "amqp://127.0.0.1:9/%2f",
        "--from",
        "orders",
        "--to",
        "http://127.0.0.1:9/events",
        "--key-from",
        "uuid",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr.trim_end(),
        "error: invalid value 'uuid' for '--key-from <SOURCE>': expected outbox-id, message-id \
         or header:NAME; got \"uuid\""
    );
}

/// On Kafka, which has no dead-letter mechanism of its own, `idem deliver` without
/// `--dead-letter` is refused before it connects: one line, exit 2.
#[cfg(feature = "kafka")]
#[test]
fn kafka_without_a_dead_letter_topic_is_one_line_and_exit_2() {
    let output = idem(&[
        "deliver",
        "--broker",
        "kafka://127.0.0.1:9",
        "--from",
        "orders",
        "--to",
        "http://127.0.0.1:9/events",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr,
        "error: Kafka has no dead-letter mechanism of its own: give --dead-letter TOPIC for the \
         messages the endpoint refuses\n"
    );
}

/// `idem deliver` on a RabbitMQ queue answers `/healthz` on its admin listener and, on SIGTERM,
/// stops and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_deliver_serves_health_and_stops_on_sigterm_with_exit_0() {
    let Some(broker) = rabbitmq::Rabbit::create().await else {
        return;
    };
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut deliver = idem_command()
        .args(["deliver", "--broker", broker.url().as_str()])
        .args(["--from", &broker.from(), "--group", &broker.group()])
        .args(["--to", &format!("http://127.0.0.1:{}/events", free_port())])
        .args(["--admin-listen", &admin.to_string(), "--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listening = tokio::time::timeout(EVENTUALLY, async {
        while tokio::net::TcpStream::connect(admin).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if listening.is_err() {
        let _ = deliver.kill();
        panic!("idem deliver does not listen on {admin}");
    }
    let health = Client::new()
        .send(
            Request::get(format!("http://{admin}/healthz"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.text(), "ok\n");

    let status = std::process::Command::new("kill")
        .args(["-TERM", &deliver.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    let exit = loop {
        if let Some(exit) = deliver.try_wait().unwrap() {
            break Some(exit);
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = deliver.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(exit.and_then(|exit| exit.code()), Some(0));
}
