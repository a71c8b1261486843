//! [`StoreUrl`]: which store to use, as a URL, and opening it as a [`DynStore`].
//!
//! The gateway only picks the store by the URL's scheme: each store crate reads the rest of its
//! own URL ([`SqliteOptions::from_url`], [`PostgresOptions::from_url`],
//! [`RedisOptions::from_url`]), TLS settings included.
//!
//! # Examples
//!
//! ```
//! use idem_gateway::StoreUrl;
//!
//! assert_eq!("memory://".parse::<StoreUrl>()?.to_string(), "memory://");
//! assert_eq!("sqlite://idem.db".parse::<StoreUrl>()?.to_string(), "sqlite://idem.db");
//! assert!(matches!(
//!     "postgres://app@db/payments?schema=idem&sslmode=verify-full".parse::<StoreUrl>()?,
//!     StoreUrl::Postgres(_)
//! ));
//! assert!(matches!("rediss://cache:6380".parse::<StoreUrl>()?, StoreUrl::Redis(_)));
//! assert!("mysql://db".parse::<StoreUrl>().is_err());
//! # Ok::<(), idem_gateway::Error>(())
//! ```

mod memory;

use std::{fmt, path::PathBuf, str::FromStr, time::Duration};

use idem_core::{
    DigestKey, DynStore, KeyedAddresses, Store,
    sealing::{KeyRing, Sealed},
    store_url::InvalidStoreUrl,
};
use idem_mysql::{MysqlOptions, MysqlStore};
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_redis::{RedisOptions, RedisStore};
use idem_sqlite::{SqliteOptions, SqliteStore};

pub use self::memory::MemoryUrl;

use crate::Error;

/// Where idempotency records are kept.
#[derive(Debug, Clone)]
#[non_exhaustive]
// Parsed once at start and kept: its size does not matter, boxing would only burden matches.
#[allow(clippy::large_enum_variant)]
pub enum StoreUrl {
    /// `memory://[?max_keys=N&max_bytes=SIZE]`: in this process only, lost on exit.
    Memory(MemoryUrl),
    /// `sqlite://PATH` (relative) or `sqlite:///ABSOLUTE/PATH`: a SQLite file, created if missing.
    Sqlite(SqliteOptions),
    /// `postgres://…` or `postgresql://…`: a PostgreSQL table, shared by every gateway that
    /// connects to the database. TLS as libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey`
    /// say.
    Postgres(PostgresOptions),
    /// `mysql://…` or `mariadb://…`: a MySQL or MariaDB table, shared by every gateway that
    /// connects to the database. TLS as MySQL's `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` say.
    Mysql(MysqlOptions),
    /// `redis://…` (one server) or `redis+cluster://…` (a Redis Cluster), shared by every gateway
    /// that connects to it; `rediss://…` and `rediss+cluster://…` over TLS.
    Redis(RedisOptions),
}

impl StoreUrl {
    /// `sqlite://PATH`.
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        StoreUrl::Sqlite(SqliteOptions::new(path.into()))
    }

    /// Bounds every statement the store runs on its server by `limit`: PostgreSQL's
    /// `statement_timeout` and `lock_timeout` on each of its connections; MySQL's lock wait
    /// (`innodb_lock_wait_timeout`) and each round trip, whose connection is closed past it. The
    /// gateway bounds each store call by the same limit on its side (`--store-timeout`); this ends
    /// on the server too a statement whose caller gave up, so that it stops holding locks. Other
    /// stores are unchanged.
    #[must_use]
    pub fn statement_timeout(self, limit: Duration) -> Self {
        match self {
            StoreUrl::Postgres(options) => StoreUrl::Postgres(options.statement_timeout(limit)),
            StoreUrl::Mysql(options) => StoreUrl::Mysql(options.statement_timeout(limit)),
            other => other,
        }
    }

    /// Opens the store: for SQLite, creates the file if missing and brings its schema up to
    /// date; for PostgreSQL and MySQL, checks that `idem migrate` was run; for Redis, loads the
    /// scripts.
    pub async fn open(&self) -> Result<DynStore, Error> {
        self.open_at_rest(&AtRest::default()).await
    }

    /// Opens the store as [`open`](Self::open) does, its records protected as `at_rest` says:
    /// responses sealed, addresses keyed. The wrappers wrap the store itself, before its type is
    /// erased: a call goes through one dynamic dispatch.
    pub async fn open_at_rest(&self, at_rest: &AtRest) -> Result<DynStore, Error> {
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| Error::OpenStore {
            url: self.to_string(),
            source,
        };
        match self {
            StoreUrl::Memory(url) => Ok(erased(url.open(), at_rest)),
            StoreUrl::Sqlite(options) => SqliteStore::open_with(options.clone())
                .await
                .map(|store| erased(store, at_rest))
                .map_err(|error| failed(error.into())),
            StoreUrl::Postgres(options) => PostgresStore::connect_with(options.clone())
                .await
                .map(|store| erased(store, at_rest))
                .map_err(|error| failed(error.into())),
            StoreUrl::Mysql(options) => MysqlStore::connect_with(options.clone())
                .await
                .map(|store| erased(store, at_rest))
                .map_err(|error| failed(error.into())),
            StoreUrl::Redis(options) => RedisStore::open_with(options.clone())
                .await
                .map(|store| erased(store, at_rest))
                .map_err(|error| failed(error.into())),
        }
    }
}

