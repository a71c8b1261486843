//! The upstream API behind the gateways: `POST /ops` executes an operation and records the
//! execution in the history.
//!
//! Each gateway has a port of its own, so every execution is known by the gateway that
//! forwarded it. The effect of an execution is applied when the handler starts (it is recorded
//! then): a gateway that dies mid-call has already caused it.
//!
//! Faults: while *slow*, answers take twice the callers' attempt timeout (but less than the
//! gateways' `--upstream-timeout`: the gateway still gets the answer and stores it); while
//! *failing*, every request gets 503 at once and nothing is executed, as a load-shedding
//! server does.

use std::{
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

use crate::{Error, GatewayId, history::Recorder};

/// The normal time to execute, drawn from 0 to this.
const LATENCY: Duration = Duration::from_millis(40);

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
    rng: Mutex<fastrand::Rng>,
    recorder: Recorder,
}

impl Upstream {
    /// Listens on one loopback port per gateway.
    pub(crate) async fn start(
        gateways: u8,
        slow_latency: Duration,
        seed: u64,
        recorder: Recorder,
    ) -> Result<Self, Error> {
        let mode = Arc::new(Mode {
            slow: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            slow_latency,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
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
        format!("http://{}", self.addrs[usize::from(gateway.0)])
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
    let execution = mode.recorder.execution(key.to_owned(), gateway);
    let latency = if mode.slow.load(Ordering::SeqCst) {
        mode.slow_latency
    } else {
        let max = u64::try_from(LATENCY.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(mode.rng.lock().expect("no panic holds the rng").u64(..=max))
    };
    tokio::time::sleep(latency).await;
    let body = json!({ "key": key, "execution": execution.id() });
    (StatusCode::CREATED, Json(body)).into_response()
}
