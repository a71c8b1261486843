//! The readers: a bounded pool of read-only connections, on which each read runs in place, on
//! the caller's own thread.
//!
//! Every read of the store (`get`, the look `acquire` takes before it asks the writer, `ping`)
//! is one point read by primary key, `(scope, key)`, of a file in WAL mode (`read_parts` a short
//! walk from one: the next parts of one execution, within the caller's budget of bytes): a few
//! pages, nearly always in the operating system's cache, read in microseconds, without waiting
//! for the writer (a WAL reader sees the last committed transaction and takes no lock a writer
//! holds). An async driver would hand each read to a worker thread and back, and those two
//! wake-ups cost more than the read itself. So a read runs where it is called, like any short
//! computation of the task.
//!
//! What can wait is finding a free connection: there are [`SqliteOptions::pool_size`] of them,
//! opened with the store, and a caller that finds them all in use waits for one asynchronously
//! (a semaphore permit), never blocking its thread. A read does hold its thread while SQLite reads
//! a page the operating system no longer caches (a file much larger than memory, or cold after a
//! restart), and, up to the busy timeout, in the rare moments SQLite makes a reader wait for
//! another connection (one recovering the log after a crash).
//!
//! The operators' reads, a listing or a census ([`Readers::read_apart`]), walk an index over many
//! records, up to every record of the file: they run on one of Tokio's blocking threads instead,
//! on a connection of the same pool.
//!
//! [`SqliteOptions::pool_size`]: crate::SqliteOptions::pool_size

use std::{
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use idem_core::StoreError;
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::{Error, SqliteOptions, error::closed};

/// The store's reader connections. Clones share them.
#[derive(Clone)]
pub(crate) struct Readers {
    pool: Arc<Pool>,
}

struct Pool {
    /// One permit per idle connection: a caller holding one finds a connection in `idle`.
    permits: Semaphore,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    /// Opens `pool_size` reader connections to the (migrated) file.
    pub(crate) fn open(options: &SqliteOptions) -> Result<Self, Error> {
        let idle = (0..options.pool_size)
            .map(|_| options.connect_reader())
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::OpenReader)?;
        Ok(Self {
            pool: Arc::new(Pool {
                permits: Semaphore::new(idle.len()),
                idle: Mutex::new(idle),
            }),
        })
    }

    /// Runs `read` on a free connection, on this thread, once one is free.
    pub(crate) async fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let lent = self.lend().await?;
        read(lent.connection())
    }

    /// Runs `read`, which may take long, on a free connection, once one is free, on a blocking
    /// thread: the caller's thread goes on with its other tasks meanwhile. A read whose caller
    /// gave up runs to its end, then gives its connection back.
    pub(crate) async fn read_apart<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let lent = self.lend().await?;
        match tokio::task::spawn_blocking(move || read(lent.connection())).await {
            Ok(result) => result,
            Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
            // The runtime is shutting down.
            Err(_) => Err(closed()),
        }
    }

    /// A free connection, once one is.
    async fn lend(&self) -> Result<Lent, StoreError> {
        let permit = self.pool.permits.acquire().await.map_err(|_| closed())?;
        // Empty only if the store was closed since the permit was taken.
        let connection = self.pool.idle().pop().ok_or_else(closed)?;
        // Given back by the connection's `Lent` when it is dropped, after the connection.
        permit.forget();
        Ok(Lent {
            connection: Some(connection),
            pool: Arc::clone(&self.pool),
        })
    }

    /// Closes the connections: those in use are closed when their read ends. Later reads fail.
    pub(crate) fn close(&self) {
        self.pool.permits.close();
        self.pool.idle().clear();
    }
}

impl Pool {
    fn idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        // The lock is only held to push or pop: a panic cannot leave the stack half changed.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection taken from the pool, given back when dropped (after its read, or if it panics),
/// before its permit is released.
struct Lent {
    connection: Option<Connection>,
    pool: Arc<Pool>,
}

impl Lent {
    fn connection(&self) -> &Connection {
        self.connection
            .as_ref()
            .expect("a lent connection is taken back only when dropped")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            let mut idle = self.pool.idle();
            // Checked under the lock that `close` clears the stack with.
            if !self.pool.permits.is_closed() {
                idle.push(connection);
            }
        }
        self.pool.permits.add_permits(1);
    }
}

impl fmt::Debug for Readers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readers")
            .field("idle", &self.pool.permits.available_permits())
            .field("closed", &self.pool.permits.is_closed())
            .finish()
    }
}

