//! Responses to and from the store: [`capture`] reads a response into a [`StoredResponse`] while
//! keeping it for the client, and [`replay`] turns a stored response back into a response.
//!
//! # Examples
//!
//! A replay keeps the end-to-end headers, drops the hop-by-hop ones and recomputes
//! `Content-Length`:
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::{convert::Infallible, sync::Arc};
//!
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use idem_http::IdempotencyLayer;
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! let service = IdempotencyLayer::new(Arc::new(idem_core::MemoryStore::new())).layer(
//!     service_fn(|_: Request<Full<Bytes>>| async {
//!         let response = Response::builder()
//!             .header("keep-alive", "timeout=5")
//!             .header("x-charge", "ch_1")
//!             .body(Full::new(Bytes::from("charged")))
//!             .unwrap();
//!         Ok::<_, Infallible>(response)
//!     }),
//! );
//! let request = || {
//!     Request::post("/charges")
//!         .header("idempotency-key", "k")
//!         .body(Full::new(Bytes::new()))
//!         .unwrap()
//! };
//! service.clone().oneshot(request()).await?;
//! let replay = service.oneshot(request()).await?;
//! let headers: Vec<_> = replay.headers().iter().map(|(name, _)| name.as_str()).collect();
//! assert_eq!(headers, ["x-charge", "content-length", "idempotent-replayed"]);
//! # Ok::<(), Infallible>(())
//! # }).unwrap();
//! ```

use bytes::Bytes;
use http::{
    HeaderMap, HeaderName, HeaderValue, Response, StatusCode,
    header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, SET_COOKIE, TRAILER},
};
use http_body_util::BodyExt;
use idem_core::{Outcome, StoredResponse};

use crate::{
    ResponseBody,
    collector::Collector,
    hop_by_hop::HopByHop,
    problem::{self, Rejection},
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The header that marks a replay.
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// Headers that describe a body, dropped when the body is replaced by a problem.
const BODY_HEADERS: [&str; 4] = [
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
];

/// A response read for storing: for the client, the same status, headers, body and trailers;
/// for the store, the same, or a problem saying why the body was not stored.
pub(crate) type Captured<B> = (Response<ResponseBody<B>>, StoredResponse);

/// Reads `response`'s body up to `limit` bytes. A body over the limit is stored as a
/// response-not-stored problem as soon as that is known, and the client gets all of it. Fails if
/// the body fails before its end.
pub(crate) async fn capture<B>(response: Response<B>, limit: usize) -> Result<Captured<B>, BoxError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    if usize::try_from(body.size_hint().lower()).map_or(true, |len| len > limit) {
        let stored = not_stored(parts.status, &parts.headers, limit);
        let response = Response::from_parts(parts, ResponseBody::new(body));
        return Ok((response, stored));
    }
    // Not over `limit`, so it fits in a usize.
    let mut data = Collector::new(usize::try_from(body.size_hint().lower()).unwrap_or(limit));
    let mut body = Box::pin(body);
    let mut trailers: Option<HeaderMap> = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => return Err(error.into()),
        };
        match frame.into_data() {
            Ok(chunk) => {
                data.push(chunk);
                if data.len() > limit {
                    let stored = not_stored(parts.status, &parts.headers, limit);
                    let body = ResponseBody::prefixed(data.into_bytes(), body);
                    return Ok((Response::from_parts(parts, body), stored));
                }
            }
            Err(frame) => {
                if let Ok(more) = frame.into_trailers() {
                    add_trailers(&mut trailers, more);
                }
            }
        }
    }
    let data = data.into_bytes();
    let stored = stored_whole(
        parts.status,
        &parts.headers,
        data.clone(),
        trailers.as_ref(),
    );
    let response = Response::from_parts(parts, ResponseBody::buffered(data, trailers));
    Ok((response, stored))
}

/// Adds `more` trailer fields to those of the body so far (a body may send several frames of
/// them).
pub(crate) fn add_trailers(trailers: &mut Option<HeaderMap>, more: HeaderMap) {
    match trailers {
        None => *trailers = Some(more),
        Some(all) => {
            for (name, value) in &more {
                all.append(name, value.clone());
            }
        }
    }
}

/// Leaves out the `Set-Cookie` headers of a response stored in, or replayed from, the anonymous
/// scope: the callers that share that scope are not one client, and a cookie is one client's.
pub(crate) fn drop_cookies(stored: &mut StoredResponse) {
    stored
        .headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case(SET_COOKIE.as_str()));
}

