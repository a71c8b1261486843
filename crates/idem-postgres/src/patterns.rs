//! Database-level idempotency on your own tables, inside your own transaction: insert once by a
//! unique key, keep the first writer's row, move a row from one state to the next once.
//!
//! Each helper runs on the connection of your `sqlx` transaction (`&mut tx`), so its write
//! commits or rolls back with the rest of your work, and returns its outcome as a value:
//!
//! | helper | statements | outcomes |
//! | --- | --- | --- |
//! | [`Insert::once`] | `INSERT … ON CONFLICT (key) DO NOTHING RETURNING *`; if nothing was inserted, `SELECT *` by key | [`Inserted::Inserted`]`(row)`, [`Inserted::AlreadyThere`]`(row)` |
//! | [`Insert::keep_first`] | the same, the `SELECT` `FOR UPDATE` | [`Upserted`] `{ first, row }`, the row locked until your transaction ends |
//! | [`Transition::run`] | `UPDATE … SET state = $to WHERE key AND state = $from RETURNING *`; if no row changed, `SELECT *` by key | [`Transitioned::Applied`]`(row)`, [`Transitioned::AlreadyApplied`]`(row)`, [`Transitioned::Conflict`]` { current }`, [`Transitioned::NotFound`] |
//!
//! Table and column names are validated and quoted; values are always bound. Rows are read with
//! [`sqlx::FromRow`].
//!
//! **Races.** When a concurrent transaction inserted the key (or moved the row) first, the
//! `INSERT` (or `UPDATE`) waits for it to end. After its commit the statement writes nothing,
//! and the `SELECT` that follows, which in `READ COMMITTED` sees everything committed before it
//! started, finds that transaction's row: `AlreadyThere` (`AlreadyApplied`). After its rollback
//! the statement writes. Of 64 transactions racing on one key, exactly one gets `Inserted`
//! (`Applied`) and 63 `AlreadyThere` (`AlreadyApplied`), all with the same row (tested). A
//! conflicting row deleted before the `SELECT` could read it makes the insert run again, up to
//! three times ([`Error::Vanished`]).
//!
//! **Isolation.** Under `REPEATABLE READ` or `SERIALIZABLE`, PostgreSQL refuses to let a
//! transaction act on a row committed after its snapshot: the call fails with a serialization
//! error (SQLSTATE 40001), [`Error::Retry`]. Roll back and run the transaction again.
//!
//! # Examples
//!
//! ```no_run
//! # async fn pay() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_postgres::patterns::{Insert, Inserted, Table, Transition, Transitioned};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
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

use sqlx::Postgres;

pub use idem_sql::ColumnName;
pub use idem_sql::patterns::{Error, Inserted, Table, Transitioned, Upserted};

/// A row of a [`Table`] to create once by its unique key, on PostgreSQL.
pub type Insert = idem_sql::patterns::Insert<Postgres>;

/// A conditional state transition of one row of a [`Table`], on PostgreSQL.
pub type Transition = idem_sql::patterns::Transition<Postgres>;
