//! [`SqliteStore`]: idempotency records in a SQLite file.

use std::{fmt, path::Path, sync::Arc, time::Duration};

use bytes::Bytes;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, Clock, FencingToken, Fingerprint,
    ListPage, ListQuery, Outcome, Pace, Record, Store, StoreError, Terms, Timestamp,
};
use sqlx::Connection;

use crate::{
    Error, SqliteOptions,
    error::{closed, sqlite_error},
    key_digest, listing,
    migrations::MIGRATOR,
    parts,
    readers::Readers,
    row::{self, sql_int},
    writer::{Job, Writer, WriterOptions},
    writes::{self, Acquire, AppendPart, HolderWrite, HolderWriteKind, Parts, PostCensus, Target},
};

/// A durable store in one SQLite file (WAL journal), shared safely by every process that opens it.
///
/// Writes are committed in groups: one writer thread owns the write connection, and the writes
/// that arrive while it commits go into its next transaction together, a failing one undone
/// alone, each answered only once that transaction committed. With
/// [`Synchronous::Full`](crate::Synchronous::Full) one flush of the disk makes a whole group
/// durable, so the store's throughput grows with its callers instead of queueing them behind one
/// flush each. Each transaction takes SQLite's write lock before it reads (`BEGIN IMMEDIATE`), so
/// concurrent callers, in this process or in others, behave as if they ran one after the other.
/// Reads (`get`, and an `acquire` that finds the key completed or in flight) run in place, on
/// the caller's thread, on one of a pool of reader connections, and never wait for the writer.
/// The operators' [`list`](Store::list) and [`census`](Store::census) read on those connections
/// too, on a blocking thread, through an index on `(state, created_at)`. Time comes from the
/// injected [`Clock`] only; processes sharing a file must agree on it.
///
/// The parts of streamed responses ([`append_part`](Store::append_part)) are rows of a table of
/// their own, `idem_parts` (migration 5), beside the records of `idem_records`: keyed by the
/// record's address, the token of the execution that streams it and the part's index, each
/// expiring when its record did at the time of the append. An append is one statement by the
/// writer, fenced by the record; [`read_parts`](Store::read_parts) runs in place on a reader,
/// along that key. [`forget`](Store::forget) deletes the address's parts with its record, and
/// [`purge_expired`](Store::purge_expired) the expired parts after the expired records. No
/// process is told of another's appends ([`changed`](Store::changed) never resolves): followers
/// poll.
///
/// Clones share the writer and the readers.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse};
/// use idem_sqlite::SqliteStore;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("idem.db");
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([7; 32]);
/// let terms = (&Policy::default()).into();
///
/// let store = SqliteStore::open(&path).await?;
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// let response = Outcome::from(StoredResponse::new(201).body("charged"));
/// store.complete(&address, lease.token, &response, terms.ttl).await?;
/// store.close().await;
///
/// // The record outlives the process.
/// let store = SqliteStore::open(&path).await?;
/// let replay = store.acquire(&address, &fingerprint, terms).await?;
/// assert_eq!(replay, Acquisition::Completed(response));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    readers: Readers,
    writer: Writer,
    clock: Arc<dyn Clock>,
}

