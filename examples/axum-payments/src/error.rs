//! [`AppError`]: what makes a request fail before anything is committed.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use idem_core::{KeyError, StoreError};

use crate::Step;

/// A request failed; its transaction, if any, rolled back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The `Idempotency-Key` header is missing or invalid.
    #[error("a valid Idempotency-Key header is required")]
    Key(#[source] Option<KeyError>),
    /// The fencing header is missing, repeated or not a number (`POST /accounts/{id}/payments`).
    #[error("one Idempotency-Token header with the request's fencing token is required")]
    Token,
    /// The request body is not the expected JSON.
    #[error("the request body is invalid")]
    Body(#[source] serde_json::Error),
    /// The database failed.
    #[error("the database failed")]
    Database(#[from] sqlx::Error),
    /// A database-level pattern failed (the database, or a race to retry).
    #[error("the database failed")]
    Pattern(#[from] idem_postgres::patterns::Error),
    /// The idempotency store failed or the key's lease was lost.
    #[error("the idempotency store failed")]
    Store(#[from] StoreError),
    /// A failure injected by the tests.
    #[error("injected failure at {0:?}")]
    Injected(Step),
}

impl From<Step> for AppError {
    fn from(step: Step) -> Self {
        AppError::Injected(step)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = match &self {
            AppError::Key(_) | AppError::Token | AppError::Body(_) => StatusCode::BAD_REQUEST,
            AppError::Store(StoreError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Pattern(error) if error.is_retry() => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Database(_)
            | AppError::Pattern(_)
            | AppError::Store(_)
            | AppError::Injected(_) => {
                tracing::error!(error = &self as &dyn std::error::Error, "request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let mut response = (status, self.to_string()).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let retry = HeaderValue::from_static("1");
            response.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        response
    }
}
