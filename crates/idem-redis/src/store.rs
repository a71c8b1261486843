//! [`RedisStore`]: idempotency records in Redis, on one server or a Redis Cluster.

use std::{fmt, future::Future, sync::Arc, time::Duration};

use idem_core::{
    Acquisition, Address, Clock, FencingToken, Fingerprint, ManualClock, Outcome, Record, Store,
    StoreError, Terms, Timestamp,
};
use redis::Value;

use crate::{
    Error, KeyPrefix, RedisOptions,
    batch::Batcher,
    changes::Changes,
    connection::Connection,
    error::store_error,
    keys::{Keys, record_pattern},
    operation::{Kind, Operation},
    reply, scripts,
};

/// The longest duration sent to Redis, about 1,000 years: times stay exact in Lua's doubles
/// (below 2^53) and valid for `PEXPIREAT`.
const MAX_MILLIS: u64 = 1_000 * 365 * 24 * 3_600 * 1_000;

/// A store in Redis, shared by every process that uses the same server (or cluster) and
/// [prefix](RedisOptions::prefix).
///
/// Every operation runs inside one Lua script call (`EVALSHA`), which Redis runs atomically:
/// concurrent callers, in this process or in others, behave as if they ran one after the other.
/// Alone, a new key takes two round trips (acquire, complete), a replay one.
///
/// - **Batching**: the store sends one script call at a time. An operation that finds none on
///   its way goes at once; those that arrive meanwhile wait in a bounded queue
///   ([`queue_capacity`](RedisOptions::queue_capacity)) and go together in the next call, up to
///   [`batch_size`](RedisOptions::batch_size) of them, run in the queue's order, each with its
///   own reply or error. So many concurrent keys share each round trip and each call's cost in
///   Redis, and two operations on one key never swap.
/// - **Time** is the server's `TIME`, never the caller's clock, so instances with skewed clocks
///   agree.
/// - **Expiry** is the server's: each record key expires (`PEXPIREAT`) when the record does, so
///   Redis removes expired records by itself and [`purge_expired`](Store::purge_expired) finds
///   nothing to do (it returns 0).
/// - **Fencing tokens** are the server's time in milliseconds × 1024 plus 10 bits derived from
///   the address, or one more than the address's last token when that is larger (the last token
///   is kept in a small key beside a record removed before it expires). They grow across
///   releases, forgets, expiry and even restarts that lost the records, as long as the server's
///   clock does not go back.
/// - **Cluster**: an address's keys share one hash tag, derived from a hash of the scope and
///   key (which never appear in clear), so every script runs on one shard.
/// - **Wake-ups**: completing, releasing or forgetting a record that an `acquire` found in
///   flight is published (sharded pub/sub on a cluster), and [`changed`](Store::changed)
///   resolves on it, so that waiters on other instances replay at once; a record nobody found
///   in flight costs no message.
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

    /// `kind` on `keys`, at the manual clock's time, or the server's (an empty override).
    fn operation(&self, kind: Kind, keys: &Keys) -> Operation {
        let now = self
            .inner
            .clock
            .as_ref()
            .map_or_else(String::new, |clock| clock.now().as_millis().to_string());
        Operation::new(kind, keys, &now)
    }

    async fn run(&self, operation: Operation) -> Result<Value, StoreError> {
        self.inner.batcher.call(operation).await
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).map_or(MAX_MILLIS, |ms| ms.min(MAX_MILLIS))
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
            .arg(millis(terms.ttl));
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

    async fn forget(&self, address: &Address) -> Result<bool, StoreError> {
        let keys = self.keys(address);
        let operation = self.operation(Kind::Forget, &keys).arg(keys.channel());
        reply::flag(&self.run(operation).await?)
    }

    /// Returns 0: Redis removes each record when it expires, by itself. Under a
    /// [manual clock](RedisOptions::manual_clock) (tests), whose time Redis does not see, it
    /// scans the prefix and removes the records that clock has expired.
    async fn purge_expired(&self, limit: usize) -> Result<usize, StoreError> {
        if self.inner.clock.is_none() {
            return Ok(0);
        }
        let pattern = record_pattern(&self.inner.prefix);
        let found = self
            .inner
            .connection
            .scan(&pattern)
            .await
            .map_err(store_error)?;
        let mut purged = 0;
        for record in found {
            if purged == limit {
                break;
            }
            let operation = self.operation(Kind::Purge, &Keys::from_record(record));
            if reply::flag(&self.run(operation).await?)? {
                purged += 1;
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

    fn changed(&self, address: &Address) -> impl Future<Output = ()> + Send + 'static {
        self.inner.changes.changed(self.keys(address).channel())
    }
}
