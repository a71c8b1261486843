//! [`Deliverer`]: consumes a broker's messages and delivers each to an HTTP endpoint, under its
//! idempotency key, until shut down.

use std::{
    collections::{HashMap, VecDeque},
    fmt,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use futures_util::future::BoxFuture;
use idem_core::IdempotencyKey;
use idem_messaging::{
    BoxPublisher, BrokerKind, BrokerUrl, Envelope, MessageId, OutboxMessage, Publisher, Received,
    SubscribeOptions, Subscription,
};
use tokio::{sync::Semaphore, task::JoinSet};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};
use tracing::{Instrument as _, Span, field::Empty};

use idem_messaging::consume::KeyFrom;

use super::event::{Answer, Attributes, Event, key_of};
use crate::error::ConfigError;
use crate::store::RetryWaits;
use crate::telemetry;

/// How a subscription is made: the broker's, or a test's.
type Subscribe = Box<
    dyn Fn(SubscribeOptions) -> BoxFuture<'static, Result<Subscription, idem_messaging::Error>>
        + Send
        + Sync,
>;

/// The longest `Retry-After` honoured: a longer one waits this long.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Consumes the messages of a broker (RabbitMQ, NATS JetStream, Kafka or Amazon SQS) and POSTs
/// each to an HTTP endpoint as a CloudEvent in HTTP binary mode, with an `Idempotency-Key`
/// derived from the message's identity, so that an endpoint that honours the key (a service
/// behind `idem serve`, or any API that does) applies each message once, however often the
/// broker delivers it. What `idem deliver` runs; docs/messaging.md says what it guarantees.
///
/// - A message is acknowledged only after a `2xx`. No answer, `408`, `409`, `429` and `5xx` are
///   tried again with exponential backoff (jittered, from [`backoff`](Self::backoff) up to its
///   maximum), for as long as it takes, waiting at least what a `Retry-After` says (up to an
///   hour). Any other status is a refusal: tried again up to
///   [`max_attempts`](Self::max_attempts) in all, then the message is dead-lettered.
/// - Dead letters go to [`dead_letter`](Self::dead_letter)'s destination on the same broker
///   (then the message is acknowledged), or, without one, to the broker's own mechanism:
///   RabbitMQ's dead-letter exchange (rejected), NATS's terminated-message advisory (`Term`),
///   SQS's redrive policy (made visible again until SQS moves it). Kafka has none: it needs a
///   destination.
/// - At most [`concurrency`](Self::concurrency) requests are in flight; the messages of one
///   ordering key (a RabbitMQ queue, a NATS subject, a Kafka partition, an SQS FIFO message
///   group) are delivered one at a time, in the order received, unless
///   [`ordered`](Self::ordered) is off.
/// - Shut down, it receives nothing more, lets each request in flight finish within the
///   [`shutdown_grace`](Self::shutdown_grace), acknowledges what was delivered and gives every
///   other message back to the broker: nothing undelivered is acknowledged.
pub struct Deliverer {
    broker: BrokerUrl,
    source: Option<Subscribe>,
    subscribe: SubscribeOptions,
    to: reqwest::Url,
    key_from: KeyFrom,
    attributes: Attributes,
    concurrency: usize,
    ordered: bool,
    max_attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
    request_timeout: Duration,
    shutdown_grace: Duration,
    dead_letter: Option<String>,
    progress_interval: Duration,
}

impl Deliverer {
    /// Delivers what `subscribe` reads from `broker` to `to`: keys from the outbox id,
    /// 16 requests at a time, in order per key, 5 attempts for a refused message, backoff from
    /// 1 s to 60 s, 30 s per request, 10 s of shutdown grace, the broker's own dead-lettering,
    /// progress every 10 s.
    pub fn new(broker: BrokerUrl, subscribe: SubscribeOptions, to: reqwest::Url) -> Self {
        Self {
            broker,
            source: None,
            subscribe,
            to,
            key_from: KeyFrom::default(),
            attributes: Attributes::default(),
            concurrency: 16,
            ordered: true,
            max_attempts: 5,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            dead_letter: None,
            progress_interval: Duration::from_secs(10),
        }
    }

    /// Sets where the idempotency key comes from.
    #[must_use]
    pub fn key_from(mut self, key_from: KeyFrom) -> Self {
        self.key_from = key_from;
        self
    }

