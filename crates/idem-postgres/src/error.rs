//! The failures of the Postgres store, and how database errors map to [`StoreError`].

use idem_core::StoreError;
use idem_sql::Failure;

/// A failure to set up a [`PostgresStore`](crate::PostgresStore): connecting, migrating, or
/// finding the schema it expects. Also the source of [`StoreError::Corrupted`] for a record it
/// cannot read. (A batched write's own failures are [`BatchError`](crate::BatchError)s.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database could not be reached.
    #[error("cannot connect to PostgreSQL")]
    Connect(#[source] sqlx::Error),
    /// The migrations could not be applied: the table was migrated by a newer idem or changed by
    /// hand, an earlier run failed half-way, or the role may not create the schema or the table.
    #[error("cannot apply the idem migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The catalog could not be read while checking the schema.
    #[error("cannot check the idem schema")]
    Check(#[source] sqlx::Error),
    /// The idem migrations have not been applied: the schema, the table or its migrations
    /// table is missing.
    #[error(
        "the idem table {table} has not been created: run {} or `PostgresStore::migrate` first",
        MigrateCommand(url.as_deref())
    )]
    NotMigrated {
        /// The records table, quoted and qualified.
        table: String,
        /// The store's URL, password hidden, when it was made from one
        /// ([`PostgresOptions::url`](crate::PostgresOptions::url)).
        url: Option<String>,
    },
    /// A migration of this build has not been applied yet.
    #[error(
        "the idem table {table} lacks migration {version}: run {} or `PostgresStore::migrate`",
        MigrateCommand(url.as_deref())
    )]
    MigrationPending {
        /// The records table, quoted and qualified.
        table: String,
        /// The store's URL, password hidden, when it was made from one
        /// ([`PostgresOptions::url`](crate::PostgresOptions::url)).
        url: Option<String>,
        /// The first migration missing.
        version: i64,
    },
    /// The table was migrated by a newer idem (a migration this build does not know), or a
    /// migration failed half-way.
    #[error("the idem table {table} has migration {version}, which this build cannot use")]
    UnknownMigration {
        /// The records table, quoted and qualified.
        table: String,
        /// The migration.
        version: i64,
    },
    /// A migration was applied with other SQL than this build's (edited by hand, or another
    /// schema or table name).
    #[error("migration {version} of the idem table {table} differs from this build's")]
    ChangedMigration {
        /// The records table, quoted and qualified.
        table: String,
        /// The migration.
        version: i64,
    },
    /// A column the store needs is missing or has another type.
    #[error(
        "the column {column} of the idem table {table} should be {expected}, found {}",
        found.as_deref().unwrap_or("no such column")
    )]
    UnexpectedColumn {
        /// The records table, quoted and qualified.
        table: String,
        /// The column.
        column: &'static str,
        /// Its type as the migrations create it.
        expected: &'static str,
        /// Its type in the database, if it exists.
        found: Option<String>,
    },
    /// A record's `state` column holds a value this build does not know.
    #[error("a record has the unknown state {0:?}")]
    UnknownState(String),
    /// A record lacks a column its state requires.
    #[error("a {state} record has no {column}")]
    MissingColumn {
        /// The record's state.
        state: &'static str,
        /// The column that is NULL.
        column: &'static str,
    },
}

/// `idem migrate`, with the store's URL when it is known.
struct MigrateCommand<'a>(Option<&'a str>);

impl std::fmt::Display for MigrateCommand<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(url) => write!(f, "`idem migrate --store {url}`"),
            None => f.write_str("`idem migrate`"),
        }
    }
}

/// Classifies a database error by its SQLSTATE class ([`Failure`]), never by its message:
///
/// - a statement the server refuses (a table, column, function or schema missing, a privilege
///   lacking, authentication) means the store is misconfigured;
/// - data the server cannot store or read back (a data exception, a constraint violated, a
///   corrupted page) is corruption, as is a value the client cannot decode;
/// - everything else (a connection lost, the server shutting down or out of resources, a
///   serialization failure or deadlock, a statement timeout, a read-only replica) is transient:
///   the store is unavailable.
pub(crate) fn store_error(error: sqlx::Error, table: &str) -> StoreError {
    match Failure::of(&error) {
        Failure::Corrupted => StoreError::corrupted(error),
        Failure::Refused => {
            let code = match &error {
                sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
                _ => None,
            };
            let message = match code {
                Some(code) => format!(
                    "PostgreSQL refused a statement on {table} (SQLSTATE {code}): check that the \
                     migrations are applied and the role's privileges"
                ),
                None => format!(
                    "a row of {table} does not have the shape this build expects: check the \
                     migrations"
                ),
            };
            StoreError::misconfigured(message, error)
        }
        _ => StoreError::unavailable(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_are_unavailable_and_decoding_is_corruption() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(store_error(io, "t"), StoreError::Unavailable(_)));
        assert!(matches!(
            store_error(sqlx::Error::PoolTimedOut, "t"),
            StoreError::Unavailable(_)
        ));
        let decode = sqlx::Error::Decode("bad".into());
        assert!(matches!(store_error(decode, "t"), StoreError::Corrupted(_)));
        let missing = sqlx::Error::ColumnNotFound("plan".into());
        assert!(matches!(
            store_error(missing, "t"),
            StoreError::Misconfigured {
                source: Some(_),
                ..
            }
        ));
    }
}
