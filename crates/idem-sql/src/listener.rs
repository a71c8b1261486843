//! [`Listener`]: `LISTEN` on one channel, on a connection of its own, reconnecting with backoff.
//!
//! Notifications sent while the listener is not connected are lost, so each time it starts
//! listening (the first time, and after a lost connection) it says so with [`Event::Listening`]:
//! whoever waits on the channel should then look again, as if notified.

use std::time::Duration;

use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgListener, PgPoolOptions},
};

/// The backoff between attempts to connect: doubling from the first to the second.
const RECONNECT: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// What the listener tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// It (re)started listening: notifications sent before may have been lost.
    Listening,
    /// A notification arrived, with its payload.
    Notification(&'a str),
}

/// `LISTEN` on one channel. Clones share the connection.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() {
/// use idem_sql::listener::{Event, Listener};
///
/// let connect = "postgres://postgres@127.0.0.1/app".parse().unwrap();
/// let listener = Listener::new(connect, "app-listener", "app_changes".into());
/// let task = tokio::spawn(listener.clone().run(|event| match event {
///     Event::Listening => println!("look again"),
///     Event::Notification(payload) => println!("changed: {payload}"),
/// }));
/// // …
/// task.abort();
/// listener.close().await;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Listener {
    pool: PgPool,
    channel: String,
    name: &'static str,
}

impl Listener {
    /// Listens on `channel`, on one connection made with `connect` (so that no pool of the
    /// caller gives up one of its connections), shown as `name` in `pg_stat_activity` and in
    /// logs. Does no I/O until [`run`](Self::run).
    pub fn new(connect: PgConnectOptions, name: &'static str, channel: String) -> Self {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(connect.application_name(name));
        Self {
            pool,
            channel,
            name,
        }
    }

    /// The channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.pool.is_closed()
    }

    /// Closes the connection for good: a running [`run`](Self::run) then keeps failing to
    /// connect, so abort its task first.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Listens until its task is aborted, calling `on` for each [`Event`]. A connection that
    /// cannot be made or is lost is logged and made again, 100 ms after the first failure, then
    /// doubling up to 5 s between attempts.
    pub async fn run(self, mut on: impl FnMut(Event<'_>) + Send) {
        let (channel, name) = (self.channel.as_str(), self.name);
        let mut backoff = Backoff::default();
        loop {
            match self.subscribe().await {
                Ok(mut listener) => {
                    backoff = Backoff::default();
                    on(Event::Listening);
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(notification)) => {
                                on(Event::Notification(notification.payload()));
                            }
                            Ok(None) => {
                                tracing::warn!(channel, "{name} lost its connection");
                                break;
                            }
                            Err(error) => {
                                tracing::warn!(
                                    channel,
                                    error = &error as &dyn std::error::Error,
                                    "{name} failed"
                                );
                                break;
                            }
                        }
                    }
                }
                Err(error) => tracing::warn!(
                    channel,
                    error = &error as &dyn std::error::Error,
                    "{name} cannot connect; polling meanwhile"
                ),
            }
            tokio::time::sleep(backoff.next()).await;
        }
    }

    async fn subscribe(&self) -> Result<PgListener, sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        // Reconnecting is ours to do, so that we know when to say `Listening`.
        listener.eager_reconnect(false);
        listener.listen(&self.channel).await?;
        Ok(listener)
    }
}

/// The pauses between attempts to connect.
#[derive(Debug)]
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(RECONNECT.0)
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let pause = self.0;
        self.0 = (pause * 2).min(RECONNECT.1);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_five_seconds() {
        let mut backoff = Backoff::default();
        let pauses: Vec<_> = (0..8).map(|_| backoff.next().as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }
}
