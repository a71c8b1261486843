//! The four writes that run in batches ([`idem_sql::batch`]): their statements, and how each
//! operation's answer is read from the rows.
//!
//! A batch is one round trip: `START TRANSACTION`, the statements of [`Write::statements`], and
//! `COMMIT`, sent together as one compound statement (MariaDB) or as several statements in one
//! text (MySQL; see [`BatchForm`](crate::BatchForm)), with every value a literal (see
//! [`Batch`]). Its time is set once, `@idem_now`, so that every statement decides at the same
//! instant. A batch whose text would pass [`ROUND_TRIP_BYTES`] (large responses being
//! completed) is sent in several round trips, still one transaction.
//!
//! The holder-only writes (complete, renew, release) first read, and lock, the records that the
//! tokens hold: those rows are the operations that succeed, and the next statement changes them
//! and only them. On MariaDB they first try without the read: the change alone, kept when it
//! changed one record per operation, else undone ([`Holding::AllAtOnce`]).
//! Acquisitions are [`Acquire`]'s.

use std::{
    collections::{HashMap, HashSet},
    marker::PhantomData,
    time::Duration,
};

use idem_core::{
    Acquisition, Address, FencingToken, Fingerprint, Lease, Outcome, StoreError, Terms, Timestamp,
};
use idem_sql::{
    Failure,
    batch::{Failed, Kind, Step},
};
use sqlx::{AssertSqlSafe, MySqlConnection, mysql::MySqlRow};

use crate::{
    Error,
    error::store_error,
    key_digest::key_digest,
    row::{COMPLETED, Columns, PROCESSING, millis, sql_token, timestamp},
    shared::Shared,
    sql::{Batch, BatchForm},
};

/// The most bytes of statements sent in one round trip, unless one operation alone is larger:
/// well under the servers' smallest default `max_allowed_packet` (16 MiB on MariaDB).
pub(crate) const ROUND_TRIP_BYTES: usize = 4 << 20;

/// The index every statement of a batch reads its records by: `address`, the unique index on
/// `(scope, key_digest)`. A statement names its records by address, but its other conditions
/// (`state = 'processing'`) fit the `(state, created_at, …)` index too, and the planner, left to
/// itself, chose that index for some completions: they then locked every processing record they
/// scanned, and deadlocked with their neighbours.
pub(crate) const BY_ADDRESS: &str = " FORCE INDEX (address)";

/// One write: the address it is about, as the statements take it, and its own arguments.
pub(crate) struct Op<A> {
    address: Address,
    /// The key's digest, the `key_digest` column.
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

    fn scope(&self) -> &[u8] {
        self.address.scope.as_bytes()
    }

    /// `scope = X'…' AND key_digest = X'…'`.
    fn is_row(&self, batch: &mut Batch) {
        batch
            .push("scope = ")
            .bytes(self.scope())
            .push(" AND key_digest = ")
            .bytes(&self.key);
    }
}

/// Each operation's fencing token, for the statements that name records by token too.
type TokenOf<'f, A> = &'f dyn Fn(&Op<A>) -> FencingToken;

/// The records of `ops` by address, and by token when `token` gives each operation's: `scope =
/// X'…' AND key_digest = X'…'[ AND token = …]` for one operation, `(scope, key_digest[, token])
/// IN ((X'…', X'…'[, …]), …)` for more.
///
/// Both servers read a row constructor `IN` list of several rows as ranges of the `address` index
/// (MySQL since 5.7.3), and parse and plan it for less than the same records written as
/// `(scope = … AND key_digest = …) OR …`: two items a record, not five. A list of one row is not
/// a range to MariaDB's `UPDATE`, which then scans, and locks, the whole table. This module's
/// tests have the server plan every statement, of one operation and of two.
fn rows_of<A>(batch: &mut Batch, ops: &[&Op<A>], token: Option<TokenOf<'_, A>>) {
    if let [op] = ops {
        op.is_row(batch);
        if let Some(token) = token {
            batch.push(" AND token = ").number(sql_token(token(op)));
        }
        return;
    }
    batch.push(match token {
        Some(_) => "(scope, key_digest, token) IN (",
        None => "(scope, key_digest) IN (",
    });
    for (n, op) in ops.iter().enumerate() {
        batch
            .push(if n == 0 { "(" } else { ", (" })
            .bytes(op.scope())
            .push(", ")
            .bytes(&op.key);
        if let Some(token) = token {
            batch.push(", ").number(sql_token(token(op)));
        }
        batch.push(")");
    }
    batch.push(")");
}

