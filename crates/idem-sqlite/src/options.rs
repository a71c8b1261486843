//! [`SqliteOptions`]: how to open a [`SqliteStore`](crate::SqliteStore).

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use idem_core::{Clock, SystemClock};
use rusqlite::{Connection, OpenFlags};
use sqlx::{
    ConnectOptions, SqliteConnection,
    sqlite::{SqliteConnectOptions, SqliteJournalMode},
};

use crate::error::is_busy;

/// When SQLite waits for the disk (its `synchronous` setting; the journal is always WAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is flushed to disk before it returns: a completed key survives a power loss.
    #[default]
    Full,
    /// The log is flushed at checkpoints only: a commit survives a crash of the process, but the
    /// last ones may be lost (never corrupted) when the machine loses power. Faster.
    Normal,
}

impl Synchronous {
    /// The value of SQLite's `synchronous` pragma, for every connection of the store.
    pub(crate) fn as_pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

impl std::str::FromStr for Synchronous {
    type Err = UnknownSynchronous;

    /// `full` or `normal`, in any case, as SQLite's pragma takes them.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value.eq_ignore_ascii_case("full") {
            Ok(Synchronous::Full)
        } else if value.eq_ignore_ascii_case("normal") {
            Ok(Synchronous::Normal)
        } else {
            Err(UnknownSynchronous)
        }
    }
}

/// A `synchronous` setting other than `full` or `normal`.
#[derive(Debug, thiserror::Error)]
#[error("expected full or normal")]
#[non_exhaustive]
pub struct UnknownSynchronous;

/// How to open a [`SqliteStore`](crate::SqliteStore): the file, the clock and SQLite's settings.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::time::Duration;
/// use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
///
/// let dir = tempfile::tempdir()?;
/// let options = SqliteOptions::new(dir.path().join("idem.db"))
///     .synchronous(Synchronous::Normal)
///     .pool_size(8)
///     .batch_size(64)
///     .busy_timeout(Duration::from_secs(1));
/// let store = SqliteStore::open_with(options).await?;
/// # drop(store);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteOptions {
    path: PathBuf,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) synchronous: Synchronous,
    pub(crate) pool_size: u32,
    pub(crate) batch_size: usize,
    pub(crate) queue_size: usize,
    pub(crate) busy_timeout: Duration,
}

impl SqliteOptions {
    /// The reader connections of [`SqliteOptions::new`].
    pub const DEFAULT_POOL_SIZE: u32 = 4;
    /// The writes of one transaction at most, by default.
    pub const DEFAULT_BATCH_SIZE: usize = 128;
    /// The writes waiting for the writer at most, by default.
    pub const DEFAULT_QUEUE_SIZE: usize = 1024;
    /// The writes of one transaction at most, by default.
    #[deprecated(note = "renamed DEFAULT_BATCH_SIZE")]
    pub const DEFAULT_MAX_BATCH: usize = Self::DEFAULT_BATCH_SIZE;
    /// The writes waiting for the writer at most, by default.
    #[deprecated(note = "renamed DEFAULT_QUEUE_SIZE")]
    pub const DEFAULT_QUEUE: usize = Self::DEFAULT_QUEUE_SIZE;
    /// How long a write waits for another process's lock, by default.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

    /// The database at `path` (created if missing), on the system clock, with
    /// [`Synchronous::Full`], [4](Self::DEFAULT_POOL_SIZE) reader connections, batches of up
    /// to [128](Self::DEFAULT_BATCH_SIZE) writes, a queue of [1024](Self::DEFAULT_QUEUE_SIZE) writes
    /// and a busy timeout of [5 seconds](Self::DEFAULT_BUSY_TIMEOUT).
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_owned(),
            clock: Arc::new(SystemClock),
            synchronous: Synchronous::default(),
            pool_size: Self::DEFAULT_POOL_SIZE,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            queue_size: Self::DEFAULT_QUEUE_SIZE,
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads time from `clock` (a [`ManualClock`](idem_core::ManualClock) in tests). Processes
    /// sharing a file must agree on the time.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets how commits wait for the disk.
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets the number of reader connections (at least 1): reads (`get`, and `acquire` of a key
    /// that is completed or in flight) run on them in parallel, beside the one writer connection.
    /// A read beyond them waits for one to be free.
    #[must_use]
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Sets how many writes one transaction holds at most (at least 1). Writes that arrive while
    /// a transaction commits go into the next one together, up to this many; a single write
    /// waits for nothing.
    #[must_use]
    pub fn batch_size(mut self, writes: usize) -> Self {
        self.batch_size = writes.max(1);
        self
    }

    /// Sets how many writes may wait for the writer (at least 1); a write beyond them waits for
    /// room before it is queued.
    #[must_use]
    pub fn queue_size(mut self, writes: usize) -> Self {
        self.queue_size = writes.max(1);
        self
    }

    /// [`batch_size`](Self::batch_size), under its old name.
    #[deprecated(note = "renamed batch_size")]
    #[must_use]
    pub fn max_batch(self, writes: usize) -> Self {
        self.batch_size(writes)
    }

    /// [`queue_size`](Self::queue_size), under its old name.
    #[deprecated(note = "renamed queue_size")]
    #[must_use]
    pub fn queue(self, writes: usize) -> Self {
        self.queue_size(writes)
    }

    /// Sets how long a write waits for another connection or process to finish its own before
    /// the store reports itself unavailable.
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Opens a connection to migrate the file with, creating the file if missing, retrying for up to the busy
    /// timeout while another process turns a new file to WAL: that takes an exclusive lock which
    /// SQLite's busy handler does not wait for.
    pub(crate) async fn connect_migrator(&self) -> Result<SqliteConnection, sqlx::Error> {
        create_private(&self.path)?;
        let deadline = Instant::now() + self.busy_timeout;
        loop {
            match self.connect_options().connect().await {
                Err(error) if is_busy(&error) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                result => return result,
            }
        }
    }

    /// Opens the writer's connection to the (migrated) file: WAL, the store's `synchronous` and
    /// busy timeout, foreign keys on, as the migrator's connection has them.
    pub(crate) fn connect_writer(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(&self.path, flags)?;
        connection.busy_timeout(self.busy_timeout)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", self.synchronous.as_pragma())?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        Ok(connection)
    }

    /// Opens a reader connection: the writer's settings, and it refuses writes.
    pub(crate) fn connect_reader(&self) -> rusqlite::Result<Connection> {
        let connection = self.connect_writer()?;
        connection.pragma_update(None, "query_only", "ON")?;
        Ok(connection)
    }

    fn connect_options(&self) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .pragma("synchronous", self.synchronous.as_pragma())
            .busy_timeout(self.busy_timeout)
    }
}

/// Creates the database file, if missing, readable and writable by its owner only (`0600`),
/// whatever the umask: it holds the records. SQLite creates the `-wal` and `-shm` files with the
/// database file's permissions. An existing file keeps the permissions it has.
fn create_private(path: &Path) -> Result<(), sqlx::Error> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(sqlx::Error::Io(error)),
    }
}

impl fmt::Debug for SqliteOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteOptions")
            .field("path", &self.path)
            .field("synchronous", &self.synchronous)
            .field("pool_size", &self.pool_size)
            .field("batch_size", &self.batch_size)
            .field("queue_size", &self.queue_size)
            .field("busy_timeout", &self.busy_timeout)
            .finish_non_exhaustive()
    }
}
