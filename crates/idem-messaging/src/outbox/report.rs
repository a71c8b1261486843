//! [`BatchReport`]: what one claim-publish-mark cycle of a relay did.

/// What one cycle of a [`Relay`](crate::Relay) did: how many messages it claimed and what became
/// of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchReport {
    /// Messages claimed and handed to the publisher.
    pub claimed: usize,
    /// Messages the broker confirmed, deleted from the outbox.
    pub published: usize,
    /// Of those, messages whose claim another relay had taken over by the time this one marked
    /// them sent (its lease ran out): the other relay publishes them again, and the consumers'
    /// inbox skips the copy.
    pub taken_over: usize,
    /// Messages the broker rejected: a failed attempt each, retried after a backoff.
    pub failed: usize,
    /// Messages that went to the dead letters in this cycle (out of attempts).
    pub dead_lettered: usize,
    /// Messages given back untried: the broker was unavailable, or the relay was shutting down.
    pub released: usize,
}