/// A kind of write: its statements and how its operations' answers are read from their rows.
pub(crate) trait Write: Send + Sync + 'static {
    /// One operation's own arguments.
    type Args: Send + Sync + 'static;
    /// One operation's answer.
    type Output: Send + 'static;
    /// [`Kind::REPEATS`].
    const REPEATS: bool;

    /// About how many bytes `op` adds to a batch's text.
    fn size(op: &Op<Self::Args>) -> usize;

    /// Appends the statements that run `ops` (at distinct addresses, unless
    /// [`REPEATS`](Self::REPEATS)) to `batch`, after `@idem_now` is set, inside `transaction`,
    /// finding the records as `how` says ([`Holding::AllAtOnce`] only for a write with
    /// [`ALL_AT_ONCE`](Self::ALL_AT_ONCE)).
    fn statements(
        batch: &mut Batch,
        table: &str,
        ops: &[&Op<Self::Args>],
        transaction: Transaction,
        how: Holding,
    );

    /// Each operation's step, from the rows the statements returned.
    fn answers(
        rows: &[MySqlRow],
        table: &str,
        ops: &[&Op<Self::Args>],
    ) -> Result<Vec<Step<Self::Output>>, StoreError>;

    /// Whether this write's statements can be [`Holding::AllAtOnce`]: its operations usually all
    /// succeed.
    const ALL_AT_ONCE: bool = false;

    /// An operation's answer when every one of its batch succeeded, the batch's time `now`.
    fn succeeded(_now: i64, _op: &Op<Self::Args>) -> Self::Output {
        unreachable!("a write without ALL_AT_ONCE")
    }
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

    /// One transaction for `ops`, on a connection of the store's.
    async fn attempt(
        shared: &Shared,
        ops: &[&Op<W::Args>],
    ) -> Result<Vec<Step<W::Output>>, Failed> {
        let mut connection = shared.connection().await?;
        match run::<W>(shared, &mut connection, ops, Transaction::Own).await {
            Ok(steps) => {
                connection.keep(Ok(()))?;
                Ok(steps)
            }
            // The connection is closed, and with it the transaction: the server rolls it back.
            Err(failed) => Err(failed),
        }
    }
}

/// Whose transaction a batch runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transaction {
    /// Its own: begun and committed around its statements.
    Own,
    /// The caller's, open on the connection (the transactional API).
    Callers,
}

/// Runs `ops` as one batch of `W` on `connection`: one step per operation, in order. An error is
/// the whole batch's.
pub(crate) async fn run<W: Write>(
    shared: &Shared,
    connection: &mut MySqlConnection,
    ops: &[&Op<W::Args>],
    transaction: Transaction,
) -> Result<Vec<Step<W::Output>>, Failed> {
    let table = &shared.sql.table;
    let failed = |error: sqlx::Error| Failed {
        // Only an error the server reported is known to have been one statement's; with it, the
        // transaction is rolled back (the connection is closed), and only these can be one
        // operation's doing.
        one_at_fault: matches!(error, sqlx::Error::Database(_))
            && matches!(Failure::of(&error), Failure::Conflict | Failure::Corrupted),
        error: store_error(error, table),
    };
    let mut steps: Vec<Option<Step<W::Output>>> = ops.iter().map(|_| None).collect();
    let chunks = chunks::<W>(ops);
    // Whether the transaction has begun and the batch's time is set: by the first text sent.
    let mut begun = false;
    let begin = |batch: &mut Batch, begun: &mut bool| {
        if !*begun {
            if transaction == Transaction::Own {
                batch.statement("START TRANSACTION");
            }
            batch.now(shared.now());
            *begun = true;
        }
    };
    for (number, chunk) in chunks.iter().enumerate() {
        let chunk_ops: Vec<&Op<W::Args>> = chunk.iter().map(|&at| ops[at]).collect();
        let commit = number + 1 == chunks.len() && transaction == Transaction::Own;
        if W::ALL_AT_ONCE && shared.form == BatchForm::Compound {
            let mut batch = Batch::new(shared.form);
            begin(&mut batch, &mut begun);
            let how = Holding::AllAtOnce { commit };
            W::statements(&mut batch, table, &chunk_ops, transaction, how);
            let rows = send(shared, connection, batch).await.map_err(failed)?;
            if let [row] = rows.as_slice() {
                let now: i64 = Columns { row, table }.get("now").map_err(Failed::from)?;
                for (&at, op) in chunk.iter().zip(&chunk_ops) {
                    steps[at] = Some(Step::Done(Ok(W::succeeded(now, op))));
                }
                continue;
            }
            // One did not succeed: its change was undone, and the chunk reads first.
        }
        let mut batch = Batch::new(shared.form);
        begin(&mut batch, &mut begun);
        W::statements(
            &mut batch,
            table,
            &chunk_ops,
            transaction,
            Holding::ReadFirst,
        );
        if commit {
            batch.statement("COMMIT");
        }
        let rows = send(shared, connection, batch).await.map_err(failed)?;
        let answers = W::answers(&rows, table, &chunk_ops).map_err(Failed::from)?;
        for (&at, step) in chunk.iter().zip(answers) {
            steps[at] = Some(step);
        }
    }
    Ok(steps
        .into_iter()
        .map(|step| step.expect("every chunk answers each of its operations"))
        .collect())
}

