//! `idem relay`: starts, serves its admin endpoints, stops cleanly on SIGTERM; bad input is one
//! line. [`RelayProcess`] in-process: migrates, publishes and stops on shutdown (on PostgreSQL,
//! MySQL and SQLite), waits for a database or a broker that is down at start and fails at once
//! on a database that refuses it. (The relay's behaviour is tested in idem-messaging, against each broker; as a
//! process under faults in idem-faults.)

use std::{process::Stdio, str::FromStr, time::Duration};

use async_nats::jetstream::consumer::{AckPolicy, pull};
use futures_util::StreamExt;
use idem_gateway::relay::RelayProcess;
use idem_messaging::{
    Error, Incoming, MysqlOutbox, Outbox, OutboxDatabase, OutboxMessage, OutboxOptions, PgOutbox,
    SqliteOutbox,
};
use idem_test_support::{MysqlDatabase, NatsStream, PgSchema, Server, TcpProxy, require};
use sqlx::Pool;
use tokio_util::sync::CancellationToken;

#[cfg(feature = "sqs")]
use crate::tls_servers::TlsFront;
use crate::{
    servers::free_port,
    support::{idem, idem_command},
    tls_servers::{Certificates, TlsNats},
};

/// How long a test waits for something that should happen in milliseconds.
const EVENTUALLY: Duration = Duration::from_secs(60);

