//! The outbox from other languages: programs that insert outbox rows by hand, as
//! docs/messaging.md's "Writing to the outbox from any language" says, and `idem relay`
//! publishing what they wrote. Python with psycopg 3 and Node.js with node-postgres on
//! PostgreSQL, Python's sqlite3 on SQLite, Python with PyMySQL on MySQL: the programs in
//! `tests/outbox-writers/`.
//!
//! Each writer runs one plan: two business transactions that commit and one that rolls back,
//! each inserting an order and enqueuing messages (ordering keys, repeated and non-ASCII headers,
//! a payload that is not UTF-8). Then:
//!
//! - its outbox rows equal, column by column, those `Outbox::enqueue` writes for the same plan in
//!   a table beside it (ids and times aside: the ids are UUIDv7s, lower-case and hyphenated, and
//!   each row's two times are one, taken while it was written); only the committed orders are
//!   there;
//! - on PostgreSQL, each commit notified the relays' channel once, and the rollback did not;
//! - `idem relay --ordering` publishes to NATS exactly the committed messages, each once (the
//!   relay's confirmed count, and the stream's), with its id, headers and payload, each key's in
//!   enqueue order; the rolled-back message never.
//!
//! The Python writers run with `IDEM_TEST_PYTHON` (default `python3`), the Node.js one with
//! `node`; `tests/outbox-writers/install.sh` installs their packages (scripts/test runs it and
//! sets `IDEM_TEST_PYTHON`). A writer that cannot run fails its test: only a missing server
//! variable skips it.

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use base64::Engine;
use futures_util::StreamExt;
use http::Request;
use idem_messaging::{Incoming, Outbox, OutboxDatabase, OutboxMessage, OutboxOptions};
use idem_test_support::{MysqlDatabase, NatsStream, PgSchema, require};
use serde_json::json;
use sqlx::{MySql, Pool, Postgres, Sqlite, postgres::PgListener};

use crate::{
    servers::free_port,
    support::{Client, idem_command},
};

/// How long a test waits for something that should happen in milliseconds.
const EVENTUALLY: Duration = Duration::from_secs(60);

