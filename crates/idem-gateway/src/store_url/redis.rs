//! [`RedisUrl`]: `redis://…` and `redis+cluster://…`, a [`RedisStore`].

use std::{fmt, str::FromStr};

use idem_redis::{KeyPrefix, RedisOptions, RedisStore};

use super::parts::Parts;
use crate::Error;

/// What an unknown parameter's error says is known.
const KNOWN: &str = "idem takes prefix";

/// `redis://[user[:password]@]host[:port][/db][?prefix=P]`, one Redis server, or
/// `redis+cluster://[user[:password]@]host:port[,host:port…][?prefix=P]`, a Redis Cluster found
/// from one or more of its nodes (the user info applies to every node): a [`RedisStore`].
///
/// `prefix` puts every key and channel of the store under `P` (default `idem`), so that several
/// stores share one Redis. `rediss://` (TLS) is refused: this build has no TLS.
///
/// # Examples
///
/// ```
/// use idem_gateway::StoreUrl;
///
/// let StoreUrl::Redis(url) = "redis+cluster://10.0.0.1:7000,10.0.0.2:7000?prefix=pay".parse()?
/// else {
///     unreachable!()
/// };
/// assert!(url.is_cluster());
/// assert_eq!(url.nodes(), ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
/// assert_eq!(url.prefix().as_str(), "pay");
/// # Ok::<(), idem_gateway::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// As given, password hidden.
    shown: String,
    /// `redis://…` of the server, or of each seed node of the cluster.
    nodes: Vec<String>,
    cluster: bool,
    prefix: KeyPrefix,
}

impl RedisUrl {
    pub(super) fn parse(url: &str) -> Result<Self, Error> {
        let mut parts = Parts::split(url)?;
        let prefix = parts.take("prefix", KeyPrefix::from_str)?;
        parts.refuse_unknown(|_| false, KNOWN)?;
        let cluster = parts.scheme == "redis+cluster";
        let nodes = if cluster {
            if !matches!(parts.path, "" | "/") {
                return Err(parts.error(
                    "a Redis Cluster has only database 0: nothing goes after the nodes but \
                     `?prefix=…`",
                ));
            }
            let nodes: Vec<&str> = parts.hosts.split(',').collect();
            if nodes.iter().any(|node| node.is_empty()) {
                return Err(parts.error(
                    "expected redis+cluster://HOST:PORT[,HOST:PORT…], without empty nodes",
                ));
            }
            nodes
                .into_iter()
                .map(|node| format!("redis://{}{node}", parts.credentials()))
                .collect()
        } else {
            if parts.hosts.is_empty() {
                return Err(parts.error("no host after redis://"));
            }
            if parts.hosts.contains(',') {
                return Err(parts.error(
                    "one host after redis://; for a Redis Cluster, use \
                     redis+cluster://HOST:PORT[,HOST:PORT…]",
                ));
            }
            let db = parts.path.trim_start_matches('/');
            if !db.bytes().all(|b| b.is_ascii_digit()) {
                return Err(parts.error(
                    "the path of a redis:// URL is a database number, e.g. redis://HOST:6379/0",
                ));
            }
            vec![format!(
                "redis://{}{}{}",
                parts.credentials(),
                parts.hosts,
                parts.path
            )]
        };
        Ok(Self {
            shown: parts.shown,
            nodes,
            cluster,
            prefix: prefix.unwrap_or_default(),
        })
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The server's URL, or the cluster's seed nodes', as the `redis` crate takes them.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The prefix of the store's keys and channels.
    pub fn prefix(&self) -> &KeyPrefix {
        &self.prefix
    }

    /// The store's options.
    pub fn options(&self) -> RedisOptions {
        let options = if self.cluster {
            RedisOptions::cluster(self.nodes.iter().cloned())
        } else {
            RedisOptions::new(self.nodes[0].clone())
        };
        options.prefix(self.prefix.clone())
    }

    /// Connects and loads the store's scripts.
    pub async fn open(&self) -> Result<RedisStore, Error> {
        RedisStore::open_with(self.options())
            .await
            .map_err(|source| Error::OpenStore {
                url: self.to_string(),
                source: source.into(),
            })
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl").field(&self.shown).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> RedisUrl {
        RedisUrl::parse(url).unwrap()
    }

    fn error(url: &str) -> String {
        RedisUrl::parse(url).unwrap_err().to_string()
    }

    #[test]
    fn one_server_or_a_cluster() {
        let one = parse("redis://:pw@cache:6380/2?prefix=pay:v1");
        assert!(!one.is_cluster());
        assert_eq!(one.nodes(), ["redis://:pw@cache:6380/2"]);
        assert_eq!(one.prefix().as_str(), "pay:v1");
        assert_eq!(one.to_string(), "redis://:***@cache:6380/2?prefix=pay:v1");

        let cluster = parse("redis+cluster://app:pw@a:7000,b:7001/");
        assert!(cluster.is_cluster());
        assert_eq!(
            cluster.nodes(),
            ["redis://app:pw@a:7000", "redis://app:pw@b:7001"]
        );
        assert_eq!(cluster.prefix().as_str(), "idem");
        assert_eq!(
            format!("{cluster:?}"),
            r#"RedisUrl("redis+cluster://app:***@a:7000,b:7001/")"#
        );
    }

    #[test]
    fn bad_urls_are_explained_in_one_line() {
        assert_eq!(
            error("redis://"),
            "invalid store URL `redis://`: no host after redis://"
        );
        assert_eq!(
            error("redis://h/x"),
            "invalid store URL `redis://h/x`: the path of a redis:// URL is a database number, \
             e.g. redis://HOST:6379/0"
        );
        assert_eq!(
            error("redis://a:1,b:2"),
            "invalid store URL `redis://a:1,b:2`: one host after redis://; for a Redis Cluster, \
             use redis+cluster://HOST:PORT[,HOST:PORT…]"
        );
        assert_eq!(
            error("redis+cluster://a:1,,b:2"),
            "invalid store URL `redis+cluster://a:1,,b:2`: expected \
             redis+cluster://HOST:PORT[,HOST:PORT…], without empty nodes"
        );
        assert_eq!(
            error("redis+cluster://a:1/3"),
            "invalid store URL `redis+cluster://a:1/3`: a Redis Cluster has only database 0: \
             nothing goes after the nodes but `?prefix=…`"
        );
        assert_eq!(
            error("redis://h?prefix={x}"),
            "invalid store URL `redis://h?prefix={x}`: `prefix={x}`: a key prefix is 1 to 64 \
             ASCII letters, digits, '-', '_', '.' or ':'"
        );
        assert_eq!(
            error("redis://h?protocol=resp3"),
            "invalid store URL `redis://h?protocol=resp3`: unknown parameter `protocol` (idem \
             takes prefix)"
        );
    }
}
