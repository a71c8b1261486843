//! Every bound of `idem serve`: a slow body, idle and excess connections, a long request head,
//! a burst of bodies over the buffer budget, a stalled upstream body, and a shutdown that
//! outlasts its timeout.

use std::{
    convert::Infallible,
    net::SocketAddr,
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::{Body, Bytes},
    http::{Request, StatusCode},
    routing::post,
};
use http_body_util::BodyExt;
use hyper_util::{
    client::legacy::Client as HyperClient,
    rt::{TokioExecutor, TokioIo},
};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::support::{Client, Gateway, Upstream};

/// Reads what the gateway sends on `socket` until it closes the connection (at most 10 s).
async fn read_to_close(socket: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut received))
        .await
        .expect("the gateway closes the connection")
        .unwrap();
    received
}

/// The status and the JSON body of a raw HTTP/1.1 response.
fn status_and_problem(response: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_half_way_through_its_body_gets_408_and_others_are_served() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--body-timeout", "1s"],
    );
    let mut slow = TcpStream::connect(gateway.addr).await.unwrap();
    let started = Instant::now();
    slow.write_all(
        b"POST /orders HTTP/1.1\r\nHost: idem\r\nIdempotency-Key: half-1\r\n\
          Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"amount\":",
    )
    .await
    .unwrap();

    // Meanwhile, another client is served.
    let other = Client::new()
        .post(&gateway.url("/orders"), "whole-1", "{}")
        .await;
    assert_eq!(other.status, 201);

    let response = read_to_close(&mut slow).await;
    let waited = started.elapsed();
    let (status, problem) = status_and_problem(&response);
    assert_eq!(status, 408);
    assert_eq!(problem["type"], "urn:idem:problem:body-timeout");
    assert_eq!(
        problem["detail"],
        "The request body was not received within 1s; nothing was executed."
    );
    assert!(
        waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    assert_eq!(upstream.hits("orders"), 1);
    assert_eq!(upstream.executions().get("half-1"), None);
    let record = Client::new()
        .send(
            Request::get(gateway.admin_url("/v1/keys/half-1"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(record.status, 404, "the key was never acquired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--idle-timeout", "500ms"],
    );
    // Never a request.
    let mut silent = TcpStream::connect(gateway.addr).await.unwrap();
    // One request, then kept alive without another.
    let mut kept_alive = TcpStream::connect(gateway.addr).await.unwrap();
    kept_alive
        .write_all(b"GET /hello HTTP/1.1\r\nHost: idem\r\n\r\n")
        .await
        .unwrap();

    assert_eq!(read_to_close(&mut silent).await, b"");
    let response = String::from_utf8(read_to_close(&mut kept_alive).await).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("\r\n\r\nhello"), "{response}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_64_kib_gets_431() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let head = |header_len: usize| {
        format!(
            "GET /hello HTTP/1.1\r\nHost: idem\r\nX-Long: {}\r\nConnection: close\r\n\r\n",
            "x".repeat(header_len)
        )
    };
    for (header_len, status) in [(60 * 1024, "200"), (64 * 1024, "431")] {
        let mut socket = TcpStream::connect(gateway.addr).await.unwrap();
        socket.write_all(head(header_len).as_bytes()).await.unwrap();
        let response = String::from_utf8(read_to_close(&mut socket).await).unwrap();
        assert!(
            response.starts_with(&format!("HTTP/1.1 {status} ")),
            "{header_len}: {response}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--idle-timeout", "500ms"],
    );
    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(
            Request::get(gateway.url("/hello"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "hello");

    let ended = tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("the gateway closes the idle connection");
    assert!(ended.unwrap().is_ok(), "closed gracefully, with a GOAWAY");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_runs_at_most_256_streams_at_once() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://"]);
    let stream = TcpStream::connect(gateway.addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    // 257 slow requests on the one connection: the client holds back what the server's
    // SETTINGS_MAX_CONCURRENT_STREAMS does not allow, so one waits for a stream to end.
    let requests: Vec<_> = (0..257)
        .map(|_| {
            let mut sender = sender.clone();
            let request = Request::post(gateway.url("/slow"))
                .header("x-delay-ms", "8000")
                .body(Body::empty())
                .unwrap();
            tokio::spawn(async move {
                let response = sender.send_request(request).await.unwrap();
                response.status()
            })
        })
        .collect();
    // Every request is held 8 s: none has ended when the count is read, within 6 s.
    let deadline = Instant::now() + Duration::from_secs(6);
    while upstream.hits("slow") < 256 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(upstream.hits("slow"), 256, "the streams running at once");
    for request in requests {
        assert_eq!(request.await.unwrap(), StatusCode::CREATED);
    }
    assert_eq!(upstream.hits("slow"), 257);
}

#[tokio::test]
async fn an_http2_connection_is_pinged_and_closed_when_its_pings_go_unanswered() {
    let upstream = Upstream::start().await;
    // The idle timeout is out of the way: only the keep-alive pings can close the connection.
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--idle-timeout", "10m"],
    );
    let mut socket = TcpStream::connect(gateway.addr).await.unwrap();
    // The client preface and an empty SETTINGS frame; then the client reads and never answers.
    socket
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let started = Instant::now();
    let (mut pings, mut pinged_after) = (0, None);
    loop {
        let mut header = [0; 9];
        let read = tokio::time::timeout(Duration::from_secs(90), socket.read_exact(&mut header))
            .await
            .expect("the gateway closes the connection");
        if read.is_err() {
            break;
        }
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let mut payload = vec![0; length];
        if socket.read_exact(&mut payload).await.is_err() {
            break;
        }
        // A PING (type 6) that is not an acknowledgement (flag 1).
        if header[3] == 6 && header[4] & 1 == 0 {
            pings += 1;
            pinged_after.get_or_insert(started.elapsed());
        }
    }
    let closed_after = started.elapsed();
    assert_eq!(pings, 1, "one ping, then the connection is closed");
    // Pinged after the 20 s interval, closed 20 s later without an answer.
    let pinged_after = pinged_after.unwrap();
    assert!(
        pinged_after >= Duration::from_secs(19),
        "pinged after {pinged_after:?}"
    );
    assert!(
        closed_after >= pinged_after + Duration::from_secs(19),
        "pinged after {pinged_after:?}, closed after {closed_after:?}"
    );
}

/// `POST /slow` with a key, on a connection of its own, the response read to the end.
async fn slow_on_its_own_connection(addr: SocketAddr, key: &str, delay_ms: u64) -> String {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /slow HTTP/1.1\r\nHost: idem\r\nIdempotency-Key: {key}\r\nX-Delay-Ms: {delay_ms}\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    String::from_utf8(read_to_close(&mut socket).await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_connections_a_new_connection_waits_for_a_busy_one_to_end() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--max-connections", "2"],
    );
    let busy: Vec<_> = ["busy-1", "busy-2"]
        .into_iter()
        .map(|key| tokio::spawn(slow_on_its_own_connection(gateway.addr, key, 2_000)))
        .collect();
    upstream.wait_for_hits("slow", 2).await;

    let third = tokio::spawn({
        let client = Client::new();
        let url = gateway.url("/charges");
        async move { client.post(&url, "third-1", "{}").await }
    });
    // Both slots are held by requests in progress: the third is not served meanwhile.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(upstream.hits("slow"), 2);
    assert_eq!(upstream.hits("charges"), 0);

    for reply in busy {
        let reply = reply.await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 201 Created\r\n"), "{reply}");
    }
    let third = third.await.unwrap();
    assert_eq!(third.status, 201);
    assert_eq!(upstream.hits("charges"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections_do_not_keep_a_new_client_out() {
    // This process and the gateway it starts each hold 10,000 sockets.
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let open_files: u64 = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        open_files >= 10_100,
        "this test needs `ulimit -n` of at least 10100 (scripts/test raises it), not {open_files}"
    );
    let upstream = Upstream::start().await;
    // The default --max-connections: 10,000. The idle timeout is out of the way: the idle
    // connections are closed for the new one, not because they timed out.
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--idle-timeout", "10m"],
    );
    let open = || {
        std::fs::read_dir(format!("/proc/{}/fd", gateway.pid()))
            .unwrap()
            .count()
    };
    let before = open();
    let mut idle = Vec::with_capacity(10_000);
    for _ in 0..10_000 {
        idle.push(TcpStream::connect(gateway.addr).await.unwrap());
    }
    // Once the gateway has accepted them all (one descriptor each), and they have been idle
    // long enough to be closed for a new connection.
    let deadline = Instant::now() + Duration::from_secs(60);
    while open() < before + 10_000 {
        assert!(
            Instant::now() < deadline,
            "the gateway accepted {} connections",
            open()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let asked = Instant::now();
    let reply = tokio::time::timeout(
        Duration::from_secs(1),
        Client::new().send(
            Request::get(gateway.url("/hello"))
                .body(Body::empty())
                .unwrap(),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("no answer within a second ({:?})", asked.elapsed()));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "hello");
    gateway
        .log_line(|line| {
            line["message"] == "the connection limit is reached: closing idle connections"
        })
        .await;
}

/// `VmHWM` (the peak resident memory) of process `pid`, in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap();
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// `POST /slow` with a key, holding the upstream for 3 s, and a body of `len` bytes sent the
/// way large uploads are (curl does it): with `Expect: 100-continue`, the body only once the
/// gateway asks for it. The final response, read to the end.
async fn upload(addr: SocketAddr, key: String, len: usize) -> Vec<u8> {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /slow HTTP/1.1\r\nHost: idem\r\nIdempotency-Key: {key}\r\nX-Delay-Ms: 3000\r\n\
         Content-Length: {len}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0; 4096];
    while !received.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buffer).await.unwrap();
        assert_ne!(n, 0, "the connection closed before a response");
        received.extend_from_slice(&buffer[..n]);
    }
    const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
    if received.starts_with(CONTINUE) {
        received.drain(..CONTINUE.len());
        socket.write_all(&vec![b'x'; len]).await.unwrap();
    }
    received.extend(read_to_close(&mut socket).await);
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_bodies_over_max_buffered_is_refused_with_503_and_memory_stays_bounded() {
    const MIB: usize = 1 << 20;
    // Bodies large enough that the allocator's own noise is small beside them.
    const BODY: usize = 8 * MIB;
    const BUDGET: usize = 64 * MIB;
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--max-buffered",
            "64MiB",
            "--max-body",
            "8MiB",
        ],
    );
    // Warm up: the first request allocates what every request needs.
    let warm = Client::new()
        .post(&gateway.url("/orders"), "warm", "{}")
        .await;
    assert_eq!(warm.status, 201);
    let before = peak_resident(gateway.pid());

    let uploads: Vec<_> = (0..24)
        .map(|i| tokio::spawn(upload(gateway.addr, format!("burst-{i}"), BODY)))
        .collect();
    let mut created = 0;
    let mut overloaded = 0;
    for upload in uploads {
        let response = upload.await.unwrap();
        let text = String::from_utf8_lossy(&response);
        let (status, problem) = if text.starts_with("HTTP/1.1 201 ") {
            created += 1;
            continue;
        } else {
            status_and_problem(&response)
        };
        assert_eq!(status, 503, "{text}");
        assert_eq!(problem["type"], "urn:idem:problem:overloaded");
        assert!(text.contains("\r\nretry-after: 1\r\n"), "{text}");
        overloaded += 1;
    }
    // 64 MiB holds exactly eight bodies of 8 MiB; the others came while they were held.
    assert_eq!((created, overloaded), (8, 16));
    assert_eq!(upstream.hits("slow"), 8);

    // A buffered byte is held once; the HTTP stack's read buffers and the allocator add a
    // little (see docs/gateway.md, Bounds), far below the 192 MiB offered.
    let grown = peak_resident(gateway.pid()).saturating_sub(before);
    let per_byte = grown as f64 / BUDGET as f64;
    eprintln!("peak resident memory grew by {per_byte:.2} bytes per buffered byte");
    assert!(
        per_byte <= 1.5,
        "the peak resident memory grew by {} MiB for a budget of 64 MiB: {per_byte:.2} bytes per \
         buffered byte",
        grown / MIB as u64
    );
}

/// An upstream whose `POST /stall` sends its head and a first chunk, then nothing more.
async fn stalling_upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let stalling = || {
        let first = futures_util::stream::once(async {
            Ok::<_, Infallible>(Bytes::from_static(b"first chunk"))
        });
        let never = futures_util::stream::pending();
        Body::from_stream(futures_util::StreamExt::chain(first, never))
    };
    // `/stall` has no length (chunked); `/stall-known` says 100 bytes.
    let app = Router::new()
        .route("/stall", post(move || async move { stalling() }))
        .route(
            "/stall-known",
            post(move || async move {
                axum::response::Response::builder()
                    .header("content-length", "100")
                    .body(stalling())
                    .unwrap()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_timeout_bounds_the_response_body_too() {
    let (upstream, task) = stalling_upstream().await;
    let gateway = Gateway::start(
        &format!("http://{upstream}"),
        &["--store", "memory://", "--upstream-timeout", "500ms"],
    );
    let client = Client::new();

    let released = |key: &str| {
        let request = Request::get(gateway.admin_url(&format!("/v1/keys/{key}")))
            .body(Body::empty())
            .unwrap();
        let client = client.clone();
        async move { client.send(request).await.status == 404 }
    };

    // With a key and a length, the body is read to be stored before it is sent: a lost upstream
    // answer, the key released.
    let keyed = tokio::time::timeout(
        Duration::from_secs(10),
        client.post(&gateway.url("/stall-known"), "stall-1", "{}"),
    )
    .await
    .expect("answered once the upstream timeout passed");
    assert_eq!(keyed.status, StatusCode::BAD_GATEWAY);
    assert_eq!(keyed.json()["type"], "urn:idem:problem:upstream-failed");
    assert!(released("stall-1").await);

    // Streamed (no length), with a key or without: the head and the first chunk are passed on,
    // then the response is cut off; the key is released.
    let raw = HyperClient::builder(TokioExecutor::new()).build_http::<Body>();
    for key in [Some("stall-2"), None] {
        let mut request = Request::post(gateway.url("/stall"));
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = raw
            .request(request.body(Body::from("{}")).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
            .await
            .expect("the body ends once the upstream timeout passed");
        assert!(body.is_err(), "the client sees the response cut off");
    }
    assert!(released("stall-2").await);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_shutdown_timeout_the_gateway_exits_0_and_logs_the_keys_left_processing() {
    let upstream = Upstream::start().await;
    let mut gateway = Gateway::start(
        &upstream.url(),
        &["--store", "memory://", "--shutdown-timeout", "1s"],
    );
    let request = tokio::spawn(slow_on_its_own_connection(gateway.addr, "left-1", 30_000));
    upstream.wait_for_hits("slow", 1).await;

    let terminated = Instant::now();
    gateway.terminate();
    let status = gateway.exit_status(Duration::from_secs(8)).await;
    assert_eq!(status.code(), Some(0));
    assert!(terminated.elapsed() >= Duration::from_secs(1));
    let left = gateway
        .log_line(|line| {
            line["message"]
                == "keys left processing at the shutdown timeout; their leases free them"
        })
        .await;
    assert_eq!(left["processing"], 1);
    assert_eq!(left["timeout"], "1s");
    let stopped = gateway.log_line(|line| line["message"] == "stopped").await;
    assert_eq!(stopped["processing"], 1);
    // The client's connection was closed without an answer.
    assert_eq!(request.await.unwrap(), "");
}
