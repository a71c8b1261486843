//! `body-timeout` and `max-buffered`: a slow body and a full buffer budget are refused before
//! the key is acquired.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body::Frame;
use idem_http::{RequestOutcome, problem};

use crate::common::{Chunks, Fixture, KEY, send};

/// Sends one chunk, then nothing more, ever: a client that stopped half way.
struct Stalled(Option<Bytes>);

impl http_body::Body for Stalled {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            None => Poll::Pending,
        }
    }
}

fn post(uri: &str, key: Option<&str>, body: Body) -> Request<Body> {
    let mut request = Request::post(uri);
    if let Some(key) = key {
        request = request.header(KEY, key);
    }
    request.body(body).unwrap()
}

#[tokio::test]
async fn a_body_not_received_within_the_body_timeout_is_408_and_nothing_runs() {
    let f = Fixture::new();
    let app = f.app(f.layer().body_timeout(Duration::from_millis(200)));
    let half = Body::new(Stalled(Some(Bytes::from_static(b"{\"amount\":"))));
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        send(&app, post("/charges", Some("k"), half)),
    )
    .await
    .expect("answered when the body timeout fires");
    assert_eq!(reply.status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(reply.problem_type(), problem::BODY_TIMEOUT);
    assert_eq!(
        reply.problem()["detail"],
        "The request body was not received within 200ms; nothing was executed."
    );
    assert_eq!(reply.outcome, Some(RequestOutcome::Invalid));
    assert_eq!(f.calls.get(), 0);
    assert!(f.store.is_empty());

    // A whole body is within the timeout: executed.
    let whole = send(&app, post("/charges", Some("k"), Body::from("{}"))).await;
    assert_eq!(whole.status, StatusCode::CREATED);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_body_that_does_not_fit_the_buffer_budget_is_503_overloaded_until_it_is_given_back() {
    let f = Fixture::new();
    let app = f.app(f.layer().max_buffered(100));
    // 60 bytes held until /slow answers.
    let holder = tokio::spawn({
        let app = app.clone();
        let request = post("/slow", Some("holder"), Body::from(vec![b'x'; 60]));
        async move { send(&app, request).await }
    });
    f.started.notified().await;

    let over = send(&app, post("/echo", Some("a"), Body::from(vec![b'y'; 41]))).await;
    assert_eq!(over.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(over.problem_type(), problem::OVERLOADED);
    assert_eq!(over.header("retry-after"), Some("1"));
    assert_eq!(over.outcome, Some(RequestOutcome::Overloaded));
    // Chunked: the first chunk fits (90 bytes), the second does not.
    let chunks = Chunks::new(vec![
        Bytes::from(vec![b'z'; 30]),
        Bytes::from(vec![b'z'; 30]),
    ]);
    let chunked = send(&app, post("/echo", Some("b"), Body::new(chunks))).await;
    assert_eq!(chunked.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(chunked.problem_type(), problem::OVERLOADED);
    assert_eq!(f.calls.get(), 1, "only /slow ran");
    assert_eq!(f.store.len(), 1, "only /slow's key was acquired");

    // What fits in the rest of the budget runs; requests without a key do not count.
    let fits = send(&app, post("/echo", Some("c"), Body::from(vec![b'y'; 40]))).await;
    assert_eq!(fits.status, StatusCode::OK);
    let unkeyed = send(&app, post("/echo", None, Body::from(vec![b'u'; 500]))).await;
    assert_eq!(unkeyed.status, StatusCode::OK);
    assert_eq!(unkeyed.body.len(), 500);

    // Once /slow has answered, its 60 bytes are given back.
    f.open_gate();
    assert_eq!(holder.await.unwrap().status, StatusCode::CREATED);
    let again = send(&app, post("/echo", Some("a"), Body::from(vec![b'y'; 41]))).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.outcome, Some(RequestOutcome::Executed));
}
