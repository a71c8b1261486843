//! [`MysqlStore`]: idempotency records in a MySQL or MariaDB table.

use std::{fmt, sync::Arc, time::Duration};

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
use sqlx::{AssertSqlSafe, MySqlConnection, MySqlPool, mysql::MySqlRow};

use crate::{
    Error, Migration, MysqlOptions, Purger, Statement,
    connections::{Checkout, Connections, Session},
    error::store_error,
    key_digest::key_digest,
    parts,
    row::{Columns, millis, sql_time, sql_token, state_column},
    schema,
    shared::Shared,
    sql::{Batch, BatchForm, Sql},
    writes::{
        Acquire, AcquireArgs, Batched, Complete, CompleteArgs, Op, Release, Renew, RenewArgs,
        Transaction, Write, run,
    },
};

/// How many records one step of a census reads.
const CENSUS_STEP: i64 = 5_000;

/// A store in a MySQL or MariaDB table, shared by every instance that connects to the database.
///
/// Every write is one round trip and one transaction, whatever the number of operations in it:
/// acquisitions, completions, renewals and releases that arrive while one of their kind is running
/// are committed together in the next ([group commit](MysqlOptions::batch_size)), each operation
/// with its own answer. So a new key costs two round trips (acquire, complete) and a replay one.
/// Time is the database server's (`UTC_TIMESTAMP`), so instances with skewed clocks agree.
/// Fencing tokens are drawn from an `AUTO_INCREMENT` counter after the records they are for are
/// locked, so that they grow for each address across releases and purges.
///
/// MySQL has no notifications: a request waiting for a key that a request on another instance
/// holds learns that it completed by polling, with backoff from 10 ms to 1 s (the engine's; see
/// [`Store::changed`]). Waiters on the same instance are woken at once.
///
/// The parts of streamed responses ([`Store::append_part`]) are rows of `<table>_parts`, keyed by
/// the record's address, the execution's token and the part's index, each expiring with its
/// record as it stood when the part was appended. An append is one transaction in one round trip
/// on the store's connections, outside the group commit: it locks the record, and inserts the
/// part only when the token holds the live, processing record and the index is the next one.
/// Followers on other instances poll [`Store::read_parts`].
///
/// Beyond the [`Store`] trait, [`acquire_in`](Self::acquire_in) and
/// [`complete_in`](Self::complete_in) run in the caller's own transaction, so that business rows
/// and the key's completion commit or roll back together.
///
/// Clones share the pool.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse};
/// use idem_mysql::{MysqlOptions, MysqlStore};
///
/// let options = MysqlOptions::from_url("mysql://root@127.0.0.1/app")?;
/// let pool = options.connect_pool().await?;
/// MysqlStore::migrate(&pool, &options).await?;
/// let store = MysqlStore::open(pool, options).await?;
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
pub struct MysqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: MySqlPool,
    shared: Arc<Shared>,
    acquisitions: Queue<Batched<Acquire>>,
    completions: Queue<Batched<Complete>>,
    renewals: Queue<Batched<Renew>>,
    releases: Queue<Batched<Release>>,
}

impl MysqlStore {
    /// Connects to `url` ([`MysqlOptions::from_url`]: idem's parameters, MySQL's TLS ones), then
    /// [`open`](Self::open)s the store with `options`' other settings.
    pub async fn connect(url: &str, options: MysqlOptions) -> Result<Self, Error> {
        let parsed = MysqlOptions::from_url(url)
            .map_err(|error| Error::Connect(sqlx::Error::Configuration(Box::new(error))))?;
        Self::connect_with(options.connection(parsed.connect_options())).await
    }

    /// Connects as `options` say ([`MysqlOptions::from_url`], or [`MysqlOptions::connection`])
    /// with [`MysqlOptions::connect_pool`], then [`open`](Self::open)s the store.
    pub async fn connect_with(options: MysqlOptions) -> Result<Self, Error> {
        let pool = options.connect_pool().await?;
        Self::open(pool, options).await
    }

