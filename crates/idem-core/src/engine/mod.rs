//! The [`Engine`]: runs an operation under a key, exactly once.
//!
//! It acquires the key and runs the work in the caller's task, moving them to a task of their own
//! if the caller goes away, so that nobody abandons a key; renews the lease at a third of its
//! length while the work runs; then completes or releases the key with its token and wakes the
//! requests waiting on it. In wait mode it waits for another worker's result: woken in process,
//! woken by the store's [`Store::changed`] for other processes where the store supports it, and
//! polling the store with backoff in any case.

mod execution;
mod waiters;

use std::{
    fmt,
    future::Future,
    panic::AssertUnwindSafe,
    pin::{Pin, pin},
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use futures_util::{FutureExt, future::OptionFuture};
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::task::{TaskTracker, task_tracker::TrackedFuture};
use tracing::{Instrument as _, Span, field::Empty};

use self::{execution::Settlement, waiters::Waiters};
pub use self::{
    execution::{Execution, OnSettled, Rest, Settled},
    waiters::WaitSlot,
};
use crate::{
    Acquisition, Address, Ambiguous, Fingerprint, InFlight, Lease, Outcome, Policy, Store,
    StoreError, Terms, time_limit::within,
};

/// The first and the longest pause between two polls of the store while waiting for a key.
const POLL_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));
/// The first and the longest pause between two attempts to record a result while the store fails.
const SETTLE_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// What happened to a request run by [`Engine::run`].
#[derive(Debug)]
pub enum RunOutcome<T> {
    /// This request executed the operation; here is the work's value.
    Executed(T),
    /// The operation had completed before; here is its stored outcome. Also the answer when a
    /// lease ran out without a result under [`Ambiguous::Reject`] (the outcome is then
    /// [`Outcome::Unknown`]).
    Replayed(Outcome),
    /// Another worker holds the key (and, in wait mode, did not finish within the timeout, or
    /// [`Policy::max_waiters`] requests were waiting already).
    InFlight {
        /// The holder's remaining lease.
        retry_after: Duration,
    },
    /// The key is in use by a request with another fingerprint.
    Mismatch,
}

/// The store failed before the key was acquired, so the work did not run: the error, and the
/// input [`Engine::run_with`] was given, for the caller to use another way (an HTTP front end
/// forwards the request without idempotency, or answers 503).
pub struct NotRun<I> {
    /// What the store answered, or [`StoreError::Unavailable`] when it did not answer in time.
    pub error: StoreError,
    /// The work's input, untouched.
    pub input: I,
}

impl<I> std::fmt::Debug for NotRun<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotRun")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<I> std::fmt::Display for NotRun<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

/// Transparent: the store's error, as it would be without the input.
impl<I> std::error::Error for NotRun<I> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl<I> From<NotRun<I>> for StoreError {
    fn from(not_run: NotRun<I>) -> Self {
        not_run.error
    }
}

/// Runs operations under idempotency keys with a [`Store`] and a [`Policy`]. Cheap to clone.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// use idem_core::{
///     Address, Engine, Execution, Fingerprint, MemoryStore, Outcome, Policy, RunOutcome,
///     StoredResponse,
/// };
///
/// let engine = Engine::new(MemoryStore::new(), Policy::default());
/// let address = Address::anonymous("charge-1".parse()?);
/// let fingerprint = Fingerprint::from_bytes([1; 32]);
/// let charge = || async {
///     let response = StoredResponse::new(201).body("charged 10 EUR");
///     Execution::Final { value: response.clone(), response }
/// };
///
/// let first = engine.run(address.clone(), fingerprint, move |_lease| charge()).await?;
/// assert!(matches!(first, RunOutcome::Executed(ref r) if r.status == 201));
///
/// let retry = engine.run(address, fingerprint, move |_lease| charge()).await?;
/// assert!(matches!(retry, RunOutcome::Replayed(Outcome::Response(ref r)) if &r.body[..] == b"charged 10 EUR"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct Engine<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    store: S,
    policy: Policy,
    waiters: Waiters,
    tasks: TaskTracker,
}