    /// Sets `ce-source` and `ce-type` (the message's source by default).
    #[must_use]
    pub fn attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = attributes;
        self
    }

    /// Sets how many requests may be in flight at once (at least 1).
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Sets whether the messages of one ordering key are delivered one at a time, in order (on
    /// by default).
    #[must_use]
    pub fn ordered(mut self, ordered: bool) -> Self {
        self.ordered = ordered;
        self
    }

    /// Sets how many attempts a refused message gets before it is dead-lettered (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the first backoff and the longest.
    #[must_use]
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first.max(Duration::from_millis(1));
        self.max_backoff = max.max(self.backoff);
        self
    }

    /// Sets how long a request may take, its body included.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how long requests in flight may take to finish once shut down.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets where dead letters are published, on the same broker (a queue, a subject, a topic).
    #[must_use]
    pub fn dead_letter(mut self, destination: impl Into<String>) -> Self {
        self.dead_letter = Some(destination.into());
        self
    }

    /// Sets how often the progress is logged.
    #[must_use]
    pub fn progress_interval(mut self, interval: Duration) -> Self {
        self.progress_interval = interval.max(Duration::from_millis(100));
        self
    }

    /// Subscribes with `subscribe` instead of the broker's client: a test's messages.
    #[cfg(all(test, feature = "amqp"))]
    fn subscribe_with(mut self, subscribe: Subscribe) -> Self {
        self.source = Some(subscribe);
        self
    }

    /// Whether this configuration can run on its broker: Kafka needs a dead-letter destination
    /// and order.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.broker.kind() == BrokerKind::Kafka {
            if self.dead_letter.is_none() {
                return Err(ConfigError::DeadLetterNeeded);
            }
            if !self.ordered {
                return Err(ConfigError::UnorderedKafka);
            }
        }
        Ok(())
    }

    /// Subscribes and delivers until `shutdown` completes; then finishes as the
    /// [type](Self)'s documentation says and returns. A broker that cannot be reached, or a
    /// subscription that ends, is subscribed to again, after 100 ms and then at most every 5 s.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let stop = CancellationToken::new();
        let watch = tokio::spawn({
            let stop = stop.clone();
            async move {
                shutdown.await;
                stop.cancel();
            }
        });
        // Both stop with `run`, however it ends: dropped, the tasks are aborted.
        let _watch = AbortOnDropHandle::new(watch);
        let shared = Arc::new(Shared::new(self, stop.clone()));
        let _progress = AbortOnDropHandle::new(tokio::spawn(progress(Arc::clone(&shared))));
        let mut waits = RetryWaits::new();
        while !stop.is_cancelled() {
            let subscribing = match &shared.source {
                Some(subscribe) => subscribe(shared.subscribe.clone()),
                None => Box::pin(shared.broker.subscribe(shared.subscribe.clone())),
            };
            let subscribed = tokio::select! {
                () = stop.cancelled() => break,
                subscribed = subscribing => subscribed,
            };
            match subscribed {
                Ok(subscription) => {
                    tracing::info!(
                        broker = %shared.broker,
                        from = shared.subscribe.from(),
                        to = %shared.to,
                        "delivering"
                    );
                    waits = RetryWaits::new();
                    consume(&shared, subscription).await;
                }
                Err(error) => {
                    let wait = waits.next_wait();
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        broker = %shared.broker,
                        from = shared.subscribe.from(),
                        retry_in = ?wait,
                        "cannot subscribe; trying again"
                    );
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        let counts = &shared.counts;
        tracing::info!(
            delivered = counts.delivered.load(Ordering::Relaxed),
            dead_lettered = counts.dead_lettered.load(Ordering::Relaxed),
            given_back = counts.given_back.load(Ordering::Relaxed),
            "stopped delivering"
        );
    }
}

impl fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deliverer")
            .field("broker", &self.broker)
            .field("subscribe", &self.subscribe)
            .field("to", &self.to.as_str())
            .field("key_from", &self.key_from)
            .field("concurrency", &self.concurrency)
            .field("ordered", &self.ordered)
            .field("max_attempts", &self.max_attempts)
            .field("dead_letter", &self.dead_letter)
            .finish_non_exhaustive()
    }
}

/// What every delivery shares.
struct Shared {
    broker: BrokerUrl,
    source: Option<Subscribe>,
    subscribe: SubscribeOptions,
    to: reqwest::Url,
    http: reqwest::Client,
    key_from: KeyFrom,
    attributes: Attributes,
    requests: Semaphore,
    ordered: bool,
    max_attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
    shutdown_grace: Duration,
    dead_letter: Option<(String, BoxPublisher)>,
    progress_interval: Duration,
    stop: CancellationToken,
    counts: Counts,
}

/// What was done since the start.
#[derive(Default)]
struct Counts {
    delivered: AtomicU64,
    dead_lettered: AtomicU64,
    given_back: AtomicU64,
    in_flight: AtomicU64,
}

