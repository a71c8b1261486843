//! The admin listener of `idem relay`: `/healthz` and the dashboard's page and files (`GET /`,
//! see [`dashboard`](crate::dashboard)), always open, and `/metrics` and `/v1/outbox`, which
//! need the admin token when there is one (see [`AdminToken`]).
//!
//! `GET /v1/outbox` answers the counts of the outbox the relay publishes, as JSON:
//! `{"due":3,"in_flight":1,"dead_letters":2,"oldest_due":"2026-12-02T10:00:00.000Z"}`, with
//! `oldest_due` absent when no message is due (see [`OutboxCounts`] for what each count is).
//! When the database fails, does not answer within 5 s, or has not been reached yet, it is a 503
//! problem `outbox-unavailable`.

use std::{
    sync::{Arc, OnceLock},
    time::{Duration, SystemTime},
};

use axum::{
    Json, Router,
    response::{IntoResponse, Response},
    routing::get,
};
use futures_util::future::BoxFuture;
use idem_messaging::{Outbox, OutboxCounts, OutboxDatabase};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use sqlx::Pool;
use tokio::sync::Semaphore;

use crate::{
    AdminToken,
    admin::{dashboard, protect},
    error::problem::AdminRejection,
};

/// How long `/v1/outbox` waits for the counts, its turn included.
const COUNTS_TIMEOUT: Duration = Duration::from_secs(5);

/// The relay's admin routes, serving `metrics` and the counts of `outbox`.
pub(super) fn router(
    metrics: PrometheusHandle,
    outbox: OutboxProbe,
    token: Option<AdminToken>,
    allowed_hosts: &[String],
) -> Router {
    let protected = Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .route("/v1/outbox", get(move || outbox_counts(outbox.clone())));
    protect(protected, token, allowed_hosts)
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(dashboard::relay())
}

/// Counts an outbox's messages.
type Count =
    Box<dyn Fn() -> BoxFuture<'static, Result<OutboxCounts, idem_messaging::Error>> + Send + Sync>;

/// The outbox the relay publishes, on the relay's own pool, for `/v1/outbox` to count: empty
/// until the relay has connected to its database. Clones share it.
#[derive(Clone)]
pub(super) struct OutboxProbe {
    count: Arc<OnceLock<Count>>,
    /// One count at a time, so that the endpoint never takes more than one of the relay's
    /// connections, however often it is called.
    turn: Arc<Semaphore>,
}

impl OutboxProbe {
    pub(super) fn new() -> Self {
        Self {
            count: Arc::new(OnceLock::new()),
            turn: Arc::new(Semaphore::new(1)),
        }
    }

    /// Counts `outbox` on `pool` from now on (the first call only: a process runs one relay).
    pub(super) fn set<DB: OutboxDatabase>(&self, pool: Pool<DB>, outbox: Outbox<DB>) {
        let _ = self.count.set(Box::new(move || {
            let (pool, outbox) = (pool.clone(), outbox.clone());
            Box::pin(async move { outbox.counts(&pool).await })
        }));
    }
}

/// `/v1/outbox`'s answer.
#[derive(Debug, PartialEq, Eq, Serialize)]
struct OutboxView {
    due: u64,
    in_flight: u64,
    dead_letters: u64,
    /// RFC 3339 with milliseconds, UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_due: Option<String>,
}

