//! The fencing token handed to the inner service: in the request's extensions always, in the
//! fencing header when one is configured, never a client's.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::Full;
use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, FingerprintMode, ManualClock, MemoryStore,
    Store, Timestamp,
};
use idem_http::{IdempotencyLayer, RequestOutcome};
use tower::{Layer, ServiceExt, service_fn};

use crate::common::{KEY, Reply};

const TOKEN_HEADER: &str = "idempotency-token";

/// What the inner service saw of one request: the fencing header's values and the extension.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    header: Vec<String>,
    extension: Option<FencingToken>,
}

/// The layer around an inner service that records what each request carried.
async fn send<St: Store + Clone>(
    layer: &IdempotencyLayer<St>,
    request: Request<Full<Bytes>>,
) -> (Reply, Seen) {
    let seen = Arc::new(Mutex::new(None));
    let inner = {
        let seen = Arc::clone(&seen);
        service_fn(move |request: Request<Full<Bytes>>| {
            let header = request
                .headers()
                .get_all(TOKEN_HEADER)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect();
            let extension = request.extensions().get::<FencingToken>().copied();
            *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(Seen { header, extension });
            async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("done")))) }
        })
    };
    let response = layer.layer(inner).oneshot(request).await.unwrap();
    let reply = Reply::read(response).await;
    let seen = seen.lock().unwrap().take().expect("the inner service ran");
    (reply, seen)
}

fn request(method: &str, key: Option<&str>, client_token: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::builder().method(method).uri("/payments");
    if let Some(key) = key {
        builder = builder.header(KEY, key);
    }
    if let Some(token) = client_token {
        builder = builder.header(TOKEN_HEADER, token);
    }
    builder.body(Full::new(Bytes::from("{}"))).unwrap()
}

fn address(key: &str) -> Address {
    Address::anonymous(key.parse().unwrap())
}

#[tokio::test]
async fn an_executed_request_carries_its_token_in_the_header_and_its_extensions() {
    let store = Arc::new(MemoryStore::new());
    let layer = IdempotencyLayer::new(Arc::clone(&store))
        .fencing_header(HeaderName::from_static(TOKEN_HEADER));

    let (reply, seen) = send(&layer, request("POST", Some("pay-1"), None)).await;

    assert_eq!(reply.outcome, Some(RequestOutcome::Executed));
    let record = store.get(&address("pay-1")).await.unwrap().unwrap();
    assert_eq!(
        seen,
        Seen {
            header: vec![record.state.token().get().to_string()],
            extension: Some(record.state.token()),
        }
    );
}

#[tokio::test]
async fn a_token_sent_by_the_client_never_reaches_the_inner_service() {
    let store = Arc::new(MemoryStore::new());
    let layer = IdempotencyLayer::new(Arc::clone(&store))
        .fencing_header(HeaderName::from_static(TOKEN_HEADER));
    let forged = u64::MAX.to_string();

    // Keyed: replaced by the layer's own.
    let (_, keyed) = send(&layer, request("POST", Some("pay-2"), Some(&forged))).await;
    let record = store.get(&address("pay-2")).await.unwrap().unwrap();
    assert_eq!(keyed.header, vec![record.state.token().get().to_string()]);

    // Passed through (no key, or a method keys do not cover): removed, and no token at all.
    for (method, key) in [("POST", None), ("GET", Some("pay-3"))] {
        let (reply, seen) = send(&layer, request(method, key, Some(&forged))).await;
        assert_eq!(reply.outcome, Some(RequestOutcome::Passthrough), "{method}");
        assert_eq!(
            seen,
            Seen {
                header: vec![],
                extension: None,
            },
            "{method}"
        );
    }
}

#[tokio::test]
async fn without_a_fencing_header_the_token_is_in_the_extensions_only() {
    let store = Arc::new(MemoryStore::new());
    let layer = IdempotencyLayer::new(Arc::clone(&store));

    let (_, seen) = send(&layer, request("POST", Some("pay-4"), Some("7"))).await;

    let record = store.get(&address("pay-4")).await.unwrap().unwrap();
    // The header is the client's business when the layer does not use it.
    assert_eq!(
        seen,
        Seen {
            header: vec!["7".to_owned()],
            extension: Some(record.state.token()),
        }
    );
}

#[tokio::test]
async fn a_request_that_takes_over_an_expired_lease_carries_a_larger_token() {
    let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let lease = Duration::from_secs(30);
    let layer = IdempotencyLayer::new(Arc::clone(&store))
        .lease(lease)
        .fencing_header(HeaderName::from_static(TOKEN_HEADER));
    // Another worker (a gateway that then froze) took the key, and its lease ran out.
    // The fingerprint the layer gives `request("POST", …)`, so that the retry matches the holder.
    let fingerprint = Fingerprint::builder(FingerprintMode::Json)
        .method("POST")
        .path("/payments")
        .query(None)
        .body(None, b"{}");
    let terms = (&idem_core::Policy::default().lease(lease)).into();
    let Acquisition::Acquired(stale) = store
        .acquire(&address("pay-5"), &fingerprint, terms)
        .await
        .unwrap()
    else {
        panic!("a new key is acquired");
    };
    clock.advance(lease + Duration::from_millis(1));

    let (reply, seen) = send(&layer, request("POST", Some("pay-5"), None)).await;

    assert_eq!(reply.outcome, Some(RequestOutcome::Executed));
    let token = seen
        .extension
        .expect("an executed request carries its token");
    assert!(token > stale.token, "{token:?} after {:?}", stale.token);
    assert_eq!(seen.header, vec![token.get().to_string()]);
    let record = store.get(&address("pay-5")).await.unwrap().unwrap();
    assert_eq!(record.state.token(), token);
}
