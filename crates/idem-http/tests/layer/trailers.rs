//! Trailers are part of the stored response.

use http::StatusCode;
use idem_http::RequestOutcome;

use crate::common::{Fixture, keyed, send, trailer_map};

#[tokio::test]
async fn trailers_are_captured_and_replayed() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let first = send(&app, keyed("/trailers", "k", "")).await;
    let retry = send(&app, keyed("/trailers", "k", "")).await;
    assert_eq!(first.trailers, Some(trailer_map()));
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(retry.trailers, Some(trailer_map()));
    assert_eq!(retry.text(), "call 1");
    // With trailers there is no Content-Length, so HTTP/1.1 can send them chunked.
    assert_eq!(retry.header("content-length"), None);
    // `Trailer` is regenerated from the stored trailers, so HTTP/1.1 servers send them.
    assert_eq!(retry.header("trailer"), Some("x-checksum, x-note"));
    assert_eq!(f.calls.get(), 1);
}
