//! The failures of the Postgres store, and how database errors map to [`StoreError`].

use idem_core::StoreError;

/// A failure to set up a [`PostgresStore`](crate::PostgresStore): connecting, migrating, or
/// finding the schema it expects. Also the source of [`StoreError::Corrupted`] for a record it
/// cannot read, and of [`StoreError::Unavailable`] when `acquire` keeps losing races.
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
        "the idem table {table} has not been created: run `idem migrate` or \
         `PostgresStore::migrate` first"
    )]
    NotMigrated {
        /// The records table, quoted and qualified.
        table: String,
    },
    /// A migration of this build has not been applied yet.
    #[error(
        "the idem table {table} lacks migration {version}: run `idem migrate` or \
         `PostgresStore::migrate`"
    )]
    MigrationPending {
        /// The records table, quoted and qualified.
        table: String,
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
    /// `acquire` kept losing races to concurrent writers of the same key (each retry means another
    /// writer changed the record in between).
    #[error("acquire lost {0} races in a row on one key")]
    Contended(u32),
}

/// Classifies a database error by its SQLSTATE class, never by its message:
///
/// - a statement the server refuses (a table, column, function or schema missing, a privilege
///   lacking, authentication) means the store is misconfigured;
/// - data the server cannot store or read back (a data exception, a constraint violated, a
///   corrupted page) is corruption, as is a value the client cannot decode;
/// - everything else (a connection lost, the server shutting down or out of resources, a
///   serialization failure or deadlock, a statement timeout, a read-only replica) is transient:
///   the store is unavailable.
pub(crate) fn store_error(error: sqlx::Error, table: &str) -> StoreError {
    let class = match &error {
        sqlx::Error::Database(db) => db.code().map(|code| classify(&code)),
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => Some(Class::Corrupted),
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::Configuration(_) => Some(Class::Misconfigured),
        _ => None,
    };
    match class.unwrap_or(Class::Unavailable) {
        Class::Unavailable => StoreError::unavailable(error),
        Class::Corrupted => StoreError::corrupted(error),
        Class::Misconfigured => {
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
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unavailable,
    Corrupted,
    Misconfigured,
}

/// See [`store_error`]. Classes from PostgreSQL's appendix A, "Error Codes".
fn classify(sqlstate: &str) -> Class {
    match sqlstate.get(..2) {
        // Syntax error or access rule violation; invalid schema, catalog or authorization;
        // feature not supported.
        Some("42" | "3F" | "3D" | "28" | "0A") => Class::Misconfigured,
        // Data exception; integrity constraint violation; internal error (data or index corrupted).
        Some("22" | "23") => Class::Corrupted,
        Some("XX") if matches!(sqlstate, "XX001" | "XX002") => Class::Corrupted,
        _ => Class::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_the_three_kinds() {
        for (code, class) in [
            ("42P01", Class::Misconfigured), // undefined table
            ("42703", Class::Misconfigured), // undefined column
            ("42501", Class::Misconfigured), // insufficient privilege
            ("3F000", Class::Misconfigured), // invalid schema name
            ("28P01", Class::Misconfigured), // invalid password
            ("22P02", Class::Corrupted),     // invalid text representation
            ("23514", Class::Corrupted),     // check violation
            ("XX001", Class::Corrupted),     // data corrupted
            ("XX000", Class::Unavailable),   // internal error
            ("08006", Class::Unavailable),   // connection failure
            ("57P01", Class::Unavailable),   // admin shutdown
            ("57014", Class::Unavailable),   // query canceled (statement timeout)
            ("40001", Class::Unavailable),   // serialization failure
            ("40P01", Class::Unavailable),   // deadlock detected
            ("53300", Class::Unavailable),   // too many connections
            ("25006", Class::Unavailable),   // read-only transaction (a standby)
        ] {
            assert_eq!(classify(code), class, "{code}");
        }
    }

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
