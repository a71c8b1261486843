//! What the layer did with a request: the [`RequestOutcome`] and [`RequestKey`] response extensions.
//!
//! # Examples
//!
//! ```
//! use idem_http::RequestOutcome;
//!
//! assert_eq!(RequestOutcome::Replayed.as_str(), "replayed");
//! assert_eq!(RequestOutcome::TooLarge.to_string(), "too_large");
//! ```

use std::fmt;

use idem_core::{IdempotencyKey, Scope};

/// What the layer did with a request. Every response the service returns carries it as a
/// response extension, and it labels the `idem_requests_total` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// The request ran the operation; the response is the inner service's.
    Executed,
    /// The operation had completed before: the stored response was replayed.
    Replayed,
    /// Another request with the same key is still running (409).
    Conflict,
    /// The key is in use by a request with another fingerprint (422).
    Mismatch,
    /// The key was missing though required, or invalid (400); or the body could not be read
    /// (400) or did not arrive within the body timeout (408).
    Invalid,
    /// Forwarded without idempotency: method not covered, no key, or the store failed under
    /// [`OnStoreError::Passthrough`](crate::OnStoreError::Passthrough).
    Passthrough,
    /// The request body was over the limit (413).
    TooLarge,
    /// The store failed and the request was refused (503).
    StoreError,
    /// The request body did not fit in the budget of bytes buffered at once (503).
    Overloaded,
}

impl RequestOutcome {
    /// Every outcome, in the order of their declaration.
    pub const ALL: [RequestOutcome; 9] = [
        RequestOutcome::Executed,
        RequestOutcome::Replayed,
        RequestOutcome::Conflict,
        RequestOutcome::Mismatch,
        RequestOutcome::Invalid,
        RequestOutcome::Passthrough,
        RequestOutcome::TooLarge,
        RequestOutcome::StoreError,
        RequestOutcome::Overloaded,
    ];

    /// The label used in metrics and logs: `executed`, `replayed`, `conflict`, `mismatch`,
    /// `invalid`, `passthrough`, `too_large`, `store_error` or `overloaded`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Executed => "executed",
            RequestOutcome::Replayed => "replayed",
            RequestOutcome::Conflict => "conflict",
            RequestOutcome::Mismatch => "mismatch",
            RequestOutcome::Invalid => "invalid",
            RequestOutcome::Passthrough => "passthrough",
            RequestOutcome::TooLarge => "too_large",
            RequestOutcome::StoreError => "store_error",
            RequestOutcome::Overloaded => "overloaded",
        }
    }
}

impl fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key a request carried and its caller's scope: a response extension on every response to
/// a request with a valid key, for logs. Neither shows in clear: its `Debug` and
/// [`digest`](RequestKey::digest) give the key's digest, and the scope is a hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    key: IdempotencyKey,
    scope: Scope,
}

impl RequestKey {
    pub(crate) fn new(key: IdempotencyKey, scope: Scope) -> Self {
        Self { key, scope }
    }

    /// [`IdempotencyKey::digest`] of the key, computed when asked (a log line that is not
    /// written costs nothing); the key itself is never logged.
    pub fn digest(&self) -> String {
        self.key.digest()
    }

    /// The caller's scope (a hash; its identity is never kept).
    pub fn scope(&self) -> Scope {
        self.scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_holds_each_outcome_at_its_index() {
        for (index, outcome) in RequestOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome}");
        }
    }
}
