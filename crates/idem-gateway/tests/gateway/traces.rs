//! One trace across every hop, exported over OTLP to a receiver of the test's own: a client's
//! request through `idem serve` to an order API that writes an outbox message in its
//! transaction, `idem relay` to RabbitMQ, `idem deliver` to a second `idem serve` and the
//! consumer behind it; and a retry's replay, linked to the execution's trace.

use std::{
    collections::HashMap,
    net::SocketAddr,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use idem_messaging::{OutboxMessage, OutboxOptions, SqliteOutbox};
use idem_test_support::{Server, free_port, unique_name};
use lapin::{
    Connection, ConnectionProperties,
    options::{QueueDeclareOptions, QueueDeleteOptions},
    types::{AMQPValue, FieldTable},
};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{AnyValue, KeyValue, any_value::Value as Any},
};
use prost::Message as _;
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode},
};
use tokio::net::TcpListener;

use crate::support::{Client, Gateway, Running, idem_command};

/// How long the spans of every hop may take to arrive.
const EVENTUALLY: Duration = Duration::from_secs(30);

/// One exported span, as the receiver decoded it.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, String>,
    /// The linked spans: (trace id, span id).
    links: Vec<(String, String)>,
}

type Spans = Arc<Mutex<Vec<Exported>>>;

/// An OTLP/HTTP receiver (protobuf) on a free loopback port, keeping every span it is sent.
async fn receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let app = Router::new()
        .route("/v1/traces", post(collect))
        .with_state(Arc::clone(&spans));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

async fn collect(State(spans): State<Spans>, body: Bytes) -> StatusCode {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
    let mut spans = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.unwrap_or_default();
        let service = attributes(&resource.attributes)
            .remove("service.name")
            .unwrap_or_default();
        for span in resource_spans
            .scope_spans
            .into_iter()
            .flat_map(|scope| scope.spans)
        {
            spans.push(Exported {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: attributes(&span.attributes),
                links: span
                    .links
                    .iter()
                    .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
                    .collect(),
            });
        }
    }
    StatusCode::OK
}

fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            let value = match pair
                .value
                .as_ref()
                .and_then(|v: &AnyValue| v.value.as_ref())
            {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(n)) => n.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (pair.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An `idem` command that exports its spans to `endpoint` as `service`, within 100 ms.
fn traced(service: &str, endpoint: &str) -> Command {
    let mut command = idem_command();
    command
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    command
}

/// The order API: each `POST /orders` writes an order and its outbox message in one
/// transaction, the message carrying the `traceparent` the API was called with, as a writer in
/// any language does.
async fn order_api(pool: SqlitePool, queue: String) -> SocketAddr {
    let outbox = SqliteOutbox::new(OutboxOptions::new());
    outbox.migrate(&pool).await.unwrap();
    sqlx::query("CREATE TABLE orders (n INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let app = Router::new().route(
        "/orders",
        post(move |headers: HeaderMap, body: String| {
            let (pool, outbox, queue) = (pool.clone(), outbox.clone(), queue.clone());
            async move {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("INSERT INTO orders (body) VALUES (?1)")
                    .bind(&body)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                let mut message = OutboxMessage::new(queue, body.clone());
                if let Some(parent) = headers.get("traceparent") {
                    message = message.header("traceparent", parent.to_str().unwrap());
                }
                outbox.enqueue(&mut tx, message).await.unwrap();
                tx.commit().await.unwrap();
                if headers.contains_key("x-slow") {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                (StatusCode::CREATED, body)
            }
        }),
    );
    serve(app).await
}

/// What the consumer was sent: (Idempotency-Key, traceparent) per request it applied.
type Shipped = Arc<Mutex<Vec<(String, String)>>>;

/// The consumer: applies every `POST /ship` it is sent (the gateway in front dedupes).
async fn consumer(shipped: Shipped) -> SocketAddr {
    let app = Router::new().route(
        "/ship",
        post(move |headers: HeaderMap| {
            let shipped = Arc::clone(&shipped);
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default()
                };
                shipped
                    .lock()
                    .unwrap()
                    .push((header("idempotency-key"), header("traceparent")));
                StatusCode::OK
            }
        }),
    );
    serve(app).await
}

