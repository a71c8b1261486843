//! Rendering the SQL files for one table, and the migrators built from them.
//!
//! The files under `sql/` and `migrations/` hold placeholders: `{qualified}`, the table as a
//! statement names it (quoted, with its schema when it has one); `{schema}` and `{table}`, for
//! the names of the table's other objects (indexes, constraints, the sequence); and, for the
//! outbox, `{channel}` (the `NOTIFY` channel, inside single quotes). Only validated names and the
//! channel, which is `idem_outbox_` and hex digits, are ever put in their place.

use std::{borrow::Cow, fmt::Write, sync::Arc};

use idem_sql::{MigrationFile, SchemaName, TableName};
use sqlx::{
    AssertSqlSafe, SqlSafeStr,
    migrate::{Migration, MigrationType, Migrator},
};

pub(crate) use idem_sql::query_text;
pub(crate) use sealed::Sealed;

/// The databases the inbox and the outbox live in, and no other: their traits are sealed by this
/// one, since their guarantees rest on each database's exact locking behaviour. It also holds
/// what both do alike on each database: where their tables go by default, how statements name
/// them, and how their migrations run.
mod sealed {
    use futures_util::future::BoxFuture;
    use sqlx::{Pool, Postgres, Sqlite, migrate::Migrator};

    use crate::Error;

    pub trait Sealed: sqlx::Database {
        /// The schema of a table whose options name none; `None` where such a table is the
        /// connection's current database's (MySQL), named without a schema.
        const DEFAULT_SCHEMA: Option<&'static str>;
        /// Whether a migration creates the schema first (PostgreSQL, and MySQL, where it is a
        /// database; SQLite's schemas are attached databases).
        const CREATE_SCHEMA: bool;
        /// How the database quotes an identifier: `"` (standard SQL), or MySQL's `` ` ``.
        const QUOTE: char;

        /// Applies the missing migrations.
        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>>;
    }

    impl Sealed for Postgres {
        const DEFAULT_SCHEMA: Option<&'static str> = Some("public");
        const CREATE_SCHEMA: bool = true;
        const QUOTE: char = '"';

        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>> {
            Box::pin(async move {
                let connection = pool.acquire().await?;
                idem_sql::migrate_postgres(connection, migrator)
                    .await
                    .map_err(Error::Migrate)
            })
        }
    }

    impl Sealed for Sqlite {
        const DEFAULT_SCHEMA: Option<&'static str> = Some("main");
        const CREATE_SCHEMA: bool = false;
        const QUOTE: char = '"';

        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>> {
            Box::pin(async move { migrator.run(pool).await.map_err(Error::Migrate) })
        }
    }

    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {
        const DEFAULT_SCHEMA: Option<&'static str> = None;
        const CREATE_SCHEMA: bool = true;
        const QUOTE: char = '`';

        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>> {
            Box::pin(async move {
                let connection = pool.acquire().await?;
                idem_sql::migrate_mysql(connection, migrator)
                    .await
                    .map_err(Error::Migrate)
            })
        }
    }
}

/// An inbox's or an outbox's table: its schema, if it has one, and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    /// `None` only on MySQL, for a table of the connection's current database.
    schema: Option<SchemaName>,
    table: TableName,
}

impl Table {
    /// `table` in `schema`, or in `DB`'s default schema.
    pub(crate) fn new<DB: Sealed>(schema: Option<SchemaName>, table: TableName) -> Self {
        Self {
            schema: schema.or(DB::DEFAULT_SCHEMA.map(SchemaName::from_static)),
            table,
        }
    }

    /// The table as `DB`'s statements name it: `"schema"."table"`, `` `schema`.`table` ``, or
    /// `` `table` `` on MySQL without a schema.
    pub(crate) fn qualified<DB: Sealed>(&self) -> String {
        self.qualified_as::<DB>(self.table.as_str())
    }

    /// The object `name` in the table's schema, quoted as `DB` does.
    fn qualified_as<DB: Sealed>(&self, name: &str) -> String {
        let q = DB::QUOTE;
        match &self.schema {
            Some(schema) => format!("{q}{schema}{q}.{q}{name}{q}"),
            None => format!("{q}{name}{q}"),
        }
    }

    /// `template` with the placeholders filled in, as `DB`'s statements name things.
    pub(crate) fn render<DB: Sealed>(&self, template: &str) -> String {
        let mut text = template
            .replace("{qualified}", &self.qualified::<DB>())
            .replace("{channel}", &self.channel());
        if let Some(schema) = &self.schema {
            text = text.replace("{schema}", schema.as_str());
        }
        text.replace("{table}", self.table.as_str())
    }

    /// [`render`](Self::render), shared.
    pub(crate) fn statement<DB: Sealed>(&self, template: &str) -> Arc<str> {
        self.render::<DB>(template).into()
    }

