//! [`RedisOptions`]: how to open a [`RedisStore`](crate::RedisStore).

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use idem_core::ManualClock;
use redis::{ClientTlsConfig, TlsCertificates};

use crate::{Error, KeyPrefix};

/// Which Redis to use.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server (or a primary behind a proxy), by URL.
    Single(String),
    /// The seed nodes of a Redis Cluster, by URL.
    Cluster(Vec<String>),
}

/// How to open a [`RedisStore`](crate::RedisStore): the server or cluster, the key prefix and
/// the timeouts.
///
/// URLs are those of the `redis` crate: `redis://[user:password@]host:port[/db]`, or
/// `rediss://…` for TLS (rustls), which trusts the Mozilla root certificates built into idem
/// unless a [CA file](Self::tls_ca_file) is given. [`from_url`](Self::from_url) reads idem's
/// own URL, which also names the prefix and the certificate files.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_redis::RedisOptions;
///
/// let single = RedisOptions::new("redis://127.0.0.1:6379")
///     .prefix("payments".parse()?)
///     .response_timeout(Duration::from_secs(1));
/// let cluster = RedisOptions::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
/// # drop((single, cluster));
/// # Ok::<(), idem_redis::InvalidPrefix>(())
/// ```
#[derive(Clone)]
pub struct RedisOptions {
    pub(crate) target: Target,
    pub(crate) prefix: KeyPrefix,
    pub(crate) clock: Option<ManualClock>,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) batch_size: usize,
    pub(crate) queue_size: usize,
    pub(crate) lanes: usize,
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) tls_client: Option<(PathBuf, PathBuf)>,
    /// The URL the options were made from, password hidden.
    pub(crate) url: Option<String>,
}

impl RedisOptions {
    /// The most operations one script call carries, unless [`batch_size`](Self::batch_size)
    /// says otherwise: 64.
    pub const DEFAULT_BATCH_SIZE: usize = 64;
    /// The most operations waiting for a script call, unless [`queue_size`](Self::queue_size)
    /// says otherwise: 1024.
    pub const DEFAULT_QUEUE_SIZE: usize = 1024;
    /// How many script calls may be on their way at once on a single server, unless
    /// [`lanes`](Self::lanes) says otherwise: 2.
    pub const DEFAULT_LANES: usize = 2;

