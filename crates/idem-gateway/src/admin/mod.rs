//! The admin listener: health, readiness, metrics, and the records of single keys.
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /healthz` | 200: the process is up |
//! | `GET /readyz` | 200 when the store answers a ping, 503 otherwise (and while shutting down) |
//! | `GET /metrics` | Prometheus text |
//! | `GET /v1/keys?state=…&older_than=…&scope=HEX&limit=…&cursor=…` | one page of live records, newest first ([`KeyList`]) |
//! | `GET /v1/keys/{key}?scope=HEX` | the record as JSON ([`RecordView`]); 404 when there is none |
//! | `DELETE /v1/keys/{key}?scope=HEX&force=true` | 204: the record is forgotten; 404 when there was none; 409 when a request holds the key, unless `force=true` |
//! | `GET /v1/stats` | the last census of the records and the store's latency over the last minute ([`Stats`]) |
//! | `GET /openapi.json` | the OpenAPI 3.1 document of these routes ([`openapi`]) |
//! | `GET /`, `/dashboard.js`, `/dashboard.css`, `/favicon.png` | the live dashboard, which reads the routes above ([`dashboard`](self::dashboard)) |
//!
//! `scope` is the scope hash in hex, as the logs show it; without it, the anonymous scope. A bad
//! key, scope or `force` is a 400. Errors are problem+json. With an admin token, every route but
//! the probes, the document and the dashboard's static files needs it
//! ([`AdminToken`](crate::AdminToken)).

mod auth;
mod census;
pub(crate) mod dashboard;
mod forget;
mod openapi;
mod record_view;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime},
};

use axum::{
    Json, Router,
    extract::{FromRequestParts, Path, Query, State, rejection::PathRejection},
    response::{IntoResponse, Response},
    routing::get,
};
use http::{HeaderValue, StatusCode, Uri, header::CONTENT_TYPE, request::Parts};
use idem_core::{
    Address, IdempotencyKey, ListQuery, Scope, StateFilter, Store, StoreError, Timestamp,
    time_limit::within,
};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

pub use self::auth::AdminToken;
use self::openapi::{
    ForgetKeyProblems, ListKeysProblems, MetricsProblems, ShowKeyProblems, StatsProblems,
};
use self::record_view::rfc3339;
pub(crate) use self::{
    auth::{UNAUTHORIZED, protect},
    census::{CensusKeeper, LEASE, OLDEST_PROCESSING_AGE, RECORDS},
    forget::{Forgotten, forget},
    record_view::{KeyList, ListedView, RecordView, stream_of},
};
use crate::{
    HumanDuration,
    error::problem::AdminRejection,
    store::{GatewayStore, LatencyWindow},
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
    /// The time limit of the lookups, listings and deletions.
    pub(crate) store_timeout: Duration,
    /// The last census of the store's records.
    pub(crate) census: Arc<CensusKeeper>,
}

/// The admin routes; with a token, all but the probes and the OpenAPI document need it; without
/// one, they answer only loopback hosts and `allowed_hosts`.
pub(crate) fn router(
    state: AdminState,
    token: Option<AdminToken>,
    allowed_hosts: &[String],
) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/keys", get(list_keys))
        .route("/v1/keys/{key}", get(show_key).delete(forget_key))
        .route("/v1/stats", get(stats));
    auth::protect(protected, token, allowed_hosts)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi_json))
        .merge(dashboard::gateway())
        .with_state(state)
}

/// Liveness: the process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    responses((status = 200, description = "The process is up.", body = String, content_type = "text/plain", example = "ok\n"))
)]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the store answers a ping.
///
/// A load balancer's readiness check: the gateway takes requests while this is 200.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "The store answered a ping.", body = String, content_type = "text/plain", example = "ready\n"),
        (status = 503, description = "The store did not answer (`store unreachable`), or the gateway is shutting down (`shutting down`).", body = String, content_type = "text/plain", example = "store unreachable\n"),
    )
)]
pub(crate) async fn readyz(State(state): State<AdminState>) -> Response {
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

/// The gateway's metrics, in Prometheus' text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "metrics",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Prometheus text exposition format 0.0.4.", body = String, content_type = "text/plain"),
        MetricsProblems,
    )
)]
pub(crate) async fn metrics(State(state): State<AdminState>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// A query string as its name–value pairs. Extracting it never fails, so that a malformed
/// query (a parameter given twice) is answered with the API's own problem, not axum's plain
/// text.
type Pairs = Query<Vec<(String, String)>>;

/// The value of the query parameter `name`, or `repeated` when it is given more than once.
/// Other parameters are ignored.
fn single(
    pairs: &[(String, String)],
    name: &str,
    repeated: AdminRejection,
) -> Result<Option<String>, AdminRejection> {
    let mut values = pairs.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
    match (values.next(), values.next()) {
        (first, None) => Ok(first.cloned()),
        (_, Some(_)) => Err(repeated),
    }
}

/// The `{key}` of `/v1/keys/{key}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct KeyPath {
    /// The idempotency key, as the client sent it in its header (percent-encoded).
    #[param(min_length = 1, example = "order-42")]
    key: String,
}

