//! The buffer budget: how many bytes of request bodies all the requests of one layer may hold
//! in memory at once while they are fingerprinted and forwarded.
//!
//! A counter rather than a semaphore: a request that does not fit is refused at once (`503`),
//! never queued, so nothing ever waits for bytes to be given back.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

/// The bytes that may be buffered at once, and those that are.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    used: AtomicUsize,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Takes `bytes` from the budget, or nothing if they do not fit.
    pub(crate) fn try_reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        self.take(bytes).then(|| Reservation {
            budget: Arc::clone(self),
            bytes,
        })
    }

    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// The bytes taken now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Bytes taken from a [`Budget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Reservation {
    /// The bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes, or nothing if they do not fit.
    pub(crate) fn grow(&mut self, more: usize) -> bool {
        let grown = self.budget.take(more);
        if grown {
            self.bytes += more;
        }
        grown
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_the_limit_and_are_given_back_when_dropped() {
        let budget = Budget::new(10);
        let mut a = budget.try_reserve(4).unwrap();
        assert!(budget.try_reserve(7).is_none());
        let b = budget.try_reserve(6).unwrap();
        assert_eq!(budget.used(), 10);
        assert!(!a.grow(1));
        drop(b);
        assert!(a.grow(6));
        assert_eq!(a.bytes(), 10);
        assert!(budget.try_reserve(usize::MAX).is_none());
        drop(a);
        assert_eq!(budget.used(), 0);
    }
}
