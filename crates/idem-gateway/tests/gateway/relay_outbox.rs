//! `idem relay`'s `GET /v1/outbox`: the exact counts of the outbox it publishes, as JSON, behind
//! the admin token, on PostgreSQL, MySQL and SQLite.
//!
//! The test arranges an outbox that stays still while the process runs: two dead letters, one
//! message claimed by a relay of the test's own whose broker never answers (in flight), and three
//! due messages of the same ordering key, which the process, relaying with `--ordering`, does
//! not claim while the first of their key is pending.

use std::{
    process::Stdio,
    sync::Arc,
    time::{Duration, SystemTime},
};

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::{client::legacy::Client as HyperClient, rt::TokioExecutor};
use idem_messaging::{
    Confirmations, Envelope, MysqlOutbox, Outbox, OutboxDatabase, OutboxMessage, OutboxOptions,
    PgOutbox, PublishError, Publisher, Relay, SqliteOutbox,
};
use idem_test_support::{MysqlDatabase, PgSchema, Server};
use serde_json::{Value, json};
use sqlx::Pool;
use tokio::sync::Notify;
use tokio_util::task::AbortOnDropHandle;

use crate::{
    servers::free_port,
    support::{Reply, Running, idem_command},
};

/// How long a test waits for something that should happen in milliseconds.
const EVENTUALLY: Duration = Duration::from_secs(60);

/// The admin token the process is given.
const TOKEN: &str = "relay-admin-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_counts_on_postgres_are_exact_json_behind_the_token() {
    let Some(postgres) = Server::Postgres.url() else {
        return;
    };
    let schema = PgSchema::create(&postgres).await;
    let pool = sqlx::PgPool::connect(&postgres).await.unwrap();
    let outbox = PgOutbox::new(OutboxOptions::new().schema(schema.name().parse().unwrap()));
    outbox.migrate(&pool).await.unwrap();
    let (_holder, earliest) = arrange(&pool, &outbox).await;
    let due_millis: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        r#"SELECT floor(extract(epoch FROM available_at) * 1000)::bigint
           FROM "{}".idem_outbox WHERE id = $1::uuid"#,
        schema.name()
    )))
    .bind(&earliest)
    .fetch_one(&pool)
    .await
    .unwrap();

    check_the_counts(
        &["--store", &postgres, "--outbox-schema", schema.name()],
        due_millis,
    )
    .await;
}

/// `--store mysql://…/DATABASE`: the outbox in the URL's database, without `--outbox-schema`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_counts_on_mysql_are_exact_json_behind_the_token() {
    let Some(mysql) = Server::Mysql.url() else {
        return;
    };
    let database = MysqlDatabase::create(&mysql).await;
    let pool = sqlx::MySqlPool::connect_with(database.connect_options())
        .await
        .unwrap();
    let outbox = MysqlOutbox::new(OutboxOptions::new());
    outbox.migrate(&pool).await.unwrap();
    let (_holder, earliest) = arrange(&pool, &outbox).await;
    let due_millis: i64 = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', available_at) DIV 1000 AS SIGNED)
         FROM idem_outbox WHERE id = UNHEX(REPLACE(?, '-', ''))",
    )
    .bind(&earliest)
    .fetch_one(&pool)
    .await
    .unwrap();

    check_the_counts(&["--store", &database.url()], due_millis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_counts_on_sqlite_are_exact_json_behind_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("service.db").display());
    let options = store
        .parse::<sqlx::sqlite::SqliteConnectOptions>()
        .unwrap()
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let outbox = SqliteOutbox::new(OutboxOptions::new());
    outbox.migrate(&pool).await.unwrap();
    let (_holder, earliest) = arrange(&pool, &outbox).await;
    let due_millis: i64 =
        sqlx::query_scalar("SELECT available_at FROM main.idem_outbox WHERE id = ?1")
            .bind(&earliest)
            .fetch_one(&pool)
            .await
            .unwrap();

    check_the_counts(&["--store", &store], due_millis).await;
}

