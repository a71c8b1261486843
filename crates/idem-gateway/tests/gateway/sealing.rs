//! `--encryption-key-file`: stored responses sealed at rest in every store, key rotation,
//! records that do not open; `--digest-key-file`: keyed digests in the logs.

use std::path::{Path, PathBuf};

use crate::{
    cli::fails,
    servers::{MysqlDb, PgSchema, RedisPrefix},
    support::{Client, Gateway, Upstream, idem, idem_command, sqlite_url},
};

const KEY_A: &str = "a:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY_B: &str = "b:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
/// A body the tests look for in the stores' raw bytes.
const SECRET: &str = r#"{"card":"4242-sealed-marker-7781"}"#;
const MARKER: &[u8] = b"4242-sealed-marker-7781";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Sends `SECRET` to `/binary` (which echoes it) under `key`, then replays it: both answers carry
/// the body exactly. Returns the upstream's executions.
async fn execute_and_replay(gateway: &Gateway, upstream: &Upstream, key: &str) -> usize {
    let client = Client::new();
    let first = client.post(&gateway.url("/binary"), key, SECRET).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.text(), SECRET);
    let replay = client.post(&gateway.url("/binary"), key, SECRET).await;
    assert_eq!(replay.status, 200);
    assert!(replay.replayed());
    assert_eq!(replay.text(), SECRET);
    assert_eq!(replay.header("content-type"), "application/octet-stream");
    upstream.hits("binary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_files_hold_no_response_in_clear_and_keys_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let ring_a = write(dir.path(), "a.keys", &format!("{KEY_A}\n"));
    let upstream = Upstream::start().await;

    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--encryption-key-file",
            ring_a.to_str().unwrap(),
        ],
    );
    assert_eq!(execute_and_replay(&gateway, &upstream, "old").await, 1);
    let mut raw = Vec::new();
    for file in ["idem.db", "idem.db-wal", "idem.db-shm"] {
        if let Ok(bytes) = std::fs::read(dir.path().join(file)) {
            raw.extend(bytes);
        }
    }
    assert!(!raw.is_empty());
    assert!(
        !contains(&raw, MARKER),
        "the body is in the SQLite files in clear"
    );
    gateway.stop().await;

    // `idem keys show` opens the record with the same flag.
    let shown = idem(&[
        "keys",
        "show",
        "old",
        "--store",
        &store,
        "--encryption-key-file",
        ring_a.to_str().unwrap(),
    ]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let record: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(record["status"], 200);

    // Rotation: B first, A kept. Old and new records replay; new ones are sealed with B.
    let rotated = write(dir.path(), "ba.keys", &format!("{KEY_B}\n{KEY_A}\n"));
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--encryption-key-file",
            rotated.to_str().unwrap(),
        ],
    );
    let client = Client::new();
    let old = client.post(&gateway.url("/binary"), "old", SECRET).await;
    assert!(old.replayed());
    assert_eq!(old.text(), SECRET);
    assert_eq!(execute_and_replay(&gateway, &upstream, "new").await, 2);
    gateway.stop().await;

    // A retired too early: its record does not open, and is never forwarded (even in
    // passthrough mode), while B's still replays.
    let only_b = write(dir.path(), "b.keys", &format!("{KEY_B}\n"));
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--encryption-key-file",
            only_b.to_str().unwrap(),
            "--on-store-error",
            "passthrough",
        ],
    );
    let corrupted = client.post(&gateway.url("/binary"), "old", SECRET).await;
    assert_eq!(corrupted.status, 500);
    assert_eq!(corrupted.header("content-type"), "application/problem+json");
    assert_eq!(
        corrupted.json()["type"],
        "urn:idem:problem:record-corrupted"
    );
    let new = client.post(&gateway.url("/binary"), "new", SECRET).await;
    assert!(new.replayed());
    assert_eq!(new.text(), SECRET);
    assert_eq!(upstream.hits("binary"), 2);
    // The admin API says the same.
    let admin = |key: &str| {
        axum::http::Request::get(gateway.admin_url(&format!("/v1/keys/{key}")))
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let shown = client.send(admin("old")).await;
    assert_eq!(shown.status, 500);
    assert_eq!(shown.json()["type"], "urn:idem:problem:record-corrupted");
    let shown = client.send(admin("new")).await;
    assert_eq!(shown.status, 200);
    assert_eq!(shown.json()["status"], 200);
    gateway.stop().await;

    // The operator's remedy: forget the record; the key then executes again.
    let forgot = idem(&[
        "keys",
        "forget",
        "old",
        "--store",
        &store,
        "--encryption-key-file",
        only_b.to_str().unwrap(),
    ]);
    assert_eq!(forgot.code, Some(0), "{}", forgot.stderr);
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--encryption-key-file",
            only_b.to_str().unwrap(),
        ],
    );
    let again = client.post(&gateway.url("/binary"), "old", SECRET).await;
    assert_eq!(again.status, 200);
    assert!(!again.replayed());
    assert_eq!(upstream.hits("binary"), 3);
    gateway.stop().await;
}

