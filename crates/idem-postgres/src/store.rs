//! [`PostgresStore`]: idempotency records in a PostgreSQL table.

use std::{fmt, future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, FencingToken, Fingerprint, ListPage,
    ListQuery, Newest, Outcome, Pace, Record, StateFilter, Store, StoreError, Terms, Timestamp,
    census::Board,
};
use idem_sql::{
    PurgeLoop,
    batch::{ATTEMPTS, BatchError, Limits, Queue, Step},
    query_text,
};
use sqlx::{
    PgConnection, PgPool, Postgres, Row,
    postgres::{PgArguments, PgRow},
    query::Query,
};

use crate::{
    Error, Migration, PostgresOptions, Purger, Statement,
    changes::Changes,
    connections::{Checkout, Connections, Session},
    error::store_error,
    key_digest::key_digest,
    row::{Columns, sql_millis, sql_time, sql_token, state_column},
    schema,
    shared::Shared,
    sql::Sql,
    writes::{
        Acquire, AcquireArgs, Batched, Complete, CompleteArgs, Op, Release, Renew, RenewArgs,
        Write, run,
    },
};

/// How many records one step of a census reads.
const CENSUS_STEP: i64 = 5_000;

/// A store in a PostgreSQL table, shared by every instance that connects to the database.
///
/// Every operation is one SQL statement (`acquire` included: see `sql/acquire.sql`), so a new key
/// costs two round trips (acquire, complete) and a replay one. Concurrent writes share them:
/// acquisitions, completions, renewals and releases that arrive while one of their kind is
/// running are committed together in the next statement, one round trip and one commit for the
/// batch, each operation with its own answer ([group commit](PostgresOptions::batch_size)).
/// Time is the database server's (`statement_timestamp()`), so instances with skewed clocks agree. Fencing tokens come from a
/// sequence. Completing, releasing or forgetting a record that a request found in flight notifies
/// the other instances through `LISTEN`/`NOTIFY` ([`Store::changed`]). For operators,
/// [`list`](Store::list) and [`census`](Store::census) read an index on `(state, created_at)`
/// rather than every record.
///
/// The parts of streamed responses ([`append_part`](Store::append_part),
/// [`read_parts`](Store::read_parts)) live in `<table>_parts` next to the records (migration 5),
/// one row per part: the record's scope and key digest, the execution's token, the part's index
/// and bytes, and its expiry (the record's when it was appended, on the server's clock). An
/// append is one statement outside the batches: it locks the record `FOR SHARE`, so that it is
/// fenced as a completion is, stores the part if its index is the next one, and notifies like a
/// completion when somebody found the record in flight. Parts outlive their record's completion
/// or release until [`discard_parts`](Store::discard_parts), [`forget`](Store::forget) or
/// [`purge_expired`](Store::purge_expired) removes them.
///
/// Beyond the [`Store`] trait, [`acquire_in`](Self::acquire_in) and
/// [`complete_in`](Self::complete_in) run in the caller's own transaction, so that business rows
/// and the key's completion commit or roll back together.
///
/// Clones share the pool and the listener.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse};
/// use idem_postgres::{PostgresOptions, PostgresStore};
///
/// let options = PostgresOptions::new();
/// let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
/// PostgresStore::migrate(&pool, &options).await?;
/// let store = PostgresStore::open(pool, options).await?;
///
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([7; 32]);
/// let terms = (&Policy::default()).into();
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// let response = Outcome::from(StoredResponse::new(201).body("charged"));
/// store.complete(&address, lease.token, &response, terms.ttl).await?;
/// assert_eq!(
///     store.acquire(&address, &fingerprint, terms).await?,
///     Acquisition::Completed(response)
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    shared: Arc<Shared>,
    changes: Changes,
    acquisitions: Queue<Batched<Acquire>>,
    completions: Queue<Batched<Complete>>,
    renewals: Queue<Batched<Renew>>,
    releases: Queue<Batched<Release>>,
}

