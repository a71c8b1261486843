//! The four writes that run in batches (see [`batch`](crate::batch)): their arguments, their
//! statements' binds, and how each operation's answer is read from the rows.

use std::time::Duration;

use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, Outcome, StoreError, Terms, Timestamp,
};
use idem_sql::query_text;
use sqlx::{PgConnection, Postgres, Row, postgres::PgArguments, postgres::PgRow, query::Query};

use crate::{
    batch::{Kind, Step},
    key_digest::key_digest,
    row::{AcquireRow, Columns, sql_millis, sql_token},
    shared::Shared,
};

/// An address as the statements take it: the scope's bytes and the key's digest.
pub(crate) struct Target {
    pub(crate) address: Address,
    key: [u8; 32],
}

impl Target {
    pub(crate) fn new(address: &Address) -> Self {
        Self {
            key: key_digest(&address.key),
            address: address.clone(),
        }
    }
}

/// `statement`'s first binds: now, then the scopes and keys of `targets`.
fn batch<'q>(
    shared: &Shared,
    text: &std::sync::Arc<str>,
    targets: impl Iterator<Item = &'q Target>,
) -> Query<'q, Postgres, PgArguments> {
    let (scopes, keys): (Vec<&[u8]>, Vec<&[u8]>) = targets
        .map(|t| (t.address.scope.as_bytes().as_slice(), t.key.as_slice()))
        .unzip();
    sqlx::query(query_text(text))
        .bind(shared.now())
        .bind(scopes)
        .bind(keys)
}

/// Each operation's position, from the `n` column of the rows (1-based, as `WITH ORDINALITY`).
fn position(row: &PgRow, len: usize) -> Result<usize, sqlx::Error> {
    let n: i64 = row.try_get("n")?;
    usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .filter(|&i| i < len)
        .ok_or_else(|| sqlx::Error::Protocol(format!("a batch of {len} has no operation {n}")))
}

/// One step per operation: from its row where it has one, `missing` where not.
fn steps<T>(
    rows: &[PgRow],
    len: usize,
    mut found: impl FnMut(&PgRow) -> Step<T>,
    missing: impl Fn() -> Step<T>,
) -> Result<Vec<Step<T>>, sqlx::Error> {
    let mut steps: Vec<Option<Step<T>>> = (0..len).map(|_| None).collect();
    for row in rows {
        steps[position(row, len)?] = Some(found(row));
    }
    Ok(steps
        .into_iter()
        .map(|step| step.unwrap_or_else(&missing))
        .collect())
}

/// [`Store::acquire`](idem_core::Store::acquire): `sql/acquire.sql`.
pub(crate) struct Acquire;

/// The arguments of an acquisition.
pub(crate) struct AcquireOp {
    pub(crate) target: Target,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) terms: Terms,
}

impl Kind for Acquire {
    type Op = AcquireOp;
    type Output = Acquisition;
    const REPEATS: bool = true;

    fn address(op: &AcquireOp) -> &Address {
        &op.target.address
    }

    async fn run(
        shared: &Shared,
        connection: &mut PgConnection,
        ops: &[&AcquireOp],
    ) -> Result<Vec<Step<Acquisition>>, sqlx::Error> {
        let fingerprints: Vec<&[u8]> = ops
            .iter()
            .map(|op| op.fingerprint.as_bytes().as_slice())
            .collect();
        let leases: Vec<i64> = ops.iter().map(|op| sql_millis(op.terms.lease)).collect();
        let ttls: Vec<i64> = ops.iter().map(|op| sql_millis(op.terms.ttl)).collect();
        let rows = batch(shared, &shared.sql.acquire, ops.iter().map(|op| &op.target))
            .bind(fingerprints)
            .bind(leases)
            .bind(ttls)
            .fetch_all(connection)
            .await?;
        let table = &shared.sql.table;
        steps(
            &rows,
            ops.len(),
            |row| match (Columns { row, table }).acquisition() {
                Ok(AcquireRow::Decided(acquisition)) => Step::Done(Ok(acquisition)),
                Ok(AcquireRow::Raced) => Step::Again,
                Err(error) => Step::Done(Err(error)),
            },
            // The statement has a row for every acquisition.
            || {
                let missing = sqlx::Error::Protocol("acquire.sql left out an acquisition".into());
                Step::Done(Err(StoreError::unavailable(missing)))
            },
        )
    }
}

