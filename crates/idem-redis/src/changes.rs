//! Wake-ups across processes for [`Store::changed`](idem_core::Store::changed), over Redis
//! pub/sub.
//!
//! The `complete`, `release`, `forget` and `append_part` scripts publish on the address's
//! channel (sharded pub/sub on a cluster, so a message stays on the key's shard). Each store has one subscriber
//! connection, apart from the command connection, and one task that keeps its subscriptions:
//! the channels somebody waits on. Messages are dispatched to the waiters of their channel as
//! the connection reads them.
//!
//! A waiter is registered when `changed` is called, but its channel is subscribed only once the
//! future is first polled, so a request that acquires its key at once costs Redis nothing. A
//! message published before Redis confirms a subscription is not delivered, so the
//! confirmation wakes the channel's waiters, and a lost connection wakes every waiter: the
//! engine then reads the record again (a spurious wake-up is harmless, a missed one is not).
//! A channel nobody waits on stays subscribed for a while, so that a burst of retries
//! subscribes once, then is unsubscribed.

use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use redis::{PushInfo, PushKind, Value};
use tokio::{
    sync::{Notify, watch},
    time::{Instant, sleep},
};
use tokio_util::task::AbortOnDropHandle;

use crate::{Error, RedisOptions, connection::Subscriber};

/// How long a channel nobody waits on stays subscribed.
const LINGER: Duration = Duration::from_secs(10);
/// The pause before subscribing again after Redis refused or did not answer.
const RETRY: Duration = Duration::from_millis(500);

/// The subscriber of one store. Dropping it stops its task and closes its connection.
pub(crate) struct Changes {
    shared: Arc<Shared>,
    _task: AbortOnDropHandle<()>,
}

impl Changes {
    /// Connects the subscriber and starts its task.
    pub(crate) async fn open(options: &RedisOptions) -> Result<Self, Error> {
        let shared = Arc::new(Shared::default());
        let on_push = {
            let shared = Arc::clone(&shared);
            move |push: PushInfo| {
                shared.dispatch(push);
                Ok::<(), Infallible>(())
            }
        };
        let subscriber = Subscriber::open(options, on_push).await?;
        let task = tokio::spawn(reconcile(Arc::clone(&shared), subscriber));
        Ok(Self {
            shared,
            _task: AbortOnDropHandle::new(task),
        })
    }

    /// Resolves when a message arrives on `channel`, or when one may have been missed.
    pub(crate) fn changed(&self, channel: String) -> impl Future<Output = ()> + Send + 'static {
        Interest::register(&self.shared, channel).wait()
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the task: a channel is wanted, or the connection was lost.
    reconcile: Notify,
}

#[derive(Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// Counts lost connections: a subscription confirmed on an older connection is gone.
    epoch: u64,
    /// Channels nobody waited on when the connection was lost, to unsubscribe in case the
    /// connection subscribes them again by itself (a cluster connection does).
    stale: Vec<String>,
}

struct Channel {
    /// Bumped to wake every waiter of the channel.
    signal: watch::Sender<()>,
    waiters: usize,
    subscription: Subscription,
    /// When the last waiter left.
    idle_since: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscription {
    /// Waiters are registered but none has polled yet.
    Unasked,
    /// To subscribe.
    Wanted,
    /// A `SUBSCRIBE` is on its way.
    Pending,
    /// Confirmed by Redis (or, with no waiter left, to unsubscribe when idle).
    Subscribed,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the map consistent; a panic elsewhere changes nothing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Handles a push from the subscriber connection (on the connection's own task).
    fn dispatch(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let Some(Value::BulkString(channel)) = push.data.first() else {
                    return;
                };
                let Ok(channel) = std::str::from_utf8(channel) else {
                    return;
                };
                if let Some(entry) = self.lock().channels.get(channel) {
                    entry.signal.send_replace(());
                }
            }
            PushKind::Disconnection => {
                let mut state = self.lock();
                let state = &mut *state;
                state.epoch += 1;
                state.channels.retain(|channel, entry| {
                    entry.signal.send_replace(());
                    if entry.waiters == 0 {
                        state.stale.push(channel.clone());
                        return false;
                    }
                    if entry.subscription != Subscription::Unasked {
                        entry.subscription = Subscription::Wanted;
                    }
                    true
                });
                self.reconcile.notify_one();
            }
            _ => {}
        }
    }

    /// A waiter of `channel` polled: the channel must be subscribed.
    fn want(&self, channel: &str) {
        let mut state = self.lock();
        if let Some(entry) = state.channels.get_mut(channel)
            && entry.subscription == Subscription::Unasked
        {
            entry.subscription = Subscription::Wanted;
            drop(state);
            self.reconcile.notify_one();
        }
    }

