//! The store's SQL and migrations, rendered once for its schema and table.
//!
//! The files under `sql/` and `migrations/` hold placeholders: `{schema}` and `{table}` (always
//! inside double quotes in the files), `{channel}` (the `NOTIFY` channel, inside single quotes),
//! and `{now}`, the store's clock (`sql/now.sql`). Only validated names and the channel, which is
//! hex digits, are ever put in their place.

use std::{borrow::Cow, fmt::Write, sync::Arc};

use sha2::{Digest, Sha256};
use sqlx::{
    AssertSqlSafe, SqlSafeStr,
    migrate::{Migration, MigrationType, Migrator},
};

use crate::{SchemaName, TableName};

/// The migrations, in order: (version, description, template).
const MIGRATIONS: &[(i64, &str, &str)] = &[
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
];

/// A statement the store runs, to read its SQL with [`PostgresStore::sql`](crate::PostgresStore::sql).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Statement {
    /// [`Store::acquire`](idem_core::Store::acquire) and
    /// [`PostgresStore::acquire_in`](crate::PostgresStore::acquire_in).
    Acquire,
    /// [`Store::complete`](idem_core::Store::complete) and
    /// [`PostgresStore::complete_in`](crate::PostgresStore::complete_in).
    Complete,
    /// [`Store::release`](idem_core::Store::release).
    Release,
    /// [`Store::renew`](idem_core::Store::renew).
    Renew,
    /// [`Store::get`](idem_core::Store::get).
    Get,
    /// [`Store::forget`](idem_core::Store::forget).
    Forget,
    /// [`Store::purge_expired`](idem_core::Store::purge_expired).
    PurgeExpired,
}

/// Every statement of one store, rendered. Cloning a statement's text is cheap (an `Arc`).
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) acquire: Arc<str>,
    pub(crate) complete: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) renew: Arc<str>,
    pub(crate) get: Arc<str>,
    pub(crate) forget: Arc<str>,
    pub(crate) purge_expired: Arc<str>,
    pub(crate) applied_migrations: Arc<str>,
    /// The `LISTEN`/`NOTIFY` channel.
    pub(crate) channel: String,
    /// The quoted, qualified names, for the catalog checks and error messages.
    pub(crate) schema: String,
    pub(crate) table: String,
    pub(crate) migrations_table: String,
}

impl Sql {
    pub(crate) fn new(schema: &SchemaName, table: &TableName) -> Self {
        let channel = channel(schema, table);
        let render =
            |template: &str| -> Arc<str> { render(template, schema, table, &channel).into() };
        Self {
            acquire: render(include_str!("../sql/acquire.sql")),
            complete: render(include_str!("../sql/complete.sql")),
            release: render(include_str!("../sql/release.sql")),
            renew: render(include_str!("../sql/renew.sql")),
            get: render(include_str!("../sql/get.sql")),
            forget: render(include_str!("../sql/forget.sql")),
            purge_expired: render(include_str!("../sql/purge_expired.sql")),
            applied_migrations: render(include_str!("../sql/applied_migrations.sql")),
            schema: format!(r#""{schema}""#),
            table: format!(r#""{schema}"."{table}""#),
            migrations_table: format!(r#""{schema}"."{table}_migrations""#),
            channel,
        }
    }

    pub(crate) fn text(&self, statement: Statement) -> &Arc<str> {
        match statement {
            Statement::Acquire => &self.acquire,
            Statement::Complete => &self.complete,
            Statement::Release => &self.release,
            Statement::Renew => &self.renew,
            Statement::Get => &self.get,
            Statement::Forget => &self.forget,
            Statement::PurgeExpired => &self.purge_expired,
        }
    }

    /// The migrations for this schema and table, tracked in `<table>_migrations` next to the
    /// table, so that several stores in one database migrate independently.
    pub(crate) fn migrator(&self, schema: &SchemaName, table: &TableName) -> Migrator {
        let migrations = MIGRATIONS
            .iter()
            .map(|&(version, description, template)| {
                let sql = render(template, schema, table, &self.channel);
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    AssertSqlSafe(sql).into_sql_str(),
                    false,
                )
            })
            .collect();
        let mut migrator = Migrator::with_migrations(migrations);
        migrator.dangerous_set_table_name(self.migrations_table.clone());
        migrator.create_schema(self.schema.clone());
        migrator
    }
}

/// A statement's text as sqlx takes it.
pub(crate) fn query_text(text: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(text))
}

fn render(template: &str, schema: &SchemaName, table: &TableName, channel: &str) -> String {
    template
        .replace("{now}", include_str!("../sql/now.sql").trim_end())
        .replace("{schema}", schema.as_str())
        .replace("{table}", table.as_str())
        .replace("{channel}", channel)
}

/// `idem_` and 24 hex digits of a hash of the qualified table name: unique per table, and short
/// enough for PostgreSQL's 63-byte channel names whatever the names' lengths.
fn channel(schema: &SchemaName, table: &TableName) -> String {
    let digest = Sha256::digest(format!("{schema}.{table}"));
    let mut channel = String::from("idem_");
    for byte in &digest[..12] {
        write!(channel, "{byte:02x}").expect("writing to a String cannot fail");
    }
    channel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let sql = Sql::new(&"billing".parse().unwrap(), &"keys".parse().unwrap());
        let all = [
            Statement::Acquire,
            Statement::Complete,
            Statement::Release,
            Statement::Renew,
            Statement::Get,
            Statement::Forget,
            Statement::PurgeExpired,
        ];
        for statement in all {
            let text = sql.text(statement);
            assert!(!text.contains('{'), "{statement:?}: {text}");
            assert!(text.contains(r#""billing"."keys""#), "{statement:?}");
        }
        assert!(
            sql.acquire
                .contains(r#"nextval('"billing"."keys_tokens"')"#)
        );
        assert!(
            sql.complete
                .contains(&format!("pg_notify('{}'", sql.channel))
        );
        let migrator = sql.migrator(&"billing".parse().unwrap(), &"keys".parse().unwrap());
        let migration = migrator.iter().next().unwrap();
        assert!(!migration.sql.as_str().contains('{'));
        assert_eq!(migrator.table_name, r#""billing"."keys_migrations""#);
    }

    #[test]
    fn channels_are_short_and_differ_per_table() {
        let a = channel(&"a".parse().unwrap(), &"t".parse().unwrap());
        let b = channel(&"b".parse().unwrap(), &"t".parse().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), "idem_".len() + 24);
        assert!(a[5..].bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
