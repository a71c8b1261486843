//! Which requests the layer takes, and the keys it refuses.

use axum::body::Body;
use http::{HeaderValue, Request, StatusCode};
use idem_core::{IdempotencyKey, KeyError};
use idem_http::{RequestOutcome, problem};

use crate::common::{Fixture, KEY, keyed, send};

#[tokio::test]
async fn uncovered_methods_and_requests_without_a_key_pass_through() {
    let f = Fixture::new();
    let app = f.app(f.layer().max_body(4));

    for _ in 0..2 {
        let get = Request::get("/charges")
            .header(KEY, "k1")
            .body(Body::empty())
            .unwrap();
        let reply = send(&app, get).await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.outcome, Some(RequestOutcome::Passthrough));
        assert_eq!(reply.key, None);
        assert!(!reply.is_replay());
    }
    // No key: the body is not buffered, so max_body does not apply.
    for n in 3..=4 {
        let post = Request::post("/charges")
            .body(Body::from("a body over four bytes"))
            .unwrap();
        let reply = send(&app, post).await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(
            reply.text(),
            format!(r#"{{"charge":"ch_{n}","received":22}}"#)
        );
        assert_eq!(reply.outcome, Some(RequestOutcome::Passthrough));
    }
    assert_eq!(f.calls.get(), 4);
    assert!(f.store.is_empty());
}

#[tokio::test]
async fn a_missing_key_is_400_when_keys_are_required() {
    let f = Fixture::new();
    let app = f.app(f.layer().require_key(true));

    let reply = send(&app, Request::post("/charges").body(Body::empty()).unwrap()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.problem_type(), problem::MISSING_KEY);
    assert_eq!(
        reply.problem()["detail"],
        "This request requires an idempotency key in the idempotency-key header."
    );
    assert_eq!(reply.outcome, Some(RequestOutcome::Invalid));

    // Keys are required for the covered methods only.
    let get = send(&app, Request::get("/charges").body(Body::empty()).unwrap()).await;
    assert_eq!(get.status, StatusCode::CREATED);
    assert_eq!(f.calls.get(), 1);
    assert!(f.store.is_empty());
}

#[tokio::test]
async fn invalid_keys_are_400_and_never_executed() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let too_long = "k".repeat(256);
    let cases: [(&[u8], KeyError); 6] = [
        (too_long.as_bytes(), KeyError::TooLong { len: 256 }),
        (b"", KeyError::Empty),
        // The only control character a header value can carry.
        (
            b"abc\tdef",
            KeyError::InvalidCharacter {
                byte: b'\t',
                position: 3,
            },
        ),
        (
            b"caf\xc3\xa9",
            KeyError::InvalidCharacter {
                byte: 0xc3,
                position: 3,
            },
        ),
        (b"\"abc", KeyError::Unterminated),
        (b"a, b", KeyError::List),
    ];
    for (value, error) in cases {
        let request = Request::post("/charges")
            .header(KEY, HeaderValue::from_bytes(value).unwrap())
            .body(Body::from("{}"))
            .unwrap();
        let reply = send(&app, request).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{value:?}");
        assert_eq!(reply.problem_type(), problem::INVALID_KEY);
        assert_eq!(reply.problem()["detail"], error.to_string());
        assert_eq!(reply.outcome, Some(RequestOutcome::Invalid));
        assert_eq!(reply.key, None);
    }

    let twice = Request::post("/charges")
        .header(KEY, "same")
        .header(KEY, "same")
        .body(Body::from("{}"))
        .unwrap();
    let reply = send(&app, twice).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.problem_type(), problem::INVALID_KEY);
    assert_eq!(
        reply.problem()["detail"],
        "the idempotency key header was sent more than once"
    );

    assert_eq!(f.calls.get(), 0);
    assert!(f.store.is_empty());
}

#[tokio::test]
async fn a_255_character_key_is_accepted_and_quoted_and_bare_forms_are_one_key() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let longest = "k".repeat(255);

    let reply = send(&app, keyed("/charges", &longest, "{}")).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(reply.outcome, Some(RequestOutcome::Executed));
    let digest = longest.parse::<IdempotencyKey>().unwrap().digest();
    assert_eq!(reply.key.unwrap().digest(), digest);

    let bare = send(&app, keyed("/charges", "abc", "{}")).await;
    let quoted = send(&app, keyed("/charges", "\"abc\"", "{}")).await;
    assert_eq!(bare.outcome, Some(RequestOutcome::Executed));
    assert_eq!(quoted.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(quoted.body, bare.body);
    assert_eq!(f.calls.get(), 2);
}

#[tokio::test]
async fn the_key_header_name_and_methods_are_configurable() {
    let f = Fixture::new();
    let layer = f
        .layer()
        .key_header(http::HeaderName::from_static("x-request-key"))
        .methods([http::Method::PUT]);
    let app = f.app(layer);

    let put = || {
        Request::put("/charges")
            .header("x-request-key", "k1")
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&app, put()).await.outcome,
        Some(RequestOutcome::Executed)
    );
    assert_eq!(
        send(&app, put()).await.outcome,
        Some(RequestOutcome::Replayed)
    );
    // POST is no longer covered, and `Idempotency-Key` is just another header.
    let post = send(&app, keyed("/charges", "k1", "{}")).await;
    assert_eq!(post.outcome, Some(RequestOutcome::Passthrough));
    assert_eq!(f.calls.get(), 2);
}