impl From<OutboxCounts> for OutboxView {
    fn from(counts: OutboxCounts) -> Self {
        Self {
            due: counts.due,
            in_flight: counts.in_flight,
            dead_letters: counts.dead_letters,
            oldest_due: counts.oldest_due.map(rfc3339),
        }
    }
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// `GET /v1/outbox`: the outbox's counts, or 503 `outbox-unavailable`.
async fn outbox_counts(probe: OutboxProbe) -> Response {
    let Some(count) = probe.count.get() else {
        return AdminRejection::OutboxUnavailable.into_response();
    };
    let counted = tokio::time::timeout(COUNTS_TIMEOUT, async {
        let _turn = probe.turn.acquire().await;
        count().await
    })
    .await;
    match counted {
        Ok(Ok(counts)) => Json(OutboxView::from(counts)).into_response(),
        Ok(Err(error)) => {
            tracing::warn!(
                error = &error as &dyn std::error::Error,
                "admin: cannot count the outbox's messages"
            );
            AdminRejection::OutboxUnavailable.into_response()
        }
        Err(_) => {
            tracing::warn!(
                timeout = ?COUNTS_TIMEOUT,
                "admin: the outbox's messages were not counted in time"
            );
            AdminRejection::OutboxUnavailable.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use idem_messaging::{OutboxOptions, SqliteOutbox};
    use metrics_exporter_prometheus::PrometheusBuilder;
    use tower::ServiceExt;

    use super::*;

    /// A pool on a database in memory: one connection, since each has a database of its own.
    async fn memory() -> sqlx::SqlitePool {
        sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap()
    }

    async fn get_outbox(probe: OutboxProbe) -> (StatusCode, String, String) {
        get_outbox_as(probe, "localhost:9091").await
    }

    /// `GET /v1/outbox` under `Host: host`, from a listener without a token.
    async fn get_outbox_as(probe: OutboxProbe, host: &str) -> (StatusCode, String, String) {
        let metrics = PrometheusBuilder::new().build_recorder().handle();
        let request = Request::get("/v1/outbox")
            .header("host", host)
            .body(Body::empty())
            .unwrap();
        let response = router(metrics, probe, None, &["relay.internal".to_owned()])
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[test]
    fn the_oldest_due_time_is_rfc3339_in_milliseconds_and_absent_when_none_is_due() {
        let view = OutboxView {
            due: 3,
            in_flight: 1,
            dead_letters: 2,
            oldest_due: Some(rfc3339(
                SystemTime::UNIX_EPOCH + Duration::from_micros(1_796_205_600_000_999),
            )),
        };
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"due":3,"in_flight":1,"dead_letters":2,"oldest_due":"2026-12-02T10:00:00.000Z"}"#
        );
        let idle = OutboxView {
            due: 0,
            in_flight: 0,
            dead_letters: 0,
            oldest_due: None,
        };
        assert_eq!(
            serde_json::to_string(&idle).unwrap(),
            r#"{"due":0,"in_flight":0,"dead_letters":0}"#
        );
    }

    /// `GET /v1/outbox` answers a 503 `outbox-unavailable` problem.
    async fn assert_outbox_unavailable(probe: OutboxProbe) {
        let (status, content_type, body) = get_outbox(probe).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(content_type, "application/problem+json");
        assert!(
            body.contains(r#""type":"urn:idem:problem:outbox-unavailable""#),
            "{body}"
        );
    }

    #[tokio::test]
    async fn without_a_token_only_loopback_and_allowed_hosts_get_the_counts() {
        let (status, _, body) = get_outbox_as(OutboxProbe::new(), "rebound.example").await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
        assert!(
            body.contains(r#""type":"urn:idem:problem:host-not-allowed""#),
            "{body}"
        );
        // An allowed host passes the check; the relay has no database yet.
        let (status, ..) = get_outbox_as(OutboxProbe::new(), "relay.internal:9091").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn before_the_relay_reaches_its_database_the_counts_are_a_503_problem() {
        assert_outbox_unavailable(OutboxProbe::new()).await;
    }

    #[tokio::test]
    async fn a_database_failure_is_a_503_problem() {
        // An outbox never migrated: its table does not exist.
        let pool = memory().await;
        let probe = OutboxProbe::new();
        probe.set(pool, SqliteOutbox::new(OutboxOptions::new()));
        assert_outbox_unavailable(probe).await;
    }

    #[tokio::test]
    async fn the_counts_of_an_empty_outbox_are_zeros_without_an_oldest_due_time() {
        let pool = memory().await;
        let outbox = SqliteOutbox::new(OutboxOptions::new());
        outbox.migrate(&pool).await.unwrap();
        let probe = OutboxProbe::new();
        probe.set(pool, outbox);
        let (status, content_type, body) = get_outbox(probe).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "application/json");
        assert_eq!(body, r#"{"due":0,"in_flight":0,"dead_letters":0}"#);
    }
}