/// Sends `batch` in one round trip: the rows its statements returned.
async fn send(
    shared: &Shared,
    connection: &mut MySqlConnection,
    batch: Batch,
) -> Result<Vec<MySqlRow>, sqlx::Error> {
    let text = batch.finish();
    shared
        .within(sqlx::raw_sql(AssertSqlSafe(text)).fetch_all(&mut *connection))
        .await
}

/// The positions of `ops` in groups whose text stays under [`ROUND_TRIP_BYTES`]. (A later
/// group runs in the same transaction, so it sees what the earlier ones wrote.)
fn chunks<W: Write>(ops: &[&Op<W::Args>]) -> Vec<Vec<usize>> {
    let mut chunks: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for (at, op) in ops.iter().enumerate() {
        let size = W::size(op);
        match chunks.last_mut() {
            Some(chunk) if bytes + size <= ROUND_TRIP_BYTES => chunk.push(at),
            _ => {
                chunks.push(vec![at]);
                bytes = 0;
            }
        }
        bytes += size;
    }
    chunks
}

/// Which of `ops` (at distinct addresses) a holder-only write's `SELECT` returned, by the rows'
/// addresses: for each operation, its row's position in `rows`.
fn held(
    rows: &[MySqlRow],
    table: &str,
    ops: &[&Op<impl Sized>],
) -> Result<Vec<Option<usize>>, StoreError> {
    let mut at = HashMap::with_capacity(ops.len());
    for (n, op) in ops.iter().enumerate() {
        at.insert((*op.address.scope.as_bytes(), op.key), n);
    }
    let mut found = vec![None; ops.len()];
    for (index, row) in rows.iter().enumerate() {
        let columns = Columns { row, table };
        let address = (columns.digest("scope")?, columns.digest("key_digest")?);
        let n = *at
            .get(&address)
            .ok_or_else(|| StoreError::corrupted(Error::NotReadBack))?;
        found[n] = Some(index);
    }
    Ok(found)
}

/// [`Store::acquire`](idem_core::Store::acquire).
///
/// 1. One `INSERT … ON DUPLICATE KEY UPDATE` creates each record that is absent, replaces each
///    that has expired, and takes over each whose lease ran out (same fingerprint, still
///    processing), exactly as `idem_core::transition::plan_acquire` decides; it locks every
///    record of the batch. A written record gets a placeholder token: 0 when created, -1 when
///    taken over. The conditions read only columns that no earlier assignment changed, or the
///    placeholder, so that they hold whether the server assigns left to right (MySQL, MariaDB)
///    or all at once (MariaDB's `SIMULTANEOUS_ASSIGNMENT`).
/// 2. A token is drawn (a row inserted into `<table>_tokens`): after the records are locked, so
///    larger than every token their earlier holders drew, even of records released or purged
///    since. One token serves the whole batch: tokens grow per address, and a batch holds each
///    address once.
/// 3. The records are read back, locked: a placeholder means acquired; any other record is
///    answered as it stands (replay, mismatch, in flight).
/// 4. The placeholders become the token, and the token's row is deleted.
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

/// Created, in the `token` column until the token is drawn.
const CREATED: i64 = 0;
/// Taken over, in the `token` column until the token is drawn.
const TAKEN_OVER: i64 = -1;

impl Write for Acquire {
    type Args = AcquireArgs;
    type Output = Acquisition;
    const REPEATS: bool = true;

    fn size(_: &Op<AcquireArgs>) -> usize {
        600
    }

