//! Opening and migrating a PostgreSQL store, with the gateway's messages.

use idem_postgres::{PostgresOptions, PostgresStore};

use crate::Error;

/// Connects, checks that the table is migrated and of this build, and opens the store.
pub(super) async fn open(options: &PostgresOptions) -> Result<PostgresStore, Error> {
    PostgresStore::connect_with(options.clone())
        .await
        .map_err(|error| open_error(options, error))
}

/// Applies the migrations that are missing and says what was done: `idem migrate`.
pub(crate) async fn migrate(options: &PostgresOptions) -> Result<String, Error> {
    let shown = shown(options);
    let failed = |error| open_error(options, error);
    let pool = options
        .clone()
        .pool_size(2)
        .connect_pool()
        .await
        .map_err(failed)?;
    let table = format!(r#""{}"."{}""#, options.schema_name(), options.table_name());
    let done = match PostgresStore::open(pool.clone(), options.clone()).await {
        Ok(_) => None,
        Err(idem_postgres::Error::NotMigrated { .. }) => {
            Some(format!("created the idem table {table} in {shown}"))
        }
        Err(idem_postgres::Error::MigrationPending { version, .. }) => Some(format!(
            "applied the idem migrations from version {version} to {table} in {shown}"
        )),
        // A table that is not idem's, or is a newer idem's: migrating would not help.
        Err(error) => return Err(failed(error)),
    };
    if done.is_some() {
        PostgresStore::migrate(&pool, options)
            .await
            .map_err(failed)?;
        PostgresStore::open(pool.clone(), options.clone())
            .await
            .map_err(failed)?;
    }
    pool.close().await;
    Ok(done.unwrap_or_else(|| format!("{shown}: the idem table {table} is up to date")))
}

fn shown(options: &PostgresOptions) -> &str {
    options.url().unwrap_or("postgres://")
}

fn open_error(options: &PostgresOptions, error: idem_postgres::Error) -> Error {
    let url = shown(options).to_owned();
    match error {
        idem_postgres::Error::NotMigrated { table } => Error::NotMigrated { url, table },
        idem_postgres::Error::MigrationPending { table, version } => Error::MigrationPending {
            url,
            table,
            version,
        },
        error => Error::OpenStore {
            url,
            source: error.into(),
        },
    }
}
