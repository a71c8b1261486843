//! [`RedisStore`]: idempotency records in Redis, on one server or a Redis Cluster.

use std::{fmt, future::Future, sync::Arc, time::Duration};

use bytes::Bytes;
use idem_core::{
    Acquisition, Address, Census, CensusClaim, CensusTurn, Clock, FencingToken, Fingerprint,
    ListPage, ListQuery, ManualClock, Outcome, Pace, Record, Store, StoreError, Terms, Timestamp,
};
use redis::Value;

use crate::{
    Error, KeyPrefix, RedisOptions,
    batch::Batcher,
    changes::Changes,
    connection::Connection,
    error::store_error,
    keys::{Keys, census_board_key, parts_pattern, record_pattern},
    listing::{self, BoardWrite},
    operation::{Kind, Operation},
    reply,
    scripts::{self, millis},
    walk::Walk,
};

/// The largest `max_bytes` sent to the read script: exact in Lua's doubles.
const MAX_READ_BYTES: usize = 1 << 52;

/// A store in Redis, shared by every process that uses the same server (or cluster) and
/// [prefix](RedisOptions::prefix).
///
/// Every operation runs inside one Lua script call (`EVALSHA`), which Redis runs atomically:
/// concurrent callers, in this process or in others, behave as if they ran one after the other.
/// Alone, a new key takes two round trips (acquire, complete), a replay one.
///
/// - **Batching**: the store sends one script call at a time per lane: on a single server an
///   address falls in one of a few lanes ([`lanes`](RedisOptions::lanes)), on a cluster each
///   slot is a lane. An operation that finds none of its lane on its way goes at once; those
///   that arrive meanwhile wait in a bounded queue ([`queue_size`](RedisOptions::queue_size))
///   and go together in the lane's next call, up to [`batch_size`](RedisOptions::batch_size)
///   of them, run in the queue's order, each with its own reply or error. So many concurrent
///   keys share each round trip and each call's cost in Redis, two operations on one key never
///   swap, and on a cluster a master that stalls holds up its own slots only.
/// - **Time** is the server's `TIME`, never the caller's clock, so instances with skewed clocks
///   agree.
/// - **Expiry** is the server's: each record key and parts list expires (`PEXPIREAT`) when the
///   record does, so Redis removes expired records and parts by itself and
///   [`purge_expired`](Store::purge_expired) finds nothing to do (it returns 0).
/// - **Fencing tokens** are the server's time in milliseconds × 1024 plus 10 bits derived from
///   the address, or one more than the address's last token when that is larger (the last token
///   is kept in a small key beside a record removed before it expires). They grow across
///   releases, forgets, expiry and even restarts that lost the records, as long as the server's
///   clock does not go back.
/// - **Cluster**: an address's keys share one hash tag, derived from a hash of the scope and
///   key (which never appear in clear), so every script runs on one shard.
/// - **Wake-ups**: completing, releasing or forgetting a record that an `acquire` found in
///   flight, or appending a part of its streamed response, is published (sharded pub/sub on a
///   cluster), and [`changed`](Store::changed) resolves on it, so that waiters on other
///   instances replay or follow at once; a record nobody found in flight costs no message.
/// - **Streamed parts**: the parts of one execution are a Redis list beside its record,
///   `{prefix:HASH}:parts:TOKEN` (in the record's slot), whose first element is the list's
///   expiry and the others the parts in order. [`append_part`](Store::append_part) is one
///   script, like the other operations and batched with them: it checks on the server's clock
///   that the token holds the live processing record, compares the list's length with the
///   index, pushes the part, sets the list's expiry (element and `PEXPIREAT`) to the record's,
///   and announces the append as a completion is announced. [`read_parts`](Store::read_parts)
///   reads a range of the list (`LRANGE`, at most 256 parts, cut at `max_bytes`) in a script
///   that sees an expired list as empty; [`discard_parts`](Store::discard_parts) deletes the
///   list. The list expires as a whole, when the record did at the latest append (a record's
///   expiry only grows while one token holds it): so a part appended before a renewal lives as
///   long as the last one, and a list left to expire while a renewed record lives on is gone
///   (the next append is [`PartOutOfOrder`](StoreError::PartOutOfOrder) with `next: 0`).
///   [`forget`](Store::forget) deletes the lists of the record's
///   execution and of the last one released or forgotten (the token the fence key keeps);
///   those of executions taken over earlier are no longer named anywhere, and expire on their
///   own, with the record they were written for.
///
/// Durability is Redis's: see the `appendonly` settings in `docs/stores.md`.
///
/// Clones share the connections. Open the store inside a Tokio runtime: it runs a task that
/// keeps its pub/sub subscriptions, stopped when the last clone is dropped.
///
/// # Examples
///
/// ```no_run
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse};
/// use idem_redis::RedisStore;
///
/// let store = RedisStore::open("redis://127.0.0.1:6379").await?;
/// let address = Address::anonymous("order-42".parse()?);
/// let fingerprint = Fingerprint::from_bytes([7; 32]);
/// let terms = (&Policy::default()).into();
///
/// let Acquisition::Acquired(lease) = store.acquire(&address, &fingerprint, terms).await? else {
///     unreachable!("a new key is acquired");
/// };
/// let response = Outcome::from(StoredResponse::new(201).body("charged"));
/// store.complete(&address, lease.token, &response, terms.ttl).await?;
///
/// let replay = store.acquire(&address, &fingerprint, terms).await?;
/// assert_eq!(replay, Acquisition::Completed(response));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    batcher: Batcher,
    prefix: KeyPrefix,
    clock: Option<ManualClock>,
    changes: Changes,
}