impl PostgresStore {
    /// Connects to `url` (as sqlx reads it: see [`PostgresOptions::from_url`] for idem's own
    /// parameters) with a pool as [`PostgresOptions::pool_size`] and
    /// [`PostgresOptions::pool_timeout`] say, then [`open`](Self::open)s the store.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, Error> {
        let connection = url.parse().map_err(Error::Connect)?;
        Self::connect_with(options.connection(connection)).await
    }

    /// Connects as `options` say ([`PostgresOptions::from_url`], or
    /// [`PostgresOptions::connection`]) with [`PostgresOptions::connect_pool`], then
    /// [`open`](Self::open)s the store.
    pub async fn connect_with(options: PostgresOptions) -> Result<Self, Error> {
        let pool = options.connect_pool().await?;
        Self::open(pool, options).await
    }

    /// A store on `pool` (yours: the transactional API shares it), after checking that the
    /// schema, the table and its migrations are this build's: a missing or older table is
    /// [`Error::NotMigrated`] or [`Error::MigrationPending`], a changed one
    /// [`Error::UnexpectedColumn`] or [`Error::ChangedMigration`], a newer build's
    /// [`Error::UnknownMigration`].
    ///
    /// The store's own operations ([`Store`]'s methods) run on up to
    /// [`PostgresOptions::pool_size`] connections of its own, opened with `pool`'s connect
    /// options and the [statement timeout](PostgresOptions::statement_timeout): a sqlx pool
    /// pings every connection it takes back, a round trip per operation.
    /// `pool` serves the purger, readiness checks and your transactions.
    ///
    /// Starts the tasks that run the store's batches of writes (one per kind of write), which
    /// end when the last clone of the store is dropped.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub async fn open(pool: PgPool, options: PostgresOptions) -> Result<Self, Error> {
        let sql = Sql::new(&options.schema, &options.table);
        schema::verify(&pool, &sql, &sql.migrator(), options.url()).await?;
        let connect = options.with_timeouts((*pool.connect_options()).clone());
        let changes = Changes::new(&connect, sql.channel.clone());
        let connections = Connections::new(
            Session::new(connect),
            usize::try_from(options.pool_size).unwrap_or(usize::MAX),
            options.pool_timeout,
        );
        let shared = Arc::new(Shared {
            connections,
            sql,
            clock: options.test_clock,
        });
        let limits = Limits {
            batch_size: options.batch_size,
            in_flight: options.batches_in_flight,
            overlap: Duration::ZERO,
            capacity: options.queue_size,
            wait: options.pool_timeout,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                acquisitions: Queue::spawn(Arc::clone(&shared), limits),
                completions: Queue::spawn(Arc::clone(&shared), limits),
                renewals: Queue::spawn(Arc::clone(&shared), limits),
                releases: Queue::spawn(Arc::clone(&shared), limits),
                shared,
                changes,
            }),
        })
    }

    /// Creates the schema (if missing), the table, its sequence, the census board and the parts
    /// table (`<table>_census`, `<table>_parts`), or brings them up to date,
    /// then checks the table as [`open`](Self::open) does; says what it did. What `idem migrate`
    /// runs. Applied migrations are recorded in `<table>_migrations`; running it again, or from
    /// several processes at once, is safe.
    ///
    /// A table migrated by a newer build ([`Error::UnknownMigration`]) is left untouched.
    pub async fn migrate(pool: &PgPool, options: &PostgresOptions) -> Result<Migration, Error> {
        let sql = Sql::new(&options.schema, &options.table);
        schema::migrate(pool, &sql, options.url()).await
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The `LISTEN`/`NOTIFY` channel: `idem_` and 24 hex digits of a hash of the schema and
    /// table names. Payloads are the hex SHA-256 of a record's scope bytes followed by its key's
    /// SHA-256, sent when a record that a request found in flight is completed, released or
    /// forgotten, or a part is appended to its stream.
    pub fn channel(&self) -> &str {
        &self.inner.shared.sql.channel
    }

    /// The SQL the store runs for `statement`, with its schema and table filled in: for `EXPLAIN`,
    /// a load test, or a review. `$1` is always the test clock's "now" in milliseconds, `NULL`
    /// in production (see [`PostgresOptions::test_clock`]). The writes ([`Statement::Acquire`],
    /// [`Complete`](Statement::Complete), [`Renew`](Statement::Renew),
    /// [`Release`](Statement::Release)) take a batch: each of their other parameters is an array
    /// with one element per operation.
    pub fn sql(&self, statement: Statement) -> &str {
        self.inner.shared.sql.text(statement)
    }

    /// Closes the pool once running operations finish, and the listener's connection; every
    /// clone is closed too: later calls fail with [`StoreError::Unavailable`].
    pub async fn close(&self) {
        self.inner.changes.close().await;
        self.inner.shared.connections.close();
        self.inner.pool.close().await;
    }

    /// Starts a task that, every `every`, removes expired records and streamed parts `batch` at
    /// a time until none is left. Several instances may run one: a batch skips the rows another one holds.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn spawn_purger(&self, every: Duration, batch: usize) -> Purger {
        PurgeLoop::new(self.clone(), "expired idem records")
            .every(every)
            .batch(batch)
            .spawn()
    }

    /// [`Store::acquire`] on `connection`, inside the caller's transaction if one is open on it
    /// (pass `&mut tx`).
    ///
    /// In a transaction, the new or taken-over record is invisible to other sessions until the
    /// commit: a concurrent `acquire` of the same key waits for the transaction to end, then
    /// replays its completion, or takes the key if it rolled back. A rollback leaves no record.
    /// Under `REPEATABLE READ` or `SERIALIZABLE`, a concurrent change of the same key fails the
    /// statement with a serialization error ([`StoreError::Unavailable`]): retry the
    /// transaction, as always at those levels.
    pub async fn acquire_in(
        &self,
        connection: &mut PgConnection,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let op = AcquireArgs::op(address, fingerprint, terms);
        for _ in 0..ATTEMPTS {
            match self.alone::<Acquire>(connection, &op).await? {
                Step::Done(acquisition) => return acquisition,
                Step::Again => continue,
            }
        }
        Err(StoreError::unavailable(BatchError::Contended(ATTEMPTS)))
    }

    /// [`Store::complete`] on `connection`, inside the caller's transaction if one is open on it
    /// (pass `&mut tx`): the completion commits or rolls back with the caller's own writes.
    ///
    /// The statement locks the record until the transaction ends, so a worker that would take an
    /// expired lease over waits for the outcome: after a commit it replays the response, after a
    /// rollback it takes the key. With a token that no longer holds the key it returns
    /// [`StoreError::LeaseLost`]: roll the transaction back, another worker owns the operation.
    /// Other instances' waiters are notified when the transaction commits.
    pub async fn complete_in(
        &self,
        connection: &mut PgConnection,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let op = Op::new(address, CompleteArgs::new(token, outcome, ttl));
        match self.alone::<Complete>(connection, &op).await? {
            Step::Done(done) => done,
            Step::Again => unreachable!("a completion never races"),
        }
    }

    /// `op` alone, as a batch of one, on `connection`.
    async fn alone<W: Write>(
        &self,
        connection: &mut PgConnection,
        op: &Op<W::Args>,
    ) -> Result<Step<W::Output>, StoreError> {
        let mut steps = run::<W>(&self.inner.shared, connection, &[op])
            .await
            .map_err(|e| self.error(e))?;
        Ok(steps.pop().expect("one step per operation"))
    }

    /// A connection for one of the store's own operations (see [`Connections`]).
    /// Reads the census board's row and locks it, changes it with `change` at the server's
    /// time, and writes it back, in one transaction.
    async fn with_census_board<T>(
        &self,
        change: impl FnOnce(&mut Board, Timestamp) -> T,
    ) -> Result<T, StoreError> {
        let sql = &self.inner.shared.sql;
        let mut transaction = self.inner.pool.begin().await.map_err(|e| self.error(e))?;
        let row = sqlx::query(query_text(&sql.census_board))
            .bind(self.inner.shared.now())
            .fetch_one(&mut *transaction)
            .await
            .map_err(|e| self.error(e))?;
        let (mut board, now) = self.columns(&row).census_board()?;
        let answer = change(&mut board, now);
        let millis = |at: Timestamp| i64::try_from(at.as_millis()).unwrap_or(i64::MAX);
        let count = |count: u64| i64::try_from(count).unwrap_or(i64::MAX);
        let posted = board.posted;
        sqlx::query(query_text(&sql.census_board_write))
            .bind(board.claim.map(|(claimant, _)| claimant.cast_signed()))
            .bind(board.claim.map(|(_, until)| millis(until)))
            .bind(posted.map(|posted| millis(posted.at)))
            .bind(posted.map(|posted| millis(posted.next)))
            .bind(posted.map(|posted| count(posted.census.processing)))
            .bind(posted.map(|posted| count(posted.census.completed)))
            .bind(
                posted
                    .and_then(|posted| posted.census.oldest_processing)
                    .map(millis),
            )
            .execute(&mut *transaction)
            .await
            .map_err(|e| self.error(e))?;
        transaction.commit().await.map_err(|e| self.error(e))?;
        Ok(answer)
    }

    async fn connection(&self) -> Result<Checkout, StoreError> {
        self.inner.shared.connection().await
    }

    /// `statement` with the binds every statement on one record starts with: now, the address.
    fn at<'q>(
        &self,
        statement: Statement,
        address: &'q Address,
    ) -> Query<'q, Postgres, PgArguments> {
        sqlx::query(query_text(self.inner.shared.sql.text(statement)))
            .bind(self.inner.shared.now())
            .bind(address.scope.as_bytes().as_slice())
            .bind(key_digest(&address.key))
    }

    fn columns<'r>(&'r self, row: &'r PgRow) -> Columns<'r> {
        Columns {
            row,
            table: &self.inner.shared.sql.table,
        }
    }

    fn error(&self, error: sqlx::Error) -> StoreError {
        store_error(error, &self.inner.shared.sql.table)
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.inner.shared.sql.table)
            .field("pool", &self.inner.pool)
            .finish_non_exhaustive()
    }
}