/// How records are protected at rest: their responses sealed, their addresses keyed digests.
/// The default is neither.
#[derive(Debug, Clone, Default)]
pub struct AtRest {
    /// How responses are sealed, if they are.
    pub sealing: Option<Sealing>,
    /// How addresses are keyed, if they are.
    pub digests: Option<KeyedDigests>,
}

/// Addresses kept as digests keyed with a [`DigestKey`] (`--digest-key-file`), and how long
/// after the store is opened records under plain addresses are still looked for.
#[derive(Debug, Clone)]
pub struct KeyedDigests {
    /// The key.
    pub key: DigestKey,
    /// The change-over window: the longest TTL records were stored with before the key was
    /// turned on; zero once none is left.
    pub changeover: Duration,
}

/// How stored responses are sealed: with a key ring, and whether a record in clear is still
/// replayed (each counted in [`PLAINTEXT_ACCEPTED`]) or refused as corrupted.
#[derive(Debug, Clone)]
pub struct Sealing {
    /// The keys: the first seals, every one opens.
    pub ring: KeyRing,
    /// Whether a record in clear is replayed.
    pub accept_plaintext: bool,
}

/// The counter of records in clear replayed by a sealed store (`--accept-plaintext`).
pub const PLAINTEXT_ACCEPTED: &str = "idem_plaintext_records_accepted_total";

/// `store`, its records protected as `at_rest` says, its type erased.
fn erased(store: impl Store, at_rest: &AtRest) -> DynStore {
    match &at_rest.digests {
        Some(digests) => sealed(
            KeyedAddresses::new(store, &digests.key).changeover_for(digests.changeover),
            at_rest.sealing.as_ref(),
        ),
        None => sealed(store, at_rest.sealing.as_ref()),
    }
}

/// `store`, sealing its responses as `sealing` says when there is one, its type erased. Sealing
/// is outermost: a sealed response is bound to the plain address, whatever the store keys.
fn sealed(store: impl Store, sealing: Option<&Sealing>) -> DynStore {
    match sealing {
        Some(sealing) => DynStore::new(
            Sealed::new(store, sealing.ring.clone())
                .accept_plaintext(sealing.accept_plaintext)
                .on_plaintext(|| metrics::counter!(PLAINTEXT_ACCEPTED).increment(1)),
        ),
        None => DynStore::new(store),
    }
}

