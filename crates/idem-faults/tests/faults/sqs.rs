//! The fault test on Amazon SQS, against moto's SQS server (`IDEM_TEST_SQS_URL`): a FIFO queue of
//! the test's own (the ordering key is the message group, the outbox id the deduplication id),
//! with a 3 s visibility timeout. moto keeps its queues in memory, so the server is not
//! restarted: it is taken away for a while. Every client reaches it through a TCP proxy of the
//! test's own, which closes every connection at once and refuses new ones for three seconds,
//! then lets them through again to the same queue. moto slows down with the messages waiting in
//! a queue, so the producers stay at most 50 messages ahead of the consumer.

use std::time::Duration;

use idem_messaging::sqs::{
    SqsConsumer,
    aws_sdk_sqs::{
        Client,
        config::{BehaviorVersion, Credentials, Region},
        types::QueueAttributeName,
    },
    http_client,
};
use idem_test_support::{TcpProxy, require, unique_name};
use tokio::task::JoinHandle;

use crate::{
    harness::{self, Consumer, FaultBroker, Next},
    journal::Journal,
    ledger::{FaultDb, TestDatabase, TestSchema},
};

/// How long a received message stays hidden: how soon the crashed consumer's comes back.
const VISIBILITY: Duration = Duration::from_secs(3);
/// How long SQS is away.
const OUTAGE: Duration = Duration::from_secs(3);
/// Credentials for moto, which takes any.
const KEY_ID: &str = "idem-faults";
const SECRET: &str = "idem-faults";

/// A client of `endpoint` (`http://host:port`).
fn client(endpoint: &str) -> Client {
    let config = idem_messaging::sqs::aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(KEY_ID, SECRET, None, None, "idem-faults"))
        .http_client(http_client())
        .build();
    Client::from_conf(config)
}

/// A FIFO queue of the test's own on the shared server, reached through a proxy; the queue is
/// deleted at the end of the test.
struct Sqs {
    proxy: TcpProxy,
    /// A client through the proxy.
    client: Client,
    name: String,
    url: String,
}

impl Sqs {
    async fn start(server: &str) -> Self {
        let server = server.trim_start_matches("http://").trim_end_matches('/');
        let proxy = TcpProxy::start(server).await;
        let client = client(&format!("http://{}", proxy.address()));
        let name = format!("{}.fifo", unique_name("idem-faults-"));
        let created = client
            .create_queue()
            .queue_name(&name)
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                VISIBILITY.as_secs().to_string(),
            )
            .send()
            .await
            .unwrap();
        let url = created.queue_url().unwrap().to_owned();
        Self {
            proxy,
            client,
            name,
            url,
        }
    }
}

impl FaultBroker for Sqs {
    const NAME: &'static str = "Amazon SQS (moto), FIFO queue";
    const RESTART: &'static str = "server outages (connections cut, refused for 3 s)";
    /// moto scans a queue's messages on every request: past a few dozen messages waiting, it
    /// slows down many times over (a FIFO queue with 100 messages waiting takes a third of the
    /// messages per second it takes with 10, with 1,000 a hundredth).
    const MAX_AHEAD: usize = 50;

    fn relay_url(&self) -> String {
        format!("sqs://us-east-1?endpoint=http://{}", self.proxy.address())
    }

    /// The AWS SDK's credential chain reads them from the environment first.
    fn relay_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ]
    }

    fn destination(&self) -> String {
        self.name.clone()
    }

    async fn restart(&mut self) {
        self.proxy.outage(OUTAGE).await;
    }

    /// Receives up to ten messages at a time and handles them in the order received (a FIFO
    /// queue hands out each group's messages in order). After a crash, the rest of the receive
    /// is dropped: hidden until the visibility timeout, then received again in order.
    fn spawn_consumer<D: FaultDb>(&self, consumer: Consumer<D>) -> JoinHandle<()> {
        let sqs = SqsConsumer::new(self.client.clone(), &self.url)
            .visibility_timeout(VISIBILITY)
            .wait_time(Duration::from_secs(1));
        tokio::spawn(async move {
            while !consumer.stop.is_cancelled() {
                let received = tokio::select! {
                    received = sqs.receive() => received,
                    () = consumer.stop.cancelled() => return,
                };
                // SQS away: try again.
                let messages = match received {
                    Ok(messages) => messages,
                    Err(error) => {
                        consumer
                            .retry_after(format!("receive failed: {error}"))
                            .await;
                        continue;
                    }
                };
                for message in messages {
                    if let Next::Reconnect = consumer.handle(message).await {
                        break; // the rest of the receive is dropped with the iterator
                    }
                }
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_duplicated_or_reordered_through_sqs_faults() {
    faults::<TestSchema>().await;
}

/// The same, with the outbox and the consumer's inbox on MySQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_duplicated_or_reordered_through_sqs_faults_on_mysql() {
    faults::<TestDatabase>().await;
}

async fn faults<D: FaultDb>() {
    let server = require!(Sqs);
    // moto's server is shared (scripts/services.sh logs it): the journal has the relays' and the
    // consumer's side.
    let Some(database) = D::create().await else {
        return;
    };
    let journal = Journal::new();
    let _printed = journal.print_on_failure();
    let sqs = Sqs::start(&server).await;
    let queue = sqs.url.clone();
    harness::run(sqs, database, &journal).await;
    // The proxy went with the fixture: straight to the server.
    client(&server)
        .delete_queue()
        .queue_url(queue)
        .send()
        .await
        .unwrap();
}
