//! [`SqliteOptions`]: how to open a [`SqliteStore`](crate::SqliteStore).

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use idem_core::{Clock, SystemClock};
use sqlx::{
    SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
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
    synchronous: Synchronous,
    pool_size: u32,
    busy_timeout: Duration,
}

impl SqliteOptions {
    /// The database at `path` (created if missing), on the system clock, with
    /// [`Synchronous::Full`], 4 connections and a busy timeout of 5 seconds.
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_owned(),
            clock: Arc::new(SystemClock),
            synchronous: Synchronous::default(),
            pool_size: 4,
            busy_timeout: Duration::from_secs(5),
        }
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

    /// Sets the number of connections (at least 1). Reads run in parallel; writes take turns.
    #[must_use]
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Sets how long a write waits for another connection or process to finish its own before
    /// the store reports itself unavailable.
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Connects, retrying for up to the busy timeout while another process turns a new file to
    /// WAL: that takes an exclusive lock which SQLite's busy handler does not wait for.
    pub(crate) async fn connect(&self) -> Result<SqlitePool, sqlx::Error> {
        create_private(&self.path)?;
        let deadline = Instant::now() + self.busy_timeout;
        loop {
            match self
                .pool_options()
                .connect_with(self.connect_options())
                .await
            {
                Err(error) if is_busy(&error) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                result => return result,
            }
        }
    }

    fn connect_options(&self) -> SqliteConnectOptions {
        let synchronous = match self.synchronous {
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Normal => SqliteSynchronous::Normal,
        };
        SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(self.busy_timeout)
    }

    fn pool_options(&self) -> SqlitePoolOptions {
        SqlitePoolOptions::new()
            .max_connections(self.pool_size)
            // A connection to a local file does not go stale; pinging it costs a round trip to
            // its worker thread on every operation.
            .test_before_acquire(false)
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
            .field("busy_timeout", &self.busy_timeout)
            .finish_non_exhaustive()
    }
}
