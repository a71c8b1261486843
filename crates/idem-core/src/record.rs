//! The record kept under an address, and its states.

use crate::{FencingToken, Fingerprint, StoredResponse, Timestamp};

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
    /// The operation finished; its response is replayed to retries with the same fingerprint.
    Completed {
        /// The token of the worker that completed it.
        token: FencingToken,
        /// The stored response.
        response: StoredResponse,
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
