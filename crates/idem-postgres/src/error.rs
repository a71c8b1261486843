//! The failures of the Postgres store, and how database errors map to [`StoreError`].

use std::{error::Error as StdError, fmt, sync::Arc, time::Duration};

use idem_core::StoreError;
use idem_sql::Failure;

/// A failure to set up a [`PostgresStore`](crate::PostgresStore): connecting, migrating, or
/// finding the schema it expects. Also the source of [`StoreError::Corrupted`] for a record it
/// cannot read, and of [`StoreError::Unavailable`] when `acquire` keeps losing races.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database could not be reached.
    #[error("cannot connect to PostgreSQL")]
    Connect(#[source] sqlx::Error),
    /// The migrations could not be applied: the table was migrated by a newer idem or changed by
    /// hand, an earlier run failed half-way, or the role may not create the schema or the table.
    #[error("cannot apply the idem migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// The catalog could not be read while checking the schema.
    #[error("cannot check the idem schema")]
    Check(#[source] sqlx::Error),
    /// The idem migrations have not been applied: the schema, the table or its migrations
    /// table is missing.
    #[error(
        "the idem table {table} has not been created: run {} or `PostgresStore::migrate` first",
        MigrateCommand(url.as_deref())
    )]
    NotMigrated {
        /// The records table, quoted and qualified.
        table: String,
        /// The store's URL, password hidden, when it was made from one
        /// ([`PostgresOptions::url`](crate::PostgresOptions::url)).
        url: Option<String>,
    },
    /// A migration of this build has not been applied yet.
    #[error(
        "the idem table {table} lacks migration {version}: run {} or `PostgresStore::migrate`",
        MigrateCommand(url.as_deref())
    )]
    MigrationPending {
        /// The records table, quoted and qualified.
        table: String,
        /// The store's URL, password hidden, when it was made from one
        /// ([`PostgresOptions::url`](crate::PostgresOptions::url)).
        url: Option<String>,
        /// The first migration missing.
        version: i64,
    },
    /// The table was migrated by a newer idem (a migration this build does not know), or a
    /// migration failed half-way.
    #[error("the idem table {table} has migration {version}, which this build cannot use")]
    UnknownMigration {
        /// The records table, quoted and qualified.
        table: String,
        /// The migration.
        version: i64,
    },
    /// A migration was applied with other SQL than this build's (edited by hand, or another
    /// schema or table name).
    #[error("migration {version} of the idem table {table} differs from this build's")]
    ChangedMigration {
        /// The records table, quoted and qualified.
        table: String,
        /// The migration.
        version: i64,
    },
    /// A column the store needs is missing or has another type.
    #[error(
        "the column {column} of the idem table {table} should be {expected}, found {}",
        found.as_deref().unwrap_or("no such column")
    )]
    UnexpectedColumn {
        /// The records table, quoted and qualified.
        table: String,
        /// The column.
        column: &'static str,
        /// Its type as the migrations create it.
        expected: &'static str,
        /// Its type in the database, if it exists.
        found: Option<String>,
    },
    /// A record's `state` column holds a value this build does not know.
    #[error("a record has the unknown state {0:?}")]
    UnknownState(String),
    /// A record lacks a column its state requires.
    #[error("a {state} record has no {column}")]
    MissingColumn {
        /// The record's state.
        state: &'static str,
        /// The column that is NULL.
        column: &'static str,
    },
    /// `acquire` kept losing races to concurrent writers of the same key (each retry means another
    /// writer changed the record in between).
    #[error("acquire lost {0} races in a row on one key")]
    Contended(u32),
    /// The queue of one kind of write stayed full while the operation waited for room
    /// ([`PostgresOptions::queue_size`](crate::PostgresOptions::queue_size),
    /// [`PostgresOptions::pool_timeout`](crate::PostgresOptions::pool_timeout)): the database
    /// commits more slowly than operations arrive.
    #[error("{capacity} operations of this kind were waiting for {waited:?}: the queue is full")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
        /// How long the operation waited for room.
        waited: Duration,
    },
    /// The task that runs the store's batches has stopped: its runtime shut down.
    #[error("the store's batches are no longer run")]
    Stopped,
    /// The statement of a batch of several operations failed as a whole; each of them fails with
    /// this error, and none was applied.
    #[error("a batch of {size} operations failed")]
    Batch {
        /// How many operations the batch held.
        size: usize,
        /// The batch's error.
        #[source]
        source: BatchFailure,
    },
}

