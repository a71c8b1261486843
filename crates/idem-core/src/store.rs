//! The [`Store`] contract that every backend implements.

use std::{future::Future, sync::Arc, time::Duration};

use bytes::Bytes;

use crate::{
    Address, Census, CensusClaim, CensusTurn, FencingToken, Fingerprint, Lease, ListPage,
    ListQuery, Outcome, Pace, Policy, Record, StoreError, Timestamp,
};

/// The durations an acquisition is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// How long the lease lasts unless renewed.
    pub lease: Duration,
    /// How long the record lasts: the minimum life of a processing record (never shorter than its
    /// lease), and the life of a completed one from its completion.
    pub ttl: Duration,
}

impl From<&Policy> for Terms {
    fn from(policy: &Policy) -> Self {
        Self {
            lease: policy.lease,
            ttl: policy.ttl,
        }
    }
}

/// The outcome of [`Store::acquire`]. Every variant is an expected result, not a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// The caller holds the key and must execute, then `complete` or `release` with the token.
    Acquired(Lease),
    /// The operation already completed with the same fingerprint: replay this outcome.
    Completed(Outcome),
    /// Another worker holds a live lease; try again after `retry_after` (the lease's remaining
    /// time).
    InFlight {
        /// Time left on the holder's lease.
        retry_after: Duration,
    },
    /// The key is in use (processing, completed, or its lease ran out) by a request with another
    /// fingerprint.
    Mismatch,
}