impl Store for PostgresStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let op = AcquireArgs::op(address, fingerprint, terms);
        self.inner.acquisitions.call(op).await
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let op = Op::new(address, CompleteArgs::new(token, outcome, ttl));
        self.inner.completions.call(op).await
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        let op = Op::new(address, token);
        self.inner.releases.call(op).await
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let op = Op::new(address, RenewArgs { token, lease });
        self.inner.renewals.call(op).await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        let mut connection = self.connection().await?;
        let row = self
            .at(Statement::Get, address)
            .fetch_optional(&mut *connection)
            .await
            .map_err(|e| self.error(e));
        connection
            .keep(row)?
            .as_ref()
            .map(|row| self.columns(row).record())
            .transpose()
    }

    /// One statement deletes the record and the address's streamed parts; when it deleted a
    /// record, a second one deletes the parts again. An append locks the record `FOR SHARE`
    /// (see [`append_part`](Store::append_part)), so the first statement may have waited for one
    /// that stored a part after its snapshot: the second statement's snapshot, taken after it,
    /// holds that part. (An append that comes later finds no record.)
    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let mut connection = self.connection().await?;
        let live: Result<Option<bool>, StoreError> = self
            .at(Statement::Forget, address)
            .try_map(|row: PgRow| row.try_get("live"))
            .fetch_optional(&mut *connection)
            .await
            .map_err(|e| self.error(e));
        let Some(live) = connection.keep(live)? else {
            return Ok(false);
        };
        let mut connection = self.connection().await?;
        let parts = self
            .at(Statement::ForgetParts, address)
            .execute(&mut *connection)
            .await
            .map(drop)
            .map_err(|e| self.error(e));
        connection.keep(parts)?;
        Ok(live)
    }

    /// One statement on the operators' pool: expired records first, then expired streamed parts
    /// with the rest of `limit`, oldest first, skipping rows another transaction holds.
    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let purged: i64 = sqlx::query_scalar(query_text(
            self.inner.shared.sql.text(Statement::PurgeExpired),
        ))
        .bind(self.inner.shared.now())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_one(&self.inner.pool)
        .await
        .map_err(|e| self.error(e))?;
        Ok(usize::try_from(purged).expect("at most `limit` rows"))
    }

    /// One statement on the store's own connections, outside the batches: the record is locked
    /// `FOR SHARE` and checked at its latest version (the token's, processing, live on the
    /// server's clock), the part inserted if its index is the next one, and waiters on other
    /// instances notified if somebody found the record in flight (see `sql/append_part.sql`).
    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let row = self
            .at(Statement::AppendPart, address)
            .bind(sql_token(token))
            .bind(i64::from(index))
            .bind(part.as_ref())
            .fetch_one(&mut *connection)
            .await
            .map_err(|e| self.error(e));
        let row = connection.keep(row)?;
        let columns = self.columns(&row);
        let (live, next, appended) = columns.appended()?;
        if appended {
            return Ok(());
        }
        if !live {
            return Err(StoreError::LeaseLost);
        }
        // Below the next index: stored already, by an earlier call whose answer was lost. At it:
        // stored by a concurrent call of the same part, after this statement's snapshot.
        if u64::from(index) <= next {
            return Ok(());
        }
        Err(StoreError::PartOutOfOrder {
            next: u32::try_from(next).expect("below an index that is a u32"),
            given: index,
        })
    }

    /// One statement on the store's own connections: a range of at most 256 parts of the primary
    /// key's index, the unexpired ones on the server's clock, cut at the first gap and at
    /// `max_bytes` (see `sql/read_parts.sql`).
    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let mut connection = self.connection().await?;
        let rows = self
            .at(Statement::ReadParts, address)
            .bind(sql_token(token))
            .bind(i64::from(from))
            .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
            .fetch_all(&mut *connection)
            .await
            .map_err(|e| self.error(e));
        connection
            .keep(rows)?
            .iter()
            .map(|row| self.columns(row).part())
            .collect()
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let done = self
            .at(Statement::DiscardParts, address)
            .bind(sql_token(token))
            .execute(&mut *connection)
            .await
            .map(drop)
            .map_err(|e| self.error(e));
        connection.keep(done)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query(include_str!("../sql/ping.sql"))
            .execute(&self.inner.pool)
            .await
            .map(drop)
            .map_err(|e| self.error(e))
    }

    /// One statement on the store's own connections, on the server's clock: for each state asked
    /// for, a backward walk of the index on `(state, created_at)` from where the page starts
    /// (see `sql/list.sql`). A page reads its records and those it passes over that are expired
    /// or of another scope, whatever the size of the table; a scope filter reads the other
    /// scopes' records of the same state and age on its way.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let mut newest = Newest::new(query)?;
        let cursor = query.resume_after()?;
        let both = [StateFilter::Processing, StateFilter::Completed];
        let states = query.state.as_ref().map_or(&both[..], std::slice::from_ref);
        let states: Vec<&str> = states.iter().map(|&state| state_column(state)).collect();
        // One record more than a page from each state: whether a next page exists.
        let limit = i64::try_from(query.page_size() + 1).expect("a page is at most 1001 records");
        let mut connection = self.connection().await?;
        let rows = sqlx::query(query_text(&self.inner.shared.sql.list))
            .bind(self.inner.shared.now())
            .bind(states)
            .bind(query.older_than.map(sql_millis))
            .bind(
                query
                    .scope
                    .as_ref()
                    .map(|scope| scope.as_bytes().as_slice()),
            )
            .bind(cursor.map(|(created_at, ..)| sql_time(created_at)))
            .bind(
                cursor
                    .as_ref()
                    .map(|(_, scope, _)| scope.as_bytes().as_slice()),
            )
            .bind(cursor.as_ref().map(|(_, _, key)| key.as_slice()))
            .bind(limit)
            .fetch_all(&mut *connection)
            .await
            .map_err(|e| self.error(e));
        for row in &connection.keep(rows)? {
            newest.offer(self.columns(row).listed()?);
        }
        Ok(newest.finish())
    }

    /// Reads the table in steps of 5,000 records in primary key order, each step one statement
    /// on the operators' pool (the connections `purge_expired` and `ping` use, not the
    /// requests'), on the server's clock, resting after each at `pace`; nothing is decoded. A
    /// step reads its records' index entries and heap tuples, expired ones included: at 1
    /// million records, 200 steps of about 10 ms of the server's time, spread over 40 s at the
    /// default pace. The steps are separate snapshots: a record written meanwhile may count in
    /// its old place or its new one.
    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        pace.count((Vec::new(), Vec::new()), |after| async move {
            let row = sqlx::query(query_text(&self.inner.shared.sql.census))
                .bind(self.inner.shared.now())
                .bind(&after.0)
                .bind(&after.1)
                .bind(CENSUS_STEP)
                .fetch_one(&self.inner.pool)
                .await
                .map_err(|e| self.error(e))?;
            self.columns(&row).census_step()
        })
        .await
    }

    /// One transaction on the operators' pool: the board's row read and locked
    /// (migration 4), decided on the server's clock, written back.
    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        self.with_census_board(|board, now| board.claim(claim, now))
            .await
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        self.with_census_board(|board, now| board.post(claimant, *census, rest, now))
            .await
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changes.changed(address)
    }
}
