//! [`Walk`]: the record keys (or the parts lists) of a prefix, one `SCAN` step at a time, on the
//! server or on each master of a cluster in turn.

use redis::RedisResult;

use crate::connection::{Connection, Shard};

/// A walk over the keys that match a pattern: `SCAN` on each shard in [`Connection::shards`]'s
/// order, from cursor 0 to the end. It holds no state in Redis, so it resumes from any position
/// it reported: Redis promises that a full walk finds every key present from its start to its
/// end (some maybe twice, if the server resizes its table meanwhile).
pub(crate) struct Walk<'c> {
    connection: &'c Connection,
    pattern: &'c str,
    /// The type of the keys walked: `hash` (records), `list` (parts).
    key_type: &'static str,
    shards: Vec<Shard>,
    /// The next step's shard, as an index into `shards` (past the end once the walk is over),
    /// and its cursor there.
    shard: usize,
    cursor: u64,
}

/// The keys one `SCAN` step found, sorted, without duplicates.
pub(crate) struct Step {
    /// The shard it ran on.
    pub(crate) shard: Shard,
    /// Where it started: the shard's index and the cursor.
    pub(crate) at: (u64, u64),
    pub(crate) keys: Vec<String>,
}

impl<'c> Walk<'c> {
    /// A walk over the hash keys (records) matching `pattern` from `cursor` on the shard at
    /// index `shard` (over at once when there is no such shard), or from the start with
    /// `(0, 0)`.
    pub(crate) async fn new(
        connection: &'c Connection,
        pattern: &'c str,
        from: (u64, u64),
    ) -> RedisResult<Self> {
        Self::of_type(connection, pattern, "hash", from).await
    }

    /// A walk over the list keys (parts) matching `pattern`, from the start.
    pub(crate) async fn lists(connection: &'c Connection, pattern: &'c str) -> RedisResult<Self> {
        Self::of_type(connection, pattern, "list", (0, 0)).await
    }

    async fn of_type(
        connection: &'c Connection,
        pattern: &'c str,
        key_type: &'static str,
        (shard, cursor): (u64, u64),
    ) -> RedisResult<Self> {
        Ok(Self {
            connection,
            pattern,
            key_type,
            shards: connection.shards().await?,
            shard: usize::try_from(shard).unwrap_or(usize::MAX),
            cursor,
        })
    }

    /// Where the next step starts (shard index, cursor), or `None` once the walk is over.
    pub(crate) fn position(&self) -> Option<(u64, u64)> {
        (self.shard < self.shards.len()).then_some((self.shard as u64, self.cursor))
    }

    /// The next step, or `None` once the walk is over.
    pub(crate) async fn step(&mut self) -> RedisResult<Option<Step>> {
        let Some(at) = self.position() else {
            return Ok(None);
        };
        let shard = self.shards[self.shard].clone();
        let (next, mut keys) = self
            .connection
            .scan_step(&shard, self.cursor, self.pattern, self.key_type)
            .await?;
        keys.sort_unstable();
        keys.dedup();
        if next == 0 {
            self.shard += 1;
        }
        self.cursor = next;
        Ok(Some(Step { shard, at, keys }))
    }
}
