//! `max-body` and `max-stored-response`.

use axum::body::Body;
use bytes::Bytes;
use http::{Request, StatusCode};
use idem_http::{RequestOutcome, problem};

use crate::common::{Chunks, Fixture, KEY, pattern, send};

#[tokio::test]
async fn a_body_over_the_limit_is_413_by_its_content_length() {
    let f = Fixture::new();
    let app = f.app(f.layer().max_body(16));
    let request = Request::post("/echo")
        .header(KEY, "k")
        .header("content-length", "17")
        .body(Body::from(vec![b'x'; 17]))
        .unwrap();
    let reply = send(&app, request).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.problem_type(), problem::BODY_TOO_LARGE);
    assert_eq!(
        reply.problem()["detail"],
        "Requests with an idempotency key may have a body of at most 16 bytes."
    );
    assert_eq!(reply.outcome, Some(RequestOutcome::TooLarge));
    assert_eq!(f.calls.get(), 0);
    assert!(f.store.is_empty());
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_413_and_one_within_is_executed() {
    let f = Fixture::new();
    let app = f.app(f.layer().max_body(16));
    let chunked = |chunks: &[&'static str]| {
        let chunks = chunks
            .iter()
            .map(|c| Bytes::from_static(c.as_bytes()))
            .collect();
        Request::post("/echo")
            .header(KEY, "k")
            .body(Body::new(Chunks::new(chunks)))
            .unwrap()
    };
    let over = send(&app, chunked(&["0123456789", "0123456789"])).await;
    assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(over.outcome, Some(RequestOutcome::TooLarge));
    assert!(f.store.is_empty());

    let within = send(&app, chunked(&["01234567", "89abcdef"])).await;
    assert_eq!(within.status, StatusCode::OK);
    assert_eq!(within.text(), "0123456789abcdef");
    let retry = send(&app, chunked(&["0123", "456789abcdef"])).await;
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(retry.text(), "0123456789abcdef");
    assert_eq!(f.calls.get(), 1);
}

/// Checks a response over `max_stored_response`: delivered whole, never executed again, and
/// replayed as a response-not-stored problem with the original status and non-body headers.
async fn check_not_stored(uri: &str) {
    let f = Fixture::new();
    let app = f.app(f.layer().max_stored_response(1_000));
    let request = || {
        Request::post(uri)
            .header(KEY, "k")
            .body(Body::empty())
            .unwrap()
    };
    let first = send(&app, request()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));
    assert_eq!(first.body, pattern(5_000));

    let retry = send(&app, request()).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    let problem = retry.problem();
    assert_eq!(problem["type"], problem::RESPONSE_NOT_STORED);
    assert_eq!(
        problem["detail"],
        "The response to this request was larger than 1000 bytes; it was delivered once and \
         is not replayed. The operation will not be executed again under this key."
    );
    let lines: Vec<_> = retry.header_lines();
    assert_eq!(
        lines,
        [
            ("x-big".to_owned(), "yes".to_owned()),
            (
                "content-type".to_owned(),
                "application/problem+json".to_owned()
            ),
            ("content-length".to_owned(), retry.body.len().to_string()),
            ("idempotent-replayed".to_owned(), "true".to_owned()),
        ]
    );
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_response_over_the_stored_limit_with_a_known_length_is_delivered_and_not_stored() {
    check_not_stored("/big/5000").await;
}

#[tokio::test]
async fn a_chunked_response_over_the_stored_limit_is_delivered_whole_and_not_stored() {
    check_not_stored("/big-chunked/5000").await;
}

#[tokio::test]
async fn a_response_at_the_stored_limit_is_stored() {
    let f = Fixture::new();
    let app = f.app(f.layer().max_stored_response(1_000));
    for outcome in [RequestOutcome::Executed, RequestOutcome::Replayed] {
        let request = Request::post("/big-chunked/1000")
            .header(KEY, "k")
            .body(Body::empty())
            .unwrap();
        let reply = send(&app, request).await;
        assert_eq!(reply.outcome, Some(outcome));
        assert_eq!(reply.body, pattern(1_000));
    }
    assert_eq!(f.calls.get(), 1);
}
