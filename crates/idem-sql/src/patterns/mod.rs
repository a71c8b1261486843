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
//! the transaction's first statement, or begin it with `BEGIN IMMEDIATE`.
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
mod error;
mod insert;
mod keyed_row;
mod table;
mod transition;
mod values;

pub use database::PatternDatabase;
pub use error::Error;
pub use insert::{Insert, Inserted, Upserted};
pub use table::Table;
pub use transition::{Transition, Transitioned};
