//! The relay's claim on the outbox: a batch of due messages no other relay may take while the
//! claim's lease runs, settled once the broker has answered. How a claim holds its messages is
//! the database's (see [`OutboxDatabase`]): a transaction holding row locks on PostgreSQL, a
//! token and a lease written on the rows on SQLite.

use std::time::Duration;

use crate::{BatchReport, Envelope, Error, Outbox, OutboxDatabase};

/// A batch of claimed messages.
pub(super) struct Claim<DB: OutboxDatabase> {
    held: DB::Held,
    /// The messages, in enqueue order.
    pub(super) envelopes: Vec<Envelope>,
}

/// What a claim asks for.
pub(super) struct ClaimRequest<'a> {
    pub(super) name: &'a str,
    pub(super) lease: Duration,
    pub(super) batch: u32,
    pub(super) ordering: bool,
}

/// How a batch's messages fared at the broker, by position in the claim.
#[derive(Default)]
pub(super) struct Verdicts {
    /// Confirmed: delete them.
    pub(super) sent: Vec<usize>,
    /// Refused, with the broker's reason: a failed attempt each.
    pub(super) refused: Vec<(usize, String)>,
}

/// The backoff after failed attempts.
pub(super) struct Backoff {
    pub(super) max_attempts: u32,
    pub(super) base: Duration,
    pub(super) cap: Duration,
}

impl<DB: OutboxDatabase> Claim<DB> {
    /// Claims up to `request.batch` due messages.
    pub(super) async fn take(
        pool: &sqlx::Pool<DB>,
        outbox: &Outbox<DB>,
        request: &ClaimRequest<'_>,
    ) -> Result<Self, Error> {
        let (held, envelopes) = DB::claim(
            pool,
            outbox,
            request.name,
            request.lease,
            request.batch,
            request.ordering,
        )
        .await?;
        Ok(Self { held, envelopes })
    }

    /// Deletes the confirmed messages, records the refused ones' failed attempts and ends the
    /// claim; the other messages are due again at once, their attempt not counted. Returns the
    /// report's `taken_over`, `failed` and `dead_lettered`: confirmed messages whose lease ran out
    /// before they were marked are taken over (due again, or held by another claim already), and
    /// neither they nor the refused ones of such a claim are marked.
    pub(super) async fn settle(
        self,
        outbox: &Outbox<DB>,
        verdicts: Verdicts,
        backoff: &Backoff,
    ) -> Result<BatchReport, Error> {
        Ok(DB::settle(
            self.held,
            outbox,
            verdicts.sent,
            verdicts.refused,
            (backoff.max_attempts, backoff.base, backoff.cap),
        )
        .await?)
    }

    /// Gives the batch back untried.
    pub(super) async fn give_back(self, outbox: &Outbox<DB>) -> Result<(), Error> {
        DB::give_back(self.held, outbox).await?;
        Ok(())
    }
}