    /// A waiter of `channel` went away.
    fn leave(&self, channel: &str) {
        let mut state = self.lock();
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        entry.waiters -= 1;
        if entry.waiters > 0 {
            return;
        }
        match entry.subscription {
            // Never subscribed: nothing to undo.
            Subscription::Unasked | Subscription::Wanted => {
                state.channels.remove(channel);
            }
            Subscription::Pending | Subscription::Subscribed => entry.idle_since = Instant::now(),
        }
    }

    /// The wanted channels, now pending, and the connection epoch they are subscribed in.
    fn take_wanted(&self) -> (u64, Vec<String>) {
        let mut state = self.lock();
        let wanted = state
            .channels
            .iter_mut()
            .filter(|(_, entry)| entry.subscription == Subscription::Wanted)
            .map(|(channel, entry)| {
                entry.subscription = Subscription::Pending;
                channel.clone()
            })
            .collect();
        (state.epoch, wanted)
    }

    /// Records the outcome of subscribing to `channels` in `epoch`.
    fn subscribed(&self, epoch: u64, channels: &[String], confirmed: bool) {
        let mut state = self.lock();
        let current = state.epoch == epoch;
        for channel in channels {
            let Some(entry) = state.channels.get_mut(channel) else {
                continue;
            };
            if entry.subscription != Subscription::Pending {
                continue; // the connection was lost meanwhile: wanted again
            }
            entry.subscription = if confirmed && current {
                // Whatever was published before the confirmation was not delivered.
                entry.signal.send_replace(());
                Subscription::Subscribed
            } else if entry.waiters == 0 {
                // Unsubscribed when idle; harmless if the subscription did not take.
                Subscription::Subscribed
            } else {
                Subscription::Wanted
            };
        }
    }

    /// The channels to unsubscribe, now forgotten: those nobody has waited on for [`LINGER`],
    /// and the stale ones nobody waits on again.
    fn take_idle(&self) -> Vec<String> {
        let now = Instant::now();
        let mut state = self.lock();
        let state = &mut *state;
        let mut idle = std::mem::take(&mut state.stale);
        idle.retain(|channel| !state.channels.contains_key(channel));
        state.channels.retain(|channel, entry| {
            let linger_over = entry.waiters == 0
                && entry.subscription == Subscription::Subscribed
                && now.duration_since(entry.idle_since) >= LINGER;
            if linger_over {
                idle.push(channel.clone());
            }
            !linger_over
        });
        idle
    }
}

/// Keeps the subscriptions in line with the waiters, one command at a time, so that `SUBSCRIBE`
/// and `UNSUBSCRIBE` of one channel reach Redis in the order they were decided.
async fn reconcile(shared: Arc<Shared>, mut subscriber: Subscriber) {
    loop {
        // Unsubscribing first: a channel forgotten here and wanted again is subscribed after.
        let idle = shared.take_idle();
        if !idle.is_empty()
            && let Err(error) = subscriber.unsubscribe(&idle).await
        {
            tracing::debug!(%error, "unsubscribing from idle channels failed");
        }
        let (epoch, wanted) = shared.take_wanted();
        if !wanted.is_empty() {
            let result = subscriber.subscribe(&wanted).await;
            shared.subscribed(epoch, &wanted, result.is_ok());
            if let Err(error) = result {
                tracing::warn!(%error, "subscribing to key changes failed; waiters poll meanwhile");
                sleep(RETRY).await;
                continue;
            }
        }
        tokio::select! {
            () = shared.reconcile.notified() => {}
            () = sleep(LINGER) => {}
        }
    }
}

/// One waiter's registration; dropping it unregisters.
struct Interest {
    shared: Arc<Shared>,
    channel: String,
    signal: watch::Receiver<()>,
}

impl Interest {
    fn register(shared: &Arc<Shared>, channel: String) -> Self {
        let mut state = shared.lock();
        let entry = state
            .channels
            .entry(channel.clone())
            .or_insert_with(|| Channel {
                signal: watch::Sender::new(()),
                waiters: 0,
                subscription: Subscription::Unasked,
                idle_since: Instant::now(),
            });
        entry.waiters += 1;
        let signal = entry.signal.subscribe();
        drop(state);
        Self {
            shared: Arc::clone(shared),
            channel,
            signal,
        }
    }

