//! [`PurgeLoop`]: deleting what has expired, in bounded batches, on a schedule; [`Purger`]: the
//! handle of one running in a task of its own.
//!
//! Each batch is its own short statement, so a purge never holds many locks nor a long snapshot
//! (which, on PostgreSQL, would keep autovacuum from reclaiming the rows it deletes). Several
//! instances may purge one table at once. A round may be paced ([`PurgeLoop::pace`]): it then
//! pauses between batches, so that a backlog of expired rows is deleted without taking the
//! database from live traffic for the whole round.

use std::{future::Future, time::Duration};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One batch of a purge: deletes at most `limit` expired rows and says how many.
///
/// With the `store` feature, every [`idem_core::Store`] is one, through its
/// [`purge_expired`](idem_core::Store::purge_expired).
pub trait Purge: Send + Sync + 'static {
    /// Why a batch failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Deletes at most `limit` expired rows; returns how many it deleted.
    fn purge(&self, limit: usize) -> impl Future<Output = Result<usize, Self::Error>> + Send;
}

#[cfg(feature = "store")]
impl<S: idem_core::Store> Purge for S {
    type Error = idem_core::StoreError;

    fn purge(&self, limit: usize) -> impl Future<Output = Result<usize, Self::Error>> + Send {
        self.purge_expired(limit)
    }
}

/// Every [`every`](Self::every), runs batches of [`batch`](Self::batch) rows until one comes
/// back short; the first round at once. A failed batch is logged and the round ends: the next
/// one tries again.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::{sync::{Arc, atomic::{AtomicUsize, Ordering}}, time::Duration};
/// use idem_sql::{Purge, PurgeLoop};
///
/// /// 25 expired rows.
/// struct Rows(Arc<AtomicUsize>);
///
/// impl Purge for Rows {
///     type Error = std::io::Error;
///
///     async fn purge(&self, limit: usize) -> Result<usize, std::io::Error> {
///         let left = self.0.load(Ordering::SeqCst);
///         let deleted = left.min(limit);
///         self.0.store(left - deleted, Ordering::SeqCst);
///         Ok(deleted)
///     }
/// }
///
/// let rows = Arc::new(AtomicUsize::new(25));
/// let purger = PurgeLoop::new(Rows(Arc::clone(&rows)), "expired rows").batch(10).spawn();
/// while rows.load(Ordering::SeqCst) > 0 {
///     tokio::time::sleep(Duration::from_millis(1)).await;
/// }
/// purger.stop().await;
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct PurgeLoop<P> {
    purge: P,
    what: &'static str,
    every: Duration,
    batch: usize,
    time_limit: Option<Duration>,
    pace: Option<f64>,
}

impl<P: Purge> PurgeLoop<P> {
    /// Purges with `purge`, every minute, 1,000 rows at a time. `what` names the rows in logs
    /// (`"expired idem records"`).
    pub fn new(purge: P, what: &'static str) -> Self {
        Self {
            purge,
            what,
            every: Duration::from_secs(60),
            batch: 1000,
            time_limit: None,
            pace: None,
        }
    }

    /// Sets how long to wait after the start of a round before the next one.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// Sets the most rows a batch deletes (at least 1).
    #[must_use]
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Sets how long a batch may take: one that has not answered then is dropped, and counts as
    /// failed. Unset, a batch takes as long as it takes.
    #[must_use]
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = Some(limit);
        self
    }

    /// Paces each round so that its batches take at most `share` of its time (between 0 and 1):
    /// after a full batch that took `t`, the next one starts `t × (1 / share − 1)` later. At
    /// `0.25` a round deletes a backlog at a quarter of the database's speed and leaves it three
    /// quarters of its time for everything else. Unpaced (the default, or `share` of 1 or
    /// more), batches follow one another at once.
    #[must_use]
    pub fn pace(mut self, share: f64) -> Self {
        self.pace = (share > 0.0 && share < 1.0).then_some(share);
        self
    }

    /// Runs until `stop` is cancelled; a running batch is finished first.
    pub async fn run(self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            self.round(&stop).await;
        }
    }

    /// Starts [`run`](Self::run) in a task, stopped by the returned [`Purger`].
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn spawn(self) -> Purger {
        let stop = CancellationToken::new();
        let task = tokio::spawn(self.run(stop.clone()));
        Purger {
            stop,
            task: Some(task),
        }
    }

    /// Batches until one comes back short, fails, or `stop` is cancelled.
    async fn round(&self, stop: &CancellationToken) {
        let what = self.what;
        let mut purged = 0;
        while !stop.is_cancelled() {
            let started = tokio::time::Instant::now();
            let batch = self.purge.purge(self.batch);
            let done = match self.time_limit {
                Some(limit) => tokio::time::timeout(limit, batch).await.ok(),
                None => Some(batch.await),
            };
            match done {
                Some(Ok(n)) => {
                    purged += n;
                    if n < self.batch {
                        break;
                    }
                    if let Some(share) = self.pace {
                        let pause = started.elapsed().mul_f64(1.0 / share - 1.0);
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "purging {what} failed; retrying at the next interval"
                    );
                    break;
                }
                None => {
                    tracing::warn!(
                        time_limit = ?self.time_limit,
                        "purging {what} did not answer in time; retrying at the next interval"
                    );
                    break;
                }
            }
        }
        if purged > 0 {
            tracing::debug!(purged, "purged {what}");
        }
    }
}

