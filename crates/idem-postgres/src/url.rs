//! [`PostgresOptions::from_url`]: `postgres://…` as libpq reads it, with idem's parameters.

use std::{env, str::FromStr};

use idem_core::store_url::{InvalidStoreUrl, UrlParts, UrlProblem, count};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::{PostgresOptions, SchemaName, TableName};

/// What an unknown parameter's error says is known.
const KNOWN: &str = "idem takes schema, table, pool_size, batch_size, batches_in_flight, \
                     queue_size; the others go to PostgreSQL's driver: sslmode, sslrootcert, \
                     sslcert, sslkey, application_name, options, …";
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
/// The names of the CA file parameter.
const ROOT_CERT_PARAMETERS: &[&str] = &["sslrootcert", "ssl-root-cert", "ssl-ca"];
/// How the store's connections show in `pg_stat_activity`, unless the URL names them.
const APPLICATION_NAME: &str = "idem";

impl PostgresOptions {
    /// `postgres://[user[:password]@]host[:port]/database[?parameters]` (or `postgresql://`).
    ///
    /// idem reads these parameters:
    ///
    /// - `schema`: the schema of the records table (default `public`);
    /// - `table`: the records table (default `idem_records`);
    /// - `pool_size`: the connections of the pool (default 10, [`pool_size`](Self::pool_size));
    /// - `batch_size`: the most writes of one kind one statement commits (default 64,
    ///   [`batch_size`](Self::batch_size));
    /// - `batches_in_flight`: the most batches of one kind running at once (default 2,
    ///   [`batches_in_flight`](Self::batches_in_flight));
    /// - `queue_size`: the most writes of one kind waiting for a batch (default 1024,
    ///   [`queue_size`](Self::queue_size)).
    ///
    /// Each count is a whole number, at least 1. `queue_size` was once `queue`: that spelling is
    /// still read, with a warning, and a URL that gives both is refused.
    ///
    /// The others go to the driver, as libpq reads them: `sslmode` (`disable`, `prefer`, the
    /// default, `require`, `verify-ca`, `verify-full`), `sslrootcert` (the CA that signed the
    /// server's certificate), `sslcert` and `sslkey` (a client certificate), `application_name`
    /// (default `idem`), `options`, … As in libpq, `require` with a `sslrootcert` checks the
    /// server's certificate against it, as `verify-ca` does. Without `sslrootcert`, `verify-ca`
    /// and `verify-full` trust the Mozilla root certificates built into idem. TLS is rustls.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_postgres::PostgresOptions;
    ///
    /// let options = PostgresOptions::from_url(
    ///     "postgres://app:pw@db/pay?schema=billing&sslmode=verify-full&sslrootcert=/etc/ca.pem",
    /// )?;
    /// assert_eq!(options.url(), Some(
    ///     "postgres://app:***@db/pay?schema=billing&sslmode=verify-full&sslrootcert=/etc/ca.pem"
    /// ));
    /// assert_eq!(options.connect_options().get_host(), "db");
    ///
    /// let error = PostgresOptions::from_url("postgres://db/pay?shema=billing").unwrap_err();
    /// assert!(error.to_string().contains("unknown parameter `shema`"));
    /// # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, InvalidStoreUrl> {
        let mut parts = UrlParts::split(url)?;
        if !matches!(parts.scheme(), "postgres" | "postgresql") {
            return Err(parts.error("expected postgres://… or postgresql://…"));
        }
        let schema = parts.take("schema", SchemaName::from_str)?;
        let table = parts.take("table", TableName::from_str)?;
        let pool_size = parts.take("pool_size", count::<u32>)?;
        let batch_size = parts.take("batch_size", count::<usize>)?;
        let batches_in_flight = parts.take("batches_in_flight", count::<usize>)?;
        let queue_size = parts.take_renamed("queue_size", "queue", count::<usize>)?;
        parts.refuse_unknown(
            |name| DRIVER_PARAMETERS.contains(&name) || name.starts_with("options["),
            KNOWN,
        )?;
        let mut connect = format!(
            "{}://{}{}{}{}",
            parts.scheme(),
            parts.credentials(),
            parts.hosts(),
            parts.path(),
            parts.remaining_query()
        );
        if !parts.has("application_name") {
            let separator = if connect.contains('?') { '&' } else { '?' };
            connect = format!("{connect}{separator}application_name={APPLICATION_NAME}");
        }
        let mut connection = PgConnectOptions::from_str(&connect)
            .map_err(|error| parts.invalid(UrlProblem::Driver(driver_reason(error))))?;
        let root_cert = ROOT_CERT_PARAMETERS.iter().any(|name| parts.has(name))
            || env::var_os("PGSSLROOTCERT").is_some();
        if matches!(connection.get_ssl_mode(), PgSslMode::Require) && root_cert {
            // libpq: "if a root CA file exists, sslmode=require behaves as verify-ca".
            connection = connection.ssl_mode(PgSslMode::VerifyCa);
        }
        let mut options = Self::new()
            .schema(schema.unwrap_or(Self::DEFAULT_SCHEMA))
            .table(table.unwrap_or(Self::DEFAULT_TABLE))
            .connection(connection);
        if let Some(size) = pool_size {
            options = options.pool_size(size);
        }
        if let Some(size) = batch_size {
            options = options.batch_size(size);
        }
        if let Some(batches) = batches_in_flight {
            options = options.batches_in_flight(batches);
        }
        if let Some(size) = queue_size {
            options = options.queue_size(size);
        }
        options.url = Some(parts.shown().to_owned());
        Ok(options)
    }
}

