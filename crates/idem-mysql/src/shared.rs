//! [`Shared`]: what a store's operations and its batches' tasks share.

use std::{future::Future, time::Duration};

use idem_core::{Clock, ManualClock, StoreError};

use crate::{
    connections::{Checkout, Connections},
    error::store_error,
    row::sql_now,
    sql::{BatchForm, Sql},
};

/// What the store's operations and its batches' tasks share.
pub(crate) struct Shared {
    pub(crate) connections: Connections,
    pub(crate) sql: Sql,
    pub(crate) clock: Option<ManualClock>,
    /// How long one round trip may take ([`MysqlOptions::statement_timeout`](crate::MysqlOptions::statement_timeout)).
    pub(crate) round_trip: Option<Duration>,
    /// How the batches' statements are sent.
    pub(crate) form: BatchForm,
}

impl Shared {
    /// A connection for one of the store's own operations (see [`Connections`]).
    pub(crate) async fn connection(&self) -> Result<Checkout, StoreError> {
        self.connections
            .get(|error| store_error(error, &self.sql.table))
            .await
    }

    /// The test clock's "now", or `None`: the server's.
    pub(crate) fn now(&self) -> Option<i64> {
        sql_now(self.clock.as_ref().map(Clock::now))
    }

    /// `round_trip` within the statement timeout: past it, a timed-out I/O error (the caller
    /// closes the connection, and the server rolls its transaction back).
    pub(crate) async fn within<T>(
        &self,
        round_trip: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, sqlx::Error> {
        match self.round_trip {
            None => round_trip.await,
            Some(limit) => tokio::time::timeout(limit, round_trip)
                .await
                .unwrap_or_else(|_| {
                    Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer from MySQL within {limit:?}"),
                    )))
                }),
        }
    }
}