impl Shared {
    fn new(deliverer: Deliverer, stop: CancellationToken) -> Self {
        crate::tls::install_ring_provider();
        let http = reqwest::Client::builder()
            .timeout(deliverer.request_timeout)
            .connect_timeout(deliverer.request_timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(deliverer.concurrency)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let dead_letter = deliverer
            .dead_letter
            .map(|destination| (destination, deliverer.broker.publisher()));
        Self {
            http,
            requests: Semaphore::new(deliverer.concurrency),
            dead_letter,
            broker: deliverer.broker,
            source: deliverer.source,
            subscribe: deliverer.subscribe,
            to: deliverer.to,
            key_from: deliverer.key_from,
            attributes: deliverer.attributes,
            ordered: deliverer.ordered,
            max_attempts: deliverer.max_attempts,
            backoff: deliverer.backoff,
            max_backoff: deliverer.max_backoff,
            shutdown_grace: deliverer.shutdown_grace,
            progress_interval: deliverer.progress_interval,
            stop,
            counts: Counts::default(),
        }
    }

    /// The wait before the attempt after the `failed`-th failure: exponential from the first
    /// backoff up to the longest, the upper half of it at random.
    fn backoff(&self, failed: u32) -> Duration {
        let cap = 2u32
            .checked_pow(failed.saturating_sub(1))
            .and_then(|factor| self.backoff.checked_mul(factor))
            .map_or(self.max_backoff, |wait| wait.min(self.max_backoff));
        cap.mul_f64(0.5 + fastrand::f64() / 2.0)
    }

    /// Sleeps `wait`; false when shut down first.
    async fn sleep(&self, wait: Duration) -> bool {
        tokio::select! {
            () = self.stop.cancelled() => false,
            () = tokio::time::sleep(wait) => true,
        }
    }
}

/// The messages waiting behind the one being delivered, per ordering key.
type Lanes = Arc<Mutex<HashMap<String, VecDeque<Received>>>>;

/// Receives from `subscription` until shut down or the subscription ends, each message
/// delivered by a task of its own (or queued behind its key's); then waits for those tasks.
async fn consume(shared: &Arc<Shared>, mut subscription: Subscription) {
    let lanes: Lanes = Arc::default();
    let mut tasks = JoinSet::new();
    loop {
        let next = tokio::select! {
            () = shared.stop.cancelled() => break,
            next = subscription.next() => next,
        };
        // Reap the finished tasks as we go, so the set holds only the running ones.
        while tasks.try_join_next().is_some() {}
        match next {
            Some(Ok(received)) => {
                shared.counts.in_flight.fetch_add(1, Ordering::Relaxed);
                metrics::gauge!("idem_deliver_in_flight").increment(1.0);
                let lane = match &received.message().ordering_key {
                    Some(key) if shared.ordered => key.clone(),
                    _ => {
                        tasks.spawn(deliver(Arc::clone(shared), received));
                        continue;
                    }
                };
                let mut queued = lanes.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(behind) = queued.get_mut(&lane) {
                    behind.push_back(received);
                } else {
                    queued.insert(lane.clone(), VecDeque::new());
                    tasks.spawn(run_lane(
                        Arc::clone(shared),
                        Arc::clone(&lanes),
                        lane,
                        received,
                    ));
                }
            }
            Some(Err(error)) => {
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "cannot receive from the broker"
                );
                if !shared.sleep(Duration::from_millis(500)).await {
                    break;
                }
            }
            None => {
                tracing::warn!("the broker ended the subscription; subscribing again");
                break;
            }
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// Delivers `first`, then each message queued behind it on `lane`, one at a time.
async fn run_lane(shared: Arc<Shared>, lanes: Lanes, lane: String, first: Received) {
    let mut next = Some(first);
    while let Some(received) = next {
        deliver(Arc::clone(&shared), received).await;
        let mut queued = lanes.lock().unwrap_or_else(|e| e.into_inner());
        next = queued.get_mut(&lane).and_then(VecDeque::pop_front);
        if next.is_none() {
            queued.remove(&lane);
        }
    }
}

/// How a message's delivery ended.
enum Settled {
    Delivered,
    DeadLettered,
    GivenBack,
}

/// Delivers one message until a final answer, then settles it with the broker, in an
/// `idem.deliver` span that continues the trace the message carries.
async fn deliver(shared: Arc<Shared>, received: Received) {
    let started = Instant::now();
    let message = received.message();
    let span = tracing::debug_span!(
        "idem.deliver",
        otel.kind = "consumer",
        messaging.message.id = message.message_id.as_deref(),
        messaging.destination.name = message.source.as_str(),
        idem.key_digest = Empty,
        idem.attempts = Empty,
        idem.outcome = Empty,
    );
    idem_messaging::consume::continue_trace(&span, &received);
    let settled = attempt_until_final(&shared, received, &span)
        .instrument(span.clone())
        .await;
    shared.counts.in_flight.fetch_sub(1, Ordering::Relaxed);
    metrics::gauge!("idem_deliver_in_flight").decrement(1.0);
    let (outcome, count) = match settled {
        Settled::Delivered => ("delivered", &shared.counts.delivered),
        Settled::DeadLettered => ("dead_lettered", &shared.counts.dead_lettered),
        Settled::GivenBack => ("given_back", &shared.counts.given_back),
    };
    span.record("idem.outcome", outcome);
    count.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("idem_deliver_messages_total", "outcome" => outcome).increment(1);
    metrics::histogram!("idem_deliver_duration_seconds", "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
}

/// Posts `received` until a final answer, then settles it; records on `span`, its
/// `idem.deliver`, the key's digest and how many requests were made.
async fn attempt_until_final(shared: &Shared, received: Received, span: &Span) -> Settled {
    let key = match key_of(&shared.key_from, received.message()) {
        Ok(key) => key,
        Err(no_key) => {
            tracing::warn!(
                source = received.message().source,
                broker_id = received.message().broker_id,
                reason = %no_key,
                "dead-lettering a message that cannot be delivered safely"
            );
            return dead_letter(shared, received, &no_key.to_string(), None).await;
        }
    };
    if !span.is_disabled() {
        span.record("idem.key_digest", key.digest());
    }
    let mut event = Event::new(
        received.message(),
        &key,
        &shared.attributes,
        SystemTime::now(),
    );
    // The endpoint's trace continues from this span, not from the message's producer.
    telemetry::inject_span(span, &mut event.headers);
    let (mut failures, mut refusals, mut attempts) = (0, 0, 0_u32);
    let settled = 'attempts: loop {
        if shared.stop.is_cancelled() {
            break 'attempts give_back(received).await;
        }
        let answer = {
            let permit = tokio::select! {
                () = shared.stop.cancelled() => break 'attempts give_back(received).await,
                permit = shared.requests.acquire() => permit,
            };
            let answer = post(shared, &event).await;
            drop(permit);
            attempts += 1;
            answer
        };
        let wait = match answer {
            Posted::Answered(Answer::Delivered, _) => {
                break 'attempts match received.ack().await {
                    Ok(()) => Settled::Delivered,
                    Err(error) => {
                        // The broker delivers it again; its key makes that harmless.
                        tracing::warn!(
                            error = &error as &dyn std::error::Error,
                            key = key.digest(),
                            "delivered, but the broker could not be told: it comes again"
                        );
                        Settled::GivenBack
                    }
                };
            }
            Posted::Answered(Answer::Refused, status) => {
                refusals += 1;
                if refusals >= shared.max_attempts {
                    let reason = format!("the endpoint answered {status}");
                    tracing::warn!(
                        key = key.digest(),
                        status = status.as_u16(),
                        attempts = refusals,
                        "dead-lettering a message the endpoint refused"
                    );
                    break 'attempts dead_letter(shared, received, &reason, Some(&key)).await;
                }
                shared.backoff(refusals)
            }
            Posted::Answered(Answer::Retry { retry_after }, status) => {
                failures += 1;
                tracing::debug!(key = key.digest(), status = status.as_u16(), "trying again");
                let backoff = shared.backoff(failures);
                retry_after.map_or(backoff, |asked| backoff.max(asked.min(MAX_RETRY_AFTER)))
            }
            Posted::NoAnswer(error) => {
                failures += 1;
                tracing::debug!(key = key.digest(), %error, "no answer; trying again");
                shared.backoff(failures)
            }
            Posted::Abandoned => break 'attempts give_back(received).await,
        };
        if failures >= 8 && failures.is_power_of_two() {
            tracing::warn!(
                key = key.digest(),
                attempts = failures + refusals,
                "a message keeps failing; still trying"
            );
        }
        if !shared.sleep(wait).await {
            break 'attempts give_back(received).await;
        }
    };
    span.record("idem.attempts", attempts);
    settled
}

/// One attempt's outcome.
enum Posted {
    Answered(Answer, http::StatusCode),
    NoAnswer(reqwest::Error),
    /// Shut down, and the answer did not come within the grace.
    Abandoned,
}

/// POSTs `event` once; once shut down, waits for the answer up to the shutdown grace.
async fn post(shared: &Shared, event: &Event) -> Posted {
    let started = Instant::now();
    let request = shared
        .http
        .post(shared.to.clone())
        .headers(event.headers.clone())
        .body(event.body.clone())
        .send();
    let grace = async {
        shared.stop.cancelled().await;
        tokio::time::sleep(shared.shutdown_grace).await;
    };
    let posted = tokio::select! {
        () = grace => Posted::Abandoned,
        sent = request => match sent {
            Ok(response) => {
                let (status, headers) = (response.status(), response.headers().clone());
                // The body is not needed, but read so that the connection can be reused.
                let _ = response.bytes().await;
                Posted::Answered(Answer::of(status, &headers, SystemTime::now()), status)
            }
            Err(error) => Posted::NoAnswer(error),
        },
    };
    let answer = match &posted {
        Posted::Answered(Answer::Delivered, _) => "delivered",
        Posted::Answered(Answer::Retry { .. }, _) => "retry",
        Posted::Answered(Answer::Refused, _) => "refused",
        Posted::NoAnswer(_) => "no_answer",
        Posted::Abandoned => "abandoned",
    };
    metrics::counter!("idem_deliver_attempts_total", "answer" => answer).increment(1);
    metrics::histogram!("idem_deliver_attempt_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    posted
}

/// Gives an undelivered message back to the broker.
async fn give_back(received: Received) -> Settled {
    if let Err(error) = received.requeue().await {
        // Not settled: the broker gives it to a consumer again once its timeout or the
        // connection ends.
        tracing::debug!(
            error = &error as &dyn std::error::Error,
            "cannot give a message back"
        );
    }
    Settled::GivenBack
}

/// Dead-letters `received` for `reason`: publishes it to the dead-letter destination, then
/// acknowledges it; or, without a destination, leaves it to the broker's own mechanism.
async fn dead_letter(
    shared: &Shared,
    received: Received,
    reason: &str,
    key: Option<&IdempotencyKey>,
) -> Settled {
    let Some((destination, publisher)) = &shared.dead_letter else {
        let settled = match shared.broker.kind() {
            // SQS moves a message received too many times to the queue its redrive policy names.
            BrokerKind::Sqs => received.requeue().await,
            _ => received.reject().await,
        };
        return match settled {
            Ok(()) => Settled::DeadLettered,
            Err(error) => {
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "cannot dead-letter a message: it comes again"
                );
                Settled::GivenBack
            }
        };
    };
    let envelope = dead_letter_envelope(&received, destination, reason, key);
    let mut failed = 0;
    loop {
        match publisher.publish(&envelope).await {
            Ok(()) => {
                return match received.ack().await {
                    Ok(()) => Settled::DeadLettered,
                    Err(error) => {
                        tracing::warn!(
                            error = &error as &dyn std::error::Error,
                            "dead-lettered, but the broker could not be told: it comes again"
                        );
                        Settled::GivenBack
                    }
                };
            }
            Err(error) => {
                failed += 1;
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    destination,
                    "cannot publish a dead letter; trying again"
                );
                if !shared.sleep(shared.backoff(failed)).await {
                    return give_back(received).await;
                }
            }
        }
    }
}

/// The dead letter of `received`: its payload and headers, and why, in
/// `idem-dead-letter-reason`, `idem-dead-letter-source`, `idem-dead-letter-id` (the message's
/// own id, if it has one) and `idem-delivery-key`.
///
/// It is a message of its own, with an id of its own: under the original's id, a broker that
/// deduplicates by id (JetStream within its duplicate window, an SQS FIFO queue) would take a
/// dead letter published beside the original for a copy of it, and drop it.
fn dead_letter_envelope(
    received: &Received,
    destination: &str,
    reason: &str,
    key: Option<&IdempotencyKey>,
) -> Envelope {
    let message = received.message();
    let mut dead = OutboxMessage::new(destination, message.payload.clone());
    dead.headers.clone_from(&message.headers);
    dead = dead
        .header("idem-dead-letter-reason", reason)
        .header("idem-dead-letter-source", message.source.clone());
    if let Some(id) = &message.message_id {
        dead = dead.header("idem-dead-letter-id", id.clone());
    }
    if let Some(key) = key {
        dead = dead.header("idem-delivery-key", key.as_str());
    }
    Envelope::new(MessageId::now_v7(), dead, 1)
}

/// Logs, every interval, what was delivered since the last time.
async fn progress(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(shared.progress_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let counts = &shared.counts;
    let (mut last, mut since) = (0, Instant::now());
    loop {
        ticks.tick().await;
        let delivered = counts.delivered.load(Ordering::Relaxed);
        let elapsed = since.elapsed().as_secs_f64();
        tracing::info!(
            delivered = delivered - last,
            per_second = ((delivered - last) as f64 / elapsed).round(),
            dead_lettered = counts.dead_lettered.load(Ordering::Relaxed),
            in_flight = counts.in_flight.load(Ordering::Relaxed),
            "delivery progress"
        );
        (last, since) = (delivered, Instant::now());
    }
}

// The deliverer against a broker of the test's own (its messages from a channel, their
// settlements recorded) and an endpoint whose answers each test scripts.
#[cfg(test)]
// The test broker's URL is RabbitMQ's (its kind decides the dead-lettering).
#[cfg(feature = "amqp")]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use axum::{Router, extract::State, http::HeaderMap, routing::post};
    use idem_messaging::BoxError;
    use idem_messaging::consume::{Message, Settle};
    use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
    use opentelemetry_sdk::{
        error::OTelSdkResult,
        trace::{SdkTracerProvider, SpanData, SpanExporter},
    };
    use tokio::sync::mpsc;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// What the broker was told, in order: (the message id, "ack" | "requeue" | "reject").
    type Settlements = Arc<Mutex<Vec<(String, &'static str)>>>;

    struct Recorded {
        id: String,
        settlements: Settlements,
    }

    impl Recorded {
        fn record(self, how: &'static str) -> BoxFuture<'static, Result<(), BoxError>> {
            self.settlements.lock().unwrap().push((self.id, how));
            Box::pin(async { Ok(()) })
        }
    }

    impl Settle for Recorded {
        fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
            (*self).record("ack")
        }
        fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
            (*self).record("requeue")
        }
        fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
            (*self).record("reject")
        }
    }

