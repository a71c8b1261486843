//! [`Purger`]: the background task that forgets inbox rows older than the dedup window.

use std::time::Duration;

use sqlx::Pool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Inbox, InboxDatabase};

/// The handle of the task started by [`Inbox::spawn_purger`]. Dropping it stops the task after
/// its current batch; [`Purger::stop`] also waits for that.
#[derive(Debug)]
#[must_use = "the purger stops when its handle is dropped"]
pub struct Purger {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Purger {
    pub(crate) fn spawn<DB: InboxDatabase>(
        inbox: Inbox<DB>,
        pool: Pool<DB>,
        every: Duration,
        batch: u32,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(inbox, pool, every, batch, stop.clone()));
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

/// Every `every`, deletes old rows `batch` at a time until a batch comes back short. Each batch
/// is its own statement, so the purge never holds many locks nor a long snapshot.
async fn run<DB: InboxDatabase>(
    inbox: Inbox<DB>,
    pool: Pool<DB>,
    every: Duration,
    batch: u32,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let mut purged = 0;
        while !stop.is_cancelled() {
            match inbox.purge(&pool, batch).await {
                Ok(n) => {
                    purged += n;
                    if n < u64::from(batch) {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "purging the idem inbox failed; retrying at the next interval"
                    );
                    break;
                }
            }
        }
        if purged > 0 {
            tracing::debug!(purged, "purged idem inbox rows older than the dedup window");
        }
    }
}
