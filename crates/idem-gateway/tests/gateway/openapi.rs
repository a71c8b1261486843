//! The admin API's OpenAPI document: served at `/openapi.json` without the admin token, true to
//! what the listener enforces, and the same as `docs/admin-openapi.json`.
//!
//! After a change to the admin API, `IDEM_BLESS=1 cargo test -p idem-gateway --test gateway
//! openapi` rewrites the committed file from the served document; review its diff.

use serde_json::Value;

use crate::{
    admin::{send_with, token_file},
    support::{Client, Gateway, Upstream},
};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/admin-openapi.json");

const TOKEN: &str = "openapi-admin-token";

async fn gateway_with_token() -> (Upstream, Gateway, tempfile::TempDir) {
    let (dir, path) = token_file(TOKEN);
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--admin-token-file", &path],
    );
    (upstream, gateway, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_the_committed_one() {
    let (_upstream, gateway, _dir) = gateway_with_token().await;
    let reply = send_with(
        &Client::new(),
        "GET",
        gateway.admin_url("/openapi.json"),
        None,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), "application/json");
    let served = reply.text();
    assert!(
        served.starts_with("{\n  \"openapi\": \"3.1.0\",\n"),
        "{served}"
    );

    if std::env::var_os("IDEM_BLESS").is_some_and(|bless| bless == "1") {
        std::fs::write(COMMITTED, served).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    if served != committed {
        let line = served
            .lines()
            .zip(committed.lines())
            .position(|(served, committed)| served != committed)
            .unwrap_or_else(|| served.lines().count().min(committed.lines().count()));
        panic!(
            "docs/admin-openapi.json is not the document the gateway serves (first difference \
             at line {}: served {:?}, committed {:?}). If the admin API changed on purpose, \
             rewrite it with `IDEM_BLESS=1 cargo test -p idem-gateway --test gateway openapi` \
             and review the diff.",
            line + 1,
            served.lines().nth(line),
            committed.lines().nth(line),
        );
    }
}

/// Each operation of `document`, in the document's order: its method, its path, the statuses
/// it declares, and whether it needs the admin token.
fn operations(document: &Value) -> Vec<(String, String, Vec<String>, bool)> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let statuses = operation["responses"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            let secured =
                operation.get("security") == Some(&serde_json::json!([{ "admin_token": [] }]));
            operations.push((method.to_uppercase(), path.clone(), statuses, secured));
        }
    }
    operations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_described_and_the_token_is_needed_where_it_says() {
    let (_upstream, gateway, _dir) = gateway_with_token().await;
    let client = Client::new();
    let document = send_with(&client, "GET", gateway.admin_url("/openapi.json"), None)
        .await
        .json();
    let operations = operations(&document);
    let statuses = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let expected = [
        ("GET", "/healthz", statuses(&["200"]), false),
        ("GET", "/metrics", statuses(&["200", "401"]), true),
        ("GET", "/openapi.json", statuses(&["200"]), false),
        ("GET", "/readyz", statuses(&["200", "503"]), false),
        (
            "GET",
            "/v1/keys",
            statuses(&["200", "400", "401", "500", "503"]),
            true,
        ),
        (
            "DELETE",
            "/v1/keys/{key}",
            statuses(&["204", "400", "401", "404", "409", "500", "503"]),
            true,
        ),
        (
            "GET",
            "/v1/keys/{key}",
            statuses(&["200", "400", "401", "404", "500", "503"]),
            true,
        ),
        ("GET", "/v1/stats", statuses(&["200", "401"]), true),
    ]
    .map(|(method, path, statuses, secured)| {
        (method.to_owned(), path.to_owned(), statuses, secured)
    });
    assert_eq!(operations, expected);
    assert_eq!(
        document["components"]["securitySchemes"]["admin_token"]["scheme"],
        "bearer"
    );

    // What the document says about the token is what the listener does.
    for (method, path, _, secured) in &operations {
        let url = gateway.admin_url(&path.replace("{key}", "openapi-key"));
        let without = send_with(&client, method, url.clone(), None).await;
        let with = send_with(&client, method, url, Some(TOKEN)).await;
        assert_eq!(
            (without.status == 401, with.status == 401),
            (*secured, false),
            "{method} {path}: {} without the token, {} with it",
            without.status,
            with.status
        );
    }
}
