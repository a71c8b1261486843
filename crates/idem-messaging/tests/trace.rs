//! W3C trace context through the outbox, the relay and the inbox (the `opentelemetry` feature),
//! on SQLite: the context an enqueue keeps in the row, the `idem.publish` span that continues it
//! and the context the broker's message carries in its place, and the `idem.consume` span that
//! continues a received message's. The W3C propagator is this binary's global one; each test
//! records its own thread's spans.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{
    sync::{Arc, Mutex, Once},
    time::Duration,
};

use futures_util::future::BoxFuture;
use idem_messaging::{
    BoxError, ConsumerName, Handled, InboxOptions, OutboxMessage, OutboxOptions, PublishError,
    Relay, SqliteInbox, SqliteOutbox,
    consume::{Message, Received, Settle},
};
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions},
};
use tracing::Instrument as _;

use common::{
    Recorder,
    traces::{PARENT_ID, TRACE_ID, TRACEPARENT, Traces, attribute, traceparent, traceparent_of},
};

/// Sets the W3C propagator, once for the binary.
fn w3c() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    });
}

/// A database file of the test's own, in WAL mode, as a service would open it.
struct Db {
    pool: SqlitePool,
    _dir: tempfile::TempDir,
}

impl Db {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("service.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .unwrap();
        Self { pool, _dir: dir }
    }

    async fn outbox(&self) -> SqliteOutbox {
        let outbox = SqliteOutbox::new(OutboxOptions::new());
        outbox.migrate(&self.pool).await.unwrap();
        outbox
    }

    /// Enqueues `messages` in one transaction.
    async fn enqueue(&self, outbox: &SqliteOutbox, messages: Vec<OutboxMessage>) -> Vec<String> {
        let mut tx = self.pool.begin().await.unwrap();
        let mut ids = Vec::new();
        for message in messages {
            ids.push(outbox.enqueue(&mut *tx, message).await.unwrap().to_string());
        }
        tx.commit().await.unwrap();
        ids
    }

    /// The `headers` column of each row, in enqueue order.
    async fn stored_headers(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT headers FROM main.idem_outbox ORDER BY seq")
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }
}

