//! The application under test: axum handlers that count their executions, and helpers to send
//! requests and read everything a response carries.

use std::{
    collections::VecDeque,
    convert::Infallible,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Path, State},
    routing::{any, post},
};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use idem_core::{MemoryStore, Store};
use idem_http::{IdempotencyLayer, RequestKey, RequestOutcome};
use tokio::sync::{Notify, Semaphore, mpsc};
use tower::ServiceExt;

pub(crate) const KEY: &str = "idempotency-key";

/// Counts executions of the handlers.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<AtomicUsize>);

impl Calls {
    /// Counts one more execution and returns its number, from 1.
    pub(crate) fn next(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The handlers' shared state.
#[derive(Clone)]
pub(crate) struct Fixture {
    pub(crate) calls: Calls,
    /// `/slow` waits for a permit of this gate (closed at first).
    pub(crate) gate: Arc<Semaphore>,
    /// Notified when `/slow` starts.
    pub(crate) started: Arc<Notify>,
    /// The upstream ends of the bodies `/stream` answered with, in order.
    streams: Arc<Mutex<VecDeque<Upstream>>>,
    /// Notified when `/stream` answers.
    streaming: Arc<Notify>,
    pub(crate) store: Arc<MemoryStore>,
}

/// The upstream end of a `/stream` body: each item is the next frame or the body's failure;
/// dropped, the body ends.
pub(crate) type Upstream = mpsc::Sender<Result<Frame<Bytes>, io::Error>>;

impl Fixture {
    pub(crate) fn new() -> Self {
        Self::with_store(MemoryStore::new())
    }

    pub(crate) fn with_store(store: MemoryStore) -> Self {
        Self {
            calls: Calls::default(),
            gate: Arc::new(Semaphore::new(0)),
            started: Arc::new(Notify::new()),
            streams: Arc::default(),
            streaming: Arc::new(Notify::new()),
            store: Arc::new(store),
        }
    }

    /// A layer over this fixture's store, with the defaults.
    pub(crate) fn layer(&self) -> IdempotencyLayer<Arc<MemoryStore>> {
        IdempotencyLayer::new(Arc::clone(&self.store))
    }

    /// The application behind `layer`.
    pub(crate) fn app<St: Store + Clone>(&self, layer: IdempotencyLayer<St>) -> Router {
        Router::new()
            .route("/charges", any(charge))
            .route("/echo", post(echo))
            .route("/status/{code}", post(status))
            .route("/slow", post(slow))
            .route("/big/{len}", post(big))
            .route("/big-chunked/{len}", post(big_chunked))
            .route("/hop", post(hop))
            .route("/trailers", post(trailers))
            .route("/cut", post(cut))
            .route("/stream", post(stream))
            .layer(layer)
            .with_state(self.clone())
    }

    pub(crate) fn open_gate(&self) {
        self.gate.add_permits(1_000);
    }

    /// The upstream end of the next `/stream` body, once it has answered.
    pub(crate) async fn next_stream(&self) -> Upstream {
        tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(upstream) = self.streams.lock().unwrap().pop_front() {
                    return upstream;
                }
                self.streaming.notified().await;
            }
        })
        .await
        .expect("/stream answers")
    }
}

/// How long a test waits for what must happen, before it fails rather than hangs.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// 200 `text/event-stream`, of unknown length, whose frames the test sends through
/// [`Fixture::next_stream`].
async fn stream(State(f): State<Fixture>) -> Response<Body> {
    f.calls.next();
    let (upstream, frames) = mpsc::channel(16);
    f.streams.lock().unwrap().push_back(upstream);
    f.streaming.notify_one();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::new(Channel(frames)))
        .unwrap()
}

/// A body whose frames come from a channel.
struct Channel(mpsc::Receiver<Result<Frame<Bytes>, io::Error>>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0.poll_recv(cx)
    }
}