impl<S> Clone for Engine<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> std::fmt::Debug for Engine<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Engine<S> {
    /// An engine over `store` applying `policy`.
    pub fn new(store: S, policy: Policy) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                policy,
                waiters: Waiters::default(),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// Waits until every operation this engine started has finished and its result is recorded,
    /// including those whose callers went away. For graceful shutdown: stop taking requests first.
    pub async fn shutdown(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// A place among the requests that wait for a key another request holds, while fewer than
    /// [`Policy::max_waiters`] hold one (`None` otherwise); freed when dropped. For a front end
    /// whose requests wait another way, such as following the response being streamed to the
    /// first request, within the same bound.
    pub fn wait_slot(&self) -> Option<WaitSlot> {
        self.inner.waiters.enter(self.inner.policy.max_waiters)
    }

    /// How many operations this engine started have not finished: each holds its key, or is
    /// still acquiring it. After a [`shutdown`](Self::shutdown) cut short, the keys left
    /// `processing` (their leases free them).
    pub fn running(&self) -> usize {
        self.inner.tasks.len()
    }

    /// Runs `work` under `address` unless it already ran (or is running) for the same
    /// fingerprint.
    ///
    /// Each attempt to acquire the key, and the work once the key is acquired, is polled in the
    /// caller's task; if the caller drops this future at any point, the attempt goes on in a task
    /// of its own: a key it acquired is still worked on to the end and its result recorded —
    /// never left held by nobody until its lease runs out. Must be called in a Tokio runtime.
    /// A panic in the work releases the key and is resumed in the caller. The only error is a
    /// store failure before the key was acquired, a store call that did not answer within
    /// [`Policy::store_timeout`] included (HTTP front ends answer 503); a failure to record the
    /// result afterwards is logged, and the key's lease then runs out as if the worker had
    /// crashed.
    ///
    /// In wait mode, a request that finds its key held waits only while fewer than
    /// [`Policy::max_waiters`] requests of this engine wait; beyond that it is answered
    /// [`RunOutcome::InFlight`] at once.
    pub async fn run<F, Fut, T>(
        &self,
        address: Address,
        fingerprint: Fingerprint,
        work: F,
    ) -> Result<RunOutcome<T>, StoreError>
    where
        F: FnOnce(Lease) -> Fut + Send + 'static,
        Fut: Future<Output = Execution<T>> + Send + 'static,
        T: Send + 'static,
    {
        let run = self.run_with(address, fingerprint, (), move |(), lease| work(lease));
        Ok(run.await?)
    }

    /// [`run`](Self::run), with the work's `input` apart from it: when the store fails before
    /// the key is acquired, the work did not run and `input` comes back untouched in the
    /// [`NotRun`] error, so that the caller can still use it (an HTTP front end forwards the
    /// request it holds without idempotency).
    pub async fn run_with<I, F, Fut, T>(
        &self,
        address: Address,
        fingerprint: Fingerprint,
        input: I,
        work: F,
    ) -> Result<RunOutcome<T>, NotRun<I>>
    where
        I: Send + 'static,
        F: FnOnce(I, Lease) -> Fut + Send + 'static,
        Fut: Future<Output = Execution<T>> + Send + 'static,
        T: Send + 'static,
    {
        let never = || std::future::ready(None::<std::convert::Infallible>);
        match self
            .run_or_follow(address, fingerprint, input, work, never)
            .await?
        {
            Followed::Ran(outcome) => Ok(outcome),
            Followed::Following { value, .. } => match value {},
        }
    }

    /// [`run_with`](Self::run_with), where a request that waits for a key another worker holds
    /// may follow that worker's execution instead (an HTTP front end joins the response it is
    /// streaming, from the store): each time the key is found held in wait mode, once the
    /// request has its place among the waiters, `follow` is asked, within the store's time
    /// limit, and the first value it gives ends the wait, with the place.
    pub async fn run_or_follow<I, F, Fut, T, P, PFut, J>(
        &self,
        address: Address,
        fingerprint: Fingerprint,
        input: I,
        work: F,
        mut follow: P,
    ) -> Result<Followed<T, J>, NotRun<I>>
    where
        I: Send + 'static,
        F: FnOnce(I, Lease) -> Fut + Send + 'static,
        Fut: Future<Output = Execution<T>> + Send + 'static,
        T: Send + 'static,
        P: FnMut() -> PFut,
        PFut: Future<Output = Option<J>>,
    {
        let inner = &self.inner;
        let deadline = match inner.policy.in_flight {
            InFlight::Reject => None,
            InFlight::Wait { timeout } => Some(Instant::now() + timeout),
        };
        let mut backoff = POLL_BACKOFF.0;
        let mut work = (input, work);
        // Taken when the key is first found held, kept until this request has its answer.
        let mut waiting = None;
        loop {
            // Waiters subscribe before looking, so a completion between the look and the wait
            // wakes them; only waiters listen for other processes (a listener can cost the store
            // a connection).
            let subscription = deadline.map(|_| inner.waiters.subscribe(&address));
            let mut notified = pin!(subscription.as_ref().map(|s| s.notify().notified()));
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                notified.enable();
            }
            let changed = deadline.map(|_| inner.store.changed(&address));

            let attempt = Arc::clone(inner).attempt(address.clone(), fingerprint, work);
            let retry_after = match Detached::new(attempt, caller_span(), &inner.tasks).await {
                Attempt::Done(outcome) => return Ok(Followed::Ran(outcome)),
                Attempt::Failed {
                    error,
                    work: (input, _),
                } => return Err(NotRun { error, input }),
                Attempt::Panicked(panic) => std::panic::resume_unwind(panic),
                Attempt::Busy {
                    retry_after,
                    work: returned,
                } => {
                    work = returned;
                    retry_after
                }
            };
            let now = Instant::now();
            let Some(deadline) = deadline.filter(|d| now < *d) else {
                return Ok(Followed::Ran(RunOutcome::InFlight { retry_after }));
            };
            if waiting.is_none() {
                waiting = inner.waiters.enter(inner.policy.max_waiters);
                if waiting.is_none() {
                    tracing::debug!(
                        key = %address.key.digest(),
                        max_waiters = inner.policy.max_waiters,
                        "too many requests waiting; answered as in flight"
                    );
                    return Ok(Followed::Ran(RunOutcome::InFlight { retry_after }));
                }
            }
            let followed = within(inner.policy.store_call_limit(), async {
                Ok::<_, StoreError>(follow().await)
            })
            .await;
            if let Ok(Some(value)) = followed {
                let slot = waiting.take().expect("a place was taken above");
                return Ok(Followed::Following { value, slot });
            }
            let pause = backoff.min(retry_after).min(deadline - now);
            tokio::select! {
                Some(()) = OptionFuture::from(notified.as_mut().as_pin_mut()) => {}
                Some(()) = OptionFuture::from(changed) => {}
                () = sleep(pause) => backoff = (backoff * 2).min(POLL_BACKOFF.1),
            }
        }
    }
}

