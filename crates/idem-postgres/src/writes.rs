//! The four writes that run in batches (see [`batch`](crate::batch)): their arguments, their
//! statements' binds, and how each operation's answer is read from the rows.
//!
//! Every write is a [`Write`]: its statement takes now and the addresses first, then arrays of
//! its own arguments, and returns a row per operation it answers, `n` its position. One [`run`]
//! serves all four.

use std::{marker::PhantomData, time::Duration};

use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, Outcome, StoreError, Terms, Timestamp,
};
use idem_sql::{
    Failure,
    batch::{Failed, Kind, Step},
    query_text,
};
use sqlx::{PgConnection, Postgres, Row, postgres::PgArguments, postgres::PgRow, query::Query};

use crate::{
    error::store_error,
    key_digest::key_digest,
    row::{AcquireRow, Columns, sql_millis, sql_token},
    shared::Shared,
    sql::Statement,
};

/// One write: the address it is about, as the statements take it, and its own arguments.
pub(crate) struct Op<A> {
    address: Address,
    /// The key's digest, the `key` column.
    key: [u8; 32],
    args: A,
}

impl<A> Op<A> {
    pub(crate) fn new(address: &Address, args: A) -> Self {
        Self {
            key: key_digest(&address.key),
            address: address.clone(),
            args,
        }
    }
}

/// A kind of write: its statement, the arrays of its arguments it binds after now and the
/// addresses, and how an operation's answer is read from its row.
pub(crate) trait Write: Send + Sync + 'static {
    /// One operation's own arguments.
    type Args: Send + Sync + 'static;
    /// One operation's answer.
    type Output: Send + 'static;
    /// [`Kind::REPEATS`].
    const REPEATS: bool;

    /// Its statement.
    const STATEMENT: Statement;

    /// `query` with the arrays of the operations' own arguments bound, from `$4`.
    fn bind<'q>(
        query: Query<'q, Postgres, PgArguments>,
        ops: &[&'q Op<Self::Args>],
    ) -> Query<'q, Postgres, PgArguments>;

    /// The step of the operation whose row this is.
    fn answer(row: &PgRow, table: &str) -> Step<Self::Output>;

    /// The step of an operation the statement returned no row for.
    fn missing() -> Step<Self::Output>;
}

/// `W`, run in batches by a [`Queue`](idem_sql::batch::Queue).
pub(crate) struct Batched<W>(PhantomData<W>);

impl<W: Write> Kind for Batched<W> {
    type Op = Op<W::Args>;
    type Output = W::Output;
    type Runner = Shared;
    const REPEATS: bool = W::REPEATS;

    fn address(op: &Op<W::Args>) -> &Address {
        &op.address
    }

    /// One statement for `ops`, on a connection of the store's.
    async fn attempt(
        shared: &Shared,
        ops: &[&Op<W::Args>],
    ) -> Result<Vec<Step<W::Output>>, Failed> {
        let mut connection = shared.connection().await?;
        match run::<W>(shared, &mut connection, ops).await {
            Ok(steps) => {
                connection.keep(Ok(()))?;
                Ok(steps)
            }
            // The connection is closed: it may hold a half-read answer.
            Err(error) => Err(Failed {
                // Only an error the server reported for the statement is known to have rolled it
                // back, and only these can be one operation's doing.
                one_at_fault: matches!(error, sqlx::Error::Database(_))
                    && matches!(Failure::of(&error), Failure::Conflict | Failure::Corrupted),
                error: store_error(error, &shared.sql.table),
            }),
        }
    }
}

/// Runs `ops` as one statement of `W` on `connection`: one step per operation, in order.
pub(crate) async fn run<W: Write>(
    shared: &Shared,
    connection: &mut PgConnection,
    ops: &[&Op<W::Args>],
) -> Result<Vec<Step<W::Output>>, sqlx::Error> {
    let (scopes, keys): (Vec<&[u8]>, Vec<&[u8]>) = ops
        .iter()
        .map(|op| (op.address.scope.as_bytes().as_slice(), op.key.as_slice()))
        .unzip();
    let query = sqlx::query(query_text(shared.sql.text(W::STATEMENT)))
        .bind(shared.now())
        .bind(scopes)
        .bind(keys);
    let rows = W::bind(query, ops).fetch_all(connection).await?;
    let mut steps: Vec<Option<Step<W::Output>>> = ops.iter().map(|_| None).collect();
    for row in &rows {
        steps[position(row, ops.len())?] = Some(W::answer(row, &shared.sql.table));
    }
    Ok(steps
        .into_iter()
        .map(|step| step.unwrap_or_else(W::missing))
        .collect())
}

/// An operation's position, from the `n` column of its row (1-based, as `WITH ORDINALITY`).
fn position(row: &PgRow, len: usize) -> Result<usize, sqlx::Error> {
    let n: i64 = row.try_get("n")?;
    usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .filter(|&i| i < len)
        .ok_or_else(|| sqlx::Error::Protocol(format!("a batch of {len} has no operation {n}")))
}

/// [`Store::acquire`](idem_core::Store::acquire): `sql/acquire.sql`.
pub(crate) struct Acquire;

/// An acquisition's own arguments.
pub(crate) struct AcquireArgs {
    fingerprint: Fingerprint,
    terms: Terms,
}

