//! Creating an account: deduplicated by its natural key, without an idempotency key.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use idem_postgres::{
    TableName,
    patterns::{Insert, Inserted, Table},
};
use serde::{Deserialize, Serialize};

use crate::{App, AppError};

const ACCOUNTS: Table = Table::new(TableName::from_static("accounts"));

#[derive(Deserialize)]
pub(crate) struct NewAccount {
    balance: i64,
}

/// An account as stored.
#[derive(Serialize, sqlx::FromRow)]
pub(crate) struct Account {
    id: String,
    balance: i64,
}

/// `PUT /accounts/{id}`: [`Insert::once`] by the account's id. Created: 201 with the account;
/// already there: 200 with the account as it was, unchanged.
pub(crate) async fn create(
    State(app): State<App>,
    Path(id): Path<String>,
    Json(account): Json<NewAccount>,
) -> Result<(StatusCode, Json<Account>), AppError> {
    let mut connection = app.inner().pool.acquire().await?;
    let created = Insert::new(&ACCOUNTS)
        .key("id", id)
        .value("balance", account.balance)
        .once(&mut connection)
        .await?;
    Ok(match created {
        Inserted::Inserted(account) => (StatusCode::CREATED, Json(account)),
        Inserted::AlreadyThere(account) => (StatusCode::OK, Json(account)),
    })
}
