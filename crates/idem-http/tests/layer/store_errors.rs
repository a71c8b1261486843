//! A store that cannot be reached: fail closed, or pass through when asked to; a store that
//! answers with a failure (a record that cannot be read, full): never passed through.

use std::{future::Future, io, time::Duration};

use http::StatusCode;
use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, Record, Store, StoreError, Terms, Timestamp,
};
use idem_http::{IdempotencyLayer, OnStoreError, RequestOutcome, problem};

use crate::common::{Fixture, keyed, send};

/// A store whose every call fails with the same error.
#[derive(Clone)]
struct FailingStore(fn() -> StoreError);

/// Like a database that is down.
fn down() -> FailingStore {
    FailingStore(|| {
        StoreError::unavailable(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "connection refused (db.internal:5432)",
        ))
    })
}

impl FailingStore {
    fn fail<T: Send>(&self) -> impl Future<Output = Result<T, StoreError>> + Send {
        std::future::ready(Err((self.0)()))
    }
}

impl Store for FailingStore {
    fn acquire(
        &self,
        _: &Address,
        _: &Fingerprint,
        _: Terms,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        self.fail()
    }

    fn complete(
        &self,
        _: &Address,
        _: FencingToken,
        _: &idem_core::Outcome,
        _: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.fail()
    }

    fn release(
        &self,
        _: &Address,
        _: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.fail()
    }

    fn renew(
        &self,
        _: &Address,
        _: FencingToken,
        _: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        self.fail()
    }

    fn get(&self, _: &Address) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        self.fail()
    }

    fn forget(&self, _: &Address) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.fail()
    }

    fn purge_expired(&self, _: usize) -> impl Future<Output = Result<usize, StoreError>> + Send {
        self.fail()
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.fail()
    }
}

#[tokio::test]
async fn an_unreachable_store_is_503_with_retry_after_and_the_request_is_not_forwarded() {
    let f = Fixture::new();
    let app = f.app(IdempotencyLayer::new(down()));
    let reply = send(&app, keyed("/charges", "k", "{}")).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.problem_type(), problem::STORE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), Some("1"));
    // The store's error names a host: it is logged, never sent.
    assert!(!reply.text().contains("db.internal"));
    assert_eq!(reply.outcome, Some(RequestOutcome::StoreError));
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
    let app = f.app(IdempotencyLayer::new(down()).on_store_error(OnStoreError::Passthrough));
    for n in 1..=2 {
        let reply = send(&app, keyed("/charges", "k", "{}")).await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.header("x-charge"), Some(format!("ch_{n}").as_str()));
        assert_eq!(reply.outcome, Some(RequestOutcome::Passthrough));
        assert!(reply.key.is_some());
        assert!(!reply.is_replay());
    }
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn an_unreadable_record_is_a_500_and_never_forwarded_even_in_passthrough_mode() {
    let f = Fixture::new();
    let corrupted =
        FailingStore(|| StoreError::corrupted(io::Error::other("the record does not open")));
    for mode in [OnStoreError::Reject, OnStoreError::Passthrough] {
        let app = f.app(IdempotencyLayer::new(corrupted.clone()).on_store_error(mode));
        let reply = send(&app, keyed("/charges", "k", "{}")).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{mode:?}");
        assert_eq!(reply.problem_type(), problem::RECORD_CORRUPTED);
        assert_eq!(reply.header("retry-after"), None);
        assert!(!reply.text().contains("does not open"));
        assert_eq!(reply.outcome, Some(RequestOutcome::StoreError));
    }
    assert_eq!(f.calls.get(), 0);
}

#[tokio::test]
async fn a_full_store_is_503_store_full_and_never_forwarded() {
    let f = Fixture::new();
    let full = FailingStore(|| StoreError::Full {
        limit: "max_keys = 2".to_owned(),
    });
    for mode in [OnStoreError::Reject, OnStoreError::Passthrough] {
        let app = f.app(IdempotencyLayer::new(full.clone()).on_store_error(mode));
        let reply = send(&app, keyed("/charges", "k", "{}")).await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{mode:?}");
        assert_eq!(reply.problem_type(), problem::STORE_FULL);
        assert_eq!(reply.problem()["title"], "Idempotency store full");
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert_eq!(reply.outcome, Some(RequestOutcome::StoreError));
    }
    assert_eq!(f.calls.get(), 0);
}

#[tokio::test]
async fn a_memory_store_at_max_keys_refuses_a_new_key_and_replays_the_old_ones() {
    let f = Fixture::with_store(idem_core::MemoryStore::new().max_keys(1));
    let app = f.app(f.layer());
    let first = send(&app, keyed("/charges", "a", "{}")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let refused = send(&app, keyed("/charges", "b", "{}")).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.problem_type(), problem::STORE_FULL);
    let replay = send(&app, keyed("/charges", "a", "{}")).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert!(replay.is_replay());
    assert_eq!(f.calls.get(), 1);
}

/// A store that never answers an acquire, like one behind a network that swallows packets.
#[derive(Clone)]
struct SilentStore;

impl Store for SilentStore {
    fn acquire(
        &self,
        _: &Address,
        _: &Fingerprint,
        _: Terms,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        std::future::pending()
    }

    fn complete(
        &self,
        _: &Address,
        _: FencingToken,
        _: &idem_core::Outcome,
        _: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::pending()
    }

    fn release(
        &self,
        _: &Address,
        _: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::pending()
    }

    fn renew(
        &self,
        _: &Address,
        _: FencingToken,
        _: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        std::future::pending()
    }

    fn get(&self, _: &Address) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        std::future::pending()
    }

    fn forget(&self, _: &Address) -> impl Future<Output = Result<bool, StoreError>> + Send {
        std::future::pending()
    }

    fn purge_expired(&self, _: usize) -> impl Future<Output = Result<usize, StoreError>> + Send {
        std::future::pending()
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::pending()
    }
}

#[tokio::test]
async fn a_store_that_does_not_answer_is_503_at_the_store_timeout_or_passed_through() {
    let f = Fixture::new();
    let limit = Duration::from_millis(200);
    let app = f.app(IdempotencyLayer::new(SilentStore).store_timeout(limit));
    let started = std::time::Instant::now();
    let reply = send(&app, keyed("/charges", "k", "{}")).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.problem_type(), problem::STORE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(f.calls.get(), 0);

    let app = f.app(
        IdempotencyLayer::new(SilentStore)
            .store_timeout(limit)
            .on_store_error(OnStoreError::Passthrough),
    );
    let reply = send(&app, keyed("/charges", "k", "{}")).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(reply.outcome, Some(RequestOutcome::Passthrough));
    assert_eq!(f.calls.get(), 1);
}