/// The `?scope=HEX` query.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ScopeQuery {
    /// The scope hash, as the logs show it: 64 hexadecimal digits. Without it, the anonymous
    /// scope.
    #[param(pattern = "^[0-9a-fA-F]{64}$")]
    scope: Option<String>,
}

impl ScopeQuery {
    fn from_pairs(pairs: &[(String, String)]) -> Result<Self, AdminRejection> {
        let scope = single(pairs, "scope", AdminRejection::InvalidScope)?;
        Ok(Self { scope })
    }
}

/// The `?force=true` of `DELETE`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ForceQuery {
    /// `true` forgets a key that a request holds; `false`, the default, refuses it with 409.
    force: Option<bool>,
}

impl ForceQuery {
    fn from_pairs(pairs: &[(String, String)]) -> Result<Self, AdminRejection> {
        let force = match single(pairs, "force", AdminRejection::InvalidForce)?.as_deref() {
            None => None,
            Some("false") => Some(false),
            Some("true") => Some(true),
            Some(_) => return Err(AdminRejection::InvalidForce),
        };
        Ok(Self { force })
    }
}

/// The bytes of the `{key}` segment. axum's `Path` refuses one that is not UTF-8 once
/// percent-decoded, with plain text; its bytes, taken from the URI, go to the key parser
/// instead, which names the byte in an `invalid-key` problem.
fn key_bytes(path: Result<Path<KeyPath>, PathRejection>, uri: &Uri) -> Vec<u8> {
    match path {
        Ok(Path(KeyPath { key })) => key.into_bytes(),
        Err(_) => {
            let segment = uri.path().rsplit('/').next().unwrap_or_default();
            percent_encoding::percent_decode_str(segment).collect()
        }
    }
}

/// The record that `/v1/keys/{key}?scope=HEX` names: the key from the path, the scope from the
/// query (the anonymous scope without one). A bad key or scope is refused with its problem.
pub(crate) struct KeyAddress(Address);

impl<S: Send + Sync> FromRequestParts<S> for KeyAddress {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let path = Path::<KeyPath>::from_request_parts(parts, state).await;
        let Query(pairs) = Pairs::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let key = IdempotencyKey::parse_header(&key_bytes(path, &parts.uri))
            .map_err(|error| AdminRejection::InvalidKey(error).into_response())?;
        let scope = match ScopeQuery::from_pairs(&pairs)
            .map_err(IntoResponse::into_response)?
            .scope
        {
            None => Scope::ANONYMOUS,
            Some(hex) => hex
                .parse()
                .map_err(|_| AdminRejection::InvalidScope.into_response())?,
        };
        Ok(Self(Address::new(scope, key)))
    }
}

fn store_failed(error: &StoreError) -> Response {
    tracing::error!(
        error = error as &(dyn std::error::Error + 'static),
        "admin: the store failed"
    );
    match error {
        StoreError::Corrupted(_) => AdminRejection::RecordCorrupted,
        _ => AdminRejection::StoreUnavailable,
    }
    .into_response()
}

/// The filters, page size and cursor of `GET /v1/keys`.
#[derive(Debug, IntoParams)]
#[expect(
    dead_code,
    reason = "the fields describe the query in the OpenAPI document; `query` reads the pairs"
)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Only records in this state; both without it.
    #[param(inline)]
    state: Option<ListState>,
    /// Only records acquired at least this long ago, by the store's clock: a number and a unit
    /// (`ms`, `s`, `m`, `h`, `d`), such as `5m`.
    #[param(pattern = "^[0-9]+(ms|s|m|h|d)$", example = "5m")]
    older_than: Option<String>,
    /// Only records of this scope: the scope hash, 64 hexadecimal digits.
    #[param(pattern = "^[0-9a-fA-F]{64}$")]
    scope: Option<String>,
    /// At most this many records; 100 without it.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// The `next` cursor of the previous page; the first page without it.
    cursor: Option<String>,
}