/// What happened to a request run by [`Engine::run_or_follow`].
#[derive(Debug)]
pub enum Followed<T, J> {
    /// It ran, replayed, or was answered as [`Engine::run_with`] answers it.
    Ran(RunOutcome<T>),
    /// It follows the execution of the worker that holds its key: what `follow` gave, and the
    /// request's place among the waiters, to keep while it follows.
    Following {
        /// What `follow` gave.
        value: J,
        /// The request's place among the waiters.
        slot: WaitSlot,
    },
}

/// A future polled in its caller's task that, if the caller drops it before it ends, finishes
/// in a task of its own: an attempt that acquired a key must run its work and record the
/// result whoever waits for it. Polling in place (rather than spawning every attempt) saves a
/// task and a cross-thread wake-up per request.
///
/// The task is spawned on the runtime the future is dropped in. Callers are tasks of that runtime
/// (a server's connection task drops its request's future when the client goes away); the
/// runtime is looked up only then, not for every request, as a handle taken up front would cost
/// two atomic operations on a counter all the runtime's threads share.
struct Detached<Fut>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    future: Option<TrackedFuture<Pin<Box<Fut>>>>,
    /// The caller's span, entered at each poll, and the finishing task's.
    span: Option<Span>,
}

impl<Fut> Detached<Fut>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    /// Boxed before it is tracked, so that the future (an attempt's is several KiB, all of it
    /// copied by every move) moves once.
    ///
    /// It runs in `span`, if any, also once it finishes in a task of its own (its caller gone),
    /// so that the spans it opens stay in its caller's trace.
    fn new(future: Fut, span: Option<Span>, tasks: &TaskTracker) -> Self {
        Self {
            future: Some(tasks.track_future(Box::pin(future))),
            span,
        }
    }
}

