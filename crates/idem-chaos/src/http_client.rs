//! The harness's own HTTP client: the proxy forwards with it, and readiness checks and the
//! final record reads use it on the admin listeners.

use std::time::Duration;

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

/// How long one of the harness's own requests may take. A readiness check that hung on a
/// gateway being restarted would otherwise stall the whole run, faults and callers included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET url`, read whole, within [`REQUEST_TIMEOUT`].
pub(crate) async fn get(client: &HttpClient, url: &str) -> Result<(StatusCode, Bytes), Error> {
    tokio::time::timeout(REQUEST_TIMEOUT, get_unbounded(client, url))
        .await
        .unwrap_or_else(|_| {
            Err(Error::TimedOut {
                url: url.to_owned(),
                timeout: REQUEST_TIMEOUT,
            })
        })
}

async fn get_unbounded(client: &HttpClient, url: &str) -> Result<(StatusCode, Bytes), Error> {
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
