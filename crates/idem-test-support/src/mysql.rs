//! [`MysqlDatabase`]: a MySQL or MariaDB database of the test's own.

use sqlx::{
    AssertSqlSafe, ConnectOptions, Connection, MySqlConnection, mysql::MySqlConnectOptions,
};

/// A database of the test's own on a MySQL or MariaDB server, with a random name (`idem_test_`
/// and 16 hex digits), created when this is made and dropped with all it holds when this is
/// dropped. (A MySQL database is what PostgreSQL calls a schema: [`PgSchema`](crate::PgSchema)'s
/// peer.)
#[derive(Debug)]
pub struct MysqlDatabase {
    server: String,
    name: String,
}

impl MysqlDatabase {
    /// A new database on the server at `server` (`IDEM_TEST_MYSQL_URL`: its own database is only
    /// where the test connects to create this one), created.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or the database cannot be created.
    pub async fn create(server: &str) -> Self {
        let database = Self {
            server: server.to_owned(),
            name: crate::unique_name("idem_test_"),
        };
        let mut connection = MySqlConnection::connect(server)
            .await
            .expect("connect to the test server");
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE DATABASE `{}`",
            database.name
        )))
        .execute(&mut connection)
        .await
        .expect("create the test database");
        let _ = connection.close().await;
        database
    }

    /// The server's URL, as given.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The database's name (a valid identifier: no quoting needed).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL with this database in its path, the query kept.
    pub fn url(&self) -> String {
        let (base, query) = match self.server.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (self.server.as_str(), None),
        };
        let authority_end = base
            .find("://")
            .map(|at| at + 3)
            .and_then(|start| base[start..].find('/').map(|slash| start + slash))
            .unwrap_or(base.len());
        let mut url = format!("{}/{}", &base[..authority_end], self.name);
        if let Some(query) = query {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    /// Connection options for this database.
    pub fn connect_options(&self) -> MySqlConnectOptions {
        self.url().parse().expect("a valid MySQL URL")
    }

    /// A connection to this database.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    pub async fn connect(&self) -> MySqlConnection {
        self.connect_options()
            .connect()
            .await
            .expect("connect to the test database")
    }
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        let server = self.server.clone();
        let name = self.name.clone();
        // Drop is synchronous and may run inside a runtime, which must not block: a thread with
        // a runtime of its own. The connections still open on the database are killed first: a
        // transaction one of them holds open (a failed test's, or one whose pool would have
        // ended it on this same runtime) would make the drop wait for its locks.
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(sqlx::Error::Io)?
                .block_on(async {
                    let mut connection = MySqlConnection::connect(&server).await?;
                    let open: Vec<u64> = sqlx::query_scalar(
                        "SELECT id FROM information_schema.processlist \
                         WHERE db = ? AND id <> CONNECTION_ID()",
                    )
                    .bind(&name)
                    .fetch_all(&mut connection)
                    .await?;
                    for id in open {
                        // It may have closed since: an unknown thread is no error here.
                        let _ = sqlx::raw_sql(AssertSqlSafe(format!("KILL CONNECTION {id}")))
                            .execute(&mut connection)
                            .await;
                    }
                    sqlx::raw_sql(AssertSqlSafe(format!(
                        "SET SESSION lock_wait_timeout = 60; DROP DATABASE IF EXISTS `{name}`"
                    )))
                    .execute(&mut connection)
                    .await?;
                    connection.close().await
                })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("could not drop the test database {}: {error}", self.name),
            Err(_) => eprintln!("could not drop the test database {}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;

    async fn exists(server: &str, name: &str) -> bool {
        let mut connection = MySqlConnection::connect(server).await.unwrap();
        let found: Option<String> = sqlx::query_scalar(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
        )
        .bind(name)
        .fetch_optional(&mut connection)
        .await
        .unwrap();
        found.is_some()
    }

    #[test]
    fn the_url_names_the_database_and_keeps_the_query() {
        let database = |server: &str| MysqlDatabase {
            server: server.to_owned(),
            name: "idem_test_0123".to_owned(),
        };
        let url = |server: &str| {
            let database = database(server);
            let url = database.url();
            std::mem::forget(database); // never created: nothing to drop
            url
        };
        assert_eq!(
            url("mysql://root@127.0.0.1:3306/test"),
            "mysql://root@127.0.0.1:3306/idem_test_0123"
        );
        assert_eq!(
            url("mysql://root:pw@db/test?ssl-mode=DISABLED"),
            "mysql://root:pw@db/idem_test_0123?ssl-mode=DISABLED"
        );
        assert_eq!(url("mysql://db"), "mysql://db/idem_test_0123");
    }

    #[tokio::test]
    async fn a_created_database_exists_until_dropped() {
        let Some(server) = Server::Mysql.url() else {
            return;
        };
        let database = MysqlDatabase::create(&server).await;
        let name = database.name().to_owned();
        assert!(name.starts_with("idem_test_"), "{name}");
        assert!(exists(&server, &name).await);
        let mut connection = database.connect().await;
        let current: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert_eq!(current.as_deref(), Some(name.as_str()));
        drop(connection);
        drop(database);
        assert!(!exists(&server, &name).await);
    }
}
