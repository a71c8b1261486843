//! [`Transition`]: a row moved from one state to the next once, [`Transitioned`].

use sqlx::{Encode, FromRow, Type};

use super::{
    Dialect, Error, PatternDatabase, Table,
    keyed_row::KeyedRow,
    values::{Bind, Columns, Statement, bind},
};
use crate::ColumnName;

/// The column the read after a transition that changed nothing adds to the row: whether the row
/// is in the target state.
const APPLIED: &str = "idem_already_applied";

/// What [`Transition::run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transitioned<T> {
    /// This call moved the row from the expected state to the target state: the row as updated.
    Applied(T),
    /// The row was already in the target state (moved by an earlier or a concurrent, committed
    /// transaction): the row, unchanged; this call wrote nothing.
    AlreadyApplied(T),
    /// The row is in neither state: the row, unchanged; this call wrote nothing.
    Conflict {
        /// The row as stored, with its current state.
        current: T,
    },
    /// No row has the key.
    NotFound,
}

/// The state column, the state expected and the target.
struct States<DB: sqlx::Database> {
    column: ColumnName,
    from: Bind<DB>,
    to: Bind<DB>,
}

/// A conditional state transition of one row of a [`Table`]: `UPDATE … SET state = to WHERE
/// key = … AND state = from`, telling a transition applied now from one applied before and from a
/// row in another state. Every value is bound as a parameter.
#[must_use]
pub struct Transition<DB: PatternDatabase> {
    row: KeyedRow<DB>,
    states: Option<States<DB>>,
    set: Columns<DB>,
}

impl<DB: PatternDatabase> std::fmt::Debug for Transition<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transition")
            .field("table", &self.row.table)
            .field("key", &self.row.key.names())
            .field("state", &self.states.as_ref().map(|s| &s.column))
            .field("set", &self.set.names())
            .finish_non_exhaustive()
    }
}

impl<DB: PatternDatabase> Transition<DB> {
    /// A transition of a row of `table`, with no key nor states yet.
    pub fn new(table: &Table) -> Self {
        Self {
            row: KeyedRow::new(table),
            states: None,
            set: Columns::default(),
        }
    }

