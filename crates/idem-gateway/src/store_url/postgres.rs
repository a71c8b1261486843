//! [`PostgresUrl`]: `postgres://…`, a [`PostgresStore`] and its migrations.

use std::{fmt, str::FromStr, time::Duration};

use idem_postgres::{PostgresOptions, PostgresStore, SchemaName, TableName};
use sqlx::{
    ConnectOptions, Connection,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use super::parts::Parts;
use crate::Error;

/// What an unknown parameter's error says is known.
const KNOWN: &str = "idem takes schema, table, pool_size; the others go to PostgreSQL's driver: \
                     sslmode, application_name, options, …";
/// The parameters sqlx reads (`sqlx-postgres`'s `options/parse.rs`), passed on as they are.
const DRIVER_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];
/// How the gateway's connections show in `pg_stat_activity`, unless the URL names them.
const APPLICATION_NAME: &str = "idem";
/// How long the first connection may take, as long as the pool waits for one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `postgres://[user[:password]@]host[:port]/database[?parameters]` (or `postgresql://`): a
/// [`PostgresStore`].
///
/// idem reads three parameters and passes the others (`sslmode`, `application_name`, …) to the
/// driver:
///
/// - `schema`: the schema of the records table (default `public`);
/// - `table`: the records table (default `idem_records`);
/// - `pool_size`: the connections of the pool (default 10).
///
/// The gateway's connections show as `application_name = idem` unless the URL sets another.
///
/// # Examples
///
/// ```
/// use idem_gateway::StoreUrl;
///
/// let StoreUrl::Postgres(url) = "postgres://app:pw@db/pay?schema=billing&pool_size=16".parse()?
/// else {
///     unreachable!()
/// };
/// assert_eq!(url.schema().as_str(), "billing");
/// assert_eq!(url.table().as_str(), "idem_records");
/// assert_eq!(url.to_string(), "postgres://app:***@db/pay?schema=billing&pool_size=16");
/// # Ok::<(), idem_gateway::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    /// As given, password hidden.
    shown: String,
    /// What the driver connects with: without idem's parameters.
    connect: String,
    schema: SchemaName,
    table: TableName,
    pool_size: Option<u32>,
}

impl PostgresUrl {
    pub(super) fn parse(url: &str) -> Result<Self, Error> {
        let mut parts = Parts::split(url)?;
        let schema = parts.take("schema", SchemaName::from_str)?;
        let table = parts.take("table", TableName::from_str)?;
        let pool_size = parts.take("pool_size", |value| match value.parse::<u32>() {
            Ok(0) => Err(PoolSizeError::Zero),
            Ok(size) => Ok(size),
            Err(error) => Err(PoolSizeError::NotANumber(error)),
        })?;
        parts.refuse_unknown(
            |name| DRIVER_PARAMETERS.contains(&name) || name.starts_with("options["),
            KNOWN,
        )?;
        let mut connect = format!(
            "{}://{}{}{}{}",
            parts.scheme,
            parts.credentials(),
            parts.hosts,
            parts.path,
            parts.remaining_query()
        );
        if !parts
            .query
            .iter()
            .any(|(name, _)| *name == "application_name")
        {
            let separator = if parts.query.is_empty() { '?' } else { '&' };
            connect = format!("{connect}{separator}application_name={APPLICATION_NAME}");
        }
        Ok(Self {
            shown: parts.shown,
            connect,
            schema: schema.unwrap_or_default(),
            table: table.unwrap_or_default(),
            pool_size,
        })
    }

    /// The schema that holds the records table.
    pub fn schema(&self) -> &SchemaName {
        &self.schema
    }

    /// The records table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The store's options: schema, table and pool size.
    pub fn options(&self) -> PostgresOptions {
        let options = PostgresOptions::new()
            .schema(self.schema.clone())
            .table(self.table.clone())
            .pool_timeout(CONNECT_TIMEOUT);
        match self.pool_size {
            Some(size) => options.pool_size(size),
            None => options,
        }
    }

    /// Connects, checks that the table is migrated and of this build, and opens the store.
    pub async fn open(&self) -> Result<PostgresStore, Error> {
        self.probe().await?;
        PostgresStore::connect(&self.connect, self.options())
            .await
            .map_err(|error| self.open_error(error))
    }

