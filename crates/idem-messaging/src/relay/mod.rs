//! The relay: publishes the outbox's messages with the broker's confirmation, at least once.
//!
//! A cycle claims a batch of due messages in a transaction (`FOR UPDATE SKIP LOCKED`, so that
//! relays running side by side take different messages) and keeps that transaction open while it
//! publishes them and waits for the broker's confirmations; then, in the same transaction:
//!
//! - it deletes the confirmed messages (marks them sent);
//! - it records a failed attempt of the refused ones: due again after an exponential backoff, or
//!   a dead letter once they have had [`max_attempts`](Relay::max_attempts);
//! - it leaves the ones it could not try (broker unavailable, shutdown) as they were, due at once,
//!   their attempt not counted;
//!
//! and commits, which releases them all. Holding the claim as a transaction costs the database
//! two light writes per message (a row lock, then the deletion) instead of writing a claim on
//! every row and deleting it later: the relay's throughput doubles (docs/benchmarks.md).
//!
//! A relay that dies mid-batch loses its connection and the database rolls its claim back: the
//! messages are due again at once, for any relay. One that hangs is stopped by its lease: the
//! server ends a claim transaction left idle longer than that
//! (`idle_in_transaction_session_timeout`, set for the claim's transaction only). Either way a
//! message published before the claim ended is published again, under the same id, and the
//! consumers' inbox skips the copy. Nothing is ever lost and nothing depends on ids committing
//! in order: there is no cursor, only the rows that are due.
//!
//! A publisher that panics is caught: the batch is tried again one message at a time, and a
//! message the publisher panics on counts a failed attempt, so that one message that crashes it
//! ends as a dead letter instead of stopping the relay at every claim.
//!
//! Between batches the relay sleeps until a `NOTIFY` from an enqueue, or the poll interval,
//! whichever comes first.
//!
//! # On SQLite
//!
//! The same relay runs on an outbox in an SQLite file ([`SqliteOutbox`](crate::SqliteOutbox)),
//! in the process that enqueues or in others on the same file. SQLite has no row locks to hold,
//! so a claim is written on the rows instead: under the write lock (`BEGIN IMMEDIATE`), one
//! `UPDATE … RETURNING` takes the due messages and writes the claim's token on them, with the
//! end of its lease as their next due time. The marks (sent, failed, given back) come in one
//! transaction at the end of the batch, each fenced on the token: a relay whose lease ran out
//! and whose messages another relay claimed marks none of them, and they are published again.
//! A relay that dies holds its messages until its lease ends. SQLite has no notifications:
//! relays on it poll, every poll interval.
//!
//! # Metrics
//!
//! Through the `metrics` facade, labelled `outbox="\"schema\".\"table\""`: the counters
//! `idem_outbox_published_total`, `idem_outbox_failed_total`, `idem_outbox_dead_lettered_total`
//! and `idem_outbox_released_total`, and the histogram `idem_outbox_batch_seconds`.
//!
//! # Traces
//!
//! Each message published is an `idem.publish` span (`debug`, kind producer) with its id, its
//! destination, its attempt and its outcome (`idem.outcome`: `published`, `retried`,
//! `dead_lettered`, or `released` when it went untried). With the `opentelemetry` feature and a
//! global propagator set, the span continues the W3C trace context the message was enqueued with
//! (its `traceparent` header), and the broker's message carries the span's own context in place
//! of it; the outbox keeps the one it was enqueued with, for the next attempt.
//!
//! # Examples
//!
//! ```no_run
//! # #[cfg(feature = "amqp")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use idem_messaging::{Outbox, OutboxOptions, Relay, amqp::AmqpPublisher};
//! use tokio_util::sync::CancellationToken;
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let publisher = AmqpPublisher::new("amqp://guest:guest@127.0.0.1:5672/%2f").exchange("events");
//! let relay = Relay::new(pool, Outbox::new(OutboxOptions::new()), publisher)
//!     .batch_size(200)
//!     .lease(Duration::from_secs(30))
//!     .ordering(true);
//!
//! let shutdown = CancellationToken::new();
//! let task = tokio::spawn({
//!     let shutdown = shutdown.clone();
//!     async move { relay.run(shutdown).await }
//! });
//! // … until the process is told to stop:
//! shutdown.cancel(); // finishes the batch in flight, gives back what it could not publish
//! task.await?;
//! # Ok(())
//! # }
//! ```

