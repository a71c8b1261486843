//! The connections the store runs its own operations on ([`idem_sql::connections`]: not a sqlx
//! pool, which pings every connection it takes back), opened with the sqlx pool's options.
//!
//! Each runs at `READ COMMITTED`: the store locks the records it writes by address, and
//! `REPEATABLE READ`'s gap locks would only make concurrent batches that create neighbouring keys
//! wait for each other, or deadlock. With a [statement timeout](crate::MysqlOptions::statement_timeout),
//! a row lock is waited for that long at most (`innodb_lock_wait_timeout`).

use std::time::Duration;

use idem_sql::connections::Connect;
use sqlx::{AssertSqlSafe, ConnectOptions, MySqlConnection, mysql::MySqlConnectOptions};

/// Opens the store's connections.
#[derive(Debug)]
pub(crate) struct Session {
    options: MySqlConnectOptions,
    setup: String,
}

impl Session {
    pub(crate) fn new(options: MySqlConnectOptions, statement_timeout: Option<Duration>) -> Self {
        let mut setup = String::from("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
        if let Some(timeout) = statement_timeout {
            // Whole seconds, rounded up: at least 1, the variable's least value.
            let seconds = timeout.as_millis().div_ceil(1_000).max(1);
            setup.push_str(&format!(
                ";\nSET SESSION innodb_lock_wait_timeout = {seconds}"
            ));
        }
        Self { options, setup }
    }
}

impl Connect for Session {
    type Connection = MySqlConnection;

    async fn connect(&self) -> Result<MySqlConnection, sqlx::Error> {
        let mut connection = self.options.connect().await?;
        sqlx::raw_sql(AssertSqlSafe(self.setup.clone()))
            .execute(&mut connection)
            .await?;
        Ok(connection)
    }
}

/// The pool of the store's connections.
pub(crate) type Connections = idem_sql::connections::Connections<Session>;
/// A connection of the store's.
pub(crate) type Checkout = idem_sql::connections::Checkout<Session>;
