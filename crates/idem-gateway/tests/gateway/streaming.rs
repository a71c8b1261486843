//! Streamed responses through `idem serve`, on every store: events reach the client as the
//! upstream sends them, a retry replays them all, a stream cut off ends abnormally and follows
//! `--ambiguous`, a stream over `--max-stored-response` is delivered whole and not replayed, and
//! a duplicate in wait mode joins the stream and follows it live.

use std::time::Duration;

use axum::{
    body::{Body, Bytes},
    http::{Request, Response, StatusCode},
};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tempfile::TempDir;

use crate::{
    servers::{MysqlDb, PgSchema, RedisPrefix},
    support::{Client, Gateway, Upstream, idem, sqlite_url},
};

/// How long a test waits for what must happen, before it fails rather than hangs.
const PATIENCE: Duration = Duration::from_secs(20);

/// A store for one test, and what keeps it alive until the test ends.
enum TestStore {
    Memory,
    Sqlite(TempDir),
    Postgres(PgSchema),
    Mysql(MysqlDb),
    Redis(RedisPrefix),
}

impl TestStore {
    /// The store called `kind`, migrated; `None` when its server is not configured (the test is
    /// skipped).
    async fn open(kind: &str) -> Option<Self> {
        let store = match kind {
            "memory" => Self::Memory,
            "sqlite" => Self::Sqlite(tempfile::tempdir().unwrap()),
            "postgres" => Self::Postgres(PgSchema::new()?),
            "mysql" => Self::Mysql(MysqlDb::new().await?),
            "redis" => Self::Redis(RedisPrefix::new()?),
            other => panic!("no store {other}"),
        };
        if matches!(store, Self::Postgres(_) | Self::Mysql(_)) {
            let migrated = idem(&["migrate", "--store", &store.url()]);
            assert_eq!(migrated.code, Some(0), "{}", migrated.stderr);
        }
        Some(store)
    }

    fn url(&self) -> String {
        match self {
            Self::Memory => "memory://".to_owned(),
            Self::Sqlite(dir) => sqlite_url(dir.path(), "idem.db"),
            Self::Postgres(schema) => schema.store_url(),
            Self::Mysql(database) => database.store_url(),
            Self::Redis(prefix) => prefix.store_url(),
        }
    }
}

/// Each case run on each of the stores listed: a test per store, in a module named after the case.
macro_rules! on_stores {
    ($stores:tt: $($case:ident),* $(,)?) => {$(
        on_stores!(@case $case $stores);
    )*};
    (@case $case:ident [$($store:ident),*]) => {
        mod $case {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    super::run(stringify!($store), super::$case).await;
                }
            )*
        }
    };
}

on_stores!(
    [memory, sqlite, postgres, mysql, redis]:
    events_reach_the_client_as_they_come_and_a_retry_replays_them,
    a_stream_cut_off_ends_abnormally_and_releases_its_key,
    a_stream_cut_off_under_reject_is_replayed_as_outcome_unknown,
    a_stream_over_the_stored_limit_is_delivered_whole_and_not_replayed,
    a_duplicate_in_wait_mode_joins_the_stream_live,
);

async fn run<F, Fut>(kind: &str, case: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(store) = TestStore::open(kind).await else {
        return;
    };
    case(store.url()).await;
}

/// `POST /events` with `key`, `headers` set on it (`x-events`, `x-every-ms`, `x-cut-after`).
fn events(gateway: &Gateway, key: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::post(gateway.url("/events")).header("idempotency-key", key);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).unwrap()
}

/// The next thing read from a streamed response.
#[derive(Debug, PartialEq)]
enum Read {
    Data(Bytes),
    End,
    /// The response ended abnormally.
    Failed,
}

async fn next(response: &mut Response<Incoming>) -> Read {
    let frame = tokio::time::timeout(PATIENCE, response.body_mut().frame())
        .await
        .expect("the next frame comes");
    match frame {
        None => Read::End,
        Some(Err(_)) => Read::Failed,
        Some(Ok(frame)) => Read::Data(frame.into_data().expect("no trailers")),
    }
}

