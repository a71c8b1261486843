//! What the layer reads from a request: its key, its scope, its body and its fingerprint.
//!
//! # Examples
//!
//! A key header sent twice is refused before the body is read:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::{convert::Infallible, sync::Arc};
//!
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use idem_http::{IdempotencyLayer, RequestOutcome};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! let service = IdempotencyLayer::new(Arc::new(idem_core::MemoryStore::new())).layer(
//!     service_fn(|_: Request<Full<Bytes>>| async {
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
//!     }),
//! );
//! let request = Request::post("/charges")
//!     .header("idempotency-key", "a")
//!     .header("idempotency-key", "a")
//!     .body(Full::new(Bytes::new()))
//!     .unwrap();
//! let response = service.oneshot(request).await?;
//! assert_eq!(response.status(), StatusCode::BAD_REQUEST);
//! assert_eq!(response.extensions().get(), Some(&RequestOutcome::Invalid));
//! # Ok::<(), Infallible>(())
//! # }).unwrap();
//! ```

use std::{pin::pin, sync::Arc};

use bytes::Bytes;
use http::{
    HeaderMap, HeaderName,
    header::{CONTENT_LENGTH, CONTENT_TYPE},
    request::Parts,
};
use http_body_util::BodyExt;
use idem_core::{Fingerprint, FingerprintMode, IdempotencyKey, KeyError, Scope};

use crate::{
    budget::{Budget, Reservation},
    collector::Collector,
    problem::Rejection,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The key, if the header is present: exactly one header line holding one valid key.
pub(crate) fn key(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<IdempotencyKey>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    IdempotencyKey::parse_header(value.as_bytes()).map(Some)
}

/// The hash of the scope headers' names and values, in the configured order; anonymous when
/// none is present (or none is configured).
pub(crate) fn scope(headers: &HeaderMap, names: &[HeaderName]) -> Scope {
    // The name goes in too, so that `A: x` and `B: x` are different callers.
    let mut identity = names
        .iter()
        .flat_map(|name| {
            headers
                .get_all(name)
                .iter()
                .flat_map(move |value| [name.as_str().as_bytes(), value.as_bytes()])
        })
        .peekable();
    if identity.peek().is_none() {
        Scope::ANONYMOUS
    } else {
        Scope::from_identity(identity)
    }
}

/// Reads the whole body, refusing it as soon as it is known to be over `limit` bytes (from
/// `Content-Length` or the body's size hint before reading, else while reading), or as soon as
/// it does not fit in the `budget` shared by all requests.
///
/// A body of known size is reserved whole before a byte is read, so that a full budget refuses
/// it at once; a body of unknown size (chunked) is reserved chunk by chunk as it arrives, so
/// that small chunked bodies do not each hold `limit` bytes of the budget. The reservation is
/// returned with the bytes: they count until it is dropped.
pub(crate) async fn buffer<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
    budget: Option<&Arc<Budget>>,
) -> Result<(Bytes, Option<Reservation>), Rejection>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let too_large = |len: u64| usize::try_from(len).map_or(true, |len| len > limit);
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(too_large) || too_large(body.size_hint().lower()) {
        return Err(Rejection::BodyTooLarge { limit });
    }
    // Not over `limit`, so it fits in a usize.
    let known = declared
        .or(body.size_hint().exact())
        .map_or(0, |len| usize::try_from(len).unwrap_or(limit));
    let mut reservation = match budget {
        Some(budget) => Some(budget.try_reserve(known).ok_or(Rejection::Overloaded)?),
        None => None,
    };
    let mut body = pin!(body);
    let mut collected = Collector::new(known);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| Rejection::BodyUnreadable(error.into()))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        let len = collected.len() + chunk.len();
        if len > limit {
            return Err(Rejection::BodyTooLarge { limit });
        }
        if let Some(reservation) = &mut reservation
            && len > reservation.bytes()
            && !reservation.grow(len - reservation.bytes())
        {
            return Err(Rejection::Overloaded);
        }
        collected.push(chunk);
    }
    Ok((collected.into_bytes(), reservation))
}

/// The fingerprint: method, path, query as sent, and the body read as `mode` says.
pub(crate) fn fingerprint(mode: FingerprintMode, parts: &Parts, body: &[u8]) -> Fingerprint {
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    Fingerprint::builder(mode)
        .method(parts.method.as_str())
        .path(parts.uri.path())
        .query(parts.uri.query())
        .body(content_type, body)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(lines: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in lines {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn a_repeated_key_header_is_refused() {
        let name = HeaderName::from_static("idempotency-key");
        let twice = headers(&[("idempotency-key", "a"), ("idempotency-key", "a")]);
        assert_eq!(key(&twice, &name), Err(KeyError::Repeated));
        assert_eq!(key(&HeaderMap::new(), &name), Ok(None));
    }

    #[test]
    fn scope_depends_on_header_names_and_values() {
        let names = [HeaderName::from_static("a"), HeaderName::from_static("b")];
        let a = scope(&headers(&[("a", "x")]), &names);
        let b = scope(&headers(&[("b", "x")]), &names);
        assert_ne!(a, b);
        assert_eq!(a, scope(&headers(&[("a", "x"), ("c", "y")]), &names));
        assert_eq!(scope(&headers(&[("c", "y")]), &names), Scope::ANONYMOUS);
        assert_eq!(scope(&headers(&[("a", "x")]), &[]), Scope::ANONYMOUS);
    }
}
