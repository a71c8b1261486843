//! [`Insert`]: a row created once by its unique key, [`Inserted`] or kept as the first writer
//! left it ([`Upserted`]).

use sqlx::{Encode, FromRow, Type};

use super::{
    Dialect, Error, PatternDatabase, Table,
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
    /// RETURNING *`, then, when that inserted nothing, `SELECT *` of the existing row. On MySQL,
    /// `INSERT … ON DUPLICATE KEY UPDATE`, then `SELECT * … FOR UPDATE` of the row either way:
    /// the row is locked until the transaction ends, as with [`keep_first`](Self::keep_first).
    ///
    /// Of concurrent calls with one key, in any number of transactions, exactly one gets
    /// [`Inserted::Inserted`] once its transaction commits: the others wait for that
    /// transaction at the insert (on the key's unique index on PostgreSQL and MySQL, the write
    /// lock on SQLite), then get [`Inserted::AlreadyThere`] with the committed row; after a
    /// rollback, one of them inserts instead. See the crate's docs for isolation levels.
    pub async fn once<T>(&self, connection: &mut DB::Connection) -> Result<Inserted<T>, Error>
    where
        T: for<'r> FromRow<'r, DB::Row>,
    {
        let (first, row) = self.insert_or_read(connection, DB::READ_LATEST).await?;
        let row = T::from_row(&row)?;
        Ok(if first {
            Inserted::Inserted(row)
        } else {
            Inserted::AlreadyThere(row)
        })
    }

    /// Creates the row unless one with the key exists, keeping the first writer's values, and
    /// locks it until the transaction ends: as [`once`](Self::once), and the existing row is
    /// read with `FOR UPDATE` on PostgreSQL and MySQL (on SQLite the transaction holds the
    /// database's write lock from the insert on). What the transaction then does with the row
    /// (a balance moved, a status set) no other transaction can interleave.
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

    /// Whether this call inserted, and the stored row, read with `read` after the insert when
    /// the insert does not return it.
    async fn insert_or_read(
        &self,
        connection: &mut DB::Connection,
        read: &str,
    ) -> Result<(bool, DB::Row), Error> {
        self.row.check()?;
        for _ in 0..ATTEMPTS {
            let insert = self.insert()?;
            let (inserted, row) = DB::insert(connection, insert.text, insert.arguments).await?;
            if let Some(row) = row {
                return Ok((inserted, row));
            }
            // In READ COMMITTED each statement sees what has committed when it starts: the row
            // the insert conflicted with (whose transaction it waited for) is visible now. On
            // MySQL, whose locking read sees it in any isolation level, the insert locked it.
            let select = self.select(read)?;
            if let Some(row) = DB::fetch_optional(connection, select.text, select.arguments).await?
            {
                return Ok((inserted, row));
            }
            if DB::DIALECT == Dialect::Mysql {
                // No other transaction could delete the row with the key under the insert's
                // lock: the insert met none.
                return Err(Error::NoRow);
            }
        }
        Err(Error::Vanished { attempts: ATTEMPTS })
    }

    /// `SELECT * FROM t WHERE "k" = $1`, then `read`.
    fn select(&self, read: &str) -> Result<Statement<DB>, Error> {
        let mut select = Statement::<DB>::new("SELECT * FROM ");
        select.table(&self.row.table);
        select.push(" WHERE ");
        select.matching(&self.row.key)?;
        select.push(read);
        Ok(select)
    }

    /// `INSERT INTO t ("k", "v") VALUES ($1, $2) ON CONFLICT ("k") DO NOTHING RETURNING *`.
    ///
    /// On MySQL, ``INSERT INTO t (`k`, `v`) VALUES (IF(LAST_INSERT_ID(1), ?, NULL), ?) ON
    /// DUPLICATE KEY UPDATE `k` = IF(LAST_INSERT_ID(0), `k`, `k`)``: a row met on the key (or on
    /// any other unique key of the table) is locked and left as it was. The values are computed
    /// before the key is found taken, the update only after, and the statement reports the last
    /// `LAST_INSERT_ID(n)` it ran: 0 for a row met; 1 for a row inserted, unless the insert
    /// generated an `AUTO_INCREMENT` id, which it reports instead, and which is never 0.
    fn insert(&self) -> Result<Statement<DB>, Error> {
        let key = &self.row.key;
        let columns = || key.iter().chain(self.values.iter());
        let mut insert = Statement::<DB>::new("INSERT INTO ");
        insert.table(&self.row.table);
        insert.push(" (");
        insert.names(columns().map(|(c, _)| c));
        insert.push(") VALUES (");
        for (n, (column, value)) in columns().enumerate() {
            if n > 0 {
                insert.push(", ");
            }
            if n == 0 && DB::DIALECT == Dialect::Mysql {
                insert.push("IF(LAST_INSERT_ID(1), ");
                insert.value(column, value)?;
                insert.push(", NULL)");
            } else {
                insert.value(column, value)?;
            }
        }
        match DB::DIALECT {
            Dialect::Standard => {
                insert.push(") ON CONFLICT (");
                insert.names(key.iter().map(|(c, _)| c));
                insert.push(") DO NOTHING RETURNING *");
            }
            Dialect::Mysql => {
                let (first, _) = key.iter().next().ok_or(Error::NoKey)?;
                insert.push(") ON DUPLICATE KEY UPDATE ");
                insert.column(first);
                insert.push(" = IF(LAST_INSERT_ID(0), ");
                insert.column(first);
                insert.push(", ");
                insert.column(first);
                insert.push(")");
            }
        }
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

    #[cfg(feature = "mysql")]
    #[test]
    fn on_mysql_the_insert_quotes_with_backticks_and_reports_a_met_row_as_0() {
        let insert = Insert::<sqlx::MySql>::new(&"books.ledger".parse().unwrap())
            .key("account", "alice")
            .key("entry", 42_i64)
            .value("amount", -250_i64);
        let statement = insert.insert().unwrap();
        assert_eq!(
            statement.text,
            "INSERT INTO `books`.`ledger` (`account`, `entry`, `amount`) \
             VALUES (IF(LAST_INSERT_ID(1), ?, NULL), ?, ?) \
             ON DUPLICATE KEY UPDATE `account` = IF(LAST_INSERT_ID(0), `account`, `account`)"
        );
        assert_eq!(statement.arguments.len(), 3);
        let select = insert.select(sqlx::MySql::READ_LATEST).unwrap();
        assert_eq!(
            select.text,
            "SELECT * FROM `books`.`ledger` WHERE `account` = ? AND `entry` = ? FOR UPDATE"
        );
        assert_eq!(select.arguments.len(), 2);
    }

    #[test]
    fn into_row_is_the_stored_row_either_way() {
        assert_eq!(Inserted::Inserted(1).into_row(), 1);
        assert_eq!(Inserted::AlreadyThere(2).into_row(), 2);
    }
}