    /// A broker of the test's own: what is sent on it is received by the deliverer once.
    struct Broker {
        sender: mpsc::Sender<Received>,
        settlements: Settlements,
    }

    impl Broker {
        /// The broker, and a deliverer that reads it and posts to `to`, with quick backoffs.
        fn with_deliverer(to: &str) -> (Self, Deliverer) {
            let (sender, receiver) = mpsc::channel(64);
            let receiver = Mutex::new(Some(receiver));
            let subscribe: Subscribe = Box::new(move |_| {
                let receiver = receiver.lock().unwrap().take();
                Box::pin(async move {
                    let Some(receiver) = receiver else {
                        return std::future::pending().await;
                    };
                    let messages = futures_util::stream::unfold(receiver, |mut receiver| async {
                        let received = receiver.recv().await?;
                        Some((Ok(received), receiver))
                    });
                    Ok(Subscription::new(messages))
                })
            });
            let broker = Self {
                sender,
                settlements: Arc::default(),
            };
            let deliverer = Deliverer::new(
                "amqp://127.0.0.1:1".parse().unwrap(),
                SubscribeOptions::new("orders"),
                to.parse().unwrap(),
            )
            .subscribe_with(subscribe)
            .backoff(Duration::from_millis(1), Duration::from_millis(5));
            (broker, deliverer)
        }

