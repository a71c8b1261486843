//! [`OutboxCounts`]: what an outbox holds, by what its relays can do with it.

use std::time::SystemTime;

/// What an outbox holds at one instant, counted by [`Outbox::counts`](crate::Outbox::counts) in
/// one statement (one snapshot: the counts add up).
///
/// Every message is pending or a dead letter. A pending message is due, in flight, or waiting
/// out the backoff of a failed attempt: `pending = due + in_flight + backing off`. Times are the
/// database server's clock, as the relays' claims read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxCounts {
    /// Messages ready to publish now: pending, their due time passed, and held by no claim.
    /// These are what the relays claim next, oldest due first. With the relay's ordering on, a
    /// due message whose key has an earlier pending message still waits for that one.
    ///
    /// A message's due time is its enqueue time, then the end of its backoff after a failed
    /// attempt. On SQLite, a claim writes the end of its lease as its messages' due time: the
    /// messages of a claim whose lease ran out (its relay died or stalled) are due again.
    pub due: u64,
    /// Messages claimed by a relay and not yet settled: being published, or published and
    /// waiting to be marked (deleted once confirmed, or their failed attempt recorded).
    ///
    /// On PostgreSQL, the pending messages locked by a transaction in progress: a claim holds its
    /// messages locked until it commits or ends (another transaction writing a message also
    /// holds it). On SQLite, the messages carrying a claim's token whose lease has not run out.
    pub in_flight: u64,
    /// Messages in the dead-letter state (out of attempts), kept until
    /// [`Outbox::revive`](crate::Outbox::revive) puts them back in line or an operator deletes
    /// them.
    pub dead_letters: u64,
    /// Every pending message: due, in flight, or waiting out a backoff. Dead letters excluded.
    pub pending: u64,
    /// The earliest due time among the due messages: since when the message that has waited
    /// longest for a relay could have been claimed. `None` when no message is due.
    pub oldest_due: Option<SystemTime>,
}