/// A record in clear under a sealing gateway: planted by whoever can write to the store, or
/// written before sealing was on. Refused unless `--accept-plaintext`, which counts each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_clear_is_refused_unless_plaintext_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let ring = write(dir.path(), "a.keys", &format!("{KEY_A}\n"));
    let ring = ring.to_str().unwrap();
    let upstream = Upstream::start().await;
    let client = Client::new();

    // Stored in clear, by a gateway without a key ring.
    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    assert_eq!(execute_and_replay(&gateway, &upstream, "in-clear").await, 1);
    gateway.stop().await;

    let sealing = Gateway::start(
        &upstream.url(),
        &["--store", &store, "--encryption-key-file", ring],
    );
    let refused = client
        .post(&sealing.url("/binary"), "in-clear", SECRET)
        .await;
    assert_eq!(refused.status, 500);
    assert_eq!(refused.json()["type"], "urn:idem:problem:record-corrupted");
    assert_eq!(upstream.hits("binary"), 1);
    sealing.stop().await;

    let accepting = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--encryption-key-file",
            ring,
            "--accept-plaintext",
        ],
    );
    for _ in 0..2 {
        let replay = client
            .post(&accepting.url("/binary"), "in-clear", SECRET)
            .await;
        assert!(replay.replayed());
        assert_eq!(replay.text(), SECRET);
    }
    assert_eq!(upstream.hits("binary"), 1);
    let metrics = client
        .send(
            axum::http::Request::get(accepting.admin_url("/metrics"))
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert!(
        metrics
            .text()
            .lines()
            .any(|line| line == "idem_plaintext_records_accepted_total 2"),
        "{}",
        metrics.text()
    );
    accepting.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_row_holds_no_response_in_clear() {
    let Some(schema) = PgSchema::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ring = write(dir.path(), "a.keys", KEY_A);
    let migrated = idem(&["migrate", "--store", &schema.store_url()]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &schema.store_url(),
            "--encryption-key-file",
            ring.to_str().unwrap(),
        ],
    );
    assert_eq!(
        execute_and_replay(&gateway, &upstream, "pg-sealed").await,
        1
    );
    gateway.stop().await;

    let server = idem_test_support::Server::Postgres.configured().unwrap();
    let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(&server)
        .await
        .unwrap();
    let rows: Vec<(Vec<u8>, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT response, row_to_json(r)::text FROM \"{}\".idem_records r",
        schema.name
    )))
    .fetch_all(&mut connection)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    let (response, whole_row) = &rows[0];
    assert!(
        !contains(response, MARKER),
        "the body is in the row in clear"
    );
    assert!(!contains(whole_row.as_bytes(), MARKER));
    assert!(contains(response, b"\xffidem-sealed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_row_holds_no_response_in_clear() {
    let Some(database) = MysqlDb::new().await else {
        return;
    };
    let store = database.store_url();
    let dir = tempfile::tempdir().unwrap();
    let ring = write(dir.path(), "a.keys", KEY_A);
    let migrated = idem(&["migrate", "--store", &store]);
    assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--encryption-key-file",
            ring.to_str().unwrap(),
        ],
    );
    assert_eq!(
        execute_and_replay(&gateway, &upstream, "mysql-sealed").await,
        1
    );
    gateway.stop().await;

    let responses = database.bytes("SELECT response FROM idem_records").await;
    assert_eq!(responses.len(), 1);
    let whole_row = database
        .bytes(
            "SELECT CONCAT_WS(X'', scope, key_digest, fingerprint, state, token, lease_until, \
             created_at, completed_at, expires_at, response) FROM idem_records",
        )
        .await;
    assert!(
        !contains(&responses[0], MARKER),
        "the body is in the row in clear"
    );
    assert!(!contains(&whole_row[0], MARKER));
    assert!(contains(&responses[0], b"\xffidem-sealed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_value_holds_no_response_in_clear() {
    let Some(prefix) = RedisPrefix::new() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ring = write(dir.path(), "a.keys", KEY_A);
    let upstream = Upstream::start().await;
    // The key ring from the environment, this time.
    let mut command = idem_command();
    command
        .args(["serve", "--upstream", &upstream.url()])
        .env("IDEM_ENCRYPTION_KEY_FILE", &ring);
    let gateway = Gateway::spawn(command, &["--store", &prefix.store_url()]);
    assert_eq!(
        execute_and_replay(&gateway, &upstream, "redis-sealed").await,
        1
    );
    gateway.stop().await;

    let server = idem_test_support::Server::Redis.configured().unwrap();
    let mut connection = redis::Client::open(server.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{}:*", prefix.prefix()))
        .query(&mut connection)
        .unwrap();
    let records: Vec<&String> = keys.iter().filter(|k| k.ends_with('}')).collect();
    assert_eq!(records.len(), 1, "{keys:?}");
    let fields: Vec<Vec<u8>> = redis::cmd("HGETALL")
        .arg(records[0])
        .query(&mut connection)
        .unwrap();
    let raw: Vec<u8> = fields.concat();
    assert!(contains(&raw, b"\xffidem-sealed"));
    assert!(
        !contains(&raw, MARKER),
        "the body is in the Redis hash in clear"
    );
}

#[test]
fn a_malformed_key_file_stops_start_up_with_one_line_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let ring = write(dir.path(), "bad.keys", &format!("{KEY_A}\n\nb:c2hvcnQ=\n"));
    let path = ring.to_str().unwrap();
    assert_eq!(
        fails(
            &[
                "serve",
                "--upstream",
                "http://127.0.0.1:9",
                "--store",
                "memory://",
                "--encryption-key-file",
                path
            ],
            1
        ),
        format!(
            "error: invalid encryption key file {path}: line 3: the key is 5 bytes long; a key \
             is 32 random bytes"
        )
    );
    let digest = write(dir.path(), "digest.key", "AAAA\n");
    let path = digest.to_str().unwrap();
    assert_eq!(
        fails(
            &[
                "serve",
                "--upstream",
                "http://127.0.0.1:9",
                "--store",
                "memory://",
                "--digest-key-file",
                path
            ],
            1
        ),
        format!(
            "error: invalid digest key file {path}: the key is 3 bytes long; a digest key is 32 \
             random bytes"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_key_makes_the_logged_digests_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let digest_key = write(
        dir.path(),
        "digest.key",
        "BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU=\n",
    );
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--digest-key-file",
            digest_key.to_str().unwrap(),
        ],
    );
    let client = Client::new();
    let reply = client
        .send(
            axum::http::Request::post(gateway.url("/charges"))
                .header("idempotency-key", "pay-1")
                .header("authorization", "Bearer alice")
                .body(axum::body::Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 201);
    let line = gateway
        .log_line(|line| line["target"] == "idem::request")
        .await;
    let keys = blake3::derive_key("idem 2026 keyed key digest for logs", &[5; 32]);
    let scopes = blake3::derive_key("idem 2026 keyed scope digest for logs", &[5; 32]);
    // The scope hashes the header's name and value.
    let scope =
        idem_core::Scope::from_identity([b"authorization".as_slice(), b"Bearer alice".as_slice()]);
    assert_eq!(
        line["key"],
        &blake3::keyed_hash(&keys, b"pay-1").to_hex()[..16]
    );
    assert_eq!(
        line["scope"],
        blake3::keyed_hash(&scopes, scope.as_bytes())
            .to_hex()
            .as_str()
    );
    assert_ne!(line["scope"], scope.to_string().as_str());
    gateway.stop().await;
}

/// `--digest-key-file` keys the store's addresses too. Turned on over a store that holds records
/// under plain addresses, those keep replaying during the change-over window (the TTL after
/// start, by default), and no longer after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_key_keys_the_stored_addresses_and_changes_over_without_losing_replays() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path(), "idem.db");
    let digest_key = write(
        dir.path(),
        "digest.key",
        "BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU=\n",
    );
    let digest_key = digest_key.to_str().unwrap();
    let upstream = Upstream::start().await;
    let client = Client::new();
    let plain_scope = idem_core::Scope::ANONYMOUS;

    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    assert_eq!(
        execute_and_replay(&gateway, &upstream, "before-key").await,
        1
    );
    gateway.stop().await;

    let keyed = Gateway::start(
        &upstream.url(),
        &["--store", &store, "--digest-key-file", digest_key],
    );
    let replay = client
        .post(&keyed.url("/binary"), "before-key", SECRET)
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.text(), SECRET);
    assert_eq!(upstream.hits("binary"), 1);
    assert_eq!(execute_and_replay(&keyed, &upstream, "after-key").await, 2);
    keyed.stop().await;

    // The file holds the plain digest of the key stored before, and nothing of the one after:
    // neither its SHA-256 nor the plain scope beside it.
    let mut raw = Vec::new();
    for file in ["idem.db", "idem.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.path().join(file)) {
            raw.extend(bytes);
        }
    }
    let sha256 = |key: &str| key.parse::<idem_core::IdempotencyKey>().unwrap().sha256();
    assert!(contains(&raw, &sha256("before-key")));
    assert!(!contains(&raw, &sha256("after-key")));
    let listed = idem(&[
        "keys",
        "list",
        "--store",
        &store,
        "--json",
        "--state",
        "completed",
    ]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let page: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let scopes: Vec<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["scope"].as_str().unwrap())
        .collect();
    // Newest first: the keyed record's scope is the scope's keyed digest, as the logs print it.
    let scope_key = blake3::derive_key("idem 2026 keyed scope digest for logs", &[5; 32]);
    assert_eq!(
        scopes,
        [
            blake3::keyed_hash(&scope_key, plain_scope.as_bytes())
                .to_hex()
                .to_string(),
            plain_scope.to_string(),
        ]
    );

    // `idem keys show` finds both with the same flag, and the keyed one only with it.
    for key in ["before-key", "after-key"] {
        let shown = idem(&[
            "keys",
            "show",
            key,
            "--store",
            &store,
            "--digest-key-file",
            digest_key,
        ]);
        assert_eq!(shown.code, Some(0), "{key}: {}", shown.stderr);
    }
    let unkeyed = idem(&["keys", "show", "after-key", "--store", &store]);
    assert_eq!(unkeyed.code, Some(1), "{}", unkeyed.stdout);

    // Past the window, records under plain addresses are no longer looked for.
    let after_window = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--digest-key-file",
            digest_key,
            "--digest-changeover",
            "0s",
        ],
    );
    let again = client
        .post(&after_window.url("/binary"), "before-key", SECRET)
        .await;
    assert!(!again.replayed());
    assert_eq!(upstream.hits("binary"), 3);
    after_window.stop().await;
}