    /// Of several acquisitions of one address, only the first writes. (An acquisition has one
    /// form: it reads the records after writing them.)
    fn statements(
        batch: &mut Batch,
        table: &str,
        ops: &[&Op<AcquireArgs>],
        transaction: Transaction,
        _: Holding,
    ) {
        let mut seen = HashSet::with_capacity(ops.len());
        let ops: Vec<&Op<AcquireArgs>> = ops
            .iter()
            .copied()
            .filter(|op| seen.insert(&op.address))
            .collect();
        // In the store's own transactions (`READ COMMITTED`), the records that exist are locked
        // first, each alone. An insert that finds its address taken waits for the record with a
        // lock on the gap before it in `address` as well (InnoDB's duplicate check on a unique
        // secondary index), and while it waits, every other new address in that gap waits
        // behind it: for as long as the transaction holding the record lasts, a caller's own.
        // An `UPDATE` that changes nothing keeps its locks and returns no rows. Not in a
        // caller's transaction: under `REPEATABLE READ` the `UPDATE` would lock the gap where
        // each new address goes, and two acquisitions of neighbouring new keys would deadlock.
        if transaction == Transaction::Own {
            batch
                .push("UPDATE ")
                .push(table)
                .push(BY_ADDRESS)
                .push(" SET token = token WHERE ");
            rows_of(batch, &ops, None);
            batch.statement("");
        }
        batch.push("INSERT INTO ").push(table).push(
            " (scope, key_digest, fingerprint, state, token, lease_until, created_at, \
             completed_at, expires_at, response) VALUES ",
        );
        for (n, op) in ops.iter().enumerate() {
            let lease = millis(op.args.terms.lease);
            let ttl = millis(op.args.terms.ttl);
            batch
                .push(if n == 0 { "(" } else { ", (" })
                .bytes(op.scope())
                .push(", ")
                .bytes(&op.key)
                .push(", ")
                .bytes(op.args.fingerprint.as_bytes())
                .push(", 'processing', 0, @idem_now + ")
                .number(lease)
                .push(", @idem_now, NULL, @idem_now + ")
                .number(lease.max(ttl))
                .push(", NULL)");
        }
        // Expired (absent) / taken over: the decisions, on the row as locked.
        let expired = "expires_at <= @idem_now";
        let lease_over = "(fingerprint = VALUES(fingerprint) AND state = 'processing' \
                          AND lease_until <= @idem_now)";
        batch.statement(&format!(
            " ON DUPLICATE KEY UPDATE \
             token = IF({expired}, {CREATED}, IF({lease_over}, {TAKEN_OVER}, token)), \
             fingerprint = IF({expired}, VALUES(fingerprint), fingerprint), \
             state = IF({expired}, 'processing', state), \
             created_at = IF({expired}, VALUES(created_at), created_at), \
             completed_at = IF({expired}, NULL, completed_at), \
             response = IF({expired}, NULL, response), \
             lease_until = IF(token <= 0 OR {expired} OR {lease_over}, \
                 VALUES(lease_until), lease_until), \
             expires_at = IF({expired}, VALUES(expires_at), \
                 IF(token <= 0 OR {lease_over}, GREATEST(expires_at, VALUES(lease_until)), \
                     expires_at))"
        ));
        batch.push("INSERT INTO `");
        batch.push(table.trim_matches('`'));
        batch.statement("_tokens` (id) VALUES (NULL)");
        batch
            .push(
                "SELECT scope, key_digest, fingerprint, state, token, lease_until, expires_at, \
                 response, @idem_now AS now, CAST(LAST_INSERT_ID() AS SIGNED) AS issued FROM ",
            )
            .push(table)
            .push(BY_ADDRESS)
            .push(" WHERE ");
        rows_of(batch, &ops, None);
        batch.statement(" FOR UPDATE");
        batch
            .push("UPDATE ")
            .push(table)
            .push(BY_ADDRESS)
            .push(" SET token = LAST_INSERT_ID() WHERE token <= 0 AND ");
        rows_of(batch, &ops, None);
        batch.statement("");
        batch.push("DELETE FROM `");
        batch.push(table.trim_matches('`'));
        batch.statement("_tokens` WHERE id = LAST_INSERT_ID()");
    }

    fn answers(
        rows: &[MySqlRow],
        table: &str,
        ops: &[&Op<AcquireArgs>],
    ) -> Result<Vec<Step<Acquisition>>, StoreError> {
        let mut by_address = HashMap::with_capacity(rows.len());
        for row in rows {
            let columns = Columns { row, table };
            by_address.insert(
                (columns.digest("scope")?, columns.digest("key_digest")?),
                row,
            );
        }
        // The first acquisition of an address is answered by the row; a later one as if it came
        // right after: a record the first acquired is in flight for it.
        let mut seen = HashSet::with_capacity(ops.len());
        Ok(ops
            .iter()
            .map(|op| {
                let scope: [u8; 32] = *op.address.scope.as_bytes();
                let first = seen.insert(&op.address);
                Step::Done(match by_address.get(&(scope, op.key)) {
                    Some(row) => acquisition(&Columns { row, table }, &op.args.fingerprint, first),
                    None => Err(StoreError::corrupted(Error::NotReadBack)),
                })
            })
            .collect())
    }
}