impl RedisStore {
    /// Connects to the Redis server at `url` (`redis://host:port`) with the default
    /// [`RedisOptions`].
    pub async fn open(url: impl Into<String>) -> Result<Self, Error> {
        Self::open_with(RedisOptions::new(url)).await
    }

    /// Connects to the Redis Cluster that `nodes` (`redis://host:port` each) belong to, with the
    /// default [`RedisOptions`].
    pub async fn open_cluster(
        nodes: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, Error> {
        Self::open_with(RedisOptions::cluster(nodes)).await
    }

    /// Connects as `options` say and loads the scripts.
    pub async fn open_with(options: RedisOptions) -> Result<Self, Error> {
        let connection = Connection::open(&options).await?;
        connection
            .load(&scripts::SCRIPT)
            .await
            .map_err(Error::LoadScripts)?;
        let changes = Changes::open(&options).await?;
        let batcher = Batcher::new(connection.clone(), &options);
        Ok(Self {
            inner: Arc::new(Inner {
                connection,
                batcher,
                prefix: options.prefix,
                clock: options.clock,
                changes,
            }),
        })
    }

    /// The prefix of every key and channel of this store.
    pub fn prefix(&self) -> &KeyPrefix {
        &self.inner.prefix
    }

    /// The Redis key of the hash that holds `address`'s record, for looking at it with
    /// `redis-cli` (`HGETALL`, `PTTL`).
    pub fn record_key(&self, address: &Address) -> String {
        self.keys(address).into_record()
    }

    fn keys(&self, address: &Address) -> Keys {
        Keys::new(&self.inner.prefix, address)
    }

    /// `kind` on `keys`, at [`now`](Self::now).
    fn operation(&self, kind: Kind, keys: &Keys) -> Operation {
        Operation::new(kind, keys, &self.now())
    }

    /// The time the scripts take: the manual clock's in ms, or empty for the server's own.
    fn now(&self) -> String {
        self.inner
            .clock
            .as_ref()
            .map_or_else(String::new, |clock| clock.now().as_millis().to_string())
    }

    async fn run(&self, operation: Operation) -> Result<Value, StoreError> {
        self.inner.batcher.call(operation).await
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.inner.connection {
            Connection::Single(_) => "single server",
            Connection::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisStore")
            .field("mode", &mode)
            .field("prefix", &self.inner.prefix)
            .field("manual_clock", &self.inner.clock.is_some())
            .finish_non_exhaustive()
    }
}

impl Store for RedisStore {
    async fn acquire(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        terms: Terms,
    ) -> Result<Acquisition, StoreError> {
        let operation = self
            .operation(Kind::Acquire, &self.keys(address))
            .arg(fingerprint.as_bytes().as_slice())
            .arg(millis(terms.lease))
            .arg(millis(terms.ttl))
            .arg(address.scope.as_bytes().as_slice())
            .arg(address.key.sha256().as_slice());
        reply::acquisition(&self.run(operation).await?)
    }

    async fn complete(
        &self,
        address: &Address,
        token: FencingToken,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let keys = self.keys(address);
        let operation = self
            .operation(Kind::Complete, &keys)
            .arg(token.get())
            .arg(millis(ttl))
            .arg(outcome.encode())
            .arg(keys.channel());
        reply::held(&self.run(operation).await?)
    }

    async fn release(&self, address: &Address, token: FencingToken) -> Result<(), StoreError> {
        let keys = self.keys(address);
        let operation = self
            .operation(Kind::Release, &keys)
            .arg(token.get())
            .arg(keys.channel());
        reply::held(&self.run(operation).await?)
    }

    async fn renew(
        &self,
        address: &Address,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let operation = self
            .operation(Kind::Renew, &self.keys(address))
            .arg(token.get())
            .arg(millis(lease));
        reply::renewed(&self.run(operation).await?)
    }

    async fn get(&self, address: &Address) -> Result<Option<Record>, StoreError> {
        let operation = self.operation(Kind::Get, &self.keys(address));
        reply::record(&self.run(operation).await?)
    }

    /// Also deletes the parts of the record's execution and of the last execution released or
    /// forgotten before; those of executions taken over earlier expire on their own (see
    /// [`RedisStore`]).
    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let keys = self.keys(address);
        let operation = self.operation(Kind::Forget, &keys).arg(keys.channel());
        reply::flag(&self.run(operation).await?)
    }

    /// Returns 0: Redis removes each record and parts list when it expires, by itself. Under a
    /// [manual clock](RedisOptions::manual_clock) (tests), whose time Redis does not see, it
    /// scans the prefix and removes the records that clock has expired, then the parts of the
    /// lists it has expired, each part counting one.
    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        if self.inner.clock.is_none() {
            return Ok(0);
        }
        let pattern = record_pattern(&self.inner.prefix);
        let mut walk = Walk::new(&self.inner.connection, &pattern, (0, 0))
            .await
            .map_err(store_error)?;
        let mut purged = 0;
        while let Some(step) = walk.step().await.map_err(store_error)? {
            for record in step.keys {
                if purged == limit {
                    return Ok(purged);
                }
                let operation = self.operation(Kind::Purge, &Keys::from_record(record));
                if reply::flag(&self.run(operation).await?)? {
                    purged += 1;
                }
            }
        }
        let pattern = parts_pattern(&self.inner.prefix);
        let mut walk = Walk::lists(&self.inner.connection, &pattern)
            .await
            .map_err(store_error)?;
        while let Some(step) = walk.step().await.map_err(store_error)? {
            for parts in step.keys {
                if purged == limit {
                    return Ok(purged);
                }
                let operation =
                    Operation::on(Kind::PurgeParts, vec![parts.into_bytes()], &self.now())
                        .arg(limit - purged);
                purged += reply::count(&self.run(operation).await?)?;
            }
        }
        Ok(purged)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner
            .connection
            .query(&redis::cmd("PING"))
            .await
            .map(drop)
            .map_err(store_error)
    }

