use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::{sync::oneshot, task::JoinHandle};

use super::*;
use crate::{Clock, MemoryStore, Record, RecordState, StoredResponse, Timestamp};

/// Wall time that follows tokio's clock, so paused-time tests move leases too.
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(1_000_000) + self.0.elapsed()
    }
}

fn engine(policy: Policy) -> Engine<MemoryStore> {
    Engine::new(
        MemoryStore::with_clock(TokioClock(tokio::time::Instant::now())),
        policy,
    )
}

fn address() -> Address {
    Address::anonymous("engine-key".parse().unwrap())
}

const FP: Fingerprint = Fingerprint::from_bytes([3; 32]);

fn ok(body: &'static str) -> StoredResponse {
    StoredResponse::new(201).body(body)
}

/// Work that counts its executions, takes `duration`, and answers `response` as final.
fn counted(
    runs: &Arc<AtomicUsize>,
    duration: Duration,
    response: StoredResponse,
) -> impl FnOnce(Lease) -> std::pin::Pin<Box<dyn Future<Output = Execution<StoredResponse>> + Send>>
+ Send
+ use<> {
    let runs = Arc::clone(runs);
    move |_lease| {
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            sleep(duration).await;
            Execution::Final {
                value: response.clone(),
                response,
            }
        })
    }
}

/// A request for the test key whose work, counted in `runs`, answers `ok(body)` at once.
async fn request<S: Store>(
    engine: &Engine<S>,
    runs: &Arc<AtomicUsize>,
    body: &'static str,
) -> RunOutcome<StoredResponse> {
    engine
        .run(address(), FP, counted(runs, Duration::ZERO, ok(body)))
        .await
        .unwrap()
}

/// A request for the test key that runs `work`, in a task of its own.
fn spawn_run<S, F, Fut, T>(engine: &Engine<S>, work: F) -> JoinHandle<RunOutcome<T>>
where
    S: Store,
    F: FnOnce(Lease) -> Fut + Send + 'static,
    Fut: Future<Output = Execution<T>> + Send + 'static,
    T: Send + 'static,
{
    let engine = engine.clone();
    tokio::spawn(async move { engine.run(address(), FP, work).await.unwrap() })
}