    /// A store on `pool` (yours: the transactional API shares it), after checking that the
    /// tables and their migrations are this build's: a missing or older table is
    /// [`Error::NotMigrated`] or [`Error::MigrationPending`], a changed one
    /// [`Error::UnexpectedColumn`] or [`Error::ChangedMigration`], a newer build's
    /// [`Error::UnknownMigration`].
    ///
    /// The store's own operations ([`Store`]'s methods) run on up to
    /// [`MysqlOptions::pool_size`] connections of its own, opened with `pool`'s connect options.
    /// `pool` serves the purger, the census, readiness checks and your transactions.
    ///
    /// Starts the tasks that run the store's batches of writes (one per kind of write), which
    /// end when the last clone of the store is dropped.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub async fn open(pool: MySqlPool, options: MysqlOptions) -> Result<Self, Error> {
        let sql = Sql::new(&options.table);
        schema::verify(&pool, &sql, &sql.migrator(), options.url()).await?;
        let form = match options.batch_form {
            Some(form) => form,
            None => {
                let version: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(&pool)
                    .await
                    .map_err(Error::Connect)?;
                BatchForm::of_server(&version)
            }
        };
        let session = Session::new((*pool.connect_options()).clone(), options.statement_timeout);
        let connections = Connections::new(
            session,
            usize::try_from(options.pool_size).unwrap_or(usize::MAX),
            options.pool_timeout,
        );
        let shared = Arc::new(Shared {
            connections,
            sql,
            clock: options.test_clock,
            round_trip: options.statement_timeout,
            form,
        });
        let limits = Limits {
            batch_size: options.batch_size,
            in_flight: options.batches_in_flight,
            overlap: options.batch_overlap,
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
            }),
        })
    }

    /// Creates the table, its token counter, census board, parts table and migrations table, or
    /// brings them up to date, then checks the table as [`open`](Self::open) does; says what it
    /// did. What `idem migrate` runs. Applied migrations are recorded in `<table>_migrations`;
    /// running it again, or from several processes at once, is safe.
    ///
    /// A table migrated by a newer build ([`Error::UnknownMigration`]) is left untouched.
    pub async fn migrate(pool: &MySqlPool, options: &MysqlOptions) -> Result<Migration, Error> {
        let sql = Sql::new(&options.table);
        schema::migrate(pool, &sql, options.url()).await
    }

    /// The pool.
    pub fn pool(&self) -> &MySqlPool {
        &self.inner.pool
    }

    /// The SQL the store runs for `statement`, with its table filled in: for `EXPLAIN`, a load
    /// test, or a review. Its `?` placeholders are described at the top of each.
    pub fn sql(&self, statement: Statement) -> &str {
        self.inner.shared.sql.text(statement)
    }

    /// What the store's operations share, for the tests of its batches.
    #[cfg(test)]
    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Closes the pool once running operations finish; every clone is closed too: later calls
    /// fail with [`StoreError::Unavailable`].
    pub async fn close(&self) {
        self.inner.shared.connections.close();
        self.inner.pool.close().await;
    }

    /// Starts a task that, every `every`, removes expired records and expired parts of streamed
    /// responses, `batch` rows at a time, until none is left. Several instances may run one: a
    /// batch skips the rows another one holds.
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

    /// [`Store::acquire`] on `connection`, inside the caller's transaction (begin it first, and
    /// pass `&mut tx`).
    ///
    /// In a transaction, the new or taken-over record is invisible to other sessions until the
    /// commit, and locked: a concurrent `acquire` of the same key waits for the transaction to
    /// end, then replays its completion, or takes the key if it rolled back. A rollback leaves no
    /// record. The locks are held until your commit: keep the transaction short, and begin it at
    /// `READ COMMITTED` (see [the crate's documentation](crate)). Under `REPEATABLE READ` the
    /// record is read with a locking read all the same, so it is the latest, not your
    /// transaction's snapshot.
    pub async fn acquire_in(
        &self,
        connection: &mut MySqlConnection,
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

    /// [`Store::complete`] on `connection`, inside the caller's transaction (pass `&mut tx`): the
    /// completion commits or rolls back with the caller's own writes.
    ///
    /// The record is locked until the transaction ends, so a worker that would take an expired
    /// lease over waits for the outcome: after a commit it replays the response, after a rollback
    /// it takes the key. With a token that no longer holds the key it returns
    /// [`StoreError::LeaseLost`]: roll the transaction back, another worker owns the operation.
    /// Begin the transaction at `READ COMMITTED` (see [the crate's documentation](crate)).
    pub async fn complete_in(
        &self,
        connection: &mut MySqlConnection,
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

    /// `op` alone, as a batch of one, on `connection`, in the transaction open on it.
    async fn alone<W: Write>(
        &self,
        connection: &mut MySqlConnection,
        op: &Op<W::Args>,
    ) -> Result<Step<W::Output>, StoreError> {
        let mut steps = run::<W>(&self.inner.shared, connection, &[op], Transaction::Callers)
            .await
            .map_err(|failed| failed.error)?;
        Ok(steps.pop().expect("one step per operation"))
    }

    /// Reads the census board's row and locks it, changes it with `change` at the server's
    /// time, and writes it back, in one transaction.
    async fn with_census_board<T>(
        &self,
        change: impl FnOnce(&mut Board, Timestamp) -> T,
    ) -> Result<T, StoreError> {
        let sql = &self.inner.shared.sql;
        let mut transaction = self.inner.pool.begin().await.map_err(|e| self.error(e))?;
        let row = sqlx::query(query_text(sql.text(Statement::CensusBoard)))
            .bind(self.inner.shared.now())
            .fetch_one(&mut *transaction)
            .await
            .map_err(|e| self.error(e))?;
        let (mut board, now) = self.columns(&row).census_board()?;
        let answer = change(&mut board, now);
        let millis = |at: Timestamp| i64::try_from(at.as_millis()).unwrap_or(i64::MAX);
        let count = |count: u64| i64::try_from(count).unwrap_or(i64::MAX);
        let posted = board.posted;
        sqlx::query(query_text(sql.text(Statement::CensusBoardWrite)))
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

    fn columns<'r>(&'r self, row: &'r MySqlRow) -> Columns<'r> {
        Columns {
            row,
            table: &self.inner.shared.sql.table,
        }
    }

    fn error(&self, error: sqlx::Error) -> StoreError {
        store_error(error, &self.inner.shared.sql.table)
    }
}

impl fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlStore")
            .field("table", &self.inner.shared.sql.table)
            .field("pool", &self.inner.pool)
            .finish_non_exhaustive()
    }
}

