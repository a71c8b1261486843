//! The store's schema migrations: the files of `migrations/`, embedded.
//!
//! Built at run time rather than by `sqlx::migrate!`, so that the store needs none of sqlx's
//! macros (and the second build of SQLite they bring) in its users' builds. A migration's checksum
//! is its SQL's, as with `migrate!`, so files that an earlier build migrated agree: a test
//! compares the two.

use std::sync::LazyLock;

use sqlx::{
    AssertSqlSafe, SqlSafeStr,
    migrate::{Migration, MigrationType, Migrator},
};

/// Each file of `migrations/`: its version, its description (from its name, as sqlx reads it)
/// and its SQL.
const FILES: [(i64, &str, &str); 5] = [
    (
        1,
        "idem records",
        include_str!("../migrations/0001_idem_records.sql"),
    ),
    (
        2,
        "key digest",
        include_str!("../migrations/0002_key_digest.sql"),
    ),
    (
        3,
        "state created",
        include_str!("../migrations/0003_state_created.sql"),
    ),
    (4, "census", include_str!("../migrations/0004_census.sql")),
    (5, "parts", include_str!("../migrations/0005_parts.sql")),
];

/// The migrations, tracked in sqlx's `_sqlx_migrations` table.
pub(crate) static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    Migrator::with_migrations(
        FILES
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    description.into(),
                    MigrationType::Simple,
                    AssertSqlSafe(sql).into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    /// What identifies an applied migration in `_sqlx_migrations`.
    fn identities(migrator: &Migrator) -> Vec<(i64, String, Vec<u8>, bool)> {
        migrator
            .iter()
            .map(|m| {
                (
                    m.version,
                    m.description.to_string(),
                    m.checksum.to_vec(),
                    m.no_tx,
                )
            })
            .collect()
    }

    #[test]
    fn the_migrations_are_the_files_as_sqlx_migrate_reads_them() {
        let embedded: Migrator = sqlx::migrate!();
        assert_eq!(identities(&MIGRATOR), identities(&embedded));
        assert_eq!(
            MIGRATOR.iter().map(|m| m.version).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
    }
}
