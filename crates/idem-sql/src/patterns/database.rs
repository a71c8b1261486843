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

#[cfg(feature = "postgres")]
impl PatternDatabase for sqlx::Postgres {
    const LOCK_ROW: &'static str = " FOR UPDATE";

    fn fetch_optional<'c>(
        connection: &'c mut sqlx::PgConnection,
        sql: String,
        arguments: sqlx::postgres::PgArguments,
    ) -> RowFuture<'c, Self> {
        Box::pin(sqlx::query_with(AssertSqlSafe(sql), arguments).fetch_optional(connection))
    }

    fn flag(row: &sqlx::postgres::PgRow, column: &str) -> Result<bool, sqlx::Error> {
        Ok(row.try_get::<Option<bool>, _>(column)?.unwrap_or(false))
    }
}

impl PatternDatabase for sqlx::Sqlite {
    const LOCK_ROW: &'static str = "";

    fn fetch_optional<'c>(
        connection: &'c mut sqlx::SqliteConnection,
        sql: String,
        arguments: sqlx::sqlite::SqliteArguments,
    ) -> RowFuture<'c, Self> {
        Box::pin(sqlx::query_with(AssertSqlSafe(sql), arguments).fetch_optional(connection))
    }

    fn flag(row: &sqlx::sqlite::SqliteRow, column: &str) -> Result<bool, sqlx::Error> {
        Ok(row.try_get::<Option<bool>, _>(column)?.unwrap_or(false))
    }
}