    /// Applies the migrations that are missing and says what was done: `idem migrate`.
    pub async fn migrate(&self) -> Result<String, Error> {
        let connect = self.probe().await?;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(connect)
            .await
            .map_err(|error| self.open_error(idem_postgres::Error::Connect(error)))?;
        let table = format!(r#""{}"."{}""#, self.schema, self.table);
        let done = match PostgresStore::open(pool.clone(), self.options()).await {
            Ok(_) => None,
            Err(idem_postgres::Error::NotMigrated { .. }) => {
                Some(format!("created the idem table {table} in {self}"))
            }
            Err(idem_postgres::Error::MigrationPending { version, .. }) => Some(format!(
                "applied the idem migrations from version {version} to {table} in {self}"
            )),
            // A table that is not idem's, or is a newer idem's: migrating would not help.
            Err(error) => return Err(self.open_error(error)),
        };
        if done.is_some() {
            PostgresStore::migrate(&pool, &self.options())
                .await
                .map_err(|error| self.open_error(error))?;
            PostgresStore::open(pool.clone(), self.options())
                .await
                .map_err(|error| self.open_error(error))?;
        }
        pool.close().await;
        Ok(done.unwrap_or_else(|| format!("{self}: the idem table {table} is up to date")))
    }

    /// Opens one connection, so that an unreachable server or a refused login is reported at
    /// once with its cause: the pool would retry a refused connection until its timeout, then
    /// only say that it timed out.
    async fn probe(&self) -> Result<PgConnectOptions, Error> {
        let failed = |error| self.open_error(idem_postgres::Error::Connect(error));
        let options = PgConnectOptions::from_str(&self.connect).map_err(failed)?;
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, options.connect())
            .await
            .map_err(|_| {
                failed(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {}",
                        humantime::format_duration(CONNECT_TIMEOUT)
                    ),
                )))
            })?
            .map_err(failed)?;
        let _ = connection.close().await;
        Ok(options)
    }

    fn open_error(&self, error: idem_postgres::Error) -> Error {
        let url = self.to_string();
        match error {
            idem_postgres::Error::NotMigrated { table } => Error::NotMigrated { url, table },
            idem_postgres::Error::MigrationPending { table, version } => Error::MigrationPending {
                url,
                table,
                version,
            },
            error => Error::OpenStore {
                url,
                source: error.into(),
            },
        }
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PostgresUrl").field(&self.shown).finish()
    }
}

/// A `pool_size` that is not a positive whole number.
#[derive(Debug, thiserror::Error)]
enum PoolSizeError {
    #[error("a pool has at least one connection")]
    Zero,
    #[error("expected a whole number of connections")]
    NotANumber(#[source] std::num::ParseIntError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> PostgresUrl {
        PostgresUrl::parse(url).unwrap()
    }

    fn error(url: &str) -> String {
        PostgresUrl::parse(url).unwrap_err().to_string()
    }

    #[test]
    fn idem_parameters_are_taken_out_and_the_others_passed_on() {
        let url = parse(
            "postgres://app:pw@db:5433/pay?sslmode=disable&schema=billing&table=keys&pool_size=16",
        );
        assert_eq!(url.schema().as_str(), "billing");
        assert_eq!(url.table().as_str(), "keys");
        assert_eq!(url.pool_size, Some(16));
        assert_eq!(
            url.connect,
            "postgres://app:pw@db:5433/pay?sslmode=disable&application_name=idem"
        );
        assert_eq!(
            url.to_string(),
            "postgres://app:***@db:5433/pay?sslmode=disable&schema=billing&table=keys&pool_size=16"
        );

        let url = parse("postgresql://db/pay?application_name=billing-gw");
        assert_eq!(url.schema().as_str(), "public");
        assert_eq!(url.table().as_str(), "idem_records");
        assert_eq!(url.pool_size, None);
        assert_eq!(
            url.connect,
            "postgresql://db/pay?application_name=billing-gw"
        );
        assert_eq!(
            parse("postgres://db/pay").connect,
            "postgres://db/pay?application_name=idem"
        );
    }

    #[test]
    fn bad_parameters_are_explained_in_one_line() {
        assert_eq!(
            error("postgres://db/pay?schema=Billing"),
            "invalid store URL `postgres://db/pay?schema=Billing`: `schema=Billing`: a schema \
             name has lower-case ASCII letters, digits and `_` only, and does not start with a \
             digit; 'B' at byte 0 is not allowed"
        );
        assert_eq!(
            error("postgres://db/pay?schema=pg_idem"),
            "invalid store URL `postgres://db/pay?schema=pg_idem`: `schema=pg_idem`: schema \
             names starting with `pg_` are reserved by PostgreSQL"
        );
        assert_eq!(
            error("postgres://db/pay?pool_size=0"),
            "invalid store URL `postgres://db/pay?pool_size=0`: `pool_size=0`: a pool has at \
             least one connection"
        );
        assert_eq!(
            error("postgres://db/pay?pool_size=many"),
            "invalid store URL `postgres://db/pay?pool_size=many`: `pool_size=many`: expected a \
             whole number of connections"
        );
        assert_eq!(
            error("postgres://db/pay?shema=billing"),
            "invalid store URL `postgres://db/pay?shema=billing`: unknown parameter `shema` \
             (idem takes schema, table, pool_size; the others go to PostgreSQL's driver: \
             sslmode, application_name, options, …)"
        );
        assert_eq!(
            error("postgres://u:pw@db/pay?table=a&table=b"),
            "invalid store URL `postgres://u:***@db/pay?table=a&table=b`: the parameter `table` \
             is given twice"
        );
        assert_eq!(
            error("postgres://db/pay#x"),
            "invalid store URL `postgres://db/pay#x`: a store URL has no fragment (`#…`)"
        );
    }
}
