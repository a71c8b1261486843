//! In-process wake-ups for requests waiting on a key held by a worker of the same engine.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;

use crate::Address;

/// One [`Notify`] per address that has waiters; removed when the last waiter leaves or when the
/// holder finishes.
#[derive(Default)]
pub(crate) struct Waiters(Mutex<HashMap<Address, Arc<Notify>>>);

impl Waiters {
    /// Registers interest in `address` until the returned guard is dropped.
    pub(crate) fn subscribe<'a>(&'a self, address: &'a Address) -> Subscription<'a> {
        let notify = self.lock().entry(address.clone()).or_default().clone();
        Subscription {
            waiters: self,
            address,
            notify: Some(notify),
        }
    }

    /// Wakes every waiter on `address` (the holder completed or released it).
    pub(crate) fn notify(&self, address: &Address) {
        if let Some(notify) = self.lock().remove(address) {
            notify.notify_waiters();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Address, Arc<Notify>>> {
        self.0
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
    }
}