/// What the row read back after an acquisition says: acquired (a placeholder token, for the
/// `first` acquisition of the address in the batch), or the record as it stands.
fn acquisition(
    columns: &Columns<'_>,
    fingerprint: &Fingerprint,
    first: bool,
) -> Result<Acquisition, StoreError> {
    let token: i64 = columns.get("token")?;
    if token <= 0 && first {
        let issued: i64 = columns.get("issued")?;
        return Ok(Acquisition::Acquired(Lease {
            token: FencingToken::new(u64::try_from(issued).unwrap_or(0)),
            until: timestamp(columns.required(PROCESSING, "lease_until")?),
            took_over: token == TAKEN_OVER,
        }));
    }
    if columns.fingerprint()? != *fingerprint {
        return Ok(Acquisition::Mismatch);
    }
    Ok(match columns.get::<&str>("state")? {
        COMPLETED => Acquisition::Completed(columns.outcome()?),
        PROCESSING => {
            let until: i64 = columns.required(PROCESSING, "lease_until")?;
            let now: i64 = columns.get("now")?;
            let left = u64::try_from(until.saturating_sub(now)).unwrap_or(0);
            Acquisition::InFlight {
                retry_after: Duration::from_millis(left),
            }
        }
        other => return Err(StoreError::corrupted(Error::UnknownState(other.to_owned()))),
    })
}

/// [`Store::complete`](idem_core::Store::complete).
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
    const ALL_AT_ONCE: bool = true;

    fn size(op: &Op<CompleteArgs>) -> usize {
        500 + 2 * op.args.response.len()
    }

    fn statements(
        batch: &mut Batch,
        table: &str,
        ops: &[&Op<CompleteArgs>],
        _: Transaction,
        how: Holding,
    ) {
        let assignments = |batch: &mut Batch| {
            batch.push(
                "state = 'completed', lease_until = NULL, completed_at = @idem_now, \
                 expires_at = @idem_now + ",
            );
            each(batch, ops, |op| Value::Number(millis(op.args.ttl)));
            batch.push(", response = ");
            each(batch, ops, |op| Value::Bytes(&op.args.response));
        };
        let change = HolderChange::Update(&assignments);
        holder_statements(batch, table, ops, |op| op.args.token, change, how);
    }

    fn succeeded(_now: i64, _op: &Op<CompleteArgs>) {}

    fn answers(
        rows: &[MySqlRow],
        table: &str,
        ops: &[&Op<CompleteArgs>],
    ) -> Result<Vec<Step<()>>, StoreError> {
        Ok(held(rows, table, ops)?
            .into_iter()
            .map(|found| match found {
                Some(_) => Step::Done(Ok(())),
                None => lease_lost(),
            })
            .collect())
    }
}

/// [`Store::renew`](idem_core::Store::renew).
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
    const ALL_AT_ONCE: bool = true;

    fn size(_: &Op<RenewArgs>) -> usize {
        500
    }

    fn statements(
        batch: &mut Batch,
        table: &str,
        ops: &[&Op<RenewArgs>],
        _: Transaction,
        how: Holding,
    ) {
        let lease = |batch: &mut Batch| {
            batch.push("@idem_now + ");
            each(batch, ops, |op| Value::Number(millis(op.args.lease)));
        };
        let assignments = |batch: &mut Batch| {
            batch.push("lease_until = ");
            lease(batch);
            batch.push(", expires_at = GREATEST(expires_at, ");
            lease(batch);
            batch.push(")");
        };
        let change = HolderChange::Update(&assignments);
        holder_statements(batch, table, ops, |op| op.args.token, change, how);
    }

    fn succeeded(now: i64, op: &Op<RenewArgs>) -> Timestamp {
        timestamp(now.saturating_add(millis(op.args.lease)))
    }

    /// The new lease ends the lease's length after the batch's "now", read with the rows.
    fn answers(
        rows: &[MySqlRow],
        table: &str,
        ops: &[&Op<RenewArgs>],
    ) -> Result<Vec<Step<Timestamp>>, StoreError> {
        held(rows, table, ops)?
            .into_iter()
            .zip(ops)
            .map(|(found, op)| match found {
                Some(index) => {
                    let now: i64 = Columns {
                        row: &rows[index],
                        table,
                    }
                    .get("now")?;
                    Ok(Step::Done(Ok(Self::succeeded(now, op))))
                }
                None => Ok(lease_lost()),
            })
            .collect()
    }
}

/// [`Store::release`](idem_core::Store::release). Its own argument is the token.
pub(crate) struct Release;

impl Write for Release {
    type Args = FencingToken;
    type Output = ();
    const REPEATS: bool = false;
    const ALL_AT_ONCE: bool = true;

