//! [`Purger`]: the background task that removes expired records in bounded batches.

use std::time::Duration;

use idem_core::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::PostgresStore;

/// The handle of the task started by [`PostgresStore::spawn_purger`]. Dropping it stops the task
/// after its current batch; [`Purger::stop`] also waits for that.
#[derive(Debug)]
#[must_use = "the purger stops when its handle is dropped"]
pub struct Purger {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Purger {
    pub(crate) fn spawn(store: PostgresStore, every: Duration, batch: usize) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(store, every, batch.max(1), stop.clone()));
        Self {
            stop,
            task: Some(task),
        }
    }

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

/// Every `every`, deletes expired records `batch` at a time until a batch comes back short. Each
/// batch is its own short transaction, so the purge never holds many locks nor a long snapshot
/// (which would keep autovacuum from reclaiming the rows it deletes).
async fn run(store: PostgresStore, every: Duration, batch: usize, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let mut purged = 0;
        while !stop.is_cancelled() {
            match store.purge_expired(batch).await {
                Ok(n) => {
                    purged += n;
                    if n < batch {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "purging expired idem records failed; retrying at the next interval"
                    );
                    break;
                }
            }
        }
        if purged > 0 {
            tracing::debug!(purged, "purged expired idem records");
        }
    }
}