impl FromStr for StoreUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| Error::InvalidStoreUrl(InvalidStoreUrl::new(url, reason));
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(invalid(
                "expected SCHEME://…, e.g. memory://, sqlite://idem.db or postgres://HOST/DB",
            ));
        };
        match scheme {
            "memory" => MemoryUrl::parse(url).map(StoreUrl::Memory),
            "sqlite" => Ok(StoreUrl::Sqlite(SqliteOptions::from_url(url)?)),
            "postgres" | "postgresql" => Ok(StoreUrl::Postgres(PostgresOptions::from_url(url)?)),
            "mysql" | "mariadb" => Ok(StoreUrl::Mysql(MysqlOptions::from_url(url)?)),
            "redis" | "redis+cluster" | "rediss" | "rediss+cluster" => {
                Ok(StoreUrl::Redis(RedisOptions::from_url(url)?))
            }
            _ => Err(invalid(
                "unknown scheme; expected memory://, sqlite://PATH, postgres://…, mysql://…, \
                 redis://… or redis+cluster://…",
            )),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory(url) => url.fmt(f),
            StoreUrl::Sqlite(options) => write!(f, "sqlite://{}", options.path().display()),
            StoreUrl::Postgres(options) => f.write_str(options.url().unwrap_or("postgres://")),
            StoreUrl::Mysql(options) => f.write_str(options.url().unwrap_or("mysql://")),
            StoreUrl::Redis(options) => f.write_str(options.url().unwrap_or("redis://")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text() {
        for url in [
            "memory://",
            "memory://?max_keys=2&max_bytes=512MiB",
            "memory://?max_keys_per_scope=100",
            "sqlite://idem.db",
            "sqlite:///var/lib/idem.db",
            "sqlite://./a/b.db",
            "postgres://db/pay?schema=s&table=t&pool_size=4",
            "postgres://db/pay?batch_size=16&batches_in_flight=1&queue_size=256",
            "postgresql://u@db:5433/pay?sslmode=verify-full&sslrootcert=/etc/ca.pem",
            "mysql://u:***@db:3306/pay?table=t&pool_size=4&batch_size=16",
            "mariadb://db/pay?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem",
            "redis://cache:6379/1?prefix=p",
            "redis://cache:6379?batch_size=16&queue_size=256&lanes=4",
            "redis+cluster://a:7000,b:7001?prefix=p",
            "rediss://cache:6380?cacert=/etc/ca.pem",
            "rediss+cluster://a:7000,b:7001?prefix=p",
        ] {
            assert_eq!(url.parse::<StoreUrl>().unwrap().to_string(), url);
        }
    }

    #[test]
    fn explains_bad_urls_in_one_line() {
        let message = |url: &str| url.parse::<StoreUrl>().unwrap_err().to_string();
        assert_eq!(
            message("idem.db"),
            "invalid store URL `idem.db`: expected SCHEME://…, e.g. memory://, sqlite://idem.db \
             or postgres://HOST/DB"
        );
        assert_eq!(
            message("mongodb://db"),
            "invalid store URL `mongodb://db`: unknown scheme; expected memory://, sqlite://PATH, \
             postgres://…, mysql://…, redis://… or redis+cluster://…"
        );
        assert_eq!(
            message("mysql://db/pay?ssl-mode=SOMETIMES"),
            "invalid store URL `mysql://db/pay?ssl-mode=SOMETIMES`: unknown value \"SOMETIMES\" \
             for `ssl_mode`"
        );
        assert_eq!(
            message("sqlite://"),
            "invalid store URL `sqlite://`: no file path after sqlite://"
        );
        assert_eq!(
            message("mongodb://u:pw@db"),
            "invalid store URL `mongodb://u:***@db`: unknown scheme; expected memory://, \
             sqlite://PATH, postgres://…, mysql://…, redis://… or redis+cluster://…"
        );
        assert_eq!(
            message("rediss://u:pw@cache?prefix=a*"),
            "invalid store URL `rediss://u:***@cache?prefix=a*`: `prefix=a*`: a key prefix is 1 \
             to 64 ASCII letters, digits, '-', '_', '.' or ':'"
        );
    }

    #[tokio::test]
    async fn opens_sqlite_creating_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = StoreUrl::sqlite(path.clone()).open().await.unwrap();
        idem_core::Store::ping(&store).await.unwrap();
        assert!(path.exists());
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_created_is_an_open_error() {
        let url = StoreUrl::sqlite("/nonexistent-dir/idem.db");
        let error = url.open().await.unwrap_err();
        assert!(
            matches!(error, Error::OpenStore { ref url, .. } if url == "sqlite:///nonexistent-dir/idem.db")
        );
    }

    #[tokio::test]
    async fn an_unreadable_ca_file_is_named_when_redis_opens() {
        let url: StoreUrl = "rediss://127.0.0.1:1?cacert=/nonexistent/ca.pem"
            .parse()
            .unwrap();
        let error = url.open().await.unwrap_err();
        let Error::OpenStore { url, source } = &error else {
            panic!("expected OpenStore, got {error:?}");
        };
        assert_eq!(url, "rediss://127.0.0.1:1?cacert=/nonexistent/ca.pem");
        assert_eq!(
            source.to_string(),
            "cannot read the TLS file /nonexistent/ca.pem"
        );
    }
}
