//! Kafka over TLS: a tansu broker of the test's own on a free loopback port, behind stunnel
//! (Debian's `stunnel4`), which ends TLS in front of it with certificates made for the test;
//! tansu advertises stunnel's port, so that every connection goes through TLS. A wrong CA is
//! refused with the certificate's problem named, the right one carries messages from the relay's
//! publisher to a consumer and back; a tunnel that asks for a client certificate gets the one in
//! the URL. SASL goes only as far as tansu lets it (see
//! `sasl_reads_the_password_file_and_never_shows_it`).
//!
//! Like the other Kafka tests, each needs `IDEM_TEST_KAFKA_URL` (the variable says the machine has
//! the Kafka tools, as `scripts/services.sh` sets them up) and is skipped without it; with it, a
//! missing tansu (`IDEM_TANSU`, or `tansu` on the `PATH`) or stunnel fails the test.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

#[path = "tls/certificates.rs"]
mod certificates;
mod common;

use std::{
    io::Write,
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use certificates::Certificates;
use common::chain;
use idem_messaging::{
    BrokerUrl, Envelope, Incoming, OutboxMessage, Publisher,
    kafka::{KafkaMessage, KafkaSecurity, consumer_config},
};
use idem_test_support::{free_port, require, unique_name};
use rdkafka::{
    ClientConfig,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{Consumer, StreamConsumer},
};

/// What the tests of this binary logged at `warn` and above, as text: the subscriber is the
/// process's, installed by the first test that asks.
fn logs() -> String {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    let logs = LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let writer = Arc::clone(&logs);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || Logs(Arc::clone(&writer)))
            .try_init()
            .unwrap();
        logs
    });
    let text = logs.lock().unwrap_or_else(PoisonError::into_inner);
    String::from_utf8_lossy(&text).into_owned()
}

/// A writer into the captured logs.
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut logs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        logs.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How long the publishers that must fail try (`message.timeout.ms`).
const REFUSED_WITHIN_MS: u32 = 3000;

/// A tansu broker behind stunnel, both killed when dropped.
struct Tunnelled {
    tansu: Child,
    stunnel: Child,
    /// stunnel's port: the only address tansu advertises.
    port: u16,
    /// What the test's own clients (the admin, the consumer) reach it with.
    security: KafkaSecurity,
}

impl Drop for Tunnelled {
    fn drop(&mut self) {
        for child in [&mut self.stunnel, &mut self.tansu] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Tunnelled {
    /// Starts them with their files in `dir`; `verify_clients` makes stunnel ask every client
    /// for a certificate signed by the test's CA.
    async fn start(dir: &Path, certificates: &Certificates, verify_clients: bool) -> Self {
        let (plain, port) = (free_port(), free_port());
        let tansu = std::env::var("IDEM_TANSU").unwrap_or_else(|_| "tansu".into());
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--", &tansu, "broker"])
            .args(["--listener-url", &format!("tcp://127.0.0.1:{plain}")])
            .args([
                "--advertised-listener-url",
                &format!("tcp://127.0.0.1:{port}"),
            ])
            .args(["--storage-engine", "memory://tansu/"]);
        let tansu = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("tansu.log")).unwrap())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "start tansu ({tansu}: {error}); scripts/services.sh installs it and sets \
                     IDEM_TANSU"
                )
            });

        let verify = if verify_clients {
            format!(
                "CAfile = {}\nrequireCert = yes\nverifyChain = yes\n",
                certificates.ca.display()
            )
        } else {
            String::new()
        };
        let config = dir.join("stunnel.conf");
        std::fs::write(
            &config,
            format!(
                "foreground = yes\npid =\noutput = {}\n[kafka]\naccept = 127.0.0.1:{port}\n\
                 connect = 127.0.0.1:{plain}\ncert = {}\nkey = {}\n{verify}",
                dir.join("stunnel.log").display(),
                certificates.cert.display(),
                certificates.key.display(),
            ),
        )
        .unwrap();
        let program = ["stunnel4", "stunnel"]
            .into_iter()
            .find(|program| which(program))
            .expect("stunnel (Debian's stunnel4; scripts/services.sh installs it)");
        let stunnel = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", program])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("start {program} (setpriv from util-linux): {error}"));

        let mut security = KafkaSecurity::new().ca_file(&certificates.ca);
        if verify_clients {
            security = security.client_cert(&certificates.client_cert, &certificates.client_key);
        }
        let tunnelled = Self {
            tansu,
            stunnel,
            port,
            security,
        };
        for port in [plain, port] {
            wait_port(port).await;
        }
        tunnelled
    }

    /// `SCHEME://127.0.0.1:PORT?PARAMETERS`, with the settings of a publisher that must fail
    /// quickly.
    fn url(&self, scheme: &str, parameters: &str) -> BrokerUrl {
        format!(
            "{scheme}://127.0.0.1:{}?message.timeout.ms={REFUSED_WITHIN_MS}&linger.ms=0\
             &batch.num.messages=1{parameters}",
            self.port
        )
        .parse()
        .unwrap()
    }

    /// The test's own client settings.
    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", format!("127.0.0.1:{}", self.port));
        self.security.apply(&mut config).unwrap();
        config
    }

    /// A topic of the test's own, in one partition.
    async fn topic(&self) -> String {
        let topic = unique_name("payments-");
        let admin: AdminClient<DefaultClientContext> = self.config().create().unwrap();
        let created = admin
            .create_topics(
                &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .unwrap();
        assert_eq!(created, [Ok(topic.clone())]);
        topic
    }

    /// The id and payload of the first `count` messages of `topic`, read by a consumer over
    /// TLS configured as the inbox needs it.
    async fn consume(&self, topic: &str, count: usize) -> Vec<(String, String)> {
        let mut config =
            consumer_config(&format!("127.0.0.1:{}", self.port), &unique_name("ledger-"));
        self.security.apply(&mut config).unwrap();
        let consumer: Arc<StreamConsumer> = Arc::new(config.create().unwrap());
        consumer.subscribe(&[topic]).unwrap();
        let mut consumed = Vec::new();
        while consumed.len() < count {
            let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                .await
                .expect("a message arrives")
                .unwrap();
            let message = KafkaMessage::new(&message, Arc::clone(&consumer));
            consumed.push((
                message.message_id().unwrap().to_owned(),
                String::from_utf8(message.payload().to_vec()).unwrap(),
            ));
            message.ack().await.unwrap();
        }
        consumed
    }
}

