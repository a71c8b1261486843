//! [`RetryPolicy`]: how many attempts, how long, and how long between them.

use std::time::Duration;

use fastrand::Rng;

/// The limits and waits of the retries of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// At least 1.
    pub(crate) max_attempts: u32,
    /// Across all attempts and the waits between them.
    pub(crate) deadline: Duration,
    pub(crate) attempt_timeout: Duration,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            deadline: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The wait after the `failed`-th failed attempt (from 1), with full jitter: uniform in
    /// `[0, min(max_backoff, initial_backoff × 2^(failed − 1))]`, so that clients that failed
    /// together do not come back together.
    pub(crate) fn backoff(&self, failed: u32, rng: &mut Rng) -> Duration {
        let cap = self.backoff_cap(failed);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.u64(0..=nanos))
    }

    /// The upper bound of [`backoff`](Self::backoff).
    fn backoff_cap(&self, failed: u32) -> Duration {
        2u32.checked_pow(failed.saturating_sub(1))
            .and_then(|factor| self.initial_backoff.checked_mul(factor))
            .map_or(self.max_backoff, |backoff| backoff.min(self.max_backoff))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_cap_doubles_from_the_initial_backoff_up_to_the_maximum() {
        let policy = RetryPolicy::default();
        let caps: Vec<_> = (1..=9).map(|failed| policy.backoff_cap(failed)).collect();
        assert_eq!(
            caps,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000].map(|ms| ms * MS)
        );
        assert_eq!(policy.backoff_cap(33), 5000 * MS);
        assert_eq!(policy.backoff_cap(u32::MAX), 5000 * MS);
    }

    #[test]
    fn an_initial_backoff_above_the_maximum_is_held_to_it() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        assert_eq!(policy.backoff_cap(1), Duration::from_secs(5));
    }

    #[test]
    fn full_jitter_stays_within_zero_and_the_cap_and_spreads_over_it() {
        let policy = RetryPolicy::default();
        let mut rng = Rng::with_seed(7);
        for failed in 1..=10 {
            let cap = policy.backoff_cap(failed);
            let waits: Vec<_> = (0..1000)
                .map(|_| policy.backoff(failed, &mut rng))
                .collect();
            assert!(waits.iter().all(|wait| *wait <= cap), "failed {failed}");
            // Full jitter, not "half the cap plus jitter": both halves are used.
            assert!(waits.iter().any(|wait| *wait < cap / 10), "failed {failed}");
            assert!(
                waits.iter().any(|wait| *wait > cap * 9 / 10),
                "failed {failed}"
            );
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_waits() {
        let policy = RetryPolicy::default();
        let waits = |seed| {
            let mut rng = Rng::with_seed(seed);
            (1..=6)
                .map(|failed| policy.backoff(failed, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(waits(42), waits(42));
        assert_ne!(waits(42), waits(43));
    }

    #[test]
    fn a_zero_backoff_waits_nothing() {
        let policy = RetryPolicy {
            initial_backoff: Duration::ZERO,
            ..RetryPolicy::default()
        };
        let mut rng = Rng::with_seed(1);
        assert_eq!(policy.backoff(3, &mut rng), Duration::ZERO);
    }
}