/// The error of a whole batch, which each of its operations reports
/// ([`Error::Batch`]); its source is the database's error.
#[derive(Clone)]
pub struct BatchFailure(Arc<dyn StdError + Send + Sync>);

impl fmt::Debug for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for BatchFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}

/// `error` once per operation of a batch of `size`, as [`Error::Batch`] when there are several.
pub(crate) fn fan_out(error: StoreError, size: usize) -> Vec<StoreError> {
    if size <= 1 {
        return vec![error];
    }
    let each = |source: Box<dyn StdError + Send + Sync>, make: fn(Error) -> StoreError| {
        let source = BatchFailure(Arc::from(source));
        (0..size)
            .map(|_| {
                make(Error::Batch {
                    size,
                    source: source.clone(),
                })
            })
            .collect()
    };
    match error {
        StoreError::LeaseLost => (0..size).map(|_| StoreError::LeaseLost).collect(),
        StoreError::Unavailable(source) => each(source, StoreError::unavailable),
        StoreError::Corrupted(source) => each(source, StoreError::corrupted),
        StoreError::Misconfigured { message, source } => {
            let source = source.map(|source| BatchFailure(Arc::from(source)));
            (0..size)
                .map(|_| StoreError::Misconfigured {
                    message: message.clone(),
                    source: source.clone().map(|source| {
                        Box::new(Error::Batch { size, source }) as Box<dyn StdError + Send + Sync>
                    }),
                })
                .collect()
        }
        other => each(Box::new(other), StoreError::unavailable),
    }
}

/// `idem migrate`, with the store's URL when it is known.
struct MigrateCommand<'a>(Option<&'a str>);

impl std::fmt::Display for MigrateCommand<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(url) => write!(f, "`idem migrate --store {url}`"),
            None => f.write_str("`idem migrate`"),
        }
    }
}

/// Classifies a database error by its SQLSTATE class ([`Failure`]), never by its message:
///
/// - a statement the server refuses (a table, column, function or schema missing, a privilege
///   lacking, authentication) means the store is misconfigured;
/// - data the server cannot store or read back (a data exception, a constraint violated, a
///   corrupted page) is corruption, as is a value the client cannot decode;
/// - everything else (a connection lost, the server shutting down or out of resources, a
///   serialization failure or deadlock, a statement timeout, a read-only replica) is transient:
///   the store is unavailable.
pub(crate) fn store_error(error: sqlx::Error, table: &str) -> StoreError {
    match Failure::of(&error) {
        Failure::Corrupted => StoreError::corrupted(error),
        Failure::Refused => {
            let code = match &error {
                sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
                _ => None,
            };
            let message = match code {
                Some(code) => format!(
                    "PostgreSQL refused a statement on {table} (SQLSTATE {code}): check that the \
                     migrations are applied and the role's privileges"
                ),
                None => format!(
                    "a row of {table} does not have the shape this build expects: check the \
                     migrations"
                ),
            };
            StoreError::misconfigured(message, error)
        }
        _ => StoreError::unavailable(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_are_unavailable_and_decoding_is_corruption() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(store_error(io, "t"), StoreError::Unavailable(_)));
        assert!(matches!(
            store_error(sqlx::Error::PoolTimedOut, "t"),
            StoreError::Unavailable(_)
        ));
        let decode = sqlx::Error::Decode("bad".into());
        assert!(matches!(store_error(decode, "t"), StoreError::Corrupted(_)));
        let missing = sqlx::Error::ColumnNotFound("plan".into());
        assert!(matches!(
            store_error(missing, "t"),
            StoreError::Misconfigured {
                source: Some(_),
                ..
            }
        ));
    }
}