impl<Fut> Future for Detached<Fut>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    type Output = Fut::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let _entered = this.span.as_ref().map(Span::enter);
        // Out of its slot while polled: a future that panics is dropped by the unwinding, not
        // finished in the background by `drop`.
        let mut future = this.future.take().expect("polled after completion");
        match Pin::new(&mut future).poll(cx) {
            Poll::Ready(output) => Poll::Ready(output),
            Poll::Pending => {
                this.future = Some(future);
                Poll::Pending
            }
        }
    }
}

impl<Fut> Drop for Detached<Fut>
where
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    fn drop(&mut self) {
        let Some(future) = self.future.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            // A runtime that is shutting down drops the task, as it drops every other one.
            Ok(runtime) => drop(match self.span.take() {
                Some(span) => runtime.spawn(future.instrument(span)),
                None => runtime.spawn(future),
            }),
            Err(_) => tracing::error!(
                "a request whose key was acquired was dropped outside a Tokio runtime: its work \
                 cannot finish, and its key frees up when its lease ends"
            ),
        }
    }
}

/// How one attempt at the key ended.
enum Attempt<W, T> {
    /// The request is answered: executed, replayed or mismatched.
    Done(RunOutcome<T>),
    /// The store failed before the key was acquired: the work comes back unrun.
    Failed { error: StoreError, work: W },
    /// The work panicked; the key was released.
    Panicked(Panic),
    /// Another worker holds the key: the work comes back for the next attempt.
    Busy { retry_after: Duration, work: W },
}

type Panic = Box<dyn std::any::Any + Send>;

