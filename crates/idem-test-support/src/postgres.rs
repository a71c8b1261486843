//! [`PgSchema`]: a PostgreSQL schema of the test's own.

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// A schema of the test's own on a PostgreSQL server, with a random name (`idem_test_` and 16
/// hex digits), dropped with all it holds when this is dropped.
#[derive(Debug)]
pub struct PgSchema {
    server: String,
    name: String,
}

impl PgSchema {
    /// A new schema name on the server at `server`, not created yet (what the test runs
    /// creates it, a migration for instance); dropped at the end if it was.
    pub fn new(server: &str) -> Self {
        Self {
            server: server.to_owned(),
            name: crate::unique_name("idem_test_"),
        }
    }

    /// A new schema on the server at `server`, created.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or the schema cannot be created.
    pub async fn create(server: &str) -> Self {
        let schema = Self::new(server);
        let mut connection = PgConnection::connect(server)
            .await
            .expect("connect to the test server");
        sqlx::raw_sql(AssertSqlSafe(format!(r#"CREATE SCHEMA "{}""#, schema.name)))
            .execute(&mut connection)
            .await
            .expect("create the test schema");
        let _ = connection.close().await;
        schema
    }

    /// The server's URL, as given.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The schema's name (a valid identifier: no quoting needed).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let server = self.server.clone();
        let statement = format!(r#"DROP SCHEMA IF EXISTS "{}" CASCADE"#, self.name);
        // Drop is synchronous and may run inside a runtime, which must not block: a thread with
        // a runtime of its own.
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(sqlx::Error::Io)?
                .block_on(async {
                    let mut connection = PgConnection::connect(&server).await?;
                    sqlx::raw_sql(AssertSqlSafe(statement))
                        .execute(&mut connection)
                        .await?;
                    connection.close().await
                })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("could not drop the test schema {}: {error}", self.name),
            Err(_) => eprintln!("could not drop the test schema {}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;

    async fn exists(server: &str, name: &str) -> bool {
        let mut connection = PgConnection::connect(server).await.unwrap();
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(name)
            .fetch_one(&mut connection)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_created_schema_exists_until_dropped() {
        let Some(server) = Server::Postgres.url() else {
            return;
        };
        let schema = PgSchema::create(&server).await;
        let name = schema.name().to_owned();
        assert!(name.starts_with("idem_test_"), "{name}");
        assert!(exists(&server, &name).await);
        drop(schema);
        assert!(!exists(&server, &name).await);
    }

    #[tokio::test]
    async fn a_schema_never_created_is_dropped_quietly() {
        let Some(server) = Server::Postgres.url() else {
            return;
        };
        let schema = PgSchema::new(&server);
        let name = schema.name().to_owned();
        assert!(!exists(&server, &name).await);
        drop(schema);
        assert!(!exists(&server, &name).await);
    }
}
