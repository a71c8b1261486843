//! The `gateway_request` target: sequences of requests through the idempotency layer, checked
//! against a model of the HTTP contract.

mod check;
mod input;
mod model;
mod upstream;

use std::sync::Arc;

use arbitrary::Unstructured;
use bytes::Bytes;
use http::{HeaderName, Request, Response, header::AUTHORIZATION};
use http_body_util::{BodyExt, Full};
use idem_core::{Ambiguous, FingerprintMode, MemoryStore};
use idem_http::{IdempotencyLayer, RequestOutcome, ResponseBody};
use tower::{Layer, Service, ServiceExt, service_fn};

use self::{
    check::{Exchange, Reply},
    input::{Behaviour, MAX_BODY, MAX_STEPS, MAX_STORED_RESPONSE, Sent, Session, Settings, Step},
    model::{Class, Effect, Expected, Model},
    upstream::{Upstream, UpstreamBody, UpstreamError},
};

thread_local! {
    /// One runtime per thread, reused by every input: building one costs more than an input.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
}

/// Reads `data` as a session (layer settings and up to eight steps of one request, two
/// concurrent ones, or an earlier request sent again), sends it through an
/// [`Idempotency`](idem_http::Idempotency) service over a fresh [`MemoryStore`] in front of an
/// upstream that logs its executions, and checks every answer against a model of the HTTP
/// contract (docs/http.md).
///
/// - Every response has a status of the contract and a `RequestOutcome`; one the layer made is an
///   `application/problem+json` body whose `type` starts with `urn:idem:problem:` (and the
///   right one: missing or invalid key 400, body over the limit 413, key in use 422, in flight
///   409 with `Retry-After`, upstream cut off 502, outcome unknown 500).
/// - A request sent alone gets exactly what the model predicts: forwarded, refused, executed
///   (the upstream's answer, or the layer's for a failed upstream), or the stored response with
///   `Idempotent-Replayed: true` (same status, body and upstream run) when its key completed
///   with the same fingerprint, 422 with another.
/// - Of two concurrent requests for one key, at most one executes unless the other released the
///   key; the other gets 409 (same fingerprint), 422 (another), or the replay.
/// - The upstream runs at most once per completed (scope, key), never for two requests of one
///   key at a time, and gets the request's method, key header and body unchanged.
///
/// # Panics
///
/// When one of these does not hold.
pub fn gateway_request(data: &[u8]) {
    let Ok(session) = Unstructured::new(data).arbitrary::<Session>() else {
        return;
    };
    RUNTIME.with(|runtime| runtime.block_on(run(session)));
}

/// Runs a session; returns the outcome of each request, in the order they were sent (`None` for
/// the service's error).
async fn run(session: Session) -> Vec<Option<RequestOutcome>> {
    let settings = session.settings;
    let upstream = Upstream::new(settings);
    let inner = {
        let upstream = Arc::clone(&upstream);
        service_fn(move |request| Arc::clone(&upstream).call(request))
    };
    let service = layer(settings).layer(inner);
    let mut harness = Harness {
        service,
        upstream,
        model: Model::new(settings),
        settings,
        sent: Vec::new(),
        calls: 0,
        outcomes: Vec::new(),
    };
    for step in session.steps.into_iter().take(MAX_STEPS) {
        match step {
            Step::One(call) => harness.one(call.request.sent(), call.behaviour).await,
            Step::Again(index, behaviour) => {
                if let Some(sent) = harness
                    .sent
                    .get(usize::from(index) % harness.sent.len().max(1))
                {
                    harness.one(sent.clone(), behaviour).await;
                }
            }
            Step::Two(first, second) => {
                let first = (first.request.sent(), first.behaviour);
                harness
                    .two(first, (second.request.sent(), second.behaviour))
                    .await;
            }
            Step::Race(request, first, second) => {
                let sent = request.sent();
                harness.two((sent.clone(), first), (sent, second)).await;
            }
        }
    }
    harness.outcomes
}

fn layer(settings: Settings) -> IdempotencyLayer<Arc<MemoryStore>> {
    let scope_headers: &[HeaderName] = if settings.scoped {
        &[AUTHORIZATION]
    } else {
        &[]
    };
    IdempotencyLayer::new(Arc::new(MemoryStore::new()))
        .require_key(settings.require_key)
        .ambiguous(if settings.reject_ambiguous {
            Ambiguous::Reject
        } else {
            Ambiguous::Retry
        })
        .fingerprint(if settings.raw_fingerprint {
            FingerprintMode::Raw
        } else {
            FingerprintMode::Json
        })
        .scope_headers(scope_headers.iter().cloned())
        .max_body(MAX_BODY)
        .max_stored_response(MAX_STORED_RESPONSE)
}

