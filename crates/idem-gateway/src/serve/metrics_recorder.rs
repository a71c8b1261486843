//! The process-wide Prometheus recorder behind `GET /metrics`.

use std::{sync::OnceLock, time::Duration};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use tokio_util::sync::CancellationToken;

use crate::{
    admin::{LEASE, OLDEST_PROCESSING_AGE, RECORDS, UNAUTHORIZED},
    proxy::{REQUEST_DURATION, REQUEST_OWN_DURATION, UPSTREAM_DURATION},
    store::{PLAINTEXT_ACCEPTED, STORE_DURATION},
};

/// Latency buckets, in seconds: from half a millisecond (a memory store) to a minute (a slow
/// upstream).
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// How often [`upkeep`] drains the histograms.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The handle of the recorder, installed as the global `metrics` recorder on first use.
///
/// Metrics are process-wide: gateways started in one process (tests, `idem demo`) share them.
/// When another recorder was installed first, this handle renders only what it records itself
/// (nothing), and a warning is logged.
pub(crate) fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = [
                UPSTREAM_DURATION,
                STORE_DURATION,
                REQUEST_DURATION,
                REQUEST_OWN_DURATION,
            ]
            .into_iter()
            .try_fold(PrometheusBuilder::new(), |builder, name| {
                builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), &BUCKETS)
            })
            .expect("the buckets are not empty")
            .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

/// Drains the histograms of the metrics recorder regularly, until cancelled.
pub(crate) async fn upkeep(metrics: PrometheusHandle, cancel: CancellationToken) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(UPKEEP_EVERY) => metrics.run_upkeep(),
        }
    }
}

fn describe() {
    metrics::describe_counter!(
        "idem_requests_total",
        "Requests by outcome: executed, replayed, conflict, mismatch, invalid, passthrough, too_large, store_error, overloaded."
    );
    metrics::describe_counter!(
        "idem_outcome_unknown_total",
        "Requests answered 500 outcome-unknown (--ambiguous reject): recorded now, or replayed."
    );
    metrics::describe_counter!(
        "idem_store_full_total",
        "New keys refused with 503 store-full: the store holds as much as it may."
    );
    metrics::describe_gauge!(
        RECORDS,
        "Live records by state, at the last census (recounted in at most 5% of the store's time)."
    );
    metrics::describe_gauge!(
        OLDEST_PROCESSING_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest processing record at the last census; 0 when none."
    );
    metrics::describe_gauge!(
        LEASE,
        metrics::Unit::Seconds,
        "The configured lease (--lease), for alerts on keys held longer than leases."
    );
    metrics::describe_histogram!(
        UPSTREAM_DURATION,
        metrics::Unit::Seconds,
        "Time from forwarding a request to the upstream's response head."
    );
    metrics::describe_histogram!(
        REQUEST_DURATION,
        metrics::Unit::Seconds,
        "Time from a request's arrival to its response head, whatever answered it."
    );
    metrics::describe_histogram!(
        REQUEST_OWN_DURATION,
        metrics::Unit::Seconds,
        "The gateway's own share of idem_request_duration_seconds: without the wait on the upstream."
    );
    metrics::describe_counter!(
        PLAINTEXT_ACCEPTED,
        "Records stored in clear that a sealing gateway replayed (--accept-plaintext)."
    );
    metrics::describe_counter!(
        UNAUTHORIZED,
        "Admin requests refused for a missing or wrong admin token."
    );
    metrics::describe_histogram!(
        STORE_DURATION,
        metrics::Unit::Seconds,
        "Latency of store calls, by operation."
    );
}
