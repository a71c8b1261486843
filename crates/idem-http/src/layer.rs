//! [`IdempotencyLayer`]: the settings, and the tower [`Layer`] that applies them.
//!
//! # Examples
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//!
//! use http::HeaderName;
//! use idem_core::{Ambiguous, InFlight, MemoryStore};
//! use idem_http::IdempotencyLayer;
//!
//! let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()))
//!     .require_key(true)
//!     .ttl(Duration::from_secs(3600))
//!     .in_flight(InFlight::Wait { timeout: Duration::from_secs(10) })
//!     .ambiguous(Ambiguous::Reject)
//!     .scope_headers([HeaderName::from_static("x-api-key")]);
//! assert_eq!(layer.engine().policy().ambiguous, Ambiguous::Reject);
//! ```

use std::{error::Error, fmt, sync::Arc, time::Duration};

use http::{HeaderName, Method, StatusCode};
use idem_core::{Ambiguous, Engine, FingerprintMode, InFlight, Store};
use tower::Layer;

use crate::{
    Anonymous, ClassifyError, Delivery, Idempotency, OnStoreError, Settings, service::Shared,
};

/// Applies [`Idempotency`] to a service: requests that carry an idempotency key run at most once
/// per key, and their retries get the stored response.
///
/// What happens to a request, in this order (the HTTP contract: docs/http.md, Responses):
///
/// 1. A method not covered ([`methods`](Self::methods)), or no key when none is required: the
///    request is forwarded untouched and its body streamed; nothing is stored.
/// 2. A missing key when [`require_key`](Self::require_key) is on, an invalid key, or a key
///    header sent twice: `400` problem+json; so is a key without any scope header when
///    [`anonymous`](Self::anonymous) is [`Anonymous::Reject`].
/// 3. A body over [`max_body`](Self::max_body): `413` problem+json, nothing stored. A body not
///    received within [`body_timeout`](Self::body_timeout): `408`. A body that does not fit in
///    the [`max_buffered`](Self::max_buffered) budget: `503` with `Retry-After`. In each case
///    the key is not acquired and nothing is forwarded.
/// 4. The request is fingerprinted and run under its key by the [`Engine`]: executed, replayed
///    (with `Idempotent-Replayed: true`), `409` while in flight (with `Retry-After`), or `422`
///    when the key was used with another request. The key is completed before the response is
///    returned.
/// 5. If the store fails: `503` problem+json with `Retry-After`, unless
///    [`on_store_error`](Self::on_store_error) is [`OnStoreError::Passthrough`].
///
/// Every response carries its [`RequestOutcome`](crate::RequestOutcome) as an extension, and its
/// [`RequestKey`](crate::RequestKey) when the request had a valid key.
///
/// All the services made by one layer and its clones share one [`Engine`], built with the layer
/// from its [`Settings`]. Each builder method returns a layer with the setting changed and an
/// engine of its own: configure the layer before handing it out.
pub struct IdempotencyLayer<St> {
    shared: Arc<Shared<St>>,
}

impl<St: Store + Clone> IdempotencyLayer<St> {
    /// A layer over `store` with the defaults: key header `Idempotency-Key`, methods `POST` and
    /// `PATCH`, key optional, TTL 24 h, lease 30 s, in-flight requests rejected, ambiguous
    /// outcomes retried, scope from `Authorization` (requests without it allowed, in the
    /// anonymous scope), JSON fingerprints, bodies up to 10 MiB, stored responses up to 1 MiB,
    /// no body timeout, no budget of buffered bytes, store failures rejected, every inner
    /// service error taken as [`Delivery::MaybeSent`], at most 1000 waiters, store calls limited
    /// to a third of the lease.
    pub fn new(store: St) -> Self {
        Self::with_settings(store, Settings::default())
    }

    /// A layer over `store` applying `settings`, its engine built at once.
    pub fn with_settings(store: St, settings: Settings) -> Self {
        Self {
            shared: Arc::new(Shared::new(Engine::new(store, settings.policy), settings)),
        }
    }