    /// Walks the prefix's keys with `SCAN` (on every master of a cluster, one after the other,
    /// in the order of their addresses), about 1,000 keys per step, and reads each step's
    /// records with one read-only script call on the server that holds them, which returns only
    /// the records the query admits. A page takes at most 10 steps, so its cost is bounded
    /// however few records match: at most 20 round trips (one more for the masters' addresses
    /// on a cluster) and about 35 ms of the server's time, in calls of a few milliseconds (on
    /// the test machine). Such a page may hold fewer than `limit` records, even none, and a
    /// cursor.
    ///
    /// - **Order**: each page is newest first; across pages the order is `SCAN`'s, not time.
    ///   Cursors are [`ListCursor::Scan`](idem_core::ListCursor::Scan): a shard, its `SCAN`
    ///   cursor, and where in that step (in key order: the first 64 bits of the last listed
    ///   key's digest) the last page stopped. Any other cursor is
    ///   [`StoreError::InvalidCursor`].
    /// - **Completeness**: paging to the end lists every record that was live and matching
    ///   during the whole walk at least once, as `SCAN` promises, and once unless Redis resizes
    ///   its key table during the walk (a key may then be found twice); a cluster that
    ///   reshards or fails over during the walk may also miss records. A step split across
    ///   pages resumes after the last listed key, so records that come or go meanwhile shift
    ///   nothing.
    /// - **Older records**: a record is listed with its scope and key digest, which the `a` and
    ///   `k` fields of its hash hold. A record written by a version of idem without listing
    ///   lacks them and is never listed; it goes within its TTL, and
    ///   [`census`](Store::census) counts it meanwhile.
    ///
    /// A record that cannot be read fails the page with [`StoreError::Corrupted`], as it fails
    /// every operation on it.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, StoreError> {
        let pattern = record_pattern(&self.inner.prefix);
        listing::list(&self.inner.connection, &pattern, &self.now(), query).await
    }

    /// Reads the state and times of every record of the prefix, records without the listing's
    /// fields included: `SCAN` over the server's whole keyspace (every master's, on a cluster),
    /// about 1,000 keys per step, and one read-only script call per step that counts its
    /// records, then a rest at `pace`. Its cost is O(keys in Redis): two round trips per 1,000
    /// keys, and about 2 µs of the server's time per key walked plus 4 µs per record counted (on
    /// the test machine: 0.6 s for 100,000 records), in calls of a few milliseconds each, spread
    /// out by the rests. A key that `SCAN` finds twice (when Redis resizes its key table
    /// meanwhile) counts twice, and a record that cannot be read fails the census with
    /// [`StoreError::Corrupted`].
    async fn census(&self, pace: Pace) -> Result<Census, StoreError> {
        let pattern = record_pattern(&self.inner.prefix);
        listing::census(&self.inner.connection, &pattern, &self.now(), pace).await
    }

    /// One call of a script on the board's hash, `{prefix:census}`, on the server's clock.
    async fn claim_census(&self, claim: CensusClaim) -> Result<CensusTurn, StoreError> {
        let key = census_board_key(&self.inner.prefix);
        let write = BoardWrite::Claim(claim);
        let (counts, retry_after, last) =
            listing::census_board(&self.inner.connection, &key, &self.now(), write).await?;
        Ok(if counts {
            CensusTurn::Count { last }
        } else {
            CensusTurn::Wait { last, retry_after }
        })
    }

    async fn post_census(
        &self,
        claimant: u64,
        census: &Census,
        rest: Duration,
    ) -> Result<bool, StoreError> {
        let key = census_board_key(&self.inner.prefix);
        let write = BoardWrite::Post {
            claimant,
            census,
            rest,
        };
        let (posted, ..) =
            listing::census_board(&self.inner.connection, &key, &self.now(), write).await?;
        Ok(posted)
    }

    async fn append_part(
        &self,
        address: &Address,
        token: FencingToken,
        index: u32,
        part: &Bytes,
    ) -> Result<(), StoreError> {
        let keys = self.keys(address);
        let list = vec![
            keys.record().as_bytes().to_vec(),
            keys.parts(token).into_bytes(),
        ];
        let operation = Operation::on(Kind::AppendPart, list, &self.now())
            .arg(token.get())
            .arg(index)
            .arg(part.as_ref())
            .arg(keys.channel());
        reply::appended(&self.run(operation).await?, index)
    }

    /// One script call that reads at most 256 parts: `LRANGE` over the list, 16 parts at a
    /// time until `max_bytes` are reached.
    async fn read_parts(
        &self,
        address: &Address,
        token: FencingToken,
        from: u32,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StoreError> {
        let list = vec![self.keys(address).parts(token).into_bytes()];
        let operation = Operation::on(Kind::ReadParts, list, &self.now())
            .arg(from)
            .arg(max_bytes.min(MAX_READ_BYTES));
        reply::parts(self.run(operation).await?)
    }

    async fn discard_parts(
        &self,
        address: &Address,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let list = vec![self.keys(address).parts(token).into_bytes()];
        let operation = Operation::on(Kind::DiscardParts, list, &self.now());
        reply::flag(&self.run(operation).await?).map(drop)
    }

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changes.changed(self.keys(address).channel())
    }
}
