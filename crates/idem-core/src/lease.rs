//! Fencing tokens and leases: who may finish an operation.

use std::fmt;

use crate::Timestamp;

/// The generation of an acquisition. Every acquisition of an address gets a token strictly
/// greater than every token the store issued before for that address, so a worker whose lease
/// was taken over holds a stale token, and `complete`, `release` and `renew` refuse it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a generation read back from a store.
    pub const fn new(generation: u64) -> Self {
        Self(generation)
    }

    /// The generation.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The right to run an operation, granted by a successful `acquire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The token that `complete`, `release` and `renew` must present.
    pub token: FencingToken,
    /// When the lease runs out unless renewed; after that, another acquire may take it over.
    pub until: Timestamp,
    /// Whether this acquisition took over a lease that ran out (its holder is presumed dead, and
    /// may have executed the operation: with ambiguous outcomes rejected, the engine records
    /// "outcome unknown" instead of executing again).
    pub took_over: bool,
}
