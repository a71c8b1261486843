//! `idem migrate`: creates the store's schema, or brings it up to date.
//!
//! SQLite files are migrated whenever they are opened; a PostgreSQL or MySQL table only by this
//! command (`idem serve` refuses to start on a table without its migrations); memory and Redis
//! stores have no schema.

use idem_mysql::MysqlStore;
use idem_postgres::{Migration, PostgresStore};

use crate::{Error, StoreUrl};

/// Applies the migrations the store at `url` lacks, and says what was done.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_gateway::{StoreUrl, store::migrate};
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
        StoreUrl::Postgres(options) => {
            let failed = |error: idem_postgres::Error| Error::OpenStore {
                url: url.to_string(),
                source: error.into(),
            };
            let pool = options
                .clone()
                .pool_size(2)
                .connect_pool()
                .await
                .map_err(failed)?;
            let done = PostgresStore::migrate(&pool, options).await;
            pool.close().await;
            let table = format!(r#""{}"."{}""#, options.schema_name(), options.table_name());
            Ok(match done.map_err(failed)? {
                Migration::Created => format!("created the idem table {table} in {url}"),
                Migration::Applied { from } => {
                    format!("applied the idem migrations from version {from} to {table} in {url}")
                }
                _ => format!("{url}: the idem table {table} is up to date"),
            })
        }
        StoreUrl::Mysql(options) => {
            let failed = |error: idem_mysql::Error| Error::OpenStore {
                url: url.to_string(),
                source: error.into(),
            };
            let pool = options
                .clone()
                .pool_size(2)
                .connect_pool()
                .await
                .map_err(failed)?;
            let done = MysqlStore::migrate(&pool, options).await;
            pool.close().await;
            let table = format!("`{}`", options.table_name());
            Ok(match done.map_err(failed)? {
                idem_mysql::Migration::Created => {
                    format!("created the idem table {table} in {url}")
                }
                idem_mysql::Migration::Applied { from } => {
                    format!("applied the idem migrations from version {from} to {table} in {url}")
                }
                _ => format!("{url}: the idem table {table} is up to date"),
            })
        }
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
