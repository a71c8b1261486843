//! [`PatternDatabase`]: what the patterns need of a database, for PostgreSQL and SQLite.

use std::{future::Future, pin::Pin};

use sqlx::{AssertSqlSafe, Database, Row};

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    impl Sealed for sqlx::Sqlite {}
}

/// The row a statement returned, if any.
pub(crate) type RowFuture<'c, DB> =
    Pin<Box<dyn Future<Output = Result<Option<<DB as Database>::Row>, sqlx::Error>> + Send + 'c>>;

/// A database the patterns run on: [`sqlx::Postgres`] (feature `postgres`) or [`sqlx::Sqlite`].
/// Sealed.
pub trait PatternDatabase: Database + sealed::Sealed {
    /// What a `SELECT` adds to lock the row it reads until the transaction ends: `FOR UPDATE`
    /// on PostgreSQL; nothing on SQLite, where the transaction's first write already holds the
    /// database's write lock until it ends.
    #[doc(hidden)]
    const LOCK_ROW: &'static str;

    /// Runs `sql` with `arguments` on `connection`, returning its first row.
    #[doc(hidden)]
    fn fetch_optional<'c>(
        connection: &'c mut Self::Connection,
        sql: String,
        arguments: Self::Arguments,
    ) -> RowFuture<'c, Self>;

    /// The boolean `column` of `row`; NULL is false.
    #[doc(hidden)]
    fn flag(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error>;
}

/// Implements [`PatternDatabase`] for `$database`, whose `SELECT` locks the row it reads with
/// `$lock_row`: the same code for every database, on its own concrete types rather than under
/// sqlx's higher-ranked executor bounds.
macro_rules! pattern_database {
    ($database:ty, $lock_row:literal) => {
        impl PatternDatabase for $database {
            const LOCK_ROW: &'static str = $lock_row;

            fn fetch_optional<'c>(
                connection: &'c mut Self::Connection,
                sql: String,
                arguments: Self::Arguments,
            ) -> RowFuture<'c, Self> {
                Box::pin(sqlx::query_with(AssertSqlSafe(sql), arguments).fetch_optional(connection))
            }

            fn flag(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error> {
                Ok(row.try_get::<Option<bool>, _>(column)?.unwrap_or(false))
            }
        }
    };
}

#[cfg(feature = "postgres")]
pattern_database!(sqlx::Postgres, " FOR UPDATE");
pattern_database!(sqlx::Sqlite, "");
