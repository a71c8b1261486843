//! The dashboards of the admin listeners: `GET /` serves one page, for `idem serve`, for
//! `idem relay`'s outbox and for `idem deliver`, from files compiled into the binary.
//!
//! A page is plain HTML with one script and one style sheet, shared by both pages. It loads
//! nothing from anywhere else (no CDN, no web font), so that it works on a host without
//! internet, and its policy (`Content-Security-Policy: default-src 'self'`, …) holds it to
//! that. Its data comes from the admin API of the listener that served it, as any client gets
//! it: the files need no admin token, the API calls do, and the page asks for it when one
//! answers 401 (see `docs/gateway.md`, "The dashboard").
//!
//! | route | file |
//! | --- | --- |
//! | `GET /` | the page: `top.html` over `gateway.html` on `idem serve`, over `relay.html` on `idem relay`, over `deliver.html` on `idem deliver` |
//! | `GET /dashboard.js` | the script |
//! | `GET /dashboard.css` | the style sheet |
//! | `GET /favicon.png` | the icon |
//!
//! Each answer carries `Cache-Control: no-cache`, so that a browser revalidates the files
//! after an upgrade instead of running an old script against a new API.

use std::sync::LazyLock;

use axum::{
    Router,
    response::{IntoResponse, Response},
    routing::get,
};
use bytes::Bytes;
use http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};

/// What a page may do: load and call only its own origin, run no inline script or style, be
/// framed by nobody, and submit no form by navigation.
pub(crate) const POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A file served at a fixed path.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: Bytes,
}

/// The top of every page (its head, its header, the form that asks for the token), with
/// `{page}` where the page's name goes.
const TOP: &str = include_str!("top.html");

/// A page: the shared top with the page's name, then the page's own `<main>`.
fn page(name: &str, main: &str) -> Asset {
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: Bytes::from(TOP.replace("{page}", name) + main),
    }
}

static GATEWAY_PAGE: LazyLock<Asset> =
    LazyLock::new(|| page("gateway", include_str!("gateway.html")));

static RELAY_PAGE: LazyLock<Asset> = LazyLock::new(|| page("relay", include_str!("relay.html")));

static DELIVER_PAGE: LazyLock<Asset> =
    LazyLock::new(|| page("deliver", include_str!("deliver.html")));

static SCRIPT: Asset = Asset {
    path: "/dashboard.js",
    content_type: "text/javascript; charset=utf-8",
    body: Bytes::from_static(include_bytes!("dashboard.js")),
};

static STYLE: Asset = Asset {
    path: "/dashboard.css",
    content_type: "text/css; charset=utf-8",
    body: Bytes::from_static(include_bytes!("dashboard.css")),
};

static ICON: Asset = Asset {
    path: "/favicon.png",
    content_type: "image/png",
    body: Bytes::from_static(include_bytes!("favicon.png")),
};

/// The routes of the gateway's dashboard; they need no token.
pub(crate) fn gateway<S: Clone + Send + Sync + 'static>() -> Router<S> {
    routes([&*GATEWAY_PAGE, &SCRIPT, &STYLE, &ICON])
}

/// The routes of the relay's dashboard; they need no token.
pub(crate) fn relay<S: Clone + Send + Sync + 'static>() -> Router<S> {
    routes([&*RELAY_PAGE, &SCRIPT, &STYLE, &ICON])
}

/// The routes of `idem deliver`'s dashboard; they need no token.
pub(crate) fn deliver<S: Clone + Send + Sync + 'static>() -> Router<S> {
    routes([&*DELIVER_PAGE, &SCRIPT, &STYLE, &ICON])
}

fn routes<S: Clone + Send + Sync + 'static>(assets: [&'static Asset; 4]) -> Router<S> {
    assets.into_iter().fold(Router::new(), |router, asset| {
        router.route(
            asset.path,
            get(move || std::future::ready(asset.response())),
        )
    })
}

impl Asset {
    fn response(&self) -> Response {
        (
            [
                (CONTENT_TYPE, self.content_type),
                (CACHE_CONTROL, "no-cache"),
                (CONTENT_SECURITY_POLICY, POLICY),
                (X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (REFERRER_POLICY, "no-referrer"),
            ],
            self.body.clone(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file, as text where it is text.
    fn texts() -> impl Iterator<Item = (&'static str, &'static str)> {
        [&*GATEWAY_PAGE, &*RELAY_PAGE, &SCRIPT, &STYLE]
            .into_iter()
            .map(|asset| {
                (
                    asset.content_type,
                    std::str::from_utf8(&asset.body).unwrap(),
                )
            })
    }

    #[test]
    fn no_file_names_another_origin() {
        for (kind, text) in texts() {
            let lower = text.to_ascii_lowercase();
            for needle in ["http://", "https://", "//cdn", "url(", "@import"] {
                assert!(!lower.contains(needle), "{kind} holds {needle:?}");
            }
        }
    }

    #[test]
    fn pages_load_the_shared_script_and_style_and_nothing_inline() {
        for (name, page) in [("gateway", &*GATEWAY_PAGE), ("relay", &*RELAY_PAGE)] {
            let html = std::str::from_utf8(&page.body).unwrap();
            assert!(html.starts_with("<!doctype html>"));
            assert!(html.contains(&format!("<title>idem {name}</title>")));
            assert!(html.contains(&format!(r#"<body data-page="{name}">"#)));
            assert!(!html.contains("{page}"));
            assert!(html.contains(r#"<script src="/dashboard.js" defer></script>"#));
            assert!(html.contains(r#"<link rel="stylesheet" href="/dashboard.css">"#));
            assert!(html.contains(r#"<link rel="icon" href="/favicon.png">"#));
            // The policy would block them.
            assert_eq!(html.matches("<script").count(), 1);
            assert!(!html.contains("<style"));
            assert!(!html.contains(" style="));
            assert!(
                !html
                    .split_ascii_whitespace()
                    .any(|word| word.starts_with("on") && word.contains('=')),
                "an inline event handler"
            );
        }
    }

    #[test]
    fn the_icon_is_a_png() {
        assert!(ICON.body.starts_with(b"\x89PNG\r\n\x1a\n"));
    }
}
