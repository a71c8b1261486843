//! [`LatencyWindow`]: the store's latency percentiles over the last minute, for `GET /v1/stats`.
//!
//! Prometheus' histograms (`/metrics`) count since the process started and leave percentiles to
//! the scraper; an operator who opens the stats wants them now, without a query language. The
//! window keeps six ten-second slots of log-scale buckets, written with one atomic add per call
//! (no lock on the request path) and summed when read.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use tokio::time::Instant;

/// How long each slot covers.
const SLOT: Duration = Duration::from_secs(10);
/// The slots a snapshot sums: one minute.
const WINDOW_SLOTS: u64 = 6;
/// The slots kept: the window, and the one being written.
const SLOTS: usize = WINDOW_SLOTS as usize + 1;
/// Buckets per power of two from 4 µs up: each about 19% wide. Below 4 µs, one per microsecond.
const SUB_BUCKETS: u64 = 4;
/// The highest power of two of microseconds covered: about 67 s (longer calls count in the
/// last bucket).
const TOP_POWER: u64 = 26;
const BUCKETS: usize = (4 + (TOP_POWER - 2) * SUB_BUCKETS) as usize;

/// Store call latencies over the last minute.
#[derive(Debug)]
pub(crate) struct LatencyWindow {
    start: Instant,
    slots: [Slot; SLOTS],
}

#[derive(Debug)]
struct Slot {
    /// The ten-second period (since `start`) this slot counts, plus one (0: never used).
    period: AtomicU64,
    calls: AtomicU64,
    errors: AtomicU64,
    max_micros: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Slot {
    fn new() -> Self {
        Self {
            period: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            max_micros: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Empties the slot for `period`, unless another call already did.
    fn claim(&self, period: u64) {
        let current = self.period.load(Ordering::Acquire);
        if current != period
            && self
                .period
                .compare_exchange(current, period, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // A call that raced the claim may land in the old counts or be wiped: a handful of
            // samples of a statistic, never a record.
            for counter in [&self.calls, &self.errors, &self.max_micros]
                .into_iter()
                .chain(&self.buckets)
            {
                counter.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// The window's figures, as `GET /v1/stats` shows them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LatencySnapshot {
    /// Calls in the window.
    pub(crate) calls: u64,
    /// Calls that failed (the store was unavailable, full or corrupted; not a lost lease).
    pub(crate) errors: u64,
    /// Percentiles and the maximum, when there were calls: each the upper bound of the bucket
    /// the percentile falls in (within 19% of the exact value).
    pub(crate) latency: Option<Percentiles>,
}

/// Latency percentiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Percentiles {
    /// The median.
    pub(crate) p50: Duration,
    /// The 90th percentile.
    pub(crate) p90: Duration,
    /// The 99th percentile.
    pub(crate) p99: Duration,
    /// The slowest call.
    pub(crate) max: Duration,
}

impl Default for LatencyWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyWindow {
    /// The window's length.
    pub(crate) const LENGTH: Duration = Duration::from_secs(SLOT.as_secs() * WINDOW_SLOTS);

    /// An empty window.
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            slots: std::array::from_fn(|_| Slot::new()),
        }
    }

    /// The period of `at`, plus one.
    fn period(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.start).as_secs() / SLOT.as_secs()) + 1
    }

    /// Counts one call that ended at `ended` after `elapsed`, failed or not: the caller read the
    /// clock for its latency already.
    pub(crate) fn record(&self, ended: Instant, elapsed: Duration, failed: bool) {
        let period = self.period(ended);
        let slot = &self.slots[(period % SLOTS as u64) as usize];
        slot.claim(period);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        slot.buckets[bucket(micros)].fetch_add(1, Ordering::Relaxed);
        slot.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            slot.errors.fetch_add(1, Ordering::Relaxed);
        }
        slot.max_micros.fetch_max(micros, Ordering::Relaxed);
    }

