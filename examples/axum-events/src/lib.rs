//! A report endpoint that streams its progress as server-sent events, made safe to retry with
//! idem's tower layer, its keys kept in SQLite.
//!
//! `POST /reports` builds a report and streams `progress` events as it goes, then a `done` event
//! naming the report. Behind [`IdempotencyLayer`], each event reaches the client as it is sent,
//! and the response is recorded as it passes:
//!
//! - a client that lost the connection and retries with the same `Idempotency-Key` gets the
//!   whole stream replayed (`Idempotent-Replayed: true`), and no second report is built;
//! - a duplicate sent while the report is still being built (the layer waits for keys in flight)
//!   joins the stream: it gets the events so far at once, then each one as it comes.
//!
//! Run it with `cargo run -p axum-events`, then:
//!
//! ```text
//! curl -N -X POST localhost:3000/reports -H 'Idempotency-Key: report-1'
//! ```
//!
//! Run the same command in a second terminal while the first streams: it joins. Once it ended,
//! run it again: the stream is replayed at once.

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::header::CONTENT_TYPE,
    response::Response,
    routing::post,
};
use idem_core::InFlight;
use idem_http::IdempotencyLayer;
use idem_sqlite::SqliteStore;

/// The reports built so far, and the pace of their progress events.
#[derive(Debug)]
pub struct Reports {
    built: AtomicU64,
    /// The time between two events.
    pub every: Duration,
}

impl Reports {
    /// Reports whose progress events come `every` so often.
    pub fn new(every: Duration) -> Self {
        Self {
            built: AtomicU64::new(0),
            every,
        }
    }

    /// How many reports were built.
    pub fn built(&self) -> u64 {
        self.built.load(Ordering::SeqCst)
    }
}

/// The progress events of a report, in percent.
pub const PROGRESS: [u32; 4] = [25, 50, 75, 100];

/// The API with the idempotency layer over `store`; a duplicate waits for, or joins, the request
/// in flight for up to a minute.
pub fn app(store: SqliteStore, reports: Arc<Reports>) -> Router {
    let layer = IdempotencyLayer::new(store).in_flight(InFlight::Wait {
        timeout: Duration::from_secs(60),
    });
    Router::new()
        .route("/reports", post(build_report))
        .with_state(reports)
        .layer(layer)
}

/// The event `step` (from 0) of report `id`: its progress, then `done`, then none.
pub fn event(id: u64, step: usize) -> Option<String> {
    match PROGRESS.get(step) {
        Some(percent) => Some(format!("event: progress\ndata: {percent}\n\n")),
        None if step == PROGRESS.len() => {
            Some(format!("event: done\ndata: {{\"report\":{id}}}\n\n"))
        }
        None => None,
    }
}

/// The whole event stream of report `id`.
pub fn events(id: u64) -> String {
    (0..).map_while(|step| event(id, step)).collect()
}

async fn build_report(State(reports): State<Arc<Reports>>) -> Response {
    let id = reports.built.fetch_add(1, Ordering::SeqCst) + 1;
    let every = reports.every;
    let stream = futures_util::stream::unfold(0, move |step| async move {
        let event = event(id, step)?;
        if step > 0 {
            tokio::time::sleep(every).await;
        }
        Some((Ok::<_, Infallible>(Bytes::from(event)), step + 1))
    });
    Response::builder()
        .header(CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("a valid response")
}
