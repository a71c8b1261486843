//! The relay's wake-ups: `LISTEN` on the outbox's channel, in a task of its own.
//!
//! Every enqueue notifies the channel when its transaction commits. The task turns each
//! notification (and every burst of them) into one permit on a [`Notify`], which the relay's
//! idle wait takes. Notifications sent while the task is not connected are lost, so each time it
//! starts listening it wakes the relay once; the relay also polls, so a listener that cannot
//! connect only makes the relay slower to notice new messages.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::{sync::Notify, task::JoinHandle};

/// How the listener's connection shows in `pg_stat_activity`, and in logs.
const APPLICATION_NAME: &str = "idem-relay-listener";

/// The listening task; aborted when dropped.
pub(super) struct Listener {
    task: JoinHandle<()>,
}

impl Listener {
    /// Listens on `channel` on a connection of its own, made with `pool`'s settings (so that the
    /// relay's pool keeps all its connections), and wakes `wake`.
    pub(super) fn spawn(pool: &PgPool, channel: String, wake: Arc<Notify>) -> Self {
        let listener = idem_sql::listener::Listener::new(
            (*pool.connect_options()).clone(),
            APPLICATION_NAME,
            channel,
        );
        // A permit is stored until taken, so a burst of notifications wakes the relay once.
        let listen = listener.run(move |_| wake.notify_one());
        Self {
            task: tokio::spawn(listen),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
