//! The relay: publishes the outbox's messages with the broker's confirmation, at least once.
//!
//! A cycle claims a batch of due messages (`FOR UPDATE SKIP LOCKED`, so that relays running side
//! by side take different messages) under a lease and a fresh claim token, publishes them, waits
//! for the broker's confirmations, then, conditionally on its token:
//!
//! - deletes the confirmed messages (marks them sent);
//! - records a failed attempt of the rejected ones: due again after an exponential backoff, or a
//!   dead letter once they have had [`max_attempts`](Relay::max_attempts);
//! - gives back the ones it could not try (broker unavailable, shutdown), without counting an
//!   attempt.
//!
//! A relay that dies mid-batch leaves its claims to expire with their lease: another relay
//! claims them again and publishes them again. A message published before the crash is then
//! published twice, under the same id, and the consumers' inbox skips the copy. Nothing is ever
//! lost and nothing depends on ids committing in order: there is no cursor, only the rows that
//! are due.
//!
//! Between batches the relay sleeps until a `NOTIFY` from an enqueue, or the poll interval,
//! whichever comes first.
//!
//! # Metrics
//!
//! Through the `metrics` facade, labelled `outbox="\"schema\".\"table\""`: the counters
//! `idem_outbox_published_total`, `idem_outbox_failed_total`, `idem_outbox_dead_lettered_total`
//! and `idem_outbox_released_total`, and the histogram `idem_outbox_batch_seconds`.
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
mod process;
mod report;

use std::{
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::{Confirmations, Envelope, Error, Outbox, PublishError, Publisher};
use claim::{Backoff, ClaimRequest, Claimed};
use listener::Listener;

pub use process::{RelayProcess, shutdown_on_signals};
pub use report::BatchReport;

/// The relay's own pause after a database error or an unavailable broker: doubled each time,
/// up to the cap, reset by a good batch.
const PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(30));

