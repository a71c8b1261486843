//! NATS over TLS: a `nats-server -js --tls` of the test's own.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use async_nats::{
    ConnectOptions,
    header::NATS_MESSAGE_ID,
    jetstream::{self, stream},
};

use idem_test_support::{free_port, require};

use crate::{
    assert_refused_without_a_client_certificate, certificates::Certificates, common::TestSchema,
    refusal, relay_one,
};

/// The subjects the test stream captures.
const SUBJECTS: &str = "idem_tls.>";

/// A `nats-server` with JetStream that speaks TLS only, with the test's certificate; killed when
/// dropped.
struct TlsNats {
    server: Child,
    port: u16,
}

impl Drop for TlsNats {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

impl TlsNats {
    /// Starts it with its store in `dir`; `verify_clients` makes it ask every client for a
    /// certificate signed by the test's CA. Returns once a stream capturing [`SUBJECTS`] exists.
    async fn start(dir: &Path, certificates: &Certificates, verify_clients: bool) -> Self {
        let port = free_port();
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--", "nats-server", "-js"])
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.join("jetstream"))
            .arg("--tls")
            .arg("--tlscert")
            .arg(&certificates.cert)
            .arg("--tlskey")
            .arg(&certificates.key);
        if verify_clients {
            command
                .arg("--tlsverify")
                .arg("--tlscacert")
                .arg(&certificates.ca);
        }
        let server = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server (setpriv from util-linux, and nats-server)");
        let server = Self { server, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match server.create_stream(certificates).await {
                Ok(()) => return server,
                Err(error) if Instant::now() > deadline => panic!("nats-server: {error}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The test's own client, with the right CA and the client certificate.
    async fn jetstream(
        &self,
        certificates: &Certificates,
    ) -> Result<jetstream::Context, async_nats::ConnectError> {
        let client = ConnectOptions::new()
            .require_tls(true)
            .add_root_certificates(certificates.ca.clone())
            .add_client_certificate(
                certificates.client_cert.clone(),
                certificates.client_key.clone(),
            )
            .connect(self.url(""))
            .await?;
        Ok(jetstream::new(client))
    }

    async fn create_stream(&self, certificates: &Certificates) -> anyhow::Result<()> {
        self.jetstream(certificates)
            .await?
            .create_stream(stream::Config {
                name: "IDEM_TLS".into(),
                subjects: vec![SUBJECTS.into()],
                ..stream::Config::default()
            })
            .await?;
        Ok(())
    }

    /// `tls://127.0.0.1:PORT?PARAMETERS`.
    fn url(&self, parameters: &str) -> String {
        format!("tls://127.0.0.1:{}?{parameters}", self.port)
    }

    /// The id and payload of the last message the stream stored on `subject`.
    async fn last(&self, certificates: &Certificates, subject: &str) -> (String, String) {
        let stream = self
            .jetstream(certificates)
            .await
            .unwrap()
            .get_stream("IDEM_TLS")
            .await
            .unwrap();
        let message = stream
            .get_last_raw_message_by_subject(subject)
            .await
            .unwrap();
        let id = message
            .headers
            .get(NATS_MESSAGE_ID)
            .map(|id| id.as_str().to_owned())
            .unwrap_or_default();
        (id, String::from_utf8(message.payload.to_vec()).unwrap())
    }
}

#[tokio::test]
async fn a_wrong_ca_is_refused_and_the_right_one_relays_over_tls() {
    let postgres = require!(Postgres);
    let _nats = require!(Nats);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let server = TlsNats::start(dir.path(), &certificates, false).await;

    let wrong = server.url(&format!("cacert={}", certificates.wrong_ca.display()));
    assert_eq!(
        refusal(&wrong).await,
        "the broker is unavailable: IO error: invalid peer certificate: UnknownIssuer"
    );
    let missing = dir.path().join("missing.pem");
    assert_eq!(
        refusal(&server.url(&format!("cacert={}", missing.display()))).await,
        format!(
            "the broker is unavailable: cannot read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );

    let schema = TestSchema::new(&postgres).await;
    let right = server.url(&format!("cacert={}", certificates.ca.display()));
    let id = relay_one(&schema, &right, "idem_tls.orders").await;
    assert_eq!(
        server.last(&certificates, "idem_tls.orders").await,
        (id, "over TLS".to_owned())
    );
}

#[tokio::test]
async fn a_client_certificate_in_the_url_satisfies_a_server_that_asks_for_one() {
    let postgres = require!(Postgres);
    let _nats = require!(Nats);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let server = TlsNats::start(dir.path(), &certificates, true).await;
    let ca = format!("cacert={}", certificates.ca.display());

    assert_refused_without_a_client_certificate(&refusal(&server.url(&ca)).await, "BadCertificate");

    let schema = TestSchema::new(&postgres).await;
    let with = server.url(&format!(
        "{ca}&cert={}&key={}",
        certificates.client_cert.display(),
        certificates.client_key.display()
    ));
    let id = relay_one(&schema, &with, "idem_tls.payments").await;
    assert_eq!(
        server.last(&certificates, "idem_tls.payments").await,
        (id, "over TLS".to_owned())
    );
}

#[tokio::test]
async fn a_ca_on_a_nats_url_refuses_a_server_without_tls() {
    // The shared server speaks plain text: with a CA given, the publisher never falls back to it.
    let nats = require!(Nats);
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path());
    let url = format!("{nats}?cacert={}", certificates.ca.display());
    assert!(url.starts_with("nats://"), "{url}");
    assert_eq!(
        refusal(&url).await,
        "the broker is unavailable: IO error: received corrupt message of type InvalidContentType"
    );
}
