//! What the test files share: the service in a PostgreSQL schema of its own.

use std::str::FromStr;

use axum_payments::App;
use idem_postgres::PostgresOptions;
use idem_test_support::{PgSchema, Server};
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

/// The service in a schema of its own (its tables and idem's), dropped with `schema`.
pub(crate) struct Started {
    pub(crate) app: App,
    pub(crate) pool: PgPool,
    pub(crate) schema: PgSchema,
}

/// Starts the service, or says why not and gives `None` when no server is configured.
pub(crate) async fn start() -> Option<Started> {
    let url = Server::Postgres.url()?;
    let schema = PgSchema::create(&url).await;
    let connect = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.name())]);
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .test_before_acquire(false)
        .connect_with(connect)
        .await
        .unwrap();
    let options = PostgresOptions::new().schema(schema.name().parse().unwrap());
    let app = App::new(pool.clone(), options).await.unwrap();
    Some(Started { app, pool, schema })
}