/// What is stored for a response over the limit: its status and headers, but a problem body.
pub(crate) fn not_stored(status: StatusCode, headers: &HeaderMap, limit: usize) -> StoredResponse {
    let body = problem::problem_json(
        problem::RESPONSE_NOT_STORED,
        "Response not stored",
        status,
        &format!(
            "The response to this request was larger than {limit} bytes; it was delivered once \
             and is not replayed. The operation will not be executed again under this key."
        ),
    );
    let mut lines = header_lines(headers);
    lines.retain(|(name, _)| !BODY_HEADERS.contains(&name.as_str()));
    lines.push((
        CONTENT_TYPE.as_str().to_owned(),
        bytes(&problem::content_type()),
    ));
    StoredResponse {
        status: status.as_u16(),
        headers: lines,
        body,
        trailers: None,
        trace: None,
    }
}

/// Whether `stored` is what [`not_stored`] stores for a response over the limit.
pub(crate) fn is_not_stored(stored: &StoredResponse) -> bool {
    let problem = problem::content_type();
    stored
        .header_values(CONTENT_TYPE.as_str())
        .any(|value| value == problem.as_bytes())
        && stored
            .body
            .windows(problem::RESPONSE_NOT_STORED.len())
            .any(|window| window == problem::RESPONSE_NOT_STORED.as_bytes())
}

/// Stored trailer lines as a header map.
pub(crate) fn trailer_map(lines: &[(String, Bytes)]) -> HeaderMap {
    header_map(lines.iter())
}

/// What is stored for a whole response: its status, the header lines worth storing, `body` and
/// the trailer fields.
pub(crate) fn stored_whole(
    status: StatusCode,
    headers: &HeaderMap,
    body: Bytes,
    trailers: Option<&HeaderMap>,
) -> StoredResponse {
    StoredResponse {
        status: status.as_u16(),
        headers: header_lines(headers),
        body,
        trailers: trailers.map(trailer_lines),
        trace: None,
    }
}

/// Trailer fields as they are stored, in order.
fn trailer_lines(trailers: &HeaderMap) -> Vec<(String, Bytes)> {
    trailers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), bytes(value)))
        .collect()
}

/// The header lines worth storing: every one but the hop-by-hop ones and `Trailer` (a replay
/// announces the trailers it has), in order, names in lower case (as `http` keeps them).
pub(crate) fn header_lines(headers: &HeaderMap) -> Vec<(String, Bytes)> {
    let hop_by_hop = HopByHop::of(headers);
    headers
        .iter()
        .filter(|(name, _)| !hop_by_hop.contains(name.as_str()) && *name != TRAILER)
        .map(|(name, value)| (name.as_str().to_owned(), bytes(value)))
        .collect()
}

fn bytes(value: &HeaderValue) -> Bytes {
    Bytes::copy_from_slice(value.as_bytes())
}

/// The replay of a stored outcome, marked `Idempotent-Replayed: true`: the stored response
/// ([`replay`]), or the outcome-unknown problem.
pub(crate) fn replay_outcome<B>(outcome: Outcome) -> Response<ResponseBody<B>> {
    match outcome {
        Outcome::Response(stored) => replay(stored),
        Outcome::Unknown => {
            let mut response = Rejection::OutcomeUnknown.into_response();
            mark_replayed(response.headers_mut());
            response
        }
    }
}

/// The replay of `stored`: its status, headers (hop-by-hop ones dropped, `Content-Length`
/// recomputed, `Idempotent-Replayed: true` added), body and trailers.
fn replay<B>(stored: StoredResponse) -> Response<ResponseBody<B>> {
    let StoredResponse {
        status,
        headers: lines,
        body,
        trailers,
        trace: _,
    } = stored;
    let mut headers = replay_headers(&lines);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // Server-sent events replay as a stream, one event per chunk, as they were sent.
    let events = is_event_stream(&headers);
    // With trailers there is no length, so that HTTP/1.1 sends them (chunked).
    let has_length = !events
        && trailers.is_none()
        && !status.is_informational()
        && status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED;
    if has_length {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    mark_replayed(&mut headers);
    let trailers = trailers.map(|lines| header_map(lines.iter()));
    if let Some(announced) = trailers.as_ref().and_then(announce) {
        // `Trailer` was dropped with the hop-by-hop headers; HTTP/1.1 servers (hyper) send only
        // the trailer fields it announces.
        headers.insert(TRAILER, announced);
    }
    let body = if events {
        ResponseBody::chunks(event_chunks(&body), trailers)
    } else {
        ResponseBody::buffered(body, trailers)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Whether `headers` say the body is a stream of server-sent events.
fn is_event_stream(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|value| {
        let essence = value
            .as_bytes()
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default();
        essence
            .trim_ascii()
            .eq_ignore_ascii_case(b"text/event-stream")
    })
}

/// `body` cut after each event: after each blank line (`\n\n`, `\r\n\r\n` or `\r\r`), the
/// rest, if any, last. Slices of `body`, not copies.
fn event_chunks(body: &Bytes) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let (mut start, mut at) = (0, 0);
    while at < body.len() {
        let end = [&b"\r\n\r\n"[..], b"\n\n", b"\r\r"]
            .iter()
            .find(|blank| body[at..].starts_with(blank))
            .map(|blank| at + blank.len());
        match end {
            Some(end) => {
                chunks.push(body.slice(start..end));
                (start, at) = (end, end);
            }
            None => at += 1,
        }
    }
    if start < body.len() {
        chunks.push(body.slice(start..));
    }
    chunks
}

/// The headers of a replay of a response with the header `lines`: the hop-by-hop ones, `Trailer`
/// and `Content-Length` dropped; the replay adds its length, if it has one, then marks itself
/// ([`mark_replayed`]).
pub(crate) fn replay_headers(lines: &[(String, Bytes)]) -> HeaderMap {
    let hop_by_hop = HopByHop::new(
        lines
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(CONNECTION.as_str()))
            .map(|(_, value)| &value[..]),
    );
    header_map(lines.iter().filter(|(name, _)| {
        !hop_by_hop.contains(name)
            && !name.eq_ignore_ascii_case(TRAILER.as_str())
            && !name.eq_ignore_ascii_case(CONTENT_LENGTH.as_str())
    }))
}

