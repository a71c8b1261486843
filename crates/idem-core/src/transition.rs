//! The record's state machine as pure functions, shared by the stores that decide in Rust (memory,
//! SQLite). Server stores encode the same rules in SQL or Lua; the conformance suite checks that
//! they agree.

use std::time::Duration;

use crate::{Fingerprint, Terms, Timestamp};

/// What `acquire` must do, given the record found under the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquirePlan {
    /// No live record: create one with a new token.
    Create,
    /// A processing record whose lease ran out, same fingerprint: take it over with a new token.
    TakeOver,
    /// A completed record, same fingerprint: return its response.
    Replay,
    /// A processing record with a live lease, same fingerprint.
    InFlight {
        /// The lease's remaining time.
        retry_after: Duration,
    },
    /// A live record with another fingerprint.
    Mismatch,
}

/// The parts of a stored record that `acquire` decides on.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// The fingerprint of the request that created the record.
    pub fingerprint: &'a Fingerprint,
    /// When the record stops counting.
    pub expires_at: Timestamp,
    /// The lease's end while processing; `None` once completed.
    pub lease_until: Option<Timestamp>,
}

/// Decides `acquire` (see [`Store::acquire`](crate::Store::acquire) for the rules).
pub fn plan_acquire(
    existing: Option<RecordView<'_>>,
    fingerprint: &Fingerprint,
    now: Timestamp,
) -> AcquirePlan {
    let Some(record) = existing.filter(|r| now < r.expires_at) else {
        return AcquirePlan::Create;
    };
    if record.fingerprint != fingerprint {
        return AcquirePlan::Mismatch;
    }
    match record.lease_until {
        None => AcquirePlan::Replay,
        Some(until) if now < until => AcquirePlan::InFlight {
            retry_after: until.saturating_since(now),
        },
        Some(_) => AcquirePlan::TakeOver,
    }
}

/// The expiry of a record acquired at `now`: the TTL, but never before the lease ends.
pub fn processing_expiry(now: Timestamp, terms: Terms) -> Timestamp {
    now + terms.ttl.max(terms.lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: Fingerprint = Fingerprint::from_bytes([1; 32]);
    const OTHER: Fingerprint = Fingerprint::from_bytes([2; 32]);

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn processing(lease_until: u64, expires_at: u64) -> RecordView<'static> {
        RecordView {
            fingerprint: &FP,
            expires_at: at(expires_at),
            lease_until: Some(at(lease_until)),
        }
    }

    #[test]
    fn plans_follow_the_state_machine() {
        assert_eq!(plan_acquire(None, &FP, at(0)), AcquirePlan::Create);
        assert_eq!(
            plan_acquire(Some(processing(100, 1_000)), &FP, at(40)),
            AcquirePlan::InFlight {
                retry_after: Duration::from_millis(60)
            }
        );
        assert_eq!(
            plan_acquire(Some(processing(100, 1_000)), &FP, at(100)),
            AcquirePlan::TakeOver
        );
        assert_eq!(
            plan_acquire(Some(processing(100, 1_000)), &OTHER, at(500)),
            AcquirePlan::Mismatch
        );
        assert_eq!(
            plan_acquire(Some(processing(100, 1_000)), &OTHER, at(1_000)),
            AcquirePlan::Create
        );
        let completed = RecordView {
            fingerprint: &FP,
            expires_at: at(1_000),
            lease_until: None,
        };
        assert_eq!(
            plan_acquire(Some(completed), &FP, at(999)),
            AcquirePlan::Replay
        );
        assert_eq!(
            plan_acquire(Some(completed), &OTHER, at(999)),
            AcquirePlan::Mismatch
        );
        assert_eq!(
            plan_acquire(Some(completed), &FP, at(1_000)),
            AcquirePlan::Create
        );
    }

    #[test]
    fn expiry_never_precedes_the_lease() {
        let terms = Terms {
            lease: Duration::from_secs(30),
            ttl: Duration::from_secs(1),
        };
        assert_eq!(processing_expiry(at(0), terms), at(30_000));
    }
}