impl AcquireArgs {
    /// The acquisition of `address` with `fingerprint` on `terms`.
    pub(crate) fn op(address: &Address, fingerprint: &Fingerprint, terms: Terms) -> Op<Self> {
        Op::new(
            address,
            Self {
                fingerprint: *fingerprint,
                terms,
            },
        )
    }
}

impl Write for Acquire {
    type Args = AcquireArgs;
    type Output = Acquisition;
    const REPEATS: bool = true;

    const STATEMENT: Statement = Statement::Acquire;

    fn bind<'q>(
        query: Query<'q, Postgres, PgArguments>,
        ops: &[&'q Op<AcquireArgs>],
    ) -> Query<'q, Postgres, PgArguments> {
        let fingerprints: Vec<&[u8]> = ops
            .iter()
            .map(|op| op.args.fingerprint.as_bytes().as_slice())
            .collect();
        let leases: Vec<i64> = ops
            .iter()
            .map(|op| sql_millis(op.args.terms.lease))
            .collect();
        let ttls: Vec<i64> = ops.iter().map(|op| sql_millis(op.args.terms.ttl)).collect();
        query.bind(fingerprints).bind(leases).bind(ttls)
    }

    fn answer(row: &PgRow, table: &str) -> Step<Acquisition> {
        match (Columns { row, table }).acquisition() {
            Ok(AcquireRow::Decided(acquisition)) => Step::Done(Ok(acquisition)),
            Ok(AcquireRow::Raced) => Step::Again,
            Err(error) => Step::Done(Err(error)),
        }
    }

    // The statement has a row for every acquisition.
    fn missing() -> Step<Acquisition> {
        let missing = sqlx::Error::Protocol("acquire.sql left out an acquisition".into());
        Step::Done(Err(StoreError::unavailable(missing)))
    }
}

/// [`Store::complete`](idem_core::Store::complete): `sql/complete.sql`.
pub(crate) struct Complete;

/// A completion's own arguments.
pub(crate) struct CompleteArgs {
    token: FencingToken,
    /// The outcome, encoded.
    response: Vec<u8>,
    ttl: Duration,
}

impl CompleteArgs {
    pub(crate) fn new(token: FencingToken, outcome: &Outcome, ttl: Duration) -> Self {
        Self {
            token,
            response: outcome.encode(),
            ttl,
        }
    }
}

impl Write for Complete {
    type Args = CompleteArgs;
    type Output = ();
    const REPEATS: bool = false;

    const STATEMENT: Statement = Statement::Complete;

    fn bind<'q>(
        query: Query<'q, Postgres, PgArguments>,
        ops: &[&'q Op<CompleteArgs>],
    ) -> Query<'q, Postgres, PgArguments> {
        let tokens: Vec<i64> = ops.iter().map(|op| sql_token(op.args.token)).collect();
        let responses: Vec<&[u8]> = ops.iter().map(|op| op.args.response.as_slice()).collect();
        let ttls: Vec<i64> = ops.iter().map(|op| sql_millis(op.args.ttl)).collect();
        query.bind(tokens).bind(responses).bind(ttls)
    }

    fn answer(_: &PgRow, _: &str) -> Step<()> {
        Step::Done(Ok(()))
    }

    fn missing() -> Step<()> {
        lease_lost()
    }
}

/// [`Store::renew`](idem_core::Store::renew): `sql/renew.sql`.
pub(crate) struct Renew;

/// A renewal's own arguments.
pub(crate) struct RenewArgs {
    pub(crate) token: FencingToken,
    pub(crate) lease: Duration,
}

impl Write for Renew {
    type Args = RenewArgs;
    type Output = Timestamp;
    const REPEATS: bool = false;

    const STATEMENT: Statement = Statement::Renew;

    fn bind<'q>(
        query: Query<'q, Postgres, PgArguments>,
        ops: &[&'q Op<RenewArgs>],
    ) -> Query<'q, Postgres, PgArguments> {
        let tokens: Vec<i64> = ops.iter().map(|op| sql_token(op.args.token)).collect();
        let leases: Vec<i64> = ops.iter().map(|op| sql_millis(op.args.lease)).collect();
        query.bind(tokens).bind(leases)
    }

    fn answer(row: &PgRow, table: &str) -> Step<Timestamp> {
        let until = row
            .try_get::<i64, _>("lease_until")
            .map_err(|error| store_error(error, table))
            .map(|until| Timestamp::from_millis(u64::try_from(until).unwrap_or(0)));
        Step::Done(until)
    }

    fn missing() -> Step<Timestamp> {
        lease_lost()
    }
}

/// [`Store::release`](idem_core::Store::release): `sql/release.sql`. Its own argument is the
/// token.
pub(crate) struct Release;

impl Write for Release {
    type Args = FencingToken;
    type Output = ();
    const REPEATS: bool = false;

    const STATEMENT: Statement = Statement::Release;

    fn bind<'q>(
        query: Query<'q, Postgres, PgArguments>,
        ops: &[&'q Op<FencingToken>],
    ) -> Query<'q, Postgres, PgArguments> {
        let tokens: Vec<i64> = ops.iter().map(|op| sql_token(op.args)).collect();
        query.bind(tokens)
    }

    fn answer(_: &PgRow, _: &str) -> Step<()> {
        Step::Done(Ok(()))
    }

    fn missing() -> Step<()> {
        lease_lost()
    }
}

/// A holder-only write that changed no row: the token does not hold the key.
fn lease_lost<T>() -> Step<T> {
    Step::Done(Err(StoreError::LeaseLost))
}