/// Where idempotency records live.
///
/// A record is addressed by [`Address`] (scope and key) and is, at any moment, absent, processing
/// or completed (see [`RecordState`](crate::RecordState) and `docs/state-machine.md`). A record
/// whose `expires_at` has passed counts as absent everywhere, whether or not it has been purged.
///
/// Every method is **one atomic step**: concurrent calls on one address behave as if they ran one
/// after the other, whatever the number of processes sharing the store. Stores that keep time
/// themselves read it from an injected [`Clock`](crate::Clock); server stores use the server's
/// clock.
///
/// Fencing: every acquisition issues a [`FencingToken`] strictly greater than every token issued
/// before for the same address. [`complete`](Store::complete), [`release`](Store::release) and
/// [`renew`](Store::renew) succeed only with the current token of a processing record; with any
/// other token (the lease was taken over, the key released, forgotten, completed or expired) they
/// return [`StoreError::LeaseLost`] and change nothing.
pub trait Store: Send + Sync + 'static {
    /// Tries to take the key for a request with `fingerprint`, atomically:
    ///
    /// - no record (never created, released, forgotten or expired) → a new processing record
    ///   with a new token, lease `now + terms.lease`, expiry `now + max(terms.ttl, terms.lease)`:
    ///   [`Acquisition::Acquired`] with `took_over: false`;
    /// - a record with another fingerprint → [`Acquisition::Mismatch`], whatever its state;
    /// - completed → [`Acquisition::Completed`] with the stored outcome (a response byte for
    ///   byte);
    /// - processing with a live lease (`now < lease_until`) → [`Acquisition::InFlight`] with
    ///   `retry_after = lease_until - now`;
    /// - processing with a lease that ran out → taken over: a new token and lease, expiry pushed
    ///   to at least the new lease's end, [`Acquisition::Acquired`] with `took_over: true`.
    fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send;

    /// Completes a processing record held by `token`: stores `outcome`, which is replayed until
    /// `now + ttl`. A late completion by the current holder after its lease ran out (but before
    /// anyone took it over) is accepted. Any other token → [`StoreError::LeaseLost`].
    fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Releases a processing record held by `token`: the record is removed, so the next acquire,
    /// with any fingerprint, starts a new operation. Any other token → [`StoreError::LeaseLost`].
    fn release(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Extends the lease of a processing record held by `token` to `now + lease` (and its expiry
    /// to at least that) and returns the new end. Any other token → [`StoreError::LeaseLost`].
    fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    /// Reads the record, or `None` when there is none or it has expired.
    fn get(
        &self,
        address: &Address,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Removes the record whatever its state (an operator's override). Returns whether a live
    /// record was there. A worker that held it gets [`StoreError::LeaseLost`] on its next call.
    fn forget(&self, address: &Address) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Removes at most `limit` expired records and expired [parts](Store::append_part), records
    /// first, and returns how many it removed (each part counts one; a store that removes parts
    /// in groups may pass `limit` by one group). A processing record is never expired before its
    /// lease ends. Callers loop while the result equals `limit`.
    fn purge_expired(&self, limit: usize)
    -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Checks that the store can be reached.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// One page of the live records that pass `query`'s filters, newest first (by acquisition
    /// time, then scope and key digest), starting after `query.cursor`, with the cursor of the
    /// next page. Paging through to the end lists every record that was live and matching during
    /// the whole walk exactly once; records acquired meanwhile may or may not appear. For
    /// operators: its cost grows with the records it must look at, which each store documents.
    /// A cursor this store did not issue is [`StoreError::InvalidCursor`].
    ///
    /// The default answers [`StoreError::Unsupported`].
    fn list(&self, query: &ListQuery) -> impl Future<Output = Result<ListPage, StoreError>> + Send {
        let _ = query;
        std::future::ready(Err(StoreError::Unsupported {
            operation: "listing records",
        }))
    }

    /// Counts the live records by state and finds the oldest processing one. For operators: it
    /// may read every record, as each store documents, so it reads them in bounded steps and
    /// rests between them at `pace`, on connections the requests do not wait behind; callers
    /// also space their calls, and share one census through [`claim_census`](Store::claim_census).
    ///
    /// The default answers [`StoreError::Unsupported`].
    fn census(&self, pace: Pace) -> impl Future<Output = Result<Census, StoreError>> + Send {
        let _ = pace;
        std::future::ready(Err(StoreError::Unsupported {
            operation: "counting records",
        }))
    }

    /// Asks the store's census board whether `claim`'s claimant counts now: it does when the
    /// last census posted is due (or there is none) and no other claimant's claim holds, and it
    /// then holds the claim for `claim.hold`, renewed by claiming again. One step, atomic among
    /// every process that shares the store, on the store's clock: so a fleet takes one census
    /// at a time, and a claimant that stops is replaced once its claim runs out. The answer
    /// carries the census last posted, for those that do not count. See [`Board`] for the
    /// rules.
    ///
    /// [`Board`]: crate::census::Board
    ///
    /// The default, for a store that no other process shares, always answers
    /// [`CensusTurn::Count`] with no census.
    fn claim_census(
        &self,
        claim: CensusClaim,
    ) -> impl Future<Output = Result<CensusTurn, StoreError>> + Send {
        let _ = claim;
        std::future::ready(Ok(CensusTurn::Count { last: None }))
    }

    /// Posts `census` on the store's board for `claimant`, the next census due after `rest`:
    /// `false`, and nothing posted, unless `claimant` holds the claim (a claimant whose claim
    /// ran out and was taken by another cannot overwrite the newer census). Releases the
    /// claim.
    ///
    /// The default, for a store that no other process shares, posts nothing and answers
    /// `true`.
    fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (claimant, census, rest);
        std::future::ready(Ok(true))
    }

    /// Appends part `index` of the response that the execution holding `token` streams, so that
    /// requests on other processes sharing the store can follow it while it runs (see
    /// [`read_parts`](Store::read_parts)). Parts are opaque bytes, appended in order from 0:
    ///
    /// - `index` equal to the number of parts stored for `token` → stored;
    /// - `index` below it → nothing changes (a retry of an append whose answer was lost);
    /// - `index` above it → [`StoreError::PartOutOfOrder`], nothing stored;
    /// - `token` is not the current token of a processing record → [`StoreError::LeaseLost`].
    ///
    /// A part lives as long as its record did when it was appended (it expires with it and
    /// [`purge_expired`](Store::purge_expired) removes it), or until
    /// [`discard_parts`](Store::discard_parts) or [`forget`](Store::forget); a takeover leaves
    /// the older execution's parts to expire, unread, since readers name the token.
    ///
    /// The default answers [`StoreError::Unsupported`]: requests on other processes then wait
    /// for the record instead of following.
    fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (address, token, index, part);
        std::future::ready(Err(StoreError::Unsupported {
            operation: "streamed parts",
        }))
    }

    /// The parts of the execution `token` at `address`, from index `from` on, in order and with
    /// no gap: as many as fit in `max_bytes`, and at least one when there is one. Whatever the
    /// record's state: the parts of an execution that completed or was released can be read
    /// until they are discarded or expire. Empty when there are none (not yet, or no longer).
    ///
    /// The default answers [`StoreError::Unsupported`].
    fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Vec<Bytes>, StoreError>> + Send {
        let _ = (address, token, from, max_bytes);
        std::future::ready(Err(StoreError::Unsupported {
            operation: "streamed parts",
        }))
    }

    /// Removes the parts of the execution `token` at `address`, once the record they were
    /// written for is settled and nobody needs to follow them. Removing none is not an error.
    ///
    /// The default does nothing.
    fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (address, token);
        std::future::ready(Ok(()))
    }

    /// Resolves when the record at `address` may have been completed, released or forgotten by
    /// another process sharing the store (Postgres `LISTEN/NOTIFY`, Redis pub/sub), so that
    /// waiters on other instances wake up at once. Interest is registered when this method is
    /// called, before the future is first polled, so a change right after the call is not missed.
    /// A spurious wake-up is harmless: the engine looks again. A store may notify only for records
    /// that an `acquire` has answered [`Acquisition::InFlight`] (so that completions nobody waits
    /// for cost nothing); the engine calls this method before each such `acquire`.
    ///
    /// A store that can tell also resolves it when a part is appended to the record's stream
    /// ([`append_part`](Store::append_part)), so that followers on other processes see each one
    /// at once.
    ///
    /// Stores that cannot tell never resolve (the default); the engine then polls with backoff.
    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        let _ = address;
        std::future::pending()
    }
}

impl<S: Store> Store for Arc<S> {
    fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        (**self).acquire(address, fingerprint, terms)
    }

    fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).complete(address, token, outcome, ttl)
    }

    fn release(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).release(address, token)
    }

    fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send {
        (**self).renew(address, token, lease)
    }

    fn get(
        &self,
        address: &Address,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        (**self).get(address)
    }

    fn forget(&self, address: &Address) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).forget(address)
    }

    fn purge_expired(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send {
        (**self).purge_expired(limit)
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).ping()
    }

    fn list(&self, query: &ListQuery) -> impl Future<Output = Result<ListPage, StoreError>> + Send {
        (**self).list(query)
    }

    fn census(&self, pace: Pace) -> impl Future<Output = Result<Census, StoreError>> + Send {
        (**self).census(pace)
    }

    fn claim_census(
        &self,
        claim: CensusClaim,
    ) -> impl Future<Output = Result<CensusTurn, StoreError>> + Send {
        (**self).claim_census(claim)
    }

    fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).post_census(claimant, census, rest)
    }

    fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).append_part(address, token, index, part)
    }

    fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Vec<Bytes>, StoreError>> + Send {
        (**self).read_parts(address, token, from, max_bytes)
    }

    fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).discard_parts(address, token)
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        (**self).changed(address)
    }
}
