//! 5xx, 408 and 429, inner service errors and cut-off responses, under both `Ambiguous` modes.

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::time::Duration;

use idem_core::{
    Acquisition, Address, Ambiguous, Fingerprint, FingerprintMode, MemoryStore, Outcome as Stored,
    Store, StoredResponse, Terms,
};
use idem_http::{Delivery, IdempotencyLayer, RequestOutcome, problem};
use std::sync::Arc;
use tower::{Layer, ServiceExt, service_fn};

use crate::common::{Calls, Fixture, KEY, Reply, keyed, send};

/// The body every outcome-unknown answer has carried, byte for byte.
const OUTCOME_UNKNOWN_BODY: &str = concat!(
    r#"{"type":"urn:idem:problem:outcome-unknown","title":"Outcome unknown","status":500,"#,
    r#""detail":"The request was sent but its result was lost; it may have taken effect and "#,
    r#"will not be executed again under this key."}"#
);

#[tokio::test]
async fn a_5xx_408_or_429_releases_the_key_under_retry() {
    for code in [500, 503, 408, 429] {
        let f = Fixture::new();
        let app = f.app(f.layer());
        let uri = format!("/status/{code}");
        for n in 1..=2 {
            let reply = send(&app, keyed(&uri, "k", "")).await;
            assert_eq!(reply.status.as_u16(), code);
            assert_eq!(reply.outcome, Some(RequestOutcome::Executed));
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
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
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
        assert_eq!(retry.outcome, Some(RequestOutcome::Executed));
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
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));
    assert!(!first.is_replay());
    assert_eq!(first.body, OUTCOME_UNKNOWN_BODY.as_bytes());
    assert_eq!(
        first.header_lines(),
        [
            (
                "content-type".to_owned(),
                "application/problem+json".to_owned()
            ),
            ("content-length".to_owned(), "211".to_owned()),
        ]
    );
    assert_eq!(first.problem_type(), problem::OUTCOME_UNKNOWN);

    let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert!(retry.is_replay());
    assert_eq!(retry.body, OUTCOME_UNKNOWN_BODY.as_bytes());
    assert_eq!(calls.get(), 1);
}

/// A service that answers its first call with a `502` marked with `delivery`, as a proxy does
/// for an upstream that gave no response, then `201`.
fn failing_proxy(
    calls: Calls,
    delivery: Delivery,
) -> impl tower::Service<
    Request<Body>,
    Response = Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    service_fn(move |_request: Request<Body>| {
        let n = calls.next();
        async move {
            let mut response = Response::new(Full::new(Bytes::from(format!("call {n}"))));
            if n == 1 {
                *response.status_mut() = StatusCode::BAD_GATEWAY;
                response.extensions_mut().insert(delivery);
            } else {
                *response.status_mut() = StatusCode::CREATED;
            }
            Ok(response)
        }
    })
}

#[tokio::test]
async fn a_response_marked_not_sent_releases_the_key_under_both_modes() {
    for ambiguous in [Ambiguous::Retry, Ambiguous::Reject] {
        let calls = Calls::default();
        let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new())).ambiguous(ambiguous);
        let service = layer.layer(failing_proxy(calls.clone(), Delivery::NotSent));

        let first = Reply::read(service.clone().oneshot(request()).await.unwrap()).await;
        assert_eq!(first.status, StatusCode::BAD_GATEWAY);
        assert_eq!(first.text(), "call 1");
        assert!(!first.is_replay());
        let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert_eq!(retry.outcome, Some(RequestOutcome::Executed));
        assert_eq!(retry.text(), "call 2");
        assert_eq!(calls.get(), 2, "{ambiguous:?}");
    }
}

#[tokio::test]
async fn a_response_marked_maybe_sent_is_released_under_retry_and_unknown_under_reject() {
    let calls = Calls::default();
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new())).ambiguous(Ambiguous::Retry);
    let service = layer.layer(failing_proxy(calls.clone(), Delivery::MaybeSent));
    let first = Reply::read(service.clone().oneshot(request()).await.unwrap()).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert_eq!(first.text(), "call 1");
    let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
    assert_eq!(retry.text(), "call 2");
    assert_eq!(calls.get(), 2);

    let calls = Calls::default();
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new())).ambiguous(Ambiguous::Reject);
    let service = layer.layer(failing_proxy(calls.clone(), Delivery::MaybeSent));
    let first = Reply::read(service.clone().oneshot(request()).await.unwrap()).await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.body, OUTCOME_UNKNOWN_BODY.as_bytes());
    assert!(!first.is_replay());
    let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
    assert_eq!(retry.body, OUTCOME_UNKNOWN_BODY.as_bytes());
    assert!(retry.is_replay());
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
        assert_eq!(reply.outcome, Some(RequestOutcome::Executed));
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
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn an_outcome_unknown_stored_as_a_response_by_earlier_builds_replays_the_same() {
    let f = Fixture::new();
    let app = f.app(f.layer().ambiguous(Ambiguous::Reject));
    let address = Address::anonymous("k".parse().unwrap());
    let fingerprint = Fingerprint::builder(FingerprintMode::Json)
        .method("POST")
        .path("/cut")
        .query(None)
        .body(Some("application/json"), b"");
    let terms = Terms {
        lease: Duration::from_secs(30),
        ttl: Duration::from_secs(60),
    };
    let Acquisition::Acquired(lease) = f
        .store
        .acquire(&address, &fingerprint, terms)
        .await
        .unwrap()
    else {
        panic!("a new key is acquired")
    };
    // What earlier builds stored: the problem itself, as a response.
    let legacy = StoredResponse::new(500)
        .header("content-type", "application/problem+json")
        .body(OUTCOME_UNKNOWN_BODY);
    f.store
        .complete(&address, lease.token, &legacy.into(), terms.ttl)
        .await
        .unwrap();
    assert!(matches!(
        f.store
            .acquire(&address, &fingerprint, terms)
            .await
            .unwrap(),
        Acquisition::Completed(Stored::Unknown)
    ));

    let replay = send(&app, keyed("/cut", "k", "")).await;
    assert_eq!(replay.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(replay.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(
        replay.header_lines(),
        [
            (
                "content-type".to_owned(),
                "application/problem+json".to_owned()
            ),
            ("content-length".to_owned(), "211".to_owned()),
            ("idempotent-replayed".to_owned(), "true".to_owned()),
        ]
    );
    assert_eq!(replay.body, OUTCOME_UNKNOWN_BODY.as_bytes());
    assert_eq!(f.calls.get(), 0);
}
