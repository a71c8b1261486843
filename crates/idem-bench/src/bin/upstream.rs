//! A minimal payments-like API for the load harness: reads the request's body to its end, as an
//! API does, and answers at once with a small JSON body (`201` to POST and PATCH, `200`
//! otherwise), so that what a benchmark measures is the proxy in front of it.
//!
//! `/events?count=N&every_ms=M` answers instead a stream of server-sent events of unknown
//! length (chunked): `N` events (100 by default) `M` milliseconds apart (10), the first at once,
//! with `X-Accel-Buffering: no`, which tells nginx to pass each one on as it comes, as a
//! streaming API does.
//!
//! `idem-bench-upstream 127.0.0.1:18081`

use std::{convert::Infallible, net::SocketAddr, time::Duration};

use bytes::Bytes;
use futures_util::Stream;
use http_body_util::{BodyExt as _, Either, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::net::TcpListener;

const BODY: &[u8] = br#"{"id":"ch_3PqR8s2eZvKYlo2C0","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}"#;

type Body = Either<Full<Bytes>, StreamBody<Events>>;
type Events = std::pin::Pin<Box<dyn Stream<Item = Result<Frame<Bytes>, Infallible>> + Send>>;

async fn answer(request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if request.uri().path() == "/events" {
        return Ok(events(request.uri().query().unwrap_or("")));
    }
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
        .body(Either::Left(Full::new(Bytes::from_static(BODY))))
        .expect("static response");
    Ok(response)
}

/// The event stream `query` asks for (`count`, `every_ms`).
fn events(query: &str) -> Response<Body> {
    let number = |name: &str, default: u64| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(default)
    };
    let count = number("count", 100);
    let every = Duration::from_millis(number("every_ms", 10));
    let events: Events = Box::pin(futures_util::stream::unfold(0, move |n| async move {
        if n == count {
            return None;
        }
        if n > 0 {
            tokio::time::sleep(every).await;
        }
        let event = Bytes::from(format!("event: tick\ndata: {n}\n\n"));
        Some((Ok(Frame::data(event)), n + 1))
    }));
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("x-accel-buffering", "no")
        .body(Either::Right(StreamBody::new(events)))
        .expect("static response")
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