impl FromStr for PostgresOptions {
    type Err = InvalidStoreUrl;

    /// [`PostgresOptions::from_url`].
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::from_url(url)
    }
}

/// What the driver says is wrong, without the "error with configuration" sqlx wraps it in
/// (twice, for a parameter's value).
fn driver_reason(error: sqlx::Error) -> Box<dyn std::error::Error + Send + Sync> {
    let mut reason: Box<dyn std::error::Error + Send + Sync> = Box::new(error);
    loop {
        match reason.downcast::<sqlx::Error>() {
            Ok(error) => match *error {
                sqlx::Error::Configuration(inner) => reason = inner,
                other => return Box::new(other),
            },
            Err(other) => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> PostgresOptions {
        PostgresOptions::from_url(url).unwrap()
    }

    fn error(url: &str) -> String {
        PostgresOptions::from_url(url).unwrap_err().to_string()
    }

    /// The schema, the table, the pool size, the batch size, the batches in flight and the queue
    /// size of `options`.
    fn settings(options: &PostgresOptions) -> (&str, &str, u32, usize, usize, usize) {
        (
            options.schema.as_str(),
            options.table.as_str(),
            options.pool_size,
            options.batch_size,
            options.batches_in_flight,
            options.queue_size,
        )
    }

    #[test]
    fn idem_parameters_are_taken_out_and_the_others_passed_on() {
        let options = parse(
            "postgres://app:pw@db:5433/pay?sslmode=disable&schema=billing&table=keys&pool_size=16&\
             batch_size=32&batches_in_flight=3&queue_size=4096",
        );
        assert_eq!(settings(&options), ("billing", "keys", 16, 32, 3, 4096));
        let connect = options.connect_options();
        assert_eq!(connect.get_host(), "db");
        assert_eq!(connect.get_port(), 5433);
        assert_eq!(connect.get_username(), "app");
        assert_eq!(connect.get_database(), Some("pay"));
        assert_eq!(format!("{:?}", connect.get_ssl_mode()), "Disable");
        assert_eq!(connect.get_application_name(), Some("idem"));
        assert_eq!(
            options.url(),
            Some(
                "postgres://app:***@db:5433/pay?sslmode=disable&schema=billing&table=keys&\
                 pool_size=16&batch_size=32&batches_in_flight=3&queue_size=4096"
            )
        );

        let options = parse("postgresql://db/pay?application_name=billing-gw");
        assert_eq!(
            settings(&options),
            ("public", "idem_records", 10, 64, 2, 1024)
        );
        assert_eq!(
            options.connect_options().get_application_name(),
            Some("billing-gw")
        );
    }

    #[test]
    fn the_old_spelling_of_queue_size_is_still_read() {
        let new = parse("postgres://db/pay?queue_size=4096");
        let old = parse("postgres://db/pay?queue=4096");
        assert_eq!((new.queue_size, old.queue_size), (4096, 4096));
        assert_eq!(old.url(), Some("postgres://db/pay?queue=4096"));
        assert_eq!(
            error("postgres://db/pay?queue=8&queue_size=16"),
            "invalid store URL `postgres://db/pay?queue=8&queue_size=16`: `queue_size` and its \
             old spelling `queue` are both given: keep `queue_size`"
        );
        assert_eq!(
            error("postgres://db/pay?queue=-5"),
            "invalid store URL `postgres://db/pay?queue=-5`: `queue=-5`: expected a whole number"
        );
    }

    #[test]
    fn sslmode_is_read_as_libpq_does() {
        let mode = |url: &str| format!("{:?}", parse(url).connect_options().get_ssl_mode());
        assert_eq!(mode("postgres://db/pay"), "Prefer");
        assert_eq!(mode("postgres://db/pay?sslmode=require"), "Require");
        // With a CA file, `require` checks the chain.
        assert_eq!(
            mode("postgres://db/pay?sslmode=require&sslrootcert=/ca.pem"),
            "VerifyCa"
        );
        assert_eq!(
            mode("postgres://db/pay?sslmode=verify-full&sslrootcert=/ca.pem&schema=s"),
            "VerifyFull"
        );
        assert_eq!(
            mode("postgres://db/pay?sslmode=verify-ca&sslcert=/c.pem&sslkey=/k.pem"),
            "VerifyCa"
        );
        assert_eq!(
            error("postgres://db/pay?sslmode=sometimes"),
            "invalid store URL `postgres://db/pay?sslmode=sometimes`: unknown value \"sometimes\" \
             for `ssl_mode`"
        );
    }

    #[test]
    fn the_statement_timeout_is_an_option_of_every_connection() {
        let options = parse("postgres://db/pay?options=-c%20search_path%3Dx")
            .statement_timeout(std::time::Duration::from_micros(1_500));
        let connect = options.connect_options();
        assert_eq!(
            connect.get_options(),
            Some("-c search_path=x -c statement_timeout=2 -c lock_timeout=2")
        );
        // Applied once, however often the store derives its connections' options.
        assert_eq!(
            options.with_timeouts(connect).get_options(),
            Some("-c search_path=x -c statement_timeout=2 -c lock_timeout=2")
        );
        // A longer timeout set by other means is not mistaken for this one.
        let other = options.with_timeouts(
            PgConnectOptions::new().options([("statement_timeout", "20"), ("lock_timeout", "20")]),
        );
        assert_eq!(
            other.get_options(),
            Some(
                "-c statement_timeout=20 -c lock_timeout=20 -c statement_timeout=2 -c \
                 lock_timeout=2"
            )
        );
        assert_eq!(
            parse("postgres://db/pay").connect_options().get_options(),
            None
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
            "invalid store URL `postgres://db/pay?pool_size=0`: `pool_size=0`: expected 1 or more"
        );
        assert_eq!(
            error("postgres://db/pay?pool_size=many"),
            "invalid store URL `postgres://db/pay?pool_size=many`: `pool_size=many`: expected a \
             whole number"
        );
        assert_eq!(
            error("postgres://db/pay?batch_size=0"),
            "invalid store URL `postgres://db/pay?batch_size=0`: `batch_size=0`: expected 1 or \
             more"
        );
        assert_eq!(
            error("postgres://db/pay?queue_size=-5"),
            "invalid store URL `postgres://db/pay?queue_size=-5`: `queue_size=-5`: expected a \
             whole number"
        );
        assert_eq!(
            error("postgres://db/pay?batches_in_flight=two"),
            "invalid store URL `postgres://db/pay?batches_in_flight=two`: `batches_in_flight=two`: \
             expected a whole number"
        );
        assert_eq!(
            error("postgres://db/pay?shema=billing"),
            "invalid store URL `postgres://db/pay?shema=billing`: unknown parameter `shema` \
             (idem takes schema, table, pool_size, batch_size, batches_in_flight, queue_size; \
             the others go to PostgreSQL's driver: sslmode, sslrootcert, sslcert, sslkey, \
             application_name, options, …)"
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
        assert_eq!(
            error("mysql://db/pay"),
            "invalid store URL `mysql://db/pay`: expected postgres://… or postgresql://…"
        );
    }

    #[test]
    fn debug_hides_the_password() {
        let options = parse("postgres://app:s3cr3t@db/pay");
        let shown = format!("{options:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("postgres://app:***@db/pay"), "{shown}");
    }
}
