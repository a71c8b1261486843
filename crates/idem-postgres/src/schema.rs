//! Applying the migrations, and checking on open that the database holds what the store expects.

use std::collections::HashMap;

use sqlx::{Connection, PgPool, migrate::Migrator};

use crate::{Error, sql::Sql};

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

/// Applies the migrations that are missing, creating the schema if needed. Safe to run from
/// several processes at once: sqlx serializes them with an advisory lock.
pub(crate) async fn migrate(pool: &PgPool, migrator: &Migrator) -> Result<(), Error> {
    let mut connection = pool.acquire().await.map_err(Error::Connect)?;
    let result = migrator.run_direct(None, &mut *connection, false).await;
    if result.is_err() {
        // A failed run can leave sqlx's session-level advisory lock held: never give that
        // connection back to the pool.
        let _ = connection.detach().close().await;
    }
    result.map_err(Error::Migrate)
}

/// Checks that the schema, the table and its migrations are those of this build.
pub(crate) async fn verify(pool: &PgPool, sql: &Sql, migrator: &Migrator) -> Result<(), Error> {
    let table = || sql.table.clone();
    let (schema, migrations, records): (bool, bool, bool) =
        sqlx::query_as(include_str!("../sql/catalog.sql"))
            .bind(&sql.schema)
            .bind(&sql.migrations_table)
            .bind(&sql.table)
            .fetch_one(pool)
            .await
            .map_err(Error::Check)?;
    if !(schema && migrations) {
        return Err(Error::NotMigrated { table: table() });
    }

    let applied: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as(crate::sql::query_text(&sql.applied_migrations))
            .fetch_all(pool)
            .await
            .map_err(Error::Check)?;
    for (version, checksum, success) in &applied {
        let version = *version;
        match migrator.iter().find(|m| m.version == version) {
            Some(ours) if *success && *ours.checksum == **checksum => {}
            Some(_) if *success => {
                return Err(Error::ChangedMigration {
                    table: table(),
                    version,
                });
            }
            _ => {
                return Err(Error::UnknownMigration {
                    table: table(),
                    version,
                });
            }
        }
    }
    if let Some(pending) = migrator
        .iter()
        .find(|m| !applied.iter().any(|(version, ..)| *version == m.version))
    {
        return Err(if applied.is_empty() {
            Error::NotMigrated { table: table() }
        } else {
            Error::MigrationPending {
                table: table(),
                version: pending.version,
            }
        });
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
    for &(column, expected) in COLUMNS {
        let actual = found.get(column);
        if actual.map(String::as_str) != Some(expected) {
            return Err(Error::UnexpectedColumn {
                table: table(),
                column,
                expected,
                found: actual.cloned(),
            });
        }
    }
    Ok(())
}
