//! A payment behind an idem gateway: the charge's work, made safe against late writes by the
//! fencing token the gateway sends (`idem serve --fencing-header Idempotency-Token`, or
//! idem-http's `IdempotencyLayer::fencing_header` in process).
//!
//! The gateway runs each key once at a time, but a request whose gateway froze (a pause, a
//! partition from its store) past its lease can still reach this service after a retry took the
//! key over and finished. Its token is then smaller than the retry's, and the write is refused.
//! In one transaction:
//!
//! 1. the fence: the largest token seen for the key is kept in `payment_fences`; a smaller one
//!    gets `409` and nothing is written;
//! 2. a charge that an earlier holder of the key made (it wrote, then lost its lease before the
//!    gateway recorded the answer) is answered again, with the account's balance now, rather
//!    than made twice;
//! 3. otherwise the account is debited and the charge inserted, as `POST
//!    /accounts/{id}/charges` does.
//!
//! The fence's row lock orders two holders of one key: the second waits for the first's commit,
//! then sees its token and its charge.

use std::num::NonZeroU32;

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use idem_core::{Address, StoredResponse};
use serde::Deserialize;
use serde_json::json;
use sqlx::PgConnection;

use crate::{
    App, AppError, Step,
    charges::{address, debit, respond},
};

/// The header that carries the fencing token: what `--fencing-header` names.
pub const FENCING_HEADER: &str = "idempotency-token";

#[derive(Deserialize)]
struct PaymentRequest {
    amount: NonZeroU32,
}

/// `POST /accounts/{id}/payments`: see the module's documentation for the steps.
pub(crate) async fn pay(
    State(app): State<App>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, AppError> {
    let app = app.inner();
    let address = address(&headers)?;
    let token = token(&headers)?;
    let request: PaymentRequest = serde_json::from_slice(&body).map_err(AppError::Body)?;
    // Where the tests stall a payment, as a paused process would, to make its write late.
    app.faults.hold(Step::BeforePayment).await;

    let mut tx = app.pool.begin().await?;
    if !fence(&mut tx, &address, token).await? {
        return Ok(stale(token));
    }
    let stored = match earlier_charge(&mut tx, &account, &address).await? {
        Some(stored) => stored,
        None => debit(&mut tx, &account, request.amount, &address).await?,
    };
    tx.commit().await?;
    Ok(respond(stored, false))
}

/// The request's fencing token: one header, a decimal number that fits in a `bigint`.
fn token(headers: &HeaderMap) -> Result<i64, AppError> {
    let mut values = headers.get_all(FENCING_HEADER).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(AppError::Token);
    };
    value
        .to_str()
        .ok()
        .and_then(|value| value.parse().ok())
        .ok_or(AppError::Token)
}

/// Raises the key's fence to `token`, unless it is already higher: `false` then (the request's
/// lease was taken over). Holds the fence's row until the transaction ends.
async fn fence(tx: &mut PgConnection, address: &Address, token: i64) -> Result<bool, sqlx::Error> {
    let raised: Option<i64> = sqlx::query_scalar(
        "INSERT INTO payment_fences (key_scope, key, token) VALUES ($1, $2, $3)
         ON CONFLICT (key_scope, key) DO UPDATE SET token = EXCLUDED.token
             WHERE payment_fences.token <= EXCLUDED.token
         RETURNING token",
    )
    .bind(address.scope.as_bytes().as_slice())
    .bind(address.key.as_str())
    .bind(token)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(raised.is_some())
}

/// The answer to a charge already made under this key on `account`, if there is one.
async fn earlier_charge(
    tx: &mut PgConnection,
    account: &str,
    address: &Address,
) -> Result<Option<StoredResponse>, sqlx::Error> {
    let charge: Option<(i64, i64)> = sqlx::query_as(
        "SELECT charges.id, accounts.balance FROM charges
         JOIN accounts ON accounts.id = charges.account_id
         WHERE charges.key_scope = $1 AND charges.key = $2 AND charges.account_id = $3",
    )
    .bind(address.scope.as_bytes().as_slice())
    .bind(address.key.as_str())
    .bind(account)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(charge.map(|(charge, balance)| {
        StoredResponse::new(201)
            .header("content-type", "application/json")
            .body(json!({ "charge": charge, "balance": balance }).to_string())
    }))
}

/// 409: a newer holder of the key has written; this request's lease was taken over.
fn stale(token: i64) -> Response {
    let body = json!({ "error": "stale fencing token", "token": token });
    (StatusCode::CONFLICT, axum::Json(body)).into_response()
}