/// Everything left of `response`'s body, and how it ended.
async fn rest(response: &mut Response<Incoming>) -> (String, Read) {
    let mut text = String::new();
    loop {
        match next(response).await {
            Read::Data(data) => text.push_str(std::str::from_utf8(&data).unwrap()),
            end => return (text, end),
        }
    }
}

fn events_text(range: std::ops::RangeInclusive<u64>) -> String {
    range.map(|n| format!("data: {n}\n\n")).collect()
}

async fn events_reach_the_client_as_they_come_and_a_retry_replays_them(store: String) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    let client = Client::new();

    // Ten events 300 ms apart: the first reaches the client before the upstream sent the second.
    let mut first = client.start(events(&gateway, "stream-1", &[])).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    assert_eq!(first.headers()["transfer-encoding"], "chunked");
    assert_eq!(
        next(&mut first).await,
        Read::Data(Bytes::from("data: 1\n\n"))
    );
    assert_eq!(upstream.hits("events-sent"), 1);
    assert_eq!(rest(&mut first).await, (events_text(2..=10), Read::End));

    // The replay is a stream too: chunked, one event per chunk.
    let mut retry = client.start(events(&gateway, "stream-1", &[])).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["content-type"], "text/event-stream");
    assert_eq!(retry.headers()["transfer-encoding"], "chunked");
    assert!(retry.headers().get("content-length").is_none());
    let mut replayed = Vec::new();
    loop {
        match next(&mut retry).await {
            Read::Data(event) => replayed.push(event),
            end => {
                assert_eq!(end, Read::End);
                break;
            }
        }
    }
    let each: Vec<Bytes> = (1..=10)
        .map(|n| Bytes::from(format!("data: {n}\n\n")))
        .collect();
    assert_eq!(replayed, each);
    assert_eq!(upstream.hits("events"), 1);
    gateway.stop().await;
}

async fn a_stream_cut_off_ends_abnormally_and_releases_its_key(store: String) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", &store]);
    let client = Client::new();
    let cut = [("x-every-ms", "20"), ("x-cut-after", "3")];

    let mut first = client.start(events(&gateway, "cut-1", &cut)).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(rest(&mut first).await, (events_text(1..=3), Read::Failed));
    // Released before the client saw the end: the retry executes again.
    let mut retry = client.start(events(&gateway, "cut-1", &cut)).await;
    assert_eq!(rest(&mut retry).await, (events_text(1..=3), Read::Failed));
    assert_eq!(upstream.hits("events"), 2);
    gateway.stop().await;
}

async fn a_stream_cut_off_under_reject_is_replayed_as_outcome_unknown(store: String) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", &store, "--ambiguous", "reject"],
    );
    let client = Client::new();
    let cut = [("x-every-ms", "20"), ("x-cut-after", "3")];

    let mut first = client.start(events(&gateway, "cut-2", &cut)).await;
    assert_eq!(rest(&mut first).await, (events_text(1..=3), Read::Failed));
    let retry = client.send(events(&gateway, "cut-2", &cut)).await;
    assert!(retry.replayed());
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.json()["type"], "urn:idem:problem:outcome-unknown");
    assert_eq!(upstream.hits("events"), 1);
    gateway.stop().await;
}

async fn a_stream_over_the_stored_limit_is_delivered_whole_and_not_replayed(store: String) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", &store, "--max-stored-response", "40"],
    );
    let client = Client::new();
    let quick = [("x-every-ms", "10")];

    let mut first = client.start(events(&gateway, "big-1", &quick)).await;
    assert_eq!(rest(&mut first).await, (events_text(1..=10), Read::End));
    let retry = client.send(events(&gateway, "big-1", &quick)).await;
    assert!(retry.replayed());
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.json()["type"], "urn:idem:problem:response-not-stored");
    assert_eq!(upstream.hits("events"), 1);
    gateway.stop().await;
}