        /// Sends a message of id `id`, ordered by `key`.
        async fn send(&self, id: &str, key: Option<&str>) {
            let mut message = Message::new("orders", id.to_owned());
            message.message_id = (!id.is_empty()).then(|| id.to_owned());
            message.ordering_key = key.map(str::to_owned);
            self.send_message(message).await;
        }

        async fn send_message(&self, message: Message) {
            let id = message.message_id.clone().unwrap_or_default();
            let settle = Recorded {
                id,
                settlements: Arc::clone(&self.settlements),
            };
            self.sender
                .send(Received::new(message, settle))
                .await
                .unwrap();
        }

        fn settled(&self) -> Vec<(String, &'static str)> {
            self.settlements.lock().unwrap().clone()
        }

        /// Waits until `count` messages are settled.
        async fn until_settled(&self, count: usize) -> Vec<(String, &'static str)> {
            tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    let settled = self.settled();
                    if settled.len() >= count {
                        return settled;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("settled: {:?}", self.settled()))
        }
    }

    /// An endpoint whose answer to each request `script` gives: from the request's key and
    /// which attempt of that key it is (from 1), a status, a Retry-After and a delay.
    #[derive(Clone)]
    struct Endpoint {
        /// (key, body, when) of each request, in arrival order.
        requests: Arc<Mutex<Vec<(String, String, Instant)>>>,
        /// The `traceparent` of each request, in arrival order.
        traceparents: Arc<Mutex<Vec<Option<String>>>>,
        /// Requests being answered now, and the most at once.
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        script: Arc<Script>,
    }

