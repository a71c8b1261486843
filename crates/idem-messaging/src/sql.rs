//! Rendering the SQL files for one schema and table, and the migrators built from them.
//!
//! The files under `sql/` and `migrations/` hold placeholders: `{schema}` and `{table}` (always
//! inside double quotes in the files) and, for the outbox, `{channel}` (the `NOTIFY` channel,
//! inside single quotes). Only validated names and the channel, which is `idem_outbox_` and hex
//! digits, are ever put in their place.

use std::{fmt::Write, sync::Arc};

use idem_sql::MigrationFile;
use sqlx::{Pool, Postgres, migrate::Migrator};

use crate::Error;

pub(crate) use idem_sql::{Location, query_text};
pub(crate) use sealed::Sealed;

/// The databases the inbox and the outbox live in, and no other: their traits are sealed by this
/// one, since their guarantees rest on each database's exact locking behaviour. It also holds
/// what both do alike on each database: where their tables go by default, and how their
/// migrations run.
mod sealed {
    use futures_util::future::BoxFuture;
    use sqlx::{Pool, Postgres, Sqlite, migrate::Migrator};

    use crate::Error;

    pub trait Sealed: sqlx::Database {
        /// The schema of a table whose location names none.
        const DEFAULT_SCHEMA: &'static str;
        /// Whether a migration creates the schema first (PostgreSQL; SQLite's schemas are
        /// attached databases).
        const CREATE_SCHEMA: bool;

        /// Applies the missing migrations.
        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>>;
    }

    impl Sealed for Postgres {
        const DEFAULT_SCHEMA: &'static str = "public";
        const CREATE_SCHEMA: bool = true;

        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>> {
            Box::pin(super::migrate_postgres(pool, migrator))
        }
    }

    impl Sealed for Sqlite {
        const DEFAULT_SCHEMA: &'static str = "main";
        const CREATE_SCHEMA: bool = false;

        fn migrate<'c>(
            pool: &'c Pool<Self>,
            migrator: &'c Migrator,
        ) -> BoxFuture<'c, Result<(), Error>> {
            Box::pin(async move { migrator.run(pool).await.map_err(Error::Migrate) })
        }
    }
}

/// `template` with the names and the channel filled in, shared.
pub(crate) fn statement(location: &Location, template: &str) -> Arc<str> {
    location
        .render(template, &[("{channel}", &channel(location))])
        .into()
}

/// The migrations of this table, tracked in `<table>_migrations` next to it, so that several
/// inboxes and outboxes in one database migrate independently. `create_schema` is for
/// PostgreSQL; SQLite's schemas are attached databases.
pub(crate) fn migrator(
    location: &Location,
    migrations: &[MigrationFile],
    create_schema: bool,
) -> Migrator {
    location.migrator(
        migrations,
        &[("{channel}", &channel(location))],
        create_schema,
    )
}

/// The `LISTEN`/`NOTIFY` channel of an outbox: `idem_outbox_` and the 64-bit FNV-1a hash of
/// `schema.table` in hex. FNV rather than std's hasher, whose output may change between Rust
/// releases: relays built by different compilers must agree on the channel.
pub(crate) fn channel(location: &Location) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in format!("{}.{}", location.schema, location.table).bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut channel = String::from("idem_outbox_");
    write!(channel, "{hash:016x}").expect("writing to a String cannot fail");
    channel
}

/// Applies `migrator` on PostgreSQL. Safe to run from several processes at once: sqlx serializes
/// them with an advisory lock.
pub(crate) async fn migrate_postgres(
    pool: &Pool<Postgres>,
    migrator: &Migrator,
) -> Result<(), Error> {
    let connection = pool.acquire().await?;
    idem_sql::migrate_postgres(connection, migrator)
        .await
        .map_err(Error::Migrate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(schema: &str, table: &str) -> Location {
        Location::new(schema.parse().unwrap(), table.parse().unwrap())
    }

    #[test]
    fn placeholders_are_filled() {
        let here = location("billing", "events");
        let text = statement(
            &here,
            r#"SELECT pg_notify('{channel}', '') FROM "{schema}"."{table}""#,
        );
        assert!(!text.contains('{'), "{text}");
        assert!(text.contains(r#""billing"."events""#));
        assert!(text.contains(&channel(&here)));
    }

    #[test]
    fn channels_are_short_stable_and_differ_per_table() {
        let a = channel(&location("a", "t"));
        assert_eq!(a, channel(&location("a", "t")));
        assert_ne!(a, channel(&location("b", "t")));
        assert_eq!(a.len(), "idem_outbox_".len() + 16);
        // FNV-1a of "a.t": a fixed value, so that a compiler upgrade cannot change it.
        assert_eq!(a, "idem_outbox_e61da719046669f6");
    }
}