#[cfg(test)]
impl Readers {
    /// Runs `read` `reads` times at once, each on a task of its own, in groups of `together`
    /// whose reads wait for each other inside their connections (a barrier): each group holds
    /// `together` connections at the same time. Needs a multi-thread runtime with more workers
    /// than `together`, and `reads` a multiple of it. Returns the results, in the order of the
    /// tasks, and the most reads that were inside a connection at once.
    pub(crate) async fn read_together<T: Send + 'static>(
        &self,
        reads: usize,
        together: usize,
        read: impl Fn(&Connection, usize) -> T + Send + Sync + 'static,
    ) -> (Vec<T>, usize) {
        use std::sync::{
            Barrier,
            atomic::{AtomicUsize, Ordering},
        };

        assert_eq!(reads % together, 0, "whole groups only");
        let barrier = Arc::new(Barrier::new(together));
        let (in_use, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let read = Arc::new(read);
        let tasks: Vec<_> = (0..reads)
            .map(|task| {
                let (readers, barrier, read) = (self.clone(), barrier.clone(), read.clone());
                let (in_use, most) = (in_use.clone(), most.clone());
                tokio::spawn(async move {
                    readers
                        .read(|connection| {
                            most.fetch_max(
                                in_use.fetch_add(1, Ordering::SeqCst) + 1,
                                Ordering::SeqCst,
                            );
                            barrier.wait();
                            let result = read(connection, task);
                            in_use.fetch_sub(1, Ordering::SeqCst);
                            Ok(result)
                        })
                        .await
                })
            })
            .collect();
        let mut results = Vec::with_capacity(reads);
        for task in tasks {
            results.push(
                task.await
                    .expect("the read task ends")
                    .expect("the read runs"),
            );
        }
        (results, most.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::SqliteStore;

    /// Readers on a new file in `dir`, which a store migrated and closed, and the options they
    /// were opened with.
    async fn readers(dir: &Path, pool_size: u32) -> (SqliteOptions, Readers) {
        let options = SqliteOptions::new(dir.join("readers.db")).pool_size(pool_size);
        let store = SqliteStore::open_with(options.clone()).await.unwrap();
        store.close().await;
        let readers = Readers::open(&options).unwrap();
        (options, readers)
    }

    /// The process's open file descriptors on the file at `path`: SQLite opens one per connection.
    #[cfg(target_os = "linux")]
    fn descriptors_on(path: &Path) -> usize {
        let path = path.canonicalize().unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| *target == path)
            .count()
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn more_reads_than_connections_all_complete_on_at_most_pool_size_connections() {
        const READS: usize = 32;
        let dir = tempfile::tempdir().unwrap();
        let (options, readers) = readers(dir.path(), 2).await;
        assert_eq!(descriptors_on(options.path()), 2);
        // Reads meet in pairs inside their connections, so two are in use together at least;
        // the 30 others wait meanwhile, without a thread each (there are 4).
        let (echoed, most) = readers
            .read_together(READS, 2, |connection, task| {
                let echo =
                    connection.query_row("SELECT ?1", [task as i64], |row| row.get::<_, i64>(0));
                echo.unwrap()
            })
            .await;
        assert_eq!(echoed, (0..READS as i64).collect::<Vec<_>>());
        assert_eq!(most, 2);
        assert_eq!(descriptors_on(options.path()), 2);

        readers.close();
        assert_eq!(descriptors_on(options.path()), 0);
        let late = readers.read(|_| Ok(())).await;
        assert!(matches!(late, Err(StoreError::Unavailable(_))), "{late:?}");
    }

    /// Where a test's read runs: in place ([`Readers::read`]) or on a blocking thread
    /// ([`Readers::read_apart`]).
    #[derive(Debug, Clone, Copy)]
    enum Way {
        InPlace,
        Apart,
    }

    impl Way {
        async fn read<T: Send + 'static>(
            self,
            readers: &Readers,
            read: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        ) -> Result<T, StoreError> {
            match self {
                Way::InPlace => readers.read(read).await,
                Way::Apart => readers.read_apart(read).await,
            }
        }

        /// Runs a read that panics, on a task of its own, and checks that the task panicked.
        async fn panic(self, readers: &Readers) {
            let panicking = readers.clone();
            let panicked = tokio::spawn(async move {
                self.read(&panicking, |_| -> Result<(), StoreError> {
                    panic!("a bug in a read")
                })
                .await
            })
            .await;
            assert!(panicked.unwrap_err().is_panic());
        }

        /// `SELECT 1`, once a connection is free.
        async fn select_one(self, readers: &Readers) -> i64 {
            self.read(readers, |connection| {
                Ok(connection
                    .query_row("SELECT 1", [], |row| row.get(0))
                    .unwrap())
            })
            .await
            .unwrap()
        }
    }

    #[tokio::test]
    async fn a_connection_is_given_back_after_a_panicking_read() {
        let dir = tempfile::tempdir().unwrap();
        let (_, readers) = readers(dir.path(), 1).await;
        Way::InPlace.panic(&readers).await;
        assert_eq!(Way::InPlace.select_one(&readers).await, 1);
    }

    #[tokio::test]
    async fn a_read_apart_gives_its_connection_back_after_a_panic_and_after_its_caller_gave_up() {
        let dir = tempfile::tempdir().unwrap();
        let (_, readers) = readers(dir.path(), 1).await;
        Way::Apart.panic(&readers).await;

        let (started, has_started) = tokio::sync::oneshot::channel();
        let (go, may_go) = std::sync::mpsc::channel::<()>();
        let abandoned = readers.clone();
        let caller = tokio::spawn(async move {
            abandoned
                .read_apart(move |_| {
                    started.send(()).unwrap();
                    may_go.recv().unwrap();
                    Ok(())
                })
                .await
        });
        has_started.await.unwrap();
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        go.send(()).unwrap();
        // The only connection, back once the abandoned read ended.
        assert_eq!(Way::Apart.select_one(&readers).await, 1);
    }
}
