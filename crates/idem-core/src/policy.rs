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
}

impl Default for Policy {
    /// TTL 24 h (as Stripe), lease 30 s, in-flight requests rejected, ambiguous outcomes retried.
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(24 * 60 * 60),
            lease: Duration::from_secs(30),
            in_flight: InFlight::Reject,
            ambiguous: Ambiguous::Retry,
        }
    }
}

impl Policy {
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
}
