//! What the gateway tests share: an upstream that counts executions, the `idem` binary as a
//! child process on free loopback ports, and a small HTTP client.

use std::{
    collections::HashMap,
    convert::Infallible,
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::{Path as UrlPath, Query, State},
    http::{HeaderMap, Method, Request, StatusCode, Uri, Version},
    response::{AppendHeaders, IntoResponse, Response},
    routing::{any, get, post},
};
use http_body_util::BodyExt;
use hyper_util::{
    client::legacy::{Client as HyperClient, connect::HttpConnector},
    rt::TokioExecutor,
};
use serde_json::{Value, json};

/// The path of the binary under test.
pub(crate) const IDEM: &str = env!("CARGO_BIN_EXE_idem");

/// An HTTP API on a free loopback port that counts how often each route ran, and how often
/// `/orders` ran for each key.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    hits: Arc<Mutex<HashMap<&'static str, usize>>>,
    orders: Orders,
    task: tokio::task::JoinHandle<()>,
}

type Hits = Arc<Mutex<HashMap<&'static str, usize>>>;
/// Executions of `/orders`, by idempotency key.
type Orders = Arc<Mutex<HashMap<String, usize>>>;

fn hit(hits: &Hits, route: &'static str) -> usize {
    let mut hits = hits.lock().unwrap();
    let count = hits.entry(route).or_default();
    *count += 1;
    *count
}

