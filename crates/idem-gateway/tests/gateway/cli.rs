//! The command line: help, error messages, `idem keys` and `idem migrate`.

use std::time::Duration;

use crate::support::{Client, Gateway, Upstream, idem, sqlite_url};

/// Runs `idem ARGS…`, expects it to fail with `code`, and returns its one line on stderr.
pub(crate) fn fails(args: &[&str], code: i32) -> String {
    let output = idem(args);
    assert_eq!(output.code, Some(code), "{args:?}: {}", output.stderr);
    assert_eq!(output.stdout, "");
    let lines: Vec<&str> = output.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed {lines:?}");
    lines[0].to_owned()
}

#[test]
fn help_shows_every_default() {
    let output = idem(&["serve", "--help"]);
    assert_eq!(output.code, Some(0));
    for default in [
        "[default: 127.0.0.1:8080]",
        "[default: 127.0.0.1:9090]",
        "[default: sqlite://idem.db]",
        "[default: Idempotency-Key]",
        "[default: POST,PATCH]",
        "[default: 24h]",
        "[default: 30s]",
        "[default: reject]",
        "[default: 10s]",
        "[default: retry]",
        "[default: Authorization]",
        "[default: json]",
        "[default: 10MiB]",
        "[default: 1MiB]",
        "[env: IDEM_ON_STORE_ERROR=]",
    ] {
        assert!(
            output.stdout.contains(default),
            "no {default} in:\n{}",
            output.stdout
        );
    }
}

#[test]
fn bad_command_lines_fail_with_one_line() {
    let upstream = ["serve", "--upstream", "http://127.0.0.1:9"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        upstream.iter().chain(extra).copied().collect()
    };
    assert_eq!(
        fails(&with(&["--store", "mongodb://db"]), 2),
        "error: invalid value 'mongodb://db' for '--store <URL>': invalid store URL \
         `mongodb://db`: unknown scheme; expected memory://, sqlite://PATH, postgres://…, \
         mysql://…, redis://… or redis+cluster://…"
    );
    assert_eq!(
        fails(&with(&["--store", "mysql://db"]), 2),
        "error: invalid value 'mysql://db' for '--store <URL>': invalid store URL `mysql://db`: \
         no database: give one as the path, mysql://HOST/DATABASE"
    );
    assert_eq!(
        fails(&with(&["--frobnicate"]), 2),
        "error: unexpected argument '--frobnicate' found"
    );
    assert_eq!(
        fails(&with(&["--ttl", "10x"]), 2),
        "error: invalid value '10x' for '--ttl <DURATION>': invalid duration `10x`: expected a \
         whole number and a unit (ms, s, m, h or d), e.g. 500ms, 2s, 30m, 24h"
    );
    assert_eq!(
        fails(&with(&["--max-body", "10MB"]), 2),
        "error: invalid value '10MB' for '--max-body <BYTES>': invalid size `10MB`: expected a \
         whole number of bytes, optionally with a unit (KiB, MiB or GiB), e.g. 1024, 64KiB, 10MiB"
    );
    assert_eq!(
        fails(&["serve", "--store", "memory://"], 1),
        "error: no upstream: set --upstream, IDEM_UPSTREAM or `upstream` in the config file"
    );
    let unreachable = fails(&with(&["--store", "sqlite:///nonexistent-dir/idem.db"]), 1);
    assert!(
        unreachable.starts_with(
            "error: cannot open the store sqlite:///nonexistent-dir/idem.db: cannot open the SQLite database: "
        ),
        "{unreachable}"
    );
    assert_eq!(
        fails(&with(&["--store", "sqlite://idem.db?batch_size=0"]), 2),
        "error: invalid value 'sqlite://idem.db?batch_size=0' for '--store <URL>': invalid store \
         URL `sqlite://idem.db?batch_size=0`: `batch_size=0`: expected 1 or more"
    );
    assert_eq!(
        fails(&with(&["--store", "sqlite://idem.db?journal=off"]), 2),
        "error: invalid value 'sqlite://idem.db?journal=off' for '--store <URL>': invalid store \
         URL `sqlite://idem.db?journal=off`: unknown parameter `journal` (idem takes synchronous, \
         pool_size, batch_size, queue_size, busy_timeout)"
    );
    assert_eq!(
        fails(&["frobnicate"], 2),
        "error: unrecognized subcommand 'frobnicate'"
    );
    assert_eq!(
        fails(&with(&["--otlp-endpoint", "collector:4318"]), 2),
        "error: invalid value 'collector:4318' for '--otlp-endpoint <URL>': expected an http:// \
         or https:// URL"
    );
}

#[test]
fn a_bad_config_file_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.toml");
    let config = path.to_str().unwrap();
    let serve = [
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--config",
        config,
    ];

    std::fs::write(&path, "colour = \"blue\"\n").unwrap();
    assert_eq!(
        fails(&serve, 1),
        format!("error: the config file {config} has an unknown setting `colour`")
    );
    std::fs::write(&path, "ttl = \"forever\"\n").unwrap();
    assert_eq!(
        fails(&serve, 2),
        "error: invalid value 'forever' for '--ttl <DURATION>': invalid duration `forever`: \
         expected a whole number and a unit (ms, s, m, h or d), e.g. 500ms, 2s, 30m, 24h"
    );
    std::fs::write(&path, "ttl = [\n").unwrap();
    assert!(fails(&serve, 1).starts_with(&format!(
        "error: the config file {config} is not valid TOML: "
    )));
    let missing = dir.path().join("missing.toml");
    let missing = missing.to_str().unwrap();
    assert!(
        fails(&["serve", "--config", missing], 1)
            .starts_with(&format!("error: cannot read the config file {missing}: "))
    );
}