mod claim;
mod listener;
pub mod metrics;

use std::{
    any::Any,
    fmt,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use futures_util::FutureExt;
use sqlx::{Pool, Postgres};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{Span, field::Empty};

use crate::{
    BatchReport, Confirmations, Envelope, Error, Outbox, OutboxDatabase, PublishError, Publisher,
};
use claim::{Backoff, Claim, ClaimRequest, Verdicts};
use listener::Listener;

/// The relay's own pause after a database error or an unavailable broker: doubled each time,
/// up to the cap, reset by a good batch.
const PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(30));

/// Publishes the messages of one [`Outbox`] with one [`Publisher`]. Several relays (threads,
/// processes, hosts) may run on one outbox at once.
///
/// `DB` is the outbox's database, [`Postgres`] (the default) or [`Sqlite`](sqlx::Sqlite), the
/// pool's.
///
/// Build it with [`Relay::new`] and the setters, then [`run`](Self::run) it until shutdown, or
/// drive it one cycle at a time with [`run_once`](Self::run_once).
pub struct Relay<P, DB: OutboxDatabase = Postgres> {
    pool: Pool<DB>,
    outbox: Outbox<DB>,
    publisher: P,
    name: String,
    batch_size: u32,
    lease: Duration,
    publish_timeout: Duration,
    poll_interval: Duration,
    max_attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
    ordering: bool,
    shutdown_grace: Duration,
}

impl<P: Publisher, DB: OutboxDatabase> Relay<P, DB> {
    /// A relay of `outbox`, on `pool`, publishing with `publisher`: batches of 100, a lease of
    /// 30 s, a publish timeout of 10 s, a poll interval of 1 s, 10 attempts with a backoff from
    /// 1 s doubling up to 5 min, ordering off, a shutdown grace of 10 s, named
    /// `idem-relay-<pid>`.
    pub fn new(pool: Pool<DB>, outbox: Outbox<DB>, publisher: P) -> Self {
        Self {
            pool,
            outbox,
            publisher,
            name: format!("idem-relay-{}", std::process::id()),
            batch_size: 100,
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            max_attempts: 10,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            ordering: false,
            shutdown_grace: Duration::from_secs(10),
        }
    }

