//! The failures of the MySQL store, and how database errors map to [`StoreError`].

use idem_core::StoreError;
use idem_sql::Failure;

/// A failure to set up a [`MysqlStore`](crate::MysqlStore): connecting, migrating, or finding the
/// tables it expects. Also the source of [`StoreError::Corrupted`] for a record it cannot read.
/// (A batched write's own failures are [`BatchError`](crate::BatchError)s.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database could not be reached.
    #[error("cannot connect to MySQL")]
    Connect(#[source] sqlx::Error),
    /// The migrations could not be applied: the table was migrated by a newer idem or changed by
    /// hand, an earlier run failed half-way, or the user may not create tables.
    #[error("cannot apply the idem migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The catalog could not be read while checking the tables.
    #[error("cannot check the idem tables")]
    Check(#[source] sqlx::Error),
    /// The connection names no database: the URL's path is empty.
    #[error("the MySQL URL names no database: give one as its path, mysql://host/DATABASE")]
    NoDatabase,
    /// The idem migrations have not been applied: the table or its migrations table is missing.
    #[error(
        "the idem table {table} has not been created: run {} or `MysqlStore::migrate` first",
        MigrateCommand(url.as_deref())
    )]
    NotMigrated {
        /// The records table, quoted.
        table: String,
        /// The store's URL, password hidden, when it was made from one
        /// ([`MysqlOptions::url`](crate::MysqlOptions::url)).
        url: Option<String>,
    },
    /// A migration of this build has not been applied yet.
    #[error(
        "the idem table {table} lacks migration {version}: run {} or `MysqlStore::migrate`",
        MigrateCommand(url.as_deref())
    )]
    MigrationPending {
        /// The records table, quoted.
        table: String,
        /// The store's URL, password hidden, when it was made from one.
        url: Option<String>,
        /// The first migration missing.
        version: i64,
    },
    /// The table was migrated by a newer idem (a migration this build does not know), or a
    /// migration failed half-way.
    #[error("the idem table {table} has migration {version}, which this build cannot use")]
    UnknownMigration {
        /// The records table, quoted.
        table: String,
        /// The migration.
        version: i64,
    },
    /// A migration was applied with other SQL than this build's (edited by hand, or another table
    /// name).
    #[error("migration {version} of the idem table {table} differs from this build's")]
    ChangedMigration {
        /// The records table, quoted.
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
        /// The table, quoted: the records table, or its parts table.
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
    /// A batch's statements did not return a row for a record they had just locked.
    #[error("the record of an operation was not read back")]
    NotReadBack,
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

/// Classifies a database error by its error number and SQLSTATE ([`Failure`]), never by its
/// message:
///
/// - a statement the server refuses (a table or column missing, a privilege lacking,
///   authentication) means the store is misconfigured;
/// - data the server cannot store or read back (a data exception, a constraint violated) is
///   corruption, as is a value the client cannot decode;
/// - everything else (a connection lost, the server shutting down, a deadlock, a lock wait
///   timeout, a read-only server) is transient: the store is unavailable.
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
                    "MySQL refused a statement on {table} (SQLSTATE {code}): check that the \
                     migrations are applied and the user's privileges"
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
        let decode = sqlx::Error::Decode("bad".into());
        assert!(matches!(store_error(decode, "t"), StoreError::Corrupted(_)));
        let missing = sqlx::Error::ColumnNotFound("token".into());
        assert!(matches!(
            store_error(missing, "t"),
            StoreError::Misconfigured {
                source: Some(_),
                ..
            }
        ));
    }
}
