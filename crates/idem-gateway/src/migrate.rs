//! `idem migrate`: creates the store's schema, or brings it up to date.
//!
//! SQLite files are migrated whenever they are opened; a PostgreSQL table only by this command
//! (`idem serve` refuses to start on a table without its migrations); memory and Redis stores
//! have no schema.

use crate::{Error, StoreUrl};

/// Applies the migrations the store at `url` lacks, and says what was done.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_gateway::{StoreUrl, migrate};
///
/// let dir = tempfile::tempdir()?;
/// let url = StoreUrl::sqlite(dir.path().join("idem.db"));
/// assert!(migrate::run(&url).await?.starts_with("created"));
/// assert!(migrate::run(&url).await?.ends_with("schema is up to date"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn run(url: &StoreUrl) -> Result<String, Error> {
    match url {
        StoreUrl::Memory(_) => {
            Ok("memory:// keeps nothing on disk: there is nothing to migrate".into())
        }
        StoreUrl::Postgres(postgres) => crate::store_url::postgres::migrate(postgres).await,
        StoreUrl::Redis(_) => {
            url.open().await?;
            Ok(format!(
                "{url}: Redis keeps no schema, there is nothing to migrate (the server answers \
                 and accepts the idem scripts)"
            ))
        }
        StoreUrl::Sqlite(options) => {
            let existed = options.path().exists();
            url.open().await?;
            Ok(if existed {
                format!("{url}: the idem schema is up to date")
            } else {
                format!("created {url}: the idem schema is up to date")
            })
        }
    }
}
