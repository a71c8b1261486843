//! [`StoreUrl`]: which store to use, as a URL, and opening it as a [`DynStore`].
//!
//! # Examples
//!
//! ```
//! use std::path::Path;
//! use idem_gateway::StoreUrl;
//!
//! assert_eq!("memory://".parse::<StoreUrl>()?, StoreUrl::Memory);
//! assert_eq!("sqlite://idem.db".parse::<StoreUrl>()?, StoreUrl::Sqlite("idem.db".into()));
//! assert_eq!(
//!     "sqlite:///var/lib/idem.db".parse::<StoreUrl>()?,
//!     StoreUrl::Sqlite("/var/lib/idem.db".into()),
//! );
//! assert!("mysql://db".parse::<StoreUrl>().is_err());
//! # Ok::<(), idem_gateway::Error>(())
//! ```

use std::{fmt, path::PathBuf, str::FromStr};

use idem_core::{DynStore, MemoryStore};
use idem_sqlite::SqliteStore;

use crate::Error;

/// Where idempotency records are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory://`: in this process only, lost on exit.
    Memory,
    /// `sqlite://PATH` (relative) or `sqlite:///ABSOLUTE/PATH`: a SQLite file, created if missing.
    Sqlite(PathBuf),
    // postgres:// and redis:// are added here, with their `open` arms, by the issues that bring
    // those stores.
}

impl StoreUrl {
    /// `sqlite://PATH`.
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        StoreUrl::Sqlite(path.into())
    }

    /// Opens the store: for SQLite, creates the file if missing and brings its schema up to
    /// date.
    pub async fn open(&self) -> Result<DynStore, Error> {
        match self {
            StoreUrl::Memory => Ok(DynStore::new(MemoryStore::new())),
            StoreUrl::Sqlite(path) => {
                SqliteStore::open(path)
                    .await
                    .map(DynStore::new)
                    .map_err(|source| Error::OpenStore {
                        url: self.to_string(),
                        source: source.into(),
                    })
            }
        }
    }
}

impl FromStr for StoreUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| Error::InvalidStoreUrl {
            url: url.to_owned(),
            reason,
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(
                "expected SCHEME://…, e.g. memory:// or sqlite://idem.db",
            ));
        };
        match scheme {
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(invalid("memory:// takes nothing after the scheme")),
            "sqlite" if rest.is_empty() => Err(invalid("no file path after sqlite://")),
            "sqlite" if rest.contains(['?', '#']) => Err(invalid(
                "sqlite:// takes a file path, without query or fragment",
            )),
            "sqlite" => Ok(StoreUrl::Sqlite(PathBuf::from(rest))),
            "postgres" | "postgresql" | "redis" | "rediss" => Err(Error::UnsupportedStore {
                scheme: scheme.to_owned(),
            }),
            _ => Err(invalid(
                "unknown scheme; expected memory:// or sqlite://PATH",
            )),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory://"),
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
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
            "sqlite://idem.db",
            "sqlite:///var/lib/idem.db",
            "sqlite://./a/b.db",
        ] {
            assert_eq!(url.parse::<StoreUrl>().unwrap().to_string(), url);
        }
    }

    #[test]
    fn explains_bad_urls_in_one_line() {
        let message = |url: &str| url.parse::<StoreUrl>().unwrap_err().to_string();
        assert_eq!(
            message("idem.db"),
            "invalid store URL `idem.db`: expected SCHEME://…, e.g. memory:// or sqlite://idem.db"
        );
        assert_eq!(
            message("mysql://db"),
            "invalid store URL `mysql://db`: unknown scheme; expected memory:// or sqlite://PATH"
        );
        assert_eq!(
            message("sqlite://"),
            "invalid store URL `sqlite://`: no file path after sqlite://"
        );
        assert_eq!(
            message("postgres://localhost/idem"),
            "the postgres:// store is not available in this build (use memory:// or sqlite://PATH)"
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
