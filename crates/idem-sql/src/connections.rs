//! [`Connections`]: the connections a store runs its own operations on.
//!
//! A sqlx pool pings every connection it takes back (a round trip to the server, from a task it
//! spawns): two extra round trips per new key, on top of the store's statements. These
//! connections come from a [`deadpool`] pool instead, opened as [`Connect`] says, and go back to
//! it as they are once an operation has finished. A connection whose operation failed or was
//! cancelled half-way may hold a half-read answer or an open transaction: it is closed instead.

use std::{
    future::Future,
    ops::{Deref, DerefMut},
    time::Duration,
};

use deadpool::managed::{self, Metrics, Object, PoolError, RecycleResult, Timeouts};
use idem_core::StoreError;

/// How a store opens one of its connections: connect options, and whatever the store sets on a
/// new connection.
pub trait Connect: Send + Sync + 'static {
    /// The connection.
    type Connection: sqlx::Connection;

    /// A new connection, ready for the store's statements.
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, sqlx::Error>> + Send;
}

/// Opens connections as its [`Connect`] says.
#[derive(Debug)]
pub struct Manager<C> {
    connect: C,
}

impl<C: Connect> managed::Manager for Manager<C> {
    type Type = C::Connection;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<C::Connection, sqlx::Error> {
        self.connect.connect().await
    }

    async fn recycle(&self, _: &mut C::Connection, _: &Metrics) -> RecycleResult<sqlx::Error> {
        // Only connections whose last operation completed come back (see `Checkout::keep`).
        Ok(())
    }
}

/// The pool of a store's connections.
pub struct Connections<C: Connect> {
    pool: managed::Pool<Manager<C>>,
}

impl<C: Connect> std::fmt::Debug for Connections<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl<C: Connect> Connections<C> {
    /// At most `size` connections opened with `connect`, waiting at most `timeout` for one.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn new(connect: C, size: usize, timeout: Duration) -> Self {
        let pool = managed::Pool::builder(Manager { connect })
            .max_size(size)
            .timeouts(Timeouts {
                wait: Some(timeout),
                create: Some(timeout),
                recycle: None,
            })
            .runtime(deadpool::Runtime::Tokio1)
            .build()
            .expect("a runtime is set, so timeouts are allowed");
        Self { pool }
    }

    /// A connection, idle or new; a failure to open one is the store's `error` for it.
    pub async fn get(
        &self,
        error: impl FnOnce(sqlx::Error) -> StoreError,
    ) -> Result<Checkout<C>, StoreError> {
        match self.pool.get().await {
            Ok(object) => Ok(Checkout {
                object: Some(object),
            }),
            Err(PoolError::Backend(failure)) => Err(error(failure)),
            Err(failure) => Err(StoreError::unavailable(failure)),
        }
    }

    /// Closes the idle connections; later [`get`](Self::get)s fail.
    pub fn close(&self) {
        self.pool.close();
    }
}

/// A connection taken from [`Connections`]: closed when dropped, unless [`kept`](Self::keep).
pub struct Checkout<C: Connect> {
    object: Option<Object<Manager<C>>>,
}

impl<C: Connect> Checkout<C> {
    /// Gives the connection back for the next operation, unless `result`, the operation's,
    /// says that it failed (a lost lease is an answer like any other; everything else might
    /// have broken it); returns `result`.
    pub fn keep<T>(mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if matches!(result, Ok(_) | Err(StoreError::LeaseLost)) {
            drop(self.object.take());
        }
        result
    }
}

impl<C: Connect> Deref for Checkout<C> {
    type Target = C::Connection;

    fn deref(&self) -> &C::Connection {
        self.object.as_ref().expect("present until dropped")
    }
}

impl<C: Connect> DerefMut for Checkout<C> {
    fn deref_mut(&mut self) -> &mut C::Connection {
        self.object.as_mut().expect("present until dropped")
    }
}

impl<C: Connect> Drop for Checkout<C> {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            drop(Object::take(object));
        }
    }
}