/// Reads a streamed response frame by frame.
pub(crate) struct Reader {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    body: Body,
}

/// The next thing a [`Reader`] read.
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    Data(Bytes),
    Trailers(HeaderMap),
    End,
    /// The body failed: the response ended abnormally.
    Failed,
}

impl Reader {
    /// Sends `request` and waits for the response's head.
    pub(crate) async fn send(app: &Router, request: Request<Body>) -> Self {
        let response = tokio::time::timeout(PATIENCE, app.clone().oneshot(request))
            .await
            .expect("the response's head comes")
            .unwrap();
        let (parts, body) = response.into_parts();
        Self {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// The next frame, or how the body ended; fails the test if none comes in time.
    pub(crate) async fn next(&mut self) -> Read {
        let frame = tokio::time::timeout(PATIENCE, self.body.frame())
            .await
            .expect("the next frame comes");
        match frame {
            None => Read::End,
            Some(Err(_)) => Read::Failed,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => Read::Data(data),
                Err(frame) => Read::Trailers(frame.into_trailers().unwrap()),
            },
        }
    }
}

/// 201 with a JSON body naming the charge, and a few headers (one repeated).
async fn charge(State(f): State<Fixture>, body: Bytes) -> Response<Body> {
    let n = f.calls.next();
    Response::builder()
        .status(StatusCode::CREATED)
        .header("content-type", "application/json")
        .header("x-charge", format!("ch_{n}"))
        .header("set-cookie", "a=1")
        .header("set-cookie", "b=2")
        .body(Body::from(format!(
            r#"{{"charge":"ch_{n}","received":{}}}"#,
            body.len()
        )))
        .unwrap()
}

/// 200 with the request body, byte for byte.
async fn echo(State(f): State<Fixture>, body: Bytes) -> Response<Body> {
    let n = f.calls.next();
    Response::builder()
        .header("content-type", "application/octet-stream")
        .header("x-call", n)
        .body(Body::from(body))
        .unwrap()
}

/// The status asked for, with the call number as body.
async fn status(State(f): State<Fixture>, Path(code): Path<u16>) -> Response<Body> {
    let n = f.calls.next();
    Response::builder()
        .status(code)
        .header("content-type", "text/plain")
        .body(Body::from(format!("call {n}")))
        .unwrap()
}

/// Waits for the gate, then 201.
async fn slow(State(f): State<Fixture>) -> Response<Body> {
    let n = f.calls.next();
    f.started.notify_one();
    let _permit = f.gate.acquire().await.unwrap();
    Response::builder()
        .status(StatusCode::CREATED)
        .body(Body::from(format!("slow call {n}")))
        .unwrap()
}

/// `len` bytes whose value is their position modulo 251.
pub(crate) fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A body of known length (`Content-Length`).
async fn big(State(f): State<Fixture>, Path(len): Path<usize>) -> Response<Body> {
    f.calls.next();
    Response::builder()
        .header("content-type", "application/octet-stream")
        .header("x-big", "yes")
        .body(Body::from(pattern(len)))
        .unwrap()
}

/// The same body in 1,000-byte chunks, of unknown length.
async fn big_chunked(State(f): State<Fixture>, Path(len): Path<usize>) -> Response<Body> {
    f.calls.next();
    let chunks = pattern(len)
        .chunks(1_000)
        .map(Bytes::copy_from_slice)
        .collect();
    Response::builder()
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "identity")
        .header("x-big", "yes")
        .body(Body::new(Chunks::new(chunks)))
        .unwrap()
}

/// Hop-by-hop headers next to end-to-end ones.
async fn hop(State(f): State<Fixture>) -> Response<Body> {
    let n = f.calls.next();
    Response::builder()
        .header("connection", "x-private, keep-alive")
        .header("keep-alive", "timeout=5")
        .header("x-private", "for this hop")
        .header("proxy-connection", "keep-alive")
        .header("upgrade", "h2c")
        .header("trailer", "x-checksum")
        .header("x-kept", "yes")
        .body(Body::from(format!("hop call {n}")))
        .unwrap()
}

