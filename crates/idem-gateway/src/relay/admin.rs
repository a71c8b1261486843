//! The admin listener of `idem relay`: `/healthz`, always open, and `/metrics`, which needs the
//! admin token when there is one (see [`AdminToken`]).

use axum::{Router, routing::get};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::{AdminToken, admin_auth};

/// The relay's admin routes, serving `metrics`.
pub(super) fn router(metrics: PrometheusHandle, token: Option<AdminToken>) -> Router {
    let protected = Router::new().route(
        "/metrics",
        get(move || std::future::ready(metrics.render())),
    );
    admin_auth::protect(protected, token).route("/healthz", get(|| async { "ok\n" }))
}