    /// One Redis server at `url`, with the prefix `idem`, a connection timeout of 2 seconds, a
    /// response timeout of 5 seconds, batches of up to [64](Self::DEFAULT_BATCH_SIZE) operations
    /// and a queue of [1,024](Self::DEFAULT_QUEUE_SIZE).
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Single(url.into()))
    }

    /// A Redis Cluster, discovered from one or more of its nodes (`redis://host:port` each).
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            prefix: KeyPrefix::default(),
            clock: None,
            connection_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            batch_size: Self::DEFAULT_BATCH_SIZE,
            queue_size: Self::DEFAULT_QUEUE_SIZE,
            lanes: Self::DEFAULT_LANES,
            tls_ca_file: None,
            tls_client: None,
            url: None,
        }
    }

    /// Puts every key and channel under `prefix`, so that several stores can share one Redis.
    #[must_use]
    pub fn prefix(mut self, prefix: KeyPrefix) -> Self {
        self.prefix = prefix;
        self
    }

    /// Sets how long connecting to a server may take.
    #[must_use]
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Sets how long a command may wait for its answer before the store reports itself
    /// unavailable.
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets the most operations one script call carries (64 by default; at least 1).
    ///
    /// The store's calls wait in one queue (on a cluster, one per slot), and the operations that
    /// arrive while a script call is on its way go together in the next one, up to this many
    /// (and up to 1 MiB of keys and arguments): Redis then runs one script for many keys. An
    /// operation that finds no call on its way goes at once, alone. On a single server a batch
    /// spans any keys, so a proxy in front of Redis must send each script call to one server;
    /// on a cluster a batch holds keys of one slot.
    #[must_use]
    pub fn batch_size(mut self, operations: usize) -> Self {
        self.batch_size = operations.max(1);
        self
    }

    /// Sets how many script calls may be on their way at once on a single server
    /// ([2](Self::DEFAULT_LANES) by default; at least 1, at most 16).
    ///
    /// Operations fall into this many lanes by their address (its key's hash), and each lane
    /// has one script call on its way at a time, batching what arrives meanwhile: so two
    /// operations on one address still run in the order they were made, while the lanes'
    /// calls overlap, one running in Redis while another is on the wire or being answered. More
    /// lanes mean smaller batches, so more script calls per key, for Redis and for the store.
    /// A cluster has a lane per slot and ignores this.
    #[must_use]
    pub fn lanes(mut self, lanes: usize) -> Self {
        self.lanes = lanes.clamp(1, 16);
        self
    }

    /// Sets how many operations may wait for the next script call, over all queues (1,024 by
    /// default; at least 1). A caller that finds the queues full waits for room, so a slow
    /// Redis slows its callers instead of queueing without bound.
    #[must_use]
    pub fn queue_size(mut self, operations: usize) -> Self {
        self.queue_size = operations.max(1);
        self
    }

    /// [`queue_size`](Self::queue_size), under its old name.
    #[deprecated(note = "renamed queue_size")]
    #[must_use]
    pub fn queue_capacity(self, operations: usize) -> Self {
        self.queue_size(operations)
    }

    /// Trusts only the CA certificates (PEM) in `path` for `rediss://` servers, instead of the
    /// Mozilla root certificates built into idem. The file is read when the store opens.
    #[must_use]
    pub fn tls_ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.tls_ca_file = Some(path.as_ref().to_owned());
        self
    }

    /// Presents the client certificate in `cert` and its private key in `key` (PEM) to
    /// `rediss://` servers that ask for one (`tls-auth-clients yes`). The files are read when
    /// the store opens.
    #[must_use]
    pub fn tls_client_cert(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Self {
        self.tls_client = Some((cert.as_ref().to_owned(), key.as_ref().to_owned()));
        self
    }

    /// The URL these options were made from, password hidden: for messages and logs.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// The prefix of the store's keys and channels.
    pub fn key_prefix(&self) -> &KeyPrefix {
        &self.prefix
    }

    /// The certificate files, read: `None` when none is set (TLS, if the URL asks for it,
    /// then trusts the built-in roots).
    pub(crate) fn certificates(&self) -> Result<Option<TlsCertificates>, Error> {
        if self.tls_ca_file.is_none() && self.tls_client.is_none() {
            return Ok(None);
        }
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| Error::ReadCertificate {
                path: path.clone(),
                source,
            })
        };
        let root_cert = self.tls_ca_file.as_ref().map(read).transpose()?;
        let client_tls = match &self.tls_client {
            Some((cert, key)) => Some(ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            None => None,
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// **For tests only.** Reads time from `clock` instead of the server's `TIME`, so that a
    /// test moves time by hand and checks exact durations.
    ///
    /// The scripts then take "now" from the clock and decide by each record's `expires_at`, as
    /// they always do. Redis still removes keys in real time, so under a manual clock every key
    /// is given 60 seconds of real time beyond its record's expiry, and
    /// [`purge_expired`](idem_core::Store::purge_expired) scans the prefix for records the clock
    /// has expired (in production Redis removes them itself and there is nothing to purge).
    /// Processes sharing a store must share the clock.
    #[must_use]
    pub fn manual_clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry a password: show the shape only.
        let target = match &self.target {
            Target::Single(_) => "single server".to_owned(),
            Target::Cluster(nodes) => format!("cluster with {} seed nodes", nodes.len()),
        };
        f.debug_struct("RedisOptions")
            .field("target", &target)
            .field("prefix", &self.prefix)
            .field("manual_clock", &self.clock.is_some())
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("batch_size", &self.batch_size)
            .field("queue_size", &self.queue_size)
            .field("lanes", &self.lanes)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_client", &self.tls_client)
            .field("url", &self.url)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_and_the_queue_are_bounded_by_default_and_never_empty() {
        let options = RedisOptions::new("redis://127.0.0.1:6379");
        assert_eq!((options.batch_size, options.queue_size), (64, 1024));
        let options = options.batch_size(8).queue_size(100);
        assert_eq!((options.batch_size, options.queue_size), (8, 100));
        let options = options.batch_size(0).queue_size(0);
        assert_eq!((options.batch_size, options.queue_size), (1, 1));
    }

    #[test]
    #[allow(deprecated)]
    fn the_old_name_still_sets_the_queue_size() {
        let options = RedisOptions::new("redis://127.0.0.1:6379").queue_capacity(100);
        assert_eq!(options.queue_size, 100);
    }
}