    /// A column of the row's key and its value. An invalid column name is reported by
    /// [`run`](Self::run) ([`Error::Name`]).
    pub fn key<T>(mut self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Send + Sync + 'static,
    {
        self.row.key(column, bind(value));
        self
    }

    /// The state `column`: the row moves from `from` to `to`.
    pub fn state<T>(mut self, column: &str, from: T, to: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Send + Sync + 'static,
    {
        if let Some(column) = self.row.column(column) {
            self.states = Some(States {
                column,
                from: bind(from),
                to: bind(to),
            });
        }
        self
    }

    /// Another column set by the transition, only when it applies (a timestamp, a reason).
    pub fn set<T>(mut self, column: &str, value: T) -> Self
    where
        T: for<'q> Encode<'q, DB> + Type<DB> + Send + Sync + 'static,
    {
        self.row.push(&mut self.set, column, bind(value));
        self
    }

    /// Runs the transition: `UPDATE … RETURNING *`; when it changed no row, `SELECT *` of the
    /// row to tell why. On MySQL, `UPDATE …` (the rows it matched tell whether it applied), then
    /// `SELECT * … FOR UPDATE` of the row either way.
    ///
    /// Of concurrent calls on one row in the expected state, exactly one gets
    /// [`Transitioned::Applied`] once its transaction commits: the others wait for that
    /// transaction at the update (its row lock on PostgreSQL and MySQL, the write lock on
    /// SQLite), find the row no longer in the expected state, and get
    /// [`Transitioned::AlreadyApplied`]; after a rollback, one of them applies it instead. Only
    /// the state decides between `AlreadyApplied` and `Conflict`: the [`set`](Self::set) columns
    /// are not compared.
    pub async fn run<T>(&self, connection: &mut DB::Connection) -> Result<Transitioned<T>, Error>
    where
        T: for<'r> FromRow<'r, DB::Row>,
    {
        self.row.check()?;
        let states = self.states.as_ref().ok_or(Error::NoState)?;

        let update = self.update(states)?;
        let (applied, row) = DB::update(connection, update.text, update.arguments).await?;
        if let Some(row) = row {
            return Ok(Transitioned::Applied(T::from_row(&row)?));
        }
        let select = self.select(states)?;
        let Some(row) = DB::fetch_optional(connection, select.text, select.arguments).await? else {
            // Only on MySQL can an update that applied leave no row to read by the key: it set
            // a column of the key.
            return if applied {
                Err(Error::NoRow)
            } else {
                Ok(Transitioned::NotFound)
            };
        };
        let already_applied = DB::flag(&row, APPLIED)?;
        let row = T::from_row(&row)?;
        Ok(if applied {
            Transitioned::Applied(row)
        } else if already_applied {
            Transitioned::AlreadyApplied(row)
        } else {
            Transitioned::Conflict { current: row }
        })
    }

    /// `UPDATE t SET "state" = $1, "c" = $2 WHERE "k" = $3 AND "state" = $4 RETURNING *`
    /// (without `RETURNING` on MySQL).
    fn update(&self, states: &States<DB>) -> Result<Statement<DB>, Error> {
        let mut update = Statement::<DB>::new("UPDATE ");
        update.table(&self.row.table);
        update.push(" SET ");
        update.column(&states.column);
        update.push(" = ");
        update.value(&states.column, &states.to)?;
        for (column, value) in self.set.iter() {
            update.push(", ");
            update.column(column);
            update.push(" = ");
            update.value(column, value)?;
        }
        update.push(" WHERE ");
        update.matching(&self.row.key)?;
        update.push(" AND ");
        update.column(&states.column);
        update.push(" = ");
        update.value(&states.column, &states.from)?;
        if DB::DIALECT == Dialect::Standard {
            update.push(" RETURNING *");
        }
        Ok(update)
    }

    /// `SELECT *, ("state" = $1) AS "idem_already_applied" FROM t WHERE "k" = $2` (and `FOR
    /// UPDATE` on MySQL). The flag comes last, so that a row read by position (a tuple) reads the
    /// table's columns first.
    fn select(&self, states: &States<DB>) -> Result<Statement<DB>, Error> {
        let mut select = Statement::<DB>::new("SELECT *, (");
        select.column(&states.column);
        select.push(" = ");
        select.value(&states.column, &states.to)?;
        select.push(") AS ");
        select.name(APPLIED);
        select.push(" FROM ");
        select.table(&self.row.table);
        select.push(" WHERE ");
        select.matching(&self.row.key)?;
        select.push(DB::READ_LATEST);
        Ok(select)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Arguments, Sqlite};

    use super::*;
    use crate::InvalidName;

    fn refund() -> Transition<Sqlite> {
        let charges = "billing.charges".parse().unwrap();
        Transition::new(&charges)
            .key("id", 7_i64)
            .state("status", "succeeded", "refunded")
            .set("reason", "duplicate")
    }

    #[test]
    fn the_update_names_quoted_columns_and_binds_every_value() {
        let transition = refund();
        let states = transition.states.as_ref().unwrap();
        let update = transition.update(states).unwrap();
        assert_eq!(
            update.text,
            r#"UPDATE "billing"."charges" SET "status" = $1, "reason" = $2 WHERE "id" = $3 AND "status" = $4 RETURNING *"#
        );
        assert_eq!(update.arguments.len(), 4);
        let select = transition.select(states).unwrap();
        assert_eq!(
            select.text,
            r#"SELECT *, ("status" = $1) AS "idem_already_applied" FROM "billing"."charges" WHERE "id" = $2"#
        );
        assert_eq!(select.arguments.len(), 2);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn on_mysql_the_update_returns_nothing_and_the_read_locks_the_row() {
        let transition = Transition::<sqlx::MySql>::new(&"billing.charges".parse().unwrap())
            .key("id", 7_i64)
            .state("status", "succeeded", "refunded")
            .set("reason", "duplicate");
        let states = transition.states.as_ref().unwrap();
        let update = transition.update(states).unwrap();
        assert_eq!(
            update.text,
            "UPDATE `billing`.`charges` SET `status` = ?, `reason` = ? \
             WHERE `id` = ? AND `status` = ?"
        );
        assert_eq!(update.arguments.len(), 4);
        let select = transition.select(states).unwrap();
        assert_eq!(
            select.text,
            "SELECT *, (`status` = ?) AS `idem_already_applied` FROM `billing`.`charges` \
             WHERE `id` = ? FOR UPDATE"
        );
        assert_eq!(select.arguments.len(), 2);
    }

    #[test]
    fn a_bad_name_is_reported_by_the_first_call() {
        let transition = Transition::<Sqlite>::new(&"charges".parse().unwrap())
            .key("id", 7_i64)
            .state("Status", "succeeded", "refunded")
            .set("reason\"", "x");
        assert_eq!(
            transition.row.invalid,
            Some(InvalidName::Character {
                kind: "column",
                character: 'S',
                position: 0
            })
        );
    }
}