impl<S: Store> Inner<S> {
    /// Acquires the key and, when it is ours, runs the work to the end, even if its caller goes
    /// away (see [`Detached`]).
    async fn attempt<I, F, Fut, T>(
        self: Arc<Self>,
        address: Address,
        fingerprint: Fingerprint,
        work: (I, F),
    ) -> Attempt<(I, F), T>
    where
        F: FnOnce(I, Lease) -> Fut,
        Fut: Future<Output = Execution<T>> + Send,
    {
        let terms = Terms::from(&self.policy);
        let acquire = traced(|| {
            tracing::debug_span!(
                "idem.acquire",
                idem.key_digest = %address.key.digest(),
                idem.outcome = Empty,
            )
        });
        let acquiring = within(
            self.policy.store_call_limit(),
            self.store.acquire(&address, &fingerprint, terms),
        );
        let acquisition = match &acquire {
            Some(span) => acquiring.instrument(span.clone()).await,
            None => acquiring.await,
        };
        if let Some(span) = acquire {
            span.record("idem.outcome", acquired(&acquisition));
        }
        let lease = match acquisition {
            Ok(Acquisition::Acquired(lease)) => lease,
            Ok(Acquisition::Completed(outcome)) => {
                return Attempt::Done(RunOutcome::Replayed(outcome));
            }
            Ok(Acquisition::Mismatch) => return Attempt::Done(RunOutcome::Mismatch),
            Ok(Acquisition::InFlight { retry_after }) => {
                return Attempt::Busy { retry_after, work };
            }
            Err(error) => return Attempt::Failed { error, work },
        };
        if lease.took_over && self.policy.ambiguous == Ambiguous::Reject {
            // The previous holder died without a result: it may have executed. Never run twice.
            // Recorded like any result (retried for up to a lease); the answer is "outcome
            // unknown" even if that fails: it is what this request knows, and the key, still
            // held, is taken over again (and the outcome recorded) once its lease ends.
            self.settle(&address, lease, Settlement::Complete(Outcome::Unknown))
                .await;
            self.waiters.notify(&address);
            return Attempt::Done(RunOutcome::Replayed(Outcome::Unknown));
        }
        let (input, work) = work;
        let execute = traced(|| {
            tracing::debug_span!(
                "idem.execute",
                idem.key_digest = %address.key.digest(),
                idem.fencing_token = lease.token.get(),
                idem.outcome = Empty,
            )
        });
        let called = {
            let _entered = execute.as_ref().map(Span::enter);
            std::panic::catch_unwind(AssertUnwindSafe(|| work(input, lease)))
        };
        let work = match called {
            Ok(work) => work,
            Err(panic) => {
                if let Some(span) = execute {
                    span.record("idem.outcome", "panicked");
                }
                self.settle(&address, lease, Settlement::Release).await;
                self.waiters.notify(&address);
                return Attempt::Panicked(panic);
            }
        };
        // Pinned here, where it stays: every move would copy the whole future.
        match self.supervise(&address, lease, pin!(work), execute).await {
            Ok(value) => Attempt::Done(RunOutcome::Executed(value)),
            Err(panic) => Attempt::Panicked(panic),
        }
    }
    /// Runs the work in its `execute` span while renewing its lease, then records its result; a
    /// [streamed](Execution::Streaming) one in a task of its own, once the caller has its value.
    async fn supervise<T>(
        self: &Arc<Self>,
        address: &Address,
        lease: Lease,
        mut work: Pin<&mut (impl Future<Output = Execution<T>> + Send)>,
        execute: Option<Span>,
    ) -> Result<T, Panic> {
        let in_span = std::future::poll_fn(|cx| {
            let _entered = execute.as_ref().map(Span::enter);
            work.as_mut().poll(cx)
        });
        let outcome = tokio::select! {
            outcome = AssertUnwindSafe(in_span).catch_unwind() => outcome,
            never = self.heartbeat(address, lease) => match never {},
        };
        let settled = outcome.map(|e| e.settle(self.policy.ambiguous));
        // The span ends with the work; recording the result is a span of its own.
        if let Some(span) = execute {
            span.record("idem.outcome", executed(&settled));
        }
        let (result, settlement) = match settled {
            Ok(Ok((value, settlement))) => (Ok(value), settlement),
            Ok(Err((value, rest))) => {
                let (inner, address) = (Arc::clone(self), address.clone());
                let finish = async move { inner.finish_streaming(&address, lease, rest).await };
                match caller_span() {
                    Some(span) => self.tasks.spawn(finish.instrument(span)),
                    None => self.tasks.spawn(finish),
                };
                return Ok(value);
            }
            Err(panic) => (Err(panic), Settlement::Release),
        };
        self.settle(address, lease, settlement).await;
        self.waiters.notify(address);
        result
    }