/// A record state, as `GET /v1/keys` filters on it.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ListState {
    /// Held by a request (or abandoned, until its lease runs out and the key is taken over).
    Processing,
    /// With a stored outcome.
    Completed,
}

/// How many records a page holds without `limit`.
const DEFAULT_LIMIT: usize = 100;

impl ListParams {
    /// The store's query for these parameters.
    fn query(pairs: &[(String, String)]) -> Result<ListQuery, AdminRejection> {
        let param = |name| {
            single(
                pairs,
                name,
                AdminRejection::InvalidQuery("each parameter is given at most once"),
            )
        };
        let limit = match param("limit")? {
            None => DEFAULT_LIMIT,
            Some(limit) => limit
                .parse::<usize>()
                .ok()
                .filter(|limit| (1..=ListQuery::MAX_LIMIT).contains(limit))
                .ok_or(AdminRejection::InvalidQuery(
                    "limit is a whole number from 1 to 1000",
                ))?,
        };
        let mut query = ListQuery::new(limit);
        if let Some(state) = param("state")? {
            query = query.state(state.parse::<StateFilter>().map_err(|_| {
                AdminRejection::InvalidQuery("state is `processing` or `completed`")
            })?);
        }
        if let Some(age) = param("older_than")? {
            let age = age.parse::<HumanDuration>().map_err(|_| {
                AdminRejection::InvalidQuery(
                    "older_than is a duration: a number and a unit (ms, s, m, h, d), such as 5m",
                )
            })?;
            query = query.older_than(age.0);
        }
        if let Some(scope) = ScopeQuery::from_pairs(pairs)?.scope {
            query = query.scope(scope.parse().map_err(|_| AdminRejection::InvalidScope)?);
        }
        if let Some(cursor) = param("cursor")? {
            query = query.after(cursor.parse().map_err(|_| invalid_cursor())?);
        }
        Ok(query)
    }
}

fn invalid_cursor() -> AdminRejection {
    AdminRejection::InvalidQuery("cursor is the `next` of a page of this listing, unchanged")
}

/// Lists live records, newest first, with filters: the keys stuck `processing` for longer than
/// expected, a tenant's records.
///
/// Stores keep no key in clear, so each record is named by its key's SHA-256 and its scope. A
/// page costs what the store must read for it: an index range on SQLite and PostgreSQL, every
/// record on the memory store, a bounded `SCAN` on Redis (docs/stores.md says more).
#[utoipa::path(
    get,
    path = "/v1/keys",
    tag = "keys",
    params(ListParams),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "One page of live records.", body = KeyList),
        ListKeysProblems,
    )
)]
pub(crate) async fn list_keys(State(state): State<AdminState>, Query(pairs): Pairs) -> Response {
    let query = match ListParams::query(&pairs) {
        Ok(query) => query,
        Err(bad) => return bad.into_response(),
    };
    match within(state.store_timeout, state.store.list(&query)).await {
        Ok(page) => Json(KeyList::new(&page)).into_response(),
        Err(StoreError::InvalidCursor) => invalid_cursor().into_response(),
        Err(error) => store_failed(&error),
    }
}

/// What `GET /v1/stats` answers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Stats {
    /// The last census of the store's records; absent until the first is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    records: Option<RecordCounts>,
    /// Whether this gateway is counting the records now (one gateway of those sharing the
    /// store counts at a time, at most 5% of the store's time).
    counting: bool,
    /// The store's calls on the request path over the last minute.
    store: StoreStats,
}

/// Live records by state, as last counted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecordCounts {
    /// Records being processed, including abandoned ones whose lease nobody took over yet.
    processing: u64,
    /// Completed records.
    completed: u64,
    /// When the oldest processing record was acquired; absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    oldest_processing: Option<String>,
    /// How long ago that was, in seconds, at this answer; absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, nullable = false)]
    oldest_processing_age_seconds: Option<f64>,
    /// When these were counted.
    #[schema(format = DateTime)]
    counted_at: String,
    /// Whether this gateway counted them; `false` when another gateway sharing the store did.
    counted_here: bool,
}

