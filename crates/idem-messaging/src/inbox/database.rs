//! [`InboxDatabase`]: the databases an inbox can live in, PostgreSQL, MySQL (and MariaDB) and
//! SQLite.

use futures_util::future::BoxFuture;
use idem_sql::MigrationFile;
use sqlx::{AssertSqlSafe, Pool, Postgres, Sqlite};

/// A database an [`Inbox`](crate::Inbox) can live in: [`sqlx::Postgres`], `sqlx::MySql` (the
/// `mysql` feature) or [`sqlx::Sqlite`].
///
/// Sealed: the inbox's guarantees rest on each database's exact locking behaviour, described on
/// [`Inbox::process`](crate::Inbox::process).
pub trait InboxDatabase: sqlx::Database + crate::sql::Sealed {
    #[doc(hidden)]
    const MIGRATIONS: &'static [MigrationFile];
    #[doc(hidden)]
    const RECORD: &'static str;
    #[doc(hidden)]
    const PURGE: &'static str;

    /// Runs [`Self::RECORD`]: whether a row was inserted.
    #[doc(hidden)]
    fn record<'c>(
        connection: &'c mut Self::Connection,
        statement: &'c str,
        consumer: &'c str,
        message_id: &'c str,
    ) -> BoxFuture<'c, Result<bool, sqlx::Error>>;

    /// Runs [`Self::PURGE`]: how many rows were deleted.
    #[doc(hidden)]
    fn purge<'c>(
        pool: &'c Pool<Self>,
        statement: &'c str,
        window_millis: i64,
        batch: i64,
    ) -> BoxFuture<'c, Result<u64, sqlx::Error>>;
}

/// Implements [`InboxDatabase`] for `$database`, whose statements and migrations are the files
/// of `$dir` (`migrations/$dir/0001_inbox.sql`, `sql/$dir/inbox_*.sql`), and `$inserted` tells
/// from the record statement's result whether it inserted: the code is the same for every
/// database, and sqlx has no trait that gives a statement's affected rows whatever the database.
macro_rules! inbox_database {
    ($database:ty, $dir:literal, $inserted:expr) => {
        impl InboxDatabase for $database {
            const MIGRATIONS: &'static [MigrationFile] = &[MigrationFile::new(
                1,
                "idem inbox",
                include_str!(concat!("../../migrations/", $dir, "/0001_inbox.sql")),
            )];
            const RECORD: &'static str =
                include_str!(concat!("../../sql/", $dir, "/inbox_record.sql"));
            const PURGE: &'static str =
                include_str!(concat!("../../sql/", $dir, "/inbox_purge.sql"));

            fn record<'c>(
                connection: &'c mut Self::Connection,
                statement: &'c str,
                consumer: &'c str,
                message_id: &'c str,
            ) -> BoxFuture<'c, Result<bool, sqlx::Error>> {
                Box::pin(async move {
                    let done = sqlx::query(AssertSqlSafe(statement))
                        .bind(consumer)
                        .bind(message_id)
                        .execute(connection)
                        .await?;
                    Ok($inserted(done))
                })
            }

            fn purge<'c>(
                pool: &'c Pool<Self>,
                statement: &'c str,
                window_millis: i64,
                batch: i64,
            ) -> BoxFuture<'c, Result<u64, sqlx::Error>> {
                Box::pin(async move {
                    let done = sqlx::query(AssertSqlSafe(statement))
                        .bind(window_millis)
                        .bind(batch)
                        .execute(pool)
                        .await?;
                    Ok(done.rows_affected())
                })
            }
        }
    };
}

inbox_database!(
    Postgres,
    "postgres",
    |done: sqlx::postgres::PgQueryResult| { done.rows_affected() == 1 }
);
inbox_database!(Sqlite, "sqlite", |done: sqlx::sqlite::SqliteQueryResult| {
    done.rows_affected() == 1
});
// A duplicate's update branch calls LAST_INSERT_ID(1), which sets the statement's insert id; the
// affected rows are 1 either way (sqlx connects with CLIENT_FOUND_ROWS).
#[cfg(feature = "mysql")]
inbox_database!(
    sqlx::MySql,
    "mysql",
    |done: sqlx::mysql::MySqlQueryResult| { done.last_insert_id() == 0 }
);
