//! The payments service: `DATABASE_URL=postgres://… cargo run -p axum-payments`, then
//!
//! ```text
//! curl -X PUT localhost:3000/accounts/alice -H 'content-type: application/json' -d '{"balance":1000}'
//! curl localhost:3000/accounts/alice/charges -H 'idempotency-key: pay-1' \
//!      -H 'content-type: application/json' -d '{"amount":250}'
//! ```

use anyhow::Context;
use axum_payments::App;
use idem_postgres::PostgresOptions;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("set DATABASE_URL to a PostgreSQL URL")?;
    let address = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .test_before_acquire(false)
        .connect(&url)
        .await?;
    let app = App::new(pool, PostgresOptions::new()).await?;
    let purger = app
        .store()
        .spawn_purger(std::time::Duration::from_secs(60), 1_000);
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("listening on http://{address}");
    axum::serve(listener, app.router()).await?;
    purger.stop().await;
    Ok(())
}
