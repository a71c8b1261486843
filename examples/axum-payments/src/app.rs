//! [`App`]: the service's state.

use std::sync::Arc;

use idem_core::{Policy, Terms};
use idem_postgres::{PostgresOptions, PostgresStore};
use sqlx::{PgPool, migrate::Migrator};

use crate::Faults;

static MIGRATOR: Migrator = sqlx::migrate!();

/// The service: its pool, the idempotency store on the same database, and injectable failures.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct App(Arc<Inner>);

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) store: PostgresStore,
    pub(crate) terms: Terms,
    pub(crate) faults: Faults,
}

impl App {
    /// Migrates the service's tables (in the connection's `search_path`) and idem's table (where
    /// `options` say), then opens the store on `pool`.
    pub async fn new(pool: PgPool, options: PostgresOptions) -> anyhow::Result<Self> {
        MIGRATOR.run(&pool).await?;
        PostgresStore::migrate(&pool, &options).await?;
        let store = PostgresStore::open(pool.clone(), options).await?;
        Ok(Self(Arc::new(Inner {
            pool,
            store,
            terms: Terms::from(&Policy::default()),
            faults: Faults::default(),
        })))
    }

    /// The idempotency store.
    pub fn store(&self) -> &PostgresStore {
        &self.0.store
    }

    /// The failures to inject into the next charges.
    pub fn faults(&self) -> &Faults {
        &self.0.faults
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.0
    }
}
