//! A tonic server behind the layer: gRPC status trailers are stored and replayed.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Buf, BufMut, Bytes};
use http::{HeaderMap, HeaderValue, StatusCode, uri::PathAndQuery};
use http_body_util::Full;
use idem_http::RequestOutcome;
use tonic::{
    Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    server::{Grpc, NamedService},
    transport::{Endpoint, Server, server::TcpIncoming},
};
use tower::{Layer, ServiceExt};

use crate::common::{Calls, Fixture, KEY, Reply};

/// Messages are raw bytes, so no protobuf code generation is needed.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A unary `test.Charges/Charge` that counts its executions and declines the message
/// `declined` with `FAILED_PRECONDITION`.
#[derive(Clone)]
struct Charges(Calls);

impl NamedService for Charges {
    const NAME: &'static str = "test.Charges";
}

impl tower::Service<http::Request<tonic::body::Body>> for Charges {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let calls = self.0.clone();
        let charge = tower::service_fn(move |request: tonic::Request<Bytes>| {
            let n = calls.next();
            async move {
                if request.get_ref() == "declined" {
                    return Err(Status::failed_precondition("card declined"));
                }
                Ok(tonic::Response::new(Bytes::from(format!("charged {n}"))))
            }
        });
        Box::pin(async move { Ok(Grpc::new(Raw).unary(charge, request).await) })
    }
}

/// A gRPC message frame: uncompressed, with its length.
fn frame(message: &[u8]) -> Bytes {
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    frame.into()
}

fn grpc_request(key: &str, message: &[u8]) -> http::Request<tonic::body::Body> {
    http::Request::post("/test.Charges/Charge")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header(KEY, key)
        .body(tonic::body::Body::new(Full::new(frame(message))))
        .unwrap()
}

#[tokio::test]
async fn grpc_status_trailers_are_stored_and_replayed() {
    let f = Fixture::new();
    let service = f.layer().layer(Charges(f.calls.clone()));

    let first = Reply::read(
        service
            .clone()
            .oneshot(grpc_request("k", b"10 EUR"))
            .await
            .unwrap(),
    )
    .await;
    let retry = Reply::read(service.oneshot(grpc_request("k", b"10 EUR")).await.unwrap()).await;

    let mut ok = HeaderMap::new();
    ok.insert("grpc-status", HeaderValue::from_static("0"));
    for reply in [&first, &retry] {
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("content-type"), Some("application/grpc"));
        assert_eq!(reply.body, frame(b"charged 1"));
        assert_eq!(reply.trailers, Some(ok.clone()));
    }
    assert_eq!(first.outcome, Some(RequestOutcome::Executed));
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert!(retry.is_replay());
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_trailers_only_grpc_error_is_replayed() {
    let f = Fixture::new();
    let service = f.layer().layer(Charges(f.calls.clone()));
    let first = Reply::read(
        service
            .clone()
            .oneshot(grpc_request("k", b"declined"))
            .await
            .unwrap(),
    )
    .await;
    let retry = Reply::read(
        service
            .oneshot(grpc_request("k", b"declined"))
            .await
            .unwrap(),
    )
    .await;
    for reply in [&first, &retry] {
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("grpc-status"), Some("9"));
        assert_eq!(reply.header("grpc-message"), Some("card%20declined"));
        assert_eq!(reply.body, Bytes::new());
    }
    assert!(retry.is_replay());
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_client_gets_the_replay_from_a_tonic_server_over_http2() {
    let f = Fixture::new();
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    let server = tokio::spawn(
        Server::builder()
            .layer(f.layer())
            .add_service(Charges(f.calls.clone()))
            .serve_with_incoming(incoming),
    );
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = tonic::client::Grpc::new(channel);
    let mut charge = async |key: &'static str, message: &'static str| {
        client.ready().await.unwrap();
        let mut request = tonic::Request::new(Bytes::from(message));
        request.metadata_mut().insert(KEY, key.parse().unwrap());
        client
            .unary::<_, Bytes, _>(
                request,
                PathAndQuery::from_static("/test.Charges/Charge"),
                Raw,
            )
            .await
    };

    let first = charge("k1", "10 EUR").await.unwrap();
    assert_eq!(first.get_ref(), "charged 1");
    assert_eq!(first.metadata().get("idempotent-replayed"), None);
    let retry = charge("k1", "10 EUR").await.unwrap();
    assert_eq!(retry.get_ref(), "charged 1");
    assert_eq!(retry.metadata().get("idempotent-replayed").unwrap(), "true");

    let declined = charge("k2", "declined").await.unwrap_err();
    let declined_again = charge("k2", "declined").await.unwrap_err();
    for status in [&declined, &declined_again] {
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.message(), "card declined");
    }
    assert_eq!(
        declined_again
            .metadata()
            .get("idempotent-replayed")
            .unwrap(),
        "true"
    );
    assert_eq!(f.calls.get(), 2);
    server.abort();
}