    /// Sets the name the relay's logs carry, for operators.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets how many messages a cycle claims at most (at least 1).
    #[must_use]
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// Sets how long a claim may wait between its statements (from the claim to the marks, while
    /// its batch is published; a batch claimed ahead also waits for the one before it) before the
    /// server ends it. A relay that hangs holds its messages that long; one whose cycle outlasts
    /// it (the publish timeout should be well under half of it) finds its claim gone, and another
    /// relay publishes the same messages again: a duplicate publish, which the consumers' inbox
    /// absorbs, never a loss. A relay that dies holds nothing: its connection closes and the
    /// database releases its messages at once.
    ///
    /// On SQLite the lease is written on the claimed messages: another relay takes them once it
    /// ends, whatever became of this one, and a relay that dies holds them until then.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets how long the relay waits for a batch's confirmations. Past it, the batch's messages
    /// are given back untried (they may have been published: then they will be again).
    #[must_use]
    pub fn publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// Sets how often an idle relay looks for due messages without being notified: retries
    /// whose backoff ended, claims whose lease ran out, notifications lost while the listener
    /// was reconnecting.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets how many attempts a message gets before it becomes a dead letter (at least 1). An
    /// attempt is a refusal by the broker, or a panic of the publisher on the message (a batch
    /// the publisher panics on is tried again one message at a time, so only the message that
    /// makes it panic counts one). An unavailable broker, a timeout, a shutdown or a relay
    /// process that died do not count: its claim is rolled back.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the backoff after a failed attempt: `base * 2^(attempts - 1)`, at most `cap`, times
    /// a random factor between 0.5 and 1.
    #[must_use]
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff = base;
        self.max_backoff = cap;
        self
    }

    /// Turns per-key ordering on or off (off by default).
    ///
    /// When on, a message with an ordering key is not claimed while an earlier message with the
    /// same key is pending (claimed, waiting for its backoff, or not yet tried): the messages of
    /// a key go to the broker one at a time, each confirmed before the next is published. A
    /// message is earlier than another when it was enqueued earlier in the same transaction, or
    /// in a transaction that committed before the other's was enqueued. Messages enqueued by
    /// concurrent transactions have no order between them. A dead letter no longer holds its
    /// key back.
    ///
    /// It costs throughput on hot keys: one message per key per cycle.
    #[must_use]
    pub fn ordering(mut self, on: bool) -> Self {
        self.ordering = on;
        self
    }

    /// Sets how long [`run`](Self::run), once shut down, waits for the confirmations of the
    /// batch in flight before giving its messages back.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The pool the relay runs on.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The outbox the relay publishes: for its [`counts`](Outbox::counts), say.
    pub fn outbox(&self) -> &Outbox<DB> {
        &self.outbox
    }

    /// Runs cycles until `shutdown` is cancelled, then finishes the batch in flight (within the
    /// shutdown grace) and returns. Failures are logged and retried after a pause; nothing but
    /// `shutdown` ends it.
    ///
    /// A full batch is followed at once by the next, which is claimed while the first is being
    /// published (a batch claimed but not published, because the relay pauses or shuts down, is
    /// given back without counting an attempt); otherwise the relay sleeps until an enqueue
    /// notifies it or the poll interval ends.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub async fn run(&self, shutdown: CancellationToken) {
        let wake = Arc::new(Notify::new());
        let _listener = Listener::spawn(&self.pool, &self.outbox, Arc::clone(&wake));
        let mut pause = Duration::ZERO;
        // Behind a backlog, the next batch is claimed while this one is published.
        let mut prefetched: Option<Result<Batch<DB>, Error>> = None;
        while !shutdown.is_cancelled() {
            let claimed = match prefetched.take() {
                Some(claimed) => claimed,
                None => self.claim().await,
            };
            let outcome = match claimed {
                Ok(batch) if batch.is_full(self.batch_size) => {
                    let (outcome, next) =
                        tokio::join!(self.deliver(batch, &shutdown), self.claim());
                    prefetched = Some(next);
                    outcome
                }
                Ok(batch) => self.deliver(batch, &shutdown).await,
                Err(error) => Err(error),
            };
            let trouble = match &outcome {
                Ok(report) => report.released > 0,
                Err(error) => {
                    tracing::warn!(
                        relay = self.name,
                        error = error as &dyn std::error::Error,
                        "an outbox relay cycle failed; pausing"
                    );
                    true
                }
            };
            if trouble {
                // The prefetched batch would wait out the pause under its lease: give it back.
                self.give_back(prefetched.take()).await;
                pause = (pause * 2).clamp(PAUSE.0, PAUSE.1);
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = shutdown.cancelled() => {}
                }
                continue;
            }
            pause = Duration::ZERO;
            let full = outcome.is_ok_and(|report| report.claimed >= self.batch_size as usize);
            if !full && prefetched.is_none() {
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(self.poll_interval) => {}
                    () = shutdown.cancelled() => {}
                }
            }
        }
        self.give_back(prefetched).await;
    }

    /// Runs one cycle: claims a batch, publishes it, marks what was confirmed.
    pub async fn run_once(&self) -> Result<BatchReport, Error> {
        let batch = self.claim().await?;
        self.deliver(batch, &CancellationToken::new()).await
    }

    /// Claims a batch of due messages.
    async fn claim(&self) -> Result<Batch<DB>, Error> {
        let started = Instant::now();
        let request = ClaimRequest {
            name: &self.name,
            lease: self.lease,
            batch: self.batch_size,
            ordering: self.ordering,
        };
        let claim = Claim::take(&self.pool, &self.outbox, &request).await?;
        Ok(Batch { started, claim })
    }

    /// Publishes a claimed batch and settles it according to the broker's confirmations.
    async fn deliver(
        &self,
        batch: Batch<DB>,
        shutdown: &CancellationToken,
    ) -> Result<BatchReport, Error> {
        let Batch { started, mut claim } = batch;
        let mut report = BatchReport {
            claimed: claim.envelopes.len(),
            ..BatchReport::default()
        };
        if claim.envelopes.is_empty() {
            claim.give_back(&self.outbox).await?;
            return Ok(report);
        }
        // They end with the batch, once it is settled.
        let spans = publish_spans(&mut claim.envelopes);
        let confirmations = self.publish(&claim.envelopes, shutdown).await;
        let verdicts = self.verdicts(&claim.envelopes, &spans, confirmations, &mut report);
        let sent = verdicts.sent.len();
        let backoff = Backoff {
            max_attempts: self.max_attempts,
            base: self.backoff,
            cap: self.max_backoff,
        };
        let settled = claim.settle(&self.outbox, verdicts, &backoff).await?;
        report.taken_over = settled.taken_over;
        report.failed = settled.failed;
        report.dead_lettered = settled.dead_lettered;
        if settled.taken_over > 0 {
            tracing::info!(
                relay = self.name,
                published = sent,
                taken_over = settled.taken_over,
                "a batch's lease ran out before it was marked; its messages will be \
                 published again and skipped by the consumers' inbox"
            );
        }
        metrics::record(
            &metrics::outbox_label(&self.outbox),
            &report,
            started.elapsed(),
        );
        Ok(report)
    }

    /// Gives back a prefetched batch that will not be published, without counting an attempt.
    async fn give_back(&self, prefetched: Option<Result<Batch<DB>, Error>>) {
        let Some(Ok(batch)) = prefetched else { return };
        if let Err(error) = batch.claim.give_back(&self.outbox).await {
            tracing::warn!(
                relay = self.name,
                error = &error as &dyn std::error::Error,
                "cannot give back a claimed batch; it is released when its claim ends (its \
                 connection closes, or its lease runs out)"
            );
        }
    }

    /// Publishes a batch within the publish timeout; once shut down, within the grace.
    ///
    /// A publisher that panics on a batch is tried again one message at a time, and a message it
    /// panics on alone counts a failed attempt: one message that crashes the publisher goes to
    /// the dead letters after its attempts instead of stopping the relay on every claim.
    async fn publish(&self, batch: &[Envelope], shutdown: &CancellationToken) -> Confirmations {
        let panic = match self.try_publish(batch, shutdown).await {
            Ok(confirmations) => return confirmations,
            Err(panic) => panic,
        };
        if batch.len() == 1 {
            return vec![Err(panicked(&*panic))];
        }
        tracing::warn!(
            relay = self.name,
            panic = panic_message(&*panic),
            messages = batch.len(),
            "the publisher panicked on a batch; trying its messages one at a time"
        );
        let mut confirmations = Vec::with_capacity(batch.len());
        for envelope in batch {
            match self
                .try_publish(std::slice::from_ref(envelope), shutdown)
                .await
            {
                Ok(confirmation) => confirmations.extend(confirmation),
                Err(panic) => confirmations.push(Err(panicked(&*panic))),
            }
        }
        confirmations
    }

    /// Publishes a batch within the publish timeout (once shut down, within the grace); the
    /// publisher's panic, if it panicked.
    async fn try_publish(
        &self,
        batch: &[Envelope],
        shutdown: &CancellationToken,
    ) -> Result<Confirmations, Box<dyn Any + Send>> {
        let publish = tokio::time::timeout(
            self.publish_timeout,
            AssertUnwindSafe(self.publisher.publish_batch(batch)).catch_unwind(),
        );
        let abandon = async {
            shutdown.cancelled().await;
            tokio::time::sleep(self.shutdown_grace).await;
        };
        let reason = tokio::select! {
            result = publish => match result {
                Ok(confirmations) => return confirmations,
                Err(_) => "no confirmation within the publish timeout",
            },
            () = abandon => "the relay is shutting down",
        };
        Ok(batch
            .iter()
            .map(|_| Err(PublishError::unavailable(reason)))
            .collect())
    }

    /// Sorts a batch's messages by their confirmations: sent, refused, or untried (released);
    /// and records each one's outcome on its span.
    fn verdicts(
        &self,
        batch: &[Envelope],
        spans: &[Span],
        confirmations: Confirmations,
        report: &mut BatchReport,
    ) -> Verdicts {
        let mut verdicts = Verdicts::default();
        let mut confirmations = confirmations.into_iter();
        // Why the batch's messages went untried (the first reason given).
        let mut unavailable = None;
        for (position, (envelope, span)) in batch.iter().zip(spans).enumerate() {
            let outcome = match confirmations.next() {
                Some(Ok(())) => {
                    verdicts.sent.push(position);
                    "published"
                }
                Some(Err(PublishError::Rejected { reason })) => {
                    verdicts.refused.push((position, reason));
                    // As the fail statement decides.
                    if envelope.attempt() >= self.max_attempts {
                        "dead_lettered"
                    } else {
                        "retried"
                    }
                }
                Some(Err(error)) => {
                    unavailable.get_or_insert(error);
                    report.released += 1;
                    "released"
                }
                None => {
                    report.released += 1;
                    "released"
                }
            };
            span.record("idem.outcome", outcome);
        }
        if report.released > 0 {
            // Said once per batch, so that a broker that stays away is visible in the log.
            tracing::warn!(
                relay = self.name,
                untried = report.released,
                error = unavailable
                    .as_ref()
                    .map(|error| error as &dyn std::error::Error),
                "messages of a batch went untried (broker unavailable, publish timeout or \
                 shutdown); they are due again"
            );
        }
        report.published = verdicts.sent.len();
        report.failed = verdicts.refused.len();
        verdicts
    }
}

