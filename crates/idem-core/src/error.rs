//! The failures of stores and of the engine.

/// A store operation failed. Expected outcomes (a key in flight, a mismatch) are values of
/// [`Acquisition`](crate::Acquisition), not errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The token presented to `complete`, `release` or `renew` is not the record's current one:
    /// the lease was taken over, the key was released or forgotten, or the record expired.
    /// Nothing was changed.
    #[error("the lease was lost: the key is held by a newer token or no longer exists")]
    LeaseLost,
    /// The store cannot be reached or did not answer (HTTP front ends answer 503).
    #[error("the store is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store is at its configured capacity and refuses a new key (HTTP front ends answer
    /// 503). Keys it already holds are still acquired, renewed and completed.
    #[error("the store is full: {limit}")]
    Full {
        /// Which limit was reached, e.g. `max_keys = 1000000`.
        limit: String,
    },
    /// The store holds data this build cannot read.
    #[error("the store holds a corrupted record")]
    Corrupted(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store is not set up as this build expects (missing migrations, wrong schema, refused
    /// credentials or privileges).
    #[error("the store is misconfigured: {message}")]
    Misconfigured {
        /// What is wrong, and what to check, for the operator.
        message: String,
        /// The store's own error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The store does not implement this operation (the operators' listing and counting, on a
    /// store written before they existed).
    #[error("the store does not support {operation}")]
    Unsupported {
        /// What was asked, e.g. `listing records`.
        operation: &'static str,
    },
    /// A listing cursor this store did not issue (from another store, or altered).
    #[error("the listing cursor was not issued by this store")]
    InvalidCursor,
    /// A part of a streamed response appended past the next one: parts are appended in order,
    /// so the caller lost one. Nothing was stored.
    #[error("part {given} of the streamed response was appended before part {next}")]
    PartOutOfOrder {
        /// The index the store expects next.
        next: u32,
        /// The index given.
        given: u32,
    },
}

impl StoreError {
    /// Wraps a transport or database failure.
    pub fn unavailable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Unavailable(source.into())
    }

    /// A call that did not answer within `limit`: [`StoreError::Unavailable`], as the store is
    /// then, for all the caller can tell.
    pub fn timed_out(limit: std::time::Duration) -> Self {
        Self::Unavailable(Box::new(TimedOut { limit }))
    }

    /// Wraps a decoding failure.
    pub fn corrupted(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Corrupted(source.into())
    }

    /// A configuration failure the store reported: `message` says what to check, `source` is
    /// the store's own error.
    pub fn misconfigured(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Misconfigured {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// The source of [`StoreError::timed_out`].
#[derive(Debug, thiserror::Error)]
#[error("the store did not answer within {limit:?}")]
struct TimedOut {
    limit: std::time::Duration,
}
