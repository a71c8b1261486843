//! Serves the example orders API on 127.0.0.1:3000, keys in `orders-idem.db`.

use std::sync::Arc;

use axum_sqlite::{Orders, app};
use idem_sqlite::SqliteStore;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let store = SqliteStore::open("orders-idem.db").await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("orders API on http://{}", listener.local_addr()?);
    axum::serve(listener, app(store, Arc::new(Orders::default())))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
