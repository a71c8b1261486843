//! [`SqliteStore`]: idempotency records in a SQLite file.

use std::{fmt, path::Path, sync::Arc, time::Duration};

use idem_core::{
    Acquisition, Address, Clock, FencingToken, Fingerprint, Outcome, Record, Store, StoreError,
    Terms, Timestamp,
};
use sqlx::{Connection, SqlitePool};

use crate::{
    Error, SqliteOptions,
    error::store_error,
    key_digest::{self, key_digest},
    migrations::MIGRATOR,
    row::{self, sql_int},
    writer::{Job, Writer, WriterOptions},
    writes::{self, Acquire, HolderWrite, HolderWriteKind, Target},
};

/// A durable store in one SQLite file (WAL journal), shared safely by every process that opens it.
///
/// Writes are committed in groups: one writer thread owns the write connection, and the writes
/// that arrive while it commits go into its next transaction together, each in its own
/// savepoint, each answered only once that transaction committed. With
/// [`Synchronous::Full`](crate::Synchronous::Full) one flush of the disk makes a whole group
/// durable, so the store's throughput grows with its callers instead of queueing them behind one
/// flush each. Each transaction takes SQLite's write lock before it reads (`BEGIN IMMEDIATE`), so
/// concurrent callers, in this process or in others, behave as if they ran one after the other.
/// Reads (`get`, and an `acquire` that finds the key completed or in flight) run on a pool of
/// reader connections and never wait for the writer. Time comes from the injected [`Clock`]
/// only; processes sharing a file must agree on it.
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
    readers: SqlitePool,
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
        let readers = options.connect_readers().await.map_err(Error::Open)?;
        let writer = Writer::start(WriterOptions {
            path: options.path(),
            synchronous: options.synchronous,
            busy_timeout: options.busy_timeout,
            clock: Arc::clone(&options.clock),
            queue: options.queue,
            max_batch: options.max_batch,
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
        self.readers.close().await;
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
        let row = sqlx::query(include_str!("../sql/acquire_peek.sql"))
            .bind(target.scope.as_slice())
            .bind(target.key.as_slice())
            .fetch_optional(&self.readers)
            .await
            .map_err(store_error)?;
        if let Some(answer) = writes::peek(row.as_ref(), fingerprint, self.clock.now())? {
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
        let now = self.clock.now();
        let row = sqlx::query(include_str!("../sql/get.sql"))
            .bind(address.scope.as_bytes().as_slice())
            .bind(key_digest(&address.key).as_slice())
            .bind(sql_int(now.as_millis()))
            .fetch_optional(&self.readers)
            .await
            .map_err(store_error)?;
        row.as_ref().map(row::record).transpose()
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
            return Err(crate::writer::closed());
        }
        sqlx::query(include_str!("../sql/ping.sql"))
            .execute(&self.readers)
            .await
            .map_err(store_error)
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use idem_core::{DecodeError, Lease, ManualClock, Policy, StoredResponse};
    use sqlx::Row;

    use super::*;
    use crate::Synchronous;

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

    async fn applied_migrations(store: &SqliteStore) -> Vec<(i64, bool)> {
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&store.readers)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn migrations_are_applied_on_open_and_once_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let store = open(&path).await;
        assert_eq!(applied_migrations(&store).await, [(1, true), (2, true)]);
        let lease = acquired(&store, &address("kept")).await;
        store.close().await;

        let store = open(&path).await;
        assert_eq!(applied_migrations(&store).await, [(1, true), (2, true)]);
        let record = store.get(&address("kept")).await.unwrap().unwrap();
        assert_eq!(record.state.token(), lease.token);
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
        assert_eq!(applied_migrations(&store).await, [(1, true), (2, true)]);
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
        let (rows, digest): (i64, Vec<u8>) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM idem_records), \
             (SELECT key FROM idem_records WHERE token = 1)",
        )
        .fetch_one(&store.readers)
        .await
        .unwrap();
        assert_eq!(rows, 600);
        assert_eq!(digest, key_digest(&"legacy-0".parse().unwrap()));
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .fetch_all(&store.readers)
                .await
                .unwrap();
        assert_eq!(tables, ["_sqlx_migrations", "idem_fencing", "idem_records"]);
    }

    #[tokio::test]
    async fn the_file_holds_key_digests_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests.db");
        let store = open(&path).await;
        let secret = address("customer-jane@example.com");
        acquired(&store, &secret).await;
        let key: Vec<u8> = sqlx::query_scalar("SELECT key FROM idem_records")
            .fetch_one(&store.readers)
            .await
            .unwrap();
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
            assert_eq!(applied_migrations(&store).await, [(1, true), (2, true)]);
        }
    }

    #[tokio::test]
    async fn every_connection_uses_wal_and_the_chosen_synchronous() {
        let dir = tempfile::tempdir().unwrap();
        for (synchronous, code) in [(Synchronous::Full, 2), (Synchronous::Normal, 1)] {
            let options = SqliteOptions::new(dir.path().join("pragmas.db"))
                .synchronous(synchronous)
                .pool_size(3);
            let store = SqliteStore::open_with(options).await.unwrap();
            let mut connections = Vec::new();
            for _ in 0..3 {
                connections.push(store.readers.acquire().await.unwrap());
            }
            for connection in &mut connections {
                let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                    .fetch_one(&mut **connection)
                    .await
                    .unwrap();
                let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(&mut **connection)
                    .await
                    .unwrap();
                assert_eq!((mode.as_str(), level), ("wal", code), "{synchronous:?}");
            }
            drop(connections);
            store.close().await;
        }
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

    async fn count(store: &SqliteStore, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(&store.readers)
            .await
            .unwrap()
    }

    /// The digest of `key` as an SQL blob literal, for triggers written by hand.
    fn digest_literal(key: &str) -> String {
        let digest = key_digest(&key.parse().unwrap());
        let hex: String = digest.iter().map(|b| format!("{b:02X}")).collect();
        format!("X'{hex}'")
    }

    // The writes below are queued while the writer is paused, so they reach it together and form
    // batches of `max_batch`.

    #[tokio::test]
    async fn a_failing_write_is_undone_alone_and_its_neighbours_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("neighbours.db");
        let store = open(&path).await;
        let a = address("a");
        let lease = acquired(&store, &a).await;
        // The second statement of a poisoned acquire fails, after the first took a token.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON idem_records WHEN NEW.key = {} \
             BEGIN SELECT RAISE(ABORT, 'refused'); END",
            digest_literal("poisoned")
        )))
        .execute(&mut by_hand(&path).await)
        .await
        .unwrap();

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
        // The poisoned acquire's token was rolled back with it: the next one is 3, not 4.
        assert_eq!(token_of(after.await.unwrap()), 3);
        assert_eq!(count(&store, "SELECT last FROM idem_fencing").await, 3);
        assert_eq!(count(&store, "SELECT count(*) FROM idem_records").await, 3);
        assert_eq!(
            store.get(&a).await.unwrap().unwrap().state.token(),
            lease.token
        );
    }

    #[tokio::test]
    async fn writes_of_one_key_keep_their_order_across_batch_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions::new(dir.path().join("order.db"))
            .clock(ManualClock::default())
            .max_batch(2);
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
        assert_eq!(count(&store, "SELECT count(*) FROM idem_records").await, 0);
        assert_eq!(count(&store, "SELECT last FROM idem_fencing").await, 0);
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
        let count: i64 = sqlx::query("SELECT count(*) FROM idem_records")
            .fetch_one(&stores[1].readers)
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, 1);
    }
}