impl Upstream {
    /// Starts the upstream. Routes:
    /// - `POST /charges`: 201 `{"charge":N}` (N counts the executions);
    /// - `POST /orders`: waits `x-delay-ms` (default 0) milliseconds, then 201
    ///   `{"key":K,"execution":N}`, N counting the executions for the `Idempotency-Key` K;
    /// - `POST /slow`: waits `x-delay-ms` (default 1500) milliseconds, then 201 `slow done`;
    /// - `POST /status/{code}`: that status, body `status {code}`;
    /// - `POST /big?bytes=N`: 200 with N bytes of `0123456789`…;
    /// - `POST /binary`: 200 echoing the body as `application/octet-stream`;
    /// - `ANY /echo`: 200 with the request as JSON (method, path, query, version, headers, body);
    /// - `POST /hop`: 200 `hop` with hop-by-hop headers (`Connection: x-custom`, `X-Custom`,
    ///   `Keep-Alive`) and an end-to-end one (`X-Kept`);
    /// - `GET /hello`: 200 `hello`;
    /// - `POST /cookies`: 201 `{"session":N}` with `Set-Cookie: session=N` and
    ///   `Set-Cookie: theme=dark`;
    /// - `POST /events`: 200 `text/event-stream` of unknown length, `x-events` (default 10)
    ///   events `data: I` sent `x-every-ms` (default 300) milliseconds apart, the first at once,
    ///   each counted as `events-sent`; after `x-cut-after` events, the connection is reset.
    pub(crate) async fn start() -> Self {
        let hits: Hits = Arc::default();
        let orders: Orders = Arc::default();
        let app = Router::new()
            .route(
                "/orders",
                post(order).layer(axum::Extension(Arc::clone(&orders))),
            )
            .route("/charges", post(charges))
            .route("/slow", post(slow))
            .route("/status/{code}", post(status))
            .route("/big", post(big))
            .route("/binary", post(binary))
            .route("/echo", any(echo))
            .route("/hop", post(hop))
            .route("/hello", get(hello))
            .route("/cookies", post(cookies))
            .route("/events", post(events))
            .with_state(Arc::clone(&hits));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            hits,
            orders,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`, for `--upstream`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many times `route` ran.
    pub(crate) fn hits(&self, route: &str) -> usize {
        self.hits.lock().unwrap().get(route).copied().unwrap_or(0)
    }

    /// How many times `/orders` ran for each key.
    pub(crate) fn executions(&self) -> HashMap<String, usize> {
        self.orders.lock().unwrap().clone()
    }

    /// Waits until `route` has run `n` times.
    pub(crate) async fn wait_for_hits(&self, route: &str, n: usize) {
        for _ in 0..500 {
            if self.hits(route) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{route} ran {} times, expected {n}", self.hits(route));
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn order(
    State(hits): State<Hits>,
    axum::Extension(orders): axum::Extension<Orders>,
    headers: HeaderMap,
) -> Response {
    hit(&hits, "orders");
    let key = headers
        .get("idempotency-key")
        .map(|key| key.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let execution = {
        let mut orders = orders.lock().unwrap();
        let count = orders.entry(key.clone()).or_default();
        *count += 1;
        *count
    };
    let delay = headers
        .get("x-delay-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let body = json!({ "key": key, "execution": execution });
    (StatusCode::CREATED, Json(body)).into_response()
}

async fn charges(State(hits): State<Hits>) -> Response {
    let n = hit(&hits, "charges");
    (StatusCode::CREATED, Json(json!({ "charge": n }))).into_response()
}

async fn slow(State(hits): State<Hits>, headers: HeaderMap) -> Response {
    hit(&hits, "slow");
    let delay = headers
        .get("x-delay-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1500);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    (StatusCode::CREATED, "slow done").into_response()
}

async fn events(State(hits): State<Hits>, headers: HeaderMap) -> Response {
    hit(&hits, "events");
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    };
    let count = number("x-events").unwrap_or(10);
    let every = Duration::from_millis(number("x-every-ms").unwrap_or(300));
    let cut_after = number("x-cut-after");
    let stream = futures_util::stream::unfold(1, move |n| {
        let hits = Arc::clone(&hits);
        async move {
            if n > count || cut_after.is_some_and(|cut| n > cut + 1) {
                return None;
            }
            if n > 1 {
                tokio::time::sleep(every).await;
            }
            if cut_after.is_some_and(|cut| n > cut) {
                let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut off");
                return Some((Err(reset), n + 1));
            }
            hit(&hits, "events-sent");
            Some((Ok(Bytes::from(format!("data: {n}\n\n"))), n + 1))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn status(State(hits): State<Hits>, UrlPath(code): UrlPath<u16>) -> Response {
    hit(&hits, "status");
    (
        StatusCode::from_u16(code).unwrap(),
        format!("status {code}"),
    )
        .into_response()
}

async fn big(State(hits): State<Hits>, Query(query): Query<HashMap<String, usize>>) -> Response {
    hit(&hits, "big");
    (StatusCode::OK, big_body(query["bytes"])).into_response()
}

/// `n` bytes of `0123456789` repeated.
pub(crate) fn big_body(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'0' + (i % 10) as u8).collect()
}

async fn binary(State(hits): State<Hits>, body: Bytes) -> Response {
    hit(&hits, "binary");
    ([("content-type", "application/octet-stream")], body).into_response()
}

async fn echo(
    State(hits): State<Hits>,
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    body: Bytes,
) -> Json<Value> {
    hit(&hits, "echo");
    let mut map: HashMap<String, Vec<String>> = HashMap::new();
    for (name, value) in &headers {
        map.entry(name.to_string())
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    Json(json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "version": format!("{version:?}"),
        "headers": map,
        "body": String::from_utf8_lossy(&body),
    }))
}

async fn hop(State(hits): State<Hits>) -> Response {
    hit(&hits, "hop");
    (
        [
            ("connection", "x-custom"),
            ("x-custom", "1"),
            ("keep-alive", "timeout=5"),
            ("x-kept", "yes"),
        ],
        "hop",
    )
        .into_response()
}

async fn cookies(State(hits): State<Hits>) -> Response {
    let n = hit(&hits, "cookies");
    (
        StatusCode::CREATED,
        AppendHeaders([
            ("set-cookie", format!("session={n}")),
            ("set-cookie", "theme=dark".to_owned()),
        ]),
        Json(json!({ "session": n })),
    )
        .into_response()
}

async fn hello(State(hits): State<Hits>) -> &'static str {
    hit(&hits, "hello");
    "hello"
}

/// A command for the binary, with no `IDEM_*` variable inherited from the test's environment.
///
/// `IDEM_TEST_BIN` names another build of the binary to run instead: several checkouts that
/// share one target directory overwrite each other's `target/debug/idem`.
pub(crate) fn idem_command() -> Command {
    let binary = std::env::var_os("IDEM_TEST_BIN").unwrap_or_else(|| IDEM.into());
    let mut command = Command::new(binary);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("IDEM_") {
            command.env_remove(name);
        }
    }
    command
}

/// The output of a short `idem` command.
pub(crate) struct Output {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `idem ARGS…` to the end.
pub(crate) fn idem(args: &[&str]) -> Output {
    let output = idem_command().args(args).output().unwrap();
    Output {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// An `idem` process (`relay`, `deliver`, …), killed when dropped.
pub(crate) struct Running(pub(crate) Child);

impl Running {
    /// Runs `idem` with `args`, quietly, and waits (up to 10 s) until its admin listener at
    /// `admin` accepts connections.
    pub(crate) async fn start(args: &[&str], admin: &str) -> Self {
        let mut command = idem_command();
        command
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Self::spawn(command, admin).await
    }

    /// Runs `command`, and waits (up to 10 s) until its admin listener at `admin` accepts
    /// connections.
    pub(crate) async fn spawn(mut command: Command, admin: &str) -> Self {
        let running = Self(command.stdin(Stdio::null()).spawn().unwrap());
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(admin).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `idem serve` as a child process on free loopback ports, killed when dropped.
pub(crate) struct Gateway {
    child: Child,
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    logs: Arc<Mutex<Vec<Value>>>,
}

impl Gateway {
    /// Starts `idem serve --upstream UPSTREAM ARGS…` with JSON logs, on ports chosen by the
    /// system, and waits until it listens.
    pub(crate) fn start(upstream: &str, args: &[&str]) -> Self {
        let mut command = idem_command();
        command.args(["serve", "--upstream", upstream]);
        Self::spawn(command, args)
    }

    /// Starts `idem serve ARGS…` (the caller sets the upstream, its environment, …).
    pub(crate) fn spawn(mut command: Command, args: &[&str]) -> Self {
        command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let logs: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (listening, addresses) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                    panic!("a log line that is not JSON: {line}");
                };
                if entry["message"] == "listening" {
                    let addr = |field: &str| entry[field].as_str().unwrap().parse().unwrap();
                    let _ = listening.send((addr("listen"), addr("admin")));
                }
                lines.lock().unwrap().push(entry);
            }
        });
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("idem stderr: {line}");
            }
        });
        let (addr, admin) = addresses
            .recv_timeout(Duration::from_secs(20))
            .expect("the gateway says where it listens");
        Self {
            child,
            addr,
            admin,
            logs,
        }
    }

    /// `http://ADDR/PATH` on the proxy.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `http://ADMIN/PATH` on the admin listener.
    pub(crate) fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    /// The log lines so far, as JSON.
    pub(crate) fn logs(&self) -> Vec<Value> {
        self.logs.lock().unwrap().clone()
    }

    /// The first log line that `matches`, waiting for it to be written.
    pub(crate) async fn log_line(&self, matches: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..300 {
            if let Some(line) = self.logs().into_iter().find(&matches) {
                return line;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no such log line in {:?}", self.logs());
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for the process to exit, for at most `timeout`.
    pub(crate) async fn exit_status(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the gateway did not exit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the gateway with SIGTERM and checks that it exits 0.
    pub(crate) async fn stop(mut self) {
        self.terminate();
        let status = self.exit_status(Duration::from_secs(20)).await;
        assert_eq!(status.code(), Some(0));
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `sqlite://` URL for `file` in `dir`.
pub(crate) fn sqlite_url(dir: &Path, file: &str) -> String {
    format!("sqlite://{}", dir.join(file).display())
}

/// A response read to the end.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    /// A header's value as text (panics when absent).
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:?}"))
            .to_str()
            .unwrap()
    }

    /// Whether the response is a replay.
    pub(crate) fn replayed(&self) -> bool {
        match self.headers.get("idempotent-replayed") {
            Some(value) => {
                assert_eq!(value, "true");
                true
            }
            None => false,
        }
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| panic!("not JSON: {:?}", self.body))
    }

    /// The body as text.
    pub(crate) fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

/// An HTTP/1.1 (or, with `h2c`, HTTP/2 prior knowledge) client.
#[derive(Clone)]
pub(crate) struct Client(HyperClient<HttpConnector, Body>);

impl Client {
    pub(crate) fn new() -> Self {
        Self(HyperClient::builder(TokioExecutor::new()).build_http())
    }

    pub(crate) fn h2c() -> Self {
        Self(
            HyperClient::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        )
    }

    /// Sends `request` and returns the response once its head has come.
    pub(crate) async fn start(
        &self,
        request: Request<Body>,
    ) -> axum::http::Response<hyper::body::Incoming> {
        self.0.request(request).await.unwrap()
    }

    /// Sends `request` and reads the whole response.
    pub(crate) async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.0.request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// `POST url` with `Idempotency-Key: key` and a JSON body.
    pub(crate) async fn post(&self, url: &str, key: &str, body: &str) -> Reply {
        self.send(
            Request::post(url)
                .header("idempotency-key", key)
                .header("content-type", "application/json")
                .body(Body::from(body.to_owned()))
                .unwrap(),
        )
        .await
    }
}

/// A body sent in `chunks`, with a pause between them, without a `Content-Length` (so as
/// `Transfer-Encoding: chunked` over HTTP/1.1).
pub(crate) fn chunked(chunks: Vec<&'static [u8]>) -> Body {
    let stream = futures_util::stream::unfold(chunks.into_iter(), |mut chunks| async move {
        let chunk = chunks.next()?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        Some((Ok::<_, Infallible>(Bytes::from_static(chunk)), chunks))
    });
    Body::from_stream(stream)
}
