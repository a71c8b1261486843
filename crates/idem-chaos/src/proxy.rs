//! The proxy between the callers and the gateways: a small load balancer that drops answers.
//!
//! Every attempt goes to a gateway chosen at random (the other one when it refuses the
//! connection, as a load balancer routes around a dead instance). When the gateway has answered,
//! the proxy passes the answer on, or — with the drop rate's probability, while drops are on —
//! discards it: the caller's attempt fails although the gateway did all its work, the case
//! idempotency keys exist for. Half the dropped answers close the caller's connection at once;
//! the other half hold it until the caller's attempt times out. Every attempt is recorded.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http::{Request, Response, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, task::JoinHandle};

use crate::{
    Error, GatewayId,
    history::{Answer, Attempt, AttemptResult, Recorder},
    http_client::{HttpClient, http_client},
};

/// The proxy, serving until dropped.
#[derive(Debug)]
pub(crate) struct DropProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    gateways: Vec<SocketAddr>,
    drop_rate: f64,
    stall: Duration,
    dropping: AtomicBool,
    rng: Mutex<fastrand::Rng>,
    client: HttpClient,
    recorder: Recorder,
}

/// Why the proxy closed a caller's connection without an answer.
#[derive(Debug, thiserror::Error)]
#[error("the answer was not passed on")]
struct NoAnswer;

impl DropProxy {
    /// Listens on a loopback port, in front of `gateways`; a stalled drop holds the caller's
    /// connection for `stall` (longer than its attempt timeout).
    pub(crate) async fn start(
        gateways: Vec<SocketAddr>,
        drop_rate: f64,
        stall: Duration,
        seed: u64,
        recorder: Recorder,
    ) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(Error::io("bind the proxy's port"))?;
        let addr = listener
            .local_addr()
            .map_err(Error::io("read the proxy's port"))?;
        let shared = Arc::new(Shared {
            gateways,
            drop_rate,
            stall,
            dropping: AtomicBool::new(drop_rate > 0.0),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            client: http_client(),
            recorder,
        });
        let task = tokio::spawn(serve(listener, Arc::clone(&shared)));
        Ok(Self { addr, shared, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops dropping answers.
    pub(crate) fn stop_dropping(&self) {
        self.shared.dropping.store(false, Ordering::SeqCst);
    }
}

impl Drop for DropProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request| forward(Arc::clone(&shared), request));
            // An error is a dropped answer, or a caller that went away: nothing to do.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Records an attempt when dropped, with the result set last (`Abandoned` if none was: the
/// caller went away and hyper dropped the future).
struct AttemptRecord {
    attempt: Attempt,
    recorder: Recorder,
}

impl Drop for AttemptRecord {
    fn drop(&mut self) {
        self.recorder.attempt(self.attempt.clone());
    }
}

async fn forward(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, NoAnswer> {
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut record = AttemptRecord {
        attempt: Attempt {
            key,
            at: shared.recorder.now(),
            gateway: None,
            result: AttemptResult::Abandoned,
            answer: None,
        },
        recorder: shared.recorder.clone(),
    };
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Err(NoAnswer),
    };
    let first = shared
        .rng
        .lock()
        .expect("no panic holds the rng")
        .usize(..shared.gateways.len());
    for offset in 0..shared.gateways.len() {
        let index = (first + offset) % shared.gateways.len();
        let gateway = GatewayId(u8::try_from(index).expect("at most 2 gateways"));
        let uri: Uri = format!(
            "http://{}{}",
            shared.gateways[index],
            parts.uri.path_and_query().map_or("/", |p| p.as_str())
        )
        .parse()
        .expect("a valid URI");
        let mut forwarded = Request::builder().method(parts.method.clone()).uri(uri);
        for (name, value) in &parts.headers {
            if ![
                header::HOST,
                header::CONNECTION,
                header::TRANSFER_ENCODING,
                header::CONTENT_LENGTH,
            ]
            .contains(name)
            {
                forwarded = forwarded.header(name, value);
            }
        }
        let forwarded = forwarded
            .body(Full::new(body.clone()))
            .expect("a valid request");
        record.attempt.gateway = Some(gateway);
        let response = match shared.client.request(forwarded).await {
            Ok(response) => response,
            // Nothing was sent: try the other gateway.
            Err(error) if error.is_connect() => continue,
            Err(_) => {
                record.attempt.result = AttemptResult::Broken;
                return Err(NoAnswer);
            }
        };
        let (mut parts, body) = response.into_parts();
        // The body is passed on whole: hyper frames it again.
        for name in [
            header::CONNECTION,
            header::TRANSFER_ENCODING,
            header::CONTENT_LENGTH,
        ] {
            parts.headers.remove(name);
        }
        let Ok(body) = body.collect().await else {
            record.attempt.result = AttemptResult::Broken;
            return Err(NoAnswer);
        };
        let status = parts.status.as_u16();
        let body = body.to_bytes();
        if parts.status.is_success() {
            record.attempt.answer = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|body| body["execution"].as_u64())
                .map(|execution| Answer {
                    execution,
                    at: shared.recorder.now(),
                });
        }
        let (dropped, stalled) = {
            let mut rng = shared.rng.lock().expect("no panic holds the rng");
            (rng.f64() < shared.drop_rate, rng.bool())
        };
        if dropped && shared.dropping.load(Ordering::SeqCst) {
            record.attempt.result = AttemptResult::Dropped { status, stalled };
            if stalled {
                // The caller times out and goes away; hyper may drop this future then.
                tokio::time::sleep(shared.stall).await;
            }
            return Err(NoAnswer);
        }
        record.attempt.result = AttemptResult::Answered { status };
        return Ok(Response::from_parts(parts, Full::new(body)));
    }
    record.attempt.gateway = None;
    record.attempt.result = AttemptResult::NoGateway;
    Err(NoAnswer)
}