/// Where the writers are.
const WRITERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/outbox-writers");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_with_psycopg_writes_the_outbox_on_postgres() {
    let postgres = require!(Postgres);
    let nats = require!(Nats);
    let schema = PgSchema::create(&postgres).await;
    let writer = python("psycopg_writer.py", &[&postgres, schema.name()]);
    on_postgres(&postgres, &schema, writer, &nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_with_pg_writes_the_outbox_on_postgres() {
    let postgres = require!(Postgres);
    let nats = require!(Nats);
    let schema = PgSchema::create(&postgres).await;
    let mut writer = Command::new("node");
    writer
        .arg(Path::new(WRITERS).join("pg_writer.mjs"))
        .args([&postgres, schema.name()]);
    on_postgres(&postgres, &schema, writer, &nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_with_sqlite3_writes_the_outbox_on_sqlite() {
    let nats = require!(Nats);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("service.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let writer = python("sqlite3_writer.py", &[path.to_str().unwrap()]);
    let store = format!("sqlite://{}", path.display());
    writes_and_relays(Site::<Sqlite>::new(pool, None), writer, &[&store], &nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_with_pymysql_writes_the_outbox_on_mysql() {
    let mysql = require!(Mysql);
    let nats = require!(Nats);
    let database = MysqlDatabase::create(&mysql).await;
    let pool = sqlx::MySqlPool::connect_with(database.connect_options())
        .await
        .unwrap();
    let url = database.url();
    let writer = python("pymysql_writer.py", &[&url]);
    writes_and_relays(Site::<MySql>::new(pool, None), writer, &[&url], &nats).await;
}

async fn on_postgres(postgres: &str, schema: &PgSchema, writer: Command, nats: &str) {
    let pool = sqlx::PgPool::connect(postgres).await.unwrap();
    let site = Site::<Postgres>::new(pool, Some(schema.name()));
    let store = [postgres, "--outbox-schema", schema.name()];
    writes_and_relays(site, writer, &store, nats).await;
}

/// `python3 tests/outbox-writers/SCRIPT ARGS…`, or `IDEM_TEST_PYTHON`'s interpreter.
fn python(script: &str, args: &[&str]) -> Command {
    let interpreter = std::env::var_os("IDEM_TEST_PYTHON").unwrap_or_else(|| "python3".into());
    let mut command = Command::new(interpreter);
    command
        .arg(Path::new(WRITERS).join(script))
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// A business transaction of the plan: the order it inserts, its messages, and whether it
/// commits.
struct Planned {
    order: i64,
    commit: bool,
    messages: Vec<OutboxMessage>,
}

/// The plan every writer runs, its messages to `destination`.
fn plan(destination: &str) -> Vec<Planned> {
    let message = |key: Option<&str>, headers: &[(&str, &str)], payload: &'static [u8]| {
        let mut message = OutboxMessage::new(destination, payload);
        message.ordering_key = key.map(str::to_owned);
        for (name, value) in headers {
            message = message.header(*name, *value);
        }
        message
    };
    let json = ("content-type", "application/json");
    vec![
        Planned {
            order: 1,
            commit: true,
            messages: vec![
                message(
                    Some("customer-7"),
                    &[json, ("x-trace", "a"), ("x-trace", "b")],
                    br#"{"order":1,"event":"paid"}"#,
                ),
                message(
                    Some("customer-7"),
                    &[("x-note", r#"a "quoted" déjà vu ✓ \ /"#)],
                    br#"{"order":1,"event":"receipt"}"#,
                ),
                message(None, &[], b"\x00\xff\xfe raw bytes\n\x80"),
            ],
        },
        Planned {
            order: 2,
            commit: false,
            messages: vec![message(
                Some("customer-7"),
                &[json],
                br#"{"order":2,"event":"paid"}"#,
            )],
        },
        Planned {
            order: 3,
            commit: true,
            messages: vec![
                message(
                    Some("customer-7"),
                    &[json],
                    br#"{"order":3,"event":"paid"}"#,
                ),
                message(
                    Some("customer-9"),
                    &[("content-type", "text/plain")],
                    "order 3 for customer 9".as_bytes(),
                ),
            ],
        },
    ]
}

/// The plan as the writers read it (see `outbox_plan.py`).
fn plan_json(plan: &[Planned]) -> String {
    let base64 = base64::engine::general_purpose::STANDARD;
    let transactions: Vec<_> = plan
        .iter()
        .map(|planned| {
            let messages: Vec<_> = planned
                .messages
                .iter()
                .map(|message| {
                    json!({
                        "destination": message.destination,
                        "ordering_key": message.ordering_key,
                        "headers": message.headers,
                        "payload": base64.encode(&message.payload),
                    })
                })
                .collect();
            json!({
                "order": planned.order,
                "state": "paid",
                "commit": planned.commit,
                "messages": messages,
            })
        })
        .collect();
    serde_json::Value::from(transactions).to_string()
}

/// Runs `writer` with `plan` on its standard input; the ids it printed, one per message of the
/// plan, in order. Fails the test, saying what the writers need, if it cannot run or fails.
async fn write(mut writer: Command, plan: &[Planned]) -> Vec<String> {
    const NEEDS: &str = "the outbox writers need Python 3.10+ (IDEM_TEST_PYTHON, by default \
        python3) and Node.js 18+, with their packages: run \
        crates/idem-gateway/tests/outbox-writers/install.sh and set IDEM_TEST_PYTHON to the \
        interpreter it names";
    let input = plan_json(plan);
    let shown = format!("{writer:?}");
    let output = tokio::task::spawn_blocking(move || {
        let mut child = writer
            .current_dir(WRITERS)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // A writer that fails at once may have closed its input: its exit says why.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        child.wait_with_output()
    })
    .await
    .unwrap()
    .unwrap_or_else(|error| panic!("cannot run {shown}: {error}; {NEEDS}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}):\n{}\n{NEEDS}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let ids: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let planned: usize = plan.iter().map(|planned| planned.messages.len()).sum();
    assert_eq!(ids.len(), planned, "{ids:?}");
    ids
}

/// Enqueues the plan's messages with `Outbox::enqueue` in `outbox`: the rows to compare the
/// writers' with.
async fn enqueue_in_rust<DB: OutboxDatabase>(
    pool: &Pool<DB>,
    outbox: &Outbox<DB>,
    plan: &[Planned],
) {
    for planned in plan {
        let mut tx = pool.begin().await.unwrap();
        for message in &planned.messages {
            outbox.enqueue(&mut *tx, message.clone()).await.unwrap();
        }
        if planned.commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }
}

/// Checks that `id` is the form the outbox gives its ids: a UUIDv7, lower-case, hyphenated.
fn assert_uuid_v7(id: &str) {
    let uuid = sqlx::types::Uuid::parse_str(id).unwrap();
    assert_eq!(uuid.hyphenated().to_string(), id);
    assert_eq!(uuid.get_version_num(), 7, "{id}");
    assert_eq!(
        uuid.get_variant(),
        sqlx::types::uuid::Variant::RFC4122,
        "{id}"
    );
}

/// An outbox's database as the test reads it: its tables, in a schema on PostgreSQL.
struct Site<DB: Tables> {
    pool: Pool<DB>,
    schema: Option<String>,
}

impl<DB: Tables> Site<DB> {
    fn new(pool: Pool<DB>, schema: Option<&str>) -> Self {
        Self {
            pool,
            schema: schema.map(str::to_owned),
        }
    }

    /// The outbox `table` in the site's schema.
    fn outbox(&self, table: &str) -> Outbox<DB> {
        let mut options = OutboxOptions::new().table(table.parse().unwrap());
        if let Some(schema) = &self.schema {
            options = options.schema(schema.parse().unwrap());
        }
        Outbox::new(options)
    }

    /// `name` as the site's statements name it.
    fn table(&self, name: &str) -> String {
        match &self.schema {
            Some(schema) => format!(r#""{schema}".{name}"#),
            None => name.to_owned(),
        }
    }
}

/// What the test reads from an outbox and from the business table, on each database.
trait Tables: OutboxDatabase {
    /// Creates the business table `orders`.
    async fn create_orders(site: &Site<Self>);

    /// The orders, by id.
    async fn orders(site: &Site<Self>) -> Vec<i64>;

    /// The database's clock, as `rows` takes it.
    async fn clock(site: &Site<Self>) -> String;

    /// Each row of the outbox `table` as one JSON text, in `seq` order: its columns but the id,
    /// the times replaced by whether they are equal and from `from` to `to` (and on SQLite, the
    /// type of each column whose type the database does not fix).
    async fn rows(site: &Site<Self>, table: &str, from: &str, to: &str) -> Vec<String>;

    /// The ids of the outbox `table`, in `seq` order.
    async fn ids(site: &Site<Self>, table: &str) -> Vec<String>;

    /// Starts listening to `channel`, where the database has notifications.
    async fn notifications(site: &Site<Self>, channel: &str) -> Option<Notifications>;
}

impl Tables for Postgres {
    async fn create_orders(site: &Site<Self>) {
        let create = format!(
            "CREATE TABLE {} (id bigint PRIMARY KEY, state text NOT NULL)",
            site.table("orders")
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&site.pool)
            .await
            .unwrap();
    }

    async fn orders(site: &Site<Self>) -> Vec<i64> {
        let select = format!("SELECT id FROM {} ORDER BY id", site.table("orders"));
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn clock(site: &Site<Self>) -> String {
        sqlx::query_scalar("SELECT clock_timestamp()::text")
            .fetch_one(&site.pool)
            .await
            .unwrap()
    }

    async fn rows(site: &Site<Self>, table: &str, from: &str, to: &str) -> Vec<String> {
        let select = format!(
            "SELECT json_build_array(seq, destination, ordering_key, header_names,
                header_values, encode(payload, 'hex'), state, attempts,
                available_at = enqueued_at,
                enqueued_at BETWEEN $1::timestamptz AND $2::timestamptz, dead_at,
                last_error)::text
             FROM {} ORDER BY seq",
            site.table(table)
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .bind(from)
            .bind(to)
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn ids(site: &Site<Self>, table: &str) -> Vec<String> {
        let select = format!("SELECT id::text FROM {} ORDER BY seq", site.table(table));
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn notifications(site: &Site<Self>, channel: &str) -> Option<Notifications> {
        let mut listener = PgListener::connect_with(&site.pool).await.unwrap();
        listener.listen(channel).await.unwrap();
        Some(Notifications {
            listener,
            pool: site.pool.clone(),
            channel: channel.to_owned(),
        })
    }
}

impl Tables for Sqlite {
    async fn create_orders(site: &Site<Self>) {
        let create = format!(
            "CREATE TABLE {} (id INTEGER PRIMARY KEY, state TEXT NOT NULL)",
            site.table("orders")
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&site.pool)
            .await
            .unwrap();
    }

    async fn orders(site: &Site<Self>) -> Vec<i64> {
        let select = format!("SELECT id FROM {} ORDER BY id", site.table("orders"));
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn clock(site: &Site<Self>) -> String {
        sqlx::query_scalar(
            "SELECT CAST(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS TEXT)",
        )
        .fetch_one(&site.pool)
        .await
        .unwrap()
    }

    async fn rows(site: &Site<Self>, table: &str, from: &str, to: &str) -> Vec<String> {
        let select = format!(
            "SELECT json_array(seq, typeof(id), length(id), destination, ordering_key, headers,
                hex(payload), typeof(payload), state, attempts, typeof(available_at),
                available_at = enqueued_at,
                enqueued_at BETWEEN CAST(?1 AS INTEGER) AND CAST(?2 AS INTEGER), dead_at,
                last_error, claim, claimed_by)
             FROM {} ORDER BY seq",
            site.table(table)
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .bind(from)
            .bind(to)
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn ids(site: &Site<Self>, table: &str) -> Vec<String> {
        let select = format!("SELECT id FROM {} ORDER BY seq", site.table(table));
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn notifications(_: &Site<Self>, _: &str) -> Option<Notifications> {
        None
    }
}

impl Tables for MySql {
    async fn create_orders(site: &Site<Self>) {
        let create = format!(
            "CREATE TABLE {} (id BIGINT PRIMARY KEY, state VARCHAR(16) NOT NULL) ENGINE = InnoDB",
            site.table("orders")
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&site.pool)
            .await
            .unwrap();
    }

    async fn orders(site: &Site<Self>) -> Vec<i64> {
        let select = format!("SELECT id FROM {} ORDER BY id", site.table("orders"));
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn clock(site: &Site<Self>) -> String {
        sqlx::query_scalar("SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)")
            .fetch_one(&site.pool)
            .await
            .unwrap()
    }

    async fn rows(site: &Site<Self>, table: &str, from: &str, to: &str) -> Vec<String> {
        let select = format!(
            "SELECT CAST(JSON_ARRAY(seq, LENGTH(id), destination, ordering_key, headers,
                HEX(payload), state, attempts, available_at = enqueued_at,
                enqueued_at BETWEEN ? AND ?, dead_at, last_error) AS CHAR)
             FROM {} ORDER BY seq",
            site.table(table)
        );
        sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .bind(from)
            .bind(to)
            .fetch_all(&site.pool)
            .await
            .unwrap()
    }

    async fn ids(site: &Site<Self>, table: &str) -> Vec<String> {
        let select = format!("SELECT id FROM {} ORDER BY seq", site.table(table));
        let ids: Vec<sqlx::types::Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(select))
            .fetch_all(&site.pool)
            .await
            .unwrap();
        ids.iter().map(|id| id.hyphenated().to_string()).collect()
    }

    async fn notifications(_: &Site<Self>, _: &str) -> Option<Notifications> {
        None
    }
}

/// A PostgreSQL connection listening to an outbox's channel.
struct Notifications {
    listener: PgListener,
    pool: sqlx::PgPool,
    channel: String,
}

impl Notifications {
    /// The payloads of the notifications received so far, in order.
    async fn received(mut self) -> Vec<String> {
        // Delivered after every notification committed before it.
        const END: &str = "end of the test";
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&self.channel)
            .bind(END)
            .execute(&self.pool)
            .await
            .unwrap();
        let mut payloads = Vec::new();
        loop {
            let notification = tokio::time::timeout(EVENTUALLY, self.listener.recv())
                .await
                .expect("a notification")
                .unwrap();
            assert_eq!(notification.channel(), self.channel);
            if notification.payload() == END {
                return payloads;
            }
            payloads.push(notification.payload().to_owned());
        }
    }
}

/// A message as a NATS consumer got it.
#[derive(Debug, PartialEq, Eq)]
struct Published {
    id: String,
    headers: BTreeMap<String, Vec<String>>,
    payload: Vec<u8>,
}

impl Published {
    /// What the relay publishes for `message` under `id`: its headers, then `Nats-Msg-Id`.
    fn expected(id: &str, message: &OutboxMessage) -> Self {
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in &message.headers {
            headers.entry(name.clone()).or_default().push(value.clone());
        }
        headers.insert("Nats-Msg-Id".to_owned(), vec![id.to_owned()]);
        Self {
            id: id.to_owned(),
            headers,
            payload: message.payload.to_vec(),
        }
    }
}

/// Runs `writer` on `site`'s outbox, checks its rows against those of `Outbox::enqueue`, then
/// runs `idem relay --store STORE…` to NATS and checks what it published.
async fn writes_and_relays<DB: Tables>(
    site: Site<DB>,
    writer: Command,
    store: &[&str],
    nats: &str,
) {
    let outbox = site.outbox("idem_outbox");
    let rust = site.outbox("rust_outbox");
    outbox.migrate(&site.pool).await.unwrap();
    rust.migrate(&site.pool).await.unwrap();
    DB::create_orders(&site).await;
    let stream = NatsStream::create(nats, Duration::from_secs(120)).await;
    let plan = plan(stream.subject());
    let notifications = DB::notifications(&site, outbox.channel()).await;

    let from = DB::clock(&site).await;
    let ids = write(writer, &plan).await;
    enqueue_in_rust(&site.pool, &rust, &plan).await;
    let to = DB::clock(&site).await;

    // The writer's rows are those of `Outbox::enqueue`, and only the committed ones.
    let rows = DB::rows(&site, "idem_outbox", &from, &to).await;
    assert_eq!(rows.len(), 5, "{rows:#?}");
    assert_eq!(rows, DB::rows(&site, "rust_outbox", &from, &to).await);
    // Each message of the plan, with the id the writer gave it.
    let written: Vec<(&str, bool, &OutboxMessage)> = ids
        .iter()
        .zip(plan.iter().flat_map(|planned| {
            let commit = planned.commit;
            planned
                .messages
                .iter()
                .map(move |message| (commit, message))
        }))
        .map(|(id, (commit, message))| (id.as_str(), commit, message))
        .collect();
    for (id, ..) in &written {
        assert_uuid_v7(id);
    }
    let committed: Vec<&str> = written
        .iter()
        .filter_map(|&(id, commit, _)| commit.then_some(id))
        .collect();
    let rolled_back: Vec<&str> = written
        .iter()
        .filter_map(|&(id, commit, _)| (!commit).then_some(id))
        .collect();
    assert_eq!(rolled_back.len(), 1);
    assert_eq!(DB::ids(&site, "idem_outbox").await, committed);
    assert_eq!(DB::orders(&site).await, [1, 3]);

    // On PostgreSQL, one notification per commit, none for the rollback.
    if let Some(notifications) = notifications {
        assert_eq!(notifications.received().await, ["", ""]);
    }

    let relay = RelayProcess::start(store, nats);
    let published_count = tokio::time::timeout(EVENTUALLY, async {
        loop {
            if outbox.pending(&site.pool).await.unwrap() == 0 && stream.stored().await >= 5 {
                // Counted once the batch that published them is settled.
                let count = relay.published().await;
                if count >= 5 {
                    return count;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the relay did not publish the messages:\n{}", relay.log()));
    assert_eq!(published_count, 5, "{}", relay.log());
    relay.stop().await;
    assert_eq!(stream.stored().await, 5);

    // Exactly the committed messages, each once, as written; never the rolled-back one.
    let published = read(&stream, 5).await;
    let mut received: Vec<&Published> = published.iter().collect();
    received.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected: Vec<Published> = written
        .iter()
        .filter(|(_, commit, _)| *commit)
        .map(|(id, _, message)| Published::expected(id, message))
        .collect();
    expected.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(received, expected.iter().collect::<Vec<_>>());
    assert!(
        published
            .iter()
            .all(|message| !rolled_back.contains(&message.id.as_str()))
    );
    // Each key's messages in enqueue order.
    let key_of = |id: &str| {
        written
            .iter()
            .find(|(written, ..)| *written == id)
            .and_then(|(_, _, message)| message.ordering_key.as_deref())
    };
    for key in ["customer-7", "customer-9"] {
        let in_stream: Vec<&str> = published
            .iter()
            .map(|message| message.id.as_str())
            .filter(|id| key_of(id) == Some(key))
            .collect();
        let enqueued: Vec<&str> = committed
            .iter()
            .copied()
            .filter(|id| key_of(id) == Some(key))
            .collect();
        assert_eq!(in_stream, enqueued, "{key}");
    }
}

/// The first `count` messages of `stream`, in the stream's order.
async fn read(stream: &NatsStream, count: usize) -> Vec<Published> {
    let consumer = stream
        .jetstream()
        .get_stream(stream.name())
        .await
        .unwrap()
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("reader".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut published = Vec::new();
    while published.len() < count {
        let message = tokio::time::timeout(EVENTUALLY, messages.next())
            .await
            .expect("a message within a minute")
            .expect("the stream goes on")
            .expect("a message, not an error");
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, values) in message.headers.iter().flat_map(|headers| headers.iter()) {
            let values = values.iter().map(|value| value.as_str().to_owned());
            headers.entry(name.to_string()).or_default().extend(values);
        }
        published.push(Published {
            id: message.message_id().unwrap().to_owned(),
            headers,
            payload: message.payload.to_vec(),
        });
    }
    published
}

/// `idem relay` as a child process, its output in a file; killed when dropped.
struct RelayProcess {
    child: Child,
    admin: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl RelayProcess {
    /// `idem relay --store STORE… --broker NATS --ordering`, polling every 100 ms.
    fn start(store: &[&str], nats: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("relay.log");
        let admin = format!("127.0.0.1:{}", free_port());
        let output = std::fs::File::create(&log).unwrap();
        let child = idem_command()
            .args(["relay", "--store"])
            .args(store)
            .args(["--broker", nats, "--ordering", "--poll-interval", "100ms"])
            .args(["--admin-listen", &admin, "--log-format", "text"])
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap();
        Self {
            child,
            admin,
            log,
            _dir: dir,
        }
    }

    /// What it wrote.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// `idem_outbox_published_total`: the messages the broker confirmed (0 before the first).
    async fn published(&self) -> u64 {
        let url = format!("http://{}/metrics", self.admin);
        let reply = Client::new()
            .send(Request::get(url).body(axum::body::Body::empty()).unwrap())
            .await;
        reply
            .text()
            .lines()
            .find(|line| line.starts_with("idem_outbox_published_total{"))
            .map_or(0, |line| line.rsplit(' ').next().unwrap().parse().unwrap())
    }

    /// Stops it with SIGTERM; it exits 0.
    async fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = tokio::time::timeout(EVENTUALLY, async {
            loop {
                if let Some(status) = self.child.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the relay exits after SIGTERM");
        assert_eq!(exit.code(), Some(0), "{}", self.log());
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
