//! The least a reverse proxy built on hyper does per request, for measuring the gateway's plain
//! proxy against its floor: hyper's server on each client connection (the same `auto` builder
//! the gateway serves with), one upstream connection of its own, opened with hyper's HTTP/1.1
//! client at the first request, and every request forwarded on it as it came, its response
//! returned as it came. No pool, no header rewriting, no timeouts, no logging, no metrics: not a
//! proxy to run, only the cost of hyper's two ends and the runtime between them.
//!
//! `idem-bench-hyper-proxy LISTEN UPSTREAM`, say `127.0.0.1:18082 127.0.0.1:18081`.

use std::{net::SocketAddr, sync::Arc};

use hyper::{
    Request, Response,
    body::Incoming,
    client::conn::http1::{self, SendRequest},
    service::service_fn,
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Mutex,
};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut address = |what: &str| -> std::io::Result<SocketAddr> {
        args.next()
            .ok_or_else(|| invalid(format!("missing {what}: LISTEN UPSTREAM")))?
            .parse()
            .map_err(invalid)
    };
    let (listen, upstream) = (address("LISTEN")?, address("UPSTREAM")?);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(listen, upstream))
}

fn invalid(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, error)
}

async fn serve(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    eprintln!("hyper proxy listening on {listen}, forwarding to {upstream}");
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        tokio::spawn(async move {
            // The client connection's requests come one after the other, so the upstream
            // connection is free when each arrives: the lock is never contended.
            let sender: Arc<Mutex<Option<SendRequest<Incoming>>>> = Arc::default();
            let forward = service_fn(move |request: Request<Incoming>| {
                let sender = Arc::clone(&sender);
                async move { forward(&sender, upstream, request).await }
            });
            // Errors here are clients going away mid-connection; nothing to do about them.
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), forward)
                .await;
        });
    }
}

async fn forward(
    sender: &Mutex<Option<SendRequest<Incoming>>>,
    upstream: SocketAddr,
    request: Request<Incoming>,
) -> anyhow::Result<Response<Incoming>> {
    let mut sender = sender.lock().await;
    if sender.as_ref().is_none_or(SendRequest::is_closed) {
        let io = TokioIo::new(TcpStream::connect(upstream).await?);
        let (opened, connection) = http1::handshake(io).await?;
        tokio::spawn(connection);
        *sender = Some(opened);
    }
    let sender = sender.as_mut().expect("opened above");
    sender.ready().await?;
    Ok(sender.send_request(request).await?)
}
