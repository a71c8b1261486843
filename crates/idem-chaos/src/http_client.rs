//! The harness's own HTTP client: the proxy forwards with it, and readiness checks and the
//! final record reads use it on the admin listeners.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

use crate::Error;

/// A pooled HTTP/1.1 client.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `GET url`, read whole.
pub(crate) async fn get(client: &HttpClient, url: &str) -> Result<(StatusCode, Bytes), Error> {
    let request = Request::get(url)
        .body(Full::default())
        .expect("a valid request");
    let response = client
        .request(request)
        .await
        .map_err(|source| Error::Http {
            url: url.to_owned(),
            source,
        })?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|source| Error::Body {
            url: url.to_owned(),
            source: source.into(),
        })?
        .to_bytes();
    Ok((status, body))
}