    async fn wait(mut self) {
        self.shared.want(&self.channel);
        // The sender lives as long as a waiter does, so this never fails; if it did, waking up
        // would be the safe answer.
        let _ = self.signal.changed().await;
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        self.shared.leave(&self.channel);
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn message(channel: &str) -> PushInfo {
        PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(channel.as_bytes().to_vec()),
                Value::BulkString(b"completed".to_vec()),
            ],
        }
    }

    fn waiter(
        shared: &Arc<Shared>,
        channel: &str,
    ) -> std::pin::Pin<Box<impl Future<Output = ()> + use<>>> {
        Box::pin(Interest::register(shared, channel.into()).wait())
    }

    fn subscription(shared: &Shared, channel: &str) -> Option<(usize, Subscription)> {
        let state = shared.lock();
        state
            .channels
            .get(channel)
            .map(|entry| (entry.waiters, entry.subscription))
    }

    /// Subscribes what is wanted, as the task would, with Redis confirming.
    fn confirm(shared: &Shared) {
        let (epoch, wanted) = shared.take_wanted();
        shared.subscribed(epoch, &wanted, true);
    }

    #[test]
    fn a_message_after_the_call_wakes_the_waiter_even_before_it_is_polled() {
        let shared = Arc::new(Shared::default());
        let mut a = waiter(&shared, "a");
        let mut b = waiter(&shared, "b");
        shared.dispatch(message("a"));
        assert_eq!(a.as_mut().now_or_never(), Some(()));
        assert_eq!(b.as_mut().now_or_never(), None);
    }

    #[test]
    fn channels_are_subscribed_only_once_polled_and_forgotten_when_unasked() {
        let shared = Arc::new(Shared::default());
        let unpolled = waiter(&shared, "a");
        assert_eq!(subscription(&shared, "a"), Some((1, Subscription::Unasked)));
        assert_eq!(shared.take_wanted(), (0, vec![]));
        drop(unpolled);
        assert_eq!(subscription(&shared, "a"), None);

        let mut polled = waiter(&shared, "a");
        assert_eq!(polled.as_mut().now_or_never(), None);
        assert_eq!(shared.take_wanted(), (0, vec!["a".to_owned()]));
        assert_eq!(subscription(&shared, "a"), Some((1, Subscription::Pending)));
    }

    #[test]
    fn a_confirmation_wakes_the_waiters_registered_before_it() {
        let shared = Arc::new(Shared::default());
        let mut early = waiter(&shared, "a");
        assert_eq!(early.as_mut().now_or_never(), None);
        confirm(&shared);
        assert_eq!(early.as_mut().now_or_never(), Some(()));

        // Once subscribed, a new waiter sleeps until a message comes.
        let mut late = waiter(&shared, "a");
        assert_eq!(late.as_mut().now_or_never(), None);
        assert_eq!(shared.take_wanted().1, Vec::<String>::new());
        assert_eq!(late.as_mut().now_or_never(), None);
        shared.dispatch(message("a"));
        assert_eq!(late.as_mut().now_or_never(), Some(()));
    }

    #[test]
    fn a_lost_connection_wakes_everyone_and_resubscribes_waited_channels() {
        let shared = Arc::new(Shared::default());
        let mut first = waiter(&shared, "a");
        assert_eq!(first.as_mut().now_or_never(), None);
        confirm(&shared);
        let mut second = waiter(&shared, "a");
        assert_eq!(second.as_mut().now_or_never(), None);

        shared.dispatch(PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        });
        assert_eq!(subscription(&shared, "a"), Some((2, Subscription::Wanted)));
        // A woken waiter is done: it leaves.
        assert_eq!(first.as_mut().now_or_never(), Some(()));
        assert_eq!(subscription(&shared, "a"), Some((1, Subscription::Wanted)));
        assert_eq!(shared.take_wanted(), (1, vec!["a".to_owned()]));
        // A confirmation for a subscription sent before the loss does not count.
        shared.subscribed(0, &["a".to_owned()], true);
        assert_eq!(subscription(&shared, "a"), Some((1, Subscription::Wanted)));
        assert_eq!(second.as_mut().now_or_never(), Some(()));
    }

    #[test]
    fn a_lost_connection_forgets_idle_channels_and_unsubscribes_them_unless_wanted_again() {
        let shared = Arc::new(Shared::default());
        let mut waiters = [waiter(&shared, "a"), waiter(&shared, "b")];
        for waiter in &mut waiters {
            assert_eq!(waiter.as_mut().now_or_never(), None);
        }
        confirm(&shared);
        drop(waiters);
        assert_eq!(
            subscription(&shared, "a"),
            Some((0, Subscription::Subscribed))
        );
        shared.dispatch(PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        });
        assert_eq!(
            (subscription(&shared, "a"), subscription(&shared, "b")),
            (None, None)
        );
        // A new waiter of "b" must not trust the lost subscription: "b" is subscribed anew.
        let mut again = waiter(&shared, "b");
        assert_eq!(again.as_mut().now_or_never(), None);
        assert_eq!(shared.take_idle(), vec!["a".to_owned()]);
        assert_eq!(shared.take_wanted(), (1, vec!["b".to_owned()]));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_channels_are_unsubscribed_after_the_linger() {
        let shared = Arc::new(Shared::default());
        let mut only = waiter(&shared, "a");
        assert_eq!(only.as_mut().now_or_never(), None);
        confirm(&shared);
        drop(only);
        assert_eq!(
            subscription(&shared, "a"),
            Some((0, Subscription::Subscribed))
        );
        assert_eq!(shared.take_idle(), Vec::<String>::new());
        tokio::time::advance(LINGER).await;
        assert_eq!(shared.take_idle(), vec!["a".to_owned()]);
        assert_eq!(subscription(&shared, "a"), None);
    }
}
