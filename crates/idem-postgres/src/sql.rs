//! The store's SQL and migrations, rendered once for its schema and table.
//!
//! The files under `sql/` and `migrations/` hold placeholders: `{schema}` and `{table}` (always
//! inside double quotes in the files), `{channel}` (the `NOTIFY` channel, inside single quotes),
//! and `{now}`, the store's clock (`sql/now.sql`). Only validated names and the channel, which is
//! hex digits, are ever put in their place.

use std::{fmt::Write, sync::Arc};

use idem_sql::{Location, MigrationFile};
use sha2::{Digest, Sha256};
use sqlx::migrate::Migrator;

use crate::{SchemaName, TableName};

/// The migrations, in order.
const MIGRATIONS: &[MigrationFile] = &[
    MigrationFile::new(
        1,
        "idem records",
        include_str!("../migrations/0001_idem_records.sql"),
    ),
    MigrationFile::new(
        2,
        "key digest",
        include_str!("../migrations/0002_key_digest.sql"),
    ),
    MigrationFile::new(
        3,
        "state created",
        include_str!("../migrations/0003_state_created.sql"),
    ),
    MigrationFile::new(4, "census", include_str!("../migrations/0004_census.sql")),
    MigrationFile::new(5, "parts", include_str!("../migrations/0005_parts.sql")),
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
    /// [`Store::forget`](idem_core::Store::forget): the record and every streamed part of its
    /// address.
    Forget,
    /// After a [`Forget`](Statement::Forget) that deleted a record: the address's streamed parts
    /// again, those of an append that held the record while the forget started.
    ForgetParts,
    /// [`Store::purge_expired`](idem_core::Store::purge_expired): expired records, then expired
    /// streamed parts, `$2` rows in all; one row, how many it deleted.
    PurgeExpired,
    /// [`Store::append_part`](idem_core::Store::append_part): `$4` token, `$5` index, `$6` part.
    AppendPart,
    /// [`Store::read_parts`](idem_core::Store::read_parts): `$4` token, `$5` first index, `$6`
    /// most bytes.
    ReadParts,
    /// [`Store::discard_parts`](idem_core::Store::discard_parts): `$4` token.
    DiscardParts,
    /// [`Store::list`](idem_core::Store::list): `$2` is an array of states; of each, `$8` records
    /// and the others of the last one's millisecond.
    List,
    /// One step of [`Store::census`](idem_core::Store::census): the live records by state
    /// among the `$4` records after `($2, $3)` in primary key order.
    Census,
    /// The census board's row, locked, for [`Store::claim_census`](idem_core::Store::claim_census)
    /// and [`Store::post_census`](idem_core::Store::post_census).
    CensusBoard,
    /// The census board's row written back.
    CensusBoardWrite,
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
    pub(crate) forget_parts: Arc<str>,
    pub(crate) purge_expired: Arc<str>,
    pub(crate) append_part: Arc<str>,
    pub(crate) read_parts: Arc<str>,
    pub(crate) discard_parts: Arc<str>,
    pub(crate) list: Arc<str>,
    pub(crate) census: Arc<str>,
    pub(crate) census_board: Arc<str>,
    pub(crate) census_board_write: Arc<str>,
    pub(crate) applied_migrations: Arc<str>,
    /// The `LISTEN`/`NOTIFY` channel.
    pub(crate) channel: String,
    /// The quoted, qualified names, for the catalog checks and error messages.
    pub(crate) schema: String,
    pub(crate) table: String,
    pub(crate) migrations_table: String,
    location: Location,
}

impl Sql {
    pub(crate) fn new(schema: &SchemaName, table: &TableName) -> Self {
        let location = Location::new(schema.clone(), table.clone());
        let channel = channel(schema, table);
        let render = |template: &str| -> Arc<str> { render(&location, template, &channel).into() };
        Self {
            acquire: render(include_str!("../sql/acquire.sql")),
            complete: render(include_str!("../sql/complete.sql")),
            release: render(include_str!("../sql/release.sql")),
            renew: render(include_str!("../sql/renew.sql")),
            get: render(include_str!("../sql/get.sql")),
            forget: render(include_str!("../sql/forget.sql")),
            forget_parts: render(include_str!("../sql/forget_parts.sql")),
            purge_expired: render(include_str!("../sql/purge_expired.sql")),
            append_part: render(include_str!("../sql/append_part.sql")),
            read_parts: render(include_str!("../sql/read_parts.sql")),
            discard_parts: render(include_str!("../sql/discard_parts.sql")),
            list: render(include_str!("../sql/list.sql")),
            census: render(include_str!("../sql/census.sql")),
            census_board: render(include_str!("../sql/census_board.sql")),
            census_board_write: render(include_str!("../sql/census_board_write.sql")),
            applied_migrations: render(include_str!("../sql/applied_migrations.sql")),
            schema: location.quoted_schema(),
            table: location.qualified(),
            migrations_table: location.migrations_table(),
            channel,
            location,
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
            Statement::ForgetParts => &self.forget_parts,
            Statement::PurgeExpired => &self.purge_expired,
            Statement::AppendPart => &self.append_part,
            Statement::ReadParts => &self.read_parts,
            Statement::DiscardParts => &self.discard_parts,
            Statement::List => &self.list,
            Statement::Census => &self.census,
            Statement::CensusBoard => &self.census_board,
            Statement::CensusBoardWrite => &self.census_board_write,
        }
    }

    /// The migrations for this schema and table, tracked in `<table>_migrations` next to the
    /// table, so that several stores in one database migrate independently.
    pub(crate) fn migrator(&self) -> Migrator {
        self.location
            .migrator(MIGRATIONS, &placeholders(&self.channel), true)
    }
}

fn render(location: &Location, template: &str, channel: &str) -> String {
    location.render(template, &placeholders(channel))
}

/// The placeholders of the store's files besides the names: the clock, and the channel.
fn placeholders(channel: &str) -> [(&'static str, &str); 2] {
    [
        ("{now}", include_str!("../sql/now.sql").trim_end()),
        ("{channel}", channel),
    ]
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
            Statement::ForgetParts,
            Statement::PurgeExpired,
            Statement::List,
            Statement::Census,
            Statement::AppendPart,
            Statement::ReadParts,
            Statement::DiscardParts,
        ];
        for statement in all {
            let text = sql.text(statement);
            assert!(!text.contains('{'), "{statement:?}: {text}");
            // Those two read and write the parts alone.
            let parts_alone = [
                Statement::ForgetParts,
                Statement::ReadParts,
                Statement::DiscardParts,
            ];
            if !parts_alone.contains(&statement) {
                assert!(text.contains(r#""billing"."keys""#), "{statement:?}");
            }
        }
        assert!(
            sql.acquire
                .contains(r#"nextval('"billing"."keys_tokens"')"#)
        );
        assert!(
            sql.complete
                .contains(&format!("pg_notify('{}'", sql.channel))
        );
        assert!(
            sql.append_part
                .contains(&format!("pg_notify('{}'", sql.channel))
        );
        for statement in [
            Statement::Forget,
            Statement::ForgetParts,
            Statement::PurgeExpired,
            Statement::AppendPart,
            Statement::ReadParts,
            Statement::DiscardParts,
        ] {
            assert!(
                sql.text(statement).contains(r#""billing"."keys_parts""#),
                "{statement:?}"
            );
        }
        let migrator = sql.migrator();
        for migration in migrator.iter() {
            assert!(
                !migration.sql.as_str().contains('{'),
                "{}",
                migration.version
            );
        }
        assert_eq!(
            migrator.iter().map(|m| m.version).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
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