/// One `idem.publish` span per message of a batch, each a child of the trace context its message
/// carries, whose own context the message carries to the broker in its place.
fn publish_spans(batch: &mut [Envelope]) -> Vec<Span> {
    batch
        .iter_mut()
        .map(|envelope| {
            let span = tracing::debug_span!(
                "idem.publish",
                otel.kind = "producer",
                messaging.message.id = envelope.id().as_str(),
                messaging.destination.name = envelope.message().destination.as_str(),
                idem.attempt = envelope.attempt(),
                idem.outcome = Empty,
            );
            crate::trace::forward(&span, envelope.headers_mut());
            span
        })
        .collect()
}

/// A publisher's panic, as a failed attempt of the message it panicked on.
fn panicked(panic: &(dyn Any + Send)) -> PublishError {
    PublishError::Rejected {
        reason: format!("the publisher panicked: {}", panic_message(panic)),
    }
}

/// The message a panic was raised with, if it is text.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// A claimed batch, not yet published.
struct Batch<DB: OutboxDatabase> {
    started: Instant,
    claim: Claim<DB>,
}

impl<DB: OutboxDatabase> Batch<DB> {
    /// Whether the claim took all it could: more messages are probably due.
    fn is_full(&self, batch_size: u32) -> bool {
        self.claim.envelopes.len() >= batch_size as usize
    }
}

impl<P, DB: OutboxDatabase> fmt::Debug for Relay<P, DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("outbox", &self.outbox)
            .field("name", &self.name)
            .field("batch_size", &self.batch_size)
            .field("lease", &self.lease)
            .field("publish_timeout", &self.publish_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &(self.backoff, self.max_backoff))
            .field("ordering", &self.ordering)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish_non_exhaustive()
    }
}
