//! Database-level idempotency on the application's own tables, inside its own transaction.
//!
//! Three patterns, each one or two statements on the connection of the caller's transaction,
//! each outcome a value:
//!
//! - [`Insert::once`]: create a row once by its unique key: [`Inserted::Inserted`] or
//!   [`Inserted::AlreadyThere`], with the stored row either way;
//! - [`Insert::keep_first`]: the same, the stored row locked until the transaction ends, and
//!   whether this caller was first ([`Upserted`]);
//! - [`Transition::run`]: move a row from one state to the next once:
//!   [`Transitioned::Applied`], [`Transitioned::AlreadyApplied`], [`Transitioned::Conflict`]
//!   with the current row, or [`Transitioned::NotFound`].
//!
//! Table and column names are validated identifiers ([`Table`], [`ColumnName`](crate::ColumnName)),
//! always quoted; values are always bound as parameters. Rows are read with
//! [`sqlx::FromRow`]: a struct deriving it, or a tuple of the table's leading columns.
//!
//! # Isolation
//!
//! The outcomes above hold under `READ COMMITTED`, PostgreSQL's default, and on SQLite, whose
//! transactions are serializable. Under PostgreSQL's `REPEATABLE READ` or `SERIALIZABLE`, a call
//! that meets a row committed by a transaction that started after its own snapshot fails with a
//! serialization error instead of answering `AlreadyThere` or `AlreadyApplied`:
//! [`Error::Retry`], run the transaction again (it will then see the row). On SQLite, a
//! transaction that read before its first write can find the database changed by another
//! connection when it writes: SQLite answers busy, also [`Error::Retry`]; call the pattern as
//! the transaction's first statement, or begin it with `BEGIN IMMEDIATE`. On MySQL and
//! MariaDB they hold under `READ COMMITTED` and `REPEATABLE READ` (their default) alike: the
//! patterns read the row back with `SELECT … FOR UPDATE`, which reads the latest committed row
//! whatever the transaction's snapshot; a deadlock the server detects is [`Error::Retry`].
//!
//! # MySQL and MariaDB
//!
//! MySQL has no `ON CONFLICT (key)` and no `RETURNING`: an insert is `INSERT … ON DUPLICATE KEY
//! UPDATE key = key`, a no-op update that locks an existing row and leaves it as it was, then
//! `SELECT … FOR UPDATE`; whether it inserted is read from the `LAST_INSERT_ID` the statement
//! sets (0 for a row that was there), which the call changes for the session. Not `INSERT
//! IGNORE`, which also turns other errors (a value too long, a NOT NULL column left out, a
//! foreign key) into warnings and stores what it can. An existing row runs the table's `UPDATE`
//! triggers. `ON DUPLICATE KEY UPDATE` meets a row on any unique key of the table: an insert that
//! meets one on another key than its own finds no row with its key, [`Error::NoRow`]. When the
//! transaction that inserted a key rolls back while several others wait to insert it, one of
//! them inserts, and InnoDB may find the others deadlocked on the freed key: [`Error::Retry`].
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_sql::patterns::{Insert, Inserted, Table, Transition, Transitioned};
//! use sqlx::{Connection, Sqlite, SqliteConnection};
//!
//! let mut db = SqliteConnection::connect("sqlite::memory:").await?;
//! sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT NOT NULL)")
//!     .execute(&mut db)
//!     .await?;
//! let orders: Table = "orders".parse()?;
//!
//! let mut tx = db.begin().await?;
//! let new = Insert::<Sqlite>::new(&orders).key("id", "o-1").value("state", "placed");
//! let created: Inserted<(String, String)> = new.once(&mut tx).await?;
//! assert_eq!(created, Inserted::Inserted(("o-1".into(), "placed".into())));
//! let again: Inserted<(String, String)> = new.once(&mut tx).await?;
//! assert_eq!(again, Inserted::AlreadyThere(("o-1".into(), "placed".into())));
//!
//! let pay = Transition::<Sqlite>::new(&orders).key("id", "o-1").state("state", "placed", "paid");
//! let paid: Transitioned<(String, String)> = pay.run(&mut tx).await?;
//! assert_eq!(paid, Transitioned::Applied(("o-1".into(), "paid".into())));
//! let paid_again: Transitioned<(String, String)> = pay.run(&mut tx).await?;
//! assert_eq!(paid_again, Transitioned::AlreadyApplied(("o-1".into(), "paid".into())));
//! tx.commit().await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod database;
mod dialect;
mod error;
mod insert;
mod keyed_row;
mod table;
mod transition;
mod values;

pub use database::PatternDatabase;
use dialect::Dialect;
pub use error::Error;
pub use insert::{Insert, Inserted, Upserted};
pub use table::Table;
pub use transition::{Transition, Transitioned};
