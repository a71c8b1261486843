//! [`PatternDatabase`]: what the patterns need of a database, for PostgreSQL, SQLite and MySQL.

use std::{future::Future, pin::Pin};

use sqlx::{AssertSqlSafe, Database, Row};

use super::Dialect;

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    impl Sealed for sqlx::Sqlite {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
}

/// The row a statement returned, if any.
pub(crate) type RowFuture<'c, DB> =
    Pin<Box<dyn Future<Output = Result<Option<<DB as Database>::Row>, sqlx::Error>> + Send + 'c>>;

/// What a write did: whether it wrote, and the row it wrote when the database returns it.
pub(crate) type WriteFuture<'c, DB> = Pin<
    Box<
        dyn Future<Output = Result<(bool, Option<<DB as Database>::Row>), sqlx::Error>> + Send + 'c,
    >,
>;

/// A database the patterns run on: [`sqlx::Postgres`] (feature `postgres`), [`sqlx::Sqlite`] or
/// [`sqlx::MySql`] (feature `mysql`, for MySQL and MariaDB). Sealed.
pub trait PatternDatabase: Database + sealed::Sealed {
    /// The SQL the database speaks.
    #[doc(hidden)]
    const DIALECT: Dialect;

    /// What a `SELECT` adds to lock the row it reads until the transaction ends: `FOR UPDATE`
    /// on PostgreSQL and MySQL; nothing on SQLite, where the transaction's first write already
    /// holds the database's write lock until it ends.
    #[doc(hidden)]
    const LOCK_ROW: &'static str;

    /// What a `SELECT` after a write adds to read the row as last committed, whatever the
    /// transaction's snapshot: nothing on PostgreSQL in `READ COMMITTED`, where each statement
    /// sees what committed before it started, nor on SQLite, whose writer sees everything;
    /// `FOR UPDATE` on MySQL, whose plain `SELECT` in `REPEATABLE READ` (its default) reads the
    /// transaction's first snapshot, while a locking read, like its writes, reads the latest row.
    #[doc(hidden)]
    const READ_LATEST: &'static str;

    /// Runs `sql` with `arguments` on `connection`, returning its first row.
    #[doc(hidden)]
    fn fetch_optional<'c>(
        connection: &'c mut Self::Connection,
        sql: String,
        arguments: Self::Arguments,
    ) -> RowFuture<'c, Self>;

    /// Runs the insert [`Insert`](super::Insert) built: whether it inserted, and the row when the
    /// statement returns it (`RETURNING *`).
    #[doc(hidden)]
    fn insert<'c>(
        connection: &'c mut Self::Connection,
        sql: String,
        arguments: Self::Arguments,
    ) -> WriteFuture<'c, Self> {
        returning::<Self>(Self::fetch_optional(connection, sql, arguments))
    }

    /// Runs the update [`Transition`](super::Transition) built: whether it updated, and the row
    /// when the statement returns it (`RETURNING *`).
    #[doc(hidden)]
    fn update<'c>(
        connection: &'c mut Self::Connection,
        sql: String,
        arguments: Self::Arguments,
    ) -> WriteFuture<'c, Self> {
        returning::<Self>(Self::fetch_optional(connection, sql, arguments))
    }

    /// The boolean `column` of `row`; NULL is false.
    #[doc(hidden)]
    fn flag(row: &Self::Row, column: &str) -> Result<bool, sqlx::Error>;
}

/// A write that returns the row it wrote (`RETURNING *`): it wrote if it returned one.
fn returning<'c, DB: PatternDatabase>(row: RowFuture<'c, DB>) -> WriteFuture<'c, DB> {
    Box::pin(async move {
        let row = row.await?;
        Ok((row.is_some(), row))
    })
}

/// Implements [`PatternDatabase`] for `$database`, speaking `$dialect`, whose `SELECT` locks
/// the row it reads with `$lock_row` and reads the latest row with `$read_latest`, with `$items`
/// where it differs from the defaults: the same code for every database, on its own concrete
/// types rather than under sqlx's higher-ranked executor bounds.
macro_rules! pattern_database {
    (
        $database:ty,
        $dialect:ident,
        lock_row: $lock_row:literal,
        read_latest: $read_latest:literal
        $(, $items:item)* $(,)?
    ) => {
        impl PatternDatabase for $database {
            const DIALECT: Dialect = Dialect::$dialect;
            const LOCK_ROW: &'static str = $lock_row;
            const READ_LATEST: &'static str = $read_latest;

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

            $($items)*
        }
    };
}

#[cfg(feature = "postgres")]
pattern_database!(
    sqlx::Postgres,
    Standard,
    lock_row: " FOR UPDATE",
    read_latest: "",
);
pattern_database!(sqlx::Sqlite, Standard, lock_row: "", read_latest: "");
#[cfg(feature = "mysql")]
pattern_database!(
    sqlx::MySql,
    Mysql,
    lock_row: " FOR UPDATE",
    read_latest: " FOR UPDATE",
    // The insert sets `LAST_INSERT_ID` to 0 when it meets a row with the key, and otherwise to 1
    // or to the id it generated, which the server reports with the statement's result. Its
    // affected rows cannot tell: sqlx connects with `CLIENT_FOUND_ROWS`, with which an existing
    // row left as it was counts 1, as an inserted one does.
    fn insert<'c>(
        connection: &'c mut Self::Connection,
        sql: String,
        arguments: Self::Arguments,
    ) -> WriteFuture<'c, Self> {
        Box::pin(async move {
            let done = sqlx::query_with(AssertSqlSafe(sql), arguments)
                .execute(connection)
                .await?;
            Ok((done.last_insert_id() != 0, None))
        })
    },
    // With `CLIENT_FOUND_ROWS`, the rows the `WHERE` matched, changed or not.
    fn update<'c>(
        connection: &'c mut Self::Connection,
        sql: String,
        arguments: Self::Arguments,
    ) -> WriteFuture<'c, Self> {
        Box::pin(async move {
            let done = sqlx::query_with(AssertSqlSafe(sql), arguments)
                .execute(connection)
                .await?;
            Ok((done.rows_affected() != 0, None))
        })
    },
);