async fn a_duplicate_in_wait_mode_joins_the_stream_live(store: String) {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            &store,
            "--in-flight",
            "wait",
            "--wait-timeout",
            "20s",
        ],
    );
    let client = Client::new();
    let paced = [("x-every-ms", "100")];

    let mut first = client.start(events(&gateway, "joined-1", &paced)).await;
    assert_eq!(
        next(&mut first).await,
        Read::Data(Bytes::from("data: 1\n\n"))
    );
    // The duplicate gets the head and the events so far while the upstream is still sending.
    let mut joined = client.start(events(&gateway, "joined-1", &paced)).await;
    assert_eq!(joined.status(), StatusCode::OK);
    assert_eq!(joined.headers()["idempotent-replayed"], "true");
    assert_eq!(joined.headers()["content-type"], "text/event-stream");
    let Read::Data(so_far) = next(&mut joined).await else {
        panic!("the events so far")
    };
    assert!(upstream.hits("events-sent") < 10, "joined while streaming");
    assert_eq!(streams_gauges(&client, &gateway).await, (1.0, 1.0));
    // The admin API shows how much of the stream the record holds so far: whole events of 9
    // bytes each, soon those the duplicate got (each goes to the store after the clients have it).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let stream = loop {
        let shown = client
            .send(
                Request::get(gateway.admin_url("/v1/keys/joined-1"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        let record = shown.json();
        assert_eq!(record["state"], "processing", "{record}");
        let stream = record["stream"].clone();
        if stream["bytes"].as_u64().unwrap_or(0) >= so_far.len() as u64 {
            break stream;
        }
        assert!(tokio::time::Instant::now() < deadline, "{record}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let chunks = stream["chunks"].as_u64().unwrap();
    assert_eq!(
        (&stream["bytes"], &stream["past_limit"]),
        (&(chunks * 9).into(), &false.into())
    );
    let (text, end) = rest(&mut joined).await;
    assert_eq!(
        (
            std::str::from_utf8(&so_far).unwrap().to_owned() + &text,
            end
        ),
        (events_text(1..=10), Read::End)
    );
    assert_eq!(rest(&mut first).await, (events_text(2..=10), Read::End));
    assert_eq!(upstream.hits("events"), 1);
    // Both gauges come back to 0 once the stream is recorded and the joined response is done.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while streams_gauges(&client, &gateway).await != (0.0, 0.0) {
        assert!(tokio::time::Instant::now() < deadline, "the gauges stay up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gateway.stop().await;
}

/// `idem_streams_in_progress` and `idem_stream_joiners`, from the admin listener's `/metrics`.
async fn streams_gauges(client: &Client, gateway: &Gateway) -> (f64, f64) {
    let request = Request::get(gateway.admin_url("/metrics"))
        .body(Body::empty())
        .unwrap();
    let metrics = client.send(request).await;
    let gauge = |name: &str| {
        metrics
            .text()
            .lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {name} in:\n{}", metrics.text()))
    };
    (
        gauge("idem_streams_in_progress"),
        gauge("idem_stream_joiners"),
    )
}

/// Two gateways on one store, in wait mode, and a client.
async fn two_gateways(store: &str, extra: &[&str]) -> (Upstream, Gateway, Gateway, Client) {
    let upstream = Upstream::start().await;
    let mut args = vec![
        "--store",
        store,
        "--in-flight",
        "wait",
        "--wait-timeout",
        "20s",
    ];
    args.extend_from_slice(extra);
    let (one, other) = (
        Gateway::start(&upstream.url(), &args),
        Gateway::start(&upstream.url(), &args),
    );
    (upstream, one, other, Client::new())
}

/// On another gateway sharing the store, a duplicate in wait mode follows the stream through the
/// store: the events so far while the upstream is still sending, then each as it is appended,
/// then the end once the stream is recorded.
async fn a_duplicate_on_another_gateway_follows_the_stream_live(store: String) {
    let (upstream, one, other, client) = two_gateways(&store, &[]).await;
    let paced = [("x-every-ms", "150")];

    let mut first = client.start(events(&one, "shared-1", &paced)).await;
    assert_eq!(
        next(&mut first).await,
        Read::Data(Bytes::from("data: 1\n\n"))
    );
    let mut followed = client.start(events(&other, "shared-1", &paced)).await;
    assert_eq!(followed.status(), StatusCode::OK);
    assert_eq!(followed.headers()["idempotent-replayed"], "true");
    assert_eq!(followed.headers()["content-type"], "text/event-stream");
    assert!(followed.headers().get("content-length").is_none());
    let Read::Data(so_far) = next(&mut followed).await else {
        panic!("the events so far")
    };
    assert!(
        upstream.hits("events-sent") < 10,
        "followed while streaming"
    );
    assert_eq!(streams_gauges(&client, &other).await, (0.0, 1.0));
    let (text, end) = rest(&mut followed).await;
    assert_eq!(
        (
            std::str::from_utf8(&so_far).unwrap().to_owned() + &text,
            end
        ),
        (events_text(1..=10), Read::End)
    );
    assert_eq!(rest(&mut first).await, (events_text(2..=10), Read::End));
    assert_eq!(upstream.hits("events"), 1);
    // And a retry on either gateway replays it.
    for gateway in [&one, &other] {
        let replay = client.send(events(gateway, "shared-1", &paced)).await;
        assert!(replay.replayed());
        assert_eq!(replay.text(), events_text(1..=10));
    }
    assert_eq!(upstream.hits("events"), 1);
    one.stop().await;
    other.stop().await;
}

/// A stream cut off on one gateway ends the response of the duplicate that follows it on the
/// other abnormally, and its key is released (`--ambiguous retry`).
async fn a_stream_cut_off_ends_its_followers_on_other_gateways_abnormally(store: String) {
    let (upstream, one, other, client) = two_gateways(&store, &[]).await;
    let cut = [("x-every-ms", "150"), ("x-cut-after", "5")];

    let mut first = client.start(events(&one, "shared-cut", &cut)).await;
    assert_eq!(
        next(&mut first).await,
        Read::Data(Bytes::from("data: 1\n\n"))
    );
    let mut followed = client.start(events(&other, "shared-cut", &cut)).await;
    assert_eq!(followed.headers()["idempotent-replayed"], "true");
    let (text, end) = rest(&mut followed).await;
    assert_eq!(
        (text.len() <= events_text(1..=5).len(), end),
        (true, Read::Failed)
    );
    assert_eq!(rest(&mut first).await.1, Read::Failed);
    assert_eq!(upstream.hits("events"), 1);
    one.stop().await;
    other.stop().await;
}

/// Past `--max-stored-response`, a duplicate that follows from another gateway cannot get the
/// rest (the store keeps no more): its response ends abnormally; one that comes later waits for
/// the record and gets the response-not-stored problem.
async fn past_the_limit_a_follower_on_another_gateway_ends_abnormally(store: String) {
    let (upstream, one, other, client) =
        two_gateways(&store, &["--max-stored-response", "40"]).await;
    let paced = [("x-every-ms", "150")];

    let mut first = client.start(events(&one, "shared-over", &paced)).await;
    assert_eq!(
        next(&mut first).await,
        Read::Data(Bytes::from("data: 1\n\n"))
    );
    let mut followed = client.start(events(&other, "shared-over", &paced)).await;
    assert_eq!(followed.headers()["idempotent-replayed"], "true");
    assert_eq!(rest(&mut followed).await.1, Read::Failed);
    assert!(upstream.hits("events-sent") < 10, "ended while streaming");
    let later = client.send(events(&other, "shared-over", &paced)).await;
    assert_eq!(later.status, StatusCode::OK);
    assert!(
        later.text().contains("response-not-stored"),
        "{}",
        later.text()
    );
    assert_eq!(rest(&mut first).await, (events_text(2..=10), Read::End));
    assert_eq!(upstream.hits("events"), 1);
    one.stop().await;
    other.stop().await;
}

// The cases with two gateways, on every store that can be shared.
on_stores!(
    [sqlite, postgres, mysql, redis]:
    a_duplicate_on_another_gateway_follows_the_stream_live,
    a_stream_cut_off_ends_its_followers_on_other_gateways_abnormally,
    past_the_limit_a_follower_on_another_gateway_ends_abnormally,
);
