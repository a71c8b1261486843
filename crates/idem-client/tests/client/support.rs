//! What the tests share: an upstream that counts executions per key, the gateway in front of
//! it, a proxy that loses responses, an upstream that loses its connections, and a server that
//! answers from a script.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use idem_client::{Error, GiveUpReason, LastFailure};
use idem_gateway::{Config, Gateway};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// Aborts the server task when dropped.
struct Serving(JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

fn serve(listener: TcpListener, app: Router) -> Serving {
    Serving(tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    }))
}

/// The bodies the upstream answered, by `Idempotency-Key` ("" without one).
type Executions = Arc<Mutex<HashMap<String, Vec<Bytes>>>>;

/// An API behind the gateway that counts its executions per key.
pub(crate) struct Upstream {
    addr: SocketAddr,
    executions: Executions,
    _serving: Serving,
}

impl Upstream {
    /// Starts the upstream. Routes:
    /// - `POST /orders`: waits `x-delay-ms` (default 0) milliseconds, then 201
    ///   `{"key":K,"execution":N}`, N counting the executions for key K;
    /// - `POST /status/{code}`: that status, body `status {code}`.
    pub(crate) async fn start() -> Self {
        let executions = Executions::default();
        let app = Router::new()
            .route("/orders", post(order))
            .route("/status/{code}", post(status))
            .with_state(Arc::clone(&executions));
        let (listener, addr) = listen().await;
        Self {
            addr,
            executions,
            _serving: serve(listener, app),
        }
    }

    /// `http://ADDR`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many times a request with `key` was executed.
    pub(crate) fn executions(&self, key: &str) -> usize {
        self.executions.lock().unwrap().get(key).map_or(0, Vec::len)
    }

    /// How many requests were executed, whatever their key.
    pub(crate) fn total_executions(&self) -> usize {
        self.executions.lock().unwrap().values().map(Vec::len).sum()
    }

    /// The body of the first execution for `key`.
    pub(crate) fn first_body(&self, key: &str) -> Bytes {
        self.executions.lock().unwrap()[key][0].clone()
    }
}

/// Counts an execution for the request's key, and records and returns the body `answer` makes
/// from the key and the execution's number.
fn execute(
    executions: &Executions,
    headers: &HeaderMap,
    answer: impl FnOnce(&str, usize) -> Bytes,
) -> Bytes {
    let key = headers
        .get("idempotency-key")
        .map(|key| key.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let mut executions = executions.lock().unwrap();
    let bodies = executions.entry(key.clone()).or_default();
    let body = answer(&key, bodies.len() + 1);
    bodies.push(body.clone());
    body
}

async fn order(State(executions): State<Executions>, headers: HeaderMap) -> Response {
    let body = execute(&executions, &headers, |key, execution| {
        Bytes::from(json!({ "key": key, "execution": execution }).to_string())
    });
    let delay = headers
        .get("x-delay-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        body,
    )
        .into_response()
}

async fn status(
    State(executions): State<Executions>,
    Path(code): Path<u16>,
    headers: HeaderMap,
) -> Response {
    let body = execute(&executions, &headers, |_, _| {
        Bytes::from(format!("status {code}"))
    });
    (StatusCode::from_u16(code).unwrap(), body).into_response()
}

/// The idem gateway in this process, with the memory store, in front of `upstream`, set up as
/// `configure` says; serves until the test ends. Returns `http://ADDR`.
pub(crate) async fn gateway(upstream: &str, configure: impl FnOnce(&mut Config)) -> String {
    let mut config = Config::new(upstream.parse().unwrap());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.store = "memory://".parse().unwrap();
    configure(&mut config);
    let gateway = Gateway::bind(config).await.unwrap();
    let url = format!("http://{}", gateway.addr());
    tokio::spawn(gateway.run(std::future::pending()));
    url
}

/// A TCP proxy in front of `target` that loses responses: for the first `losses`
/// connections, it forwards the request, waits until the response starts to arrive — the
/// server has answered — and closes the client's connection instead of passing it on.
pub(crate) struct LossyProxy {
    addr: SocketAddr,
    lost: Arc<AtomicUsize>,
    _serving: Serving,
}

impl LossyProxy {
    pub(crate) async fn start(target: &str, losses: usize) -> Self {
        let target: SocketAddr = target.trim_start_matches("http://").parse().unwrap();
        let to_lose = Arc::new(AtomicUsize::new(losses));
        let lost = Arc::new(AtomicUsize::new(0));
        let (listener, addr) = listen().await;
        let counter = Arc::clone(&lost);
        let serving = Serving(tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                tokio::spawn(relay(
                    client,
                    target,
                    Arc::clone(&to_lose),
                    Arc::clone(&counter),
                ));
            }
        }));
        Self {
            addr,
            lost,
            _serving: serving,
        }
    }

    /// `http://ADDR`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many responses were lost.
    pub(crate) fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}