/// Adds `Idempotent-Replayed: true`.
pub(crate) fn mark_replayed(headers: &mut HeaderMap) {
    headers.insert(
        HeaderName::from_static(IDEMPOTENT_REPLAYED),
        HeaderValue::from_static("true"),
    );
}

/// The `Trailer` header announcing `trailers`' names, if there are any.
fn announce(trailers: &HeaderMap) -> Option<HeaderValue> {
    let names: Vec<&str> = trailers.keys().map(HeaderName::as_str).collect();
    HeaderValue::from_str(&names.join(", "))
        .ok()
        .filter(|_| !names.is_empty())
}

fn header_map<'a>(lines: impl Iterator<Item = &'a (String, Bytes)>) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in lines {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_maybe_shared(value.clone()),
        ) else {
            tracing::warn!(header = %name, "skipping a stored header that is not valid HTTP");
            continue;
        };
        map.append(name, value);
    }
    map
}

#[cfg(test)]
mod tests {
    use http_body_util::Full;

    use super::*;
    use crate::test_support::header_pairs;

    #[test]
    fn replay_drops_hop_by_hop_headers_and_recomputes_the_length() {
        let stored = StoredResponse::new(201)
            .header("connection", "x-conn, close")
            .header("x-conn", "1")
            .header("keep-alive", "timeout=5")
            .header("content-length", "999")
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .body("four");
        let response = replay::<Full<Bytes>>(stored);
        let headers = header_pairs(&response);
        assert_eq!(
            headers,
            [
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
                ("content-length", "4"),
                ("idempotent-replayed", "true"),
            ]
        );
    }

    #[test]
    fn server_sent_events_are_cut_after_each_event() {
        let body = Bytes::from("data: 1\n\nid: 2\r\ndata: 2\r\n\r\ndata: 3\r\rdata: partial");
        let chunks = event_chunks(&body);
        assert_eq!(
            chunks,
            [
                "data: 1\n\n",
                "id: 2\r\ndata: 2\r\n\r\n",
                "data: 3\r\r",
                "data: partial"
            ]
        );
        assert_eq!(event_chunks(&Bytes::new()), Vec::<Bytes>::new());
        assert_eq!(event_chunks(&Bytes::from("\n\n\n\n")), ["\n\n", "\n\n"]);
    }

    #[tokio::test]
    async fn an_event_stream_replays_one_event_per_chunk_without_a_length() {
        use http_body_util::BodyExt;
        let stored = StoredResponse::new(200)
            .header("content-type", "text/event-stream; charset=utf-8")
            .header("content-length", "18")
            .body("data: 1\n\ndata: 2\n\n");
        let mut response = replay::<Full<Bytes>>(stored);
        assert_eq!(response.headers().get(CONTENT_LENGTH), None);
        let mut frames = Vec::new();
        while let Some(frame) = response.body_mut().frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames, ["data: 1\n\n", "data: 2\n\n"]);
    }

    #[test]
    fn stored_headers_keep_order_and_repeats_without_hop_by_hop_ones() {
        let mut headers = HeaderMap::new();
        headers.append("x-b", HeaderValue::from_static("1"));
        headers.append("connection", HeaderValue::from_static("X-Private"));
        headers.append("x-private", HeaderValue::from_static("p"));
        headers.append("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.append("x-b", HeaderValue::from_static("2"));
        assert_eq!(
            header_lines(&headers),
            [
                ("x-b".to_owned(), Bytes::from("1")),
                ("x-b".to_owned(), Bytes::from("2"))
            ]
        );
    }
}