impl SqliteStore {
    /// Opens the database at `path`, creating it if missing, with the default
    /// [`SqliteOptions`], and brings its schema up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::open_with(SqliteOptions::new(path)).await
    }

    /// Opens a database as `options` say, and brings its schema up to date.
    pub async fn open_with(options: SqliteOptions) -> Result<Self, Error> {
        let mut connection = options.connect_migrator().await.map_err(Error::Open)?;
        // Under the write lock, processes opening a new file at once take turns: the second finds
        // the schema applied instead of failing to create it again.
        let mut tx = connection
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(Error::Open)?;
        // `Migrator::run` on a transaction makes this future not `Send` (a known rustc
        // limitation with its `Acquire` bound); `run_direct` is sqlx's way around it.
        MIGRATOR
            .run_direct(None, &mut *tx, false)
            .await
            .map_err(Error::Migrate)?;
        key_digest::convert_first_schema(&mut tx)
            .await
            .map_err(|e| Error::Migrate(e.into()))?;
        tx.commit().await.map_err(|e| Error::Migrate(e.into()))?;
        connection.close().await.map_err(Error::Open)?;
        let readers = Readers::open(&options)?;
        let writer = Writer::start(WriterOptions {
            connection: options.connect_writer().map_err(Error::OpenWriter)?,
            clock: Arc::clone(&options.clock),
            queue_size: options.queue_size,
            batch_size: options.batch_size,
        })?;
        Ok(Self {
            readers,
            writer,
            clock: options.clock,
        })
    }

    /// Closes the connections once the queued writes are committed. Every clone is closed too:
    /// later calls fail with [`StoreError::Unavailable`].
    pub async fn close(&self) {
        self.writer.close().await;
        self.readers.close();
    }

    async fn holder_write(
        &self,
        address: &Address,
        token: FencingToken,
        kind: HolderWriteKind,
    ) -> Result<Timestamp, StoreError> {
        let write = HolderWrite {
            target: address.into(),
            token,
            kind,
        };
        self.writer.run(|reply| Job::Holder(write, reply)).await
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("readers", &self.readers)
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

impl Store for SqliteStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let target = Target::from(address);
        // A completed key, a mismatch or a key in flight is answered from a reader: a snapshot
        // of committed records, read after the call began.
        let peeked = self
            .readers
            .read(|reader| {
                row::query_one(
                    reader,
                    include_str!("../sql/acquire_peek.sql"),
                    (target.scope.as_slice(), target.key.as_slice()),
                    |row| writes::peek(row, fingerprint, self.clock.now()),
                )
            })
            .await?;
        if let Some(answer) = peeked {
            return Ok(answer);
        }
        let acquire = Acquire {
            target,
            fingerprint: *fingerprint,
            terms,
        };
        self.writer.run(|reply| Job::Acquire(acquire, reply)).await
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let kind = HolderWriteKind::Complete {
            outcome: outcome.encode(),
            ttl,
        };
        self.holder_write(address, token, kind).await.map(drop)
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        self.holder_write(address, token, HolderWriteKind::Release)
            .await
            .map(drop)
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        self.holder_write(address, token, HolderWriteKind::Renew { lease })
            .await
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        let target = Target::from(address);
        let now = sql_int(self.clock.now().as_millis());
        self.readers
            .read(|reader| {
                row::query_one(
                    reader,
                    include_str!("../sql/get.sql"),
                    (target.scope.as_slice(), target.key.as_slice(), now),
                    |row| row.map(row::record).transpose(),
                )
            })
            .await
    }

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let target = address.into();
        self.writer.run(|reply| Job::Forget(target, reply)).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.writer.run(|reply| Job::Purge(limit, reply)).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if !self.writer.is_open() {
            return Err(closed());
        }
        self.readers
            .read(|reader| {
                reader
                    .prepare_cached(include_str!("../sql/ping.sql"))
                    .and_then(|mut ping| ping.query_row((), |_| Ok(())))
                    .map_err(sqlite_error)
            })
            .await
    }

    /// Walks the index on `(state, created_at)` downwards from where the page starts, once per
    /// state asked for, in one snapshot, on a reader connection and a blocking thread: a page
    /// reads its records and the expired records and other scopes' it passes over, whatever the
    /// size of the file (about a millisecond at 10 million records). A scope filter reads the
    /// other scopes' records of the same state and age on its way.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let now = self.clock.now();
        let query = query.clone();
        self.readers
            .read_apart(move |reader| listing::list(reader, &query, now))
            .await
    }

    /// Reads the table in steps of 5,000 records in rowid order, each step one statement on a
    /// reader connection and a blocking thread (about 5 ms of a core), resting after each at
    /// `pace`; nothing is decoded. A step reads its records from the table's pages, expired
    /// ones included, so a census reads the whole file once: at 1 million records, 200 steps
    /// and about 1 s of a core, spread over 20 s at the default pace. The steps are separate
    /// snapshots: a record that writers move meanwhile may count twice or not at all.
    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        let now = self.clock.now();
        pace.count(0, |after| {
            self.readers
                .read_apart(move |reader| listing::census_step(reader, now, after))
        })
        .await
    }

    /// One write of the board's row (migration 4), by the writer, on the store's clock.
    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        self.writer
            .run(|reply| Job::ClaimCensus(claim, reply))
            .await
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        let post = PostCensus {
            claimant,
            census: *census,
            rest,
        };
        self.writer.run(|reply| Job::PostCensus(post, reply)).await
    }

    /// One statement by the writer, in the transaction of its batch: an `INSERT … SELECT` from
    /// the record, which stores the part only if `token` holds the live processing record and
    /// `index` is one past the execution's last part (one step down the primary key of
    /// `idem_parts`, migration 5); when it stores nothing, a read under the same lock tells why.
    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let append = AppendPart {
            target: address.into(),
            token,
            index,
            part: part.clone(),
        };
        self.writer
            .run(|reply| Job::AppendPart(append, reply))
            .await
    }

    /// One walk along the primary key of `idem_parts`, in place on a reader connection, as `get`
    /// reads: at most 256 parts, and the one past the budget that ends it.
    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let target = Target::from(address);
        let now = self.clock.now();
        self.readers
            .read(|reader| parts::read(reader, &target, token, from, max_bytes, now))
            .await
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let parts = Parts {
            target: address.into(),
            token,
        };
        self.writer
            .run(|reply| Job::DiscardParts(parts, reply))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use idem_core::{DecodeError, Lease, ManualClock, Policy, StoredResponse};

    use super::*;
    use crate::{Synchronous, key_digest::key_digest};

    fn address(key: &str) -> Address {
        Address::anonymous(key.parse().unwrap())
    }

    fn terms() -> Terms {
        (&Policy::default()).into()
    }

    const FP: Fingerprint = Fingerprint::from_bytes([1; 32]);

    async fn open(path: &Path) -> SqliteStore {
        SqliteStore::open_with(SqliteOptions::new(path).clock(ManualClock::default()))
            .await
            .unwrap()
    }

    async fn acquired(store: &SqliteStore, address: &Address) -> Lease {
        match store.acquire(address, &FP, terms()).await.unwrap() {
            Acquisition::Acquired(lease) => lease,
            other => panic!("expected Acquired, got {other:?}"),
        }
    }

    /// The rows of `sql` as a reader of `store` sees them, each made by `row`.
    async fn select<T>(
        store: &SqliteStore,
        sql: &str,
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Vec<T> {
        let read = |reader: &rusqlite::Connection| {
            let mut statement = reader.prepare(sql)?;
            statement.query_map((), row)?.collect::<Result<Vec<_>, _>>()
        };
        store
            .readers
            .read(|reader| read(reader).map_err(sqlite_error))
            .await
            .unwrap()
    }

    /// The one value `sql` selects, as a reader of `store` sees it.
    async fn scalar<T: rusqlite::types::FromSql>(store: &SqliteStore, sql: &str) -> T {
        let mut values = select(store, sql, |row| row.get(0)).await;
        assert_eq!(values.len(), 1, "{sql}");
        values.remove(0)
    }

    async fn applied_migrations(store: &SqliteStore) -> Vec<(i64, bool)> {
        let sql = "SELECT version, success FROM _sqlx_migrations ORDER BY version";
        select(store, sql, |row| Ok((row.get(0)?, row.get(1)?))).await
    }

    #[tokio::test]
    async fn migrations_are_applied_on_open_and_once_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = open(&path).await;
        assert_eq!(
            applied_migrations(&store).await,
            [(1, true), (2, true), (3, true), (4, true), (5, true)]
        );
        let lease = acquired(&store, &address("kept")).await;
        store.close().await;

        let store = open(&path).await;
        assert_eq!(
            applied_migrations(&store).await,
            [(1, true), (2, true), (3, true), (4, true), (5, true)]
        );
        let record = store.get(&address("kept")).await.unwrap().unwrap();
        assert_eq!(record.state.token(), lease.token);
    }

    /// The plan of `sql` on a reader of `store`, its parameters NULL: its lines.
    async fn query_plan(store: &SqliteStore, sql: &str) -> Vec<String> {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let read = |reader: &rusqlite::Connection| {
            let mut statement = reader.prepare(&explain)?;
            let nulls = vec![rusqlite::types::Null; statement.parameter_count()];
            let lines =
                statement.query_map(rusqlite::params_from_iter(nulls), |row| row.get("detail"))?;
            lines.collect::<Result<Vec<_>, _>>()
        };
        store
            .readers
            .read(|reader| read(reader).map_err(sqlite_error))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn listing_processing_records_walks_the_state_index_from_the_page_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("plan.db")).await;
        assert_eq!(
            query_plan(&store, include_str!("../sql/list.sql")).await,
            [
                "SEARCH idem_records USING INDEX idem_records_state_created (state=? AND created_at<?)",
                // Records of one millisecond, sorted apart by scope and key.
                "USE TEMP B-TREE FOR LAST 2 TERMS OF ORDER BY",
            ]
        );
    }

    #[tokio::test]
    async fn a_census_step_reads_a_range_of_the_table_by_rowid() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("plan.db")).await;
        assert_eq!(
            query_plan(&store, include_str!("../sql/census.sql")).await,
            [
                "CO-ROUTINE (subquery-1)",
                "SEARCH idem_records USING INTEGER PRIMARY KEY (rowid>?)",
                "SCAN (subquery-1)",
            ]
        );
    }

    #[tokio::test]
    async fn statements_on_one_record_find_it_by_primary_key_not_by_the_state_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("plan.db")).await;
        let by_key =
            ["SEARCH idem_records USING INDEX sqlite_autoindex_idem_records_1 (scope=? AND key=?)"];
        for sql in [
            include_str!("../sql/acquire_peek.sql"),
            include_str!("../sql/get.sql"),
            include_str!("../sql/take_over.sql"),
            include_str!("../sql/complete.sql"),
            include_str!("../sql/renew.sql"),
            include_str!("../sql/release.sql"),
            include_str!("../sql/forget.sql"),
        ] {
            assert_eq!(query_plan(&store, sql).await, by_key, "{sql}");
        }
    }

    #[tokio::test]
    async fn statements_on_parts_find_them_by_primary_key_and_the_purge_by_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("plan.db")).await;
        let record =
            "SEARCH idem_records USING INDEX sqlite_autoindex_idem_records_1 (scope=? AND key=?)";
        // One step to the execution's last part, in the key's order: nothing counted or sorted.
        let last_part = "SEARCH idem_parts USING COVERING INDEX sqlite_autoindex_idem_parts_1 \
                         (scope=? AND key=? AND token=?)";
        assert_eq!(
            query_plan(&store, include_str!("../sql/append_part.sql")).await,
            [record, "SCALAR SUBQUERY 1", last_part]
        );
        assert_eq!(
            query_plan(&store, include_str!("../sql/append_part_refused.sql")).await,
            [
                "SCAN CONSTANT ROW",
                "SCALAR SUBQUERY 1",
                record,
                "SCALAR SUBQUERY 2",
                last_part
            ]
        );
        let by_key = "SEARCH idem_parts USING INDEX sqlite_autoindex_idem_parts_1";
        for (sql, columns) in [
            (
                include_str!("../sql/read_parts.sql"),
                "(scope=? AND key=? AND token=? AND idx>?)",
            ),
            (
                include_str!("../sql/discard_parts.sql"),
                "(scope=? AND key=? AND token=?)",
            ),
            (
                include_str!("../sql/forget_parts.sql"),
                "(scope=? AND key=?)",
            ),
        ] {
            assert_eq!(
                query_plan(&store, sql).await,
                [format!("{by_key} {columns}")]
            );
        }
        assert_eq!(
            query_plan(&store, include_str!("../sql/purge_expired_parts.sql")).await,
            [
                "SEARCH idem_parts USING INTEGER PRIMARY KEY (rowid=?)",
                "LIST SUBQUERY 1",
                "SEARCH idem_parts USING COVERING INDEX idem_parts_expires_at (expires_at<?)",
                "CREATE BLOOM FILTER",
            ]
        );
    }

    #[tokio::test]
    async fn parts_survive_a_restart_and_their_stream_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parts.db");
        let part = |s: &'static str| Bytes::from_static(s.as_bytes());
        let a = address("streamed");
        let store = open(&path).await;
        let lease = acquired(&store, &a).await;
        for (index, text) in [(0, "head"), (1, "body")] {
            store
                .append_part(&a, lease.token, index, &part(text))
                .await
                .unwrap();
        }
        store.close().await;

        let store = open(&path).await;
        let read = || store.read_parts(&a, lease.token, 0, usize::MAX);
        assert_eq!(read().await.unwrap(), [part("head"), part("body")]);
        // The next index comes from the file: a retried append changes nothing, a skip is
        // refused, the next part is stored.
        store
            .append_part(&a, lease.token, 1, &part("again"))
            .await
            .unwrap();
        let skipped = store.append_part(&a, lease.token, 3, &part("late")).await;
        assert!(
            matches!(
                skipped,
                Err(StoreError::PartOutOfOrder { next: 2, given: 3 })
            ),
            "{skipped:?}"
        );
        store
            .append_part(&a, lease.token, 2, &part("tail"))
            .await
            .unwrap();
        assert_eq!(
            read().await.unwrap(),
            [part("head"), part("body"), part("tail")]
        );
    }

    #[tokio::test]
    async fn forget_and_purge_are_undone_whole_when_the_parts_cannot_be_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("undone.db");
        let clock = ManualClock::default();
        let store = SqliteStore::open_with(SqliteOptions::new(&path).clock(clock.clone()))
            .await
            .unwrap();
        let part = Bytes::from_static(b"part");
        let (kept, expiring) = (address("kept"), address("expiring"));
        let lease = acquired(&store, &kept).await;
        store
            .append_part(&kept, lease.token, 0, &part)
            .await
            .unwrap();
        let short = Terms {
            lease: Duration::from_secs(1),
            ttl: Duration::from_secs(1),
        };
        let Acquisition::Acquired(short_lease) =
            store.acquire(&expiring, &FP, short).await.unwrap()
        else {
            panic!("a new key is acquired");
        };
        store
            .append_part(&expiring, short_lease.token, 0, &part)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(1));
        // The second `DELETE` of each, the parts', fails.
        sqlx::raw_sql(
            "CREATE TRIGGER refuse BEFORE DELETE ON idem_parts \
             BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )
        .execute(&mut by_hand(&path).await)
        .await
        .unwrap();

        let forgot = store.forget(&kept).await;
        assert!(
            matches!(forgot, Err(StoreError::Unavailable(_))),
            "{forgot:?}"
        );
        let purged = store.purge_expired(10).await;
        assert!(
            matches!(purged, Err(StoreError::Unavailable(_))),
            "{purged:?}"
        );
        assert!(store.get(&kept).await.unwrap().is_some());
        let read = store.read_parts(&kept, lease.token, 0, usize::MAX).await;
        assert_eq!(read.unwrap(), [part]);
        let rows = "SELECT (SELECT count(*) FROM idem_records) + (SELECT count(*) FROM idem_parts)";
        assert_eq!(scalar::<i64>(&store, rows).await, 4);
    }

    #[tokio::test]
    async fn records_of_the_first_schema_are_converted_to_key_digests_on_open() {
        use sqlx::{
            AssertSqlSafe, Connection, SqlSafeStr, SqliteConnection,
            migrate::{Migration, MigrationType, Migrator},
        };

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("first.db");
        // A file as a build before migration 2 left it, with 600 records (two batches).
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let mut connection = SqliteConnection::connect(&url).await.unwrap();
        Migrator::with_migrations(vec![Migration::new(
            1,
            "idem records".into(),
            MigrationType::Simple,
            AssertSqlSafe(include_str!("../migrations/0001_idem_records.sql")).into_sql_str(),
            false,
        )])
        .run(&mut connection)
        .await
        .unwrap();
        let response = Outcome::from(StoredResponse::new(201).body("converted"));
        for i in 0..600 {
            sqlx::query(
                "INSERT INTO idem_records (scope, key, fingerprint, state, token, created_at, \
                 completed_at, expires_at, response) VALUES (?1, ?2, ?3, 2, ?4, 0, 0, ?5, ?6)",
            )
            .bind([0u8; 32].as_slice())
            .bind(format!("legacy-{i}"))
            .bind(FP.as_bytes().as_slice())
            .bind(i64::from(i) + 1)
            .bind(i64::MAX)
            .bind(response.encode())
            .execute(&mut connection)
            .await
            .unwrap();
        }
        connection.close().await.unwrap();

        let store = open(&path).await;
        assert_eq!(
            applied_migrations(&store).await,
            [(1, true), (2, true), (3, true), (4, true), (5, true)]
        );
        for i in [0, 499, 500, 599] {
            let replay = store
                .acquire(&address(&format!("legacy-{i}")), &FP, terms())
                .await
                .unwrap();
            assert_eq!(
                replay,
                Acquisition::Completed(response.clone()),
                "legacy-{i}"
            );
        }
        let rows: i64 = scalar(&store, "SELECT count(*) FROM idem_records").await;
        assert_eq!(rows, 600);
        let digest: Vec<u8> = scalar(&store, "SELECT key FROM idem_records WHERE token = 1").await;
        assert_eq!(digest, key_digest(&"legacy-0".parse().unwrap()));
        let sql = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name";
        let tables: Vec<String> = select(&store, sql, |row| row.get(0)).await;
        assert_eq!(
            tables,
            [
                "_sqlx_migrations",
                "idem_census",
                "idem_fencing",
                "idem_parts",
                "idem_records"
            ]
        );
    }

    #[tokio::test]
    async fn the_file_holds_key_digests_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests.db");
        let store = open(&path).await;
        let secret = address("customer-jane@example.com");
        acquired(&store, &secret).await;
        let key: Vec<u8> = scalar(&store, "SELECT key FROM idem_records").await;
        assert_eq!(key, key_digest(&secret.key));
        store.close().await;
        let mut raw = Vec::new();
        for suffix in ["", "-wal"] {
            raw.extend(std::fs::read(format!("{}{suffix}", path.display())).unwrap_or_default());
        }
        assert!(!raw.windows(8).any(|w| w == b"jane@exa"));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_file_and_its_wal_and_shm_are_private_to_their_owner() {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private.db");
        let store = open(&path).await;
        // A write, while the pool's connections are open: the -wal and -shm files exist.
        acquired(&store, &address("k")).await;
        let mut modes = Vec::new();
        for suffix in ["", "-wal", "-shm"] {
            let metadata = std::fs::metadata(format!("{}{suffix}", path.display())).unwrap();
            modes.push((suffix, metadata.permissions().mode() & 0o777));
        }
        assert_eq!(modes, [("", 0o600), ("-wal", 0o600), ("-shm", 0o600)]);
        store.close().await;

        // An existing file keeps the permissions its operator gave it.
        let shared = dir.path().join("shared.db");
        std::fs::write(&shared, b"").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
        open(&shared).await.close().await;
        let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_opens_of_a_new_file_apply_the_schema_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.db");
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { open(&path).await })
            })
            .collect();
        for store in opens {
            let store = store.await.unwrap();
            assert_eq!(
                applied_migrations(&store).await,
                [(1, true), (2, true), (3, true), (4, true), (5, true)]
            );
        }
    }

    /// `journal_mode` and `synchronous` as `connection` has them.
    fn pragmas(connection: &rusqlite::Connection) -> (String, i64) {
        let pragma = |name: &str| format!("PRAGMA {name}");
        let mode = connection.query_row(&pragma("journal_mode"), [], |row| row.get(0));
        let level = connection.query_row(&pragma("synchronous"), [], |row| row.get(0));
        (mode.unwrap(), level.unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_connection_uses_wal_and_the_chosen_synchronous() {
        let dir = tempfile::tempdir().unwrap();
        for (synchronous, code) in [(Synchronous::Full, 2), (Synchronous::Normal, 1)] {
            let options = SqliteOptions::new(dir.path().join("pragmas.db"))
                .synchronous(synchronous)
                .pool_size(3);
            let store = SqliteStore::open_with(options).await.unwrap();
            let wal = ("wal".to_owned(), code);
            // The three readers at once, so three different connections.
            let (readers, _) = store.readers.read_together(3, 3, |c, _| pragmas(c)).await;
            assert_eq!(
                readers,
                [wal.clone(), wal.clone(), wal.clone()],
                "{synchronous:?}"
            );
            let writer = store.writer.inspect(pragmas).await;
            assert_eq!(writer, wal, "{synchronous:?}");
            store.close().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_reader_sees_a_write_once_its_commit_returned_without_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions::new(dir.path().join("visible.db"))
            .clock(ManualClock::default())
            .pool_size(2);
        let store = SqliteStore::open_with(options).await.unwrap();
        let a = address("seen");
        // Both connections read the file before the writes, each from a snapshot of its own.
        let (none, _) = store.readers.read_together(2, 2, |_, _| ()).await;
        assert_eq!(none, [(), ()]);
        let lease = acquired(&store, &a).await;
        let response = Outcome::from(StoredResponse::new(201).body("seen"));
        let target = Target::from(&a);
        let tokens = || {
            let target = target.clone();
            store.readers.read_together(2, 2, move |reader, _| {
                let sql = "SELECT token, state FROM idem_records WHERE scope = ?1 AND key = ?2";
                let params = (target.scope.as_slice(), target.key.as_slice());
                reader
                    .query_row(sql, params, |row| Ok((row.get(0)?, row.get(1)?)))
                    .unwrap()
            })
        };
        // The writer is held from here on: whatever is answered comes from the readers.
        let resume = store.writer.pause().await;
        let processing: (i64, i64) = (lease.token.get() as i64, 1);
        assert_eq!(tokens().await.0, [processing, processing]);
        drop(resume);

        store
            .complete(&a, lease.token, &response, terms().ttl)
            .await
            .unwrap();
        let resume = store.writer.pause().await;
        let completed: (i64, i64) = (lease.token.get() as i64, 2);
        assert_eq!(tokens().await.0, [completed, completed]);
        assert_eq!(
            store.acquire(&a, &FP, terms()).await.unwrap(),
            Acquisition::Completed(response)
        );
        drop(resume);
        store.close().await;
    }

    /// A connection of its own to the file at `path`, for changes the store would not make.
    async fn by_hand(path: &Path) -> sqlx::SqliteConnection {
        sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn unreadable_rows_are_corrupted_not_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corrupt.db");
        let store = open(&path).await;
        let mut by_hand = by_hand(&path).await;
        let a = address("corrupt");
        let lease = acquired(&store, &a).await;
        let response = Outcome::from(StoredResponse::new(200).body("fine"));
        store
            .complete(&a, lease.token, &response, terms().ttl)
            .await
            .unwrap();

        sqlx::query("UPDATE idem_records SET response = X'494452'")
            .execute(&mut by_hand)
            .await
            .unwrap();
        for result in [
            store.acquire(&a, &FP, terms()).await.map(drop),
            store.get(&a).await.map(drop),
        ] {
            let Err(StoreError::Corrupted(source)) = result else {
                panic!("expected Corrupted, got {result:?}");
            };
            assert_eq!(
                source.downcast_ref::<DecodeError>(),
                Some(&DecodeError::Truncated)
            );
        }

        sqlx::query("UPDATE idem_records SET state = 7")
            .execute(&mut by_hand)
            .await
            .unwrap();
        let result = store.acquire(&a, &FP, terms()).await;
        let Err(StoreError::Corrupted(source)) = result else {
            panic!("expected Corrupted, got {result:?}");
        };
        assert!(
            matches!(source.downcast_ref(), Some(Error::UnknownState(7))),
            "{source:?}"
        );
    }

    /// A write for the writer's queue.
    fn acquire_job(key: &str) -> impl FnOnce(crate::writer::Reply<Acquisition>) -> Job {
        let acquire = Acquire {
            target: (&address(key)).into(),
            fingerprint: FP,
            terms: terms(),
        };
        move |reply| Job::Acquire(acquire, reply)
    }

    fn token_of(acquisition: Result<Acquisition, StoreError>) -> u64 {
        match acquisition {
            Ok(Acquisition::Acquired(lease)) => lease.token.get(),
            other => panic!("expected Acquired, got {other:?}"),
        }
    }

    /// The digest of `key` as an SQL blob literal, for triggers written by hand.
    fn digest_literal(key: &str) -> String {
        let digest = key_digest(&key.parse().unwrap());
        let hex: String = digest.iter().map(|b| format!("{b:02X}")).collect();
        format!("X'{hex}'")
    }

    /// Makes inserting `key`'s record fail with `RAISE(raise, …)` (`ABORT`: the statement is
    /// undone; `ROLLBACK`: the whole transaction).
    async fn refuse_to_insert(path: &Path, key: &str, raise: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON idem_records WHEN NEW.key = {} \
             BEGIN SELECT RAISE({raise}, 'refused'); END",
            digest_literal(key)
        )))
        .execute(&mut by_hand(path).await)
        .await
        .unwrap();
    }

    // The writes below are queued while the writer is paused, so they reach it together and form
    // batches of `batch_size`.

    #[tokio::test]
    async fn a_failing_write_is_undone_alone_and_its_neighbours_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("neighbours.db");
        let store = open(&path).await;
        let a = address("a");
        let lease = acquired(&store, &a).await;
        // The second statement of a poisoned acquire fails, after the first took a token.
        refuse_to_insert(&path, "poisoned", "ABORT").await;

        let writer = &store.writer;
        let resume = writer.pause().await;
        let before = writer.queue(acquire_job("before")).await;
        let poisoned = writer.queue(acquire_job("poisoned")).await;
        let lost = writer
            .queue(|reply| {
                let kind = HolderWriteKind::Release;
                let token = FencingToken::new(lease.token.get() + 100);
                Job::Holder(
                    HolderWrite {
                        target: (&a).into(),
                        token,
                        kind,
                    },
                    reply,
                )
            })
            .await;
        let after = writer.queue(acquire_job("after")).await;
        drop(resume);

        assert_eq!(token_of(before.await.unwrap()), 2);
        let refused = poisoned.await.unwrap();
        assert!(
            matches!(refused, Err(StoreError::Unavailable(_))),
            "{refused:?}"
        );
        assert!(matches!(lost.await.unwrap(), Err(StoreError::LeaseLost)));
        // The poisoned acquire's row was undone; the token it took stays taken (skipped): the
        // next one is 4, and no record holds 3.
        assert_eq!(token_of(after.await.unwrap()), 4);
        assert_eq!(
            scalar::<i64>(&store, "SELECT last FROM idem_fencing").await,
            4
        );
        assert_eq!(
            scalar::<i64>(&store, "SELECT count(*) FROM idem_records WHERE token = 3").await,
            0
        );
        assert_eq!(
            scalar::<i64>(&store, "SELECT count(*) FROM idem_records").await,
            3
        );
        assert_eq!(
            store.get(&a).await.unwrap().unwrap().state.token(),
            lease.token
        );
    }

    #[tokio::test]
    async fn a_failing_write_that_rolls_the_transaction_back_fails_every_write_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rolled_back.db");
        let store = open(&path).await;
        // `RAISE(ROLLBACK)` ends the whole transaction, as a full disk may.
        refuse_to_insert(&path, "poisoned", "ROLLBACK").await;

        let writer = &store.writer;
        let resume = writer.pause().await;
        let before = writer.queue(acquire_job("before")).await;
        let poisoned = writer.queue(acquire_job("poisoned")).await;
        let after = writer.queue(acquire_job("after")).await;
        drop(resume);

        for (name, result) in [
            ("before", before.await.unwrap()),
            ("poisoned", poisoned.await.unwrap()),
            ("after", after.await.unwrap()),
        ] {
            assert!(
                matches!(result, Err(StoreError::Unavailable(_))),
                "{name}: {result:?}"
            );
        }
        assert_eq!(
            scalar::<i64>(&store, "SELECT count(*) FROM idem_records").await,
            0
        );
        assert_eq!(
            scalar::<i64>(&store, "SELECT last FROM idem_fencing").await,
            0
        );
        // The writer goes on with the next transaction.
        assert_eq!(token_of(store.writer.run(acquire_job("next")).await), 1);
    }

    #[tokio::test]
    async fn writes_of_one_key_keep_their_order_across_batch_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions::new(dir.path().join("order.db"))
            .clock(ManualClock::default())
            .batch_size(2);
        let store = SqliteStore::open_with(options).await.unwrap();
        let writer = &store.writer;
        let resume = writer.pause().await;
        let forget_job = |reply| Job::Forget((&address("k")).into(), reply);
        // Batches [acquire, forget] [acquire, forget] [acquire]: reordered, an acquire would
        // find the key in flight, or a forget find nothing.
        let first = writer.queue(acquire_job("k")).await;
        let forgot_first = writer.queue(forget_job).await;
        let second = writer.queue(acquire_job("k")).await;
        let forgot_second = writer.queue(forget_job).await;
        let third = writer.queue(acquire_job("k")).await;
        drop(resume);
        assert_eq!(token_of(first.await.unwrap()), 1);
        assert!(forgot_first.await.unwrap().unwrap());
        assert_eq!(token_of(second.await.unwrap()), 2);
        assert!(forgot_second.await.unwrap().unwrap());
        assert_eq!(token_of(third.await.unwrap()), 3);
    }

    #[tokio::test]
    async fn a_transaction_that_cannot_commit_fails_every_write_in_it_and_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uncommitted.db");
        let store = open(&path).await;
        // Acquiring `doomed` adds a row that breaks a deferred foreign key: COMMIT refuses the
        // transaction, after every statement in it succeeded.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY); \
             CREATE TABLE child (parent INTEGER REFERENCES parent (id) \
                 DEFERRABLE INITIALLY DEFERRED); \
             CREATE TRIGGER orphan AFTER INSERT ON idem_records WHEN NEW.key = {} \
             BEGIN INSERT INTO child VALUES (42); END",
            digest_literal("doomed")
        )))
        .execute(&mut by_hand(&path).await)
        .await
        .unwrap();

        let writer = &store.writer;
        let resume = writer.pause().await;
        let results = [
            writer.queue(acquire_job("a")).await,
            writer.queue(acquire_job("doomed")).await,
            writer.queue(acquire_job("b")).await,
        ];
        drop(resume);
        for result in results {
            let result = result.await.unwrap();
            assert!(
                matches!(result, Err(StoreError::Unavailable(_))),
                "{result:?}"
            );
        }
        assert_eq!(
            scalar::<i64>(&store, "SELECT count(*) FROM idem_records").await,
            0
        );
        assert_eq!(
            scalar::<i64>(&store, "SELECT last FROM idem_fencing").await,
            0
        );
        // The writer goes on with the next transaction.
        assert_eq!(acquired(&store, &address("a")).await.token.get(), 1);
    }

    #[tokio::test]
    async fn an_acquire_whose_caller_gave_up_before_it_ran_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join("abandoned.db")).await;
        let writer = &store.writer;
        let resume = writer.pause().await;
        drop(writer.queue(acquire_job("abandoned")).await);
        let kept = writer.queue(acquire_job("kept")).await;
        drop(resume);
        assert_eq!(token_of(kept.await.unwrap()), 1);
        assert_eq!(store.get(&address("abandoned")).await.unwrap(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_acquire_whose_caller_gave_up_while_another_process_held_the_lock_writes_nothing() {
        use sqlx::Connection;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("waited.db");
        let store = open(&path).await;
        // Another process's write transaction: the writer's `BEGIN` waits for it.
        let mut other = by_hand(&path).await;
        let lock = other.begin_with("BEGIN IMMEDIATE").await.unwrap();
        let abandoned = store.writer.queue(acquire_job("abandoned")).await;
        store.writer.taken().await;
        // The writer took the acquire and waits in `BEGIN` (it starts one as soon as it takes a
        // write); its caller gives up meanwhile.
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(abandoned);
        lock.rollback().await.unwrap();

        assert_eq!(acquired(&store, &address("kept")).await.token.get(), 1);
        assert_eq!(store.get(&address("abandoned")).await.unwrap(), None);
    }

    #[tokio::test]
    async fn writes_after_close_are_unavailable_and_queued_ones_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("closing.db");
        let store = open(&path).await;
        let queued = store.writer.queue(acquire_job("queued")).await;
        store.close().await;
        assert_eq!(token_of(queued.await.unwrap()), 1);
        let late = store.acquire(&address("late"), &FP, terms()).await;
        assert!(matches!(late, Err(StoreError::Unavailable(_))), "{late:?}");
        assert!(matches!(
            store.ping().await,
            Err(StoreError::Unavailable(_))
        ));
        let reopened = open(&path).await;
        assert_eq!(
            reopened
                .get(&address("queued"))
                .await
                .unwrap()
                .unwrap()
                .state
                .token()
                .get(),
            1
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_pools_on_one_file_elect_exactly_one_holder() {
        const CALLERS: usize = 32;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        // Two pools, as two processes would have.
        let stores = [open(&path).await, open(&path).await];
        let a = address("contended");
        let (acquired, in_flight) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let tasks: Vec<_> = (0..CALLERS)
            .map(|n| {
                let (store, a) = (stores[n % 2].clone(), a.clone());
                let (acquired, in_flight) = (acquired.clone(), in_flight.clone());
                tokio::spawn(async move {
                    match store.acquire(&a, &FP, terms()).await.unwrap() {
                        Acquisition::Acquired(_) => acquired.fetch_add(1, Ordering::SeqCst),
                        Acquisition::InFlight { .. } => in_flight.fetch_add(1, Ordering::SeqCst),
                        other => panic!("unexpected {other:?}"),
                    };
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(acquired.load(Ordering::SeqCst), 1);
        assert_eq!(in_flight.load(Ordering::SeqCst), CALLERS - 1);
        let count: i64 = scalar(&stores[1], "SELECT count(*) FROM idem_records").await;
        assert_eq!(count, 1);
    }
}