/// Relays one connection until either side closes; then closes both.
async fn relay(
    client: TcpStream,
    target: SocketAddr,
    to_lose: Arc<AtomicUsize>,
    lost: Arc<AtomicUsize>,
) {
    let server = TcpStream::connect(target).await.unwrap();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = tokio::io::copy(&mut client_read, &mut server_write);
    let responses = async {
        let mut head = vec![0; 64 * 1024];
        let n = server_read.read(&mut head).await?;
        if n == 0 {
            return Ok(0);
        }
        if to_lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            lost.fetch_add(1, Ordering::SeqCst);
            return Ok(0);
        }
        client_write.write_all(&head[..n]).await?;
        tokio::io::copy(&mut server_read, &mut client_write).await
    };
    tokio::select! {
        _ = requests => {}
        _ = responses => {}
    }
}

/// An upstream that reads each request whole and closes the connection without an answer:
/// the request was delivered, its outcome lost.
pub(crate) struct BrokenUpstream {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    _serving: Serving,
}

impl BrokenUpstream {
    pub(crate) async fn start() -> Self {
        let requests = Arc::new(AtomicUsize::new(0));
        let (listener, addr) = listen().await;
        let counter = Arc::clone(&requests);
        let serving = Serving(tokio::spawn(async move {
            loop {
                let (connection, _) = listener.accept().await.unwrap();
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    if read_request(connection).await.is_some() {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        }));
        Self {
            addr,
            requests,
            _serving: serving,
        }
    }

    /// `http://ADDR`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many requests arrived whole.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads one HTTP/1.1 request, head and `Content-Length` body; `None` if it broke off.
async fn read_request(mut connection: TcpStream) -> Option<()> {
    let mut data = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        let n = connection.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&chunk[..n]);
        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |value| value.trim().parse().unwrap());
        if data.len() >= end + 4 + length {
            return Some(());
        }
    }
}

/// One scripted answer: status, headers, body.
pub(crate) type Answer = (u16, &'static [(&'static str, &'static str)], &'static str);

/// What a scripted server received: the headers and the body of each request.
pub(crate) type Received = Vec<(HeaderMap, Bytes)>;

/// A server that answers requests with its script, in order (then 200 `done`), and records
/// what it received.
pub(crate) struct Scripted {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    _serving: Serving,
}

#[derive(Clone)]
struct Script {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    received: Arc<Mutex<Received>>,
}

impl Scripted {
    pub(crate) async fn start(script: impl IntoIterator<Item = Answer>) -> Self {
        let script = Script {
            answers: Arc::new(Mutex::new(script.into_iter().collect())),
            received: Arc::default(),
        };
        let received = Arc::clone(&script.received);
        let app = Router::new().fallback(answer).with_state(script);
        let (listener, addr) = listen().await;
        Self {
            addr,
            received,
            _serving: serve(listener, app),
        }
    }

    /// `http://ADDR/PATH`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What was received so far.
    pub(crate) fn received(&self) -> Received {
        self.received.lock().unwrap().clone()
    }
}

async fn answer(State(script): State<Script>, headers: HeaderMap, body: Bytes) -> Response {
    script.received.lock().unwrap().push((headers, body));
    let Some((status, headers, body)) = script.answers.lock().unwrap().pop_front() else {
        return (StatusCode::OK, "done").into_response();
    };
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    for (name, value) in headers {
        response.headers_mut().insert(*name, value.parse().unwrap());
    }
    response
}

/// A problem body's `type`.
pub(crate) fn problem_type(response: &idem_client::Response) -> String {
    let problem: serde_json::Value = response.json().unwrap();
    problem["type"].as_str().unwrap().to_owned()
}

/// The attempts, the reason and the last answer of an [`Error::GaveUp`] whose last attempt got a
/// (retryable) status.
pub(crate) fn gave_up_on_status(error: Error) -> (u32, GiveUpReason, idem_client::Response) {
    match error {
        Error::GaveUp {
            attempts,
            reason,
            last: LastFailure::Status(last),
            ..
        } => (attempts, reason, last),
        other => panic!("expected GaveUp on a status, got {other:?}"),
    }
}

/// The attempts, the reason and the last transport error of an [`Error::GaveUp`] whose last
/// attempt got no answer.
pub(crate) fn gave_up_on_transport(error: Error) -> (u32, GiveUpReason, reqwest::Error) {
    match error {
        Error::GaveUp {
            attempts,
            reason,
            last: LastFailure::Transport(last),
            ..
        } => (attempts, reason, last),
        other => panic!("expected GaveUp on a transport error, got {other:?}"),
    }
}
