//! The dashboards at `GET /` of the admin listeners: served without the admin token, under a
//! strict Content-Security-Policy, with files that name no other origin. (What the pages show
//! is checked in a browser by `scripts/browser-test/run`.)

use crate::{
    admin::{send_with, token_file},
    servers::free_port,
    support::{Client, Gateway, Reply, Running, Upstream, idem_command},
};

const POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The files a page loads besides itself, and their content types.
const FILES: [(&str, &str); 3] = [
    ("/dashboard.js", "text/javascript; charset=utf-8"),
    ("/dashboard.css", "text/css; charset=utf-8"),
    ("/favicon.png", "image/png"),
];

/// Checks what every dashboard file is served with.
fn assert_served(reply: &Reply, content_type: &str) {
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), content_type);
    assert_eq!(reply.header("content-security-policy"), POLICY);
    assert_eq!(reply.header("cache-control"), "no-cache");
    assert_eq!(reply.header("x-content-type-options"), "nosniff");
}

/// Every `src` and `href` of `html`.
fn references(html: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for (start, _) in html.match_indices(attribute) {
            let rest = &html[start + attribute.len()..];
            found.push(&rest[..rest.find('"').unwrap()]);
        }
    }
    found
}

/// Fetches the page at `/` of `base` and its files without a token, and checks them.
async fn assert_dashboard(client: &Client, base: &str, page: &str) {
    let html = send_with(client, "GET", format!("{base}/"), None).await;
    assert_served(&html, "text/html; charset=utf-8");
    let text = html.text();
    assert!(
        text.contains(&format!("<body data-page=\"{page}\">")),
        "{text}"
    );
    let mut references = references(text);
    references.sort_unstable();
    assert_eq!(
        references,
        ["/dashboard.css", "/dashboard.js", "/favicon.png"],
        "the page loads exactly its own files"
    );
    let mut texts = vec![text.to_owned()];
    for (path, content_type) in FILES {
        let file = send_with(client, "GET", format!("{base}{path}"), None).await;
        assert_served(&file, content_type);
        assert!(!file.body.is_empty());
        if content_type.starts_with("text/") {
            texts.push(file.text().to_owned());
        }
    }
    for text in texts {
        let lower = text.to_ascii_lowercase();
        assert!(!lower.contains("http://"), "an http:// URL in {text}");
        assert!(!lower.contains("https://"), "an https:// URL in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_dashboard_needs_no_token_and_the_api_still_does() {
    let (_dir, path) = token_file("gateway-dashboard-token");
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--admin-token-file", &path],
    );
    let client = Client::new();

    assert_dashboard(&client, &gateway.admin_url(""), "gateway").await;
    // Only the files are open: what the page reads needs the token.
    let metrics = send_with(&client, "GET", gateway.admin_url("/metrics"), None).await;
    assert_eq!(metrics.status, 401);
    let with_token = send_with(
        &client,
        "GET",
        gateway.admin_url("/metrics"),
        Some("gateway-dashboard-token"),
    )
    .await;
    assert_eq!(with_token.status, 200);
    // Nothing else is served beside them.
    let other = send_with(&client, "GET", gateway.admin_url("/dashboard.html"), None).await;
    assert_eq!(other.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_a_page_to_read_not_to_post_to() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let client = Client::new();

    let posted = send_with(&client, "POST", gateway.admin_url("/"), None).await;
    assert_eq!(posted.status, 405);
    let head = send_with(&client, "HEAD", gateway.admin_url("/dashboard.js"), None).await;
    assert_served(&head, "text/javascript; charset=utf-8");
    assert!(head.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_dashboard_needs_no_token_and_the_api_still_does() {
    let (dir, path) = token_file("relay-dashboard-token");
    let admin = format!("127.0.0.1:{}", free_port());
    // On an SQLite outbox, its broker out of reach (it keeps trying): enough for its admin
    // listener.
    let store = format!("sqlite://{}", dir.path().join("outbox.db").display());
    let _relay = Running::start(
        &[
            "relay",
            "--store",
            &store,
            "--migrate",
            "--broker",
            "nats://127.0.0.1:9",
            "--admin-listen",
            &admin,
            "--admin-token-file",
            &path,
            "--log-level",
            "off",
        ],
        &admin,
    )
    .await;
    let base = format!("http://{admin}");
    let client = Client::new();

    assert_dashboard(&client, &base, "relay").await;
    let metrics = send_with(&client, "GET", format!("{base}/metrics"), None).await;
    assert_eq!(metrics.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deliver_dashboard_needs_no_token_and_the_api_still_does() {
    let (_dir, path) = token_file("deliver-dashboard-token");
    let admin = format!("127.0.0.1:{}", free_port());
    // Its broker out of reach (it keeps subscribing): enough for its admin listener.
    let mut command = idem_command();
    command
        .args(["deliver", "--broker", "nats://127.0.0.1:9"])
        .args(["--from", "orders.>", "--to", "http://127.0.0.1:9/events"])
        .args(["--admin-listen", &admin])
        .args(["--admin-token-file", &path, "--log-level", "off"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _deliver = Running::spawn(command, &admin).await;
    let base = format!("http://{admin}");
    let client = Client::new();

    assert_dashboard(&client, &base, "deliver").await;
    let metrics = send_with(&client, "GET", format!("{base}/metrics"), None).await;
    assert_eq!(metrics.status, 401);
    let health = send_with(&client, "GET", format!("{base}/healthz"), None).await;
    assert_eq!(health.status, 200);
}
