//! The record kept under an address, and its states.

use crate::{FencingToken, Fingerprint, StoredResponse, Timestamp};

/// What a completed operation left under its key, replayed to every retry.
///
/// # Examples
///
/// ```
/// use idem_core::{Outcome, StoredResponse};
///
/// let paid = Outcome::from(StoredResponse::new(201).body("paid"));
/// assert_eq!(Outcome::decode(&paid.encode())?, paid);
/// assert_eq!(paid.response().map(|r| r.status), Some(201));
///
/// let unknown = Outcome::Unknown;
/// assert_eq!(Outcome::decode(&unknown.encode())?, Outcome::Unknown);
/// assert_eq!(unknown.response(), None);
/// # Ok::<(), idem_core::DecodeError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The operation finished with this response.
    Response(StoredResponse),
    /// The operation's outcome is unknown: its request was sent and the result lost, or its
    /// worker died while it ran, under [`Ambiguous::Reject`](crate::Ambiguous::Reject). It may
    /// or may not have taken effect, and it is not executed again under this key; clients must
    /// treat it as final. HTTP front ends answer it as a `500` problem of type
    /// [`OUTCOME_UNKNOWN_TYPE`](crate::OUTCOME_UNKNOWN_TYPE).
    Unknown,
}

impl Outcome {
    /// The response, unless the outcome is unknown.
    pub fn response(&self) -> Option<&StoredResponse> {
        match self {
            Outcome::Response(response) => Some(response),
            Outcome::Unknown => None,
        }
    }
}

impl From<StoredResponse> for Outcome {
    fn from(response: StoredResponse) -> Self {
        Outcome::Response(response)
    }
}

/// The state of a record: being processed by the holder of a lease, or completed with a response.
///
/// A released key has no record; a record whose `expires_at` has passed is treated as absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// A worker holds the key.
    Processing {
        /// The holder's token.
        token: FencingToken,
        /// When the lease runs out unless renewed.
        lease_until: Timestamp,
    },
    /// The operation finished; its outcome is replayed to retries with the same fingerprint.
    Completed {
        /// The token of the worker that completed it.
        token: FencingToken,
        /// The stored outcome.
        outcome: Outcome,
        /// When it was completed (the TTL counts from here).
        completed_at: Timestamp,
    },
}

impl RecordState {
    /// `"processing"` or `"completed"`, as shown by admin tools.
    pub fn name(&self) -> &'static str {
        match self {
            RecordState::Processing { .. } => "processing",
            RecordState::Completed { .. } => "completed",
        }
    }

    /// The token of the worker that holds or completed the record.
    pub fn token(&self) -> FencingToken {
        match self {
            RecordState::Processing { token, .. } | RecordState::Completed { token, .. } => *token,
        }
    }
}

/// Everything a store keeps under one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The fingerprint of the request that created the record.
    pub fingerprint: Fingerprint,
    /// When the current operation was acquired.
    pub created_at: Timestamp,
    /// When the record stops counting: a completed record's completion plus the TTL; a processing
    /// record's acquisition plus the TTL, and never before its lease ends.
    pub expires_at: Timestamp,
    /// The state.
    pub state: RecordState,
}
