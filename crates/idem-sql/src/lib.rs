//! idem's internal plumbing for its SQL crates (`idem-postgres`, `idem-mysql`, `idem-sqlite`,
//! `idem-messaging`) and the gateway: each piece written once for all of them.
//!
//! **No stability promise**: this crate is published only because those crates depend on it.
//! Its API changes whenever they need it to, in any release. Use their APIs instead; they
//! re-export what is theirs to show (the names, their purgers).
//!
//! - [`SchemaName`], [`TableName`] and [`ColumnName`]: validated SQL identifiers, and
//!   [`InvalidName`].
//! - [`patterns`]: insert-once, conditional transitions and keep-first upserts on a user's own
//!   table, inside the user's transaction (re-exported by `idem-postgres`, `idem-mysql` and `idem-sqlite`).
//! - [`Location`]: a schema and a table, the `{schema}`/`{table}` templating of `.sql` files,
//!   and the migrators of [`MigrationFile`]s tracked next to each table.
//! - [`Failure`]: what a database error means, by SQLSTATE or SQLite result code.
//! - [`listener::Listener`] (`postgres` feature): `LISTEN` on a channel, reconnecting with
//!   backoff.
//! - [`batch`] (`store` feature): group commit, the stores' writes coalesced into batches; and
//!   [`connections`], the pool of connections the stores run them on.
//! - [`Purge`], [`PurgeLoop`] and [`Purger`]: deleting what has expired in bounded batches, for
//!   any table or, with the `store` feature, any `idem_core::Store`.

#[cfg(feature = "store")]
pub mod batch;
#[cfg(feature = "store")]
pub mod connections;
mod failure;
#[cfg(feature = "postgres")]
pub mod listener;
mod migrations;
mod names;
pub mod patterns;
mod purger;
mod template;

pub use failure::{Failure, sqlite_code};
#[cfg(feature = "mysql")]
pub use migrations::migrate_mysql;
#[cfg(feature = "postgres")]
pub use migrations::migrate_postgres;
pub use migrations::{Applied, MigrationFile, compare_migrations, unexpected_column};
pub use names::{ColumnName, InvalidName, SchemaName, TableName};
pub use purger::{Purge, PurgeLoop, Purger};
pub use template::{Location, query_text};