    /// The migrations of this table, tracked in `<table>_migrations` next to it, so that several
    /// inboxes and outboxes in one database migrate independently.
    pub(crate) fn migrator<DB: Sealed>(&self, migrations: &[MigrationFile]) -> Migrator {
        let migrations = migrations
            .iter()
            .map(|file| {
                Migration::new(
                    file.version,
                    Cow::Borrowed(file.description),
                    MigrationType::Simple,
                    AssertSqlSafe(self.render::<DB>(file.template)).into_sql_str(),
                    false,
                )
            })
            .collect();
        let mut migrator = Migrator::with_migrations(migrations);
        migrator.dangerous_set_table_name(
            self.qualified_as::<DB>(&format!("{}_migrations", self.table)),
        );
        if let Some(schema) = self.schema.as_ref().filter(|_| DB::CREATE_SCHEMA) {
            let q = DB::QUOTE;
            migrator.create_schema(format!("{q}{schema}{q}"));
        }
        migrator
    }

    /// The `LISTEN`/`NOTIFY` channel of an outbox: `idem_outbox_` and the 64-bit FNV-1a hash of
    /// `schema.table` in hex. FNV rather than std's hasher, whose output may change between Rust
    /// releases: relays built by different compilers must agree on the channel.
    pub(crate) fn channel(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let name = match &self.schema {
            Some(schema) => format!("{schema}.{}", self.table),
            None => self.table.to_string(),
        };
        for byte in name.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut channel = String::from("idem_outbox_");
        write!(channel, "{hash:016x}").expect("writing to a String cannot fail");
        channel
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Postgres, Sqlite};

    use super::*;

    fn table<DB: Sealed>(schema: Option<&str>, table: &str) -> Table {
        Table::new::<DB>(schema.map(|s| s.parse().unwrap()), table.parse().unwrap())
    }

    #[test]
    fn placeholders_are_filled() {
        let here = table::<Postgres>(Some("billing"), "events");
        let text = here.render::<Postgres>(
            r#"SELECT pg_notify('{channel}', '') FROM {qualified} WHERE "{schema}"."{table}_seq" > 0"#,
        );
        assert_eq!(
            text,
            format!(
                r#"SELECT pg_notify('{}', '') FROM "billing"."events" WHERE "billing"."events_seq" > 0"#,
                here.channel()
            )
        );
    }

    #[test]
    fn the_default_schema_is_the_databases() {
        assert_eq!(
            table::<Postgres>(None, "t").qualified::<Postgres>(),
            r#""public"."t""#
        );
        assert_eq!(
            table::<Sqlite>(None, "t").qualified::<Sqlite>(),
            r#""main"."t""#
        );
    }

    #[test]
    fn migrations_are_rendered_and_tracked_next_to_the_table() {
        let files = [
            MigrationFile::new(1, "first", "CREATE TABLE {qualified} (a int)"),
            MigrationFile::new(2, "second", "DROP TABLE {qualified}"),
        ];
        let migrator = table::<Postgres>(Some("billing"), "keys").migrator::<Postgres>(&files);
        let rendered: Vec<_> = migrator
            .iter()
            .map(|m| (m.version, m.sql.as_str().to_owned()))
            .collect();
        assert_eq!(
            rendered,
            [
                (1, r#"CREATE TABLE "billing"."keys" (a int)"#.to_owned()),
                (2, r#"DROP TABLE "billing"."keys""#.to_owned()),
            ]
        );
        assert_eq!(migrator.table_name, r#""billing"."keys_migrations""#);
        assert_eq!(*migrator.create_schemas, [Cow::<str>::from(r#""billing""#)]);
        let on_sqlite = table::<Sqlite>(None, "keys").migrator::<Sqlite>(&files);
        assert_eq!(on_sqlite.table_name, r#""main"."keys_migrations""#);
        assert!(on_sqlite.create_schemas.is_empty());
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_quotes_with_backticks_and_names_a_table_of_the_current_database_alone() {
        use sqlx::MySql;

        let files = [MigrationFile::new(
            1,
            "first",
            "CREATE TABLE {qualified} (a int)",
        )];
        let named = table::<MySql>(Some("shop"), "keys");
        assert_eq!(named.qualified::<MySql>(), "`shop`.`keys`");
        let migrator = named.migrator::<MySql>(&files);
        assert_eq!(migrator.table_name, "`shop`.`keys_migrations`");
        assert_eq!(*migrator.create_schemas, [Cow::<str>::from("`shop`")]);

        let current = table::<MySql>(None, "keys");
        assert_eq!(
            current.render::<MySql>("DELETE FROM {qualified} WHERE 1"),
            "DELETE FROM `keys` WHERE 1"
        );
        let migrator = current.migrator::<MySql>(&files);
        assert_eq!(migrator.table_name, "`keys_migrations`");
        assert!(migrator.create_schemas.is_empty());
    }

    #[test]
    fn channels_are_short_stable_and_differ_per_table() {
        let a = table::<Postgres>(Some("a"), "t").channel();
        assert_eq!(a, table::<Postgres>(Some("a"), "t").channel());
        assert_ne!(a, table::<Postgres>(Some("b"), "t").channel());
        assert_eq!(a.len(), "idem_outbox_".len() + 16);
        // FNV-1a of "a.t": a fixed value, so that a compiler upgrade cannot change it.
        assert_eq!(a, "idem_outbox_e61da719046669f6");
    }
}
