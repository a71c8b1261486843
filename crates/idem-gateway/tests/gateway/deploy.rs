//! deploy/: the Grafana dashboard and the Prometheus alerts use only metrics the gateway exports.
//! (`promtool check rules` and `promtool test rules` check the alerts themselves, in
//! scripts/test.)

use std::collections::BTreeSet;

use axum::{body::Body, http::Request};

use crate::support::{Client, Gateway, Upstream};

const DASHBOARD: &str = include_str!("../../../../deploy/grafana/idem.json");
const ALERTS: &str = include_str!("../../../../deploy/prometheus/idem-alerts.yml");

/// Every `idem_…` name in `text`: the metric names (or histogram families) a dashboard or a rule
/// file refers to.
fn metric_names(text: &str) -> BTreeSet<&str> {
    let is_name = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    text.match_indices("idem_")
        .filter(|(at, _)| !text[..*at].ends_with(is_name))
        .map(|(at, _)| {
            let rest = &text[at..];
            &rest[..rest.find(|c| !is_name(c)).unwrap_or(rest.len())]
        })
        .collect()
}

/// The names of the series in a Prometheus text exposition.
fn exported(exposition: &str) -> BTreeSet<&str> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| &line[..line.find(['{', ' ']).unwrap_or(line.len())])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_use_only_metrics_the_gateway_exports() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();
    for _ in 0..2 {
        let reply = client
            .post(&gateway.url("/charges"), "deploy-1", r#"{"amount": 1}"#)
            .await;
        assert_eq!(reply.status, 201);
    }
    // The census gauges are set once the first census (in the background, at start) is done.
    let mut attempts = 0;
    let scraped = loop {
        let scraped = client
            .send(
                Request::get(gateway.admin_url("/metrics"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(scraped.status, 200);
        attempts += 1;
        if scraped.text().contains("idem_records{") || attempts == 100 {
            break scraped;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let exported = exported(scraped.text());

    let alerts = metric_names(ALERTS);
    assert_eq!(
        alerts,
        BTreeSet::from([
            "idem_lease_seconds",
            "idem_oldest_processing_age_seconds",
            "idem_outcome_unknown_total",
            "idem_requests_total",
            "idem_store_duration_seconds_bucket",
            "idem_store_full_total",
        ])
    );
    let dashboard = metric_names(DASHBOARD);
    assert!(dashboard.is_superset(&alerts), "{dashboard:?}");
    for name in alerts.union(&dashboard) {
        // A histogram is exported as its `_bucket`, `_sum` and `_count` series.
        let family = format!("{name}_bucket");
        assert!(
            exported.contains(name) || exported.contains(family.as_str()),
            "{name} is used in deploy/ but not exported:\n{}",
            scraped.text()
        );
    }
}

#[test]
fn metric_names_are_read_whole_and_only_where_they_start() {
    assert_eq!(
        metric_names(r#"rate(idem_requests_total{x="y"}[5m]) / my_idem_other + idem_a_b2"#),
        BTreeSet::from(["idem_a_b2", "idem_requests_total"])
    );
}