impl Store for MysqlStore {
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
        let shared = &self.inner.shared;
        let mut connection = self.connection().await?;
        let row = shared
            .within(
                sqlx::query(query_text(shared.sql.text(Statement::Get)))
                    .bind(address.scope.as_bytes().as_slice())
                    .bind(key_digest(&address.key).as_slice())
                    .bind(shared.now())
                    .fetch_optional(&mut *connection),
            )
            .await
            .map_err(|e| self.error(e));
        connection
            .keep(row)?
            .as_ref()
            .map(|row| self.columns(row).record())
            .transpose()
    }

    /// One round trip: the record read and locked, then deleted with the parts of every
    /// execution at the address, in one transaction.
    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let shared = &self.inner.shared;
        let table = &shared.sql.table;
        let key = key_digest(&address.key);
        let row = |batch: &mut Batch| {
            batch
                .push(" WHERE scope = ")
                .bytes(address.scope.as_bytes())
                .push(" AND key_digest = ")
                .bytes(&key);
        };
        let mut batch = Batch::new(shared.form);
        batch.statement("START TRANSACTION").now(shared.now());
        batch
            .push("SELECT @idem_now < expires_at AS live FROM ")
            .push(table);
        row(&mut batch);
        batch.statement(" FOR UPDATE");
        batch.push("DELETE FROM ").push(table);
        row(&mut batch);
        batch.statement("");
        batch.push("DELETE FROM ").push(&shared.sql.parts);
        row(&mut batch);
        batch.statement("").statement("COMMIT");
        let mut connection = self.connection().await?;
        let rows = shared
            .within(sqlx::raw_sql(AssertSqlSafe(batch.finish())).fetch_all(&mut *connection))
            .await
            .map_err(|e| self.error(e));
        let rows = connection.keep(rows)?;
        match rows.first() {
            Some(row) => Ok(self.columns(row).get::<i64>("live")? != 0),
            None => Ok(false),
        }
    }

    /// One transaction on the operators' pool: at most `limit` expired records, oldest first,
    /// skipping those another transaction holds, read and locked, then deleted by id;
    /// then, with the rest of `limit`, expired parts of streamed responses the same way. Answers
    /// how many rows (records and parts) it deleted.
    ///
    /// The transaction runs at `READ COMMITTED`, so that its walk down the expiry index locks
    /// the records it reads and no gap: under the pool's default `REPEATABLE READ` it would also
    /// lock the first record past the expired ones, which a concurrent purge then skips, and the
    /// gap before it, which a concurrent acquisition's insert waits for. It ends before the call
    /// returns, even when there is nothing to delete: a dropped transaction is only rolled back
    /// when the pool gets its connection back, later.
    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let shared = &self.inner.shared;
        let sql = &shared.sql;
        let mut transaction = self
            .inner
            .pool
            .begin_with(crate::BEGIN_READ_COMMITTED)
            .await
            .map_err(|e| self.error(e))?;
        let records: Vec<i64> = sqlx::query_scalar(query_text(sql.text(Statement::PurgeExpired)))
            .bind(shared.now())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *transaction)
            .await
            .map_err(|e| self.error(e))?;
        let mut deleted = 0;
        if !records.is_empty() {
            let mut batch = Batch::new(BatchForm::Statements);
            batch
                .push("DELETE FROM ")
                .push(&sql.table)
                .push(" WHERE id IN (");
            for (n, id) in records.iter().enumerate() {
                batch.push(if n == 0 { "" } else { ", " }).number(*id);
            }
            batch.push(")");
            let done = sqlx::raw_sql(AssertSqlSafe(batch.finish()))
                .execute(&mut *transaction)
                .await
                .map_err(|e| self.error(e))?;
            deleted += usize::try_from(done.rows_affected()).expect("at most `limit` rows");
        }
        let rest = limit.saturating_sub(deleted);
        if rest > 0 {
            let parts: Vec<(Vec<u8>, Vec<u8>, i64, u32)> =
                sqlx::query_as(query_text(sql.text(Statement::PurgeExpiredParts)))
                    .bind(shared.now())
                    .bind(i64::try_from(rest).unwrap_or(i64::MAX))
                    .fetch_all(&mut *transaction)
                    .await
                    .map_err(|e| self.error(e))?;
            if !parts.is_empty() {
                let mut batch = Batch::new(BatchForm::Statements);
                batch.push("DELETE FROM ").push(&sql.parts).push(" WHERE ");
                for (n, (scope, key, token, index)) in parts.iter().enumerate() {
                    batch
                        .push(if n == 0 { "(scope = " } else { " OR (scope = " })
                        .bytes(scope)
                        .push(" AND key_digest = ")
                        .bytes(key)
                        .push(" AND token = ")
                        .number(*token)
                        .push(" AND idx = ")
                        .number(i64::from(*index))
                        .push(")");
                }
                let done = sqlx::raw_sql(AssertSqlSafe(batch.finish()))
                    .execute(&mut *transaction)
                    .await
                    .map_err(|e| self.error(e))?;
                deleted += usize::try_from(done.rows_affected()).expect("at most `limit` rows");
            }
        }
        transaction.commit().await.map_err(|e| self.error(e))?;
        Ok(deleted)
    }

    /// One round trip on the store's connections: one transaction that locks the record, reads
    /// the next index of the token's parts, and inserts the part with the record's expiry only
    /// if the token holds the live, processing record and the index is the next (see
    /// `src/parts.rs`). Not a batch of the group commit.
    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let shared = &self.inner.shared;
        let text = parts::append_text(
            shared.form,
            shared.now(),
            &shared.sql,
            address,
            token,
            index,
            part,
        );
        let mut connection = self.connection().await?;
        let rows = shared
            .within(sqlx::raw_sql(AssertSqlSafe(text)).fetch_all(&mut *connection))
            .await
            .map_err(|e| self.error(e));
        let rows = connection.keep(rows)?;
        parts::appended(&rows, &shared.sql.table, index)
    }

    /// One statement on the store's connections, on the server's clock (`sql/read_parts.sql`):
    /// the sizes summed on the server, then only the parts that fit the budget read.
    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let shared = &self.inner.shared;
        let mut connection = self.connection().await?;
        let rows: Result<Vec<(Vec<u8>,)>, StoreError> = shared
            .within(
                sqlx::query_as(query_text(shared.sql.text(Statement::ReadParts)))
                    .bind(address.scope.as_bytes().as_slice())
                    .bind(key_digest(&address.key).as_slice())
                    .bind(sql_token(token))
                    .bind(from)
                    .bind(from)
                    .bind(shared.now())
                    .bind(from)
                    .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
                    .fetch_all(&mut *connection),
            )
            .await
            .map_err(|e| self.error(e));
        let rows = connection.keep(rows)?;
        Ok(rows.into_iter().map(|(part,)| Bytes::from(part)).collect())
    }

    /// One statement on the store's connections (`sql/discard_parts.sql`).
    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let shared = &self.inner.shared;
        let mut connection = self.connection().await?;
        let done = shared
            .within(
                sqlx::query(query_text(shared.sql.text(Statement::DiscardParts)))
                    .bind(address.scope.as_bytes().as_slice())
                    .bind(key_digest(&address.key).as_slice())
                    .bind(sql_token(token))
                    .execute(&mut *connection),
            )
            .await
            .map_err(|e| self.error(e));
        connection.keep(done).map(drop)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1")
            .execute(&self.inner.pool)
            .await
            .map(drop)
            .map_err(|e| self.error(e))
    }

    /// One statement per state asked for, on the store's own connections, on the server's clock:
    /// a backward walk of the index on `(state, created_at, scope, key_digest)` from where the
    /// page starts (see `sql/list.sql`).
    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let shared = &self.inner.shared;
        let mut newest = Newest::new(query)?;
        let cursor = query.resume_after()?;
        let both = [StateFilter::Processing, StateFilter::Completed];
        let states = query.state.as_ref().map_or(&both[..], std::slice::from_ref);
        // One record more than a page: whether a next page exists.
        let limit = i64::try_from(query.page_size() + 1).expect("a page is at most 1001 records");
        // The page's bound: the cursor, or past every record. An age limit is a bound on
        // `created_at`, taken on the server's clock.
        let (created_at, scope, key) = match &cursor {
            Some((created_at, scope, key)) => (
                sql_time(*created_at),
                scope.as_bytes().to_vec(),
                key.to_vec(),
            ),
            None => (i64::MAX, vec![0xff; 33], Vec::new()),
        };
        let scope_filter = query.scope.as_ref().map(|scope| scope.as_bytes().to_vec());
        let mut connection = self.connection().await?;
        let mut pages = Vec::with_capacity(states.len());
        for &state in states {
            let rows = shared
                .within(async {
                    let bound = match query.older_than {
                        None => created_at,
                        Some(age) => {
                            let now: i64 = match shared.now() {
                                Some(now) => now,
                                None => {
                                    sqlx::query_scalar(AssertSqlSafe(format!(
                                        "SELECT {}",
                                        crate::sql::SERVER_NOW.trim_end()
                                    )))
                                    .fetch_one(&mut *connection)
                                    .await?
                                }
                            };
                            created_at.min(now.saturating_sub(millis(age)) + 1)
                        }
                    };
                    // Past the age limit, the bound takes every record of its millisecond.
                    let (scope, key) = if bound == created_at {
                        (scope.clone(), key.clone())
                    } else {
                        (vec![0xff; 33], Vec::new())
                    };
                    sqlx::query(query_text(shared.sql.text(Statement::List)))
                        .bind(state_column(state))
                        .bind(bound)
                        .bind(bound)
                        .bind(&scope)
                        .bind(&scope)
                        .bind(&key)
                        .bind(shared.now())
                        .bind(&scope_filter)
                        .bind(&scope_filter)
                        .bind(limit)
                        .fetch_all(&mut *connection)
                        .await
                })
                .await
                .map_err(|e| self.error(e));
            match rows {
                Ok(rows) => pages.push(rows),
                Err(error) => return connection.keep(Err(error)),
            }
        }
        connection.keep(Ok(()))?;
        for row in pages.iter().flatten() {
            newest.offer(self.columns(row).listed()?);
        }
        Ok(newest.finish())
    }

    /// Reads the table in steps of 5,000 records in `id` (arrival) order, each step one
    /// statement on the operators' pool, on the server's clock, resting after each at `pace`;
    /// nothing is decoded. The steps are separate snapshots: a record changed meanwhile counts
    /// as its step read it, and one created meanwhile when a later step reaches it.
    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        pace.count(0, |after| async move {
            let row = sqlx::query(query_text(self.inner.shared.sql.text(Statement::Census)))
                .bind(self.inner.shared.now())
                .bind(after)
                .bind(CENSUS_STEP)
                .fetch_one(&self.inner.pool)
                .await
                .map_err(|e| self.error(e))?;
            self.columns(&row).census_step()
        })
        .await
    }

    /// One transaction on the operators' pool: the board's row read and locked, decided on the
    /// server's clock, written back.
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
}
