//! Database-level idempotency on your own tables, inside your own transaction: insert once by a
//! unique key, keep the first writer's row, move a row from one state to the next once, on
//! MySQL (8.0 and later) and MariaDB (10.6 and later).
//!
//! Each helper runs on the connection of your `sqlx` transaction (`&mut tx`), so its write
//! commits or rolls back with the rest of your work, and returns its outcome as a value:
//!
//! | helper | statements | outcomes |
//! | --- | --- | --- |
//! | [`Insert::once`] | `INSERT … ON DUPLICATE KEY UPDATE key = key`, then `SELECT * … FOR UPDATE` by key | [`Inserted::Inserted`]`(row)`, [`Inserted::AlreadyThere`]`(row)`, the row locked until your transaction ends |
//! | [`Insert::keep_first`] | the same | [`Upserted`] `{ first, row }`, the row locked until your transaction ends |
//! | [`Transition::run`] | `UPDATE … SET state = ? WHERE key AND state = ?`, then `SELECT * … FOR UPDATE` by key | [`Transitioned::Applied`]`(row)`, [`Transitioned::AlreadyApplied`]`(row)`, [`Transitioned::Conflict`]` { current }`, [`Transitioned::NotFound`] |
//!
//! Table and column names are validated and quoted (in backticks); values are always bound.
//! Rows are read with [`sqlx::FromRow`].
//!
//! **The insert.** MySQL has neither `ON CONFLICT (key)` nor `RETURNING` (MariaDB has
//! `RETURNING`, MySQL 8.0 not): the insert meets an existing row with a no-op `ON DUPLICATE KEY
//! UPDATE`, which locks that row and leaves it as it was, and tells an inserted row from an
//! existing one by the `LAST_INSERT_ID` it sets (0 for an existing row), so the call changes
//! `LAST_INSERT_ID()` for the session. Its affected rows cannot tell: sqlx connects with
//! `CLIENT_FOUND_ROWS`, with which an existing row left as it was counts 1, as an inserted one
//! does. It is not `INSERT IGNORE`, which also turns every other error (a value too long, a NOT
//! NULL column left out, a foreign key) into a warning and stores what it can: those are
//! [`Error::Database`] (tested). Two things differ from PostgreSQL: an existing row runs the
//! table's `UPDATE` triggers, and `ON DUPLICATE KEY UPDATE` meets a row on any unique key of the
//! table, so an insert that meets one on another key than its own finds no row with its key,
//! [`Error::NoRow`] (PostgreSQL fails with the unique violation).
//!
//! **Races.** When a concurrent transaction inserted the key (or moved the row) first, the
//! `INSERT` (or `UPDATE`) waits for its lock on the row until it ends. After its commit the
//! statement writes nothing, and the `SELECT … FOR UPDATE` that follows, which reads the latest
//! committed row, finds that transaction's row: `AlreadyThere` (`AlreadyApplied`). Of 64
//! transactions racing on one key, exactly one gets `Inserted` (`Applied`) and 63 `AlreadyThere`
//! (`AlreadyApplied`), all with the same row (tested). After its rollback, one waiting insert
//! inserts; when several waited, InnoDB may find the others deadlocked on the freed key and roll
//! them back: [`Error::Retry`] (tested).
//!
//! **Isolation.** The outcomes hold under `REPEATABLE READ` (the default) and `READ COMMITTED`
//! alike: the locking reads see the latest committed row, whatever the transaction's snapshot
//! (tested). A deadlock is [`Error::Retry`]: InnoDB rolled the transaction back; run it again.
//!
//! # Examples
//!
//! ```no_run
//! # async fn pay() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_mysql::patterns::{Insert, Inserted, Table, Transition, Transitioned};
//!
//! let pool = sqlx::MySqlPool::connect("mysql://root@127.0.0.1/app").await?;
//! let payments: Table = "payments".parse()?;
//!
//! let mut tx = pool.begin().await?;
//! // A webhook delivered twice creates one payment.
//! let created: Inserted<(String, i64, String)> = Insert::new(&payments)
//!     .key("provider_ref", "pi_123".to_owned())
//!     .value("amount", 2_500_i64)
//!     .value("status", "pending")
//!     .once(&mut tx)
//!     .await?;
//! // And settles it once.
//! let settled: Transitioned<(String, i64, String)> = Transition::new(&payments)
//!     .key("provider_ref", "pi_123".to_owned())
//!     .state("status", "pending", "settled")
//!     .run(&mut tx)
//!     .await?;
//! match settled {
//!     Transitioned::Applied(_) => { /* credit the ledger, in this transaction */ }
//!     Transitioned::AlreadyApplied(_) => { /* done before: nothing to do */ }
//!     Transitioned::Conflict { current } => println!("payment is {}", current.2),
//!     Transitioned::NotFound => unreachable!("created above"),
//! }
//! tx.commit().await?;
//! # drop(created);
//! # Ok(())
//! # }
//! ```

use sqlx::MySql;

pub use idem_sql::ColumnName;
pub use idem_sql::patterns::{Error, Inserted, Table, Transitioned, Upserted};

/// A row of a [`Table`] to create once by its unique key, on MySQL or MariaDB.
pub type Insert = idem_sql::patterns::Insert<MySql>;

/// A conditional state transition of one row of a [`Table`], on MySQL or MariaDB.
pub type Transition = idem_sql::patterns::Transition<MySql>;
