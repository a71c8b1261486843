//! Serves the example report API on 127.0.0.1:3000, keys in `reports-idem.db`, an event every
//! half second.

use std::{sync::Arc, time::Duration};

use axum_events::{Reports, app};
use idem_sqlite::SqliteStore;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let store = SqliteStore::open("reports-idem.db").await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("report API on http://{}", listener.local_addr()?);
    let reports = Arc::new(Reports::new(Duration::from_millis(500)));
    axum::serve(listener, app(store, reports))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
