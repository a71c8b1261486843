//! The store's SQL, rendered once for its table, and the text of its batched writes.
//!
//! The files under `sql/` and `migrations/` hold two placeholders: `{table}` (always inside
//! backticks in the files), filled with the validated table name only, and `{now}`, the server's
//! clock (`sql/now.sql`). The batched writes ([`Batch`]) are built per batch: several statements
//! in one round trip (MySQL's multi-statement text protocol), their values written as literals
//! that cannot carry SQL: byte strings in hex (`X'…'`), numbers in decimal.

use std::{borrow::Cow, fmt::Write as _, sync::Arc};

use idem_sql::TableName;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// The migrations, in order: version, description, template.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "idem records",
        include_str!("../migrations/0001_idem_records.sql"),
    ),
    (
        2,
        "idem parts",
        include_str!("../migrations/0002_idem_parts.sql"),
    ),
    (
        3,
        "idem records by arrival",
        include_str!("../migrations/0003_idem_records_by_arrival.sql"),
    ),
];

/// The server's clock in milliseconds since the epoch.
pub(crate) const SERVER_NOW: &str = include_str!("../sql/now.sql");

/// A statement the store runs, to read its SQL with [`MysqlStore::sql`](crate::MysqlStore::sql).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Statement {
    /// [`Store::get`](idem_core::Store::get).
    Get,
    /// One state's page of [`Store::list`](idem_core::Store::list).
    List,
    /// One step of [`Store::census`](idem_core::Store::census).
    Census,
    /// The expired records that one batch of
    /// [`Store::purge_expired`](idem_core::Store::purge_expired) deletes, locked.
    PurgeExpired,
    /// The census board's row, locked, for [`Store::claim_census`](idem_core::Store::claim_census)
    /// and [`Store::post_census`](idem_core::Store::post_census).
    CensusBoard,
    /// The census board's row written back.
    CensusBoardWrite,
    /// [`Store::read_parts`](idem_core::Store::read_parts).
    ReadParts,
    /// [`Store::discard_parts`](idem_core::Store::discard_parts).
    DiscardParts,
    /// The expired parts that one batch of
    /// [`Store::purge_expired`](idem_core::Store::purge_expired) deletes, locked.
    PurgeExpiredParts,
}

/// Every statement of one store, rendered. Cloning a statement's text is cheap (an `Arc`).
#[derive(Debug)]
pub(crate) struct Sql {
    get: Arc<str>,
    list: Arc<str>,
    census: Arc<str>,
    purge_expired: Arc<str>,
    census_board: Arc<str>,
    census_board_write: Arc<str>,
    read_parts: Arc<str>,
    discard_parts: Arc<str>,
    purge_expired_parts: Arc<str>,
    pub(crate) applied_migrations: Arc<str>,
    /// The table's name, unquoted.
    pub(crate) name: TableName,
    /// The table's name, quoted: for the batches' statements and error messages.
    pub(crate) table: String,
    /// The parts table's name, quoted: `<table>_parts`.
    pub(crate) parts: String,
}

impl Sql {
    pub(crate) fn new(table: &TableName) -> Self {
        let render = |template: &str| -> Arc<str> { render(table, template).into() };
        Self {
            get: render(include_str!("../sql/get.sql")),
            list: render(include_str!("../sql/list.sql")),
            census: render(include_str!("../sql/census.sql")),
            purge_expired: render(include_str!("../sql/purge_expired.sql")),
            census_board: render(include_str!("../sql/census_board.sql")),
            census_board_write: render(include_str!("../sql/census_board_write.sql")),
            read_parts: render(include_str!("../sql/read_parts.sql")),
            discard_parts: render(include_str!("../sql/discard_parts.sql")),
            purge_expired_parts: render(include_str!("../sql/purge_expired_parts.sql")),
            applied_migrations: render(include_str!("../sql/applied_migrations.sql")),
            name: table.clone(),
            table: format!("`{table}`"),
            parts: format!("`{table}_parts`"),
        }
    }

    pub(crate) fn text(&self, statement: Statement) -> &Arc<str> {
        match statement {
            Statement::Get => &self.get,
            Statement::List => &self.list,
            Statement::Census => &self.census,
            Statement::PurgeExpired => &self.purge_expired,
            Statement::CensusBoard => &self.census_board,
            Statement::CensusBoardWrite => &self.census_board_write,
            Statement::ReadParts => &self.read_parts,
            Statement::DiscardParts => &self.discard_parts,
            Statement::PurgeExpiredParts => &self.purge_expired_parts,
        }
    }

    /// The table that tracks the migrations, unquoted: `<table>_migrations`.
    pub(crate) fn migrations_table(&self) -> String {
        format!("{}_migrations", self.name)
    }

    /// The migrations for this table, tracked in `<table>_migrations` next to it, so that several
    /// stores in one database migrate independently.
    pub(crate) fn migrator(&self) -> Migrator {
        let migrations = MIGRATIONS
            .iter()
            .map(|&(version, description, template)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    sqlx::SqlSafeStr::into_sql_str(sqlx::AssertSqlSafe(render(
                        &self.name, template,
                    ))),
                    false,
                )
            })
            .collect();
        let mut migrator = Migrator::with_migrations(migrations);
        migrator.dangerous_set_table_name(format!("`{}`", self.migrations_table()));
        migrator
    }
}

/// `template` with the table's name and the clock filled in.
fn render(table: &TableName, template: &str) -> String {
    template
        .replace("{table}", table.as_str())
        .replace("{now}", SERVER_NOW.trim_end())
}

