//! The layer's settings, and the choices that are not part of [`Policy`].
//!
//! # Examples
//!
//! ```
//! use idem_http::{Delivery, IdempotencyLayer, OnStoreError};
//! use std::sync::Arc;
//!
//! let layer = IdempotencyLayer::new(Arc::new(idem_core::MemoryStore::new()))
//!     .on_store_error(OnStoreError::Passthrough)
//!     .classify_error(|_error| Delivery::NotSent);
//! # drop(layer);
//! ```

use std::{error::Error, fmt, sync::Arc, time::Duration};

use http::{HeaderName, Method};
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
pub enum Anonymous {
    /// Run it in the anonymous scope; its stored response is replayed without `Set-Cookie`.
    #[default]
    Allow,
    /// Answer `400` problem+json of type
    /// [`SCOPE_REQUIRED`](crate::problem::SCOPE_REQUIRED): nothing is stored or forwarded.
    Reject,
}

/// Whether a request that failed with an error of the inner service may have reached the other
/// side, as decided by [`IdempotencyLayer::classify_error`](crate::IdempotencyLayer::classify_error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// It cannot have taken effect (connection refused, DNS, connect timeout): the key is
    /// released.
    NotSent,
    /// It may have taken effect (the connection was lost after the request was sent): an
    /// ambiguous outcome, handled as [`Ambiguous`](idem_core::Ambiguous) says.
    MaybeSent,
}

/// Decides how an inner service error maps to a [`Delivery`].
pub(crate) type Classifier = Arc<dyn Fn(&(dyn Error + 'static)) -> Delivery + Send + Sync>;

/// Everything the service needs to know; defaults as `IdempotencyLayer::new` documents them.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) key_header: HeaderName,
    pub(crate) methods: Vec<Method>,
    pub(crate) require_key: bool,
    pub(crate) policy: Policy,
    pub(crate) scope_headers: Vec<HeaderName>,
    pub(crate) anonymous: Anonymous,
    pub(crate) fingerprint: FingerprintMode,
    pub(crate) max_body: usize,
    pub(crate) body_timeout: Option<Duration>,
    pub(crate) max_buffered: Option<usize>,
    pub(crate) max_stored_response: usize,
    pub(crate) on_store_error: OnStoreError,
    pub(crate) classify_error: Classifier,
    pub(crate) fencing_header: Option<HeaderName>,
}

impl Default for Config {
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
            classify_error: Arc::new(|_| Delivery::MaybeSent),
            fencing_header: None,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("key_header", &self.key_header)
            .field("methods", &self.methods)
            .field("require_key", &self.require_key)
            .field("policy", &self.policy)
            .field("scope_headers", &self.scope_headers)
            .field("anonymous", &self.anonymous)
            .field("fingerprint", &self.fingerprint)
            .field("max_body", &self.max_body)
            .field("body_timeout", &self.body_timeout)
            .field("max_buffered", &self.max_buffered)
            .field("max_stored_response", &self.max_stored_response)
            .field("on_store_error", &self.on_store_error)
            .field("fencing_header", &self.fencing_header)
            .finish_non_exhaustive()
    }
}