async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The one span named `name` of `service` in `trace`, waiting for it to be exported.
async fn span(spans: &Spans, service: &str, name: &str, trace: &str) -> Exported {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let found: Vec<Exported> = spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.service == service && s.name == name && s.trace_id == trace)
            .cloned()
            .collect();
        match found.as_slice() {
            [one] => return one.clone(),
            [] if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ => panic!(
                "expected one {name} span of {service} in trace {trace}, got {found:#?}\nall: {:#?}",
                spans.lock().unwrap()
            ),
        }
    }
}

/// The trace context a request to the gateway starts with: a trace and a span of the client's.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// The retry's: another trace.
const RETRY_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const RETRY_SPAN: &str = "b7ad6b7169203331";
/// The trace of a request whose client goes away before the answer.
const GONE_TRACE: &str = "5a3d0b7e9f6c4e21a8b1c2d3e4f50617";
const GONE_SPAN: &str = "1f2e3d4c5b6a7980";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_is_one_trace_from_the_client_to_the_consumer_and_a_replay_links_to_it() {
    let Some(amqp) = Server::Amqp.url() else {
        return;
    };
    let (endpoint, spans) = receiver().await;
    let dir = tempfile::tempdir().unwrap();

    // RabbitMQ: a queue of the test's own, on the default exchange.
    let connection = Connection::connect(&amqp, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    let queue = unique_name("idem_test_traces_");
    let mut arguments = FieldTable::default();
    arguments.insert("x-expires".into(), AMQPValue::LongUInt(600_000));
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.as_str().into(), durable, arguments)
        .await
        .unwrap();

    // The consumer behind its gateway.
    let shipped = Shipped::default();
    let consumer = consumer(Arc::clone(&shipped)).await;
    let mut command = traced("shipping-gateway", &endpoint);
    command.args(["serve", "--upstream", &format!("http://{consumer}")]);
    let shipping = Gateway::spawn(command, &["--store", "memory://"]);

    // The order API behind its gateway, its outbox in its own SQLite database.
    let database = dir.path().join("orders.db");
    let options = SqliteConnectOptions::new()
        .filename(&database)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePool::connect_with(options).await.unwrap();
    let api = order_api(pool, queue.clone()).await;
    let mut command = traced("order-gateway", &endpoint);
    command.args(["serve", "--upstream", &format!("http://{api}")]);
    let orders = Gateway::spawn(command, &["--store", "memory://"]);

    // The relay from the outbox to RabbitMQ, the deliverer from RabbitMQ to the consumer's
    // gateway.
    let store = format!("sqlite://{}", database.display());
    let admin = format!("127.0.0.1:{}", free_port());
    let mut command = traced("relay", &endpoint);
    command
        .args(["relay", "--store", &store, "--broker", &amqp])
        .args(["--poll-interval", "100ms", "--admin-listen", &admin])
        .stdout(Stdio::null());
    let relay = Running::spawn(command, &admin).await;
    let admin = format!("127.0.0.1:{}", free_port());
    let mut command = traced("deliver", &endpoint);
    command
        .args(["deliver", "--broker", &amqp, "--from", &queue])
        .args(["--to", &shipping.url("/ship"), "--admin-listen", &admin])
        .stdout(Stdio::null());
    let deliver = Running::spawn(command, &admin).await;

    let client = Client::new();
    let order = |trace: &str, span: &str| {
        axum::http::Request::post(orders.url("/orders"))
            .header("idempotency-key", "order-1")
            .header("traceparent", format!("00-{trace}-{span}-01"))
            .body(axum::body::Body::from(r#"{"item":"book"}"#))
            .unwrap()
    };
    let first = client.send(order(CLIENT_TRACE, CLIENT_SPAN)).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let retry = client.send(order(RETRY_TRACE, RETRY_SPAN)).await;
    assert_eq!(retry.status, StatusCode::CREATED);
    assert!(retry.replayed());

    // The order gateway continues the client's trace: its server span is the client span's
    // child, and the layer's spans are its own.
    let trace = CLIENT_TRACE;
    let request = span(&spans, "order-gateway", "POST", trace).await;
    assert_eq!(request.parent_span_id, CLIENT_SPAN);
    assert_eq!(request.attributes["idem.outcome"], "executed");
    assert_eq!(request.attributes["http.response.status_code"], "201");
    let digest = request.attributes["idem.key_digest"].clone();
    assert_eq!(digest.len(), 16, "{digest}");
    assert!(!digest.contains("order-1"));
    let acquire = span(&spans, "order-gateway", "idem.acquire", trace).await;
    assert_eq!(acquire.parent_span_id, request.span_id);
    assert_eq!(acquire.attributes["idem.outcome"], "acquired");
    assert_eq!(acquire.attributes["idem.key_digest"], digest);
    let execute = span(&spans, "order-gateway", "idem.execute", trace).await;
    assert_eq!(execute.parent_span_id, request.span_id);
    assert_eq!(execute.attributes["idem.outcome"], "response");
    let complete = span(&spans, "order-gateway", "idem.complete", trace).await;
    assert_eq!(complete.parent_span_id, request.span_id);
    assert_eq!(complete.attributes["idem.outcome"], "recorded");
    assert_eq!(complete.attributes["idem.settlement"], "response");

    // The relay publishes in the trace the API wrote into the outbox (the execution's), and
    // the deliverer delivers in the relay's.
    let publish = span(&spans, "relay", "idem.publish", trace).await;
    assert_eq!(publish.parent_span_id, execute.span_id);
    assert_eq!(publish.attributes["idem.outcome"], "published");
    let delivered = span(&spans, "deliver", "idem.deliver", trace).await;
    assert_eq!(delivered.parent_span_id, publish.span_id);
    assert_eq!(delivered.attributes["idem.outcome"], "delivered");

    // The consumer's gateway continues the deliverer's, and the consumer gets its execution's.
    let consumed = span(&spans, "shipping-gateway", "POST", trace).await;
    assert_eq!(consumed.parent_span_id, delivered.span_id);
    assert_eq!(consumed.attributes["idem.outcome"], "executed");
    let consumer_execute = span(&spans, "shipping-gateway", "idem.execute", trace).await;
    assert_eq!(consumer_execute.parent_span_id, consumed.span_id);
    let shipped = shipped.lock().unwrap().clone();
    assert_eq!(shipped.len(), 1, "{shipped:?}");
    assert_eq!(
        shipped[0].1,
        format!("00-{trace}-{}-01", consumer_execute.span_id)
    );

    // The retry is a trace of its own whose replay links to the execution.
    let retried = span(&spans, "order-gateway", "POST", RETRY_TRACE).await;
    assert_eq!(retried.parent_span_id, RETRY_SPAN);
    assert_eq!(retried.attributes["idem.outcome"], "replayed");
    assert_eq!(retried.attributes["idem.key_digest"], digest);
    let replay = span(&spans, "order-gateway", "idem.replay", RETRY_TRACE).await;
    assert_eq!(replay.parent_span_id, retried.span_id);
    assert_eq!(replay.attributes["idem.outcome"], "response");
    assert_eq!(
        replay.links,
        vec![(CLIENT_TRACE.to_owned(), execute.span_id.clone())]
    );
    let again = span(&spans, "order-gateway", "idem.acquire", RETRY_TRACE).await;
    assert_eq!(again.attributes["idem.outcome"], "completed");
    // Nothing of the retry ran again: no execution in its trace.
    assert!(
        spans
            .lock()
            .unwrap()
            .iter()
            .all(|s| !(s.trace_id == RETRY_TRACE && s.name == "idem.execute")),
    );

    // A client that goes away mid-request: the execution finishes without it, its spans still
    // in the request's trace.
    let gone = axum::http::Request::post(orders.url("/orders"))
        .header("idempotency-key", "order-2")
        .header("traceparent", format!("00-{GONE_TRACE}-{GONE_SPAN}-01"))
        .header("x-slow", "1")
        .body(axum::body::Body::from(r#"{"item":"pen"}"#))
        .unwrap();
    let sent = tokio::time::timeout(Duration::from_millis(200), client.send(gone)).await;
    assert!(sent.is_err(), "the client gave up before the answer");
    let abandoned = span(&spans, "order-gateway", "POST", GONE_TRACE).await;
    assert_eq!(abandoned.parent_span_id, GONE_SPAN);
    let execute = span(&spans, "order-gateway", "idem.execute", GONE_TRACE).await;
    assert_eq!(execute.parent_span_id, abandoned.span_id);
    assert_eq!(execute.attributes["idem.outcome"], "response");
    let complete = span(&spans, "order-gateway", "idem.complete", GONE_TRACE).await;
    assert_eq!(complete.parent_span_id, abandoned.span_id);
    assert_eq!(complete.attributes["idem.outcome"], "recorded");

    drop((relay, deliver, orders, shipping));
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}
