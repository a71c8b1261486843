//! [`StoreUrl`]: which store to use, as a URL, and opening it as a [`DynStore`].
//!
//! # Examples
//!
//! ```
//! use idem_gateway::StoreUrl;
//!
//! assert_eq!("memory://".parse::<StoreUrl>()?, StoreUrl::Memory(Default::default()));
//! assert_eq!("sqlite://idem.db".parse::<StoreUrl>()?, StoreUrl::Sqlite("idem.db".into()));
//! assert_eq!(
//!     "sqlite:///var/lib/idem.db".parse::<StoreUrl>()?,
//!     StoreUrl::Sqlite("/var/lib/idem.db".into()),
//! );
//! assert!(matches!(
//!     "postgres://app@db/payments?schema=idem".parse::<StoreUrl>()?,
//!     StoreUrl::Postgres(_)
//! ));
//! assert!(matches!("redis://cache:6379".parse::<StoreUrl>()?, StoreUrl::Redis(_)));
//! assert!("mysql://db".parse::<StoreUrl>().is_err());
//! # Ok::<(), idem_gateway::Error>(())
//! ```

mod memory;
mod parts;
mod postgres;
mod redis;

use std::{fmt, path::PathBuf, str::FromStr};

use idem_core::DynStore;
use idem_sqlite::SqliteStore;

pub use self::{memory::MemoryUrl, postgres::PostgresUrl, redis::RedisUrl};
use crate::Error;

/// Where idempotency records are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory://[?max_keys=N&max_bytes=SIZE]`: in this process only, lost on exit.
    Memory(MemoryUrl),
    /// `sqlite://PATH` (relative) or `sqlite:///ABSOLUTE/PATH`: a SQLite file, created if missing.
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`: a PostgreSQL table, shared by every gateway that
    /// connects to the database.
    Postgres(PostgresUrl),
    /// `redis://…` (one server) or `redis+cluster://…` (a Redis Cluster), shared by every gateway
    /// that connects to it.
    Redis(RedisUrl),
}

impl StoreUrl {
    /// `sqlite://PATH`.
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        StoreUrl::Sqlite(path.into())
    }

    /// Opens the store: for SQLite, creates the file if missing and brings its schema up to
    /// date; for PostgreSQL, checks that `idem migrate` was run; for Redis, loads the scripts.
    pub async fn open(&self) -> Result<DynStore, Error> {
        match self {
            StoreUrl::Memory(url) => Ok(DynStore::new(url.open())),
            StoreUrl::Sqlite(path) => {
                SqliteStore::open(path)
                    .await
                    .map(DynStore::new)
                    .map_err(|source| Error::OpenStore {
                        url: self.to_string(),
                        source: source.into(),
                    })
            }
            StoreUrl::Postgres(url) => url.open().await.map(DynStore::new),
            StoreUrl::Redis(url) => url.open().await.map(DynStore::new),
        }
    }
}

impl FromStr for StoreUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| Error::InvalidStoreUrl {
            url: parts::redact(url).into_owned(),
            reason,
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(
                "expected SCHEME://…, e.g. memory://, sqlite://idem.db or postgres://HOST/DB",
            ));
        };
        match scheme {
            "memory" => MemoryUrl::parse(url).map(StoreUrl::Memory),
            "sqlite" if rest.is_empty() => Err(invalid("no file path after sqlite://")),
            "sqlite" if rest.contains(['?', '#']) => Err(invalid(
                "sqlite:// takes a file path, without query or fragment",
            )),
            "sqlite" => Ok(StoreUrl::Sqlite(PathBuf::from(rest))),
            "postgres" | "postgresql" => PostgresUrl::parse(url).map(StoreUrl::Postgres),
            "redis" | "redis+cluster" => RedisUrl::parse(url).map(StoreUrl::Redis),
            "rediss" | "rediss+cluster" => Err(Error::UnsupportedStore {
                scheme: scheme.to_owned(),
                hint: "no TLS support; use redis:// on a private network or through a TLS tunnel",
            }),
            _ => Err(invalid(
                "unknown scheme; expected memory://, sqlite://PATH, postgres://…, redis://… or \
                 redis+cluster://…",
            )),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory(url) => url.fmt(f),
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Postgres(url) => url.fmt(f),
            StoreUrl::Redis(url) => url.fmt(f),
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
            "sqlite://idem.db",
            "sqlite:///var/lib/idem.db",
            "sqlite://./a/b.db",
            "postgres://db/pay?schema=s&table=t&pool_size=4",
            "postgresql://u@db:5433/pay",
            "redis://cache:6379/1?prefix=p",
            "redis+cluster://a:7000,b:7001?prefix=p",
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
            message("mysql://db"),
            "invalid store URL `mysql://db`: unknown scheme; expected memory://, sqlite://PATH, \
             postgres://…, redis://… or redis+cluster://…"
        );
        assert_eq!(
            message("sqlite://"),
            "invalid store URL `sqlite://`: no file path after sqlite://"
        );
        assert_eq!(
            message("rediss://u:pw@cache:6380"),
            "the rediss:// store is not available in this build: no TLS support; use redis:// \
             on a private network or through a TLS tunnel"
        );
        assert_eq!(
            message("mysql://u:pw@db"),
            "invalid store URL `mysql://u:***@db`: unknown scheme; expected memory://, \
             sqlite://PATH, postgres://…, redis://… or redis+cluster://…"
        );
    }

    #[tokio::test]
    async fn opens_sqlite_creating_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = StoreUrl::Sqlite(path.clone()).open().await.unwrap();
        idem_core::Store::ping(&store).await.unwrap();
        assert!(path.exists());
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_created_is_an_open_error() {
        let url = StoreUrl::Sqlite("/nonexistent-dir/idem.db".into());
        let error = url.open().await.unwrap_err();
        assert!(
            matches!(error, Error::OpenStore { ref url, .. } if url == "sqlite:///nonexistent-dir/idem.db")
        );
    }
}
