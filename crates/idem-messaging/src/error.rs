//! [`Error`]: the failures of the inbox, the outbox and the relay.

/// A boxed error from a broker client, kept as the source of [`Error::Settle`] and of
/// [`PublishError`](crate::PublishError).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure of the inbox, the outbox or the relay.
///
/// Expected outcomes are values, not errors: a duplicate delivery is
/// [`Arrival::Duplicate`](crate::Arrival::Duplicate), a message the broker refused is a
/// [`PublishError`](crate::PublishError) in the relay's report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A statement failed: the database is unreachable, the transaction was rolled back by a
    /// serialization failure or a deadlock, or the tables are missing (see
    /// [`Error::is_transient`]).
    #[error("the database failed")]
    Database(#[from] sqlx::Error),
    /// The migrations could not be applied: the table was migrated by a newer idem or changed by
    /// hand, an earlier run failed half-way, or the role may not create the schema or the table.
    #[error("cannot apply the idem-messaging migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A delivery carries no producer's message id, so it cannot be deduplicated. The consumer
    /// helper rejects it without requeueing (the broker dead-letters it if so configured).
    #[error("the message carries no message id")]
    MissingMessageId,
    /// A delivery's message id is empty, longer than 255 bytes or holds control characters.
    #[error("the message id is invalid")]
    InvalidMessageId(#[source] crate::InvalidId),
    /// The broker could not be told the outcome of a delivery (ack, requeue or reject): the
    /// channel or the connection was lost. The broker delivers the message again; if the inbox
    /// transaction had committed, the redelivery is a duplicate and is skipped.
    #[error("cannot settle the delivery with the broker")]
    Settle(#[source] BoxError),
    /// Messages could not be received from the broker: it is unreachable, or refused the
    /// request (credentials, a queue that does not exist).
    #[error("cannot receive messages from the broker")]
    Receive(#[source] BoxError),
}

impl Error {
    /// Whether trying again may succeed: the database was unreachable or busy, or the
    /// transaction lost a serialization race or a deadlock. Classified by SQLSTATE, never by
    /// message text. A missing table, a refused privilege or bad data are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Database(error) => idem_sql::Failure::of(error).is_transient(),
            Self::Settle(_) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_are_transient() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(Error::from(io).is_transient());
        assert!(Error::from(sqlx::Error::PoolTimedOut).is_transient());
        assert!(!Error::from(sqlx::Error::RowNotFound).is_transient());
        assert!(!Error::MissingMessageId.is_transient());
    }
}
