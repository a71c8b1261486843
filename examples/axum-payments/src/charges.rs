//! Charging an account: the business writes and the key's completion in one transaction.

use std::{num::NonZeroU32, time::Duration};

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use idem_core::{
    Acquisition, Address, Fingerprint, FingerprintMode, IdempotencyKey, Outcome, Scope,
    StoredResponse,
};
use serde::Deserialize;
use serde_json::json;
use sqlx::PgConnection;

use crate::{App, AppError, Step};

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

#[derive(Deserialize)]
struct ChargeRequest {
    amount: NonZeroU32,
}

/// `POST /accounts/{id}/charges`: see the crate's documentation for the steps.
pub(crate) async fn charge(
    State(app): State<App>,
    Path(account): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, AppError> {
    let app = app.inner();
    let address = address(&headers)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let fingerprint = Fingerprint::builder(FingerprintMode::Json)
        .method(method.as_str())
        .path(uri.path())
        .query(uri.query())
        .body(content_type, &body);
    let request: ChargeRequest = serde_json::from_slice(&body).map_err(AppError::Body)?;

    let mut tx = app.pool.begin().await?;
    // A duplicate of a charge in progress waits for its transaction: not forever.
    sqlx::query("SET LOCAL lock_timeout = '5s'")
        .execute(&mut *tx)
        .await?;
    let lease = match app
        .store
        .acquire_in(&mut tx, &address, &fingerprint, app.terms)
        .await?
    {
        Acquisition::Acquired(lease) => lease,
        Acquisition::Completed(Outcome::Response(stored)) => return Ok(respond(stored, true)),
        // This service never records an unknown outcome: every charge commits with its key.
        Acquisition::Completed(Outcome::Unknown) => {
            return Ok(StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        Acquisition::InFlight { retry_after } => return Ok(in_flight(retry_after)),
        Acquisition::Mismatch => return Ok(StatusCode::UNPROCESSABLE_ENTITY.into_response()),
    };
    app.faults.check(Step::BeforeCharge)?;
    let stored = debit(&mut tx, &account, request.amount, &address).await?;
    app.faults.check(Step::AfterCharge)?;
    app.store
        .complete_in(
            &mut tx,
            &address,
            lease.token,
            &stored.clone().into(),
            app.terms.ttl,
        )
        .await?;
    app.faults.check(Step::BeforeCommit)?;
    tx.commit().await?;
    Ok(respond(stored, false))
}

/// The key in the caller's scope (a hash of its `Authorization` header).
pub(crate) fn address(headers: &HeaderMap) -> Result<Address, AppError> {
    let mut keys = headers.get_all(IDEMPOTENCY_KEY).iter();
    let (Some(key), None) = (keys.next(), keys.next()) else {
        return Err(AppError::Key(None));
    };
    let key = IdempotencyKey::parse_header(key.as_bytes()).map_err(|e| AppError::Key(Some(e)))?;
    let identity = headers.get_all(header::AUTHORIZATION).iter();
    let scope = Scope::from_identity(identity.map(HeaderValue::as_bytes));
    Ok(Address::new(scope, key))
}

/// Debits the account and records the charge, or says why not; the answer is final either way,
/// so it is what the key keeps.
pub(crate) async fn debit(
    tx: &mut PgConnection,
    account: &str,
    amount: NonZeroU32,
    address: &Address,
) -> Result<StoredResponse, sqlx::Error> {
    let amount = i64::from(amount.get());
    let balance: Option<i64> = sqlx::query_scalar(
        "UPDATE accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2
         RETURNING balance",
    )
    .bind(account)
    .bind(amount)
    .fetch_optional(&mut *tx)
    .await?;
    let (status, body) = match balance {
        Some(balance) => {
            let charge: i64 = sqlx::query_scalar(
                "INSERT INTO charges (account_id, amount, key_scope, key) VALUES ($1, $2, $3, $4)
                 RETURNING id",
            )
            .bind(account)
            .bind(amount)
            .bind(address.scope.as_bytes().as_slice())
            .bind(address.key.as_str())
            .fetch_one(&mut *tx)
            .await?;
            (201, json!({ "charge": charge, "balance": balance }))
        }
        None => {
            let exists: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)")
                    .bind(account)
                    .fetch_one(&mut *tx)
                    .await?;
            if exists {
                (402, json!({ "error": "insufficient funds" }))
            } else {
                (404, json!({ "error": "no such account" }))
            }
        }
    };
    Ok(StoredResponse::new(status)
        .header("content-type", "application/json")
        .body(body.to_string()))
}

/// The response, as first sent or replayed.
pub(crate) fn respond(stored: StoredResponse, replayed: bool) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, stored.body).into_response();
    let headers = response.headers_mut();
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name),
            HeaderValue::from_maybe_shared(value),
        ) {
            headers.append(name, value);
        }
    }
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// 409 while another request holds the key (not in this service's single-transaction flow,
/// where duplicates wait; kept for keys acquired elsewhere).
fn in_flight(retry_after: Duration) -> Response {
    let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
    let mut response = StatusCode::CONFLICT.into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}
