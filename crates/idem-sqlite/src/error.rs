//! The failures of the SQLite store, and how database errors map to [`StoreError`].

use idem_core::StoreError;
use idem_sql::sqlite_code;

/// SQLite's primary result code for a lock another connection holds.
const SQLITE_BUSY: i32 = 5;

/// A failure of the SQLite store: opening it, or a record it cannot read.
///
/// [`Store`](idem_core::Store) methods report [`StoreError`]; the record variants here are the
/// sources of its [`StoreError::Corrupted`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database file could not be opened, created or configured.
    #[error("cannot open the SQLite database")]
    Open(#[source] sqlx::Error),
    /// The writer's connection to the database file could not be opened or configured.
    #[error("cannot open the SQLite database for writing")]
    OpenWriter(#[source] rusqlite::Error),
    /// A reader connection to the database file could not be opened or configured.
    #[error("cannot open the SQLite database for reading")]
    OpenReader(#[source] rusqlite::Error),
    /// The writer's thread could not be started.
    #[error("cannot start the SQLite store's writer thread")]
    StartWriter(#[source] std::io::Error),
    /// The schema migrations could not be applied: the file was migrated by a newer idem, was
    /// changed by hand, or is not an idem database.
    #[error("cannot apply the idem schema to the SQLite database")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A record's `state` column holds a code this build does not know.
    #[error("a record has the unknown state code {0}")]
    UnknownState(i64),
    /// A record lacks a column its state requires (a processing record without its lease end, a
    /// completed one without its response).
    #[error("a {state} record has no {column}")]
    MissingColumn {
        /// The record's state.
        state: &'static str,
        /// The column that is NULL.
        column: &'static str,
    },
}

/// Classifies an error of one of the store's connections by its result code: a corrupted file,
/// or a value of the wrong type, is corruption; anything else (a busy or closed database, a full
/// disk, I/O) makes the store unavailable.
pub(crate) fn sqlite_error(error: rusqlite::Error) -> StoreError {
    if is_corruption(&error) {
        StoreError::corrupted(error)
    } else {
        StoreError::unavailable(error)
    }
}

/// Whether `error` says that SQLite cannot read the data (see [`sqlite_error`]).
pub(crate) fn is_corruption(error: &rusqlite::Error) -> bool {
    use rusqlite::{Error, ErrorCode};
    match error {
        Error::SqliteFailure(failure, _) => matches!(
            failure.code,
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase
        ),
        Error::FromSqlConversionFailure(..)
        | Error::InvalidColumnType(..)
        | Error::IntegralValueOutOfRange(..) => true,
        _ => false,
    }
}

/// A call after the store was closed.
pub(crate) fn closed() -> StoreError {
    StoreError::unavailable(Closed)
}

/// The store was closed.
#[derive(Debug, thiserror::Error)]
#[error("the SQLite store is closed")]
struct Closed;

/// Whether another connection holds a lock that SQLite did not wait for.
pub(crate) fn is_busy(error: &sqlx::Error) -> bool {
    sqlite_code(error) == Some(SQLITE_BUSY)
}