    /// The settings this layer applies.
    pub fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// The engine shared by every service this layer and its clones make (for example to call
    /// [`Engine::shutdown`] on graceful shutdown).
    pub fn engine(&self) -> Engine<St> {
        self.shared.engine.clone()
    }

    /// This layer's settings with `change` made, and an engine of their own.
    fn configure(self, change: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = self.shared.settings.clone();
        change(&mut settings);
        Self::with_settings(self.shared.engine.store().clone(), settings)
    }

    /// The header that carries the key. Default `Idempotency-Key`.
    #[must_use]
    pub fn key_header(self, name: HeaderName) -> Self {
        self.configure(|settings| settings.key_header = name)
    }

    /// The methods that keys apply to; other requests pass through. Default `POST` and `PATCH`.
    #[must_use]
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.configure(|settings| settings.methods = methods.into_iter().collect())
    }

    /// Whether a request with a covered method must carry a key (`400` without). Default off.
    #[must_use]
    pub fn require_key(self, required: bool) -> Self {
        self.configure(|settings| settings.require_key = required)
    }

    /// How long a completed key is replayed, counted from its completion. Default 24 h.
    #[must_use]
    pub fn ttl(self, ttl: Duration) -> Self {
        self.configure(|settings| settings.policy.ttl = ttl)
    }

    /// How long a request holds its key without renewing it; renewed every third of it while
    /// the request runs. Default 30 s.
    #[must_use]
    pub fn lease(self, lease: Duration) -> Self {
        self.configure(|settings| settings.policy.lease = lease)
    }

    /// What a request does while another with the same key runs: `409` at once, or wait for its
    /// result. Default [`InFlight::Reject`].
    #[must_use]
    pub fn in_flight(self, mode: InFlight) -> Self {
        self.configure(|settings| settings.policy.in_flight = mode)
    }

    /// What happens to a key after a 5xx, 408 or 429, or a response cut off after the request was
    /// sent. Default [`Ambiguous::Retry`] (the key is released).
    #[must_use]
    pub fn ambiguous(self, mode: Ambiguous) -> Self {
        self.configure(|settings| settings.policy.ambiguous = mode)
    }

    /// In wait mode, how many requests may wait at once for keys held by others; a request
    /// beyond it is answered `409` at once. Default 1000.
    #[must_use]
    pub fn max_waiters(self, max_waiters: usize) -> Self {
        self.configure(|settings| settings.policy.max_waiters = max_waiters)
    }

    /// The longest one store call may take before it counts as failed (`503` when the key was
    /// not acquired yet). Default a third of the lease.
    #[must_use]
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.configure(|settings| settings.policy.store_timeout = Some(timeout))
    }

    /// The headers whose names and values identify the caller, hashed into the key's scope.
    /// Replaces the default (`Authorization`); an empty list turns scoping off, so that every
    /// request is in the anonymous scope.
    #[must_use]
    pub fn scope_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.configure(|settings| settings.scope_headers = names.into_iter().collect())
    }

    /// What a keyed request without any of the scope headers gets: run in the anonymous scope, or
    /// refused with `400` problem `scope-required` before anything is stored or forwarded.
    /// Default [`Anonymous::Allow`]. With scoping off every request is anonymous, so
    /// [`Anonymous::Reject`] refuses every keyed request.
    ///
    /// Whatever the mode, a response stored in the anonymous scope is stored and replayed
    /// without its `Set-Cookie` headers: the callers that share that scope are not one client.
    #[must_use]
    pub fn anonymous(self, mode: Anonymous) -> Self {
        self.configure(|settings| settings.anonymous = mode)
    }

    /// How request bodies are fingerprinted. Default [`FingerprintMode::Json`].
    #[must_use]
    pub fn fingerprint(self, mode: FingerprintMode) -> Self {
        self.configure(|settings| settings.fingerprint = mode)
    }

    /// The largest body of a request with a key (it is buffered to be fingerprinted). Default
    /// 10 MiB.
    #[must_use]
    pub fn max_body(self, bytes: usize) -> Self {
        self.configure(|settings| settings.max_body = bytes)
    }

    /// How long the body of a request with a key may take to arrive in full, counted from when
    /// the layer starts reading it; then `408` problem+json
    /// ([`BODY_TIMEOUT`](crate::problem::BODY_TIMEOUT)), and the key is not acquired. Requests
    /// without a key are streamed to the inner service, which bounds their bodies itself.
    /// Default: none.
    #[must_use]
    pub fn body_timeout(self, timeout: Duration) -> Self {
        self.configure(|settings| settings.body_timeout = Some(timeout))
    }

    /// The most bytes of request bodies that all the services of this layer buffer at once.
    /// A request whose body would pass it gets `503` problem+json
    /// ([`OVERLOADED`](crate::problem::OVERLOADED)) with `Retry-After: 1`, and the key is not
    /// acquired. A body of known length (`Content-Length`) is counted whole before it is read;
    /// a chunked one as its chunks arrive. The bytes count until the inner service has answered
    /// (its response head), by which time it has read them. Requests without a key stream
    /// through and do not count. Keep it at least [`max_body`](Self::max_body), or the largest
    /// bodies are always refused. Default: no limit.
    #[must_use]
    pub fn max_buffered(self, bytes: usize) -> Self {
        self.configure(|settings| settings.max_buffered = Some(bytes))
    }

    /// The largest response body stored; a larger one is delivered whole and its replay is a
    /// problem saying it was not stored. Default 1 MiB.
    #[must_use]
    pub fn max_stored_response(self, bytes: usize) -> Self {
        self.configure(|settings| settings.max_stored_response = bytes)
    }

    /// What to do when the store fails before the key is acquired. Default
    /// [`OnStoreError::Reject`].
    #[must_use]
    pub fn on_store_error(self, mode: OnStoreError) -> Self {
        self.configure(|settings| settings.on_store_error = mode)
    }

    /// Says whether a request that failed with an error of the inner service may have reached
    /// the other side. Default: every error is [`Delivery::MaybeSent`].
    #[must_use]
    pub fn classify_error(
        self,
        f: impl Fn(&(dyn Error + 'static)) -> Delivery + Send + Sync + 'static,
    ) -> Self {
        self.configure(|settings| settings.classify_error = ClassifyError::new(f))
    }

    /// Sends each executed request's fencing token to the inner service in the header `name`
    /// (for example `Idempotency-Token`), as a decimal number. The token grows with every new
    /// holder of a key: a request that executes after another's lease ran out carries a larger
    /// one than the request it took over from. An inner service that keeps the largest token it
    /// has seen for a key and refuses a write that carries a smaller one cannot be written to
    /// late by a request whose lease was taken over (docs/http.md, Fencing tokens).
    ///
    /// A header of that name sent by the client is removed from every request, keyed or not, so
    /// that the inner service sees only tokens the layer issued. Use a name of its own: not the
    /// key header, a scope header, or a header the exchange itself uses (`Host`,
    /// `Content-Length`, `Authorization`, hop-by-hop headers…), which it would overwrite.
    /// Default: no header. Whatever this setting, an executed request carries its token in its
    /// extensions, as an [`idem_core::FencingToken`].
    #[must_use]
    pub fn fencing_header(self, name: HeaderName) -> Self {
        self.configure(|settings| settings.fencing_header = Some(name))
    }

    /// The statuses that mean the operation did not run, such as an authentication refused: the
    /// response is passed on, nothing is stored and the key is released, so that the retry
    /// executes, and answers that cost the service nothing do not fill the store for the TTL.
    /// Default `401` and `403` ([`DEFAULT_RELEASE_STATUSES`](crate::DEFAULT_RELEASE_STATUSES));
    /// give only statuses your service answers before it acts.
    #[must_use]
    pub fn release_statuses(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        let statuses = statuses.into_iter().collect();
        self.configure(|settings| settings.release_statuses = statuses)
    }
}

impl<S, St: Store + Clone> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::new(inner, Arc::clone(&self.shared))
    }
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<St> fmt::Debug for IdempotencyLayer<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}