#[test]
fn a_store_url_parameter_in_its_old_spelling_works_with_a_warning_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("{}?queue=64", sqlite_url(dir.path(), "idem.db"));
    let migrated = idem(&["migrate", "--store", &store]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let warnings: Vec<&str> = migrated.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            " WARN the store URL parameter `queue` is now `queue_size`; the old spelling is \
             still accepted"
        ),
        "{warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_migrate_work_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");

    let migrated = idem(&["migrate", "--store", &store]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    assert_eq!(
        migrated.stdout,
        format!("created {store}: the idem schema is up to date\n")
    );
    let again = idem(&["migrate", "--store", &store]);
    assert_eq!(
        again.stdout,
        format!("{store}: the idem schema is up to date\n")
    );

    keys_show_forget_and_purge(&store, "purged 1 expired records\n").await;
}

/// Runs two requests through a gateway on `store`, then `idem keys show`, `forget` and, once
/// the second record has expired, `purge`, which prints `purged` (then nothing is left).
pub(crate) async fn keys_show_forget_and_purge(store: &str, purged: &str) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", store, "--ttl", "3s"]);
    let client = Client::new();
    assert_eq!(
        client
            .post(&gateway.url("/charges"), "cli-1", "{}")
            .await
            .status,
        201
    );
    assert_eq!(
        client
            .post(&gateway.url("/charges"), "cli-2", "{}")
            .await
            .status,
        201
    );
    let completed = tokio::time::Instant::now();
    gateway.stop().await;

    let shown = idem(&["keys", "show", "cli-1", "--store", store]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let record: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    let digest = "cli-1"
        .parse::<idem_core::IdempotencyKey>()
        .unwrap()
        .digest();
    assert_eq!(record["key_digest"], digest.as_str());
    assert_eq!(record["scope"], "0".repeat(64));
    assert_eq!(record["state"], "completed");
    assert_eq!(record["status"], 201);

    let anonymous = "0".repeat(64);
    let forgot = idem(&[
        "keys", "forget", "cli-1", "--store", store, "--scope", &anonymous,
    ]);
    assert_eq!(forgot.code, Some(0), "{}", forgot.stderr);
    assert_eq!(
        forgot.stdout,
        format!("forgot key {digest} in scope {anonymous}\n")
    );
    assert_eq!(
        fails(&["keys", "show", "cli-1", "--store", store], 1),
        format!("error: no record for key {digest} in scope {anonymous}")
    );
    assert_eq!(
        fails(&["keys", "forget", "cli-1", "--store", store], 1),
        format!("error: no record for key {digest} in scope {anonymous}")
    );

    // cli-2 expires 3 s after its completion; then purge removes it, once.
    tokio::time::sleep_until(completed + Duration::from_millis(3200)).await;
    let expected = purged;
    let purged = idem(&["keys", "purge", "--store", store]);
    assert_eq!(purged.code, Some(0), "{}", purged.stderr);
    assert_eq!(purged.stdout, expected);
    // Nothing is left: the same line with 0.
    assert_eq!(
        idem(&["keys", "purge", "--store", store]).stdout,
        expected.replace(|c: char| c.is_ascii_digit(), "0")
    );
    let digest = "cli-2"
        .parse::<idem_core::IdempotencyKey>()
        .unwrap()
        .digest();
    assert_eq!(
        fails(&["keys", "show", "cli-2", "--store", store], 1),
        format!("error: no record for key {digest} in scope {anonymous}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_forget_refuses_a_processing_key_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    let client = Client::new();
    let slow = tokio::spawn({
        let client = client.clone();
        let url = gateway.url("/slow");
        async move {
            client
                .send(
                    axum::http::Request::post(url)
                        .header("idempotency-key", "cli-busy")
                        .header("x-delay-ms", "4000")
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
        }
    });
    upstream.wait_for_hits("slow", 1).await;
    let digest = "cli-busy"
        .parse::<idem_core::IdempotencyKey>()
        .unwrap()
        .digest();
    let anonymous = "0".repeat(64);

    assert_eq!(
        fails(&["keys", "forget", "cli-busy", "--store", &store], 1),
        format!(
            "error: key {digest} in scope {anonymous} is being processed: a request holds it; \
             add --force to forget it anyway (a retry may then execute while that request \
             still runs)"
        )
    );
    let shown = idem(&["keys", "show", "cli-busy", "--store", &store]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown.stdout.contains("\"state\": \"processing\""),
        "{}",
        shown.stdout
    );

    let forced = idem(&["keys", "forget", "cli-busy", "--store", &store, "--force"]);
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert_eq!(
        forced.stdout,
        format!("forgot key {digest} in scope {anonymous}\n")
    );
    assert_eq!(
        fails(&["keys", "show", "cli-busy", "--store", &store], 1),
        format!("error: no record for key {digest} in scope {anonymous}")
    );
    assert_eq!(slow.await.unwrap().status, 201);
    gateway.stop().await;
}
