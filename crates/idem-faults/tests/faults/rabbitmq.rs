//! The fault test on RabbitMQ: a second RabbitMQ node of its own (the shared one serves the other
//! tests), on free ports with its own data directory, restarted once (`rabbitmqctl stop`, then
//! `rabbitmq-server -detached` again on the same data).

use std::{process::Stdio, time::Duration};

use futures_util::StreamExt;
use lapin::{
    Connection, ConnectionProperties,
    options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions},
    types::FieldTable,
};
use tempfile::TempDir;
use tokio::{process::Command, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use idem_test_support::{free_port, require};

use crate::{
    harness::{self, Consumer, FaultBroker, Next},
    journal::Journal,
    ledger::{FaultDb, TestDatabase, TestSchema},
};

const QUEUE: &str = "faults";
/// The longest the consumer waits for one step with the broker (connect, consume, handle a
/// delivery, close).
const STEP: Duration = Duration::from_secs(5);

/// A RabbitMQ node started with `rabbitmq-server -detached`; stopped when dropped.
struct RabbitNode {
    name: String,
    port: u16,
    dist_port: u16,
    dir: TempDir,
}

impl RabbitNode {
    /// Starts the node, its log's tail in `journal`, and declares the queue.
    async fn start(journal: &Journal) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let node = Self {
            name: format!("idem-faults-{port}@localhost"),
            port,
            dist_port: free_port(),
            dir,
        };
        let path = node.dir.path();
        std::fs::write(path.join("enabled_plugins"), "[].\n").unwrap();
        // The system's rabbitmq.conf names the shared node's listener: ours replaces it.
        std::fs::write(
            path.join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .unwrap();
        // The Debian scripts run the node as the rabbitmq user.
        run(Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(path))
        .await;
        run(Command::new("chmod").arg("755").arg(path)).await;
        journal.tail(
            "rabbitmq",
            path.join("log").join(format!("{}.log", node.name)),
        );
        node.launch().await;

        let connection = Connection::connect(&node.url(), ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .queue_declare(
                QUEUE.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        connection.close(200, "declared".into()).await.unwrap();
        node
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.dir.path();
        let mut command = Command::new(program);
        command
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", path.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", path.join("log"))
            .env("RABBITMQ_PID_FILE", path.join("pid"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                path.join("enabled_plugins"),
            )
            .env("RABBITMQ_CONFIG_FILE", path.join("rabbitmq.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    async fn launch(&self) {
        run(self.command("rabbitmq-server").arg("-detached")).await;
        harness::wait_port(self.port, true).await;
    }

    async fn stop(&self) {
        run(self.command("rabbitmqctl").args(["-n", &self.name, "stop"])).await;
        harness::wait_port(self.port, false).await;
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["-n", &self.name, "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn run(command: &mut Command) {
    let status = command.status().await.unwrap();
    assert!(status.success(), "{command:?}: {status}");
}

impl FaultBroker for RabbitNode {
    const NAME: &'static str = "RabbitMQ";

    fn relay_url(&self) -> String {
        self.url()
    }

    fn destination(&self) -> String {
        QUEUE.into()
    }

    async fn restart(&mut self) {
        self.stop().await;
        self.launch().await;
    }

    fn spawn_consumer<D: FaultDb>(&self, consumer: Consumer<D>) -> JoinHandle<()> {
        let url = self.url();
        tokio::spawn(async move {
            while !consumer.stop.is_cancelled() {
                // A node that is restarting may accept the connection and never answer the
                // handshake: every step is bounded, and the test's stop ends the wait.
                let connect = Connection::connect(&url, ConnectionProperties::default());
                let Some(connect) = step(&consumer.stop, connect).await else {
                    return;
                };
                let connection = match answered(connect) {
                    Ok(connection) => connection,
                    Err(error) => {
                        consumer
                            .retry_after(format!("cannot connect: {error}"))
                            .await;
                        continue;
                    }
                };
                let deliveries = async {
                    let channel = connection.create_channel().await?;
                    channel.basic_qos(64, BasicQosOptions::default()).await?;
                    channel
                        .basic_consume(
                            QUEUE.into(),
                            "ledger".into(),
                            BasicConsumeOptions::default(),
                            FieldTable::default(),
                        )
                        .await
                };
                let mut deliveries = match answered(tokio::time::timeout(STEP, deliveries).await) {
                    Ok(deliveries) => deliveries,
                    Err(error) => {
                        consumer
                            .retry_after(format!("cannot consume: {error}"))
                            .await;
                        continue;
                    }
                };
                loop {
                    let next = tokio::select! {
                        next = deliveries.next() => next,
                        () = consumer.stop.cancelled() => return,
                    };
                    let delivery = match next {
                        Some(Ok(delivery)) => delivery,
                        Some(Err(error)) => {
                            consumer.note(format!("receive failed, reconnecting: {error}"));
                            break;
                        }
                        None => {
                            consumer.note("the consumer was cancelled; reconnecting");
                            break;
                        }
                    };
                    // An ack on a connection the restart cut may never be answered: treat a
                    // step that takes too long as a crash (the inbox skips the redelivery).
                    let Some(handled) = step(&consumer.stop, consumer.handle(delivery)).await
                    else {
                        return;
                    };
                    match handled {
                        Ok(Next::Continue) => {}
                        Ok(Next::Reconnect) => break,
                        Err(_) => {
                            consumer.note(format!("no answer within {STEP:?}; reconnecting"));
                            break;
                        }
                    }
                }
                // A crash: the unacknowledged deliveries go back to the queue, in order.
                let _ = tokio::time::timeout(STEP, connection.close(200, "crashed".into())).await;
            }
        })
    }
}

#[tokio::test]
async fn nothing_is_lost_duplicated_or_reordered_through_rabbitmq_faults() {
    faults::<TestSchema>().await;
}

/// The same, with the outbox and the consumer's inbox on MySQL.
#[tokio::test]
async fn nothing_is_lost_duplicated_or_reordered_through_rabbitmq_faults_on_mysql() {
    faults::<TestDatabase>().await;
}

async fn faults<D: FaultDb>() {
    // Where RabbitMQ is set up for the tests, it is installed: this test runs a node of its own.
    let _ = require!(Amqp);
    let Some(database) = D::create().await else {
        return;
    };
    let journal = Journal::new();
    let _printed = journal.print_on_failure();
    let node = RabbitNode::start(&journal).await;
    harness::run(node, database, &journal).await;
}

/// A step's outcome, its error or its timeout as text.
fn answered<T, E: std::fmt::Display>(
    outcome: Result<Result<T, E>, tokio::time::error::Elapsed>,
) -> Result<T, String> {
    match outcome {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {STEP:?}")),
    }
}

/// `work` within [`STEP`] (`Err` past it), or `None` once the test stops.
async fn step<T>(
    stop: &CancellationToken,
    work: impl Future<Output = T>,
) -> Option<Result<T, tokio::time::error::Elapsed>> {
    tokio::select! {
        done = tokio::time::timeout(STEP, work) => Some(done),
        () = stop.cancelled() => None,
    }
}
