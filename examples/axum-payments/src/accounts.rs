//! Creating an account: deduplicated by its natural key, without an idempotency key.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Deserialize;

use crate::{App, AppError};

#[derive(Deserialize)]
pub(crate) struct NewAccount {
    balance: i64,
}

/// `PUT /accounts/{id}`: `INSERT … ON CONFLICT (id) DO NOTHING`. One row inserted: 201 Created;
/// none: the account already existed, and is left as it was (200).
pub(crate) async fn create(
    State(app): State<App>,
    Path(id): Path<String>,
    Json(account): Json<NewAccount>,
) -> Result<StatusCode, AppError> {
    let inserted = sqlx::query(
        "INSERT INTO accounts (id, balance) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
    )
    .bind(&id)
    .bind(account.balance)
    .execute(&app.inner().pool)
    .await?;
    Ok(match inserted.rows_affected() {
        0 => StatusCode::OK,
        _ => StatusCode::CREATED,
    })
}
