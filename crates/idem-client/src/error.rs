//! [`Error`]: why [`send`](crate::RequestBuilder::send) has no definite answer.

use std::fmt;

use idem_core::{IdempotencyKey, KeyError};

use crate::{Problem, Response};

/// Why an operation has no definite answer, or could not be sent at all.
///
/// [`GaveUp`](Error::GaveUp) and [`OutcomeUnknown`](Error::OutcomeUnknown) mean the operation
/// *may* have taken effect. After `GaveUp`, sending it again with the same key (see
/// [`RequestBuilder::key`](crate::RequestBuilder::key)) is safe and finds out; after
/// `OutcomeUnknown` it is not worth it: the server answers the same until its record expires.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every attempt failed in a way worth retrying, and the attempts ran out or the deadline
    /// came: the caller never got a definite answer.
    #[error("gave up after {attempts} attempt(s): {reason}")]
    GaveUp {
        /// The key every attempt carried.
        key: IdempotencyKey,
        /// How many attempts were sent.
        attempts: u32,
        /// What ended the retries.
        reason: GiveUpReason,
        /// How the last attempt failed.
        #[source]
        last: LastFailure,
    },
    /// The server recorded that the operation's outcome is unknown (a `500` problem of type
    /// [`urn:idem:problem:outcome-unknown`](idem_core::OUTCOME_UNKNOWN_TYPE)): the request
    /// reached the API and its result was lost. It is final — every retry gets the same answer —
    /// so it is not retried; the operation may or may not have taken effect.
    #[error("the outcome of the operation is unknown: it may or may not have taken effect")]
    OutcomeUnknown {
        /// The key every attempt carried.
        key: IdempotencyKey,
        /// How many attempts were sent.
        attempts: u32,
        /// The server's problem: its `detail` says what was lost.
        problem: Problem,
        /// The server's answer.
        response: Response,
    },
    /// The key was used before for a different request (a `422` problem of type
    /// `urn:idem:problem:fingerprint-mismatch`): another method, path or body under the same
    /// key. It is the caller's mistake — a key reused for a new operation, or a request that
    /// changed between attempts — so it is final, and nothing was executed for this request.
    #[error("the idempotency key was used for a different request")]
    Mismatch {
        /// The key every attempt carried.
        key: IdempotencyKey,
        /// How many attempts were sent.
        attempts: u32,
        /// The server's problem.
        problem: Problem,
        /// The server's answer.
        response: Response,
    },
    /// The caller-supplied key is not a valid idempotency key; nothing was sent.
    #[error("invalid idempotency key")]
    InvalidKey(#[source] KeyError),
    /// The JSON body could not be serialized; nothing was sent.
    #[error("the JSON body could not be serialized")]
    Json(#[source] serde_json::Error),
    /// reqwest refused the request before sending it (a malformed URL or header, a scheme it
    /// cannot speak); nothing was sent.
    #[error("the request could not be built")]
    Build(#[source] reqwest::Error),
}

/// What ended the retries of [`Error::GaveUp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The maximum number of attempts was sent.
    MaxAttempts,
    /// The total deadline passed, or the next wait would have passed it.
    Deadline,
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MaxAttempts => "no attempts left",
            Self::Deadline => "the deadline passed",
        })
    }
}

/// How the last attempt of an [`Error::GaveUp`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LastFailure {
    /// The server answered with a status worth retrying (`408`, `409`, `429`, `502`, `503` or
    /// `504`).
    #[error("the last attempt was answered {}", .0.status())]
    Status(Response),
    /// No answer: the connection failed, the attempt timed out, or the connection closed before
    /// the whole response arrived.
    #[error("the last attempt got no answer")]
    Transport(#[source] reqwest::Error),
}
