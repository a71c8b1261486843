//! [`Insert`]: a row created once by its unique key, [`Inserted`] or kept as the first writer
//! left it ([`Upserted`]).

use sqlx::{Encode, FromRow, Type};

use super::{
    Error, PatternDatabase, Table,
    keyed_row::KeyedRow,
    values::{Columns, Statement, bind},
};

/// How many times an insert that conflicted runs again when the conflicting row is gone before
/// it can be read (deleted by another transaction in between): more means a table whose rows
/// are deleted as fast as they are created, which is reported rather than waited out.
const ATTEMPTS: u32 = 3;

/// What [`Insert::once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted<T> {
    /// This call created the row: the row as stored.
    Inserted(T),
    /// A row with the key was already there (or committed meanwhile by a concurrent
    /// transaction): that row, unchanged; this call wrote nothing.
    AlreadyThere(T),
}

impl<T> Inserted<T> {
    /// The stored row, whoever created it.
    pub fn into_row(self) -> T {
        match self {
            Self::Inserted(row) | Self::AlreadyThere(row) => row,
        }
    }
}

/// What [`Insert::keep_first`] did: the stored row, locked by the caller's transaction until it
/// ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upserted<T> {
    /// Whether this call created the row (its values are the stored ones); `false`: the first
    /// writer's values were kept, this call's ignored.
    pub first: bool,
    /// The row as stored.
    pub row: T,
}

/// A row of a [`Table`] to create once, by a unique key (a primary key or unique constraint on
/// exactly the [`key`](Self::key) columns). Every value is bound as a parameter.
#[must_use]
pub struct Insert<DB: PatternDatabase> {
    row: KeyedRow<DB>,
    values: Columns<DB>,
}

impl<DB: PatternDatabase> std::fmt::Debug for Insert<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Insert")
            .field("table", &self.row.table)
            .field("key", &self.row.key.names())
            .field("values", &self.values.names())
            .finish_non_exhaustive()
    }
}

impl<DB: PatternDatabase> Insert<DB> {
    /// An insert into `table`, with no columns yet.
    pub fn new(table: &Table) -> Self {
        Self {
            row: KeyedRow::new(table),
            values: Columns::default(),
        }
    }

    /// A column of the unique key and its value. An invalid column name is reported by the
    /// call that runs the insert ([`Error::Name`]).
    pub fn key<T>(mut self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Send + Sync + 'static,
    {
        self.row.key(column, bind(value));
        self
    }

    /// Another column and its value; columns not named get their defaults.
    pub fn value<T>(mut self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Send + Sync + 'static,
    {
        self.row.push(&mut self.values, column, bind(value));
        self
    }

    /// Creates the row unless one with the key exists: `INSERT … ON CONFLICT (key) DO NOTHING
    /// RETURNING *`, then, when that inserted nothing, `SELECT *` of the existing row.
    ///
    /// Of concurrent calls with one key, in any number of transactions, exactly one gets
    /// [`Inserted::Inserted`] once its transaction commits: the others wait for that
    /// transaction at the insert (on the key's unique index on PostgreSQL, the write lock on
    /// SQLite), then get [`Inserted::AlreadyThere`] with the committed row; after a rollback, one
    /// of them inserts instead. See the crate's docs for isolation levels.
    pub async fn once<T>(&self, connection: &mut DB::Connection) -> Result<Inserted<T>, Error>
    where
        T: for<'r> FromRow<'r, DB::Row>,
    {
        let (first, row) = self.insert_or_read(connection, "").await?;
        let row = T::from_row(&row)?;
        Ok(if first {
            Inserted::Inserted(row)
        } else {
            Inserted::AlreadyThere(row)
        })
    }

    /// Creates the row unless one with the key exists, keeping the first writer's values, and
    /// locks it until the transaction ends: as [`once`](Self::once), and the existing row is
    /// read with `FOR UPDATE` on PostgreSQL (on SQLite the transaction holds the database's
    /// write lock from the insert on). What the transaction then does with the row (a balance
    /// moved, a status set) no other transaction can interleave.
    pub async fn keep_first<T>(&self, connection: &mut DB::Connection) -> Result<Upserted<T>, Error>
    where
        T: for<'r> FromRow<'r, DB::Row>,
    {
        let (first, row) = self.insert_or_read(connection, DB::LOCK_ROW).await?;
        Ok(Upserted {
            first,
            row: T::from_row(&row)?,
        })
    }

    /// Whether this call inserted, and the stored row.
    async fn insert_or_read(
        &self,
        connection: &mut DB::Connection,
        lock: &str,
    ) -> Result<(bool, DB::Row), Error> {
        self.row.check()?;
        for _ in 0..ATTEMPTS {
            let insert = self.insert()?;
            if let Some(row) = DB::fetch_optional(connection, insert.text, insert.arguments).await?
            {
                return Ok((true, row));
            }
            // In READ COMMITTED each statement sees what has committed when it starts: the row
            // the insert conflicted with (whose transaction it waited for) is visible now.
            let select = self.select(lock)?;
            if let Some(row) = DB::fetch_optional(connection, select.text, select.arguments).await?
            {
                return Ok((false, row));
            }
        }
        Err(Error::Vanished { attempts: ATTEMPTS })
    }

    /// `SELECT * FROM t WHERE "k" = $1`, then `lock`.
    fn select(&self, lock: &str) -> Result<Statement<DB>, Error> {
        let mut select = Statement::<DB>::new("SELECT * FROM ");
        select.push(&self.row.table.to_string());
        select.push(" WHERE ");
        select.matching(&self.row.key)?;
        select.push(lock);
        Ok(select)
    }

    /// `INSERT INTO t ("k", "v") VALUES ($1, $2) ON CONFLICT ("k") DO NOTHING RETURNING *`.
    fn insert(&self) -> Result<Statement<DB>, Error> {
        let key = &self.row.key;
        let columns = || key.iter().chain(self.values.iter());
        let mut insert = Statement::<DB>::new("INSERT INTO ");
        insert.push(&self.row.table.to_string());
        insert.push(" (");
        insert.names(columns().map(|(c, _)| c));
        insert.push(") VALUES (");
        for (n, (column, value)) in columns().enumerate() {
            if n > 0 {
                insert.push(", ");
            }
            insert.value(column, value)?;
        }
        insert.push(") ON CONFLICT (");
        insert.names(key.iter().map(|(c, _)| c));
        insert.push(") DO NOTHING RETURNING *");
        Ok(insert)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Arguments, Sqlite};

    use super::*;

    #[test]
    fn the_insert_names_quoted_columns_and_binds_every_value() {
        let insert = Insert::<Sqlite>::new(&"ledger".parse().unwrap())
            .key("account", "alice")
            .key("entry", 42_i64)
            .value("amount", -250_i64);
        let statement = insert.insert().unwrap();
        assert_eq!(
            statement.text,
            r#"INSERT INTO "ledger" ("account", "entry", "amount") VALUES ($1, $2, $3) ON CONFLICT ("account", "entry") DO NOTHING RETURNING *"#
        );
        assert_eq!(statement.arguments.len(), 3);
        let select = insert.select(" FOR UPDATE").unwrap();
        assert_eq!(
            select.text,
            r#"SELECT * FROM "ledger" WHERE "account" = $1 AND "entry" = $2 FOR UPDATE"#
        );
        assert_eq!(select.arguments.len(), 2);
    }

    #[test]
    fn into_row_is_the_stored_row_either_way() {
        assert_eq!(Inserted::Inserted(1).into_row(), 1);
        assert_eq!(Inserted::AlreadyThere(2).into_row(), 2);
    }
}