/// Publishes the messages of one [`Outbox`] with one [`Publisher`]. Several relays (threads,
/// processes, hosts) may run on one outbox at once.
///
/// Build it with [`Relay::new`] and the setters, then [`run`](Self::run) it until shutdown, or
/// drive it one cycle at a time with [`run_once`](Self::run_once).
pub struct Relay<P> {
    pool: PgPool,
    outbox: Outbox,
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

impl<P: Publisher> Relay<P> {
    /// A relay of `outbox`, on `pool`, publishing with `publisher`: batches of 100, a lease of
    /// 30 s, a publish timeout of 10 s, a poll interval of 1 s, 10 attempts with a backoff from
    /// 1 s doubling up to 5 min, ordering off, a shutdown grace of 10 s, named
    /// `idem-relay-<pid>`.
    pub fn new(pool: PgPool, outbox: Outbox, publisher: P) -> Self {
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

    /// Sets the name recorded in `claimed_by` on the messages this relay claims, for operators.
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

    /// Sets how long a claim holds its messages. A relay that dies holds them that long; one
    /// whose cycle outlasts it (the publish timeout should be well under it) may see another
    /// relay claim and publish the same messages: a duplicate publish, which the consumers'
    /// inbox absorbs, never a loss.
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
    /// attempt is a claim that handed the message to the publisher and did not give it back:
    /// a rejection by the broker, or a relay that died before it finished. An unavailable
    /// broker does not count.
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
        let _listener = Listener::spawn(
            &self.pool,
            self.outbox.channel().to_owned(),
            Arc::clone(&wake),
        );
        let mut pause = Duration::ZERO;
        // Behind a backlog, the next batch is claimed while this one is published.
        let mut prefetched: Option<Result<Batch, Error>> = None;
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
            let full = outcome.is_ok_and(|report| {
                report.claimed + report.dead_lettered >= self.batch_size as usize
            });
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

    /// Claims a batch of due messages under a fresh token.
    async fn claim(&self) -> Result<Batch, Error> {
        let started = Instant::now();
        let token = Uuid::now_v7();
        let request = ClaimRequest {
            token,
            relay: &self.name,
            lease: self.lease,
            batch: self.batch_size,
            max_attempts: self.max_attempts,
            ordering: self.ordering,
        };
        let mut batch = Batch {
            started,
            token,
            ids: Vec::new(),
            rows: Vec::new(),
            envelopes: Vec::new(),
            report: BatchReport::default(),
        };
        for claimed in claim::claim(&self.pool, &self.outbox, &request).await? {
            match claimed {
                Claimed::Leased {
                    uuid,
                    row,
                    envelope,
                } => {
                    batch.ids.push(uuid);
                    batch.rows.push(row);
                    batch.envelopes.push(envelope);
                }
                Claimed::Exhausted { id } => {
                    batch.report.dead_lettered += 1;
                    tracing::warn!(
                        relay = self.name,
                        message_id = id.as_str(),
                        "an outbox message is now a dead letter: the relay of its last attempt \
                         stopped before it finished"
                    );
                }
            }
        }
        batch.report.claimed = batch.envelopes.len();
        Ok(batch)
    }

    /// Publishes a claimed batch and marks what was confirmed.
    async fn deliver(
        &self,
        batch: Batch,
        shutdown: &CancellationToken,
    ) -> Result<BatchReport, Error> {
        let mut report = batch.report;
        if !batch.envelopes.is_empty() {
            let confirmations = self.publish(&batch.envelopes, shutdown).await;
            self.settle(&batch, confirmations, &mut report).await?;
        }
        metrics::record(
            &self.outbox.inner().location.qualified(),
            &report,
            batch.started.elapsed(),
        );
        Ok(report)
    }

    /// Releases a prefetched batch that will not be published, without counting an attempt; if
    /// that fails, its lease frees it.
    async fn give_back(&self, prefetched: Option<Result<Batch, Error>>) {
        let Some(Ok(batch)) = prefetched else { return };
        if batch.ids.is_empty() {
            return;
        }
        if let Err(error) = claim::release(&self.pool, &self.outbox, batch.token, &batch.ids).await
        {
            tracing::warn!(
                relay = self.name,
                error = &error as &dyn std::error::Error,
                "cannot give back a claimed batch; its lease will free it"
            );
        }
    }

    /// Publishes a batch within the publish timeout; once shut down, within the grace.
    async fn publish(&self, batch: &[Envelope], shutdown: &CancellationToken) -> Confirmations {
        let publish =
            tokio::time::timeout(self.publish_timeout, self.publisher.publish_batch(batch));
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
        batch
            .iter()
            .map(|_| Err(PublishError::unavailable(reason)))
            .collect()
    }

    /// Marks sent, fails or releases each claimed message according to its confirmation.
    async fn settle(
        &self,
        batch: &Batch,
        confirmations: Confirmations,
        report: &mut BatchReport,
    ) -> Result<(), Error> {
        let token = batch.token;
        let mut confirmations = confirmations.into_iter();
        let (mut sent, mut rejected, mut reasons, mut untried) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (&id, row) in batch.ids.iter().zip(&batch.rows) {
            match confirmations.next() {
                Some(Ok(())) => sent.push(row.clone()),
                Some(Err(PublishError::Rejected { reason })) => {
                    rejected.push(id);
                    reasons.push(reason);
                }
                Some(Err(error)) => {
                    tracing::debug!(
                        relay = self.name,
                        error = &error as &dyn std::error::Error,
                        "an outbox message could not be tried"
                    );
                    untried.push(id);
                }
                None => untried.push(id),
            }
        }
        if !sent.is_empty() {
            let marked = claim::mark_sent(&self.pool, &self.outbox, token, &sent).await?;
            report.published = sent.len();
            report.taken_over = sent.len() - usize::try_from(marked).unwrap_or(sent.len());
            if report.taken_over > 0 {
                tracing::info!(
                    relay = self.name,
                    count = report.taken_over,
                    "published messages whose claim another relay had taken over; they will be \
                     published again and skipped by the consumers' inbox"
                );
            }
        }
        if !rejected.is_empty() {
            let backoff = Backoff {
                max_attempts: self.max_attempts,
                base: self.backoff,
                cap: self.max_backoff,
            };
            report.failed = rejected.len();
            report.dead_lettered += claim::fail(
                &self.pool,
                &self.outbox,
                token,
                &rejected,
                &reasons,
                &backoff,
            )
            .await?;
        }
        if !untried.is_empty() {
            claim::release(&self.pool, &self.outbox, token, &untried).await?;
            report.released = untried.len();
        }
        Ok(())
    }
}

/// Messages claimed by one claim, not yet published.
struct Batch {
    started: Instant,
    token: Uuid,
    ids: Vec<Uuid>,
    /// The claimed rows' addresses, in the order of `ids`.
    rows: Vec<String>,
    envelopes: Vec<Envelope>,
    report: BatchReport,
}

impl Batch {
    /// Whether the claim took all it could: more messages are probably due.
    fn is_full(&self, batch_size: u32) -> bool {
        self.report.claimed + self.report.dead_lettered >= batch_size as usize
    }
}

impl<P> fmt::Debug for Relay<P> {
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
