//! 5xx, 408 and 429, inner service errors and cut-off responses, under both `Ambiguous` modes.

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use idem_core::{Ambiguous, MemoryStore, StoredResponse};
use idem_http::{Delivery, IdempotencyLayer, Outcome, problem};
use std::sync::Arc;
use tower::{Layer, ServiceExt, service_fn};

use crate::common::{Calls, Fixture, KEY, Reply, keyed, send};

#[tokio::test]
async fn a_5xx_408_or_429_releases_the_key_under_retry() {
    for code in [500, 503, 408, 429] {
        let f = Fixture::new();
        let app = f.app(f.layer());
        let uri = format!("/status/{code}");
        for n in 1..=2 {
            let reply = send(&app, keyed(&uri, "k", "")).await;
            assert_eq!(reply.status.as_u16(), code);
            assert_eq!(reply.outcome, Some(Outcome::Executed));
            assert_eq!(reply.text(), format!("call {n}"));
            assert!(!reply.is_replay());
        }
        assert_eq!(f.calls.get(), 2, "{code}");
        assert!(f.store.is_empty());
    }
}

#[tokio::test]
async fn a_5xx_is_stored_and_replayed_under_reject() {
    let f = Fixture::new();
    let app = f.app(f.layer().ambiguous(Ambiguous::Reject));
    let first = send(&app, keyed("/status/500", "k", "")).await;
    let retry = send(&app, keyed("/status/500", "k", "")).await;
    assert_eq!(first.outcome, Some(Outcome::Executed));
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.outcome, Some(Outcome::Replayed));
    assert!(retry.is_replay());
    assert_eq!(retry.text(), "call 1");
    assert_eq!(f.calls.get(), 1);
}

#[derive(Debug, thiserror::Error)]
enum UpstreamError {
    #[error("connection refused")]
    Refused,
    #[error("connection reset after the request was sent")]
    Reset,
}

/// A service that fails its first call with `error`, then answers 201.
fn flaky(
    calls: Calls,
    error: fn() -> UpstreamError,
) -> impl tower::Service<
    Request<Body>,
    Response = Response<Full<Bytes>>,
    Error = UpstreamError,
    Future = impl Send,
> + Clone {
    service_fn(move |_request: Request<Body>| {
        let n = calls.next();
        async move {
            if n == 1 {
                return Err(error());
            }
            let mut response = Response::new(Full::new(Bytes::from(format!("call {n}"))));
            *response.status_mut() = StatusCode::CREATED;
            Ok(response)
        }
    })
}

fn classified(ambiguous: Ambiguous) -> IdempotencyLayer<Arc<MemoryStore>> {
    IdempotencyLayer::new(Arc::new(MemoryStore::new()))
        .ambiguous(ambiguous)
        .classify_error(|error| match error.downcast_ref::<UpstreamError>() {
            Some(UpstreamError::Refused) => Delivery::NotSent,
            _ => Delivery::MaybeSent,
        })
}

fn request() -> Request<Body> {
    Request::post("/charges")
        .header(KEY, "k")
        .body(Body::from("{}"))
        .unwrap()
}

#[tokio::test]
async fn an_error_before_sending_releases_the_key_under_both_modes() {
    for ambiguous in [Ambiguous::Retry, Ambiguous::Reject] {
        let calls = Calls::default();
        let service = classified(ambiguous).layer(flaky(calls.clone(), || UpstreamError::Refused));

        let error = service.clone().oneshot(request()).await.unwrap_err();
        assert!(matches!(error, UpstreamError::Refused));
        let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert_eq!(retry.outcome, Some(Outcome::Executed));
        assert_eq!(retry.text(), "call 2");
        assert_eq!(calls.get(), 2, "{ambiguous:?}");
    }
}

#[tokio::test]
async fn an_error_after_sending_releases_the_key_under_retry() {
    let calls = Calls::default();
    let service = classified(Ambiguous::Retry).layer(flaky(calls.clone(), || UpstreamError::Reset));
    let error = service.clone().oneshot(request()).await.unwrap_err();
    assert!(matches!(error, UpstreamError::Reset));
    let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
    assert_eq!(retry.text(), "call 2");
    assert_eq!(calls.get(), 2);
}

#[tokio::test]
async fn by_default_every_error_may_have_been_sent() {
    let calls = Calls::default();
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new())).ambiguous(Ambiguous::Reject);
    let service = layer.layer(flaky(calls.clone(), || UpstreamError::Refused));
    let first = Reply::read(service.clone().oneshot(request()).await.unwrap()).await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.problem_type(), problem::OUTCOME_UNKNOWN);
    assert_eq!(calls.get(), 1);
}

#[tokio::test]
async fn an_error_after_sending_is_outcome_unknown_under_reject_and_replayed() {
    let calls = Calls::default();
    let service =
        classified(Ambiguous::Reject).layer(flaky(calls.clone(), || UpstreamError::Reset));

    let first = Reply::read(service.clone().oneshot(request()).await.unwrap()).await;
    let unknown = StoredResponse::outcome_unknown();
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.outcome, Some(Outcome::Executed));
    assert!(!first.is_replay());
    assert_eq!(first.body, unknown.body);
    assert_eq!(first.problem_type(), problem::OUTCOME_UNKNOWN);

    let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.outcome, Some(Outcome::Replayed));
    assert!(retry.is_replay());
    assert_eq!(retry.body, unknown.body);
    assert_eq!(calls.get(), 1);
}

#[tokio::test]
async fn a_response_cut_off_releases_the_key_under_retry_with_a_502() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    for _ in 0..2 {
        let reply = send(&app, keyed("/cut", "k", "")).await;
        assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
        assert_eq!(reply.problem_type(), problem::UPSTREAM_FAILED);
        assert_eq!(reply.outcome, Some(Outcome::Executed));
    }
    assert_eq!(f.calls.get(), 2);
    assert!(f.store.is_empty());
}

#[tokio::test]
async fn a_response_cut_off_under_reject_is_outcome_unknown_and_replayed() {
    let f = Fixture::new();
    let app = f.app(f.layer().ambiguous(Ambiguous::Reject));
    let first = send(&app, keyed("/cut", "k", "")).await;
    let retry = send(&app, keyed("/cut", "k", "")).await;
    for reply in [&first, &retry] {
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(reply.problem_type(), problem::OUTCOME_UNKNOWN);
    }
    assert!(!first.is_replay());
    assert!(retry.is_replay());
    assert_eq!(retry.outcome, Some(Outcome::Replayed));
    assert_eq!(f.calls.get(), 1);
}
