//! [`Error`]: why a pattern could not decide.

use crate::{ColumnName, Failure, InvalidName};

/// Why a pattern failed. Its outcomes (inserted, already there, applied, conflict, …) are
/// values, never errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A column name is not a valid identifier.
    #[error("invalid column name")]
    Name(#[from] InvalidName),
    /// The pattern was given no key column: it could not name its row.
    #[error("the pattern names no key column")]
    NoKey,
    /// A transition was given no state column and states.
    #[error("the transition names no state column")]
    NoState,
    /// A value could not be encoded for the database.
    #[error("the value of column {column} cannot be encoded")]
    Encode {
        /// The value's column.
        column: ColumnName,
        /// What the encoder said.
        #[source]
        source: sqlx::error::BoxDynError,
    },
    /// The transaction lost a race the database does not wait out: a serialization failure or
    /// a deadlock (PostgreSQL under `REPEATABLE READ` or `SERIALIZABLE`, SQLSTATE class 40; a
    /// deadlock on MySQL, which rolled the transaction back), or SQLite busy or locked. Roll
    /// back and run the whole transaction again.
    #[error("the transaction lost a race: roll it back and run it again")]
    Retry(#[source] sqlx::Error),
    /// The database failed otherwise (connection lost, missing table or column, a row `T`
    /// cannot be read from, a constraint other than the key's).
    #[error("the database failed")]
    Database(#[source] sqlx::Error),
    /// The row with the key conflicted with the insert, and was deleted before it could be read,
    /// each of `attempts` times.
    #[error("the row with this key was deleted by another transaction {attempts} times in a row")]
    Vanished {
        /// How many times the insert conflicted and the row was then gone.
        attempts: u32,
    },
    /// After its write, no row has the pattern's key (MySQL and MariaDB, which read the row
    /// back by its key, under a lock that no other transaction can delete it through): the
    /// insert met a row on another unique key of the table, which `ON DUPLICATE KEY UPDATE`
    /// does not tell from its own (PostgreSQL and SQLite fail with the unique violation,
    /// [`Error::Database`]), or a key value is NULL, or the transition set a column of the key.
    #[error("no row has the pattern's key after its write")]
    NoRow,
}

impl Error {
    /// Whether running the transaction again may succeed: [`Error::Retry`].
    pub fn is_retry(&self) -> bool {
        matches!(self, Self::Retry(_))
    }
}

/// A database error, classified by SQLSTATE class, MySQL error number or SQLite result code.
impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        match Failure::of(&error) {
            Failure::Conflict => Self::Retry(error),
            _ => Self::Database(error),
        }
    }
}