/// The handle of a [`PurgeLoop`] running in its own task. Dropping it stops the task after its
/// current batch; [`Purger::stop`] also waits for that.
#[derive(Debug)]
#[must_use = "the purger stops when its handle is dropped"]
pub struct Purger {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Purger {
    /// Stops the task and waits until its current batch is done.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// Rows to purge, and the limit of every batch asked for.
    #[derive(Clone, Default)]
    struct Table {
        left: Arc<AtomicUsize>,
        batches: Arc<Mutex<Vec<usize>>>,
        fail: bool,
        hang: bool,
        /// How long each batch takes.
        slow: Option<Duration>,
    }

    impl Purge for Table {
        type Error = std::io::Error;

        async fn purge(&self, limit: usize) -> Result<usize, std::io::Error> {
            self.batches.lock().unwrap().push(limit);
            if self.hang {
                std::future::pending::<()>().await;
            }
            if let Some(slow) = self.slow {
                tokio::time::sleep(slow).await;
            }
            if self.fail {
                return Err(std::io::Error::other("down"));
            }
            let left = self.left.load(Ordering::SeqCst);
            let deleted = left.min(limit);
            self.left.store(left - deleted, Ordering::SeqCst);
            Ok(deleted)
        }
    }

    fn table(rows: usize) -> Table {
        let table = Table::default();
        table.left.store(rows, Ordering::SeqCst);
        table
    }

    fn batches(table: &Table) -> Vec<usize> {
        table.batches.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_runs_batches_until_a_short_one_then_waits_for_the_next() {
        let table = table(25);
        let purger = PurgeLoop::new(table.clone(), "rows")
            .every(Duration::from_secs(60))
            .batch(10)
            .spawn();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(batches(&table), [10, 10, 10]);
        assert_eq!(table.left.load(Ordering::SeqCst), 0);

        table.left.store(3, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(58)).await;
        assert_eq!(batches(&table), [10, 10, 10]);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(batches(&table), [10, 10, 10, 10]);
        assert_eq!(table.left.load(Ordering::SeqCst), 0);
        purger.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_round_pauses_three_times_as_long_as_each_batch_took_at_a_quarter() {
        let table = Table {
            slow: Some(Duration::from_millis(100)),
            ..table(35)
        };
        let purger = PurgeLoop::new(table.clone(), "rows")
            .batch(10)
            .pace(0.25)
            .spawn();
        // Batches at 0, 400, 800 and 1200 ms, each taking 100 ms; the last one is short.
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(batches(&table), [10]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(batches(&table), [10, 10]);
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(batches(&table), [10, 10, 10, 10]);
        assert_eq!(table.left.load(Ordering::SeqCst), 0);
        purger.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_batch_ends_the_round() {
        let table = Table {
            fail: true,
            ..table(25)
        };
        let stop = CancellationToken::new();
        let run = tokio::spawn(
            PurgeLoop::new(table.clone(), "rows")
                .batch(10)
                .run(stop.clone()),
        );
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(batches(&table), [10, 10]);
        stop.cancel();
        run.await.unwrap();
        assert_eq!(table.left.load(Ordering::SeqCst), 25);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_does_not_answer_in_time_ends_the_round() {
        let table = Table {
            hang: true,
            ..table(25)
        };
        let purger = PurgeLoop::new(table.clone(), "rows")
            .time_limit(Duration::from_secs(5))
            .spawn();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(batches(&table), [1000]);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(batches(&table), [1000, 1000]);
        purger.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_handle_stops_the_task() {
        let table = table(0);
        let purger = PurgeLoop::new(table.clone(), "rows")
            .every(Duration::from_secs(1))
            .spawn();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(batches(&table), [1000, 1000]);
        drop(purger);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(batches(&table), [1000, 1000]);
    }
}
