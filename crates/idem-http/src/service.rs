//! [`Idempotency`]: the service that [`IdempotencyLayer`](crate::IdempotencyLayer) wraps around
//! another.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::{convert::Infallible, sync::Arc};
//!
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use idem_http::{IdempotencyLayer, RequestOutcome};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! let charge = service_fn(|_request: Request<Full<bytes::Bytes>>| async {
//!     Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::from("charged"))))
//! });
//! let layer = IdempotencyLayer::new(Arc::new(idem_core::MemoryStore::new()));
//! let service = layer.layer(charge);
//!
//! let request = || {
//!     Request::post("/charges")
//!         .header("idempotency-key", "charge-1")
//!         .body(Full::new(bytes::Bytes::from("10 EUR")))
//!         .unwrap()
//! };
//! let first = service.clone().oneshot(request()).await?;
//! assert_eq!(first.extensions().get(), Some(&RequestOutcome::Executed));
//! let retry = service.oneshot(request()).await?;
//! assert_eq!(retry.extensions().get(), Some(&RequestOutcome::Replayed));
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # Ok::<(), Infallible>(())
//! # }).unwrap();
//! ```

use std::{
    error::Error,
    fmt,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
};

use bytes::Bytes;
use http::header::SET_COOKIE;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::SizeHint;
use idem_core::{
    Address, Ambiguous, Engine, Execution, FencingToken, Fingerprint, Followed, InFlight, Lease,
    NotRun, OnSettled, Rest, RunOutcome, Settled, Store, StoreError, TraceContext, WaitSlot,
    time_limit::bounded,
};
use tower::Service;

use crate::{
    Anonymous, Delivery, FromBytes, OnStoreError, RequestKey, RequestOutcome, ResponseBody,
    ResponseFuture,
    budget::{Budget, Reservation},
    capture::{capture, drop_cookies, header_lines, mark_replayed, replay_headers, replay_outcome},
    follow::{self, Appender, PastLimit},
    live::{Joined, LiveStreams},
    problem::Rejection,
    request,
    settings::Settings,
    stream, trace,
};

type BoxError = Box<dyn Error + Send + Sync>;

/// The counter of requests, labelled by outcome.
const REQUESTS_METRIC: &str = "idem_requests_total";
/// The counter of new keys refused because the store was full.
const STORE_FULL_METRIC: &str = "idem_store_full_total";
/// The counter of requests answered `500` outcome-unknown.
const OUTCOME_UNKNOWN_METRIC: &str = "idem_outcome_unknown_total";
/// The gauge of responses being streamed to their first client and recorded.
const STREAMS_METRIC: &str = "idem_streams_in_progress";
/// How the response of a duplicate that joined a stream ends when the stream's outcome could not
/// be recorded.
const NOT_RECORDED: &str = "the response's key was lost before its outcome was recorded: retry to \
                            get the recorded outcome";
/// The gauge of duplicates following a stream they joined.
const STREAM_JOINERS_METRIC: &str = "idem_stream_joiners";

/// What every service made by one configured layer shares: its settings and its engine.
pub(crate) struct Shared<St> {
    pub(crate) settings: Settings,
    pub(crate) engine: Engine<St>,
    /// The budget of buffered request bytes, when there is one.
    pub(crate) budget: Option<Arc<Budget>>,
    /// The streams being recorded, which duplicates in wait mode join.
    live: Arc<LiveStreams>,
    /// Registered when the layer makes its first service (see [`RequestCounters`]).
    requests: OnceLock<RequestCounters>,
}

impl<St> Shared<St> {
    /// What the services of a layer over `engine`, applying `settings`, share.
    pub(crate) fn new(engine: Engine<St>, settings: Settings) -> Self {
        Self {
            budget: settings.max_buffered.map(Budget::new),
            live: Arc::default(),
            settings,
            engine,
            requests: OnceLock::new(),
        }
    }

    /// The request counters, registered in the recorder installed now if they are not yet.
    fn requests(&self) -> &RequestCounters {
        self.requests.get_or_init(RequestCounters::register)
    }
}

/// The `idem_requests_total` counter of each [`RequestOutcome`], and the `idem_outcome_unknown_total`
/// and `idem_store_full_total` counters, registered once, in the recorder installed when the
/// layer made its first service: a request increments its counters without looking them up by
/// name and label, and each is exported (at 0) before it first counts, so that rules over them
/// see a series from the start.
pub(crate) struct RequestCounters {
    by_outcome: [metrics::Counter; RequestOutcome::ALL.len()],
    outcome_unknown: metrics::Counter,
    store_full: metrics::Counter,
    streams: metrics::Gauge,
    stream_joiners: metrics::Gauge,
}

impl RequestCounters {
    pub(crate) fn register() -> Self {
        Self {
            by_outcome: RequestOutcome::ALL
                .map(|outcome| metrics::counter!(REQUESTS_METRIC, "outcome" => outcome.as_str())),
            outcome_unknown: metrics::counter!(OUTCOME_UNKNOWN_METRIC),
            store_full: metrics::counter!(STORE_FULL_METRIC),
            streams: metrics::gauge!(STREAMS_METRIC),
            stream_joiners: metrics::gauge!(STREAM_JOINERS_METRIC),
        }
    }

    fn count(&self, outcome: RequestOutcome) {
        self.by_outcome[outcome as usize].increment(1);
    }

    /// A request answered `500` outcome-unknown: recorded now (its answer was lost, or it took
    /// over a lease that ran out without a result) or replayed.
    fn count_outcome_unknown(&self) {
        self.outcome_unknown.increment(1);
    }
}

/// One more on a gauge while it lives: a stream in progress, a duplicate following one.
struct Counted(metrics::Gauge);

impl Counted {
    fn new(gauge: &metrics::Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Makes the requests of an inner service idempotent: a request with a key runs at most once
/// per key, and its retries get the stored response. Made by
/// [`IdempotencyLayer`](crate::IdempotencyLayer), whose docs say what it does with each request.
pub struct Idempotency<S, St> {
    inner: S,
    shared: Arc<Shared<St>>,
}

impl<S, St> Idempotency<S, St> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<St>>) -> Self {
        shared.requests();
        Self { inner, shared }
    }

    /// The engine this service shares with every other service of its layer.
    pub fn engine(&self) -> &Engine<St> {
        &self.shared.engine
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, St> fmt::Debug for Idempotency<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl<S, St, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S, St>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Error + Send + Sync + 'static,
    St: Store,
    ReqBody: http_body::Body<Data = Bytes> + FromBytes + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // The ready service goes with this request; the clone waits for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        if let Some(name) = &self.shared.settings.fencing_header {
            // Only the layer issues fencing tokens: a client's never reaches the inner service.
            request.headers_mut().remove(name);
        }
        let shared = Arc::clone(&self.shared);
        if passes_through(&shared.settings, &request) {
            return ResponseFuture::new(async move {
                let answer = forward(inner, request).await;
                labelled(&shared, RequestOutcome::Passthrough, None, answer)
            });
        }
        ResponseFuture::new(async move {
            let mut key = None;
            let (outcome, answer) = respond(&shared, inner, request, &mut key).await;
            labelled(&shared, outcome, key, answer)
        })
    }
}

/// Whether a request is passed on untouched: its method is not covered, or it has no key and
/// none is required. Decided from its head alone, before anything of the keyed path is set up.
fn passes_through<B>(settings: &Settings, request: &Request<B>) -> bool {
    !settings.methods.contains(request.method())
        || (!settings.require_key && !request.headers().contains_key(&settings.key_header))
}

type Answer<B, E> = Result<Response<ResponseBody<B>>, E>;

/// Counts a request's [`RequestOutcome`], and labels its response with it and with its
/// [`RequestKey`] when it had one.
fn labelled<St, B, E>(
    shared: &Shared<St>,
    outcome: RequestOutcome,
    key: Option<RequestKey>,
    answer: Answer<B, E>,
) -> Answer<B, E> {
    shared.requests().count(outcome);
    if let Some(key) = &key {
        tracing::debug!(
            key = %key.digest(),
            scope = %key.scope().digest(),
            outcome = outcome.as_str(),
            "idempotent request"
        );
    }
    let mut response = answer?;
    response.extensions_mut().insert(outcome);
    if let Some(key) = key {
        response.extensions_mut().insert(key);
    }
    Ok(response)
}

/// Checks a covered request in the order of docs/http.md, Responses (key, body, fingerprint),
/// then runs it under its key.
async fn respond<S, St, ReqBody, ResBody>(
    shared: &Arc<Shared<St>>,
    inner: S,
    request: Request<ReqBody>,
    request_key: &mut Option<RequestKey>,
) -> (RequestOutcome, Answer<ResBody, S::Error>)
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send,
    S::Error: Error + Send + Sync + 'static,
    St: Store,
    ReqBody: http_body::Body<Data = Bytes> + FromBytes + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let settings = &shared.settings;
    // A request without a key gets here only when a key is required (see `passes_through`).
    let key = match request::key(request.headers(), &settings.key_header) {
        Ok(Some(key)) => key,
        Ok(None) => {
            let header = settings.key_header.clone();
            return rejected(RequestOutcome::Invalid, Rejection::MissingKey { header });
        }
        Err(error) => return rejected(RequestOutcome::Invalid, Rejection::InvalidKey(error)),
    };
    let scope = request::scope(request.headers(), &settings.scope_headers);
    *request_key = Some(RequestKey::new(key.clone(), scope));
    let digest = || {
        request_key
            .as_ref()
            .map(RequestKey::digest)
            .unwrap_or_default()
    };
    let anonymous = scope.is_anonymous();
    if anonymous && settings.anonymous == Anonymous::Reject {
        let headers = settings.scope_headers.clone();
        return rejected(
            RequestOutcome::Invalid,
            Rejection::ScopeRequired { headers },
        );
    }

    let (parts, body) = request.into_parts();
    let buffering = request::buffer(
        &parts.headers,
        body,
        settings.max_body,
        shared.budget.as_ref(),
    );
    // A body that came with its head sets no timer.
    let buffered = match settings.body_timeout {
        Some(timeout) => bounded(timeout, buffering)
            .await
            .unwrap_or(Err(Rejection::BodyTimeout { timeout })),
        None => buffering.await,
    };
    let (body, held) = match buffered {
        Ok(buffered) => buffered,
        Err(rejection @ Rejection::BodyTooLarge { .. }) => {
            return rejected(RequestOutcome::TooLarge, rejection);
        }
        Err(rejection @ Rejection::Overloaded) => {
            return rejected(RequestOutcome::Overloaded, rejection);
        }
        Err(rejection) => return rejected(RequestOutcome::Invalid, rejection),
    };
    let fingerprint = request::fingerprint(settings.fingerprint, &parts, &body);
    let address = Address::new(scope, key);
    // In wait mode, a duplicate of a request whose response is streaming here joins it.
    let waits = matches!(settings.policy.in_flight, InFlight::Wait { .. });
    if waits
        && let Some(joined) = shared
            .live
            .join(&address, &fingerprint, || shared.engine.wait_slot())
    {
        let Joined {
            status,
            headers,
            prefix,
            chunks,
            end,
            slot,
        } = joined;
        drop(trace::replay_span(digest, None));
        let following = Counted::new(&shared.requests().stream_joiners);
        let held = Box::new((slot, following));
        let body = ResponseBody::streamed(prefix, chunks, end, SizeHint::new(), Some(held));
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        return (RequestOutcome::Replayed, Ok(response));
    }
    let request = Request::from_parts(parts, ReqBody::from_bytes(body));

    // The work's input: the service that is ready for the request, the request, and the buffer
    // budget its body holds. The engine hands it back if the store fails before the key is
    // acquired, for a passthrough.
    let input = (inner, request, held);
    let work = {
        let shared = Arc::clone(shared);
        let keyed = Keyed {
            anonymous,
            joinable: waits.then(|| (address.clone(), fingerprint)),
        };
        move |(inner, request, held), lease: Lease| {
            execute(shared, inner, request, held, keyed, lease.token)
        }
    };
    // In wait mode, a duplicate of a request whose response another instance streams follows it
    // through the store.
    let past_limit = Arc::new(PastLimit::default());
    let probe = || {
        let (shared, address, past_limit) =
            (Arc::clone(shared), address.clone(), Arc::clone(&past_limit));
        async move {
            let limit = shared.settings.max_stored_response;
            follow::probe(&shared.engine, &address, &fingerprint, &past_limit, limit).await
        }
    };
    let ran = shared
        .engine
        .run_or_follow(address.clone(), fingerprint, input, work, probe)
        .await;
    let ran = match ran {
        Ok(Followed::Ran(outcome)) => Ok(outcome),
        Ok(Followed::Following { value: found, slot }) => {
            drop(trace::replay_span(digest, None));
            return (
                RequestOutcome::Replayed,
                Ok(followed(shared, address, found, slot)),
            );
        }
        Err(not_run) => Err(not_run),
    };
    match ran {
        Ok(RunOutcome::Executed(answer)) => (RequestOutcome::Executed, answer),
        Ok(RunOutcome::Replayed(mut stored)) => {
            let span = trace::replay_span(digest, Some(&stored));
            match &mut stored {
                // Records stored before cookies were dropped at store time may still hold some.
                idem_core::Outcome::Response(stored) if anonymous => drop_cookies(stored),
                idem_core::Outcome::Response(_) => {}
                idem_core::Outcome::Unknown => shared.requests().count_outcome_unknown(),
            }
            let replayed = span.in_scope(|| replay_outcome(stored));
            (RequestOutcome::Replayed, Ok(replayed))
        }
        Ok(RunOutcome::InFlight { retry_after }) => rejected(
            RequestOutcome::Conflict,
            Rejection::InFlight { retry_after },
        ),
        Ok(RunOutcome::Mismatch) => {
            rejected(RequestOutcome::Mismatch, Rejection::FingerprintMismatch)
        }
        // The engine's errors all come before the key was acquired, and hand the request back;
        // only an unreachable store is passed through, never one that answered.
        Err(NotRun {
            error,
            input: (inner, request, held),
        }) => match (settings.on_store_error, &error) {
            (OnStoreError::Passthrough, StoreError::Unavailable(_)) => {
                tracing::warn!(
                    key = %digest(),
                    error = &error as &(dyn Error + 'static),
                    "the idempotency store failed; forwarding the request without idempotency"
                );
                let answer = forward(inner, request).await;
                drop(held);
                (RequestOutcome::Passthrough, answer)
            }
            (_, StoreError::Full { .. }) => {
                shared.requests().store_full.increment(1);
                tracing::warn!(
                    key = %digest(),
                    error = &error as &(dyn Error + 'static),
                    "the idempotency store is full; refusing a new key"
                );
                rejected(RequestOutcome::StoreError, Rejection::StoreFull(error))
            }
            _ => {
                tracing::error!(
                    key = %digest(),
                    error = &error as &(dyn Error + 'static),
                    "the idempotency store failed; refusing the request"
                );
                let rejection = match error {
                    StoreError::Corrupted(_) => Rejection::RecordCorrupted(error),
                    _ => Rejection::StoreUnavailable(error),
                };
                rejected(RequestOutcome::StoreError, rejection)
            }
        },
    }
}

/// The response of a duplicate that follows, through the store, the stream `found` of another
/// instance, holding its place among the waiters (`slot`) while it does.
fn followed<St: Store, B>(
    shared: &Arc<Shared<St>>,
    address: Address,
    found: follow::Found,
    slot: WaitSlot,
) -> Response<ResponseBody<B>> {
    let (status, headers) = (found.status, found.headers.clone());
    let policy = shared.engine.policy();
    let (lease, limit) = (policy.lease, policy.store_call_limit());
    let (prefix, chunks, end) = follow::follow(shared.engine.clone(), address, found, lease, limit);
    let following = Counted::new(&shared.requests().stream_joiners);
    let held = Box::new((slot, following));
    let body = ResponseBody::streamed(prefix, chunks, end, SizeHint::new(), Some(held));
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

fn rejected<B, E>(outcome: RequestOutcome, rejection: Rejection) -> (RequestOutcome, Answer<B, E>) {
    (outcome, Ok(rejection.into_response()))
}

/// Passes the request on without idempotency; the response body streams through.
async fn forward<S, ReqBody, ResBody>(
    mut inner: S,
    request: Request<ReqBody>,
) -> Answer<ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    inner
        .call(request)
        .await
        .map(|response| response.map(ResponseBody::new))
}

/// What the engine's work knows of its request besides the request itself.
struct Keyed {
    /// The request is in the anonymous scope: its response is stored without its cookies.
    anonymous: bool,
    /// Its address and fingerprint, in wait mode: a streamed response is registered under them
    /// for duplicates to join.
    joinable: Option<(Address, Fingerprint)>,
}

/// The engine's work: calls the inner service with the attempt's fencing `token` (in the
/// request's extensions, and in the fencing header when there is one), reads its response for
/// the store (without its cookies when the request is anonymous), and says how final the
/// outcome is. The request body's bytes count in the budget (`held`) until the inner service has
/// answered.
async fn execute<S, St, ReqBody, ResBody>(
    shared: Arc<Shared<St>>,
    mut inner: S,
    mut request: Request<ReqBody>,
    held: Option<Reservation>,
    keyed: Keyed,
    token: FencingToken,
) -> Execution<Answer<ResBody, S::Error>>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Error + 'static,
    St: Store,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let ambiguous = shared.engine.policy().ambiguous;
    // Taken in the engine's `idem.execute` span, to keep with the response.
    let trace = trace::current();
    if let Some(name) = &shared.settings.fencing_header {
        request
            .headers_mut()
            .insert(name.clone(), HeaderValue::from(token.get()));
    }
    request.extensions_mut().insert(token);
    let called = inner.call(request).await;
    drop(held);
    let response = match called {
        Ok(response) => match response.extensions().get::<Delivery>() {
            // A response that stands for a failed delivery (a proxy's 502 or 504).
            Some(&delivery) => {
                let answer = Ok(response.map(ResponseBody::new));
                return undelivered(&shared, delivery, ambiguous, answer);
            }
            // The operation did not run (the caller was refused): nothing to replay.
            None if shared
                .settings
                .release_statuses
                .contains(&response.status()) =>
            {
                return Execution::NotSent {
                    value: Ok(response.map(ResponseBody::new)),
                };
            }
            None => response,
        },
        Err(error) => {
            let delivery = shared.settings.classify_error.classify(&error);
            if delivery == Delivery::MaybeSent && ambiguous == Ambiguous::Reject {
                tracing::warn!(
                    error = &error as &(dyn Error + 'static),
                    "the service failed after the request may have taken effect; \
                     its outcome is recorded as unknown"
                );
            }
            return undelivered(&shared, delivery, ambiguous, Err(error));
        }
    };
    let limit = shared.settings.max_stored_response;
    if response.body().size_hint().exact().is_none() {
        return streamed(shared, response, keyed, token, trace);
    }
    let anonymous = keyed.anonymous;
    let status = response.status();
    let captured = capture(response, limit)
        .await
        .map(|(response, mut stored)| {
            // The client that caused the response gets its cookies; no replay does.
            if anonymous {
                drop_cookies(&mut stored);
            }
            stored.trace = trace;
            (response, stored)
        });
    match captured {
        Ok((response, stored)) if is_ambiguous(status) => Execution::Ambiguous {
            response: stored,
            value: Ok(response),
        },
        Ok((response, stored)) => Execution::Final {
            response: stored,
            value: Ok(response),
        },
        Err(error) => {
            let answer = match body_failed(&shared, &*error) {
                Ambiguous::Retry => Rejection::UpstreamFailed(error).into_response(),
                Ambiguous::Reject => Rejection::OutcomeUnknown.into_response(),
            };
            Execution::Lost { value: Ok(answer) }
        }
    }
}

/// A response of unknown length (chunked, `text/event-stream`): streamed to the client as it
/// comes while the rest of the execution records it ([`stream`]), and, in wait mode, registered
/// for duplicates to join ([`live`](crate::live)); the clients' responses end once the outcome is
/// recorded, abnormally when the body broke off.
fn streamed<St, B, E>(
    shared: Arc<Shared<St>>,
    response: Response<B>,
    keyed: Keyed,
    token: FencingToken,
    trace: Option<TraceContext>,
) -> Execution<Answer<B, E>>
where
    St: Store,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let Keyed {
        anonymous,
        joinable,
    } = keyed;
    let limit = shared.settings.max_stored_response;
    // A client that takes no chunk for a lease holds up neither the recording nor the key.
    let stall = shared.engine.policy().lease;
    // In wait mode, duplicates join the stream here, and follow it from other instances through
    // the store: both get the status and the headers of a replay.
    let (live, mut appender) = joinable
        .map(|(address, fingerprint)| {
            let mut lines = header_lines(response.headers());
            if anonymous {
                lines.retain(|(name, _)| name != SET_COOKIE.as_str());
            }
            let mut headers = replay_headers(&lines);
            mark_replayed(&mut headers);
            let status = response.status();
            let limit = shared.engine.policy().store_call_limit();
            let (engine, head) = (shared.engine.clone(), (status, &headers));
            let appender = Appender::new(engine, address.clone(), token, head, limit);
            let live = shared.live.start(address, fingerprint, status, headers);
            (live, appender)
        })
        .unzip();
    let (response, recording) = stream::tee(
        response,
        limit,
        stall,
        live.as_ref()
            .map(|registration| Arc::clone(registration.live())),
    );
    let status = recording.status();
    let in_progress = Counted::new(&shared.requests().streams);
    let rest = Rest::new(async move {
        let _in_progress = in_progress;
        let (execution, ending) = match recording.record(appender.as_mut()).await {
            Ok((mut stored, ending)) => {
                if anonymous {
                    drop_cookies(&mut stored);
                }
                stored.trace = trace;
                let execution = if is_ambiguous(status) {
                    Execution::Ambiguous {
                        response: stored,
                        value: (),
                    }
                } else {
                    Execution::Final {
                        response: stored,
                        value: (),
                    }
                };
                (execution, ending)
            }
            Err((error, ending)) => {
                body_failed(&shared, &*error);
                (Execution::Lost { value: () }, ending)
            }
        };
        let then: OnSettled = Box::new(move |settled| {
            if let Some(registration) = live {
                // A duplicate sees a clean end only if the record holds what it got; the client
                // whose request ran gets its response whatever became of the record, as for a
                // response of known length.
                match settled {
                    Settled::Done => registration.finish(ending.end()),
                    Settled::NotDone => registration.finish(&Err(NOT_RECORDED.into())),
                }
            }
            ending.send();
            if let Some(appender) = appender {
                appender.discard();
            }
        });
        execution.map(|()| then)
    });
    Execution::Streaming {
        value: Ok(response),
        rest,
    }
}

/// Logs a response body that failed after the request was sent, and counts it when it is
/// recorded as outcome unknown; returns the policy it follows.
fn body_failed<St: Store>(
    shared: &Shared<St>,
    error: &(dyn Error + Send + Sync + 'static),
) -> Ambiguous {
    tracing::warn!(
        error = error as &(dyn Error + 'static),
        "the response body failed after the request was sent"
    );
    let ambiguous = shared.engine.policy().ambiguous;
    if ambiguous == Ambiguous::Reject {
        shared.requests().count_outcome_unknown();
    }
    ambiguous
}

/// How a request the inner service could not deliver ends, as its [`Delivery`] says: not sent,
/// the key is released and the `answer` returned; maybe sent, an ambiguous outcome (released
/// under [`Ambiguous::Retry`]; under [`Ambiguous::Reject`], recorded and answered as outcome
/// unknown). The `answer` is the inner service's error, or its response standing for one.
fn undelivered<St, B, E>(
    shared: &Shared<St>,
    delivery: Delivery,
    ambiguous: Ambiguous,
    answer: Answer<B, E>,
) -> Execution<Answer<B, E>> {
    match (delivery, ambiguous) {
        (Delivery::NotSent, _) => Execution::NotSent { value: answer },
        (Delivery::MaybeSent, Ambiguous::Retry) => Execution::Lost { value: answer },
        (Delivery::MaybeSent, Ambiguous::Reject) => {
            shared.requests().count_outcome_unknown();
            let unknown = Rejection::OutcomeUnknown.into_response();
            Execution::Lost { value: Ok(unknown) }
        }
    }
}

/// 5xx, 408 and 429 do not say whether the operation took effect.
fn is_ambiguous(status: StatusCode) -> bool {
    status.as_u16() >= 500
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}