    fn size(_: &Op<FencingToken>) -> usize {
        300
    }

    fn statements(
        batch: &mut Batch,
        table: &str,
        ops: &[&Op<FencingToken>],
        _: Transaction,
        how: Holding,
    ) {
        holder_statements(batch, table, ops, |op| op.args, HolderChange::Delete, how);
    }

    fn succeeded(_now: i64, _op: &Op<FencingToken>) {}

    fn answers(
        rows: &[MySqlRow],
        table: &str,
        ops: &[&Op<FencingToken>],
    ) -> Result<Vec<Step<()>>, StoreError> {
        Ok(held(rows, table, ops)?
            .into_iter()
            .map(|found| match found {
                Some(_) => Step::Done(Ok(())),
                None => lease_lost(),
            })
            .collect())
    }
}

/// What a holder-only write does to the records its tokens hold.
enum HolderChange<'f> {
    /// `UPDATE … SET` the assignments that this writes.
    Update(&'f dyn Fn(&mut Batch)),
    /// `DELETE` them.
    Delete,
}

/// How a write's statements find the records its operations hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Read and lock them first, then change those: the rows read say which operations succeed.
    ReadFirst,
    /// For a server that runs compound statements (MariaDB): change them at once, without
    /// reading them first, and keep the change (with `COMMIT` when `commit`) only if every
    /// operation succeeded, answering with one row, `now`; else undo it and answer with no row,
    /// and the [`ReadFirst`](Self::ReadFirst) statements run instead.
    AllAtOnce { commit: bool },
}

/// The holder-only writes' statements, on the records of `ops` (at distinct addresses) that
/// their tokens hold, live and processing, found as `how` says, and changed as `change` says.
///
/// Every statement names the records by address and token ([`rows_of`]), a range read of the
/// `address` index; an operation's own value in an assignment is a `CASE` on the addresses
/// ([`each`]). No derived table of the operations is joined: MariaDB optimises and materialises
/// one per statement, on disk when a column is a blob, and a multi-table `UPDATE` keeps its rows
/// to change in a temporary table of its own.
///
/// All at once, the change runs after a savepoint and `ROW_COUNT()` decides: as many records
/// changed as operations means that each operation's record was held (the addresses are
/// distinct), and the batch's time is the answer; fewer (a lease lost, or a renewal that left
/// a lease as it was) rolls back to the savepoint, and the batch reads first after all. That
/// saves a usual completion the `SELECT … FOR UPDATE`.
fn holder_statements<A>(
    batch: &mut Batch,
    table: &str,
    ops: &[&Op<A>],
    token: impl Fn(&Op<A>) -> FencingToken,
    change: HolderChange<'_>,
    how: Holding,
) {
    let condition = |batch: &mut Batch| {
        batch.push(" WHERE ");
        rows_of(batch, ops, Some(&token));
        batch.push(" AND state = 'processing' AND @idem_now < expires_at");
    };
    match how {
        Holding::ReadFirst => {
            batch
                .push("SELECT scope, key_digest, @idem_now AS now FROM ")
                .push(table)
                .push(BY_ADDRESS);
            condition(batch);
            batch.statement(" FOR UPDATE");
        }
        Holding::AllAtOnce { .. } => {
            batch.statement("SAVEPOINT idem_all_at_once");
        }
    }
    match change {
        HolderChange::Update(assignments) => {
            batch
                .push("UPDATE ")
                .push(table)
                .push(BY_ADDRESS)
                .push(" SET ");
            assignments(batch);
        }
        HolderChange::Delete => {
            // The multi-table form: MySQL takes index hints in no other `DELETE`.
            batch
                .push("DELETE r FROM ")
                .push(table)
                .push(" AS r")
                .push(BY_ADDRESS);
        }
    }
    condition(batch);
    batch.statement("");
    if let Holding::AllAtOnce { commit } = how {
        let count = i64::try_from(ops.len()).expect("a batch's length fits in an i64");
        batch
            .push("IF ROW_COUNT() = ")
            .number(count)
            .push(" THEN SELECT @idem_now AS now;");
        if commit {
            batch.push(" COMMIT;");
        }
        batch.statement(" ELSE ROLLBACK TO SAVEPOINT idem_all_at_once; END IF");
    }
}

/// An operation's own value in an assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'a> {
    Number(i64),
    Bytes(&'a [u8]),
}