/// Starts `idem relay` with `store_args` and the admin token, and checks `/v1/outbox`: 401
/// without the token or with another, and with it, the arranged counts, the oldest due time
/// being `due_millis`.
async fn check_the_counts(store_args: &[&str], due_millis: i64) {
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), format!("{TOKEN}\n")).unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let _relay = Running(
        idem_command()
            .arg("relay")
            .args(store_args)
            // Nothing listens there: the process must publish nothing, and does not.
            .args(["--broker", "nats://127.0.0.1:9", "--ordering"])
            .args(["--admin-listen", &admin, "--admin-token-file"])
            .arg(token.path())
            .args(["--log-level", "off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://{admin}/v1/outbox");

    // Answered once the process has reached its database (a 503 until then).
    let reply = tokio::time::timeout(EVENTUALLY, async {
        loop {
            if let Some(reply) = get(&url, Some(TOKEN)).await
                && reply.status == StatusCode::OK
            {
                return reply;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(reply.header("content-type"), "application/json");
    let oldest_due = humantime::format_rfc3339_millis(
        SystemTime::UNIX_EPOCH + Duration::from_millis(due_millis.try_into().unwrap()),
    )
    .to_string();
    assert_eq!(
        reply.json(),
        json!({"due": 3, "in_flight": 1, "dead_letters": 2, "oldest_due": oldest_due})
    );

    for wrong in [None, Some("relay-tokem")] {
        let refused = get(&url, wrong).await.unwrap();
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert_eq!(refused.header("www-authenticate"), "Bearer");
        assert_eq!(refused.header("content-type"), "application/problem+json");
        assert_eq!(
            refused.json()["type"],
            Value::from("urn:idem:problem:unauthorized")
        );
    }
}

/// Two dead letters; then four messages of the key `order-42`, the first claimed by a relay of
/// the test's own whose broker never answers. Returns that relay's task, which ends its claim
/// when dropped, and the id of the second message, the earliest due.
async fn arrange<DB: OutboxDatabase>(
    pool: &Pool<DB>,
    outbox: &Outbox<DB>,
) -> (AbortOnDropHandle<()>, String) {
    enqueue(pool, outbox, "nowhere", None, 2).await;
    let report = Relay::new(pool.clone(), outbox.clone(), Refusing)
        .max_attempts(1)
        .batch_size(2)
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 2);

    let ids = enqueue(pool, outbox, "orders", Some("order-42"), 4).await;
    let claimed = Arc::new(Notify::new());
    let holding = Relay::new(pool.clone(), outbox.clone(), Silent(Arc::clone(&claimed)))
        .batch_size(1)
        .ordering(true)
        .lease(EVENTUALLY)
        .publish_timeout(EVENTUALLY);
    let holder = AbortOnDropHandle::new(tokio::spawn(async move {
        let _ = holding.run_once().await;
    }));
    claimed.notified().await;
    (holder, ids[1].clone())
}

/// Enqueues `count` messages in one transaction; their ids, in order.
async fn enqueue<DB: OutboxDatabase>(
    pool: &Pool<DB>,
    outbox: &Outbox<DB>,
    destination: &str,
    key: Option<&str>,
    count: usize,
) -> Vec<String> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for n in 0..count {
        let mut message = OutboxMessage::new(destination, n.to_string());
        if let Some(key) = key {
            message = message.ordering_key(key);
        }
        ids.push(outbox.enqueue(&mut *tx, message).await.unwrap().to_string());
    }
    tx.commit().await.unwrap();
    ids
}

/// `GET url`, with `token` as a bearer token; `None` while nothing listens.
async fn get(url: &str, token: Option<&str>) -> Option<Reply> {
    let mut request = Request::get(url);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let client = HyperClient::builder(TokioExecutor::new()).build_http::<Body>();
    let response = client
        .request(request.body(Body::empty()).unwrap())
        .await
        .ok()?;
    let (parts, body) = response.into_parts();
    Some(Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    })
}

/// A broker that refuses every message.
struct Refusing;

impl Publisher for Refusing {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        batch
            .iter()
            .map(|_| {
                Err(PublishError::Rejected {
                    reason: "no such queue".to_owned(),
                })
            })
            .collect()
    }
}

/// A broker that takes a batch and never answers; tells when it has one.
struct Silent(Arc<Notify>);

impl Publisher for Silent {
    async fn publish_batch(&self, _: &[Envelope]) -> Confirmations {
        self.0.notify_one();
        std::future::pending().await
    }
}
