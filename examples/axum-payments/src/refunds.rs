//! Refunding a charge: a conditional state transition, without an idempotency key.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::{App, AppError};

/// `POST /charges/{id}/refund`: `UPDATE charges SET status = 'refunded' WHERE id = $1 AND status =
/// 'succeeded'`, and the credit, in one transaction. Only the request whose update changed the row
/// credits the account (200); any other finds it already refunded (409), or unknown (404).
pub(crate) async fn refund(
    State(app): State<App>,
    Path(id): Path<i64>,
) -> Result<Response, AppError> {
    let mut tx = app.inner().pool.begin().await?;
    let refunded: Option<(String, i64)> = sqlx::query_as(
        "UPDATE charges SET status = 'refunded' WHERE id = $1 AND status = 'succeeded'
         RETURNING account_id, amount",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((account, amount)) = refunded else {
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM charges WHERE id = $1)")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
        let status = if exists {
            StatusCode::CONFLICT
        } else {
            StatusCode::NOT_FOUND
        };
        return Ok(status.into_response());
    };
    let balance: i64 = sqlx::query_scalar(
        "UPDATE accounts SET balance = balance + $2 WHERE id = $1 RETURNING balance",
    )
    .bind(&account)
    .bind(amount)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "refunded": id, "balance": balance })).into_response())
}
