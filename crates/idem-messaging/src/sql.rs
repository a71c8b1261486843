//! Rendering the SQL files for one schema and table, and the migrators built from them.
//!
//! The files under `sql/` and `migrations/` hold placeholders: `{schema}` and `{table}` (always
//! inside double quotes in the files) and, for the outbox, `{channel}` (the `NOTIFY` channel,
//! inside single quotes). Only validated names and the channel, which is `idem_outbox_` and hex
//! digits, are ever put in their place.

use std::{borrow::Cow, fmt::Write, sync::Arc};

use sqlx::{
    AssertSqlSafe, SqlSafeStr,
    migrate::{Migration, MigrationType, Migrator},
};

use crate::{SchemaName, TableName};

/// Where one inbox or outbox lives.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub(crate) schema: SchemaName,
    pub(crate) table: TableName,
}

impl Location {
    /// `template` with the names (and the channel, if any) filled in.
    pub(crate) fn render(&self, template: &str) -> String {
        template
            .replace("{schema}", self.schema.as_str())
            .replace("{table}", self.table.as_str())
            .replace("{channel}", &self.channel())
    }

    /// [`render`](Self::render), shared.
    pub(crate) fn statement(&self, template: &str) -> Arc<str> {
        self.render(template).into()
    }

    /// `"schema"."table"`, for logs and metrics.
    pub(crate) fn qualified(&self) -> String {
        format!(r#""{}"."{}""#, self.schema, self.table)
    }

    /// The `LISTEN`/`NOTIFY` channel of an outbox: `idem_outbox_` and the 64-bit FNV-1a hash of
    /// `schema.table` in hex. FNV rather than std's hasher, whose output may change between Rust
    /// releases: relays built by different compilers must agree on the channel.
    pub(crate) fn channel(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in format!("{}.{}", self.schema, self.table).bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut channel = String::from("idem_outbox_");
        write!(channel, "{hash:016x}").expect("writing to a String cannot fail");
        channel
    }

    /// The migrations of this table, tracked in `<table>_migrations` next to it, so that several
    /// inboxes and outboxes in one database migrate independently. `create_schema` is for
    /// PostgreSQL; SQLite's schemas are attached databases.
    pub(crate) fn migrator(
        &self,
        migrations: &[(i64, &'static str, &'static str)],
        create_schema: bool,
    ) -> Migrator {
        let migrations = migrations
            .iter()
            .map(|&(version, description, template)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    AssertSqlSafe(self.render(template)).into_sql_str(),
                    false,
                )
            })
            .collect();
        let mut migrator = Migrator::with_migrations(migrations);
        migrator
            .dangerous_set_table_name(format!(r#""{}"."{}_migrations""#, self.schema, self.table));
        if create_schema {
            migrator.create_schema(format!(r#""{}""#, self.schema));
        }
        migrator
    }
}

/// A statement's text as sqlx takes it.
pub(crate) fn query_text(text: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(schema: &str, table: &str) -> Location {
        Location {
            schema: schema.parse().unwrap(),
            table: table.parse().unwrap(),
        }
    }

    #[test]
    fn placeholders_are_filled() {
        let here = location("billing", "events");
        let text = here.render(r#"SELECT pg_notify('{channel}', '') FROM "{schema}"."{table}""#);
        assert!(!text.contains('{'), "{text}");
        assert!(text.contains(r#""billing"."events""#));
        assert!(text.contains(&here.channel()));
    }

    #[test]
    fn channels_are_short_stable_and_differ_per_table() {
        let a = location("a", "t").channel();
        assert_eq!(a, location("a", "t").channel());
        assert_ne!(a, location("b", "t").channel());
        assert_eq!(a.len(), "idem_outbox_".len() + 16);
        // FNV-1a of "a.t": a fixed value, so that a compiler upgrade cannot change it.
        assert_eq!(a, "idem_outbox_e61da719046669f6");
    }
}
