//! The server stores over TLS: a wrong CA is refused at start with the certificate's problem in
//! one line, the right one serves keyed requests end to end.

use std::{process::Stdio, time::Duration};

use idem_test_support::Server;
use sqlx::{ConnectOptions, Connection};

use crate::{
    cli::fails,
    support::{Client, Gateway, Upstream, idem, idem_command},
    tls_servers::{Certificates, TlsPostgres, TlsRedis},
};

/// A keyed request, then its retry: executed once, replayed once.
async fn executes_once_and_replays(gateway: &Gateway, upstream: &Upstream) {
    let client = Client::new();
    let first = client.post(&gateway.url("/charges"), "tls-1", "{}").await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    let again = client.post(&gateway.url("/charges"), "tls-1", "{}").await;
    assert_eq!(again.status, 201);
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.hits("charges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_checks_the_ca_and_the_host_name_as_libpq_does() {
    if Server::Postgres.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // For `localhost` only: the tests connect to 127.0.0.1, which verify-full refuses.
    let certificates = Certificates::make(dir.path(), &["localhost"]);
    let server = TlsPostgres::start(dir.path(), &certificates);
    let ca = certificates.ca.display();
    let wrong_ca = certificates.wrong_ca.display();

    for parameters in [
        format!("sslmode=verify-ca&sslrootcert={wrong_ca}"),
        // With a root certificate, `require` checks the chain too.
        format!("sslmode=require&sslrootcert={wrong_ca}"),
    ] {
        let url = server.url(&parameters);
        assert_eq!(
            fails(&["migrate", "--store", &url], 1),
            format!(
                "error: cannot open the store {url}: cannot connect to PostgreSQL: error \
                 communicating with database: invalid peer certificate: UnknownIssuer"
            )
        );
    }
    let url = server.url(&format!("sslmode=verify-full&sslrootcert={ca}"));
    assert_eq!(
        fails(&["migrate", "--store", &url], 1),
        format!(
            "error: cannot open the store {url}: cannot connect to PostgreSQL: error \
             communicating with database: invalid peer certificate: certificate not valid for name \"127.0.0.1\"; certificate is only valid for \
             DnsName(\"localhost\")"
        )
    );

    let url = server.url(&format!(
        "sslmode=verify-ca&sslrootcert={ca}&application_name=idem-tls"
    ));
    let migrated = idem(&["migrate", "--store", &url]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &url]);
    executes_once_and_replays(&gateway, &upstream).await;

    // Every connection of the gateway is encrypted.
    let options = idem_postgres::PostgresOptions::from_url(&url).unwrap();
    let mut connection = options.connect_options().connect().await.unwrap();
    let (encrypted, plain): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = 'idem-tls' AND a.pid <> pg_backend_pid()",
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert!(encrypted >= 1, "the gateway's connections: {encrypted}");
    assert_eq!(plain, 0);
    connection.close().await.unwrap();
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_checks_the_ca() {
    if Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    let server = TlsRedis::start(dir.path(), &certificates);

    let url = server.url(&format!("cacert={}", certificates.wrong_ca.display()));
    assert_eq!(
        fails(&["keys", "purge", "--store", &url], 1),
        format!(
            "error: cannot open the store {url}: cannot connect to Redis: invalid peer \
             certificate: UnknownIssuer"
        )
    );
    let url = server.url("cacert=/nonexistent/ca.pem");
    assert_eq!(
        fails(&["keys", "purge", "--store", &url], 1),
        format!(
            "error: cannot open the store {url}: cannot read the TLS file /nonexistent/ca.pem: \
             No such file or directory (os error 2)"
        )
    );

    let url = server.url(&format!(
        "cacert={}&prefix=idem-tls",
        certificates.ca.display()
    ));
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &url]);
    executes_once_and_replays(&gateway, &upstream).await;
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_over_tls_checks_the_ca() {
    if Server::Redis.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    let server = TlsRedis::start_cluster(dir.path(), &certificates);

    let url = server.cluster_url(&format!("cacert={}", certificates.wrong_ca.display()));
    let refused = fails(&["keys", "purge", "--store", &url], 1);
    assert!(
        refused.starts_with(&format!(
            "error: cannot open the store {url}: cannot connect to Redis: "
        )) && refused.contains("invalid peer certificate: UnknownIssuer"),
        "{refused}"
    );

    let url = server.cluster_url(&format!(
        "cacert={}&prefix=idem-tls",
        certificates.ca.display()
    ));
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &url]);
    executes_once_and_replays(&gateway, &upstream).await;
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_reaches_postgres_over_tls_with_the_right_ca_only() {
    if Server::Postgres.url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certificates = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    let server = TlsPostgres::start(dir.path(), &certificates);
    // The broker is contacted on the first batch only: there is none here.
    let relay = |store: &str| {
        let mut command = idem_command();
        command.args(["relay", "--store", store, "--broker", "nats://127.0.0.1:9"]);
        command.args(["--migrate", "--admin-listen", "127.0.0.1:0"]);
        command
    };

    let wrong = server.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        certificates.wrong_ca.display()
    ));
    let output = relay(&wrong).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );

    let right = server.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        certificates.ca.display()
    ));
    let mut child = relay(&right)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `--migrate` creates the outbox over the relay's TLS connection.
    let mut connection = idem_postgres::PostgresOptions::from_url(&right)
        .unwrap()
        .connect_options()
        .connect()
        .await
        .unwrap();
    let mut migrated = false;
    for _ in 0..200 {
        migrated = sqlx::query_scalar("SELECT to_regclass('public.idem_outbox') IS NOT NULL")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        if migrated {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(migrated, "the relay created its outbox");
    let encrypted: bool = sqlx::query_scalar(
        "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.backend_type = 'client backend'",
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert!(encrypted, "every connection to the server is encrypted");
    connection.close().await.unwrap();

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            exit = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    assert_eq!(exit.and_then(|s| s.code()), Some(0));
}
