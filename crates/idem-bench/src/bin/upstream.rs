//! A minimal payments-like API for the load harness: reads the request's body to its end, as an
//! API does, and answers at once with a small JSON body (`201` to POST and PATCH, `200`
//! otherwise), so that what a benchmark measures is the proxy in front of it.
//!
//! `idem-bench-upstream 127.0.0.1:18081`

use std::{convert::Infallible, net::SocketAddr};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"id":"ch_3PqR8s2eZvKYlo2C0","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}"#;

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let status = match *request.method() {
        Method::POST | Method::PATCH => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    // Frames are dropped as they arrive: a large body costs no buffer. A body cut off by the
    // client ends the connection, which is all there is to do about it.
    let mut body = request.into_body();
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
    let response = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(BODY)))
        .expect("static response");
    Ok(response)
}

fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18081".into())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(addr))
}

async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    eprintln!("upstream listening on {addr}");
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        tokio::spawn(async move {
            let io = TokioIo::new(stream);
            // Errors here are clients going away mid-connection; nothing to do about them.
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(io, service_fn(answer))
                .await;
        });
    }
}