/// [`Store::complete`](idem_core::Store::complete): `sql/complete.sql`.
pub(crate) struct Complete;

/// The arguments of a completion.
pub(crate) struct CompleteOp {
    pub(crate) target: Target,
    pub(crate) token: FencingToken,
    pub(crate) response: Vec<u8>,
    pub(crate) ttl: Duration,
}

impl CompleteOp {
    pub(crate) fn new(
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Self {
        Self {
            target: Target::new(address),
            token,
            response: outcome.encode(),
            ttl,
        }
    }
}

impl Kind for Complete {
    type Op = CompleteOp;
    type Output = ();
    const REPEATS: bool = false;

    fn address(op: &CompleteOp) -> &Address {
        &op.target.address
    }

    async fn run(
        shared: &Shared,
        connection: &mut PgConnection,
        ops: &[&CompleteOp],
    ) -> Result<Vec<Step<()>>, sqlx::Error> {
        let tokens: Vec<i64> = ops.iter().map(|op| sql_token(op.token)).collect();
        let responses: Vec<&[u8]> = ops.iter().map(|op| op.response.as_slice()).collect();
        let ttls: Vec<i64> = ops.iter().map(|op| sql_millis(op.ttl)).collect();
        let rows = batch(
            shared,
            &shared.sql.complete,
            ops.iter().map(|op| &op.target),
        )
        .bind(tokens)
        .bind(responses)
        .bind(ttls)
        .fetch_all(connection)
        .await?;
        steps(&rows, ops.len(), |_| Step::Done(Ok(())), lease_lost)
    }
}

/// [`Store::renew`](idem_core::Store::renew): `sql/renew.sql`.
pub(crate) struct Renew;

/// The arguments of a renewal.
pub(crate) struct RenewOp {
    pub(crate) target: Target,
    pub(crate) token: FencingToken,
    pub(crate) lease: Duration,
}

impl Kind for Renew {
    type Op = RenewOp;
    type Output = Timestamp;
    const REPEATS: bool = false;

    fn address(op: &RenewOp) -> &Address {
        &op.target.address
    }

    async fn run(
        shared: &Shared,
        connection: &mut PgConnection,
        ops: &[&RenewOp],
    ) -> Result<Vec<Step<Timestamp>>, sqlx::Error> {
        let tokens: Vec<i64> = ops.iter().map(|op| sql_token(op.token)).collect();
        let leases: Vec<i64> = ops.iter().map(|op| sql_millis(op.lease)).collect();
        let rows = batch(shared, &shared.sql.renew, ops.iter().map(|op| &op.target))
            .bind(tokens)
            .bind(leases)
            .fetch_all(connection)
            .await?;
        let table = &shared.sql.table;
        steps(
            &rows,
            ops.len(),
            |row| {
                let until = row
                    .try_get::<i64, _>("lease_until")
                    .map_err(|e| crate::error::store_error(e, table))
                    .map(|until| Timestamp::from_millis(u64::try_from(until).unwrap_or(0)));
                Step::Done(until)
            },
            lease_lost,
        )
    }
}

/// [`Store::release`](idem_core::Store::release): `sql/release.sql`.
pub(crate) struct Release;

/// The arguments of a release.
pub(crate) struct ReleaseOp {
    pub(crate) target: Target,
    pub(crate) token: FencingToken,
}

impl Kind for Release {
    type Op = ReleaseOp;
    type Output = ();
    const REPEATS: bool = false;

    fn address(op: &ReleaseOp) -> &Address {
        &op.target.address
    }

    async fn run(
        shared: &Shared,
        connection: &mut PgConnection,
        ops: &[&ReleaseOp],
    ) -> Result<Vec<Step<()>>, sqlx::Error> {
        let tokens: Vec<i64> = ops.iter().map(|op| sql_token(op.token)).collect();
        let rows = batch(shared, &shared.sql.release, ops.iter().map(|op| &op.target))
            .bind(tokens)
            .fetch_all(connection)
            .await?;
        steps(&rows, ops.len(), |_| Step::Done(Ok(())), lease_lost)
    }
}

/// A holder-only write that changed no row: the token does not hold the key.
fn lease_lost<T>() -> Step<T> {
    Step::Done(Err(StoreError::LeaseLost))
}