    /// Runs the `rest` of a streamed execution while renewing its lease, records its result, then
    /// calls the function it ends with. A panic releases the key; the functions are then dropped
    /// uncalled.
    async fn finish_streaming(&self, address: &Address, lease: Lease, mut rest: Rest) {
        let mut on_settled = Vec::new();
        let settlement = loop {
            let outcome = tokio::select! {
                outcome = AssertUnwindSafe(&mut rest.0).catch_unwind() => outcome,
                never = self.heartbeat(address, lease) => match never {},
            };
            match outcome.map(|e| e.settle(self.policy.ambiguous)) {
                Ok(Ok((then, settlement))) => {
                    on_settled.push(then);
                    break settlement;
                }
                Ok(Err((then, next))) => {
                    on_settled.push(then);
                    rest = next;
                }
                Err(_) => {
                    tracing::error!(
                        key = %address.key.digest(),
                        "a streamed execution panicked; its key is released"
                    );
                    on_settled.clear();
                    break Settlement::Release;
                }
            }
        };
        let settled = self.settle(address, lease, settlement).await;
        self.waiters.notify(address);
        for then in on_settled {
            then(settled);
        }
    }

    /// Renews the lease every third of its length until dropped. A renewal that fails or does
    /// not answer within the store's time limit is retried at the next tick: on a fixed
    /// schedule, so that with the default limit (a third of the lease) a renewal that hung is
    /// followed by another before the lease ends.
    async fn heartbeat(&self, address: &Address, lease: Lease) -> std::convert::Infallible {
        // A zero lease would spin; nothing useful renews more often than this.
        let every = (self.policy.lease / 3).max(Duration::from_millis(10));
        // A timer in the future itself, reset for each tick: no allocation for the many works
        // that end before their first renewal.
        let mut tick = pin!(sleep_until(Instant::now() + every));
        loop {
            tick.as_mut().await;
            let fired = tick.deadline();
            let renewed = within(
                self.policy.store_call_limit(),
                self.store.renew(address, lease.token, self.policy.lease),
            )
            .await;
            match renewed {
                Ok(_) => {}
                Err(StoreError::LeaseLost) => {
                    tracing::warn!(
                        key = %address.key.digest(),
                        token = %lease.token,
                        "lease lost while running; the result will be discarded"
                    );
                    return std::future::pending().await;
                }
                Err(error) => {
                    tracing::warn!(
                        key = %address.key.digest(),
                        error = %Causes(&error),
                        "renewing the lease failed"
                    );
                }
            }
            tick.as_mut().reset(next_tick(fired, every, Instant::now()));
        }
    }

    /// Completes or releases the key. While the store fails, it keeps trying for a whole lease:
    /// the lease was renewed at most a third of a lease ago, so until then nobody can have taken
    /// the key over, and a result recorded late is still accepted if nobody has since. Giving up
    /// sooner would let a retry take the key over after the lease and execute a second time.
    /// The lease is counted from the first failure, so that a result recorded at once reads no
    /// clock.
    async fn settle(&self, address: &Address, lease: Lease, settlement: Settlement) -> Settled {
        let complete = traced(|| {
            tracing::debug_span!(
                "idem.complete",
                idem.key_digest = %address.key.digest(),
                idem.fencing_token = lease.token.get(),
                idem.settlement = match &settlement {
                    Settlement::Complete(Outcome::Response(_)) => "response",
                    Settlement::Complete(Outcome::Unknown) => "unknown",
                    Settlement::Release => "release",
                },
                idem.outcome = Empty,
            )
        });
        let recording = self.record(address, lease, settlement);
        let Some(span) = complete else {
            return recording.await;
        };
        let settled = recording.instrument(span.clone()).await;
        let recorded = match settled {
            Settled::Done => "recorded",
            Settled::NotDone => "not_recorded",
        };
        span.record("idem.outcome", recorded);
        settled
    }

