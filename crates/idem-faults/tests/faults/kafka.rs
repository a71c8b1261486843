//! The fault test on Kafka: a tansu broker of its own (the shared one serves the other tests), on
//! a free port, with its memory storage, which does not outlive a restart. So the broker is not
//! restarted: it is taken away for a while. Every client reaches it through a TCP proxy of the
//! test's own (tansu advertises the proxy's address), which closes every connection at once and
//! refuses new ones for three seconds, then lets them through again to the same data.
//!
//! The relays produce one record per batch (`linger.ms=0&batch.num.messages=1` in their URL):
//! tansu 0.6 answers a fetch that starts inside a batch of several records with nothing, and
//! the consumer resumes at its committed offset after its crash.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use idem_messaging::kafka::{
    KafkaMessage, consumer_config,
    rdkafka::{
        ClientConfig,
        admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
        client::DefaultClientContext,
        consumer::{Consumer as _, StreamConsumer},
        error::KafkaError,
    },
};
use idem_test_support::{TcpProxy, free_port, require};
use tokio::{
    process::{Child, Command},
    task::JoinHandle,
};

use crate::{
    harness::{self, Consumer, FaultBroker, Next},
    journal::Journal,
    ledger::{FaultDb, TestDatabase, TestSchema},
};

const TOPIC: &str = "faults";
const PARTITIONS: i32 = 4;
/// How long the broker is away.
const OUTAGE: Duration = Duration::from_secs(3);

/// A tansu broker of the test's own behind a proxy; stopped when dropped.
struct Tansu {
    proxy: TcpProxy,
    _broker: Child,
}

impl Tansu {
    /// Starts the broker, its warnings and errors in `journal`, and creates the topic.
    async fn start(journal: &Journal) -> Self {
        // The proxy's port is tansu's advertised listener: chosen before tansu starts.
        let port = free_port();
        let proxy = TcpProxy::start(&format!("127.0.0.1:{port}")).await;
        let binary = std::env::var("IDEM_TANSU").unwrap_or_else(|_| "tansu".into());
        let log = journal.log_file("tansu");
        let broker = Command::new(&binary)
            .args(["broker", "--listener-url"])
            .arg(format!("tcp://127.0.0.1:{port}"))
            .arg("--advertised-listener-url")
            .arg(format!("tcp://{}", proxy.address()))
            .args(["--storage-engine", "memory://tansu/"])
            // At `info` tansu logs every request: the tail would hold nothing else.
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "start tansu ({binary}: {error}); scripts/services.sh installs it and sets \
                     IDEM_TANSU"
                )
            });
        harness::wait_port(port, true).await;
        let tansu = Self {
            proxy,
            _broker: broker,
        };
        tansu.create_topic().await;
        tansu
    }

    async fn create_topic(&self) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.proxy.address())
            .create()
            .unwrap();
        let created = admin
            .create_topics(
                &[NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .unwrap();
        assert_eq!(created, [Ok(TOPIC.to_owned())]);
    }

    /// A consumer in the group `ledger`, configured as the inbox needs it (offsets committed
    /// only past what the inbox committed).
    fn consumer(servers: &str) -> Result<Arc<StreamConsumer>, KafkaError> {
        let consumer: StreamConsumer = consumer_config(servers, "ledger")
            .set("session.timeout.ms", "6000")
            .set("auto.commit.interval.ms", "100")
            .create()?;
        consumer.subscribe(&[TOPIC])?;
        Ok(Arc::new(consumer))
    }
}

impl FaultBroker for Tansu {
    const NAME: &'static str = "Kafka (tansu)";
    const RESTART: &'static str = "broker outages (connections cut, refused for 3 s)";

    /// One record per batch, and a delivery timeout under the relay's publish timeout (5 s).
    fn relay_url(&self) -> String {
        format!(
            "kafka://{}?linger.ms=0&batch.num.messages=1&message.timeout.ms=4000",
            self.proxy.address()
        )
    }

    fn destination(&self) -> String {
        TOPIC.into()
    }

    async fn restart(&mut self) {
        self.proxy.outage(OUTAGE).await;
    }

    fn spawn_consumer<D: FaultDb>(&self, consumer: Consumer<D>) -> JoinHandle<()> {
        let servers = self.proxy.address();
        tokio::spawn(async move {
            while !consumer.stop.is_cancelled() {
                let kafka = match Tansu::consumer(&servers) {
                    Ok(kafka) => kafka,
                    Err(error) => {
                        consumer
                            .retry_after(format!("cannot create a consumer: {error}"))
                            .await;
                        continue;
                    }
                };
                loop {
                    let next = tokio::select! {
                        next = kafka.recv() => next,
                        () = consumer.stop.cancelled() => break,
                    };
                    // The broker away, or a rebalance: librdkafka recovers by itself.
                    let message = match next {
                        Ok(message) => message,
                        Err(error) => {
                            consumer
                                .retry_after(format!("receive failed: {error}"))
                                .await;
                            continue;
                        }
                    };
                    let message = KafkaMessage::new(&message, Arc::clone(&kafka));
                    if let Next::Reconnect = consumer.handle(message).await {
                        break;
                    }
                }
                // A crash, or the end: the consumer leaves the group, committing the offsets its
                // acks stored (closing blocks: off the runtime's threads).
                let started = Instant::now();
                tokio::task::spawn_blocking(move || drop(kafka))
                    .await
                    .unwrap();
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "closing the consumer took {:?}",
                    started.elapsed()
                );
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_duplicated_or_reordered_through_kafka_faults() {
    faults::<TestSchema>().await;
}

/// The same, with the outbox and the consumer's inbox on MySQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_duplicated_or_reordered_through_kafka_faults_on_mysql() {
    faults::<TestDatabase>().await;
}

async fn faults<D: FaultDb>() {
    // Where Kafka is set up for the tests, tansu is installed: this test runs a broker of its own.
    let _ = require!(Kafka);
    let Some(database) = D::create().await else {
        return;
    };
    let journal = Journal::new();
    let _printed = journal.print_on_failure();
    let tansu = Tansu::start(&journal).await;
    harness::run(tansu, database, &journal).await;
}
