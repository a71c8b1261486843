//! The example behaves as its docs say: events reach the client as they are sent, a duplicate
//! joins the stream in flight, a retry replays it, and one report is built.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{sync::Arc, time::Duration};

use axum::body::{Body, Bytes};
use axum_events::{Reports, app, events};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use idem_sqlite::SqliteStore;
use tower::ServiceExt;

fn report(key: &str) -> Request<Body> {
    Request::post("/reports")
        .header("idempotency-key", key)
        .body(Body::empty())
        .unwrap()
}

async fn next(response: &mut Response<Body>) -> Option<Bytes> {
    let frame = tokio::time::timeout(Duration::from_secs(10), response.body_mut().frame())
        .await
        .expect("the next event comes");
    frame.map(|frame| frame.unwrap().into_data().unwrap())
}

async fn rest(response: &mut Response<Body>) -> String {
    let mut text = String::new();
    while let Some(chunk) = next(response).await {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text
}

#[tokio::test]
async fn a_duplicate_joins_the_stream_and_a_retry_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("reports.db"))
        .await
        .unwrap();
    let reports = Arc::new(Reports::new(Duration::from_millis(100)));
    let api = app(store, Arc::clone(&reports));

    let mut first = api.clone().oneshot(report("report-1")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let progress = next(&mut first).await.unwrap();
    assert_eq!(progress, "event: progress\ndata: 25\n\n");

    // While the report is being built, a duplicate joins it: what was sent so far, then the rest.
    let mut joined = api.clone().oneshot(report("report-1")).await.unwrap();
    assert_eq!(joined.headers()["idempotent-replayed"], "true");
    let whole = events(1);
    assert_eq!(rest(&mut joined).await, whole);
    assert_eq!(
        std::str::from_utf8(&progress).unwrap().to_owned() + &rest(&mut first).await,
        whole
    );

    // Once it ended, a retry gets it replayed at once.
    let retry = api.clone().oneshot(report("report-1")).await.unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let body = retry.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, whole);
    assert_eq!(reports.built(), 1);
}
