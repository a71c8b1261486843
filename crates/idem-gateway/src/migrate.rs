//! `idem migrate`: creates the store's schema, or brings it up to date.

use crate::{Error, StoreUrl};

/// Opens the store at `url`, which applies its migrations, and says what was done.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_gateway::{StoreUrl, migrate};
///
/// let dir = tempfile::tempdir()?;
/// let url = StoreUrl::Sqlite(dir.path().join("idem.db"));
/// assert!(migrate::run(&url).await?.starts_with("created"));
/// assert!(migrate::run(&url).await?.ends_with("schema is up to date"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn run(url: &StoreUrl) -> Result<String, Error> {
    match url {
        StoreUrl::Memory => {
            Ok("memory:// keeps nothing on disk: there is nothing to migrate".into())
        }
        StoreUrl::Sqlite(path) => {
            let existed = path.exists();
            url.open().await?;
            Ok(if existed {
                format!("{url}: the idem schema is up to date")
            } else {
                format!("created {url}: the idem schema is up to date")
            })
        }
    }
}
