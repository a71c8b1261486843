//! How an operation under a key behaves: retention, lease, concurrency and ambiguous outcomes.

use std::time::Duration;

/// What a request does when the same key is already being processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// Answer at once that the key is in flight (HTTP 409 with `Retry-After`).
    Reject,
    /// Wait up to `timeout` for the first attempt's result and return it; when the first attempt
    /// releases the key, one waiter takes it over and executes. After `timeout`, answer as
    /// [`InFlight::Reject`] does.
    Wait {
        /// How long to wait for the first attempt.
        timeout: Duration,
    },
}

/// What to do with an outcome that does not say whether the operation took effect (a 5xx, 408
/// or 429, or a connection lost after the request was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Ambiguous {
    /// Release the key, so a retry executes again.
    #[default]
    Retry,
    /// Never execute twice: store 5xx/408/429 responses as final, and record a lost connection or
    /// a lease that ran out without a result as "outcome unknown".
    Reject,
}

/// The rules an [`Engine`](crate::Engine) applies to every key.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Ambiguous, InFlight, Policy};
///
/// let policy = Policy::default()
///     .ttl(Duration::from_secs(3600))
///     .in_flight(InFlight::Wait { timeout: Duration::from_secs(10) })
///     .ambiguous(Ambiguous::Reject);
/// assert_eq!(policy.lease, Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// How long a completed record is kept (and replayed), counted from its completion.
    pub ttl: Duration,
    /// How long a worker holds a key without renewing it. The engine renews at a third of it.
    pub lease: Duration,
    /// Concurrent requests for a key that is being processed.
    pub in_flight: InFlight,
    /// Outcomes that do not say whether the operation took effect.
    pub ambiguous: Ambiguous,
    /// In wait mode, how many requests may wait at once for keys held by others, across all keys
    /// of an engine; a request beyond it is answered [`InFlight::Reject`]'s way at once. Each
    /// waiter holds memory and, with stores that signal changes, a subscription.
    pub max_waiters: usize,
    /// The longest a single store call may take; a call still unanswered then is abandoned and
    /// fails as [`StoreError::Unavailable`](crate::StoreError::Unavailable). `None`: a third of
    /// [`Policy::lease`], so that a renewal that hangs leaves time for the next one.
    pub store_timeout: Option<Duration>,
}

impl Default for Policy {
    /// TTL 24 h (as Stripe), lease 30 s, in-flight requests rejected, ambiguous outcomes retried,
    /// at most 1000 waiters, store calls limited to a third of the lease.
    fn default() -> Self {
        Self {
            ttl: Self::DEFAULT_TTL,
            lease: Self::DEFAULT_LEASE,
            in_flight: InFlight::Reject,
            ambiguous: Ambiguous::Retry,
            max_waiters: Self::DEFAULT_MAX_WAITERS,
            store_timeout: None,
        }
    }
}

impl Policy {
    /// The default [`Policy::ttl`]: 24 h, as Stripe.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
    /// The default [`Policy::lease`]: 30 s.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// The default [`Policy::max_waiters`]: 1000.
    pub const DEFAULT_MAX_WAITERS: usize = 1000;
    /// The `timeout` to give [`InFlight::Wait`] when nothing else says: 10 s.
    pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Without [`Policy::store_timeout`], a store call may take the lease divided by this, so
    /// that a renewal that hangs leaves time for the next one.
    pub const STORE_TIMEOUT_LEASE_FRACTION: u32 = 3;

    /// Sets [`Policy::ttl`].
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets [`Policy::lease`].
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`Policy::in_flight`].
    #[must_use]
    pub fn in_flight(mut self, in_flight: InFlight) -> Self {
        self.in_flight = in_flight;
        self
    }

    /// Sets [`Policy::ambiguous`].
    #[must_use]
    pub fn ambiguous(mut self, ambiguous: Ambiguous) -> Self {
        self.ambiguous = ambiguous;
        self
    }

    /// Sets [`Policy::max_waiters`].
    #[must_use]
    pub fn max_waiters(mut self, max_waiters: usize) -> Self {
        self.max_waiters = max_waiters;
        self
    }

    /// Sets [`Policy::store_timeout`].
    #[must_use]
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = Some(timeout);
        self
    }

    /// The time limit of one store call: [`Policy::store_timeout`], or a third of the lease.
    pub fn store_call_limit(&self) -> Duration {
        self.store_timeout
            .unwrap_or(self.lease / Self::STORE_TIMEOUT_LEASE_FRACTION)
    }
}
