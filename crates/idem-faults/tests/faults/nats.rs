//! The fault test on NATS JetStream: a `nats-server -js` of its own, on a free port, with its own
//! store directory, restarted once (SIGTERM, then started again on the same store).

use std::{process::Stdio, time::Duration};

use async_nats::jetstream::{
    self,
    consumer::{AckPolicy, PullConsumer, pull},
    stream,
};
use futures_util::StreamExt;
use tempfile::TempDir;
use tokio::{
    process::{Child, Command},
    task::JoinHandle,
};

use idem_test_support::{free_port, require};

use crate::{
    harness::{self, Consumer, FaultBroker, Next},
    journal::Journal,
    ledger::{FaultDb, TestDatabase, TestSchema},
};

const STREAM: &str = "FAULTS";
const SUBJECT: &str = "faults";

struct NatsServer {
    port: u16,
    store: TempDir,
    server: Option<Child>,
    /// Where the server logs, across its restart.
    log: std::fs::File,
}

impl NatsServer {
    /// Starts the server, its log in `journal`, and creates the stream.
    async fn start(journal: &Journal) -> Self {
        let mut server = Self {
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            server: None,
            log: journal.log_file("nats-server"),
        };
        server.launch().await;
        let client = async_nats::connect(server.relay_url()).await.unwrap();
        jetstream::new(client)
            .create_stream(stream::Config {
                name: STREAM.into(),
                subjects: vec![SUBJECT.into()],
                duplicate_window: Duration::from_secs(120),
                ..stream::Config::default()
            })
            .await
            .unwrap();
        server
    }

    async fn launch(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(self.log.try_clone().unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start nats-server (Debian's package nats-server)");
        self.server = Some(child);
        harness::wait_port(self.port, true).await;
    }

    /// A pull consumer that hands out one message at a time (so that the ledger's order is the
    /// stream's), redelivering an unacknowledged one after 2 s.
    async fn consumer(url: &str) -> Result<PullConsumer, async_nats::Error> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(url)
            .await?;
        let stream = jetstream::new(client).get_stream(STREAM).await?;
        Ok(stream
            .get_or_create_consumer(
                "ledger",
                pull::Config {
                    durable_name: Some("ledger".into()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(2),
                    max_ack_pending: 1,
                    ..pull::Config::default()
                },
            )
            .await?)
    }
}

impl FaultBroker for NatsServer {
    const NAME: &'static str = "NATS JetStream";

    fn relay_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn destination(&self) -> String {
        SUBJECT.into()
    }

    async fn restart(&mut self) {
        let mut server = self.server.take().unwrap();
        let pid = server.id().unwrap().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        server.wait().await.unwrap();
        harness::wait_port(self.port, false).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.launch().await;
    }

    fn spawn_consumer<D: FaultDb>(&self, consumer: Consumer<D>) -> JoinHandle<()> {
        let url = self.relay_url();
        tokio::spawn(async move {
            while !consumer.stop.is_cancelled() {
                let messages = match Self::consumer(&url).await {
                    Ok(pull) => pull.messages().await.map_err(Into::into),
                    Err(error) => Err(error),
                };
                let mut messages = match messages {
                    Ok(messages) => messages,
                    Err(error) => {
                        consumer
                            .retry_after(format!("cannot consume: {error}"))
                            .await;
                        continue;
                    }
                };
                loop {
                    let next = tokio::select! {
                        next = messages.next() => next,
                        () = consumer.stop.cancelled() => return,
                    };
                    // Missed heartbeats while the server restarts, or the end: start again.
                    let message = match next {
                        Some(Ok(message)) => message,
                        Some(Err(error)) => {
                            consumer.note(format!("receive failed, reconnecting: {error}"));
                            break;
                        }
                        None => {
                            consumer.note("the message stream ended; reconnecting");
                            break;
                        }
                    };
                    if let Next::Reconnect = consumer.handle(message).await {
                        break;
                    }
                }
            }
        })
    }
}

#[tokio::test]
async fn nothing_is_lost_duplicated_or_reordered_through_nats_faults() {
    faults::<TestSchema>().await;
}

/// The same, with the outbox and the consumer's inbox on MySQL.
#[tokio::test]
async fn nothing_is_lost_duplicated_or_reordered_through_nats_faults_on_mysql() {
    faults::<TestDatabase>().await;
}

async fn faults<D: FaultDb>() {
    // Where NATS is set up for the tests, nats-server is installed: this test runs its own.
    let _ = require!(Nats);
    let Some(database) = D::create().await else {
        return;
    };
    let journal = Journal::new();
    let _printed = journal.print_on_failure();
    let server = NatsServer::start(&journal).await;
    harness::run(server, database, &journal).await;
}
