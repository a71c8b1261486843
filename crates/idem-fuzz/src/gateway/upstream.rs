//! The upstream behind the layer: answers as each call's [`Behaviour`] says and logs every
//! execution.

use std::{
    collections::{HashMap, HashSet},
    convert::Infallible,
    error::Error,
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use bytes::Bytes;
use futures_util::stream;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use idem_core::IdempotencyKey;

use super::{
    input::{Behaviour, CALL_HEADER, Failure, Settings},
    model::Address,
};

type BoxError = Box<dyn Error + Send + Sync>;

/// The header that carries the execution's number in the upstream's responses.
pub(super) const RUN_HEADER: &str = "x-upstream-run";

/// The upstream's response body.
pub(super) type UpstreamBody = BoxBody<Bytes, BoxError>;

/// What the upstream saw of one call it executed.
#[derive(Debug, Clone)]
pub(super) struct Execution {
    pub(super) call: u64,
    /// Its number, from 1, sent back in [`RUN_HEADER`].
    pub(super) run: u64,
    pub(super) method: Method,
    pub(super) key_values: Vec<HeaderValue>,
    pub(super) body: Bytes,
}

/// The upstream's shared state: the behaviour of each call, the log of executions, and the keys
/// being executed right now.
#[derive(Debug)]
pub(super) struct Upstream {
    settings: Settings,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    behaviours: HashMap<u64, Behaviour>,
    log: Vec<Execution>,
    running: HashSet<Address>,
    /// Executions that started while another of the same key was running.
    overlaps: Vec<u64>,
}

impl Upstream {
    pub(super) fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Says how the upstream will answer `call`.
    pub(super) fn expect(&self, call: u64, behaviour: Behaviour) {
        self.state().behaviours.insert(call, behaviour);
    }

    /// The executions logged since the first `from`.
    pub(super) fn executions(&self, from: usize) -> Vec<Execution> {
        self.state().log[from..].to_vec()
    }

    pub(super) fn executed(&self) -> usize {
        self.state().log.len()
    }

    /// The calls that started while another execution of their key was running.
    pub(super) fn overlaps(&self) -> Vec<u64> {
        self.state().overlaps.clone()
    }

    /// Handles one request, as the tower service does.
    pub(super) async fn call(
        self: Arc<Self>,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let (parts, body) = request.into_parts();
        let call = parts
            .headers
            .get(CALL_HEADER)
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .expect("every request carries its call number");
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(never) => match never {},
        };
        let key_values: Vec<_> = parts
            .headers
            .get_all("idempotency-key")
            .iter()
            .cloned()
            .collect();
        let address = self.address(&parts.method, &parts.headers, &key_values);
        let (behaviour, run) = {
            let mut state = self.state();
            let run = state.log.len() as u64 + 1;
            state.log.push(Execution {
                call,
                run,
                method: parts.method.clone(),
                key_values,
                body,
            });
            if let Some(address) = &address
                && !state.running.insert(address.clone())
            {
                state.overlaps.push(call);
            }
            let behaviour = *state
                .behaviours
                .get(&call)
                .expect("every call has a behaviour");
            (behaviour, run)
        };
        for _ in 0..behaviour.yields % 4 {
            tokio::task::yield_now().await;
        }
        if let Some(address) = &address {
            self.state().running.remove(address);
        }
        respond(behaviour, run)
    }

    /// The key a request is executed under, if it is one the layer runs under a key.
    fn address(
        &self,
        method: &Method,
        headers: &http::HeaderMap,
        key_values: &[HeaderValue],
    ) -> Option<Address> {
        if !matches!(*method, Method::POST | Method::PATCH) {
            return None;
        }
        let [value] = key_values else {
            return None;
        };
        let key = IdempotencyKey::parse_header(value.as_bytes()).ok()?;
        let tenant = headers
            .get(http::header::AUTHORIZATION)
            .filter(|_| self.settings.scoped)
            .cloned();
        Some(Address { tenant, key })
    }
}

fn respond(behaviour: Behaviour, run: u64) -> Result<Response<UpstreamBody>, UpstreamError> {
    let data = behaviour.length.body(run);
    let body = match behaviour.failure {
        Failure::BeforeResponse => return Err(UpstreamError),
        Failure::None => Full::new(data)
            .map_err(|never: Infallible| match never {})
            .boxed(),
        Failure::Streamed => {
            let half = data.len() / 2;
            let chunks = [data.slice(..half), data.slice(half..)]
                .into_iter()
                .filter(|chunk| !chunk.is_empty())
                .map(|chunk| Ok(Frame::data(chunk)));
            StreamBody::new(stream::iter(chunks.collect::<Vec<_>>())).boxed()
        }
        Failure::MidBody => {
            let data = Some(data)
                .filter(|data| !data.is_empty())
                .map(|data| Ok(Frame::data(data)));
            let error = Err(Box::new(UpstreamError) as BoxError);
            StreamBody::new(stream::iter(data.into_iter().chain([error]))).boxed()
        }
    };
    let status = StatusCode::from_u16(behaviour.status.code()).expect("a valid status");
    Ok(Response::builder()
        .status(status)
        .header(RUN_HEADER, run)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(body)
        .expect("the response parts are valid"))
}

/// The upstream failed (the connection was lost, as far as the layer can tell).
#[derive(Debug)]
pub(super) struct UpstreamError;

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the upstream connection was lost")
    }
}

impl Error for UpstreamError {}
