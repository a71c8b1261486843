//! The relay's wake-ups, where the database can send them: on PostgreSQL, `LISTEN` on the
//! outbox's channel, in a task of its own.
//!
//! Every enqueue notifies the channel when its transaction commits. The task turns each
//! notification (and every burst of them) into one permit on a [`Notify`], which the relay's
//! idle wait takes. Notifications sent while the task is not connected are lost, so each time it
//! starts listening it wakes the relay once; the relay also polls, so a listener that cannot
//! connect only makes the relay slower to notice new messages. SQLite sends none: relays on it
//! poll.

use std::sync::Arc;

use sqlx::Pool;
use tokio::{sync::Notify, task::JoinHandle};

use crate::{Outbox, OutboxDatabase};

/// The listening task, if any; aborted when dropped.
pub(super) struct Listener {
    task: Option<JoinHandle<()>>,
}

impl Listener {
    /// Wakes `wake` when messages are enqueued in `outbox`.
    pub(super) fn spawn<DB: OutboxDatabase>(
        pool: &Pool<DB>,
        outbox: &Outbox<DB>,
        wake: Arc<Notify>,
    ) -> Self {
        Self {
            task: DB::listen(pool, outbox, wake),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
