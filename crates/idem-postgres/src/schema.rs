//! Applying the migrations, and checking on open that the database holds what the store expects.

use std::collections::HashMap;

use sqlx::{PgPool, migrate::Migrator};

use idem_sql::{Applied, compare_migrations, unexpected_column};

use crate::{Error, sql::Sql};

/// What [`PostgresStore::migrate`](crate::PostgresStore::migrate) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Migration {
    /// The table did not exist: it was created, with every migration of this build.
    Created,
    /// The table lacked migrations of this build: they were applied.
    Applied {
        /// The first migration applied.
        from: i64,
    },
    /// The table had every migration of this build already: nothing was done.
    UpToDate,
}

/// The columns the statements use and their types, as `format_type` shows them.
const COLUMNS: &[(&str, &str)] = &[
    ("scope", "bytea"),
    ("key", "bytea"),
    ("fingerprint", "bytea"),
    ("state", "text"),
    ("token", "bigint"),
    ("lease_until", "timestamp with time zone"),
    ("created_at", "timestamp with time zone"),
    ("completed_at", "timestamp with time zone"),
    ("expires_at", "timestamp with time zone"),
    ("response", "bytea"),
    ("watched", "boolean"),
];

/// Applies the migrations that are missing, creating the schema if needed, then checks the
/// table as [`verify`] does. Safe to run from several processes at once: sqlx serializes them
/// with an advisory lock.
///
/// A table migrated by a newer build is refused before anything runs: this build's migrations
/// must not run over it. Any other trouble is left to sqlx's migrator (a changed migration) or
/// to the check after it (a changed column).
pub(crate) async fn migrate(
    pool: &PgPool,
    sql: &Sql,
    url: Option<&str>,
) -> Result<Migration, Error> {
    let migrator = sql.migrator();
    let done = match verify(pool, sql, &migrator, url).await {
        Ok(()) => return Ok(Migration::UpToDate),
        Err(Error::NotMigrated { .. }) => Migration::Created,
        Err(Error::MigrationPending { version, .. }) => Migration::Applied { from: version },
        Err(error @ (Error::UnknownMigration { .. } | Error::Check(_))) => return Err(error),
        Err(_) => Migration::UpToDate,
    };
    let connection = pool.acquire().await.map_err(Error::Connect)?;
    idem_sql::migrate_postgres(connection, &migrator)
        .await
        .map_err(Error::Migrate)?;
    verify(pool, sql, &migrator, url).await?;
    Ok(done)
}

/// Checks that the schema, the table and its migrations are those of this build.
/// `url` is the store's, password hidden, for the messages that say how to migrate.
pub(crate) async fn verify(
    pool: &PgPool,
    sql: &Sql,
    migrator: &Migrator,
    url: Option<&str>,
) -> Result<(), Error> {
    let table = || sql.table.clone();
    let url = || url.map(str::to_owned);
    let (schema, migrations, records): (bool, bool, bool) =
        sqlx::query_as(include_str!("../sql/catalog.sql"))
            .bind(&sql.schema)
            .bind(&sql.migrations_table)
            .bind(&sql.table)
            .fetch_one(pool)
            .await
            .map_err(Error::Check)?;
    if !(schema && migrations) {
        return Err(Error::NotMigrated {
            table: table(),
            url: url(),
        });
    }

    let applied: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as(idem_sql::query_text(&sql.applied_migrations))
            .fetch_all(pool)
            .await
            .map_err(Error::Check)?;
    match compare_migrations(migrator, &applied) {
        Applied::Current => {}
        Applied::None => {
            return Err(Error::NotMigrated {
                table: table(),
                url: url(),
            });
        }
        Applied::Pending(version) => {
            return Err(Error::MigrationPending {
                table: table(),
                url: url(),
                version,
            });
        }
        Applied::Unknown(version) => {
            return Err(Error::UnknownMigration {
                table: table(),
                version,
            });
        }
        Applied::Changed(version) => {
            return Err(Error::ChangedMigration {
                table: table(),
                version,
            });
        }
    }

    let found: HashMap<String, String> = if records {
        sqlx::query_as(include_str!("../sql/columns.sql"))
            .bind(&sql.table)
            .fetch_all(pool)
            .await
            .map_err(Error::Check)?
            .into_iter()
            .collect()
    } else {
        HashMap::new()
    };
    if let Some((column, expected, found)) = unexpected_column(COLUMNS, &found) {
        return Err(Error::UnexpectedColumn {
            table: table(),
            column,
            expected,
            found,
        });
    }
    Ok(())
}