/// Sends the session's requests and checks their answers.
struct Harness<S> {
    service: S,
    upstream: Arc<Upstream>,
    model: Model,
    settings: Settings,
    /// Every request sent so far, for [`Step::Again`].
    sent: Vec<Sent>,
    calls: u64,
    outcomes: Vec<Option<RequestOutcome>>,
}

/// A request of the current step.
struct Attempt {
    id: u64,
    sent: Sent,
    behaviour: Behaviour,
    class: Class,
    reply: Option<Reply>,
}

impl<S> Harness<S>
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<ResponseBody<UpstreamBody>>,
            Error = UpstreamError,
        > + Clone,
{
    fn attempt(&mut self, sent: Sent, behaviour: Behaviour) -> Attempt {
        self.calls += 1;
        self.upstream.expect(self.calls, behaviour);
        self.sent.push(sent.clone());
        Attempt {
            id: self.calls,
            class: self.model.classify(&sent),
            sent,
            behaviour,
            reply: None,
        }
    }

    async fn one(&mut self, sent: Sent, behaviour: Behaviour) {
        let mut call = self.attempt(sent, behaviour);
        let from = self.upstream.executed();
        call.reply = send(self.service.clone(), call.sent.request(call.id)).await;
        let expected = self.model.expect(&call.class);
        let effect = self.judge(&call, from, &[expected]);
        self.apply(&call, effect);
        self.check_step(from, &[&call]);
        self.outcomes.push(outcome(&call));
    }

    async fn two(&mut self, first: (Sent, Behaviour), second: (Sent, Behaviour)) {
        let mut a = self.attempt(first.0, first.1);
        let mut b = self.attempt(second.0, second.1);
        let from = self.upstream.executed();
        (a.reply, b.reply) = tokio::join!(
            send(self.service.clone(), a.sent.request(a.id)),
            send(self.service.clone(), b.sent.request(b.id)),
        );
        match (&a.class, &b.class) {
            (Class::Keyed { address: x, .. }, Class::Keyed { address: y, .. }) if x == y => {
                self.race(&a, &b, from);
            }
            _ => {
                for call in [&a, &b] {
                    let effect = self.judge(call, from, &[self.model.expect(&call.class)]);
                    self.apply(call, effect);
                }
            }
        }
        self.check_step(from, &[&a, &b]);
        self.outcomes.extend([outcome(&a), outcome(&b)]);
    }

    /// Two concurrent requests for one key.
    fn race(&mut self, a: &Attempt, b: &Attempt, from: usize) {
        let executed = |call: &Attempt| {
            self.upstream
                .executions(from)
                .iter()
                .any(|execution| execution.call == call.id)
        };
        match (executed(a), executed(b)) {
            (false, false) => {
                for call in [a, b] {
                    let effect = self.judge(call, from, &[self.model.expect(&call.class)]);
                    self.apply(call, effect);
                }
            }
            (true, false) => self.race_won(a, b, from),
            (false, true) => self.race_won(b, a, from),
            (true, true) => {
                let first = self.judge(a, from, &[self.model.expect(&a.class)]);
                let second = self.judge(b, from, &[self.model.expect(&b.class)]);
                if let (Some(Effect::Complete(_)), Some(Effect::Complete(_))) = (&first, &second) {
                    self.fail(&[a, b], "both requests executed and completed the key");
                }
                // One released the key before the other took it: the record is the other's.
                let (released, kept) = match first {
                    Some(Effect::Release) => ((a, first), (b, second)),
                    _ => ((b, second), (a, first)),
                };
                self.apply(released.0, released.1);
                self.apply(kept.0, kept.1);
            }
        }
    }

    /// `winner` executed; `other`, sent at the same time with the same key, did not.
    fn race_won(&mut self, winner: &Attempt, other: &Attempt, from: usize) {
        let effect = self.judge(winner, from, &[self.model.expect(&winner.class)]);
        let same_fingerprint = match (&winner.class, &other.class) {
            (Class::Keyed { fingerprint: x, .. }, Class::Keyed { fingerprint: y, .. }) => x == y,
            _ => unreachable!("both are keyed"),
        };
        let allowed = match (&effect, same_fingerprint) {
            (_, false) => vec![Expected::Mismatch],
            (Some(Effect::Complete(stored)), true) => {
                vec![Expected::Conflict, Expected::Replay(stored.clone())]
            }
            (_, true) => vec![Expected::Conflict],
        };
        self.judge(other, from, &allowed);
        self.apply(winner, effect);
    }

    /// Checks a call against the expectations allowed for it; returns what it did to its key.
    fn judge(&self, call: &Attempt, from: usize, allowed: &[Expected]) -> Option<Effect> {
        if let Some(reply) = &call.reply
            && let Err(reason) = check::check_any(reply)
        {
            self.fail(&[call], &reason);
        }
        let executions = self.upstream.executions(from);
        let exchange = Exchange {
            sent: &call.sent,
            behaviour: call.behaviour,
            reply: &call.reply,
            executions: executions.iter().filter(|e| e.call == call.id).collect(),
        };
        let mut reasons = Vec::new();
        for expected in allowed {
            match check::check(&self.model, call.class.address(), expected, &exchange) {
                Ok(effect) => return effect,
                Err(reason) => reasons.push(format!("expected {expected:?}: {reason}")),
            }
        }
        self.fail(&[call], &reasons.join("; "))
    }

    fn apply(&mut self, call: &Attempt, effect: Option<Effect>) {
        if let Some(effect) = effect {
            self.model.apply(&call.class, effect);
        }
    }

    /// Every execution of the step belongs to one of its calls, and none overlapped another
    /// of its key.
    fn check_step(&self, from: usize, calls: &[&Attempt]) {
        let executions = self.upstream.executions(from);
        if let Some(stray) = executions
            .iter()
            .find(|e| !calls.iter().any(|call| call.id == e.call))
        {
            self.fail(
                calls,
                &format!("an execution of no call of this step: {stray:?}"),
            );
        }
        let overlaps = self.upstream.overlaps();
        if !overlaps.is_empty() {
            self.fail(
                calls,
                &format!("calls {overlaps:?} ran while their key was running"),
            );
        }
    }

    fn fail(&self, calls: &[&Attempt], reason: &str) -> ! {
        let calls: Vec<_> = calls
            .iter()
            .map(|call| {
                format!(
                    "call {}: {:?} as {:?} with {:?} got {:?}",
                    call.id, call.sent, call.class, call.behaviour, call.reply
                )
            })
            .collect();
        panic!(
            "{reason}\nsettings: {:?}\n{}\nupstream log: {:?}",
            self.settings,
            calls.join("\n"),
            self.upstream.executions(0)
        );
    }
}