/// Whether `program` is on the `PATH`.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Waits until something accepts connections on `port`, for at most 20 s.
async fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "port {port} did not open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Why publishing one message to `topic` through `url`'s publisher fails: the error chain. The
/// topic exists, so that nothing but the connection's security can fail it.
async fn refusal(url: &BrokerUrl, topic: &str) -> String {
    let envelope = Envelope::new(
        "refused-1".parse().unwrap(),
        OutboxMessage::new(topic, "x"),
        1,
    );
    let outcome = tokio::time::timeout(Duration::from_secs(30), url.publisher().publish(&envelope))
        .await
        .expect("the publisher answers");
    chain(&outcome.expect_err("the cluster is not reached"))
}

/// Asserts that `refused` is a delivery to the broker at `port` that timed out, with what
/// librdkafka last reported about its connection to it (`PROTOCOL://127.0.0.1:PORT/bootstrap: …`)
/// saying `reason`. (librdkafka words a failed handshake in more than one way around the
/// OpenSSL error, depending on when it sees it.)
fn assert_timed_out_after(refused: &str, protocol: &str, port: u16, reason: &str) {
    let prefix = format!(
        "the broker is unavailable: the Kafka cluster last reported: \
         {protocol}://127.0.0.1:{port}/bootstrap: "
    );
    let suffix = ": Message production error: MessageTimedOut (Local: Message timed out)";
    assert!(
        refused.starts_with(&prefix) && refused.ends_with(suffix),
        "{refused}"
    );
    assert!(refused.contains(reason), "{refused}\nexpected {reason}");
}

