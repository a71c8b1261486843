//! The admin listener: health, readiness, metrics, and the records of single keys.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /healthz` | 200: the process is up |
//! | `GET /readyz` | 200 when the store answers a ping, 503 otherwise (and while shutting down) |
//! | `GET /metrics` | Prometheus text |
//! | `GET /v1/keys/{key}?scope=HEX` | the record as JSON ([`RecordView`]); 404 when there is none |
//! | `DELETE /v1/keys/{key}?scope=HEX&force=true` | 204: the record is forgotten; 404 when there was none; 409 when a request holds the key, unless `force=true` |
//!
//! `scope` is the scope hash in hex, as the logs show it; without it, the anonymous scope. A bad
//! key, scope or `force` is a 400. Errors are problem+json. With an admin token, every route but
//! the probes needs it ([`AdminToken`](crate::AdminToken)).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{Path, Query, State},
    response::{IntoResponse, Response},
    routing::get,
};
use http::{HeaderValue, StatusCode, header::CONTENT_TYPE};
use idem_core::{Address, IdempotencyKey, Scope, Store};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;

use idem_core::time_limit::within;

use crate::{
    AdminToken, GatewayStore, RecordView, admin_auth,
    forget::{Forgotten, forget},
    problem::AdminRejection,
};

/// How long `/readyz` waits for the store's ping.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// What the admin handlers share.
#[derive(Clone)]
pub(crate) struct AdminState {
    pub(crate) store: GatewayStore,
    pub(crate) metrics: PrometheusHandle,
    /// Set once the gateway stops taking requests.
    pub(crate) draining: Arc<AtomicBool>,
    /// The time limit of the lookups and deletions.
    pub(crate) store_timeout: Duration,
}

/// The admin routes; with a token, all but the probes need it.
pub(crate) fn router(state: AdminState, token: Option<AdminToken>) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/keys/{key}", get(show_key).delete(forget_key));
    admin_auth::protect(protected, token)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn readyz(State(state): State<AdminState>) -> Response {
    if state.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match tokio::time::timeout(PING_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n").into_response(),
        Ok(Err(error)) => {
            tracing::warn!(
                error = &error as &(dyn std::error::Error + 'static),
                "readiness: the store failed"
            );
            (StatusCode::SERVICE_UNAVAILABLE, "store unreachable\n").into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "store unreachable\n").into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// The `?scope=HEX` query.
#[derive(Debug, Deserialize)]
pub(crate) struct ScopeQuery {
    scope: Option<String>,
}

/// The `?force=true` of `DELETE`.
#[derive(Debug, Deserialize)]
pub(crate) struct ForceQuery {
    force: Option<String>,
}

/// The address named by a key path segment and an optional scope.
fn address(key: &str, query: &ScopeQuery) -> Result<Address, AdminRejection> {
    let key = IdempotencyKey::parse_header(key.as_bytes()).map_err(AdminRejection::InvalidKey)?;
    let scope = match &query.scope {
        None => Scope::ANONYMOUS,
        Some(hex) => hex.parse().map_err(|_| AdminRejection::InvalidScope)?,
    };
    Ok(Address::new(scope, key))
}

fn store_failed(error: &idem_core::StoreError) -> Response {
    tracing::error!(
        error = error as &(dyn std::error::Error + 'static),
        "admin: the store failed"
    );
    match error {
        idem_core::StoreError::Corrupted(_) => AdminRejection::RecordCorrupted,
        _ => AdminRejection::StoreUnavailable,
    }
    .into_response()
}

async fn show_key(
    State(state): State<AdminState>,
    Path(key): Path<String>,
    Query(query): Query<ScopeQuery>,
) -> Response {
    let address = match address(&key, &query) {
        Ok(address) => address,
        Err(bad) => return bad.into_response(),
    };
    match within(state.store_timeout, state.store.get(&address)).await {
        Ok(Some(record)) => Json(RecordView::new(&address, &record)).into_response(),
        Ok(None) => AdminRejection::KeyNotFound.into_response(),
        Err(error) => store_failed(&error),
    }
}

async fn forget_key(
    State(state): State<AdminState>,
    Path(key): Path<String>,
    Query(query): Query<ScopeQuery>,
    Query(force): Query<ForceQuery>,
) -> Response {
    let address = match address(&key, &query) {
        Ok(address) => address,
        Err(bad) => return bad.into_response(),
    };
    let force = match force.force.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return AdminRejection::InvalidForce.into_response(),
    };
    match within(state.store_timeout, forget(&state.store, &address, force)).await {
        Ok(Forgotten::Removed) => {
            tracing::info!(key = %address.key.digest(), scope = %address.scope.digest(), force, "admin: key forgotten");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Forgotten::NotFound) => AdminRejection::KeyNotFound.into_response(),
        Ok(Forgotten::Processing) => AdminRejection::KeyProcessing.into_response(),
        Err(error) => store_failed(&error),
    }
}
