//! Applying the migrations, and checking on open that the database holds what the store expects.

use std::collections::HashMap;

use sqlx::{MySqlPool, migrate::Migrator};

use idem_sql::{Applied, compare_migrations, unexpected_column};

use crate::{Error, sql::Sql};

/// What [`MysqlStore::migrate`](crate::MysqlStore::migrate) did.
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

/// The columns the statements use and their types, as `information_schema.COLUMNS.DATA_TYPE`
/// names them on MySQL and MariaDB.
const COLUMNS: &[(&str, &str)] = &[
    ("id", "bigint"),
    ("scope", "binary"),
    ("key_digest", "binary"),
    ("fingerprint", "binary"),
    ("state", "varchar"),
    ("token", "bigint"),
    ("lease_until", "bigint"),
    ("created_at", "bigint"),
    ("completed_at", "bigint"),
    ("expires_at", "bigint"),
    ("response", "longblob"),
];

/// The columns of `<table>_parts` the statements use, as [`COLUMNS`].
const PARTS_COLUMNS: &[(&str, &str)] = &[
    ("scope", "binary"),
    ("key_digest", "binary"),
    ("token", "bigint"),
    ("idx", "int"),
    ("part", "longblob"),
    ("expires_at", "bigint"),
];

/// Applies the migrations that are missing, then checks the table as [`verify`] does. Safe to
/// run from several processes at once: sqlx serializes them with a named lock (`GET_LOCK`).
///
/// A table migrated by a newer build is refused before anything runs.
pub(crate) async fn migrate(
    pool: &MySqlPool,
    sql: &Sql,
    url: Option<&str>,
) -> Result<Migration, Error> {
    let migrator = sql.migrator();
    let done = match verify(pool, sql, &migrator, url).await {
        Ok(()) => return Ok(Migration::UpToDate),
        Err(Error::NotMigrated { .. }) => Migration::Created,
        Err(Error::MigrationPending { version, .. }) => Migration::Applied { from: version },
        Err(error @ (Error::UnknownMigration { .. } | Error::Check(_) | Error::NoDatabase)) => {
            return Err(error);
        }
        Err(_) => Migration::UpToDate,
    };
    let connection = pool.acquire().await.map_err(Error::Connect)?;
    idem_sql::migrate_mysql(connection, &migrator)
        .await
        .map_err(Error::Migrate)?;
    verify(pool, sql, &migrator, url).await?;
    Ok(done)
}

/// Checks that the table and its migrations are those of this build. `url` is the store's,
/// password hidden, for the messages that say how to migrate.
pub(crate) async fn verify(
    pool: &MySqlPool,
    sql: &Sql,
    migrator: &Migrator,
    url: Option<&str>,
) -> Result<(), Error> {
    let table = || sql.table.clone();
    let url = || url.map(str::to_owned);
    let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await
        .map_err(Error::Check)?;
    if database.is_none() {
        return Err(Error::NoDatabase);
    }
    let (migrations, records): (i64, i64) = sqlx::query_as(include_str!("../sql/catalog.sql"))
        .bind(sql.migrations_table())
        .bind(sql.name.as_str())
        .fetch_one(pool)
        .await
        .map_err(Error::Check)?;
    if migrations == 0 {
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

    let found: HashMap<String, String> = if records != 0 {
        sqlx::query_as(include_str!("../sql/columns.sql"))
            .bind(sql.name.as_str())
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

    let parts = format!("{}_parts", sql.name);
    let found: HashMap<String, String> = sqlx::query_as(include_str!("../sql/columns.sql"))
        .bind(&parts)
        .fetch_all(pool)
        .await
        .map_err(Error::Check)?
        .into_iter()
        .collect();
    if let Some((column, expected, found)) = unexpected_column(PARTS_COLUMNS, &found) {
        return Err(Error::UnexpectedColumn {
            table: sql.parts.clone(),
            column,
            expected,
            found,
        });
    }
    Ok(())
}