/// Each operation's value, on the record at its address: `CASE WHEN scope = … AND key_digest =
/// … THEN v … END`, or just `v` when every operation's is the same (the usual TTL or lease).
fn each<'o, A: 'o>(batch: &mut Batch, ops: &[&'o Op<A>], value: impl Fn(&'o Op<A>) -> Value<'o>) {
    let write = |batch: &mut Batch, value: Value<'_>| {
        match value {
            Value::Number(number) => batch.number(number),
            Value::Bytes(bytes) => batch.bytes(bytes),
        };
    };
    let first = ops.first().map(|&op| value(op));
    if let Some(first) = first.filter(|&first| ops.iter().all(|&op| value(op) == first)) {
        write(batch, first);
        return;
    }
    batch.push("CASE");
    for &op in ops {
        batch.push(" WHEN ");
        op.is_row(batch);
        batch.push(" THEN ");
        write(batch, value(op));
    }
    batch.push(" END");
}

/// A holder-only write that changed no row: the token does not hold the key.
fn lease_lost<T>() -> Step<T> {
    Step::Done(Err(StoreError::LeaseLost))
}

#[cfg(test)]
mod tests {
    use idem_core::StoredResponse;

    use super::*;

    fn text<W: Write>(ops: &[&Op<W::Args>]) -> String {
        let mut batch = Batch::new(BatchForm::Statements);
        W::statements(
            &mut batch,
            "`keys`",
            ops,
            Transaction::Own,
            Holding::ReadFirst,
        );
        batch.finish()
    }

    /// The acquisitions, completions, renewals and releases of the first `records` of three
    /// records: each write's text.
    fn texts(records: usize) -> [String; 4] {
        let addresses: Vec<Address> = ["a", "b", "c"][..records]
            .iter()
            .map(|key| Address::anonymous(key.parse().unwrap()))
            .collect();
        let terms = Terms {
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(3_600),
        };
        let token = FencingToken::new(7);
        let outcome: Outcome = StoredResponse::new(200).into();
        let acquisitions: Vec<_> = addresses
            .iter()
            .map(|a| AcquireArgs::op(a, &Fingerprint::from_bytes([1; 32]), terms))
            .collect();
        let completions: Vec<_> = addresses
            .iter()
            .map(|a| Op::new(a, CompleteArgs::new(token, &outcome, terms.ttl)))
            .collect();
        let renewals: Vec<_> = addresses
            .iter()
            .map(|a| {
                Op::new(
                    a,
                    RenewArgs {
                        token,
                        lease: terms.lease,
                    },
                )
            })
            .collect();
        let releases: Vec<_> = addresses.iter().map(|a| Op::new(a, token)).collect();
        [
            text::<Acquire>(&acquisitions.iter().collect::<Vec<_>>()),
            text::<Complete>(&completions.iter().collect::<Vec<_>>()),
            text::<Renew>(&renewals.iter().collect::<Vec<_>>()),
            text::<Release>(&releases.iter().collect::<Vec<_>>()),
        ]
    }

    /// The statements of `text` that read or change records.
    fn on_records(text: &str) -> impl Iterator<Item = &str> {
        text.split(";\n").filter(|statement| {
            ["SELECT ", "UPDATE ", "DELETE "]
                .iter()
                .any(|verb| statement.starts_with(verb))
                && statement.contains("`keys`")
        })
    }

    /// The server plans every statement on the records as a range read of the `address` index: a
    /// plan that scanned the whole index (what `FORCE INDEX` falls back to when the conditions
    /// give no range) would lock every record of the table.
    #[tokio::test]
    async fn the_server_reads_a_range_of_the_address_index_for_every_statement() {
        use sqlx::{Connection as _, Row as _};
        let url = idem_test_support::require!(Mysql);
        let database = idem_test_support::MysqlDatabase::create(&url).await;
        let mut connection = database.connect().await;
        crate::sql::Sql::new(&"keys".parse().unwrap())
            .migrator()
            .run(&mut connection)
            .await
            .unwrap();
        // The batch's time, and the records, held by the token the texts name, so that a lookup
        // finds each.
        let records = format!(
            "SET @idem_now = 1700000000000;\n{}UPDATE `keys` SET token = 7",
            texts(3)[0]
        );
        sqlx::raw_sql(AssertSqlSafe(records))
            .execute(&mut connection)
            .await
            .unwrap();
        for text in texts(1).into_iter().chain(texts(2)) {
            for statement in on_records(&text) {
                let plan = sqlx::raw_sql(AssertSqlSafe(format!("EXPLAIN {statement}")))
                    .fetch_all(&mut connection)
                    .await
                    .unwrap();
                assert_eq!(plan.len(), 1, "{statement}");
                let access: Option<String> = plan[0].try_get("type").unwrap();
                let key: Option<String> = plan[0].try_get("key").unwrap();
                // One record's `SELECT`: a lookup of the index; any other: a range of it.
                assert!(
                    matches!(access.as_deref(), Some("range" | "const")),
                    "{access:?}: {statement}"
                );
                assert_eq!(key.as_deref(), Some("address"), "{statement}");
            }
        }
        connection.close().await.unwrap();
    }