#[test]
fn a_bad_broker_url_is_one_line_and_exit_2() {
    let output = idem(&[
        "relay",
        "--store",
        "postgres://postgres@127.0.0.1:5432/test",
        "--broker",
        "ftp://example",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr.trim_end(),
        "error: invalid value 'ftp://example' for '--broker <URL>': a broker URL starts with \
         amqp://, amqps://, nats://, tls://, kafka://, kafkas:// or sqs://; got \"ftp://example\""
    );
}

#[cfg(not(feature = "sqs"))]
#[test]
fn sqs_without_its_feature_is_one_line_naming_the_feature_and_exit_2() {
    let output = idem(&[
        "relay",
        "--store",
        "postgres://postgres@127.0.0.1:9/none",
        "--broker",
        "sqs://eu-west-1",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr.trim_end(),
        "error: invalid value 'sqs://eu-west-1' for '--broker <URL>': sqs:// needs idem's `sqs` \
         feature, which this build lacks: cargo install --path crates/idem-gateway --features sqs"
    );
}

#[cfg(feature = "sqs")]
#[test]
fn a_bad_sqs_url_is_one_line_and_exit_2() {
    let output = idem(&[
        "relay",
        "--store",
        "postgres://postgres@127.0.0.1:9/none",
        "--broker",
        "sqs://eu-west-1?endpoint=localhost:9324",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr.trim_end(),
        "error: invalid value 'sqs://eu-west-1?endpoint=localhost:9324' for '--broker <URL>': the \
         broker URL's `endpoint`: an http:// or https:// URL"
    );
}

#[cfg(not(feature = "kafka"))]
#[test]
fn kafka_without_its_feature_is_one_line_naming_the_feature_and_exit_2() {
    let output = idem(&[
        "relay",
        "--store",
        "postgres://postgres@127.0.0.1:9/none",
        "--broker",
        "kafka://127.0.0.1:9092",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr.trim_end(),
        "error: invalid value 'kafka://127.0.0.1:9092' for '--broker <URL>': kafka:// needs \
         idem's `kafka` feature, which this build lacks: cargo install --path \
         crates/idem-gateway --features kafka"
    );
}

#[test]
fn a_tls_setting_on_a_plain_broker_url_is_one_line_and_exit_2() {
    for (broker, message) in [
        (
            "amqp://127.0.0.1:5672/%2f?cacert=/etc/idem/ca.pem",
            "the broker URL's `cacert`: a TLS setting: use amqps://",
        ),
        (
            "tls://127.0.0.1:4222?cacrt=/etc/idem/ca.pem",
            "unknown parameter `cacrt` in the broker URL (takes cacert, cert and key)",
        ),
        (
            "nats://127.0.0.1:4222?cacert=/ca.pem&cert=/client.pem",
            "the broker URL's `cert`: cert and key go together: give both or neither",
        ),
    ] {
        let output = idem(&[
            "relay",
            "--store",
            "postgres://postgres@127.0.0.1:9/none",
            "--broker",
            broker,
        ]);
        assert_eq!(output.code, Some(2), "{}", output.stderr);
        assert_eq!(
            output.stderr.trim_end(),
            format!("error: invalid value '{broker}' for '--broker <URL>': {message}")
        );
    }
}

#[test]
fn a_non_loopback_admin_listener_without_a_token_is_refused_with_exit_2() {
    // Refused before the relay connects to anything: neither server needs to exist.
    let output = idem(&[
        "relay",
        "--store",
        "postgres://postgres@127.0.0.1:9/none",
        "--broker",
        "nats://127.0.0.1:9",
        "--admin-listen",
        "0.0.0.0:9091",
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(
        output.stderr.trim_end(),
        "error: --admin-listen 0.0.0.0:9091 is not a loopback address: set --admin-token-file \
         (or IDEM_ADMIN_TOKEN_FILE) so that its endpoints need a token"
    );
    let empty = tempfile::NamedTempFile::new().unwrap();
    let output = idem(&[
        "relay",
        "--store",
        "postgres://postgres@127.0.0.1:9/none",
        "--broker",
        "nats://127.0.0.1:9",
        "--admin-token-file",
        empty.path().to_str().unwrap(),
    ]);
    assert_eq!(output.code, Some(2), "{}", output.stderr);
    assert_eq!(
        output.stderr.trim_end(),
        format!(
            "error: the admin token file {} holds no usable token: it is empty",
            empty.path().display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_serves_health_and_stops_on_sigterm_with_exit_0() {
    let (Some(postgres), Some(nats)) = (Server::Postgres.url(), Server::Nats.url()) else {
        return;
    };
    let schema = PgSchema::create(&postgres).await;
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin_addr = admin.local_addr().unwrap();
    drop(admin);
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "relay-admin-token\n").unwrap();

    let mut relay = idem_command()
        .args([
            "relay",
            "--store",
            &postgres,
            "--broker",
            &nats,
            "--migrate",
        ])
        .args([
            "--outbox-schema",
            schema.name(),
            "--admin-listen",
            &admin_addr.to_string(),
            "--admin-token-file",
            token.path().to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut health = None;
    for _ in 0..100 {
        if let Ok(body) = http_get(&format!("http://{admin_addr}/healthz")).await {
            health = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health.as_deref(), Some("ok\n"));
    // /metrics needs the token; /healthz did not.
    let metrics = |token: Option<&'static str>| http_response(admin_addr, "/metrics", token);
    let refused = metrics(None).await.unwrap();
    assert!(refused.starts_with("HTTP/1.1 401 "), "{refused}");
    assert!(
        refused.contains("\r\nwww-authenticate: Bearer\r\n"),
        "{refused}"
    );
    assert!(
        refused.contains("urn:idem:problem:unauthorized"),
        "{refused}"
    );
    let wrong = metrics(Some("relay-tokem")).await.unwrap();
    assert!(wrong.starts_with("HTTP/1.1 401 "), "{wrong}");
    let allowed = metrics(Some("relay-admin-token")).await.unwrap();
    assert!(allowed.starts_with("HTTP/1.1 200 "), "{allowed}");

    let status = std::process::Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    for _ in 0..200 {
        if let Some(status) = relay.try_wait().unwrap() {
            exit = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = relay.kill();
    drop(schema);
    assert_eq!(exit.and_then(|s| s.code()), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_to_nats_over_tls_with_a_wrong_ca_warns_with_the_certificate_problem() {
    let (Some(postgres), Some(_nats)) = (Server::Postgres.url(), Server::Nats.url()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    let nats = TlsNats::start(dir.path(), &certificates);
    let schema = PgSchema::create(&postgres).await;
    let psql = |sql: &str| {
        let output = std::process::Command::new("psql")
            .args([postgres.as_str(), "-qtAc", sql])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let log = dir.path().join("relay.log");
    let broker = nats.url(&format!("cacert={}", certificates.wrong_ca.display()));
    let mut relay = idem_command()
        .args([
            "relay",
            "--store",
            &postgres,
            "--broker",
            &broker,
            "--migrate",
        ])
        .args(["--outbox-schema", schema.name(), "--log-format", "text"])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // The relay migrates the outbox; a message in it makes the relay connect.
    let schema_name = schema.name();
    let insert = format!(
        "insert into {schema_name}.idem_outbox (id, seq, destination, header_names, header_values, \
         payload, state, available_at, enqueued_at) values (gen_random_uuid(), \
         nextval('{schema_name}.idem_outbox_seq'), 'orders.paid', '{{}}', '{{}}', 'x', 'pending', \
         now(), now())"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while psql(&insert).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the outbox was not created"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut warning = None;
    while warning.is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        warning = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .find(|line| line.contains("cannot connect to NATS"))
            .map(str::to_owned);
    }
    let _ = relay.kill();
    let _ = relay.wait();
    // Unavailable, not rejected: the message waits without a counted attempt.
    let attempts = psql(&format!("select attempts from {schema_name}.idem_outbox"));
    drop(schema);
    let warning = warning.unwrap_or_else(|| {
        panic!(
            "no warning about the connection in:\n{}",
            std::fs::read_to_string(&log).unwrap()
        )
    });
    assert!(
        warning.contains("invalid peer certificate: UnknownIssuer"),
        "{warning}"
    );
    assert_eq!(attempts.as_deref(), Some("0"));
}

#[tokio::test]
async fn a_relay_process_migrates_publishes_and_stops_on_shutdown() {
    let postgres = require!(Postgres);
    let nats = require!(Nats);
    let schema = PgSchema::create(&postgres).await;
    let pool = sqlx::PgPool::connect(&postgres).await.unwrap();
    let options = || OutboxOptions::new().schema(schema.name().parse().unwrap());
    let process = RelayProcess::new(postgres.clone(), nats.parse().unwrap())
        .outbox(options())
        .relay(|relay| relay.poll_interval(Duration::from_millis(50)));
    migrates_publishes_and_stops(&nats, process, PgOutbox::new(options()), || {
        std::future::ready(Some(pool.clone()))
    })
    .await;
}

/// `--store mysql://…/DATABASE`: the outbox `idem_outbox` in the URL's database.
#[tokio::test]
async fn a_relay_process_on_mysql_migrates_publishes_and_stops_on_shutdown() {
    let mysql = require!(Mysql);
    let nats = require!(Nats);
    let database = MysqlDatabase::create(&mysql).await;
    let pool = sqlx::MySqlPool::connect_with(database.connect_options())
        .await
        .unwrap();
    let process = RelayProcess::new(database.url(), nats.parse().unwrap())
        .mysql_relay(|relay| relay.poll_interval(Duration::from_millis(50)));
    migrates_publishes_and_stops(
        &nats,
        process,
        MysqlOutbox::new(OutboxOptions::new()),
        || std::future::ready(Some(pool.clone())),
    )
    .await;
}

#[tokio::test]
async fn a_relay_process_on_a_mysql_url_without_its_database_fails_at_once() {
    let mysql = require!(Mysql);
    let options = sqlx::mysql::MySqlConnectOptions::from_str(&mysql).unwrap();
    let without = format!(
        "mysql://{}@{}:{}",
        options.get_username(),
        options.get_host(),
        options.get_port()
    );
    let process = RelayProcess::new(without, "nats://127.0.0.1:9".parse().unwrap());
    let outcome = process.run(std::future::pending()).await;
    match outcome {
        Err(Error::Database(sqlx::Error::Configuration(reason))) => assert_eq!(
            reason.to_string(),
            "a MySQL store URL names its database: mysql://user@host/DATABASE"
        ),
        other => panic!("{other:?}"),
    }
}

/// Runs `process` (publishing to the NATS server at `nats`) with the migration on, until it has
/// published three messages enqueued once it had created the outbox, on a pool `connect` gives
/// once the database can be reached; then stops it and reads the three from its NATS stream,
/// under their outbox ids.
async fn migrates_publishes_and_stops<DB, F>(
    nats: &str,
    process: RelayProcess,
    outbox: Outbox<DB>,
    connect: impl Fn() -> F,
) where
    DB: OutboxDatabase,
    F: std::future::Future<Output = Option<Pool<DB>>>,
{
    let stream = NatsStream::create(nats, Duration::from_secs(120)).await;
    let shutdown = CancellationToken::new();
    let process = process.migrate(true);
    let task = tokio::spawn(process.run(shutdown.clone().cancelled_owned()));

    // The process created the outbox: wait for it, then enqueue.
    let (pool, ids) = tokio::time::timeout(EVENTUALLY, async {
        loop {
            if let Some(pool) = connect().await {
                let mut tx = pool.begin().await.unwrap();
                let mut ids = Vec::new();
                for n in 0..3 {
                    let message = OutboxMessage::new(stream.subject().to_owned(), n.to_string());
                    match outbox.enqueue(&mut *tx, message).await {
                        Ok(id) => ids.push(id),
                        Err(_) => break,
                    }
                }
                if ids.len() == 3 {
                    tx.commit().await.unwrap();
                    return (pool, ids);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    published(&stream, 3).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();

    assert_eq!(stream.stored().await, 3);
    assert_eq!(outbox.pending(&pool).await.unwrap(), 0);
    let consumer = stream
        .jetstream()
        .get_stream(stream.name())
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some("ledger".into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            ..pull::Config::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    for id in ids {
        let message = tokio::time::timeout(EVENTUALLY, messages.next())
            .await
            .expect("a message within a minute")
            .expect("the stream goes on")
            .expect("a message, not an error");
        assert_eq!(message.message_id(), Some(id.as_str()));
    }
}

/// `idem relay --broker sqs://…` as a process: its credentials from the AWS environment
/// variables, its requests to the test's SQS-compatible server; each message lands in the queue
/// its destination names, with its outbox id as the `message-id` attribute.
#[cfg(feature = "sqs")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_process_publishes_to_sqs_with_credentials_from_the_environment() {
    let postgres = require!(Postgres);
    let sqs = require!(Sqs);
    let queue = SqsQueue::create(&sqs).await;
    let relayed = queue
        .relay_three(&postgres, &format!("sqs://us-east-1?endpoint={sqs}"))
        .await;
    assert_eq!(relayed.received, relayed.expected);
    assert_eq!(relayed.pending, 0);
}

/// `idem relay` to SQS over HTTPS (moto behind a TLS endpoint of the test's own): the endpoint's
/// private CA in the broker URL is trusted; another CA is refused, with the certificate's
/// problem in the relay's log, and the messages wait.
#[cfg(feature = "sqs")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_process_publishes_to_sqs_over_https_trusting_the_ca_of_its_url() {
    let postgres = require!(Postgres);
    let sqs = require!(Sqs);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    let front = TlsFront::start(&certificates, sqs.trim_start_matches("http://")).await;
    let broker = |ca: &std::path::Path| {
        format!(
            "sqs://us-east-1?endpoint={}&cacert={}",
            front.url(),
            ca.display()
        )
    };

    let queue = SqsQueue::create(&sqs).await;
    let refused = queue
        .relay_for(
            &postgres,
            &broker(&certificates.wrong_ca),
            Duration::from_secs(3),
        )
        .await;
    assert_eq!(refused.received, Vec::<(String, String)>::new());
    assert_eq!(refused.pending, 3);
    assert!(
        refused.log.contains("UnknownIssuer"),
        "no certificate problem in the relay's log:\n{}",
        refused.log
    );

    let queue = SqsQueue::create(&sqs).await;
    let relayed = queue
        .relay_three(&postgres, &broker(&certificates.ca))
        .await;
    assert_eq!(relayed.received, relayed.expected);
    assert_eq!(relayed.pending, 0);
}

/// What a relay to an SQS queue did: the messages the queue received (id, payload), those
/// enqueued, the outbox's pending count after, and the relay's log.
#[cfg(feature = "sqs")]
struct Relayed {
    received: Vec<(String, String)>,
    expected: Vec<(String, String)>,
    pending: u64,
    log: String,
}

/// A queue of the test's own on the SQS server, created and deleted over plain HTTP.
#[cfg(feature = "sqs")]
struct SqsQueue {
    client: idem_messaging::sqs::aws_sdk_sqs::Client,
    name: String,
    url: String,
}

#[cfg(feature = "sqs")]
impl SqsQueue {
    async fn create(sqs: &str) -> Self {
        use idem_messaging::sqs::{
            aws_sdk_sqs::{
                Client, Config,
                config::{BehaviorVersion, Credentials, Region},
            },
            http_client,
        };

        let client = Client::from_conf(
            Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new("us-east-1"))
                .endpoint_url(sqs)
                .credentials_provider(Credentials::new("test", "test", None, None, "idem-tests"))
                .http_client(http_client())
                .build(),
        );
        let name = idem_test_support::unique_name("idem-test-");
        let created = client
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .unwrap();
        let url = created.queue_url().unwrap().to_owned();
        Self { client, name, url }
    }

    /// Enqueues three messages to this queue in a fresh outbox and runs `idem relay --broker
    /// broker` until the queue has them (or a minute has passed).
    async fn relay_three(&self, postgres: &str, broker: &str) -> Relayed {
        self.relay(postgres, broker, EVENTUALLY, true).await
    }

    /// The same, for `length` whatever arrives.
    async fn relay_for(&self, postgres: &str, broker: &str, length: Duration) -> Relayed {
        self.relay(postgres, broker, length, false).await
    }

    async fn relay(
        &self,
        postgres: &str,
        broker: &str,
        length: Duration,
        until_all: bool,
    ) -> Relayed {
        use idem_messaging::sqs::SqsConsumer;

        let schema = PgSchema::create(postgres).await;
        let pool = sqlx::PgPool::connect(postgres).await.unwrap();
        let outbox = PgOutbox::new(OutboxOptions::new().schema(schema.name().parse().unwrap()));
        outbox.migrate(&pool).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let mut expected = Vec::new();
        for n in 0..3 {
            let message = OutboxMessage::new(self.name.clone(), n.to_string());
            let id = outbox.enqueue(&mut tx, message).await.unwrap();
            expected.push((id.as_str().to_owned(), n.to_string()));
        }
        tx.commit().await.unwrap();

        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("relay.log");
        let mut relay = idem_command()
            .args(["relay", "--store", postgres, "--broker", broker])
            .args(["--outbox-schema", schema.name(), "--poll-interval", "100ms"])
            .args(["--log-format", "text"])
            .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            // Nothing from the machine's own AWS configuration.
            .env("AWS_CONFIG_FILE", "/nonexistent/idem-test/config")
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/idem-test/credentials",
            )
            .env_remove("AWS_PROFILE")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();

        let consumer = SqsConsumer::new(self.client.clone(), self.url.clone())
            .wait_time(Duration::from_secs(1));
        let mut received = Vec::new();
        let deadline = std::time::Instant::now() + length;
        while std::time::Instant::now() < deadline && !(until_all && received.len() == 3) {
            for message in consumer.receive().await.unwrap() {
                received.push((
                    message.message_id().unwrap().to_owned(),
                    String::from_utf8(message.payload().to_vec()).unwrap(),
                ));
                message.ack().await.unwrap();
            }
        }
        // Confirmed, then marked sent.
        while until_all
            && outbox.pending(&pool).await.unwrap() > 0
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = relay.kill();
        let _ = relay.wait();
        received.sort_by(|a, b| a.1.cmp(&b.1));
        Relayed {
            received,
            expected,
            pending: outbox.pending(&pool).await.unwrap(),
            log: std::fs::read_to_string(&log).unwrap(),
        }
    }
}

#[cfg(feature = "sqs")]
impl Drop for SqsQueue {
    fn drop(&mut self) {
        let (client, url) = (self.client.clone(), self.url.clone());
        // Deleted in the background: a test's runtime may be shutting down.
        tokio::spawn(async move {
            let _ = client.delete_queue().queue_url(url).send().await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_process_waits_for_a_database_that_is_down_at_start() {
    let postgres = require!(Postgres);
    let nats = require!(Nats);
    let schema = PgSchema::create(&postgres).await;
    let stream = NatsStream::create(&nats, Duration::from_secs(120)).await;
    let options = || OutboxOptions::new().schema(schema.name().parse().unwrap());
    // The relay is given an address where nothing listens yet: its connections are refused.
    let direct = sqlx::postgres::PgConnectOptions::from_str(&postgres).unwrap();
    let port = free_port();
    let through = format!(
        "postgres://{}@127.0.0.1:{port}/{}",
        direct.get_username(),
        direct.get_database().unwrap_or("postgres")
    );
    let shutdown = CancellationToken::new();
    let process = RelayProcess::new(through, nats.parse().unwrap())
        .outbox(options())
        .migrate(true)
        .relay(|relay| relay.poll_interval(Duration::from_millis(50)));
    let task = tokio::spawn(process.run(shutdown.clone().cancelled_owned()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    if task.is_finished() {
        panic!("the relay gave up on its database: {:?}", task.await);
    }
    // Then the database appears there.
    let _proxy = TcpProxy::start_on(
        port,
        &format!("{}:{}", direct.get_host(), direct.get_port()),
    )
    .await;

    // Once through, it migrates the outbox and publishes what is enqueued.
    let pool = sqlx::PgPool::connect(&postgres).await.unwrap();
    let outbox = PgOutbox::new(options());
    enqueue_once_migrated(&pool, &outbox, stream.subject(), "after the outage").await;
    published(&stream, 1).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// A broker that is down when the relay starts: the relay keeps running, the messages wait in the
/// outbox, and they are published once the broker can be reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_process_waits_for_a_broker_that_is_down_at_start() {
    let postgres = require!(Postgres);
    let nats = require!(Nats);
    let schema = PgSchema::create(&postgres).await;
    let pool = sqlx::PgPool::connect(&postgres).await.unwrap();
    let stream = NatsStream::create(&nats, Duration::from_secs(120)).await;
    let options = || OutboxOptions::new().schema(schema.name().parse().unwrap());
    // The relay is given an address where nothing listens yet: its connections are refused.
    let port = free_port();
    let shutdown = CancellationToken::new();
    let process = RelayProcess::new(
        postgres.clone(),
        format!("nats://127.0.0.1:{port}").parse().unwrap(),
    )
    .outbox(options())
    .migrate(true)
    .relay(|relay| relay.poll_interval(Duration::from_millis(50)));
    let task = tokio::spawn(process.run(shutdown.clone().cancelled_owned()));

    let outbox = PgOutbox::new(options());
    enqueue_once_migrated(&pool, &outbox, stream.subject(), "during the outage").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    if task.is_finished() {
        panic!("the relay gave up on its broker: {:?}", task.await);
    }
    assert_eq!(outbox.pending(&pool).await.unwrap(), 1);
    assert_eq!(stream.stored().await, 0);

    // Then the broker appears there.
    let nats_address = nats.trim_start_matches("nats://");
    let _proxy = TcpProxy::start_on(port, nats_address).await;
    published(&stream, 1).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(stream.stored().await, 1);
    assert_eq!(outbox.pending(&pool).await.unwrap(), 0);
}

/// Enqueues one message to `subject` once the relay has created the outbox.
async fn enqueue_once_migrated(pool: &sqlx::PgPool, outbox: &PgOutbox, subject: &str, body: &str) {
    tokio::time::timeout(EVENTUALLY, async {
        loop {
            let mut tx = pool.begin().await.unwrap();
            let message = OutboxMessage::new(subject.to_owned(), body.to_owned());
            if outbox.enqueue(&mut tx, message).await.is_ok() {
                tx.commit().await.unwrap();
                return;
            }
            drop(tx);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
}

/// Waits until `stream` holds `count` messages.
async fn published(stream: &NatsStream, count: u64) {
    tokio::time::timeout(EVENTUALLY, async {
        while stream.stored().await < count {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_relay_process_on_a_database_that_refuses_it_fails_at_once() {
    let postgres = require!(Postgres);
    let nats = require!(Nats);
    let direct = sqlx::postgres::PgConnectOptions::from_str(&postgres).unwrap();
    let refused = format!(
        "postgres://no_such_role_for_idem@{}:{}/{}",
        direct.get_host(),
        direct.get_port(),
        direct.get_database().unwrap_or("postgres")
    );
    let process = RelayProcess::new(refused, nats.parse().unwrap());
    let outcome = tokio::time::timeout(EVENTUALLY, process.run(std::future::pending()))
        .await
        .expect("a refusal is not retried");
    assert!(matches!(outcome, Err(Error::Database(_))), "{outcome:?}");
}

#[tokio::test]
async fn a_relay_process_on_sqlite_migrates_publishes_and_stops_on_shutdown() {
    let nats = require!(Nats);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("service.db");
    let process = RelayProcess::new(
        format!("sqlite://{}", path.display()),
        nats.parse().unwrap(),
    )
    .sqlite_relay(|relay| relay.poll_interval(Duration::from_millis(50)));
    // The process creates the file.
    let connect = || async {
        sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .ok()
    };
    migrates_publishes_and_stops(
        &nats,
        process,
        SqliteOutbox::new(OutboxOptions::new()),
        connect,
    )
    .await;
}

#[tokio::test]
async fn a_relay_process_on_a_missing_sqlite_file_fails_fast_without_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.db");
    // Neither the broker nor the file is reached for: the process stops at the database.
    let process = RelayProcess::new(
        format!("sqlite://{}", path.display()),
        "nats://127.0.0.1:9".parse().unwrap(),
    );
    let outcome = process.run(std::future::pending()).await;
    assert!(matches!(outcome, Err(Error::Database(_))), "{outcome:?}");
    assert!(!path.exists());
}

#[test]
fn a_relay_on_a_missing_sqlite_file_is_one_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("absent.db").display());
    let output = idem(&[
        "relay",
        "--store",
        &store,
        "--broker",
        "nats://127.0.0.1:9",
        "--admin-listen",
        &format!("127.0.0.1:{}", free_port()),
        "--log-level",
        "off",
    ]);
    assert_eq!(output.code, Some(1), "{}", output.stderr);
    assert_eq!(output.stdout, "");
    assert_eq!(output.stderr.lines().count(), 1, "{}", output.stderr);
    assert_eq!(
        output.stderr.trim_end(),
        "error: the database failed: error returned from database: (code: 14) unable to open \
         database file"
    );
}

/// A GET of `path` with an optional bearer token, over a plain TCP connection: the whole
/// response, status line and headers included.
async fn http_response(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let authorization = token
        .map(|token| format!("authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(
            format!(
                "GET {path} HTTP/1.1\r\nhost: {addr}\r\n{authorization}connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// A GET over a plain TCP connection, so this test needs no HTTP client setup.
async fn http_get(url: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    stream
        .write_all(
            format!("GET /{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (_, body) = response.split_once("\r\n\r\n").unwrap_or_default();
    Ok(body.to_owned())
}