    /// [`settle`](Self::settle)'s work, in its span.
    async fn record(&self, address: &Address, lease: Lease, settlement: Settlement) -> Settled {
        let mut deadline = None;
        let mut pause = SETTLE_BACKOFF.0;
        loop {
            let limit = self.policy.store_call_limit();
            let result = match &settlement {
                Settlement::Complete(outcome) => {
                    within(
                        limit,
                        self.store
                            .complete(address, lease.token, outcome, self.policy.ttl),
                    )
                    .await
                }
                Settlement::Release => {
                    within(limit, self.store.release(address, lease.token)).await
                }
            };
            match result {
                Ok(()) => return Settled::Done,
                Err(StoreError::LeaseLost) => {
                    tracing::warn!(
                        key = %address.key.digest(),
                        token = %lease.token,
                        "lease lost before the result was recorded; it is discarded"
                    );
                    return Settled::NotDone;
                }
                Err(error) => {
                    let now = Instant::now();
                    if now + pause >= *deadline.get_or_insert(now + self.policy.lease) {
                        tracing::error!(
                            key = %address.key.digest(),
                            error = %Causes(&error),
                            "could not record the result within a lease; the key frees up when \
                             its lease ends"
                        );
                        return Settled::NotDone;
                    }
                    tracing::warn!(
                        key = %address.key.digest(),
                        error = %Causes(&error),
                        "recording the result failed; retrying"
                    );
                    sleep(pause).await;
                    pause = (pause * 2).min(SETTLE_BACKOFF.1);
                }
            }
        }
    }
}

/// An error and its sources, `: `-separated, for the logs: "the store is unavailable" alone does
/// not say whether a pool timed out or a connection broke.
struct Causes<'e>(&'e (dyn std::error::Error + 'static));

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

/// The first tick of the schedule `fired + k × every` after `now`: a tick missed while a
/// renewal hung is skipped, and the schedule stays where it was.
fn next_tick(fired: Instant, every: Duration, now: Instant) -> Instant {
    let late = now.saturating_duration_since(fired);
    let missed = late.as_nanos() / every.as_nanos().max(1);
    let ticks = u32::try_from(missed + 1).unwrap_or(u32::MAX);
    fired + every.saturating_mul(ticks)
}

#[cfg(test)]
mod tests;

/// The span the caller runs in, for an attempt to keep; none where the engine's spans cannot be
/// on.
fn caller_span() -> Option<Span> {
    traced(Span::current)
}

/// The span `make` gives, where the engine's spans (at `debug`) can be on; otherwise none, with
/// nothing to enter, record or carry: a static check, the whole cost of the spans while no
/// subscriber takes them.
fn traced(make: impl FnOnce() -> Span) -> Option<Span> {
    tracing::level_enabled!(tracing::Level::DEBUG).then(make)
}

/// The `idem.outcome` of an `idem.acquire` span.
fn acquired(acquisition: &Result<Acquisition, StoreError>) -> &'static str {
    match acquisition {
        Ok(Acquisition::Acquired(lease)) if lease.took_over => "taken_over",
        Ok(Acquisition::Acquired(_)) => "acquired",
        Ok(Acquisition::Completed(_)) => "completed",
        Ok(Acquisition::InFlight { .. }) => "in_flight",
        Ok(Acquisition::Mismatch) => "mismatch",
        Err(_) => "store_error",
    }
}

/// How the work of an execution ended: settled now, streaming on, or panicked.
type Ended<T> = Result<Result<(T, Settlement), (T, Rest)>, Panic>;

/// The `idem.outcome` of an `idem.execute` span: what becomes of the key.
fn executed<T>(settled: &Ended<T>) -> &'static str {
    match settled {
        Ok(Ok((_, Settlement::Complete(Outcome::Response(_))))) => "response",
        Ok(Ok((_, Settlement::Complete(Outcome::Unknown)))) => "unknown",
        Ok(Ok((_, Settlement::Release))) => "released",
        Ok(Err(_)) => "streaming",
        Err(_) => "panicked",
    }
}