    /// This connection's `SAVEPOINT`s and `ROLLBACK TO SAVEPOINT`s so far.
    async fn savepoints(connection: &mut MySqlConnection) -> (u64, u64) {
        use sqlx::Row as _;
        let rows = sqlx::raw_sql(
            "SHOW SESSION STATUS WHERE Variable_name IN \
             ('Com_savepoint', 'Com_rollback_to_savepoint')",
        )
        .fetch_all(&mut *connection)
        .await
        .unwrap();
        let count = |name: &str| -> u64 {
            let row = rows
                .iter()
                .find(|row| row.get::<String, _>("Variable_name") == name)
                .unwrap();
            row.get::<String, _>("Value").parse().unwrap()
        };
        (count("Com_savepoint"), count("Com_rollback_to_savepoint"))
    }

    /// Completions that all hold their records are made at once, without reading the records
    /// first; a batch in which one does not is undone and read first, and each completion gets
    /// its own answer.
    #[tokio::test]
    async fn completions_that_all_hold_their_records_are_made_at_once() {
        use idem_core::{Acquisition, Store as _};
        use sqlx::Connection as _;
        let url = idem_test_support::require!(Mysql);
        let database = idem_test_support::MysqlDatabase::create(&url).await;
        let options = crate::MysqlOptions::from_url(&database.url()).unwrap();
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .connect_with(database.connect_options())
            .await
            .unwrap();
        crate::MysqlStore::migrate(&pool, &options).await.unwrap();
        let store = crate::MysqlStore::open(pool, options).await.unwrap();
        let shared = store.shared();
        let terms = Terms {
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(3_600),
        };
        let mut held = Vec::new();
        for key in ["a", "b", "c"] {
            let address = Address::anonymous(key.parse().unwrap());
            let fingerprint = Fingerprint::from_bytes([1; 32]);
            match store.acquire(&address, &fingerprint, terms).await.unwrap() {
                Acquisition::Acquired(lease) => held.push((address, lease.token)),
                other => panic!("expected Acquired, got {other:?}"),
            }
        }
        let outcome: Outcome = StoredResponse::new(201).into();
        let completion = |(address, token): &(Address, FencingToken)| {
            Op::new(address, CompleteArgs::new(*token, &outcome, terms.ttl))
        };
        // MariaDB runs compound statements, MySQL does not: there every batch reads first.
        let at_once = u64::from(shared.form == BatchForm::Compound);
        let mut connection = database.connect().await;

        let (a, b) = (completion(&held[0]), completion(&held[1]));
        let before = savepoints(&mut connection).await;
        let steps = run::<Complete>(shared, &mut connection, &[&a, &b], Transaction::Own)
            .await
            .unwrap();
        assert!(
            matches!(steps.as_slice(), [Step::Done(Ok(())), Step::Done(Ok(()))]),
            "{steps:?}"
        );
        let after = savepoints(&mut connection).await;
        assert_eq!((after.0 - before.0, after.1 - before.1), (at_once, 0));

        // `a` again: completed already, its token holds no processing record.
        let c = completion(&held[2]);
        let steps = run::<Complete>(shared, &mut connection, &[&a, &c], Transaction::Own)
            .await
            .unwrap();
        assert!(
            matches!(
                steps.as_slice(),
                [Step::Done(Err(StoreError::LeaseLost)), Step::Done(Ok(()))]
            ),
            "{steps:?}"
        );
        let last = savepoints(&mut connection).await;
        assert_eq!((last.0 - after.0, last.1 - after.1), (at_once, at_once));
        for (address, _) in &held {
            let outcome = store.get(address).await.unwrap().unwrap().state;
            assert!(
                matches!(outcome, idem_core::RecordState::Completed { .. }),
                "{outcome:?}"
            );
        }
        connection.close().await.unwrap();
        store.close().await;
    }

    /// Every statement that reads or changes records goes by the `address` index, whatever the
    /// planner would choose.
    #[test]
    fn every_statement_on_the_records_is_pinned_to_the_address_index() {
        for text in texts(1).into_iter().chain(texts(2)) {
            let statements: Vec<&str> = on_records(&text).collect();
            assert!(statements.len() >= 2, "{text}");
            for statement in statements {
                assert!(
                    statement.contains("`keys` FORCE INDEX (address)")
                        || statement.contains("`keys` AS r FORCE INDEX (address)"),
                    "{statement}"
                );
            }
        }
    }
}
