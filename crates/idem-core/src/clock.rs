//! Time: a millisecond [`Timestamp`] and the [`Clock`] that stores without a server clock read.

use std::{
    fmt,
    ops::{Add, Sub},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// A point in time, in whole milliseconds since the Unix epoch: the resolution every store keeps.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// From milliseconds since the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// From a [`SystemTime`], truncated to the millisecond (times before 1970 become the epoch).
    pub fn from_system_time(time: SystemTime) -> Self {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        Self(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    /// As a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// How long from `earlier` to `self`; zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturates instead of overflowing.
    fn add(self, rhs: Duration) -> Timestamp {
        let millis = u64::try_from(rhs.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(millis))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturates at the epoch.
    fn sub(self, rhs: Duration) -> Timestamp {
        let millis = u64::try_from(rhs.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(millis))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ms)", self.0)
    }
}

/// The source of "now" for stores that keep time themselves (memory, SQLite).
///
/// Server stores use the server's clock instead, so that instances with skewed clocks agree.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }
}

/// A clock that moves only when told to, for tests. Clones share one time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_core::{Clock, ManualClock, Timestamp};
///
/// let clock = ManualClock::new(Timestamp::from_millis(1_000));
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now(), Timestamp::from_millis(3_000));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(Arc::new(AtomicU64::new(start.0)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(millis, Ordering::SeqCst);
    }

    /// Sets the clock (backwards too: a wall clock can jump).
    pub fn set(&self, to: Timestamp) {
        self.0.store(to.0, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    /// Stopped at 2026-01-01T00:00:00Z.
    fn default() -> Self {
        Self::new(Timestamp::from_millis(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(10);
        assert_eq!(t - Duration::from_millis(20), Timestamp::EPOCH);
        assert_eq!(
            Timestamp::from_millis(u64::MAX - 1) + Duration::from_secs(1),
            Timestamp::from_millis(u64::MAX)
        );
        assert_eq!(
            t.saturating_since(Timestamp::from_millis(30)),
            Duration::ZERO
        );
        assert_eq!(
            Timestamp::from_millis(30).saturating_since(t),
            Duration::from_millis(20)
        );
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new(Timestamp::from_millis(5));
        let b = a.clone();
        a.advance(Duration::from_millis(7));
        assert_eq!(b.now(), Timestamp::from_millis(12));
        b.set(Timestamp::from_millis(1));
        assert_eq!(a.now(), Timestamp::from_millis(1));
    }

    #[test]
    fn system_time_round_trips_at_millisecond_resolution() {
        let t = Timestamp::from_millis(1_767_225_600_123);
        assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
    }
}
