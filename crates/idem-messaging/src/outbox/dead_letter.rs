//! [`DeadLetter`]: a message the relay gave up on.

use std::time::SystemTime;

use crate::{MessageId, OutboxMessage};

/// A message that failed [`Relay::max_attempts`](crate::Relay::max_attempts) times, kept in the
/// outbox until [`Outbox::revive`](crate::Outbox::revive) puts it back in line (or an operator
/// deletes it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The message's id.
    pub id: MessageId,
    /// The message.
    pub message: OutboxMessage,
    /// How many attempts it had.
    pub attempts: u32,
    /// When it was given up on (the database server's clock).
    pub dead_at: SystemTime,
    /// The last attempt's error.
    pub last_error: Option<String>,
}
