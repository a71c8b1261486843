//! The relay's metrics, through the `metrics` facade: whatever recorder the application
//! installed (Prometheus, StatsD…) receives them; without one they cost nothing.

use std::time::Duration;

use sqlx::Pool;

use crate::{BatchReport, Error, Outbox, OutboxDatabase};

/// Counter: messages the broker confirmed.
pub const PUBLISHED: &str = "idem_outbox_published_total";
/// Counter: failed attempts (the broker rejected the message).
pub const FAILED: &str = "idem_outbox_failed_total";
/// Counter: messages moved to the dead letters.
pub const DEAD_LETTERED: &str = "idem_outbox_dead_lettered_total";
/// Counter: claimed messages given back untried (broker unavailable, shutdown).
pub const RELEASED: &str = "idem_outbox_released_total";
/// Gauge: messages waiting to be published, set by [`record_pending`] (which `idem relay` calls at
/// each progress report).
pub const PENDING: &str = "idem_outbox_pending";
/// Histogram: seconds from a claim to the end of its batch (publish and marks), for batches that
/// claimed at least one message.
pub const BATCH_SECONDS: &str = "idem_outbox_batch_seconds";

/// The `outbox` label of these metrics: the outbox table's qualified name, as its database's
/// statements name it: `"schema"."table"`, or `` `schema`.`table` `` on MySQL (`` `table` ``
/// for a table of the connection's database).
pub fn outbox_label<DB: OutboxDatabase>(outbox: &Outbox<DB>) -> String {
    outbox.inner().table.qualified::<DB>()
}

/// Counts the messages waiting in `outbox` and sets the [`PENDING`] gauge to it: what a process
/// running a relay calls now and then to report its progress.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), idem_messaging::Error> {
/// use idem_messaging::{Outbox, OutboxOptions, metrics};
///
/// let outbox = Outbox::new(OutboxOptions::new());
/// let pending = metrics::record_pending(&outbox, &pool).await?;
/// tracing::info!(outbox = metrics::outbox_label(&outbox), pending, "outbox relay progress");
/// # Ok(())
/// # }
/// ```
pub async fn record_pending<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    pool: &Pool<DB>,
) -> Result<u64, Error> {
    let pending = outbox.pending(pool).await?;
    metrics::gauge!(PENDING, "outbox" => outbox_label(outbox)).set(pending as f64);
    Ok(pending)
}

/// Records one cycle, labelled with the outbox's qualified table name.
pub(super) fn record(outbox: &str, report: &BatchReport, elapsed: Duration) {
    let label = || ("outbox", outbox.to_owned());
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    if report.published > 0 {
        metrics::counter!(PUBLISHED, &[label()]).increment(count(report.published));
    }
    if report.failed > 0 {
        metrics::counter!(FAILED, &[label()]).increment(count(report.failed));
    }
    if report.dead_lettered > 0 {
        metrics::counter!(DEAD_LETTERED, &[label()]).increment(count(report.dead_lettered));
    }
    if report.released > 0 {
        metrics::counter!(RELEASED, &[label()]).increment(count(report.released));
    }
    if report.claimed > 0 {
        metrics::histogram!(BATCH_SECONDS, &[label()]).record(elapsed.as_secs_f64());
    }
}
