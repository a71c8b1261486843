//! The layer in an axum server on a real socket, driven by a hyper client.

use axum::body::Body;
use bytes::Bytes;
use http::{Request, StatusCode};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use tokio::{net::TcpListener, task::JoinHandle};

use crate::common::{Chunks, Fixture, KEY, Reply, trailer_map};

async fn serve(app: axum::Router) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_socket_a_chunked_request_executes_once_and_its_retry_is_replayed() {
    let f = Fixture::new();
    let (base, server) = serve(f.app(f.layer())).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let request = |body: Body| {
        Request::post(format!("{base}/echo"))
            .header(KEY, "pay-1")
            .header("authorization", "Bearer alice")
            .header("content-type", "application/octet-stream")
            .body(body)
            .unwrap()
    };
    let payload: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    // The first attempt is sent chunked, the retry with a Content-Length: the same request.
    let chunks = payload.chunks(3_000).map(Bytes::copy_from_slice).collect();
    let first = client
        .request(request(Body::new(Chunks::new(chunks))))
        .await
        .unwrap();
    let first = Reply::read(first).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, payload);
    assert_eq!(first.header("x-call"), Some("1"));
    assert!(!first.is_replay());

    let retry = client
        .request(request(Body::from(payload.clone())))
        .await
        .unwrap();
    let retry = Reply::read(retry).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.body, payload);
    assert_eq!(retry.header("x-call"), Some("1"));
    assert_eq!(retry.header("content-length"), Some("10000"));
    assert!(retry.is_replay());
    assert_eq!(f.calls.get(), 1);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_1_1_replayed_trailers_reach_a_client_that_accepts_them() {
    let f = Fixture::new();
    let (base, server) = serve(f.app(f.layer())).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let request = || {
        Request::post(format!("{base}/trailers"))
            .header(KEY, "k")
            .header("te", "trailers")
            .body(Body::empty())
            .unwrap()
    };
    let first = Reply::read(client.request(request()).await.unwrap()).await;
    let retry = Reply::read(client.request(request()).await.unwrap()).await;
    assert_eq!(first.trailers, Some(trailer_map()));
    assert!(retry.is_replay());
    assert_eq!(retry.header("transfer-encoding"), Some("chunked"));
    assert_eq!(retry.trailers, Some(trailer_map()));
    assert_eq!(retry.text(), "call 1");
    assert_eq!(f.calls.get(), 1);
    server.abort();
}
