//! [`Table`]: the user's table a pattern writes, by validated name.

use std::{fmt, str::FromStr};

use crate::{InvalidName, SchemaName, TableName};

/// A table of the application's own, optionally in a schema (on SQLite, an attached database;
/// on MySQL, a database). Its names are validated identifiers ([`TableName`], [`SchemaName`]:
/// lower-case ASCII letters, digits and `_`, a table name up to 52 bytes), always quoted in SQL,
/// as the database quotes them: no name can inject SQL.
///
/// # Examples
///
/// ```
/// use idem_sql::patterns::Table;
///
/// let accounts: Table = "accounts".parse()?;
/// assert_eq!(accounts.to_string(), "accounts");
/// let charges: Table = "billing.charges".parse()?;
/// assert_eq!(charges.to_string(), "billing.charges");
/// assert!("charges; DROP TABLE accounts".parse::<Table>().is_err());
/// # Ok::<(), idem_sql::InvalidName>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Table {
    schema: Option<SchemaName>,
    name: TableName,
}

impl Table {
    /// The table `name`, found through the connection's `search_path` (on SQLite, in `main`
    /// or the first attached database that has it).
    pub const fn new(name: TableName) -> Self {
        Self { schema: None, name }
    }

    /// The table `name` in `schema`.
    pub const fn in_schema(schema: SchemaName, name: TableName) -> Self {
        Self {
            schema: Some(schema),
            name,
        }
    }

    /// The schema, if named, and the table's name.
    pub(crate) fn names(&self) -> (Option<&SchemaName>, &TableName) {
        (self.schema.as_ref(), &self.name)
    }
}

/// `table` or `schema.table`.
impl FromStr for Table {
    type Err = InvalidName;

    fn from_str(name: &str) -> Result<Self, InvalidName> {
        Ok(match name.split_once('.') {
            Some((schema, table)) => Self::in_schema(schema.parse()?, table.parse()?),
            None => Self::new(name.parse()?),
        })
    }
}

/// `table` or `schema.table`, as parsed; statements quote each name as their database does.
impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(schema) = &self.schema {
            write!(f, "{schema}.")?;
        }
        write!(f, "{}", self.name)
    }
}
