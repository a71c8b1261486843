//! What a check needs from a store under test.

use std::{future::Future, time::Duration};

use idem_core::{Address, ManualClock, Store};

/// A fresh store under test, and control over its time.
pub trait Subject: Send + Sync + 'static {
    /// The store. Cloned into concurrent tasks, so it must share its state between clones.
    type Store: Store + Clone;

    /// A handle on the store.
    fn store(&self) -> Self::Store;

    /// Moves the store's time forward by `by`: advances a manual clock, or waits that long for a
    /// store on a server clock.
    fn advance(&self, by: Duration) -> impl Future<Output = ()> + Send;

    /// How far a duration the store reports (a `retry_after`) may be from the exact value: zero on
    /// a manual clock, some milliseconds on a server clock that keeps running during the check.
    fn tolerance(&self) -> Duration {
        Duration::ZERO
    }

    /// The address under which the store keeps and lists `address`'s record: itself, but under a
    /// wrapper that keys addresses ([`KeyedAddresses`](idem_core::KeyedAddresses)).
    fn stored(&self, address: &Address) -> Address {
        address.clone()
    }

    /// Whether the store lists records newest first across pages (an index on time), rather
    /// than newest first within each page of its own iteration (Redis' `SCAN`, which may also
    /// list a record twice when the server resizes its key table during the walk).
    fn lists_in_global_order(&self) -> bool {
        true
    }
}

/// A [`Subject`] for stores that read time from an injected [`ManualClock`].
#[derive(Debug, Clone)]
pub struct ManualSubject<S> {
    /// The store.
    pub store: S,
    /// Its clock.
    pub clock: ManualClock,
}

impl<S: Store + Clone> Subject for ManualSubject<S> {
    type Store = S;

    fn store(&self) -> S {
        self.store.clone()
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}
