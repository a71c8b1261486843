//! The relay's wake-ups: `LISTEN` on the outbox's channel, in a task of its own.
//!
//! Every enqueue notifies the channel when its transaction commits. The task turns each
//! notification (and every burst of them) into one permit on a [`Notify`], which the relay's
//! idle wait takes. Notifications sent while the task is not connected are lost, so each time it
//! starts listening it wakes the relay once; the relay also polls, so a listener that cannot
//! connect only makes the relay slower to notice new messages.

use std::{sync::Arc, time::Duration};

use sqlx::{
    PgPool,
    postgres::{PgListener, PgPoolOptions},
};
use tokio::{sync::Notify, task::JoinHandle};

/// The backoff between attempts to connect.
const RECONNECT: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));
/// How the listener's connection shows in `pg_stat_activity`.
const APPLICATION_NAME: &str = "idem-relay-listener";

/// The listening task; aborted when dropped.
pub(super) struct Listener {
    task: JoinHandle<()>,
}

impl Listener {
    /// Listens on `channel` on a connection of its own, made with `pool`'s settings (so that the
    /// relay's pool keeps all its connections), and wakes `wake`.
    pub(super) fn spawn(pool: &PgPool, channel: String, wake: Arc<Notify>) -> Self {
        let connect = (*pool.connect_options())
            .clone()
            .application_name(APPLICATION_NAME);
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(connect);
        Self {
            task: tokio::spawn(listen(pool, channel, wake)),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn listen(pool: PgPool, channel: String, wake: Arc<Notify>) {
    let mut pause = RECONNECT.0;
    loop {
        match subscribe(&pool, &channel).await {
            Ok(mut listener) => {
                pause = RECONNECT.0;
                wake.notify_one();
                loop {
                    match listener.try_recv().await {
                        Ok(Some(_)) => {
                            while listener.next_buffered().is_some() {}
                            wake.notify_one();
                        }
                        Ok(None) => {
                            tracing::warn!(channel, "the outbox listener lost its connection");
                            break;
                        }
                        Err(error) => {
                            tracing::warn!(
                                channel,
                                error = &error as &dyn std::error::Error,
                                "the outbox listener failed"
                            );
                            break;
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(
                channel,
                error = &error as &dyn std::error::Error,
                "the outbox listener cannot connect; the relay polls meanwhile"
            ),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RECONNECT.1);
    }
}

async fn subscribe(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // Reconnecting is ours to do, so that we know when to wake the relay.
    listener.eager_reconnect(false);
    listener.listen(channel).await?;
    Ok(listener)
}
