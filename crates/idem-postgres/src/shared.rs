//! [`Shared`]: what a store's operations and its batches' tasks share.

use idem_core::{Clock, ManualClock, StoreError};

use crate::{
    connections::{Checkout, Connections},
    error::store_error,
    row::sql_now,
    sql::Sql,
};

/// What the store's operations and its batches' tasks share.
pub(crate) struct Shared {
    pub(crate) connections: Connections,
    pub(crate) sql: Sql,
    pub(crate) clock: Option<ManualClock>,
}

impl Shared {
    /// A connection for one of the store's own operations (see [`Connections`]).
    pub(crate) async fn connection(&self) -> Result<Checkout, StoreError> {
        self.connections
            .get(|error| store_error(error, &self.sql.table))
            .await
    }

    /// `$1` of every statement.
    pub(crate) fn now(&self) -> Option<i64> {
        sql_now(self.clock.as_ref().map(Clock::now))
    }
}