/// How the statements of one round trip travel to the server.
///
/// The server answers each statement of a multi-statement text on its own, one write to the
/// socket each: a batch of acquisitions, eight statements, was eight packets for the store to
/// wake up to. A compound statement is answered once, plus once per result set it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchForm {
    /// One compound statement, `BEGIN NOT ATOMIC … END`: MariaDB (10.1.1 and later).
    Compound,
    /// Statements separated by `;` (MySQL, which runs compound statements only in stored
    /// programs).
    Statements,
}

impl BatchForm {
    /// The form for a server whose `VERSION()` is `version`.
    pub(crate) fn of_server(version: &str) -> Self {
        if version.contains("MariaDB") {
            Self::Compound
        } else {
            Self::Statements
        }
    }
}

/// The text of one round trip: statements ending in `;`, with literal values, sent as `form`.
#[derive(Debug)]
pub(crate) struct Batch {
    text: String,
    form: BatchForm,
}

impl Batch {
    pub(crate) fn new(form: BatchForm) -> Self {
        let mut text = String::new();
        if form == BatchForm::Compound {
            text.push_str("BEGIN NOT ATOMIC\n");
        }
        Self { text, form }
    }

    /// Makes room for `additional` more bytes of text.
    pub(crate) fn reserve(&mut self, additional: usize) -> &mut Self {
        self.text.reserve(additional);
        self
    }

    /// Appends `sql` and the `;` that ends it.
    pub(crate) fn statement(&mut self, sql: &str) -> &mut Self {
        self.text.push_str(sql);
        self.text.push_str(";\n");
        self
    }

    /// Appends `sql` without ending the statement.
    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.text.push_str(sql);
        self
    }

    /// Appends `bytes` as a hex literal, two digits a byte from a table: the formatter's `{:02x}`
    /// cost a hundred-odd instructions a byte, more than half of the gateway's per new key.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        self.text.reserve(bytes.len() * 2 + 3);
        self.text.push_str("X'");
        for &byte in bytes {
            self.text.push(char::from(DIGITS[usize::from(byte >> 4)]));
            self.text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
        }
        self.text.push('\'');
        self
    }

    /// Appends `number` in decimal.
    pub(crate) fn number(&mut self, number: i64) -> &mut Self {
        write!(self.text, "{number}").expect("writing to a String cannot fail");
        self
    }

    /// `SET @idem_now = …`: the time every statement of the batch decides at, the test clock's
    /// when there is one, else the server's.
    pub(crate) fn now(&mut self, test_clock: Option<i64>) -> &mut Self {
        self.push("SET @idem_now = ");
        match test_clock {
            Some(now) => self.number(now),
            None => self.push(SERVER_NOW.trim_end()),
        };
        self.statement("")
    }

    pub(crate) fn finish(mut self) -> String {
        if self.form == BatchForm::Compound {
            self.text.push_str("END");
        }
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let sql = Sql::new(&"keys".parse().unwrap());
        for statement in [
            Statement::Get,
            Statement::List,
            Statement::Census,
            Statement::PurgeExpired,
            Statement::CensusBoard,
            Statement::CensusBoardWrite,
            Statement::ReadParts,
            Statement::DiscardParts,
            Statement::PurgeExpiredParts,
        ] {
            let text = sql.text(statement);
            assert!(!text.contains('{'), "{statement:?}: {text}");
            assert!(text.contains("`keys"), "{statement:?}");
        }
        assert_eq!(sql.parts, "`keys_parts`");
        let migrator = sql.migrator();
        let versions: Vec<i64> = migrator.iter().map(|migration| migration.version).collect();
        assert_eq!(versions, [1, 2, 3]);
        for migration in migrator.iter() {
            assert!(
                !migration.sql.as_str().contains('{'),
                "{}",
                migration.version
            );
        }
        let created = |version: usize, table: &str| {
            let migration = migrator.iter().nth(version - 1).unwrap();
            assert!(
                migration
                    .sql
                    .as_str()
                    .contains(&format!("CREATE TABLE `{table}`")),
                "migration {version} creates {table}"
            );
        };
        created(1, "keys");
        created(1, "keys_tokens");
        created(1, "keys_census");
        created(2, "keys_parts");
        let rebuilt = migrator.iter().nth(2).unwrap().sql.as_str();
        assert!(rebuilt.starts_with("-- ") && rebuilt.contains("ALTER TABLE `keys`\n"));
        assert!(
            rebuilt.contains("DROP KEY `keys_state_created`"),
            "{rebuilt}"
        );
        assert_eq!(migrator.table_name, "`keys_migrations`");
    }

    #[test]
    fn literals_cannot_carry_sql() {
        let mut batch = Batch::new(BatchForm::Statements);
        batch
            .push("SELECT ")
            .bytes(b"';DROP TABLE x;--\x00\xff")
            .push(", ")
            .number(-42)
            .statement("");
        assert_eq!(
            batch.finish(),
            "SELECT X'273b44524f50205441424c4520783b2d2d00ff', -42;\n"
        );
        let mut batch = Batch::new(BatchForm::Statements);
        batch.now(Some(1_700_000_000_000)).now(None);
        assert_eq!(
            batch.finish(),
            format!(
                "SET @idem_now = 1700000000000;\nSET @idem_now = {};\n",
                SERVER_NOW.trim_end()
            )
        );
        let mut batch = Batch::new(BatchForm::Compound);
        batch.statement("START TRANSACTION").statement("COMMIT");
        assert_eq!(
            batch.finish(),
            "BEGIN NOT ATOMIC\nSTART TRANSACTION;\nCOMMIT;\nEND"
        );
        assert_eq!(
            BatchForm::of_server("10.11.19-MariaDB-0+deb12u1"),
            BatchForm::Compound
        );
        assert_eq!(BatchForm::of_server("8.0.36"), BatchForm::Statements);
    }
}
