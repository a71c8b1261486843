//! [`KeyedRow`]: the row a pattern works on, named by its table and key.

use sqlx::Database;

use super::{
    Error, Table,
    values::{Bind, Columns},
};
use crate::{ColumnName, InvalidName};

/// The row a pattern works on: its table, the columns of its key, and the first invalid column
/// name the pattern was given, which the call that runs the pattern reports.
pub(crate) struct KeyedRow<DB: Database> {
    pub(crate) table: Table,
    pub(crate) key: Columns<DB>,
    pub(crate) invalid: Option<InvalidName>,
}

impl<DB: Database> KeyedRow<DB> {
    pub(crate) fn new(table: &Table) -> Self {
        Self {
            table: table.clone(),
            key: Columns::default(),
            invalid: None,
        }
    }

    /// Adds a column of the key and its value.
    pub(crate) fn key(&mut self, column: &str, value: Bind<DB>) {
        if let Some(column) = self.column(column) {
            self.key.push(column, value);
        }
    }

    /// Adds a column and its value to `columns`, the pattern's columns besides the key.
    pub(crate) fn push(&mut self, columns: &mut Columns<DB>, column: &str, value: Bind<DB>) {
        if let Some(column) = self.column(column) {
            columns.push(column, value);
        }
    }

    /// The column `name` names; `None` when the name is invalid, which is kept for the call that
    /// runs the pattern unless an earlier name was invalid too.
    pub(crate) fn column(&mut self, name: &str) -> Option<ColumnName> {
        match name.parse() {
            Ok(column) => Some(column),
            Err(invalid) => {
                self.invalid.get_or_insert(invalid);
                None
            }
        }
    }

    /// Whether the pattern can run: [`Error::Name`] with the first invalid name it was given,
    /// [`Error::NoKey`] without a key column.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if let Some(invalid) = &self.invalid {
            return Err(Error::Name(invalid.clone()));
        }
        if self.key.is_empty() {
            return Err(Error::NoKey);
        }
        Ok(())
    }
}