    /// A request's answer from its key and attempt: a status, a Retry-After and a delay.
    type Script = dyn Fn(&str, usize) -> (u16, Option<&'static str>, Duration) + Send + Sync;

    impl Endpoint {
        async fn start(
            script: impl Fn(&str, usize) -> (u16, Option<&'static str>, Duration)
            + Send
            + Sync
            + 'static,
        ) -> (Self, String) {
            let endpoint = Self {
                requests: Arc::default(),
                traceparents: Arc::default(),
                running: Arc::default(),
                most: Arc::default(),
                script: Arc::new(script),
            };
            let app = Router::new()
                .route("/events", post(answer))
                .with_state(endpoint.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/events", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            (endpoint, url)
        }

        fn keys(&self) -> Vec<String> {
            let requests = self.requests.lock().unwrap();
            requests.iter().map(|(key, ..)| key.clone()).collect()
        }
    }

    async fn answer(
        State(endpoint): State<Endpoint>,
        headers: HeaderMap,
        body: String,
    ) -> axum::response::Response {
        let key = headers["idempotency-key"].to_str().unwrap().to_owned();
        assert_eq!(headers["ce-id"], key.as_str());
        assert_eq!(headers["ce-specversion"], "1.0");
        let traceparent = headers
            .get("traceparent")
            .map(|value| value.to_str().unwrap());
        endpoint
            .traceparents
            .lock()
            .unwrap()
            .push(traceparent.map(str::to_owned));
        let attempt = {
            let mut requests = endpoint.requests.lock().unwrap();
            requests.push((key.clone(), body, Instant::now()));
            requests.iter().filter(|(k, ..)| *k == key).count()
        };
        let running = endpoint.running.fetch_add(1, Ordering::SeqCst) + 1;
        endpoint.most.fetch_max(running, Ordering::SeqCst);
        let (status, retry_after, delay) = (endpoint.script)(&key, attempt);
        tokio::time::sleep(delay).await;
        endpoint.running.fetch_sub(1, Ordering::SeqCst);
        let mut response = axum::response::Response::new(axum::body::Body::empty());
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", http::HeaderValue::from_static(seconds));
        }
        response
    }

    fn spawn(deliverer: Deliverer) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let stop = CancellationToken::new();
        let running = tokio::spawn(deliverer.run(stop.clone().cancelled_owned()));
        (stop, running)
    }

    #[tokio::test]
    async fn a_message_is_acknowledged_after_a_2xx_only_and_tried_again_on_5xx_409_429_honouring_retry_after()
     {
        let (endpoint, url) = Endpoint::start(|_, attempt| match attempt {
            1 => (503, None, Duration::ZERO),
            2 => (409, None, Duration::ZERO),
            3 => (429, Some("1"), Duration::ZERO),
            _ => (201, None, Duration::ZERO),
        })
        .await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer);
        broker.send("m1", Some("orders")).await;
        assert_eq!(broker.until_settled(1).await, [("m1".to_owned(), "ack")]);
        let requests = endpoint.requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 4);
        assert!(
            requests
                .iter()
                .all(|(key, body, _)| key == "m1" && body == "m1")
        );
        let waited = requests[3].2 - requests[2].2;
        assert!(
            waited >= Duration::from_secs(1),
            "Retry-After: 1, waited {waited:?}"
        );
        stop.cancel();
        running.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_message_is_dead_lettered_after_max_attempts_and_one_without_a_key_at_once() {
        let (endpoint, url) = Endpoint::start(|_, _| (422, None, Duration::ZERO)).await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer.max_attempts(3));
        broker.send("m1", None).await;
        assert_eq!(broker.until_settled(1).await, [("m1".to_owned(), "reject")]);
        assert_eq!(endpoint.keys(), ["m1", "m1", "m1"]);
        // No message id and no broker id: nothing to key it by.
        broker.send("", None).await;
        assert_eq!(broker.until_settled(2).await[1], (String::new(), "reject"));
        assert_eq!(endpoint.keys().len(), 3);
        stop.cancel();
        running.await.unwrap();
    }

    #[tokio::test]
    async fn the_messages_of_one_key_go_one_at_a_time_in_order_while_keys_go_side_by_side() {
        // Each message's first attempt fails: a key's next message must wait for its retry.
        let (endpoint, url) = Endpoint::start(|_, attempt| match attempt {
            1 => (503, None, Duration::from_millis(20)),
            _ => (200, None, Duration::from_millis(20)),
        })
        .await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer.concurrency(8));
        for i in 0..5 {
            broker.send(&format!("a{i}"), Some("a")).await;
            broker.send(&format!("b{i}"), Some("b")).await;
        }
        let settled = broker.until_settled(10).await;
        let acked = |lane: char| -> Vec<String> {
            settled
                .iter()
                .filter(|(id, how)| id.starts_with(lane) && *how == "ack")
                .map(|(id, _)| id.clone())
                .collect()
        };
        assert_eq!(acked('a'), ["a0", "a1", "a2", "a3", "a4"]);
        assert_eq!(acked('b'), ["b0", "b1", "b2", "b3", "b4"]);
        // Each key's requests, in arrival order: both attempts of a message before the next.
        let keys = endpoint.keys();
        let lane_a: Vec<&String> = keys.iter().filter(|k| k.starts_with('a')).collect();
        assert_eq!(
            lane_a,
            ["a0", "a0", "a1", "a1", "a2", "a2", "a3", "a3", "a4", "a4"]
        );
        assert_eq!(endpoint.most.load(Ordering::SeqCst), 2);
        stop.cancel();
        running.await.unwrap();
    }

    #[tokio::test]
    async fn concurrency_bounds_the_requests_in_flight() {
        let (endpoint, url) = Endpoint::start(|_, _| (200, None, Duration::from_millis(50))).await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer.concurrency(3).ordered(false));
        for i in 0..12 {
            broker.send(&format!("m{i}"), Some("orders")).await;
        }
        let settled = broker.until_settled(12).await;
        assert!(settled.iter().all(|(_, how)| *how == "ack"), "{settled:?}");
        assert_eq!(endpoint.most.load(Ordering::SeqCst), 3);
        stop.cancel();
        running.await.unwrap();
    }

    #[tokio::test]
    async fn shut_down_it_acknowledges_what_was_answered_in_the_grace_and_gives_back_the_rest() {
        let (endpoint, url) = Endpoint::start(|key, _| match key {
            "slow" => (200, None, Duration::from_secs(30)),
            _ => (200, None, Duration::from_millis(300)),
        })
        .await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer.shutdown_grace(Duration::from_secs(1)));
        broker.send("slow", Some("a")).await;
        broker.send("behind-slow", Some("a")).await;
        broker.send("quick", Some("b")).await;
        // Both first requests are in flight.
        tokio::time::timeout(Duration::from_secs(5), async {
            while endpoint.keys().len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .unwrap()
            .unwrap();
        let mut settled = broker.settled();
        settled.sort();
        assert_eq!(
            settled,
            [
                ("behind-slow".to_owned(), "requeue"),
                ("quick".to_owned(), "ack"),
                ("slow".to_owned(), "requeue"),
            ]
        );
        assert_eq!(endpoint.keys().len(), 2, "nothing is sent once shut down");
    }

    /// Spans recorded through a `tracing-opentelemetry` layer, set as the default subscriber of
    /// the test's thread (the runtime's one: a `#[tokio::test]` runs on the current thread).
    struct Traces {
        spans: Arc<Mutex<Vec<SpanData>>>,
        _provider: SdkTracerProvider,
        _default: tracing::subscriber::DefaultGuard,
    }

    /// An exporter that keeps what it is given.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    impl Traces {
        fn start() -> Self {
            // While `tracing` knows a single dispatcher, a callsite first reached on another
            // test's thread takes its interest from that thread's (none) and is never enabled
            // again: a second one, alive for good, makes it ask every dispatcher.
            static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
            SECOND.get_or_init(|| {
                tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default())
            });
            // As `Tracing::start` does: the messages' headers are read through the global one.
            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
            let kept = Kept::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(kept.clone())
                .build();
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("idem")));
            Self {
                spans: kept.0,
                _provider: provider,
                _default: tracing::subscriber::set_default(subscriber),
            }
        }

        /// The spans named `name` that have ended.
        fn ended(&self, name: &str) -> Vec<SpanData> {
            let spans = self.spans.lock().unwrap();
            spans
                .iter()
                .filter(|span| span.name == name)
                .cloned()
                .collect()
        }
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|attribute| attribute.key.as_str() == key)
            .map(|attribute| attribute.value.as_str().into_owned())
    }

    #[tokio::test]
    async fn a_message_is_delivered_in_a_deliver_span_of_its_trace_that_each_request_continues() {
        let traces = Traces::start();
        let (endpoint, url) = Endpoint::start(|_, attempt| match attempt {
            1 => (503, None, Duration::ZERO),
            _ => (200, None, Duration::ZERO),
        })
        .await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer);
        let mut message = Message::new("orders", "m1");
        message.message_id = Some("m1".to_owned());
        message.headers = vec![(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        )];
        let key = key_of(&KeyFrom::default(), &message).unwrap();
        broker.send_message(message).await;
        assert_eq!(broker.until_settled(1).await, [("m1".to_owned(), "ack")]);
        stop.cancel();
        running.await.unwrap();

        let spans = traces.ended("idem.deliver");
        assert_eq!(spans.len(), 1);
        let deliver = &spans[0];
        let context = &deliver.span_context;
        assert_eq!(
            context.trace_id(),
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
        );
        assert_eq!(
            deliver.parent_span_id,
            SpanId::from_hex("b7ad6b7169203331").unwrap()
        );
        assert_eq!(deliver.span_kind, SpanKind::Consumer);
        let attributes: Vec<_> = [
            "idem.outcome",
            "idem.attempts",
            "idem.key_digest",
            "messaging.message.id",
            "messaging.destination.name",
        ]
        .map(|key| attribute(deliver, key))
        .into_iter()
        .collect();
        assert_eq!(
            attributes,
            [
                Some("delivered".to_owned()),
                Some("2".to_owned()),
                Some(key.digest()),
                Some("m1".to_owned()),
                Some("orders".to_owned()),
            ]
        );
        // Both attempts carry the deliver span's context, in place of the message's.
        let expected = format!("00-{}-{}-01", context.trace_id(), context.span_id());
        assert_eq!(
            *endpoint.traceparents.lock().unwrap(),
            [Some(expected.clone()), Some(expected)]
        );
    }

    #[tokio::test]
    async fn without_an_exporter_the_request_carries_the_messages_own_traceparent() {
        let (endpoint, url) = Endpoint::start(|_, _| (200, None, Duration::ZERO)).await;
        let (broker, deliverer) = Broker::with_deliverer(&url);
        let (stop, running) = spawn(deliverer);
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let mut message = Message::new("orders", "m1");
        message.message_id = Some("m1".to_owned());
        message.headers = vec![("traceparent".to_owned(), traceparent.to_owned())];
        broker.send_message(message).await;
        assert_eq!(broker.until_settled(1).await, [("m1".to_owned(), "ack")]);
        stop.cancel();
        running.await.unwrap();
        assert_eq!(
            *endpoint.traceparents.lock().unwrap(),
            [Some(traceparent.to_owned())]
        );
    }
}
