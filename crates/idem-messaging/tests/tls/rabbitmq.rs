//! RabbitMQ over TLS: a RabbitMQ node of the test's own (the shared one serves the other tests),
//! with a TLS listener besides a plain one for the test's own checks.

use std::{path::Path, process::Stdio, time::Duration};

use lapin::{
    Connection, ConnectionProperties,
    options::{BasicGetOptions, QueueDeclareOptions},
    types::FieldTable,
};
use tempfile::TempDir;
use tokio::process::Command;

use idem_test_support::{free_port, require};

use crate::{
    assert_refused_without_a_client_certificate, certificates::Certificates, common::TestSchema,
    refusal, relay_one,
};

const QUEUE: &str = "idem_tls";

/// A RabbitMQ node started with `rabbitmq-server -detached`; stopped when dropped.
struct TlsRabbit {
    name: String,
    port: u16,
    tls_port: u16,
    dir: TempDir,
}

impl TlsRabbit {
    /// Starts it; `verify_clients` makes it ask every client for a certificate signed by the
    /// test's CA. Returns once it listens, with the queue [`QUEUE`] declared.
    async fn start(certificates: &Certificates, verify_clients: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (port, tls_port) = (free_port(), free_port());
        let node = Self {
            name: format!("idem-tls-{port}@localhost"),
            port,
            tls_port,
            dir,
        };
        let path = node.dir.path();
        std::fs::write(path.join("enabled_plugins"), "[].\n").unwrap();
        // The node runs as the rabbitmq user: its files are copies it may read.
        let copy = |from: &Path, name: &str| {
            let to = path.join(name);
            std::fs::copy(from, &to).unwrap();
            to.display().to_string()
        };
        let verify = if verify_clients {
            "ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n"
        } else {
            "ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n"
        };
        // The system's rabbitmq.conf names the shared node's listener: ours replaces it.
        std::fs::write(
            path.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.local = 127.0.0.1:{port}\n\
                 listeners.ssl.default = 127.0.0.1:{tls_port}\n\
                 ssl_options.cacertfile = {}\n\
                 ssl_options.certfile = {}\n\
                 ssl_options.keyfile = {}\n\
                 {verify}",
                copy(&certificates.ca, "ca.pem"),
                copy(&certificates.cert, "server.pem"),
                copy(&certificates.key, "server.key"),
            ),
        )
        .unwrap();
        run(Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(path))
        .await;
        run(Command::new("chmod").arg("755").arg(path)).await;
        run(node.command("rabbitmq-server").arg("-detached")).await;
        wait_port(port).await;
        wait_port(tls_port).await;

        let connection = Connection::connect(&node.plain_url(), ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        channel
            .queue_declare(
                QUEUE.into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        connection.close(200, "declared".into()).await.unwrap();
        node
    }

    /// The plain listener, for the test's own checks.
    fn plain_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// `amqps://guest:guest@127.0.0.1:TLS_PORT/%2f?PARAMETERS`.
    fn url(&self, parameters: &str) -> String {
        format!(
            "amqps://guest:guest@127.0.0.1:{}/%2f?{parameters}",
            self.tls_port
        )
    }

    /// The id and payload of the next message in [`QUEUE`].
    async fn next(&self) -> (String, String) {
        let connection = Connection::connect(&self.plain_url(), ConnectionProperties::default())
            .await
            .unwrap();
        let channel = connection.create_channel().await.unwrap();
        let message = channel
            .basic_get(QUEUE.into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("a message in the queue");
        let id = message
            .properties
            .message_id()
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let payload = String::from_utf8(message.data.clone()).unwrap();
        connection.close(200, "read".into()).await.unwrap();
        (id, payload)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.dir.path();
        let mut command = Command::new(program);
        command
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", free_port().to_string())
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
}

impl Drop for TlsRabbit {
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

/// Waits until something accepts connections on `port`, for at most 60 s.
async fn wait_port(port: u16) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("port {port} did not open"));
}

#[tokio::test]
async fn amqps_refuses_a_wrong_ca_and_relays_with_the_right_one() {
    let postgres = require!(Postgres);
    let _amqp = require!(Amqp);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let node = TlsRabbit::start(&certificates, false).await;

    let wrong = node.url(&format!("cacert={}", certificates.wrong_ca.display()));
    assert_eq!(
        refusal(&wrong).await,
        "the broker is unavailable: IO error: invalid peer certificate: UnknownIssuer"
    );
    let plain = format!(
        "amqp://guest:guest@127.0.0.1:{}/%2f?cacert={}",
        node.tls_port,
        certificates.ca.display()
    );
    assert_eq!(
        plain
            .parse::<idem_messaging::BrokerUrl>()
            .unwrap_err()
            .to_string(),
        "the broker URL's `cacert`: a TLS setting: use amqps://"
    );

    let schema = TestSchema::new(&postgres).await;
    let right = node.url(&format!("cacert={}", certificates.ca.display()));
    let id = relay_one(&schema, &right, QUEUE).await;
    assert_eq!(node.next().await, (id, "over TLS".to_owned()));
}

#[tokio::test]
async fn a_client_certificate_in_the_url_satisfies_a_node_that_asks_for_one() {
    let postgres = require!(Postgres);
    let _amqp = require!(Amqp);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let node = TlsRabbit::start(&certificates, true).await;
    let ca = format!("cacert={}", certificates.ca.display());

    assert_refused_without_a_client_certificate(
        &refusal(&node.url(&ca)).await,
        "CertificateRequired",
    );

    let schema = TestSchema::new(&postgres).await;
    let with = node.url(&format!(
        "{ca}&cert={}&key={}",
        certificates.client_cert.display(),
        certificates.client_key.display()
    ));
    let id = relay_one(&schema, &with, QUEUE).await;
    assert_eq!(node.next().await, (id, "over TLS".to_owned()));
}