fn pairs(headers: &[(&str, &str)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

#[tokio::test]
async fn an_enqueue_in_a_traced_span_keeps_its_context_unless_the_message_carries_one() {
    w3c();
    let _traces = Traces::start();
    let db = Db::new().await;
    let outbox = db.outbox().await;
    let checkout = tracing::info_span!("checkout");
    let expected = traceparent_of(&checkout);
    let messages = vec![
        OutboxMessage::new("orders.paid", "1").header("content-type", "application/json"),
        OutboxMessage::new("orders.paid", "2").header("traceparent", TRACEPARENT),
    ];
    db.enqueue(&outbox, messages).instrument(checkout).await;
    // Outside any span: nothing to keep.
    db.enqueue(&outbox, vec![OutboxMessage::new("orders.paid", "3")])
        .await;

    assert_eq!(
        db.stored_headers().await,
        [
            format!(r#"[["content-type","application/json"],["traceparent","{expected}"]]"#),
            format!(r#"[["traceparent","{TRACEPARENT}"]]"#),
            "[]".to_owned(),
        ]
    );
}

#[tokio::test]
async fn the_relay_publishes_a_message_in_a_publish_span_that_continues_its_trace() {
    w3c();
    let traces = Traces::start();
    let db = Db::new().await;
    let outbox = db.outbox().await;
    let message = OutboxMessage::new("orders.paid", "1")
        .header("content-type", "application/json")
        .header("traceparent", TRACEPARENT)
        .header("tracestate", "congo=t61rcWkgMzE");
    let ids = db.enqueue(&outbox, vec![message]).await;
    let recorder = Recorder::default();
    let relay = Relay::new(db.pool.clone(), outbox, recorder.clone());

    let report = relay.run_once().await.unwrap();

    assert_eq!((report.claimed, report.published), (1, 1));
    let spans = traces.ended("idem.publish");
    assert_eq!(spans.len(), 1);
    let publish = &spans[0];
    assert_eq!(
        publish.span_context.trace_id(),
        TraceId::from_hex(TRACE_ID).unwrap()
    );
    assert_eq!(publish.parent_span_id, SpanId::from_hex(PARENT_ID).unwrap());
    assert!(publish.parent_span_is_remote);
    assert_eq!(publish.span_kind, SpanKind::Producer);
    assert_eq!(
        attribute(publish, "idem.outcome").as_deref(),
        Some("published")
    );
    assert_eq!(
        attribute(publish, "messaging.message.id"),
        Some(ids[0].clone())
    );
    assert_eq!(
        attribute(publish, "messaging.destination.name").as_deref(),
        Some("orders.paid")
    );
    assert_eq!(attribute(publish, "idem.attempt").as_deref(), Some("1"));
    // The broker's message carries the publish span's context in place of the stored one.
    let confirmed = recorder.confirmed();
    assert_eq!(
        confirmed[0].message().headers,
        pairs(&[
            ("content-type", "application/json"),
            ("traceparent", &traceparent(&publish.span_context)),
            ("tracestate", "congo=t61rcWkgMzE"),
        ])
    );
}

#[tokio::test]
async fn each_attempt_is_a_publish_span_of_the_stored_trace_retried_then_dead_lettered() {
    w3c();
    let traces = Traces::start();
    let db = Db::new().await;
    let outbox = db.outbox().await;
    let message = OutboxMessage::new("nowhere", "1").header("traceparent", TRACEPARENT);
    db.enqueue(&outbox, vec![message]).await;
    let recorder = Recorder::refusing(|_| {
        Some(PublishError::Rejected {
            reason: "no route".into(),
        })
    });
    let relay = Relay::new(db.pool.clone(), outbox, recorder.clone())
        .max_attempts(2)
        .backoff(Duration::ZERO, Duration::ZERO);

    let first = relay.run_once().await.unwrap();
    // The row keeps the context it was enqueued with, for the next attempt.
    assert_eq!(
        db.stored_headers().await,
        [format!(r#"[["traceparent","{TRACEPARENT}"]]"#)]
    );
    let second = relay.run_once().await.unwrap();

    assert_eq!((first.failed, first.dead_lettered), (1, 0));
    assert_eq!((second.failed, second.dead_lettered), (1, 1));
    let spans = traces.ended("idem.publish");
    let outcomes: Vec<_> = spans
        .iter()
        .map(|span| {
            (
                span.span_context.trace_id(),
                span.parent_span_id,
                attribute(span, "idem.attempt").unwrap(),
                attribute(span, "idem.outcome").unwrap(),
            )
        })
        .collect();
    let (trace, parent) = (
        TraceId::from_hex(TRACE_ID).unwrap(),
        SpanId::from_hex(PARENT_ID).unwrap(),
    );
    assert_eq!(
        outcomes,
        [
            (trace, parent, "1".to_owned(), "retried".to_owned()),
            (trace, parent, "2".to_owned(), "dead_lettered".to_owned()),
        ]
    );
    // Each attempt went out in its own span's context.
    let sent: Vec<_> = recorder
        .batches
        .lock()
        .unwrap()
        .iter()
        .map(|batch| batch[0].message().headers.clone())
        .collect();
    assert_eq!(
        sent,
        [
            pairs(&[("traceparent", &traceparent(&spans[0].span_context))]),
            pairs(&[("traceparent", &traceparent(&spans[1].span_context))]),
        ]
    );
}

#[tokio::test]
async fn a_message_enqueued_without_a_trace_is_published_in_the_trace_its_publish_starts() {
    w3c();
    let traces = Traces::start();
    let db = Db::new().await;
    let outbox = db.outbox().await;
    db.enqueue(&outbox, vec![OutboxMessage::new("orders.paid", "1")])
        .await;
    let recorder = Recorder::default();
    let relay = Relay::new(db.pool.clone(), outbox, recorder.clone());

    relay.run_once().await.unwrap();

    let spans = traces.ended("idem.publish");
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
    assert_eq!(
        recorder.confirmed()[0].message().headers,
        pairs(&[("traceparent", &traceparent(&spans[0].span_context))])
    );
}

/// What the broker was told of each message, in order.
#[derive(Clone, Default)]
struct Settled(Arc<Mutex<Vec<&'static str>>>);

impl Settled {
    fn record(self, how: &'static str) -> BoxFuture<'static, Result<(), BoxError>> {
        self.0.lock().unwrap().push(how);
        Box::pin(async { Ok(()) })
    }
}

impl Settle for Settled {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        (*self).record("ack")
    }
    fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        (*self).record("requeue")
    }
    fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        (*self).record("reject")
    }
}

#[tokio::test]
async fn the_inbox_handles_a_message_in_a_consume_span_that_continues_its_trace() {
    w3c();
    let traces = Traces::start();
    let db = Db::new().await;
    let inbox = SqliteInbox::new(InboxOptions::new());
    inbox.migrate(&db.pool).await.unwrap();
    let consumer: ConsumerName = "ledger".parse().unwrap();
    let settled = Settled::default();
    let mut message = Message::new("orders", "1");
    message.message_id = Some("order-1".to_owned());
    message.headers = pairs(&[("traceparent", TRACEPARENT)]);

    let mut handled = Vec::new();
    // The broker delivers it twice.
    for _ in 0..2 {
        let received = Received::new(message.clone(), settled.clone());
        let outcome = inbox
            .consume(&db.pool, &consumer, received, |_tx, _message| {
                Box::pin(async {
                    tracing::info_span!("book").in_scope(|| ());
                    Ok::<_, idem_messaging::Error>(())
                })
            })
            .await
            .unwrap();
        handled.push(outcome);
    }

    assert_eq!(handled, [Handled::Processed(()), Handled::Duplicate]);
    assert_eq!(*settled.0.lock().unwrap(), ["ack", "ack"]);
    let spans = traces.until_ended("idem.consume", 2).await;
    let seen: Vec<_> = spans
        .iter()
        .map(|span| {
            (
                span.span_context.trace_id(),
                span.parent_span_id,
                span.span_kind.clone(),
                attribute(span, "idem.outcome").unwrap(),
                attribute(span, "messaging.message.id").unwrap(),
                attribute(span, "messaging.consumer.group.name").unwrap(),
            )
        })
        .collect();
    let consumed = |outcome: &str| {
        (
            TraceId::from_hex(TRACE_ID).unwrap(),
            SpanId::from_hex(PARENT_ID).unwrap(),
            SpanKind::Consumer,
            outcome.to_owned(),
            "order-1".to_owned(),
            "ledger".to_owned(),
        )
    };
    assert_eq!(seen, [consumed("processed"), consumed("duplicate")]);
    // The handler ran in the first one.
    let book = traces.ended("book");
    assert_eq!(book.len(), 1);
    assert_eq!(book[0].parent_span_id, spans[0].span_context.span_id());
}