fn outcome(call: &Attempt) -> Option<RequestOutcome> {
    call.reply.as_ref().and_then(|reply| reply.outcome)
}

/// Sends one request and reads the whole answer.
async fn send<S>(service: S, request: Request<Full<Bytes>>) -> Option<Reply>
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<ResponseBody<UpstreamBody>>,
            Error = UpstreamError,
        >,
{
    let response = service.oneshot(request).await.ok()?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .ok()
        .map(|collected| collected.to_bytes());
    Some(Reply {
        status: parts.status.as_u16(),
        outcome: parts.extensions.get().copied(),
        key: parts.extensions.get().cloned(),
        headers: parts.headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::{input::*, *};

    const SETTINGS: Settings = Settings {
        require_key: false,
        reject_ambiguous: false,
        raw_fingerprint: false,
        scoped: true,
    };

    fn payment(key: u8, amount: u16, spaced: bool) -> RequestSpec {
        RequestSpec {
            method: MethodChoice::Post,
            target: Target::Charges,
            key: KeyHeader::One(KeyValue::Known(key)),
            tenant: Tenant::Alice,
            content_type: ContentType::Json,
            body: BodySpec::Payment {
                amount,
                reversed: spaced,
                spaced,
            },
        }
    }

    fn answer(status: UpstreamStatus, failure: Failure) -> Behaviour {
        Behaviour {
            status,
            length: Length::Short,
            failure,
            yields: 2,
        }
    }

    const CREATED: Behaviour = Behaviour {
        status: UpstreamStatus::Created,
        length: Length::Short,
        failure: Failure::None,
        yields: 2,
    };

    fn outcomes(settings: Settings, steps: Vec<Step>) -> Vec<Option<RequestOutcome>> {
        RUNTIME.with(|runtime| runtime.block_on(run(Session { settings, steps })))
    }

    fn call(request: RequestSpec, behaviour: Behaviour) -> Step {
        Step::One(Call { request, behaviour })
    }

    #[test]
    fn retries_replay_and_a_changed_body_is_refused() {
        let steps = vec![
            call(payment(0, 10, false), CREATED),
            // `"k1"` is the key `k1`; the body is the same JSON, written differently.
            call(payment(2, 10, true), CREATED),
            call(payment(0, 11, false), CREATED),
            Step::Again(0, CREATED),
        ];
        assert_eq!(
            outcomes(SETTINGS, steps),
            [
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed),
                Some(RequestOutcome::Mismatch),
                Some(RequestOutcome::Replayed),
            ]
        );
    }

    #[test]
    fn concurrent_duplicates_run_once() {
        let steps = vec![
            Step::Race(payment(1, 10, false), CREATED, CREATED),
            Step::Two(
                Call {
                    request: payment(4, 10, false),
                    behaviour: CREATED,
                },
                Call {
                    request: payment(4, 12, false),
                    behaviour: CREATED,
                },
            ),
        ];
        assert_eq!(
            outcomes(SETTINGS, steps),
            [
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Conflict),
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Mismatch),
            ]
        );
    }

    #[test]
    fn ambiguous_outcomes_release_or_are_kept_as_the_settings_say() {
        let failed = answer(UpstreamStatus::ServiceUnavailable, Failure::None);
        let lost = answer(UpstreamStatus::Ok, Failure::BeforeResponse);
        let steps = || {
            vec![
                call(payment(0, 10, false), failed),
                call(payment(0, 10, false), CREATED),
                call(payment(1, 10, false), lost),
                call(payment(1, 10, false), CREATED),
            ]
        };
        assert_eq!(
            outcomes(SETTINGS, steps()),
            [
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Executed),
                None,
                Some(RequestOutcome::Executed),
            ]
        );
        let reject = Settings {
            reject_ambiguous: true,
            ..SETTINGS
        };
        assert_eq!(
            outcomes(reject, steps()),
            [
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed),
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed),
            ]
        );
    }

    #[test]
    fn a_streamed_response_is_recorded_and_replayed_whatever_its_length() {
        let streamed = |length| Behaviour {
            length,
            ..answer(UpstreamStatus::Created, Failure::Streamed)
        };
        let steps = vec![
            call(payment(0, 10, false), streamed(Length::Short)),
            Step::Again(0, CREATED),
            call(payment(1, 10, false), streamed(Length::Long)),
            Step::Again(2, CREATED),
            call(payment(4, 10, false), streamed(Length::Empty)),
            Step::Again(4, CREATED),
        ];
        assert_eq!(
            outcomes(SETTINGS, steps),
            [
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed),
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed),
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed),
            ]
        );
    }

    #[test]
    fn a_response_too_large_to_store_replays_as_a_problem_with_its_status() {
        // Found by the fuzzer as a harness bug: this replay is a 409 without `Retry-After`.
        let conflict = Behaviour {
            length: Length::Long,
            ..answer(UpstreamStatus::Conflict, Failure::None)
        };
        let steps = vec![
            call(payment(0, 10, false), conflict),
            Step::Again(0, CREATED),
        ];
        assert_eq!(
            outcomes(SETTINGS, steps),
            [
                Some(RequestOutcome::Executed),
                Some(RequestOutcome::Replayed)
            ]
        );
    }

    #[test]
    fn keys_are_checked_before_bodies() {
        let mut too_large = payment(0, 10, false);
        too_large.body = BodySpec::Bytes(vec![b'x'; MAX_BODY + 1]);
        let mut invalid = too_large.clone();
        invalid.key = KeyHeader::One(KeyValue::Long { too_long: true });
        let mut unkeyed = payment(0, 10, false);
        unkeyed.key = KeyHeader::Absent;
        let steps = vec![
            call(too_large, CREATED),
            call(invalid, CREATED),
            call(unkeyed.clone(), CREATED),
        ];
        assert_eq!(
            outcomes(SETTINGS, steps),
            [
                Some(RequestOutcome::TooLarge),
                Some(RequestOutcome::Invalid),
                Some(RequestOutcome::Passthrough),
            ]
        );
        let required = Settings {
            require_key: true,
            ..SETTINGS
        };
        assert_eq!(
            outcomes(required, vec![call(unkeyed, CREATED)]),
            [Some(RequestOutcome::Invalid)]
        );
    }
}
