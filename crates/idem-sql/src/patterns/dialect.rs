//! [`Dialect`]: where the SQL of the patterns' statements differs between databases.

use std::fmt::Write;

/// The SQL a database speaks, where the patterns' statements differ.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL and SQLite: identifiers in double quotes, arguments `$1`, `$2`, …, an insert
    /// that skips a taken key with `ON CONFLICT (key) DO NOTHING`, and writes that return the
    /// rows they wrote (`RETURNING *`).
    Standard,
    /// MySQL and MariaDB: identifiers in backticks, arguments `?`, an insert that meets a taken
    /// key with `ON DUPLICATE KEY UPDATE` (on any unique key of the table), and no `RETURNING`
    /// on MySQL: a write tells what it did by its result, and the row is read after it.
    Mysql,
}

impl Dialect {
    /// Writes the identifier `name`, quoted. Validated names hold no quote of either kind.
    pub(crate) fn quote(self, text: &mut String, name: &str) {
        let quote = match self {
            Self::Standard => '"',
            Self::Mysql => '`',
        };
        let _ = write!(text, "{quote}{name}{quote}");
    }

    /// Writes the placeholder of the `n`th argument, counted from 1.
    pub(crate) fn placeholder(self, text: &mut String, n: usize) {
        match self {
            Self::Standard => {
                let _ = write!(text, "${n}");
            }
            Self::Mysql => text.push('?'),
        }
    }
}