/// Publishes three messages to `topic` through `url`'s publisher (the relay's) and reads them
/// back over TLS: each arrives once, with its id.
async fn round_trip(cluster: &Tunnelled, url: &BrokerUrl, topic: &str) {
    let batch: Vec<Envelope> = (1..=3)
        .map(|n| {
            Envelope::new(
                format!("m-{n}").parse().unwrap(),
                OutboxMessage::new(topic, format!("payment {n} over TLS")),
                1,
            )
        })
        .collect();
    let confirmations = url.publisher().publish_batch(&batch).await;
    assert_eq!(confirmations.len(), 3);
    assert!(confirmations.iter().all(Result::is_ok), "{confirmations:?}");
    assert_eq!(
        cluster.consume(topic, 3).await,
        [
            ("m-1".to_owned(), "payment 1 over TLS".to_owned()),
            ("m-2".to_owned(), "payment 2 over TLS".to_owned()),
            ("m-3".to_owned(), "payment 3 over TLS".to_owned()),
        ]
    );
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused_and_the_right_one_round_trips() {
    let _kafka = require!(Kafka);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    logs(); // capturing from here on
    let cluster = Tunnelled::start(dir.path(), &certificates, false).await;
    let topic = cluster.topic().await;

    let wrong = cluster.url(
        "kafkas",
        &format!("&cacert={}", display(&certificates.wrong_ca)),
    );
    assert_timed_out_after(
        &refusal(&wrong, &topic).await,
        "ssl",
        cluster.port,
        "error:0A000086:SSL routines::certificate verify failed",
    );
    // The publisher's warning said it as it happened.
    let warned = format!(
        "the Kafka cluster cannot be used error=Global error: SSL (Local: SSL error) \
         reason=\"ssl://127.0.0.1:{}/bootstrap: ",
        cluster.port
    );
    let logs = logs();
    assert!(
        logs.lines().any(|line| line.contains(&warned)
            && line.contains("error:0A000086:SSL routines::certificate verify failed")),
        "{logs}"
    );
    // The system's roots do not know the test's CA either.
    assert_timed_out_after(
        &refusal(&cluster.url("kafkas", ""), &topic).await,
        "ssl",
        cluster.port,
        "error:0A000086:SSL routines::certificate verify failed",
    );

    // A CA on `kafka://` makes TLS required as `kafkas://` does.
    let right = cluster.url("kafka", &format!("&cacert={}", display(&certificates.ca)));
    round_trip(&cluster, &right, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_in_the_url_satisfies_a_tunnel_that_asks_for_one() {
    let _kafka = require!(Kafka);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let cluster = Tunnelled::start(dir.path(), &certificates, true).await;
    let topic = cluster.topic().await;
    let ca = format!("&cacert={}", display(&certificates.ca));

    let without = refusal(&cluster.url("kafkas", &ca), &topic).await;
    assert_timed_out_after(
        &without,
        "ssl",
        cluster.port,
        "error:0A00045C:SSL routines::tlsv13 alert certificate required",
    );

    let with = cluster.url(
        "kafkas",
        &format!(
            "{ca}&cert={}&key={}",
            display(&certificates.client_cert),
            display(&certificates.client_key)
        ),
    );
    round_trip(&cluster, &with, &topic).await;
}

/// tansu 0.6, as `scripts/tansu` builds it, offers no SASL mechanism (`--authentication`
/// answers every client `NoSharedMechanism`); were they built in, it would take any `PLAIN`
/// password and find no SCRAM credentials in its memory storage. So no password is checked here:
/// what is shown is that the password file is read when the producer is made (a missing one
/// fails the batch, named), that the publisher starts the SASL handshake over TLS with the URL's
/// mechanism (which tansu, without `--authentication`, refuses: the refusal is named), and that
/// neither the errors nor the URL show the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_reads_the_password_file_and_never_shows_it() {
    let _kafka = require!(Kafka);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    logs(); // capturing from here on
    let cluster = Tunnelled::start(dir.path(), &certificates, false).await;
    let topic = cluster.topic().await;
    let ca = format!("&cacert={}", display(&certificates.ca));

    let missing = dir.path().join("missing-password");
    let unreadable = cluster.url(
        "kafkas",
        &format!(
            "{ca}&sasl.mechanism=PLAIN&sasl.username=relay&password-file={}",
            display(&missing)
        ),
    );
    assert_eq!(
        refusal(&unreadable, &topic).await,
        format!(
            "the broker is unavailable: cannot read the SASL password file {}: No such file or \
             directory (os error 2)",
            missing.display()
        )
    );

    let password = dir.path().join("relay-password");
    std::fs::write(&password, "relay-secret-in-a-file\n").unwrap();
    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        let url = cluster.url(
            "kafkas",
            &format!(
                "{ca}&sasl.mechanism={mechanism}&sasl.username=relay&password-file={}",
                display(&password)
            ),
        );
        assert!(!url.to_string().contains("relay-password"), "{url}");
        assert!(!format!("{url:?}").contains("relay-password"), "{url:?}");
        let refused = refusal(&url, &topic).await;
        assert!(!refused.contains("relay-secret"), "{refused}");
        // The handshake asked for the mechanism of the URL, over TLS.
        assert_timed_out_after(
            &refused,
            "sasl_ssl",
            cluster.port,
            &format!(
                "SASL {mechanism} mechanism handshake failed: Broker: Unsupported SASL mechanism"
            ),
        );
    }
    let logs = logs();
    assert!(
        logs.contains("SASL SCRAM-SHA-256 mechanism handshake failed"),
        "{logs}"
    );
    assert!(!logs.contains("relay-secret"), "{logs}");
}
