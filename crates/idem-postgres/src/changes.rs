//! Cross-instance wake-ups: `LISTEN`/`NOTIFY` on the store's channel.
//!
//! The first `acquire` that finds a record in flight marks it `watched`. Completing, releasing or
//! forgetting a watched record, or appending a part to its stream (`sql/append_part.sql`: only an
//! append that stores a part), notifies the store's channel, in the same statement, with a hex
//! SHA-256 of the record's scope and key digest as the payload (never the key itself); PostgreSQL
//! delivers it when that transaction commits, and drops it when it rolls back. Records nobody
//! waited for send nothing: `NOTIFY` serializes the commits of every notifying transaction in the
//! database, which halves the throughput of new keys.
//!
//! Each store runs one listener task, on its own connection, started by the first call to
//! [`Store::changed`](idem_core::Store::changed); it wakes the waiters registered for the
//! payload's address. The engine registers before its `acquire`, so a completion that follows an
//! in-flight answer is never missed. Notifications sent while the listener is not connected are
//! lost, so every time it starts listening (the first time, and after a lost connection) it wakes
//! every waiter registered before: they look at the store again, which is harmless if nothing
//! changed. The engine also polls, so a listener that cannot connect only makes waiters slower.

use std::{
    collections::HashMap,
    future::Future,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use idem_core::Address;
use idem_sql::listener::{Event, Listener};
use sha2::{Digest, Sha256};
use sqlx::postgres::PgConnectOptions;
use tokio::{sync::oneshot, task::AbortHandle};

use crate::key_digest::key_digest;

/// How the listener's connection shows in `pg_stat_activity`, and in logs.
const APPLICATION_NAME: &str = "idem-listener";

/// The hash of an address that notifications carry.
type Digest32 = [u8; 32];
/// The waiters of one address: an id for each, to unregister it, and its wake-up.
type Waiters = Vec<(u64, oneshot::Sender<()>)>;

/// One store's waiters and its listener task.
pub(crate) struct Changes {
    interest: Arc<Interest>,
    listener: Listener,
    task: Mutex<Option<AbortHandle>>,
}

impl Changes {
    /// Waiters on `channel`, listening on a connection of its own made with `connect`.
    pub(crate) fn new(connect: &PgConnectOptions, channel: String) -> Self {
        Self {
            interest: Arc::default(),
            listener: Listener::new(connect.clone(), APPLICATION_NAME, channel),
            task: Mutex::new(None),
        }
    }

    /// Registers interest in `address` now, and resolves when a notification for it arrives (or
    /// when the listener starts listening).
    pub(crate) fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        let waiter = self.interest.wait(digest(address));
        self.start_listener();
        waiter
    }

    /// Stops the listener for good and closes its connection.
    pub(crate) async fn close(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
        self.listener.close().await;
    }

    fn start_listener(&self) {
        let mut task = lock(&self.task);
        if task.is_some() || self.listener.is_closed() {
            return;
        }
        // Outside a runtime there is nothing to spawn on; the next call inside one starts it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let interest = Arc::clone(&self.interest);
        let listen = self.listener.clone().run(move |event| match event {
            // Notifications sent while not listening are lost: everyone looks again.
            Event::Listening => interest.wake_all(),
            Event::Notification(payload) => interest.wake(payload),
        });
        *task = Some(runtime.spawn(listen).abort_handle());
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// The payload the statements send for a record: `encode(sha256(scope || key), 'hex')`, where
/// the `key` column holds the key's digest.
fn digest(address: &Address) -> Digest32 {
    let mut hasher = Sha256::new();
    hasher.update(address.scope.as_bytes());
    hasher.update(key_digest(&address.key));
    hasher.finalize().into()
}

fn parse_payload(payload: &str) -> Option<Digest32> {
    let hex = payload.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(digest)
}

/// The waiters, by address digest.
#[derive(Default)]
struct Interest {
    waiters: Mutex<HashMap<Digest32, Waiters>>,
    next_id: AtomicU64,
}

impl Interest {
    /// Registers a waiter now; the future resolves when it is woken.
    fn wait(self: &Arc<Self>, digest: Digest32) -> impl Future<Output = ()> + Send + use<> {
        let (wake, woken) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.waiters)
            .entry(digest)
            .or_default()
            .push((id, wake));
        let registration = Registration {
            interest: Arc::clone(self),
            digest,
            id,
        };
        async move {
            let _registration = registration;
            // A dropped sender means the store is gone: leave it to the engine's polling rather
            // than resolve at once, which would make a waiter spin.
            if woken.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn wake(&self, payload: &str) {
        let Some(digest) = parse_payload(payload) else {
            tracing::debug!(
                payload,
                "ignoring a notification that is not an idem digest"
            );
            return;
        };
        let woken = lock(&self.waiters).remove(&digest);
        for (_, wake) in woken.into_iter().flatten() {
            let _ = wake.send(());
        }
    }

    fn wake_all(&self) {
        let woken = std::mem::take(&mut *lock(&self.waiters));
        for (_, wake) in woken.into_values().flatten() {
            let _ = wake.send(());
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.waiters).values().map(Vec::len).sum()
    }
}

/// Removes a waiter that goes away without being woken.
struct Registration {
    interest: Arc<Interest>,
    digest: Digest32,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiters = lock(&self.interest.waiters);
        if let Some(list) = waiters.get_mut(&self.digest) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                waiters.remove(&self.digest);
            }
        }
    }
}

/// Every critical section leaves the map consistent, so a poisoned lock's data is still good.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::{
        pin::pin,
        task::{Context, Waker},
    };

    use idem_core::Scope;

    use super::*;

    fn address(key: &str) -> Address {
        Address::new(
            Scope::from_identity([b"t".as_slice()]),
            key.parse().unwrap(),
        )
    }

    fn hex(digest: Digest32) -> String {
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn is_ready(future: std::pin::Pin<&mut impl Future<Output = ()>>) -> bool {
        future
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    fn waiter(interest: &Arc<Interest>, address: &Address) -> impl Future<Output = ()> + use<> {
        interest.wait(digest(address))
    }

    #[test]
    fn digests_round_trip_through_payloads() {
        let d = digest(&address("k"));
        assert_eq!(parse_payload(&hex(d)), Some(d));
        assert_eq!(parse_payload("abc"), None);
        assert_eq!(parse_payload(&"zz".repeat(32)), None);
    }

    #[test]
    fn a_notification_wakes_its_address_only() {
        let interest = Arc::<Interest>::default();
        let (a, b) = (address("a"), address("b"));
        let mut on_a = pin!(waiter(&interest, &a));
        let mut on_b = pin!(waiter(&interest, &b));
        // Registered before the first poll: a change right after the call is not missed.
        interest.wake(&hex(digest(&a)));
        assert!(is_ready(on_a.as_mut()));
        assert!(!is_ready(on_b.as_mut()));
        interest.wake_all();
        assert!(is_ready(on_b.as_mut()));
        assert_eq!(interest.len(), 0);
    }

    #[test]
    fn dropped_waiters_unregister() {
        let interest = Arc::<Interest>::default();
        let a = address("a");
        let first = waiter(&interest, &a);
        let second = waiter(&interest, &a);
        assert_eq!(interest.len(), 2);
        drop(first);
        assert_eq!(interest.len(), 1);
        drop(second);
        assert_eq!(interest.len(), 0);
        assert!(lock(&interest.waiters).is_empty());
    }
}
