//! [`Settings`]: everything an [`IdempotencyLayer`](crate::IdempotencyLayer) applies, the
//! engine's [`Policy`] among them, and the choices that are not part of it.
//!
//! # Examples
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//!
//! use idem_core::{Ambiguous, MemoryStore};
//! use idem_http::{ClassifyError, Delivery, IdempotencyLayer, OnStoreError, Settings};
//!
//! let mut settings = Settings::default();
//! settings.require_key = true;
//! settings.policy.ambiguous = Ambiguous::Reject;
//! settings.on_store_error = OnStoreError::Passthrough;
//! settings.classify_error = ClassifyError::new(|_error| Delivery::NotSent);
//! let layer = IdempotencyLayer::with_settings(Arc::new(MemoryStore::new()), settings);
//! assert_eq!(layer.engine().policy().ambiguous, Ambiguous::Reject);
//! assert!(layer.settings().require_key);
//!
//! // The builder methods change the same values.
//! let layer = layer.ttl(Duration::from_secs(3600));
//! assert_eq!(layer.settings().policy.ttl, Duration::from_secs(3600));
//! ```

use std::{error::Error, fmt, sync::Arc, time::Duration};

use http::{HeaderName, Method, StatusCode};
use idem_core::{FingerprintMode, Policy};

/// The default [`key_header`](crate::IdempotencyLayer::key_header): [`idem_core::KEY_HEADER`].
pub const DEFAULT_KEY_HEADER: &str = idem_core::KEY_HEADER;
/// The default [`methods`](crate::IdempotencyLayer::methods).
pub const DEFAULT_METHODS: [Method; 2] = [Method::POST, Method::PATCH];
/// The default [`scope_headers`](crate::IdempotencyLayer::scope_headers).
pub const DEFAULT_SCOPE_HEADERS: [&str; 1] = ["Authorization"];
/// The default [`max_body`](crate::IdempotencyLayer::max_body): 10 MiB.
pub const DEFAULT_MAX_BODY: usize = 10 << 20;
/// The default [`max_stored_response`](crate::IdempotencyLayer::max_stored_response): 1 MiB.
pub const DEFAULT_MAX_STORED_RESPONSE: usize = 1 << 20;
/// The default [`release_statuses`](crate::IdempotencyLayer::release_statuses): `401` and `403`,
/// refusals before the operation runs.
pub const DEFAULT_RELEASE_STATUSES: [StatusCode; 2] =
    [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN];

/// What to do with a request whose key cannot be looked up because the store failed.
///
/// Either way, a store that answered with a record it cannot read ([`StoreError::Corrupted`]),
/// that is full ([`StoreError::Full`]) or misconfigured is answered `503`: only a store that
/// cannot be reached, or did not answer in time, before the key was acquired is passed through.
/// Once the key is acquired the request is never forwarded a second way: a failure to record its
/// result follows the engine's path (retried, then the key frees up when its lease ends).
///
/// [`StoreError::Corrupted`]: idem_core::StoreError::Corrupted
/// [`StoreError::Full`]: idem_core::StoreError::Full
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum OnStoreError {
    /// Fail closed: answer `503` problem+json with `Retry-After`; the request is not forwarded.
    #[default]
    Reject,
    /// Forward the request without idempotency (and log a warning) when the store is
    /// [unavailable](idem_core::StoreError::Unavailable): availability over exactly-once.
    Passthrough,
}

/// What to do with a keyed request that carries none of the scope headers, which would put it in
/// the anonymous scope that every such caller shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Anonymous {
    /// Run it in the anonymous scope; its stored response is replayed without `Set-Cookie`.
    #[default]
    Allow,
    /// Answer `400` problem+json of type
    /// [`SCOPE_REQUIRED`](crate::problem::SCOPE_REQUIRED): nothing is stored or forwarded.
    Reject,
}

/// Whether a request that the inner service could not deliver may have reached the other side.
///
/// Two ways to say it: an inner service that fails with an error has it classified by
/// [`IdempotencyLayer::classify_error`](crate::IdempotencyLayer::classify_error); one that
/// answers for the failure itself, as a proxy answers `502` or `504`, puts the `Delivery` in its
/// response's extensions. Either way the layer never stores that answer: not sent, it releases
/// the key and returns the answer; maybe sent, the outcome is ambiguous (the key released under
/// [`Ambiguous::Retry`](idem_core::Ambiguous::Retry); under
/// [`Ambiguous::Reject`](idem_core::Ambiguous::Reject) recorded and answered as outcome
/// unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// It cannot have taken effect (connection refused, DNS, connect timeout): the key is
    /// released.
    NotSent,
    /// It may have taken effect (the connection was lost after the request was sent): an
    /// ambiguous outcome, handled as [`Ambiguous`](idem_core::Ambiguous) says.
    MaybeSent,
}

