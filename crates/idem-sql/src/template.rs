//! [`Location`]: where a table lives, and its SQL files rendered for it.
//!
//! The files under a crate's `sql/` and `migrations/` hold placeholders: `{schema}` and `{table}`,
//! always inside double quotes in the files, and whatever else the crate adds (a `NOTIFY`
//! channel, a clock expression). Only validated names, and values the crate builds itself, are
//! ever put in their place.

use std::sync::Arc;

use sqlx::AssertSqlSafe;

use crate::{SchemaName, TableName};

/// A schema and a table in it.
///
/// # Examples
///
/// ```
/// use idem_sql::Location;
///
/// let location = Location::new("billing".parse()?, "events".parse()?);
/// let sql = location.render(
///     r#"SELECT pg_notify('{channel}', '') FROM "{schema}"."{table}""#,
///     &[("{channel}", "events_channel")],
/// );
/// assert_eq!(sql, r#"SELECT pg_notify('events_channel', '') FROM "billing"."events""#);
/// assert_eq!(location.qualified(), r#""billing"."events""#);
/// # Ok::<(), idem_sql::InvalidName>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    /// The schema (on SQLite, the attached database).
    pub schema: SchemaName,
    /// The table.
    pub table: TableName,
}

impl Location {
    /// `table` in `schema`.
    pub fn new(schema: SchemaName, table: TableName) -> Self {
        Self { schema, table }
    }

    /// `template` with each `(placeholder, value)` of `placeholders` filled in first, then
    /// `{schema}` and `{table}`.
    pub fn render(&self, template: &str, placeholders: &[(&str, &str)]) -> String {
        let mut text = template.to_owned();
        for (placeholder, value) in placeholders {
            text = text.replace(placeholder, value);
        }
        text.replace("{schema}", self.schema.as_str())
            .replace("{table}", self.table.as_str())
    }

    /// `"schema"`.
    pub fn quoted_schema(&self) -> String {
        format!(r#""{}""#, self.schema)
    }

    /// `"schema"."table"`, for statements built in code, logs and messages.
    pub fn qualified(&self) -> String {
        format!(r#""{}"."{}""#, self.schema, self.table)
    }

    /// `"schema"."table_migrations"`: where the table's applied migrations are recorded.
    pub fn migrations_table(&self) -> String {
        format!(r#""{}"."{}_migrations""#, self.schema, self.table)
    }
}

/// A rendered statement's text as sqlx takes it. Cloning it is cheap (an `Arc`).
pub fn query_text(text: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_before_the_names() {
        let here = Location::new("billing".parse().unwrap(), "keys".parse().unwrap());
        let text = here.render(
            r#"SELECT {now} FROM "{schema}"."{table}" WHERE c = '{channel}'"#,
            &[
                ("{now}", r#"(SELECT 1 FROM "{schema}"."{table}_clock")"#),
                ("{channel}", "c1"),
            ],
        );
        assert_eq!(
            text,
            r#"SELECT (SELECT 1 FROM "billing"."keys_clock") FROM "billing"."keys" WHERE c = 'c1'"#
        );
        assert_eq!(here.quoted_schema(), r#""billing""#);
        assert_eq!(here.migrations_table(), r#""billing"."keys_migrations""#);
    }
}
