//! [`MigrationFile`]: a crate's migrations as templates, and running them.
//!
//! Each table's migrations are tracked in `<table>_migrations` next to it, so that several
//! tables in one database (two stores, an inbox and an outbox) migrate independently.

use std::borrow::Cow;

use sqlx::{
    AssertSqlSafe, SqlSafeStr,
    migrate::{Migration, MigrationType, Migrator},
};

use crate::Location;

/// One file of a crate's `migrations/`: its version, description and SQL template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationFile {
    /// The version, from 1 up without gaps.
    pub version: i64,
    /// What it does, as sqlx records it.
    pub description: &'static str,
    /// The SQL, with placeholders (see [`Location::render`]).
    pub template: &'static str,
}

impl MigrationFile {
    /// Migration `version`.
    pub const fn new(version: i64, description: &'static str, template: &'static str) -> Self {
        Self {
            version,
            description,
            template,
        }
    }
}

impl Location {
    /// A migrator of `files` rendered for this table, with `placeholders` filled in as
    /// [`render`](Self::render) does, tracked in [`migrations_table`](Self::migrations_table).
    /// `create_schema` is for PostgreSQL; SQLite's schemas are attached databases.
    pub fn migrator(
        &self,
        files: &[MigrationFile],
        placeholders: &[(&str, &str)],
        create_schema: bool,
    ) -> Migrator {
        let migrations = files
            .iter()
            .map(|file| {
                Migration::new(
                    file.version,
                    Cow::Borrowed(file.description),
                    MigrationType::Simple,
                    AssertSqlSafe(self.render(file.template, placeholders)).into_sql_str(),
                    false,
                )
            })
            .collect();
        let mut migrator = Migrator::with_migrations(migrations);
        migrator.dangerous_set_table_name(self.migrations_table());
        if create_schema {
            migrator.create_schema(self.quoted_schema());
        }
        migrator
    }
}

/// How the migrations applied to a table compare with a build's ([`compare_migrations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Every migration of the build, and no other.
    Current,
    /// None at all: the table was never migrated.
    None,
    /// Some, but not this one of the build's (the first missing).
    Pending(i64),
    /// One the build does not know, or one that failed half-way.
    Unknown(i64),
    /// One the build knows, applied with other SQL.
    Changed(i64),
}

/// Compares `applied`, a table's migrations as its migrations table lists them (version,
/// checksum, success), with `migrator`'s.
pub fn compare_migrations(migrator: &Migrator, applied: &[(i64, Vec<u8>, bool)]) -> Applied {
    for (version, checksum, success) in applied {
        let version = *version;
        match migrator.iter().find(|m| m.version == version) {
            Some(ours) if *success && *ours.checksum == **checksum => {}
            Some(_) if *success => return Applied::Changed(version),
            _ => return Applied::Unknown(version),
        }
    }
    match migrator
        .iter()
        .find(|m| !applied.iter().any(|(version, ..)| *version == m.version))
    {
        Some(_) if applied.is_empty() => Applied::None,
        Some(pending) => Applied::Pending(pending.version),
        None => Applied::Current,
    }
}

/// The first of `expected` (a column and its type) that `found` (each column's type, as the
/// catalog names it) lacks or types otherwise: the column, its expected type, and what was
/// found.
pub fn unexpected_column(
    expected: &[(&'static str, &'static str)],
    found: &std::collections::HashMap<String, String>,
) -> Option<(&'static str, &'static str, Option<String>)> {
    expected.iter().find_map(|&(column, kind)| {
        let actual = found.get(column);
        (actual.map(String::as_str) != Some(kind)).then(|| (column, kind, actual.cloned()))
    })
}

/// Applies `migrator` on `connection`, taken from a PostgreSQL pool. Safe to run from several
/// processes at once: sqlx serializes them with an advisory lock. A failed run can leave that
/// session-level lock held, so the connection is then closed rather than given back to its pool.
#[cfg(feature = "postgres")]
pub async fn migrate_postgres(
    connection: sqlx::pool::PoolConnection<sqlx::Postgres>,
    migrator: &Migrator,
) -> Result<(), sqlx::migrate::MigrateError> {
    run_or_close(connection, migrator).await
}

