//! In-process wake-ups for requests waiting on a key held by a worker of the same engine.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering, fence},
    },
};

use tokio::sync::Notify;

use crate::Address;

/// One [`Notify`] per address that has waiters; removed when the last waiter leaves or when the
/// holder finishes.
#[derive(Default)]
pub(crate) struct Waiters {
    map: Mutex<HashMap<Address, Arc<Notify>>>,
    /// Live subscriptions, so that a holder finishing while nobody waits (always, in reject mode)
    /// skips the lock every worker thread would otherwise take once per request.
    subscribed: AtomicUsize,
    /// Requests that found their key held by another and are waiting for it (or following its
    /// stream): bounded by [`Policy::max_waiters`](crate::Policy::max_waiters). Fewer than
    /// `subscribed`, which also counts requests still making their first attempt.
    waiting: Arc<AtomicUsize>,
}

impl Waiters {
    /// Registers interest in `address` until the returned guard is dropped.
    pub(crate) fn subscribe<'a>(&'a self, address: &'a Address) -> Subscription<'a> {
        // Counted before the caller looks at the store (see `notify`).
        self.subscribed.fetch_add(1, Ordering::SeqCst);
        let notify = self.lock().entry(address.clone()).or_default().clone();
        Subscription {
            waiters: self,
            address,
            notify: Some(notify),
        }
    }

    /// Wakes every waiter on `address` (the holder completed or released it).
    pub(crate) fn notify(&self, address: &Address) {
        // The holder recorded its result before this; a waiter counts itself before it looks at
        // the store. So either the waiter's look sees the result, or this sees the waiter. The
        // fence keeps the load from moving above the store's write (a mutex's release, say).
        fence(Ordering::SeqCst);
        if self.subscribed.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(notify) = self.lock().remove(address) {
            notify.notify_waiters();
        }
    }

    /// A place among the requests waiting for a key, while fewer than `max` hold one; freed when
    /// the returned guard is dropped (the request got its answer, or its caller went away).
    pub(crate) fn enter(&self, max: usize) -> Option<WaitSlot> {
        self.waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| WaitSlot {
                waiting: Arc::clone(&self.waiting),
            })
    }

    /// The requests waiting now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Address, Arc<Notify>>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

pub(crate) struct Subscription<'a> {
    waiters: &'a Waiters,
    address: &'a Address,
    notify: Option<Arc<Notify>>,
}

impl Subscription<'_> {
    pub(crate) fn notify(&self) -> &Notify {
        self.notify.as_deref().expect("present until drop")
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let mut map = self.waiters.lock();
        drop(self.notify.take());
        // Every clone is made and dropped under the lock, so the count is exact here.
        if map
            .get(self.address)
            .is_some_and(|n| Arc::strong_count(n) == 1)
        {
            map.remove(self.address);
        }
        self.waiters.subscribed.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request's place among the requests waiting for a key held by another, freed when dropped;
/// see [`Engine::wait_slot`](crate::Engine::wait_slot).
#[must_use = "the place is freed when it is dropped"]
pub struct WaitSlot {
    waiting: Arc<AtomicUsize>,
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for WaitSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WaitSlot")
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use futures_util::FutureExt;

    use super::*;

    #[test]
    fn a_subscriber_is_woken_when_the_holder_finishes_and_leaves_nothing_behind() {
        let waiters = Waiters::default();
        let address = Address::anonymous("k".parse().unwrap());
        let other = Address::anonymous("other".parse().unwrap());
        let subscription = waiters.subscribe(&address);
        {
            let mut notified = pin!(subscription.notify().notified());
            notified.as_mut().enable();

            waiters.notify(&other);
            assert_eq!(notified.as_mut().now_or_never(), None);
            waiters.notify(&address);
            assert_eq!(notified.as_mut().now_or_never(), Some(()));
        }

        drop(subscription);
        assert_eq!(waiters.len(), 0);
        assert_eq!(waiters.subscribed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn waiting_places_are_bounded_and_freed_on_drop() {
        let waiters = Waiters::default();
        let first = waiters.enter(2).unwrap();
        let second = waiters.enter(2).unwrap();
        assert!(waiters.enter(2).is_none());
        assert_eq!(waiters.waiting(), 2);
        drop(first);
        let third = waiters.enter(2).unwrap();
        drop((second, third));
        assert_eq!(waiters.waiting(), 0);
        assert!(waiters.enter(0).is_none());
    }
}
