//! Refunding a charge: a conditional state transition, without an idempotency key.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use idem_postgres::{
    TableName,
    patterns::{Table, Transition, Transitioned},
};
use serde_json::json;

use crate::{App, AppError};

const CHARGES: Table = Table::new(TableName::from_static("charges"));

/// What a refund needs of its charge.
#[derive(sqlx::FromRow)]
struct Charge {
    account_id: String,
    amount: i64,
}

/// `POST /charges/{id}/refund`: the [`Transition`] of the charge from `succeeded` to `refunded`,
/// and the credit, in one transaction. Only the request that applied the transition credits the
/// account (200); any other finds it already refunded (409), or unknown (404).
pub(crate) async fn refund(
    State(app): State<App>,
    Path(id): Path<i64>,
) -> Result<Response, AppError> {
    let mut tx = app.inner().pool.begin().await?;
    let refunded = Transition::new(&CHARGES)
        .key("id", id)
        .state("status", "succeeded", "refunded")
        .run(&mut tx)
        .await?;
    let charge: Charge = match refunded {
        Transitioned::Applied(charge) => charge,
        Transitioned::AlreadyApplied(_) | Transitioned::Conflict { .. } => {
            return Ok(StatusCode::CONFLICT.into_response());
        }
        Transitioned::NotFound => return Ok(StatusCode::NOT_FOUND.into_response()),
    };
    let balance: i64 = sqlx::query_scalar(
        "UPDATE accounts SET balance = balance + $2 WHERE id = $1 RETURNING balance",
    )
    .bind(&charge.account_id)
    .bind(charge.amount)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Json(json!({ "refunded": id, "balance": balance })).into_response())
}
