//! The service's routes, one handler module each.
//!
//! Kept apart from [`App`] so that the handlers depend on the state and the routes on both,
//! never the state on its handlers.

use axum::{
    Router,
    routing::{post, put},
};

use crate::{App, accounts, charges, payments, refunds};

impl App {
    /// The routes:
    ///
    /// - `PUT /accounts/{id}` with `{"balance": n}`: creates the account, once;
    /// - `POST /accounts/{id}/charges` with an `Idempotency-Key` and `{"amount": n}`: charges it;
    /// - `POST /accounts/{id}/payments` with an `Idempotency-Key`, an `Idempotency-Token` and
    ///   `{"amount": n}`: charges it behind an idem gateway, fenced by the token;
    /// - `POST /charges/{id}/refund`: refunds a charge, once.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/accounts/{id}", put(accounts::create))
            .route("/accounts/{id}/charges", post(charges::charge))
            .route("/accounts/{id}/payments", post(payments::pay))
            .route("/charges/{id}/refund", post(refunds::refund))
            .with_state(self.clone())
    }
}
