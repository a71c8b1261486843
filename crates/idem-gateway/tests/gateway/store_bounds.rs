//! The store's bounds: a memory store that is full, too many waiters, and a store that stops
//! answering (behind a TCP proxy that stops passing bytes on).

use std::{net::SocketAddr, time::Duration};

use idem_test_support::Server;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::watch,
    task::JoinHandle,
    time::Instant,
};

use crate::{
    servers::RedisPrefix,
    support::{Client, Gateway, Upstream},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_refuses_a_new_key_with_503_store_full() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(&upstream.url(), &["--store", "memory://?max_keys=2"]);
    let client = Client::new();
    for key in ["full-1", "full-2"] {
        let reply = client.post(&gateway.url("/charges"), key, "{}").await;
        assert_eq!(reply.status, 201);
    }

    let refused = client.post(&gateway.url("/charges"), "full-3", "{}").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("content-type"), "application/problem+json");
    assert_eq!(refused.header("retry-after"), "1");
    assert_eq!(refused.json()["type"], "urn:idem:problem:store-full");
    assert_eq!(upstream.hits("charges"), 2);
    // The keys it holds still replay.
    let replay = client.post(&gateway.url("/charges"), "full-1", "{}").await;
    assert!(replay.replayed());

    let metrics = client
        .send(
            axum::http::Request::get(gateway.admin_url("/metrics"))
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    let text = metrics.text();
    for line in [
        "idem_store_full_total 1",
        "idem_requests_total{outcome=\"store_error\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_beyond_max_waiters_gets_409_at_once() {
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &[
            "--store",
            "memory://",
            "--in-flight",
            "wait",
            "--wait-timeout",
            "30s",
            "--max-waiters",
            "1",
        ],
    );
    let client = Client::new();
    let order = |delay: &'static str| {
        let client = client.clone();
        let url = gateway.url("/orders");
        async move {
            let started = Instant::now();
            let reply = client
                .send(
                    axum::http::Request::post(url)
                        .header("idempotency-key", "waited-for")
                        .header("x-delay-ms", delay)
                        .body(axum::body::Body::from("{}"))
                        .unwrap(),
                )
                .await;
            (reply, started.elapsed())
        }
    };
    let holder = tokio::spawn(order("2000"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiter = tokio::spawn(order("0"));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (refused, waited) = order("0").await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.json()["type"], "urn:idem:problem:in-flight");
    assert!(waited < Duration::from_millis(1500), "{waited:?}");

    let (first, _) = holder.await.unwrap();
    let (second, _) = waiter.await.unwrap();
    assert_eq!(first.status, 201);
    assert_eq!(second.status, 201);
    assert!(second.replayed());
    assert_eq!(second.body, first.body);
    assert_eq!(upstream.executions()["waited-for"], 1);
}

/// A TCP proxy on a loopback port in front of `target` that can stop passing bytes on, as a
/// network partition does: while stalled, nothing is read, so bytes wait in the sockets'
/// buffers and flow again, in order, when it resumes.
struct StallingProxy {
    addr: SocketAddr,
    stalled: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl StallingProxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stalled, watch) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (from_client, to_client) = client.into_split();
                    let (from_server, to_server) = server.into_split();
                    tokio::join!(
                        pipe(from_client, to_server, watch.clone()),
                        pipe(from_server, to_client, watch),
                    );
                });
            }
        });
        Self {
            addr,
            stalled,
            task,
        }
    }

    fn stall(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut stalled: watch::Receiver<bool>) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        if stalled.wait_for(|s| !s).await.is_err() {
            return;
        }
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read as the stall began are held until it ends.
        if stalled.wait_for(|s| !s).await.is_err() || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stops_answering_is_503_within_the_store_timeout_then_recovers() {
    let Some(server) = Server::Redis.url() else {
        return;
    };
    let authority = server.trim_start_matches("redis://");
    let authority = &authority[..authority.find(['/', '?']).unwrap_or(authority.len())];
    let target = tokio::net::lookup_host(authority)
        .await
        .unwrap()
        .next()
        .unwrap();
    let proxy = StallingProxy::start(target).await;
    let redis = RedisPrefix::on(&format!("redis://{}", proxy.addr));
    let upstream = Upstream::start().await;
    let gateway = Gateway::start(
        &upstream.url(),
        &["--store", &redis.store_url(), "--store-timeout", "500ms"],
    );
    let client = Client::new();
    let url = gateway.url("/charges");
    assert_eq!(client.post(&url, "stall-before", "{}").await.status, 201);

    proxy.stall(true);
    for n in 0..3 {
        let started = Instant::now();
        let reply = client.post(&url, &format!("stall-during-{n}"), "{}").await;
        let elapsed = started.elapsed();
        assert_eq!(reply.status, 503);
        assert_eq!(reply.json()["type"], "urn:idem:problem:store-unavailable");
        assert_eq!(reply.header("retry-after"), "1");
        // The store timeout fired, not Redis's own response timeout (5 s).
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    }
    assert_eq!(upstream.hits("charges"), 1);

    proxy.stall(false);
    let mut recovered = None;
    for _ in 0..50 {
        let reply = client.post(&url, "stall-after", "{}").await;
        if reply.status == 201 {
            recovered = Some(reply);
            break;
        }
        assert_eq!(reply.status, 503);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered.is_some(), "the gateway did not recover");
    assert!(client.post(&url, "stall-before", "{}").await.replayed());
    assert_eq!(upstream.hits("charges"), 2);
}
