//! Database-level idempotency on your own tables, inside your own transaction: insert once by a
//! unique key, keep the first writer's row, move a row from one state to the next once.
//!
//! Each helper runs on the connection of your `sqlx` SQLite transaction (`&mut tx`), so its
//! write commits or rolls back with the rest of your work, and returns its outcome as a value:
//!
//! | helper | statements | outcomes |
//! | --- | --- | --- |
//! | [`Insert::once`] | `INSERT … ON CONFLICT (key) DO NOTHING RETURNING *`; if nothing was inserted, `SELECT *` by key | [`Inserted::Inserted`]`(row)`, [`Inserted::AlreadyThere`]`(row)` |
//! | [`Insert::keep_first`] | the same (the transaction holds the write lock from the insert on) | [`Upserted`] `{ first, row }` |
//! | [`Transition::run`] | `UPDATE … SET state = $to WHERE key AND state = $from RETURNING *`; if no row changed, `SELECT *` by key | [`Transitioned::Applied`]`(row)`, [`Transitioned::AlreadyApplied`]`(row)`, [`Transitioned::Conflict`]` { current }`, [`Transitioned::NotFound`] |
//!
//! Table and column names are validated and quoted; values are always bound. Rows are read with
//! [`sqlx::FromRow`]. `RETURNING` needs SQLite 3.35 or later (the bundled SQLite is newer).
//!
//! **Races.** SQLite runs one write transaction at a time: the `INSERT` (or `UPDATE`) takes the
//! database's write lock, waiting for a concurrent writer's commit or rollback (up to the
//! connection's busy timeout), and the `SELECT` after it reads in the same locked transaction.
//! Of 64 transactions racing on one key, exactly one gets `Inserted` (`Applied`) and 63
//! `AlreadyThere` (`AlreadyApplied`), all with the same row (tested).
//!
//! **Call the helper first.** A transaction that read before its first write (sqlx's `begin`
//! is a deferred `BEGIN`) can find, when it writes, that another connection committed since:
//! SQLite answers busy at once, [`Error::Retry`]. Roll back and run it again, or call the helper
//! as the transaction's first statement, or begin it with `BEGIN IMMEDIATE`.
//!
//! # Examples
//!
//! ```
//! use idem_sqlite::patterns::{Insert, Inserted, Table, Transition, Transitioned, Upserted};
//!
//! type Refund = (i64, i64, String); // charge, amount, state
//!
//! async fn refunds(pool: &sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
//!     let ddl = "CREATE TABLE refunds (charge INTEGER PRIMARY KEY, amount INTEGER, state TEXT)";
//!     sqlx::query(ddl)
//!         .execute(pool)
//!         .await?;
//!     let refunds: Table = "refunds".parse()?;
//!
//!     let mut tx = pool.begin().await?;
//!     let request = |amount: i64| {
//!         Insert::new(&refunds)
//!             .key("charge", 7_i64)
//!             .value("amount", amount)
//!             .value("state", "asked")
//!     };
//!     let first: Inserted<Refund> = request(300).once(&mut tx).await?;
//!     assert_eq!(first, Inserted::Inserted((7, 300, "asked".into())));
//!     // A second request for the same charge keeps the first one's amount.
//!     let second: Upserted<Refund> = request(999).keep_first(&mut tx).await?;
//!     assert_eq!(second, Upserted { first: false, row: (7, 300, "asked".into()) });
//!
//!     let approve = Transition::new(&refunds)
//!         .key("charge", 7_i64)
//!         .state("state", "asked", "approved");
//!     let approved: Transitioned<Refund> = approve.run(&mut tx).await?;
//!     assert_eq!(approved, Transitioned::Applied((7, 300, "approved".into())));
//!     let again: Transitioned<Refund> = approve.run(&mut tx).await?;
//!     assert_eq!(again, Transitioned::AlreadyApplied((7, 300, "approved".into())));
//!     let cancel = Transition::new(&refunds)
//!         .key("charge", 7_i64)
//!         .state("state", "asked", "cancelled");
//!     let late: Transitioned<Refund> = cancel.run(&mut tx).await?;
//!     assert_eq!(late, Transitioned::Conflict { current: (7, 300, "approved".into()) });
//!     tx.commit().await?;
//!     Ok(())
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = tempfile::tempdir()?;
//! # let url = format!("sqlite://{}?mode=rwc", dir.path().join("app.db").display());
//! # refunds(&sqlx::SqlitePool::connect(&url).await?).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use sqlx::Sqlite;

pub use idem_sql::ColumnName;
pub use idem_sql::patterns::{Error, Inserted, Table, Transitioned, Upserted};

/// A row of a [`Table`] to create once by its unique key, on SQLite.
pub type Insert = idem_sql::patterns::Insert<Sqlite>;

/// A conditional state transition of one row of a [`Table`], on SQLite.
pub type Transition = idem_sql::patterns::Transition<Sqlite>;
