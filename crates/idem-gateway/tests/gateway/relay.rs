//! `idem relay`: starts, serves its admin endpoints, stops cleanly on SIGTERM; bad input is one
//! line. (The relay's behaviour is tested in idem-messaging, against each broker.)

use std::{process::Stdio, time::Duration};

use crate::{
    servers::{configured, free_port},
    support::{idem, idem_command},
    tls_servers::{Certificates, TlsNats},
};

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
         amqp://, amqps://, nats://, tls:// or kafka://; got \"ftp://example\""
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
    let (Some(postgres), Some(nats)) = (
        configured("IDEM_TEST_POSTGRES_URL"),
        configured("IDEM_TEST_NATS_URL"),
    ) else {
        return;
    };
    let schema = format!("idem_relay_cli_{:x}", std::process::id());
    let admin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin_addr = admin.local_addr().unwrap();
    drop(admin);
    let psql = |sql: &str| {
        let status = std::process::Command::new("psql")
            .args([postgres.as_str(), "-qc", sql])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{sql}");
    };
    psql(&format!("create schema {schema}"));
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "relay-token\n").unwrap();

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
            &schema,
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
    let allowed = metrics(Some("relay-token")).await.unwrap();
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
    psql(&format!("drop schema {schema} cascade"));
    assert_eq!(exit.and_then(|s| s.code()), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_to_nats_over_tls_with_a_wrong_ca_warns_with_the_certificate_problem() {
    let (Some(postgres), Some(_nats)) = (
        configured("IDEM_TEST_POSTGRES_URL"),
        configured("IDEM_TEST_NATS_URL"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    let nats = TlsNats::start(dir.path(), &certificates);
    let schema = format!("idem_relay_tls_{:x}", std::process::id());
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
    assert!(psql(&format!("create schema {schema}")).is_some());
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
        .args(["--outbox-schema", &schema, "--log-format", "text"])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // The relay migrates the outbox; a message in it makes the relay connect.
    let insert = format!(
        "insert into {schema}.idem_outbox (id, seq, destination, header_names, header_values, \
         payload, state, available_at, enqueued_at) values (gen_random_uuid(), \
         nextval('{schema}.idem_outbox_seq'), 'orders.paid', '{{}}', '{{}}', 'x', 'pending', \
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
    let attempts = psql(&format!("select attempts from {schema}.idem_outbox"));
    psql(&format!("drop schema {schema} cascade"));
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