/// Says whether a request that failed with an error of the inner service may have reached the
/// other side: [`Settings::classify_error`]. The default takes every error as
/// [`Delivery::MaybeSent`].
#[derive(Clone)]
pub struct ClassifyError(Arc<Classify>);

/// The function a [`ClassifyError`] calls.
type Classify = dyn Fn(&(dyn Error + 'static)) -> Delivery + Send + Sync;

impl ClassifyError {
    /// Classifies with `f`.
    pub fn new(f: impl Fn(&(dyn Error + 'static)) -> Delivery + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Whether the request that failed with `error` may have reached the other side.
    pub fn classify(&self, error: &(dyn Error + 'static)) -> Delivery {
        (self.0)(error)
    }
}

impl Default for ClassifyError {
    fn default() -> Self {
        Self::new(|_| Delivery::MaybeSent)
    }
}

impl fmt::Debug for ClassifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClassifyError(..)")
    }
}

/// Everything an [`IdempotencyLayer`](crate::IdempotencyLayer) applies, given whole to
/// [`IdempotencyLayer::with_settings`](crate::IdempotencyLayer::with_settings) or changed one at
/// a time by the layer's builder methods, which document each field. The defaults are those of
/// [`IdempotencyLayer::new`](crate::IdempotencyLayer::new).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// The header that carries the key ([`key_header`](crate::IdempotencyLayer::key_header)).
    pub key_header: HeaderName,
    /// The methods keys apply to ([`methods`](crate::IdempotencyLayer::methods)).
    pub methods: Vec<Method>,
    /// Whether a covered request must carry a key
    /// ([`require_key`](crate::IdempotencyLayer::require_key)).
    pub require_key: bool,
    /// The engine's rules: TTL, lease, in-flight requests, ambiguous outcomes, waiters and the
    /// store calls' time limit.
    pub policy: Policy,
    /// The headers hashed into the scope; empty turns scoping off
    /// ([`scope_headers`](crate::IdempotencyLayer::scope_headers)).
    pub scope_headers: Vec<HeaderName>,
    /// What a keyed request without any scope header gets
    /// ([`anonymous`](crate::IdempotencyLayer::anonymous)).
    pub anonymous: Anonymous,
    /// How bodies are fingerprinted ([`fingerprint`](crate::IdempotencyLayer::fingerprint)).
    pub fingerprint: FingerprintMode,
    /// The largest body of a request with a key ([`max_body`](crate::IdempotencyLayer::max_body)).
    pub max_body: usize,
    /// How long such a body may take to arrive; `None`: no limit
    /// ([`body_timeout`](crate::IdempotencyLayer::body_timeout)).
    pub body_timeout: Option<Duration>,
    /// The most bytes of request bodies buffered at once; `None`: no limit
    /// ([`max_buffered`](crate::IdempotencyLayer::max_buffered)).
    pub max_buffered: Option<usize>,
    /// The largest response body stored
    /// ([`max_stored_response`](crate::IdempotencyLayer::max_stored_response)).
    pub max_stored_response: usize,
    /// What a store failure before the key is acquired gets
    /// ([`on_store_error`](crate::IdempotencyLayer::on_store_error)).
    pub on_store_error: OnStoreError,
    /// Whether an inner service error may have reached the other side
    /// ([`classify_error`](crate::IdempotencyLayer::classify_error)).
    pub classify_error: ClassifyError,
    /// The header that carries each executed request's fencing token to the inner service;
    /// `None` sends none ([`fencing_header`](crate::IdempotencyLayer::fencing_header)).
    pub fencing_header: Option<HeaderName>,
    /// The statuses that mean the operation did not run: the key is released, nothing is stored
    /// ([`release_statuses`](crate::IdempotencyLayer::release_statuses)).
    pub release_statuses: Vec<StatusCode>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            key_header: HeaderName::from_bytes(DEFAULT_KEY_HEADER.as_bytes())
                .expect("the default key header is a valid header name"),
            methods: DEFAULT_METHODS.to_vec(),
            require_key: false,
            policy: Policy::default(),
            scope_headers: DEFAULT_SCOPE_HEADERS
                .iter()
                .map(|name| {
                    HeaderName::from_bytes(name.as_bytes())
                        .expect("the default scope headers are valid header names")
                })
                .collect(),
            anonymous: Anonymous::Allow,
            fingerprint: FingerprintMode::Json,
            max_body: DEFAULT_MAX_BODY,
            body_timeout: None,
            max_buffered: None,
            max_stored_response: DEFAULT_MAX_STORED_RESPONSE,
            on_store_error: OnStoreError::Reject,
            classify_error: ClassifyError::default(),
            fencing_header: None,
            release_statuses: DEFAULT_RELEASE_STATUSES.to_vec(),
        }
    }
}