pub(crate) fn trailer_map() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("abc123"));
    trailers.append("x-note", HeaderValue::from_static("one"));
    trailers.append("x-note", HeaderValue::from_static("two"));
    trailers
}

/// A body followed by trailers.
async fn trailers(State(f): State<Fixture>) -> Response<Body> {
    let n = f.calls.next();
    let body = Full::new(Bytes::from(format!("call {n}")))
        .with_trailers(async { Some(Ok::<_, Infallible>(trailer_map())) });
    Response::builder()
        .header("trailer", "x-checksum, x-note")
        .body(Body::new(body))
        .unwrap()
}

/// A body of 100 bytes (by its length) that fails after its first chunk, as when the upstream
/// connection drops.
async fn cut(State(f): State<Fixture>) -> Response<Body> {
    f.calls.next();
    Response::new(Body::new(
        Chunks::new(vec![Bytes::from_static(b"partial")])
            .then_fail()
            .with_length(100),
    ))
}

/// A body of chunks, with no size hint (sent chunked) unless it is given a length, optionally
/// failing at its end.
pub(crate) struct Chunks {
    chunks: VecDeque<Bytes>,
    fail: bool,
    length: Option<u64>,
}

impl Chunks {
    pub(crate) fn new(chunks: Vec<Bytes>) -> Self {
        Self {
            chunks: chunks.into(),
            fail: false,
            length: None,
        }
    }

    pub(crate) fn then_fail(mut self) -> Self {
        self.fail = true;
        self
    }

    /// Says the body has `length` bytes.
    pub(crate) fn with_length(mut self, length: u64) -> Self {
        self.length = Some(length);
        self
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Poll::Ready(match self.chunks.pop_front() {
            Some(chunk) => Some(Ok(Frame::data(chunk))),
            None if self.fail => {
                self.fail = false;
                Some(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "upstream connection reset",
                )))
            }
            None => None,
        })
    }

    fn size_hint(&self) -> SizeHint {
        self.length.map_or_else(SizeHint::new, SizeHint::with_exact)
    }
}

/// Everything a response carries.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) trailers: Option<HeaderMap>,
    pub(crate) outcome: Option<RequestOutcome>,
    pub(crate) key: Option<RequestKey>,
}

impl Reply {
    pub(crate) async fn read<B>(response: Response<B>) -> Self
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: std::fmt::Debug,
    {
        let (parts, body) = response.into_parts();
        let collected = body.collect().await.unwrap();
        Self {
            status: parts.status,
            outcome: parts.extensions.get().copied(),
            key: parts.extensions.get().cloned(),
            headers: parts.headers,
            trailers: collected.trailers().cloned(),
            body: collected.to_bytes(),
        }
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The header lines, in order.
    pub(crate) fn header_lines(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    pub(crate) fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }

    pub(crate) fn is_replay(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// The problem body, checked to be problem+json with this response's status.
    pub(crate) fn problem(&self) -> serde_json::Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let problem: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        assert_eq!(problem["status"], self.status.as_u16());
        assert!(problem["title"].as_str().is_some_and(|t| !t.is_empty()));
        problem
    }

    pub(crate) fn problem_type(&self) -> String {
        self.problem()["type"].as_str().unwrap().to_owned()
    }
}

pub(crate) async fn send(app: &Router, request: Request<Body>) -> Reply {
    Reply::read(app.clone().oneshot(request).await.unwrap()).await
}

/// A POST with a key and a JSON body.
pub(crate) fn keyed(uri: &str, key: &str, json: &str) -> Request<Body> {
    Request::post(uri)
        .header(KEY, key)
        .header("content-type", "application/json")
        .body(Body::from(json.to_owned()))
        .unwrap()
}