/// How many of `callers` executed `ok(body)` and how many replayed it; any other answer fails
/// the test.
async fn executed_and_replayed(
    callers: Vec<JoinHandle<RunOutcome<StoredResponse>>>,
    body: &'static str,
) -> (usize, usize) {
    let (mut executed, mut replayed) = (0, 0);
    for caller in callers {
        match caller.await.unwrap() {
            RunOutcome::Executed(r) if r == ok(body) => executed += 1,
            RunOutcome::Replayed(r) if r == Outcome::from(ok(body)) => replayed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    (executed, replayed)
}

/// The test key's record, if it has one.
async fn record<S: Store>(engine: &Engine<S>) -> Option<Record> {
    engine.store().get(&address()).await.unwrap()
}

/// The lease of a worker that acquired the test key and died, once that lease has run out.
async fn dead_holder<S: Store>(engine: &Engine<S>) -> Lease {
    let terms = Terms::from(engine.policy());
    let dead = engine
        .store()
        .acquire(&address(), &FP, terms)
        .await
        .unwrap();
    let Acquisition::Acquired(dead) = dead else {
        panic!("{dead:?}")
    };
    sleep(terms.lease).await;
    dead
}

fn wait(timeout: Duration) -> Policy {
    Policy::default().in_flight(InFlight::Wait { timeout })
}

#[tokio::test(start_paused = true)]
async fn second_request_replays_without_executing() {
    let engine = engine(Policy::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let first = request(&engine, &runs, "a").await;
    let second = request(&engine, &runs, "b").await;
    assert!(matches!(first, RunOutcome::Executed(r) if r == ok("a")));
    assert!(matches!(second, RunOutcome::Replayed(r) if r == Outcome::from(ok("a"))));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn concurrent_request_in_reject_mode_is_in_flight_with_the_remaining_lease() {
    let engine = engine(Policy::default().lease(Duration::from_secs(30)));
    let runs = Arc::new(AtomicUsize::new(0));
    let first = spawn_run(&engine, counted(&runs, Duration::from_secs(5), ok("a")));
    sleep(Duration::from_secs(1)).await;
    let second = request(&engine, &runs, "b").await;
    assert!(
        matches!(second, RunOutcome::InFlight { retry_after } if retry_after == Duration::from_secs(29)),
        "{second:?}"
    );
    assert!(matches!(first.await.unwrap(), RunOutcome::Executed(_)));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn other_fingerprint_is_a_mismatch() {
    let engine = engine(Policy::default());
    let runs = Arc::new(AtomicUsize::new(0));
    request(&engine, &runs, "a").await;
    let other = Fingerprint::from_bytes([4; 32]);
    let outcome = engine
        .run(address(), other, counted(&runs, Duration::ZERO, ok("b")))
        .await
        .unwrap();
    assert!(matches!(outcome, RunOutcome::Mismatch), "{outcome:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn dropped_caller_work_still_completes_and_is_stored() {
    let engine = engine(wait(Duration::from_secs(60)));
    let (started_tx, started) = oneshot::channel();
    let (finish, finish_rx) = oneshot::channel::<()>();
    let caller = spawn_run(&engine, move |_lease| async move {
        started_tx.send(()).unwrap();
        finish_rx.await.unwrap();
        Execution::Final {
            value: (),
            response: ok("done after the caller left"),
        }
    });
    started.await.unwrap();
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    finish.send(()).unwrap();

    let runs = Arc::new(AtomicUsize::new(0));
    let retry = request(&engine, &runs, "again").await;
    assert!(
        matches!(retry, RunOutcome::Replayed(ref r) if *r == Outcome::from(ok("done after the caller left"))),
        "{retry:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn wait_mode_hands_the_first_result_to_every_waiter() {
    let engine = engine(wait(Duration::from_secs(60)));
    let runs = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..10)
        .map(|_| spawn_run(&engine, counted(&runs, Duration::from_secs(2), ok("one"))))
        .collect();
    let (executed, replayed) = executed_and_replayed(callers, "one").await;
    assert_eq!((executed, replayed), (1, 9));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(engine.inner.waiters.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn wait_mode_times_out_as_in_flight() {
    let engine = engine(wait(Duration::from_secs(3)).lease(Duration::from_secs(30)));
    let runs = Arc::new(AtomicUsize::new(0));
    let first = spawn_run(&engine, counted(&runs, Duration::from_secs(10), ok("slow")));
    sleep(Duration::from_millis(1)).await;
    let started = tokio::time::Instant::now();
    let second = request(&engine, &runs, "b").await;
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(
        matches!(second, RunOutcome::InFlight { retry_after } if retry_after == Duration::from_millis(26_999)),
        "{second:?}"
    );
    assert!(matches!(first.await.unwrap(), RunOutcome::Executed(_)));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn released_key_is_taken_by_one_waiter_whose_result_the_others_replay() {
    let engine = engine(wait(Duration::from_secs(60)));
    let runs = Arc::new(AtomicUsize::new(0));
    let failing = {
        let runs = Arc::clone(&runs);
        move |_lease| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            sleep(Duration::from_secs(1)).await;
            Execution::Ambiguous {
                value: StoredResponse::new(503),
                response: StoredResponse::new(503),
            }
        }
    };
    let first = spawn_run(&engine, failing);
    sleep(Duration::from_millis(1)).await;
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            spawn_run(
                &engine,
                counted(&runs, Duration::from_secs(1), ok("second try")),
            )
        })
        .collect();
    assert!(matches!(first.await.unwrap(), RunOutcome::Executed(r) if r.status == 503));
    let (executed, replayed) = executed_and_replayed(waiters, "second try").await;
    assert_eq!((executed, replayed), (1, 4));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn long_job_with_a_short_lease_is_not_taken_over_while_it_renews() {
    let lease = Duration::from_millis(300);
    let engine = engine(Policy::default().lease(lease));
    let runs = Arc::new(AtomicUsize::new(0));
    let long = spawn_run(&engine, counted(&runs, lease * 10, ok("long")));
    for _ in 0..8 {
        sleep(lease).await;
        let probe = request(&engine, &runs, "stolen").await;
        assert!(matches!(probe, RunOutcome::InFlight { .. }), "{probe:?}");
    }
    assert!(matches!(long.await.unwrap(), RunOutcome::Executed(r) if r == ok("long")));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let replay = request(&engine, &runs, "stolen").await;
    assert!(matches!(replay, RunOutcome::Replayed(r) if r == Outcome::from(ok("long"))));
}

#[tokio::test(start_paused = true)]
async fn panicking_job_releases_the_key_and_the_panic_reaches_the_caller() {
    let engine = engine(Policy::default());
    let caller = spawn_run(&engine, |_lease| async {
        sleep(Duration::from_millis(5)).await;
        panic!("handler bug");
        #[allow(unreachable_code)]
        Execution::NotSent { value: () }
    });
    let panic = caller.await.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"handler bug"));
    assert_eq!(record(&engine).await, None);

    let runs = Arc::new(AtomicUsize::new(0));
    let retry = request(&engine, &runs, "fixed").await;
    assert!(matches!(retry, RunOutcome::Executed(_)));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn panic_while_building_the_work_releases_the_key() {
    let engine = engine(Policy::default());
    let caller = spawn_run(&engine, |_lease| -> std::future::Ready<Execution<()>> {
        panic!("bad closure")
    });
    assert!(caller.await.unwrap_err().is_panic());
    assert_eq!(record(&engine).await, None);
}

async fn settle_once(policy: Policy, execution: Execution<()>) -> Option<RecordState> {
    let engine = engine(policy);
    let outcome = engine
        .run(address(), FP, move |_lease| async move { execution })
        .await
        .unwrap();
    assert!(matches!(outcome, RunOutcome::Executed(())));
    record(&engine).await.map(|r| r.state)
}

fn stored(state: Option<RecordState>) -> Option<Outcome> {
    match state {
        Some(RecordState::Completed { outcome, .. }) => Some(outcome),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn ambiguous_outcomes_follow_the_policy() {
    let retry = Policy::default().ambiguous(Ambiguous::Retry);
    let reject = Policy::default().ambiguous(Ambiguous::Reject);
    let failed = || Execution::Ambiguous {
        value: (),
        response: StoredResponse::new(502),
    };
    assert_eq!(settle_once(retry, failed()).await, None);
    assert_eq!(
        stored(settle_once(reject, failed()).await),
        Some(StoredResponse::new(502).into())
    );
    assert_eq!(
        settle_once(retry, Execution::Lost { value: () }).await,
        None
    );
    assert_eq!(
        stored(settle_once(reject, Execution::Lost { value: () }).await),
        Some(Outcome::Unknown)
    );
    assert_eq!(
        settle_once(reject, Execution::NotSent { value: () }).await,
        None
    );
}

#[tokio::test(start_paused = true)]
async fn lease_that_ran_out_without_a_result_is_outcome_unknown_under_reject() {
    let engine = engine(Policy::default().ambiguous(Ambiguous::Reject));
    dead_holder(&engine).await;

    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let outcome = request(&engine, &runs, "twice").await;
        assert!(
            matches!(outcome, RunOutcome::Replayed(Outcome::Unknown)),
            "{outcome:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn lease_that_ran_out_is_executed_again_under_retry() {
    let engine = engine(Policy::default());
    let dead = dead_holder(&engine).await;

    let runs = Arc::new(AtomicUsize::new(0));
    let outcome = request(&engine, &runs, "retried").await;
    assert!(matches!(outcome, RunOutcome::Executed(_)));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The dead worker's late result is refused.
    let ttl = Terms::from(engine.policy()).ttl;
    let late = engine
        .store()
        .complete(&address(), dead.token, &ok("late").into(), ttl)
        .await;
    assert!(matches!(late, Err(StoreError::LeaseLost)));
}

#[tokio::test(start_paused = true)]
async fn stale_workers_late_result_is_discarded_after_a_forget() {
    let engine = engine(Policy::default());
    let (finish, finish_rx) = oneshot::channel::<()>();
    let worker = spawn_run(&engine, move |_lease| async move {
        finish_rx.await.unwrap();
        Execution::Final {
            value: (),
            response: ok("stale"),
        }
    });
    sleep(Duration::from_millis(10)).await;
    assert!(engine.store().forget(&address()).await.unwrap());
    let runs = Arc::new(AtomicUsize::new(0));
    let fresh = request(&engine, &runs, "fresh").await;
    assert!(matches!(fresh, RunOutcome::Executed(_)));

    finish.send(()).unwrap();
    assert!(matches!(worker.await.unwrap(), RunOutcome::Executed(())));
    assert_eq!(
        stored(record(&engine).await.map(|r| r.state)),
        Some(ok("fresh").into())
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_work_whose_caller_went_away() {
    let engine = engine(Policy::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let caller = spawn_run(
        &engine,
        counted(
            &runs,
            Duration::from_secs(5),
            ok("finished during shutdown"),
        ),
    );
    sleep(Duration::from_millis(10)).await;
    assert_eq!(engine.running(), 1);
    caller.abort();
    let started = tokio::time::Instant::now();
    engine.shutdown().await;
    assert_eq!(started.elapsed(), Duration::from_millis(4_990));
    assert_eq!(engine.running(), 0);
    assert_eq!(
        stored(record(&engine).await.map(|r| r.state)),
        Some(ok("finished during shutdown").into())
    );
}

/// A memory store with faults: an `acquire` that answers late after writing the record (like a
/// database whose commit is acknowledged late: the window in which a caller can go away holding
/// the key), and `complete`s that fail while the store is "down".
struct Faulty {
    store: MemoryStore,
    acquire_delay: Duration,
    failing_completes: AtomicUsize,
    /// Renewals that never answer, as with a store whose network stopped delivering packets.
    hanging_renews: AtomicUsize,
}

impl Faulty {
    fn new(acquire_delay: Duration, failing_completes: usize) -> Self {
        Self {
            store: MemoryStore::with_clock(TokioClock(tokio::time::Instant::now())),
            acquire_delay,
            failing_completes: AtomicUsize::new(failing_completes),
            hanging_renews: AtomicUsize::new(0),
        }
    }
}

impl Store for Faulty {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let acquisition = self.store.acquire(address, fingerprint, terms).await;
        sleep(self.acquire_delay).await;
        acquisition
    }

    async fn complete(
        &self,
        address: &Address,
        token: crate::FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let down = self
            .failing_completes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if down {
            return Err(StoreError::unavailable("the store is down"));
        }
        self.store.complete(address, token, outcome, ttl).await
    }

    async fn release(
        &self,
        address: &Address,
        token: crate::FencingToken,
    ) -> Result<(), StoreError> {
        self.store.release(address, token).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: crate::FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let hangs = self
            .hanging_renews
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if hangs {
            return std::future::pending().await;
        }
        self.store.renew(address, token, lease).await
    }

    async fn get(&self, address: &Address) -> Result<Option<crate::Record>, StoreError> {
        self.store.get(address).await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        self.store.forget(address).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.store.purge_expired(limit).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }
}

#[tokio::test(start_paused = true)]
async fn caller_dropped_while_acquiring_does_not_leave_the_key_held_by_nobody() {
    let store = Faulty::new(Duration::from_millis(100), 0);
    let engine = Engine::new(store, wait(Duration::from_secs(60)));
    let runs = Arc::new(AtomicUsize::new(0));
    let caller = spawn_run(
        &engine,
        counted(&runs, Duration::from_millis(10), ok("charged once")),
    );
    // The record is written; the caller goes away before the store has answered.
    sleep(Duration::from_millis(50)).await;
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());

    let started = tokio::time::Instant::now();
    let retry = request(&engine, &runs, "charged twice").await;
    assert!(
        matches!(retry, RunOutcome::Replayed(ref r) if *r == Outcome::from(ok("charged once"))),
        "{retry:?}"
    );
    // Answered as soon as the first work finished, not when its lease ran out.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_result_is_recorded_once_the_store_is_back_within_the_lease() {
    // Down for 8 attempts: about 5 s of backoff, well within the 30 s lease.
    let engine = Engine::new(Faulty::new(Duration::ZERO, 8), Policy::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let first = request(&engine, &runs, "recorded late").await;
    assert!(matches!(first, RunOutcome::Executed(_)));
    assert_eq!(engine.store().failing_completes.load(Ordering::SeqCst), 0);
    let retry = request(&engine, &runs, "executed twice").await;
    assert!(
        matches!(retry, RunOutcome::Replayed(ref r) if *r == Outcome::from(ok("recorded late"))),
        "{retry:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn recording_gives_up_after_a_lease_and_the_key_frees_up_when_it_ends() {
    let lease = Duration::from_secs(3);
    let engine = Engine::new(
        Faulty::new(Duration::ZERO, usize::MAX),
        Policy::default().lease(lease),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let started = tokio::time::Instant::now();
    let first = request(&engine, &runs, "lost").await;
    assert!(matches!(first, RunOutcome::Executed(_)));
    assert!(started.elapsed() <= lease, "{:?}", started.elapsed());
    let record = record(&engine).await.unwrap();
    assert_eq!(record.state.name(), "processing");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_hangs_is_abandoned_and_the_next_tick_keeps_the_lease() {
    // Lease 3 s, renewals due every second. The first (at 1 s) hangs until its 1.5 s limit; the
    // missed tick at 2 s renews at once (2.5 s), and the schedule goes on at 3 s, 4 s, …
    let lease = Duration::from_secs(3);
    let store = Faulty::new(Duration::ZERO, 0);
    store.hanging_renews.store(1, Ordering::SeqCst);
    let policy = Policy::default()
        .lease(lease)
        .store_timeout(Duration::from_millis(1_500));
    let engine = Engine::new(store, policy);
    let runs = Arc::new(AtomicUsize::new(0));
    let long = spawn_run(&engine, counted(&runs, Duration::from_secs(10), ok("long")));
    // Past the end of the first lease: without a renewal since the start, it would be taken.
    sleep(Duration::from_millis(3_200)).await;
    assert_eq!(engine.store().hanging_renews.load(Ordering::SeqCst), 0);
    let probe = request(&engine, &runs, "stolen").await;
    assert!(
        matches!(probe, RunOutcome::InFlight { retry_after } if retry_after == Duration::from_millis(2_800)),
        "{probe:?}"
    );
    assert!(matches!(long.await.unwrap(), RunOutcome::Executed(r) if r == ok("long")));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// An engine over a store whose `acquire` does not answer within the engine's store timeout.
fn engine_over_a_silent_store() -> Engine<Faulty> {
    Engine::new(
        Faulty::new(Duration::from_secs(60), 0),
        Policy::default().store_timeout(Duration::from_millis(500)),
    )
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_does_not_answer_fails_as_unavailable_at_the_store_timeout() {
    let engine = engine_over_a_silent_store();
    let runs = Arc::new(AtomicUsize::new(0));
    let started = tokio::time::Instant::now();
    let outcome = engine
        .run(address(), FP, counted(&runs, Duration::ZERO, ok("never")))
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert!(
        matches!(outcome, Err(StoreError::Unavailable(_))),
        "{outcome:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_store_failure_hands_the_unrun_work_its_input_back() {
    let failing = engine_over_a_silent_store();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let outcome = failing
        .run_with(
            address(),
            FP,
            String::from("the request"),
            move |input, _lease| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    let response = StoredResponse::new(201).body(input);
                    Execution::Final {
                        value: (),
                        response,
                    }
                }
            },
        )
        .await;
    let Err(NotRun { error, input }) = outcome else {
        panic!("the store did not answer, yet {outcome:?}");
    };
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert_eq!(input, "the request");
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A store that answers runs the work on its input.
    let engine = engine(Policy::default());
    let outcome = engine
        .run_with(address(), FP, 7_u16, |input, _lease| async move {
            Execution::Final {
                value: input * 6,
                response: ok("ran"),
            }
        })
        .await
        .unwrap();
    assert!(matches!(outcome, RunOutcome::Executed(42)), "{outcome:?}");
}

#[tokio::test(start_paused = true)]
async fn a_takeover_records_its_outcome_unknown_through_a_failing_store() {
    // The first attempt to record fails (a store restart): retried, as any result is.
    let (outcome, runs, record) = take_over_with_failing_completes(1).await;
    assert!(
        matches!(outcome, RunOutcome::Replayed(Outcome::Unknown)),
        "{outcome:?}"
    );
    assert_eq!(runs, 0);
    assert!(
        matches!(
            record.state,
            RecordState::Completed {
                outcome: Outcome::Unknown,
                ..
            }
        ),
        "{:?}",
        record.state
    );
}

#[tokio::test(start_paused = true)]
async fn a_takeover_whose_outcome_unknown_cannot_be_recorded_still_answers_it() {
    // The store refuses every attempt for longer than a lease: the answer is still "outcome
    // unknown", and the key stays held, to be taken over again when its lease ends.
    let (outcome, runs, record) = take_over_with_failing_completes(usize::MAX).await;
    assert!(
        matches!(outcome, RunOutcome::Replayed(Outcome::Unknown)),
        "{outcome:?}"
    );
    assert_eq!(runs, 0);
    assert_eq!(record.state.name(), "processing");
}

/// A key whose holder died, taken over under `--ambiguous reject` while `failures` completes
/// fail: the outcome, the executions, and the record after it.
async fn take_over_with_failing_completes(
    failures: usize,
) -> (RunOutcome<StoredResponse>, usize, Record) {
    let engine = Engine::new(
        Faulty::new(Duration::ZERO, failures),
        Policy::default().ambiguous(Ambiguous::Reject),
    );
    dead_holder(&engine).await;

    let runs = Arc::new(AtomicUsize::new(0));
    let outcome = request(&engine, &runs, "twice").await;
    let record = record(&engine).await.unwrap();
    (outcome, runs.load(Ordering::SeqCst), record)
}

#[tokio::test(start_paused = true)]
async fn waiters_beyond_the_limit_are_in_flight_at_once_and_leaving_frees_their_place() {
    const MAX: usize = 4;
    let engine = engine(wait(Duration::from_secs(60)).max_waiters(MAX));
    let runs = Arc::new(AtomicUsize::new(0));
    let holder = spawn_run(&engine, counted(&runs, Duration::from_secs(10), ok("one")));
    sleep(Duration::from_millis(1)).await;
    let waiter = || {
        let engine = engine.clone();
        let work = counted(&runs, Duration::ZERO, ok("two"));
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let outcome = engine.run(address(), FP, work).await.unwrap();
            (outcome, started.elapsed())
        })
    };
    let mut waiters: Vec<_> = (0..=MAX).map(|_| waiter()).collect();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(engine.inner.waiters.waiting(), MAX);
    let refused: Vec<_> = waiters.extract_if(.., |w| w.is_finished()).collect();
    assert_eq!(refused.len(), 1);
    let (outcome, elapsed) = refused.into_iter().next().unwrap().await.unwrap();
    assert!(
        matches!(outcome, RunOutcome::InFlight { .. }),
        "{outcome:?}"
    );
    assert_eq!(elapsed, Duration::ZERO);

    // A waiter that goes away frees its place for another.
    let gone = waiters.pop().unwrap();
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    assert_eq!(engine.inner.waiters.waiting(), MAX - 1);
    waiters.push(waiter());
    sleep(Duration::from_millis(1)).await;
    assert_eq!(engine.inner.waiters.waiting(), MAX);

    assert!(matches!(holder.await.unwrap(), RunOutcome::Executed(r) if r == ok("one")));
    for waiter in waiters {
        let (outcome, _) = waiter.await.unwrap();
        assert!(
            matches!(outcome, RunOutcome::Replayed(ref r) if *r == Outcome::from(ok("one"))),
            "{outcome:?}"
        );
    }
    assert_eq!(engine.inner.waiters.waiting(), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn the_next_renewal_keeps_the_schedule_and_skips_the_ticks_a_hung_one_missed() {
    let fired = tokio::time::Instant::now();
    let every = Duration::from_secs(10);
    let at = |secs| fired + Duration::from_secs(secs);
    assert_eq!(super::next_tick(fired, every, fired), at(10));
    assert_eq!(super::next_tick(fired, every, at(1)), at(10));
    assert_eq!(super::next_tick(fired, every, at(10)), at(20));
    assert_eq!(super::next_tick(fired, every, at(25)), at(30));
}

#[test]
fn a_store_error_is_logged_with_its_causes() {
    let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "pool timed out");
    let error = StoreError::unavailable(timed_out);
    assert_eq!(
        super::Causes(&error).to_string(),
        "the store is unavailable: pool timed out"
    );
    assert_eq!(
        super::Causes(&StoreError::LeaseLost).to_string(),
        StoreError::LeaseLost.to_string()
    );
}

/// Work whose caller gets "head" at once, then whose rest takes `duration` (renewing the lease)
/// and ends with `end`, sending "settled" on `told` once the engine has recorded it (or
/// "not settled" when it could not).
fn streamed(
    duration: Duration,
    end: fn(OnSettled) -> Execution<OnSettled>,
    told: oneshot::Sender<&'static str>,
) -> impl FnOnce(Lease) -> std::future::Ready<Execution<&'static str>> {
    move |_lease| {
        let rest = Rest::new(async move {
            sleep(duration).await;
            end(Box::new(move |settled| {
                let _ = told.send(match settled {
                    Settled::Done => "settled",
                    Settled::NotDone => "not settled",
                });
            }))
        });
        std::future::ready(Execution::Streaming {
            value: "head",
            rest,
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_streamed_execution_answers_at_once_and_records_its_rest_under_a_renewed_lease() {
    let lease = Duration::from_millis(300);
    let engine = engine(Policy::default().lease(lease));
    let (told, settled) = oneshot::channel();
    let finish = |then| Execution::Final {
        response: ok("streamed"),
        value: then,
    };
    let started = tokio::time::Instant::now();
    let head = engine
        .run(address(), FP, streamed(lease * 10, finish, told))
        .await
        .unwrap();
    assert!(matches!(head, RunOutcome::Executed("head")), "{head:?}");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(engine.running(), 1);

    // Held, lease after lease, while the rest runs.
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..8 {
        sleep(lease).await;
        let probe = request(&engine, &runs, "stolen").await;
        assert!(matches!(probe, RunOutcome::InFlight { .. }), "{probe:?}");
    }
    // The function is called once the outcome is recorded.
    assert_eq!(settled.await, Ok("settled"));
    assert_eq!(
        stored(record(&engine).await.map(|r| r.state)),
        Some(ok("streamed").into())
    );
    engine.shutdown().await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_execution_whose_key_was_forgotten_is_told_its_outcome_was_not_recorded() {
    let engine = engine(Policy::default());
    let (told, settled) = oneshot::channel();
    let finish = |then| Execution::Final {
        response: ok("streamed"),
        value: then,
    };
    let head = engine
        .run(
            address(),
            FP,
            streamed(Duration::from_secs(1), finish, told),
        )
        .await
        .unwrap();
    assert!(matches!(head, RunOutcome::Executed("head")), "{head:?}");
    assert!(engine.store().forget(&address()).await.unwrap());
    assert_eq!(settled.await, Ok("not settled"));
    assert_eq!(record(&engine).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_execution_that_is_lost_is_released_before_its_end_is_told() {
    let engine = engine(Policy::default());
    let (told, settled) = oneshot::channel();
    let lost = |then| Execution::Lost { value: then };
    let head = engine
        .run(address(), FP, streamed(Duration::from_secs(1), lost, told))
        .await
        .unwrap();
    assert!(matches!(head, RunOutcome::Executed("head")), "{head:?}");
    assert_eq!(settled.await, Ok("settled"));
    assert_eq!(record(&engine).await, None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_rest_of_a_streamed_execution() {
    let engine = engine(Policy::default());
    let (told, _settled) = oneshot::channel();
    let finish = |then| Execution::Final {
        response: ok("streamed"),
        value: then,
    };
    engine
        .run(
            address(),
            FP,
            streamed(Duration::from_secs(5), finish, told),
        )
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    engine.shutdown().await;
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(
        stored(record(&engine).await.map(|r| r.state)),
        Some(ok("streamed").into())
    );
}

#[tokio::test(start_paused = true)]
async fn a_streamed_execution_whose_rest_panics_is_released_and_its_end_never_told() {
    let engine = engine(Policy::default());
    let (told, settled) = oneshot::channel::<&'static str>();
    let work = move |_lease| {
        let rest = Rest::new(async move {
            sleep(Duration::from_millis(5)).await;
            let _keep = told;
            panic!("recorder bug");
        });
        std::future::ready(Execution::Streaming {
            value: "head",
            rest,
        })
    };
    let head = engine.run(address(), FP, work).await.unwrap();
    assert!(matches!(head, RunOutcome::Executed("head")), "{head:?}");
    assert!(settled.await.is_err());
    engine.shutdown().await;
    assert_eq!(record(&engine).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_follows_the_holder_when_asked_and_keeps_its_place_while_it_follows() {
    let engine = engine(wait(Duration::from_secs(60)).max_waiters(1));
    let runs = Arc::new(AtomicUsize::new(0));
    let holder = spawn_run(&engine, counted(&runs, Duration::from_secs(10), ok("one")));
    sleep(Duration::from_millis(1)).await;

    // Asked each time the key is found held; the third answer follows.
    let asked = Arc::new(AtomicUsize::new(0));
    let follow = {
        let asked = Arc::clone(&asked);
        move || {
            let n = asked.fetch_add(1, Ordering::SeqCst) + 1;
            std::future::ready((n == 3).then_some("following"))
        }
    };
    let work = counted(&runs, Duration::ZERO, ok("two"));
    let followed = engine
        .run_or_follow(address(), FP, (), move |(), lease| work(lease), follow)
        .await
        .unwrap();
    let Followed::Following { value, slot } = followed else {
        panic!("{followed:?}")
    };
    assert_eq!((value, asked.load(Ordering::SeqCst)), ("following", 3));
    // Its place counts while it follows: nobody else waits.
    assert_eq!(engine.inner.waiters.waiting(), 1);
    let refused = request(&engine, &runs, "three").await;
    assert!(
        matches!(refused, RunOutcome::InFlight { .. }),
        "{refused:?}"
    );
    drop(slot);
    assert_eq!(engine.inner.waiters.waiting(), 0);

    assert!(matches!(holder.await.unwrap(), RunOutcome::Executed(r) if r == ok("one")));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn in_reject_mode_nobody_is_asked_to_follow() {
    let engine = engine(Policy::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let holder = spawn_run(&engine, counted(&runs, Duration::from_secs(10), ok("one")));
    sleep(Duration::from_millis(1)).await;
    let work = counted(&runs, Duration::ZERO, ok("two"));
    let follow = || -> std::future::Ready<Option<()>> { panic!("asked to follow") };
    let answered = engine
        .run_or_follow(address(), FP, (), move |(), lease| work(lease), follow)
        .await
        .unwrap();
    assert!(
        matches!(answered, Followed::Ran(RunOutcome::InFlight { .. })),
        "{answered:?}"
    );
    holder.await.unwrap();
}