/// The store's calls on the request path over the last minute.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StoreStats {
    /// The window's length, in seconds.
    window_seconds: u64,
    /// Calls in the window.
    calls: u64,
    /// Calls that failed (the store unavailable, full or corrupted).
    errors: u64,
    /// Percentiles of the calls' latency; absent when there were none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    latency_seconds: Option<LatencySeconds>,
}

/// Latency percentiles and the maximum, in seconds, each percentile within 19% of the exact value.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LatencySeconds {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

/// The records by state (counted in the background by one gateway for all, in at most 5% of the
/// store's time) and the store's latency over the last minute.
#[utoipa::path(
    get,
    path = "/v1/stats",
    tag = "stats",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The last census and the last minute's store latency.", body = Stats),
        StatsProblems,
    )
)]
pub(crate) async fn stats(State(state): State<AdminState>) -> Json<Stats> {
    let now = Timestamp::from_system_time(SystemTime::now());
    let records = state.census.latest().map(|counted| RecordCounts {
        processing: counted.census.processing,
        completed: counted.census.completed,
        oldest_processing: counted.census.oldest_processing.map(rfc3339),
        oldest_processing_age_seconds: counted
            .census
            .oldest_processing
            .map(|oldest| now.saturating_since(oldest).as_secs_f64()),
        counted_at: rfc3339(counted.at),
        counted_here: counted.here,
    });
    let window = state.store.last_minute();
    Json(Stats {
        records,
        counting: state.census.counting(),
        store: StoreStats {
            window_seconds: LatencyWindow::LENGTH.as_secs(),
            calls: window.calls,
            errors: window.errors,
            latency_seconds: window.latency.map(|latency| LatencySeconds {
                p50: latency.p50.as_secs_f64(),
                p90: latency.p90.as_secs_f64(),
                p99: latency.p99.as_secs_f64(),
                max: latency.max.as_secs_f64(),
            }),
        },
    })
}

/// The record of one key in one scope.
#[utoipa::path(
    get,
    path = "/v1/keys/{key}",
    tag = "keys",
    params(KeyPath, ScopeQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The live record under this key and scope.", body = RecordView),
        ShowKeyProblems,
    )
)]
pub(crate) async fn show_key(
    State(state): State<AdminState>,
    KeyAddress(address): KeyAddress,
) -> Response {
    match within(state.store_timeout, state.store.get(&address)).await {
        Ok(Some(record)) => {
            let stream = within(state.store_timeout, async {
                Ok(stream_of(&state.store, &address, &record).await)
            })
            .await
            .ok()
            .flatten();
            Json(RecordView::new(&address, &record).with_stream(stream)).into_response()
        }
        Ok(None) => AdminRejection::KeyNotFound.into_response(),
        Err(error) => store_failed(&error),
    }
}

/// Forgets one key in one scope, so that its next request executes.
///
/// A completed key is forgotten at once. A key that a request holds is refused with 409 unless
/// `force=true` is given: the running request's late result is then discarded, and the next
/// request executes, possibly while the first still runs.
#[utoipa::path(
    delete,
    path = "/v1/keys/{key}",
    tag = "keys",
    params(KeyPath, ScopeQuery, ForceQuery),
    security(("admin_token" = [])),
    responses(
        (status = 204, description = "The record is forgotten."),
        ForgetKeyProblems,
    )
)]
pub(crate) async fn forget_key(
    State(state): State<AdminState>,
    KeyAddress(address): KeyAddress,
    Query(pairs): Pairs,
) -> Response {
    let force = match ForceQuery::from_pairs(&pairs) {
        Ok(query) => query.force.unwrap_or(false),
        Err(bad) => return bad.into_response(),
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

/// This document: the OpenAPI 3.1 description of the admin routes.
///
/// Open without the admin token: it describes the routes, the same for every gateway of this
/// version, and reveals no record, metric or setting.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of the admin API.", body = Object, content_type = "application/json"))
)]
pub(crate) async fn openapi_json() -> Response {
    (
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        openapi::document(),
    )
        .into_response()
}
