//! The upstream API behind the gateways: `POST /ops` executes an operation and records the
//! execution in the history.
//!
//! Each gateway has a port of its own, so every execution is known by the gateway that
//! forwarded it. The effect of an execution is applied when the handler starts (it is recorded
//! then): a gateway that dies mid-call has already caused it.
//!
//! Fencing: the gateways send each request's fencing token in `Idempotency-Token`
//! (`--fencing-header`). The upstream keeps the highest token it has applied per operation and
//! refuses a request with a lower one (409, nothing executed): the late request of a gateway
//! that lost its key (it was paused past its lease) after the gateway that took the key over
//! has executed. The same token again, or a higher one, is applied.
//!
//! Faults: while *slow*, answers take twice the callers' attempt timeout (but less than the
//! gateways' `--upstream-timeout`: the gateway still gets the answer and stores it); while
//! *failing*, every request gets 503 at once and nothing is executed, as a load-shedding
//! server does.
//!
//! Streamed (`--streamed`): the answer's head comes at once and its body in three chunks of
//! unknown length, spread over the execution's time, so that kills, pauses and partitions land in
//! the middle of streams that the gateways pass on and record as they go.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::json;
use tokio::{net::TcpListener, task::JoinHandle};

use crate::{
    Error, GatewayId,
    history::{ExecutionGuard, Recorder, StaleWrite},
};

/// The normal time to execute, drawn from 0 to this.
const LATENCY: Duration = Duration::from_millis(40);

/// The header that carries the fencing token: the gateways' `--fencing-header`.
pub(crate) const FENCING_HEADER: &str = "Idempotency-Token";

/// The upstream, serving until dropped.
#[derive(Debug)]
pub(crate) struct Upstream {
    addrs: Vec<SocketAddr>,
    mode: Arc<Mode>,
    tasks: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Mode {
    slow: AtomicBool,
    failing: AtomicBool,
    slow_latency: Duration,
    streamed: bool,
    rng: Mutex<fastrand::Rng>,
    fences: Mutex<Fences>,
    recorder: Recorder,
}

/// The highest fencing token applied for each operation.
#[derive(Debug, Default)]
struct Fences(HashMap<String, u64>);

impl Fences {
    /// Raises the operation's fence to `token`, or, when a higher token was applied, returns
    /// that one: the write is stale.
    fn admit(&mut self, key: &str, token: u64) -> Result<(), u64> {
        match self.0.get_mut(key) {
            Some(highest) if *highest > token => Err(*highest),
            Some(highest) => {
                *highest = token;
                Ok(())
            }
            None => {
                self.0.insert(key.to_owned(), token);
                Ok(())
            }
        }
    }
}

impl Upstream {
    /// Listens on one loopback port per gateway.
    pub(crate) async fn start(
        gateways: u8,
        slow_latency: Duration,
        streamed: bool,
        seed: u64,
        recorder: Recorder,
    ) -> Result<Self, Error> {
        let mode = Arc::new(Mode {
            slow: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            slow_latency,
            streamed,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            fences: Mutex::default(),
            recorder,
        });
        let mut addrs = Vec::new();
        let mut tasks = Vec::new();
        for gateway in 0..gateways {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(Error::io("bind the upstream's port"))?;
            addrs.push(
                listener
                    .local_addr()
                    .map_err(Error::io("read the upstream's port"))?,
            );
            let app = Router::new()
                .route("/ops", post(execute))
                .with_state((Arc::clone(&mode), GatewayId(gateway)));
            tasks.push(tokio::spawn(async move {
                // Serving only ends with an accept error the harness cannot do anything about.
                let _ = axum::serve(listener, app).await;
            }));
        }
        Ok(Self { addrs, mode, tasks })
    }

    /// `http://127.0.0.1:PORT`: the `--upstream` of `gateway`.
    pub(crate) fn url(&self, gateway: GatewayId) -> String {
        format!("http://{}", self.addr(gateway))
    }

    /// Where `gateway`'s requests are received.
    pub(crate) fn addr(&self, gateway: GatewayId) -> SocketAddr {
        self.addrs[usize::from(gateway.0)]
    }

    /// Slows answers down, or makes them fast again.
    pub(crate) fn set_slow(&self, slow: bool) {
        self.mode.slow.store(slow, Ordering::SeqCst);
    }

