//! [`Columns`]: named values, bound as parameters, and the statements built from them.

use sqlx::{Arguments, Database, Encode, Type, error::BoxDynError};

use super::{Error, PatternDatabase, Table};
use crate::ColumnName;

/// Adds one value to a statement's arguments; kept so that a value can be bound to several
/// statements (the insert, then the read of the existing row).
pub(crate) type Bind<DB> =
    Box<dyn Fn(&mut <DB as Database>::Arguments) -> Result<(), BoxDynError> + Send + Sync>;

/// A value that can be bound to `DB`'s statements.
pub(crate) fn bind<DB, T>(value: T) -> Bind<DB>
where
    DB: Database,
    T: for<'q> Encode<'q, DB> + Type<DB> + Send + Sync + 'static,
{
    Box::new(move |arguments| arguments.add(&value))
}

/// Columns and their values, in the order given.
pub(crate) struct Columns<DB: Database> {
    columns: Vec<(ColumnName, Bind<DB>)>,
}

impl<DB: Database> Default for Columns<DB> {
    fn default() -> Self {
        Self {
            columns: Vec::new(),
        }
    }
}

impl<DB: Database> Columns<DB> {
    pub(crate) fn push(&mut self, column: ColumnName, value: Bind<DB>) {
        self.columns.push((column, value));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// The columns' names, for `Debug`.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|(c, _)| c.as_str()).collect()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(ColumnName, Bind<DB>)> {
        self.columns.iter()
    }
}

/// A statement's text in `DB`'s dialect, and its arguments, in the order they are bound.
pub(crate) struct Statement<DB: PatternDatabase> {
    pub(crate) text: String,
    pub(crate) arguments: DB::Arguments,
}

impl<DB: PatternDatabase> Statement<DB> {
    pub(crate) fn new(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            arguments: DB::Arguments::default(),
        }
    }

    pub(crate) fn push(&mut self, text: &str) {
        self.text.push_str(text);
    }

    /// `"name"`, for a valid identifier.
    pub(crate) fn name(&mut self, name: &str) {
        DB::DIALECT.quote(&mut self.text, name);
    }

    /// `"column"`.
    pub(crate) fn column(&mut self, column: &ColumnName) {
        self.name(column.as_str());
    }

    /// `"table"` or `"schema"."table"`.
    pub(crate) fn table(&mut self, table: &Table) {
        let (schema, name) = table.names();
        if let Some(schema) = schema {
            self.name(schema.as_str());
            self.push(".");
        }
        self.name(name.as_str());
    }

    /// Binds `value` and writes its placeholder.
    pub(crate) fn value(&mut self, column: &ColumnName, value: &Bind<DB>) -> Result<(), Error> {
        value(&mut self.arguments).map_err(|source| Error::Encode {
            column: column.clone(),
            source,
        })?;
        DB::DIALECT.placeholder(&mut self.text, self.arguments.len());
        Ok(())
    }

    /// `"a" = $1 AND "b" = $2`.
    pub(crate) fn matching(&mut self, columns: &Columns<DB>) -> Result<(), Error> {
        for (n, (column, value)) in columns.iter().enumerate() {
            if n > 0 {
                self.push(" AND ");
            }
            self.column(column);
            self.push(" = ");
            self.value(column, value)?;
        }
        Ok(())
    }

    /// `"a", "b"`.
    pub(crate) fn names<'a>(&mut self, columns: impl Iterator<Item = &'a ColumnName>) {
        for (n, column) in columns.enumerate() {
            if n > 0 {
                self.push(", ");
            }
            self.column(column);
        }
    }
}
