//! A store that cannot be reached: fail closed, or pass through when asked to. A record that
//! cannot be read: never forwarded.

use std::{future::Future, io, time::Duration};

use http::StatusCode;
use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, Record, Store, StoreError, StoredResponse,
    Terms, Timestamp,
};
use idem_http::{IdempotencyLayer, OnStoreError, Outcome, problem};

use crate::common::{Fixture, keyed, send};

/// A store whose every call fails, like a database that is down, or, with `corrupted`, like a
/// record that does not open.
#[derive(Clone, Default)]
struct DownStore {
    corrupted: bool,
}

impl DownStore {
    fn down<T: Send>(&self) -> impl Future<Output = Result<T, StoreError>> + Send {
        std::future::ready(Err(if self.corrupted {
            StoreError::corrupted(io::Error::other("the record does not open"))
        } else {
            StoreError::unavailable(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "connection refused (db.internal:5432)",
            ))
        }))
    }
}

impl Store for DownStore {
    fn acquire(
        &self,
        _: &Address,
        _: &Fingerprint,
        _: Terms,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        self.down()
    }

    fn complete(
        &self,
        _: &Address,
        _: FencingToken,
        _: &StoredResponse,
        _: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.down()
    }

    fn release(
        &self,
        _: &Address,
        _: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.down()
    }

    fn renew(
        &self,
        _: &Address,
        _: FencingToken,
        _: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        self.down()
    }

    fn get(&self, _: &Address) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        self.down()
    }

    fn forget(&self, _: &Address) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.down()
    }

    fn purge_expired(&self, _: usize) -> impl Future<Output = Result<usize, StoreError>> + Send {
        self.down()
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.down()
    }
}

#[tokio::test]
async fn an_unreachable_store_is_503_with_retry_after_and_the_request_is_not_forwarded() {
    let f = Fixture::new();
    let app = f.app(IdempotencyLayer::new(DownStore::default()));
    let reply = send(&app, keyed("/charges", "k", "{}")).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.problem_type(), problem::STORE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), Some("1"));
    // The store's error names a host: it is logged, never sent.
    assert!(!reply.text().contains("db.internal"));
    assert_eq!(reply.outcome, Some(Outcome::StoreError));
    assert_eq!(f.calls.get(), 0);

    // Requests without a key never touch the store.
    let plain = send(
        &app,
        http::Request::post("/charges")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(plain.status, StatusCode::CREATED);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn in_passthrough_mode_an_unreachable_store_forwards_without_idempotency() {
    let f = Fixture::new();
    let app = f
        .app(IdempotencyLayer::new(DownStore::default()).on_store_error(OnStoreError::Passthrough));
    for n in 1..=2 {
        let reply = send(&app, keyed("/charges", "k", "{}")).await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.header("x-charge"), Some(format!("ch_{n}").as_str()));
        assert_eq!(reply.outcome, Some(Outcome::Passthrough));
        assert!(reply.key.is_some());
        assert!(!reply.is_replay());
    }
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn an_unreadable_record_is_a_500_and_never_forwarded_even_in_passthrough_mode() {
    let f = Fixture::new();
    for mode in [OnStoreError::Reject, OnStoreError::Passthrough] {
        let store = DownStore { corrupted: true };
        let app = f.app(IdempotencyLayer::new(store).on_store_error(mode));
        let reply = send(&app, keyed("/charges", "k", "{}")).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{mode:?}");
        assert_eq!(reply.problem_type(), problem::RECORD_CORRUPTED);
        assert_eq!(reply.header("retry-after"), None);
        assert!(!reply.text().contains("does not open"));
        assert_eq!(reply.outcome, Some(Outcome::StoreError));
    }
    assert_eq!(f.calls.get(), 0);
}