    /// Answers 503 without executing, or executes again.
    pub(crate) fn set_failing(&self, failing: bool) {
        self.mode.failing.store(failing, Ordering::SeqCst);
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn execute(
    State((mode, gateway)): State<(Arc<Mode>, GatewayId)>,
    headers: HeaderMap,
) -> Response {
    if mode.failing.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "1")],
            "overloaded: nothing was done\n",
        )
            .into_response();
    }
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
    else {
        return (StatusCode::BAD_REQUEST, "no idempotency key\n").into_response();
    };
    let Some(token) = headers
        .get(FENCING_HEADER)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
    else {
        return (StatusCode::BAD_REQUEST, "no fencing token\n").into_response();
    };
    let execution = {
        // Checked and recorded under one lock: executions are numbered in the order they were
        // applied, which is what the history check of stale writes reads.
        let mut fences = mode.fences.lock().expect("no panic holds the fences");
        if let Err(highest) = fences.admit(key, token) {
            mode.recorder.stale_write(StaleWrite {
                key: key.to_owned(),
                gateway,
                token,
                highest,
                at: mode.recorder.now(),
            });
            drop(fences);
            let body = json!({
                "error": "stale fencing token: a later holder of the key has written",
                "key": key,
                "token": token,
                "highest": highest,
            });
            return (StatusCode::CONFLICT, Json(body)).into_response();
        }
        mode.recorder.execution(key.to_owned(), gateway, token)
    };
    let latency = if mode.slow.load(Ordering::SeqCst) {
        mode.slow_latency
    } else {
        let max = u64::try_from(LATENCY.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(mode.rng.lock().expect("no panic holds the rng").u64(..=max))
    };
    let body = json!({ "key": key, "execution": execution.id() });
    if mode.streamed {
        return streamed(body.to_string(), latency, execution);
    }
    tokio::time::sleep(latency).await;
    (StatusCode::CREATED, Json(body)).into_response()
}

/// 201 with `text` as its body, in three chunks of unknown length: the first at once, the others
/// `latency` / 2 apart. The `execution` ends with the stream: when its last chunk is sent, or when
/// the gateway goes away before.
fn streamed(text: String, latency: Duration, execution: ExecutionGuard) -> Response {
    let third = text.len() / 3;
    let chunks = [
        text[..third].to_owned(),
        text[third..2 * third].to_owned(),
        text[2 * third..].to_owned(),
    ];
    let stream = futures_util::StreamExt::then(
        futures_util::stream::iter(chunks.into_iter().enumerate()),
        move |(n, chunk)| {
            // Held by the stream, and dropped with it.
            let _execution = &execution;
            async move {
                if n > 0 {
                    tokio::time::sleep(latency / 2).await;
                }
                Ok::<_, std::convert::Infallible>(bytes::Bytes::from(chunk))
            }
        },
    );
    let mut response = axum::body::Body::from_stream(stream).into_response();
    *response.status_mut() = StatusCode::CREATED;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::Request;
    use http_body_util::{BodyExt, Full};

    use super::*;
    use crate::http_client::http_client;

    #[test]
    fn a_lower_token_is_refused_and_an_equal_or_higher_one_applied() {
        let mut fences = Fences::default();
        assert_eq!(fences.admit("a", 5), Ok(()));
        assert_eq!(fences.admit("a", 4), Err(5));
        assert_eq!(fences.admit("a", 5), Ok(()));
        assert_eq!(fences.admit("a", 7), Ok(()));
        assert_eq!(fences.admit("a", 6), Err(7));
        // Each operation has its own fence.
        assert_eq!(fences.admit("b", 1), Ok(()));
    }

    #[tokio::test]
    async fn a_stale_write_gets_409_and_executes_nothing() {
        let recorder = Recorder::new();
        let upstream = Upstream::start(2, Duration::ZERO, false, 1, recorder.clone())
            .await
            .unwrap();
        let client = http_client();
        let post = |gateway: u8, key: &str, token: Option<u64>| {
            let mut request = Request::post(format!("{}/ops", upstream.url(GatewayId(gateway))))
                .header("idempotency-key", key);
            if let Some(token) = token {
                request = request.header(FENCING_HEADER, token.to_string());
            }
            let request = request.body(Full::new(Bytes::new())).unwrap();
            let client = client.clone();
            async move {
                let response = client.request(request).await.unwrap();
                let status = response.status().as_u16();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (
                    status,
                    serde_json::from_slice::<serde_json::Value>(&body).ok(),
                )
            }
        };
        assert_eq!(post(1, "k", Some(2)).await.0, 201);
        let (status, body) = post(0, "k", Some(1)).await;
        assert_eq!(status, 409);
        assert_eq!(
            body.unwrap(),
            json!({
                "error": "stale fencing token: a later holder of the key has written",
                "key": "k",
                "token": 1,
                "highest": 2,
            })
        );
        assert_eq!(post(0, "k", Some(2)).await.0, 201);
        assert_eq!(post(0, "k", Some(3)).await.0, 201);
        assert_eq!(post(0, "other", Some(1)).await.0, 201);
        assert_eq!(post(0, "k", None).await.0, 400);

        let history = recorder.finish(std::collections::BTreeMap::new(), crate::Stamp::default());
        let executed: Vec<(&str, u8, u64)> = history
            .executions
            .iter()
            .map(|e| (e.key.as_str(), e.gateway.0, e.token))
            .collect();
        assert_eq!(
            executed,
            [("k", 1, 2), ("k", 0, 2), ("k", 0, 3), ("other", 0, 1)]
        );
        assert_eq!(history.stale_writes.len(), 1);
        let stale = &history.stale_writes[0];
        assert_eq!(
            (
                stale.key.as_str(),
                stale.gateway,
                stale.token,
                stale.highest
            ),
            ("k", GatewayId(0), 1, 2)
        );
    }
}