    /// The last minute: the six slots before the current one and the current one, so between 60
    /// and 70 seconds of calls.
    pub(crate) fn snapshot(&self) -> LatencySnapshot {
        let now = self.period(Instant::now());
        let mut counts = [0u64; BUCKETS];
        let (mut calls, mut errors, mut max_micros) = (0, 0, 0);
        for slot in &self.slots {
            let period = slot.period.load(Ordering::Acquire);
            if period == 0 || now - period.min(now) > WINDOW_SLOTS {
                continue;
            }
            calls += slot.calls.load(Ordering::Relaxed);
            errors += slot.errors.load(Ordering::Relaxed);
            max_micros = max_micros.max(slot.max_micros.load(Ordering::Relaxed));
            for (sum, bucket) in counts.iter_mut().zip(&slot.buckets) {
                *sum += bucket.load(Ordering::Relaxed);
            }
        }
        let total: u64 = counts.iter().sum();
        let latency = (total > 0).then(|| {
            let max = Duration::from_micros(max_micros);
            let at = |quantile: f64| percentile(&counts, total, quantile).min(max);
            Percentiles {
                p50: at(0.50),
                p90: at(0.90),
                p99: at(0.99),
                max,
            }
        });
        LatencySnapshot {
            calls,
            errors,
            latency,
        }
    }
}

/// The bucket of a call of `micros` microseconds: `[micros, micros + 1)` below 4 µs, then four
/// per power of two, `[2^p (1 + q/4), 2^p (1 + (q + 1)/4))`.
fn bucket(micros: u64) -> usize {
    if micros < 4 {
        return micros as usize;
    }
    let power = u64::from(63 - micros.leading_zeros());
    // The two bits after the leading one pick the quarter of the power.
    let quarter = (micros >> (power - 2)) & 0b11;
    ((4 + (power - 2) * SUB_BUCKETS + quarter) as usize).min(BUCKETS - 1)
}

/// The upper bound of bucket `index`, in microseconds.
fn upper_bound(index: usize) -> u64 {
    let index = index as u64;
    if index < 4 {
        return index + 1;
    }
    let power = (index - 4) / SUB_BUCKETS + 2;
    let quarter = (index - 4) % SUB_BUCKETS;
    (1u64 << power) * (SUB_BUCKETS + quarter + 1) / SUB_BUCKETS
}

/// The upper bound of the bucket holding the `quantile` of `total` calls.
fn percentile(counts: &[u64; BUCKETS], total: u64, quantile: f64) -> Duration {
    let rank = ((total as f64 * quantile).ceil() as u64).max(1);
    let mut seen = 0;
    for (index, count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return Duration::from_micros(upper_bound(index));
        }
    }
    Duration::from_micros(upper_bound(BUCKETS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_falls_below_its_buckets_upper_bound_and_above_the_previous_one() {
        for micros in [
            1u64, 2, 3, 4, 5, 7, 100, 999, 1000, 1001, 65_535, 1_000_000, 30_000_000,
        ] {
            let index = bucket(micros);
            assert!(micros < upper_bound(index), "{micros} < bound of {index}");
            assert!(
                micros >= upper_bound(index - 1),
                "{micros} >= bound of {}",
                index - 1
            );
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn an_empty_window_has_no_percentiles() {
        let window = LatencyWindow::new();
        assert_eq!(
            window.snapshot(),
            LatencySnapshot {
                calls: 0,
                errors: 0,
                latency: None
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn percentiles_cover_the_last_minute_only() {
        let window = LatencyWindow::new();
        // 98 fast calls and 2 slow ones, one of them failed.
        for _ in 0..98 {
            window.record(Instant::now(), Duration::from_micros(1000), false);
        }
        window.record(Instant::now(), Duration::from_millis(40), false);
        window.record(Instant::now(), Duration::from_millis(50), true);
        let snapshot = window.snapshot();
        assert_eq!((snapshot.calls, snapshot.errors), (100, 1));
        let latency = snapshot.latency.unwrap();
        // 1000 µs is in [896, 1024): bound 1024 µs. 40 ms is in [32768, 40960).
        assert_eq!(latency.p50, Duration::from_micros(1024));
        assert_eq!(latency.p90, Duration::from_micros(1024));
        assert_eq!(latency.p99, Duration::from_micros(40_960));
        assert_eq!(latency.max, Duration::from_millis(50));

        // Still counted 65 s later (the slot of second 0 is within 6 slots of second 65)...
        tokio::time::advance(Duration::from_secs(65)).await;
        assert_eq!(window.snapshot().calls, 100);
        window.record(Instant::now(), Duration::from_micros(10), false);
        // ...and gone once its slot is out of the window.
        tokio::time::advance(Duration::from_secs(10)).await;
        let snapshot = window.snapshot();
        assert_eq!(snapshot.calls, 1);
        assert_eq!(snapshot.latency.unwrap().max, Duration::from_micros(10));
    }
}