/// Applies `migrator` on `connection`, taken from a MySQL or MariaDB pool whose URL names a
/// database. Safe to run from several processes at once: sqlx serializes them with a named lock
/// (`GET_LOCK`) on the connection's database. A failed run can leave that session-level lock
/// held, so the connection is then closed rather than given back to its pool.
///
/// A DDL statement commits by itself on MySQL, so a migration is not atomic: one that fails
/// half-way keeps what it did before, and sqlx records it as failed and refuses to run again
/// (`MigrateError::Dirty`) until an operator has finished or undone it and deleted its row in
/// the migrations table.
#[cfg(feature = "mysql")]
pub async fn migrate_mysql(
    connection: sqlx::pool::PoolConnection<sqlx::MySql>,
    migrator: &Migrator,
) -> Result<(), sqlx::migrate::MigrateError> {
    run_or_close(connection, migrator).await
}

/// Runs `migrator` on `connection`, closing the connection if the run fails.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn run_or_close<DB>(
    mut connection: sqlx::pool::PoolConnection<DB>,
    migrator: &Migrator,
) -> Result<(), sqlx::migrate::MigrateError>
where
    DB: sqlx::Database,
    DB::Connection: sqlx::migrate::Migrate,
{
    use sqlx::Connection as _;

    let result = migrator.run_direct(None, &mut *connection, false).await;
    if result.is_err() {
        let _ = connection.detach().close().await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_rendered_and_tracked_next_to_the_table() {
        let here = Location::new("billing".parse().unwrap(), "keys".parse().unwrap());
        let files = [
            MigrationFile::new(1, "first", r#"CREATE TABLE "{schema}"."{table}" ({x} int)"#),
            MigrationFile::new(2, "second", r#"DROP TABLE "{schema}"."{table}""#),
        ];
        let migrator = here.migrator(&files, &[("{x}", "a")], true);
        let rendered: Vec<_> = migrator
            .iter()
            .map(|m| {
                (
                    m.version,
                    m.description.to_string(),
                    m.sql.as_str().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            rendered,
            [
                (
                    1,
                    "first".into(),
                    r#"CREATE TABLE "billing"."keys" (a int)"#.into()
                ),
                (2, "second".into(), r#"DROP TABLE "billing"."keys""#.into()),
            ]
        );
        assert_eq!(migrator.table_name, r#""billing"."keys_migrations""#);
        assert_eq!(*migrator.create_schemas, [Cow::<str>::from(r#""billing""#)]);
        assert!(here.migrator(&files, &[], false).create_schemas.is_empty());
    }

    #[test]
    fn applied_migrations_are_compared_with_the_builds() {
        let here = Location::new("s".parse().unwrap(), "t".parse().unwrap());
        let files = [
            MigrationFile::new(1, "first", "SELECT 1"),
            MigrationFile::new(2, "second", "SELECT 2"),
        ];
        let migrator = here.migrator(&files, &[], false);
        let checksum = |version: i64| {
            let migration = migrator.iter().find(|m| m.version == version).unwrap();
            migration.checksum.to_vec()
        };
        let row = |version, success| (version, checksum(version), success);
        assert_eq!(compare_migrations(&migrator, &[]), Applied::None);
        assert_eq!(
            compare_migrations(&migrator, &[row(1, true)]),
            Applied::Pending(2)
        );
        assert_eq!(
            compare_migrations(&migrator, &[row(1, true), row(2, true)]),
            Applied::Current
        );
        assert_eq!(
            compare_migrations(&migrator, &[row(1, true), row(2, false)]),
            Applied::Unknown(2)
        );
        assert_eq!(
            compare_migrations(&migrator, &[row(1, true), (3, vec![0], true)]),
            Applied::Unknown(3)
        );
        assert_eq!(
            compare_migrations(&migrator, &[(1, vec![0], true)]),
            Applied::Changed(1)
        );

        let found = [("a".to_owned(), "bigint".to_owned())]
            .into_iter()
            .collect();
        assert_eq!(unexpected_column(&[("a", "bigint")], &found), None);
        assert_eq!(
            unexpected_column(&[("a", "text")], &found),
            Some(("a", "text", Some("bigint".to_owned())))
        );
        assert_eq!(
            unexpected_column(&[("a", "bigint"), ("b", "bytea")], &found),
            Some(("b", "bytea", None))
        );
    }
}
