//! The connections the store runs its own operations on.
//!
//! A sqlx pool pings every connection it takes back (a round trip to the server, from a task it
//! spawns): two extra round trips per new key, on top of the two statements. These connections
//! come from a [`deadpool`] pool instead, opened with the sqlx pool's options, and go back to it
//! as they are once a statement has finished. A connection whose statement failed or was
//! cancelled half-way may hold a half-read answer: it is closed instead.
//!
//! They always use the generic plan of a prepared statement (`plan_cache_mode`): the writes take
//! arrays, whose length a custom plan would see, so PostgreSQL would plan every execution again;
//! every statement of the store looks records up by primary key, which the generic plan does.

use std::ops::{Deref, DerefMut};

use deadpool::managed::{self, Metrics, Object, PoolError, RecycleResult, Timeouts};
use idem_core::StoreError;
use sqlx::{ConnectOptions, PgConnection, postgres::PgConnectOptions};

/// Opens connections as the sqlx pool it was made from would.
#[derive(Debug)]
pub(crate) struct Manager {
    options: PgConnectOptions,
}

impl managed::Manager for Manager {
    type Type = PgConnection;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<PgConnection, sqlx::Error> {
        self.options.connect().await
    }

    async fn recycle(&self, _: &mut PgConnection, _: &Metrics) -> RecycleResult<sqlx::Error> {
        // Only connections whose last statement completed come back (see `Checkout::keep`).
        Ok(())
    }
}

/// The pool of the store's connections.
#[derive(Debug)]
pub(crate) struct Connections {
    pool: managed::Pool<Manager>,
}

impl Connections {
    /// At most `size` connections opened with `options`, waiting at most `timeout` for one.
    pub(crate) fn new(
        options: PgConnectOptions,
        size: usize,
        timeout: std::time::Duration,
    ) -> Self {
        let options = options.options([("plan_cache_mode", "force_generic_plan")]);
        let manager = Manager { options };
        let pool = managed::Pool::builder(manager)
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

    /// A connection, idle or new.
    pub(crate) async fn get(&self, table: &str) -> Result<Checkout, StoreError> {
        match self.pool.get().await {
            Ok(object) => Ok(Checkout {
                object: Some(object),
            }),
            Err(PoolError::Backend(error)) => Err(crate::error::store_error(error, table)),
            Err(error) => Err(StoreError::unavailable(error)),
        }
    }

    /// Closes the idle connections; later [`get`](Self::get)s fail.
    pub(crate) fn close(&self) {
        self.pool.close();
    }
}

/// A connection taken from [`Connections`]: closed when dropped, unless [`kept`](Self::keep).
pub(crate) struct Checkout {
    object: Option<Object<Manager>>,
}

impl Checkout {
    /// Gives the connection back for the next operation, unless `result`, the operation's,
    /// says that it failed (a lost lease is an answer like any other; everything else might
    /// have broken it); returns `result`.
    pub(crate) fn keep<T>(mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if matches!(result, Ok(_) | Err(StoreError::LeaseLost)) {
            drop(self.object.take());
        }
        result
    }
}

impl Deref for Checkout {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.object.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Checkout {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.object.as_mut().expect("present until dropped")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            drop(Object::take(object));
        }
    }
}
