//! [`RedisOptions::from_url`]: `redis://…`, `rediss://…` and their `+cluster` forms.

use std::{path::PathBuf, str::FromStr};

use idem_core::store_url::{InvalidStoreUrl, UrlParts, count};

use crate::{KeyPrefix, RedisOptions};

/// What an unknown parameter's error says is known.
const KNOWN: &str =
    "idem takes prefix, batch_size, queue_size, lanes, and cacert, cert and key with rediss://";

impl RedisOptions {
    /// `redis://[user[:password]@]host[:port][/db][?parameters]`, one Redis server, or
    /// `redis+cluster://[user[:password]@]host:port[,host:port…][?parameters]`, a Redis Cluster
    /// found from one or more of its nodes (the user info applies to every node).
    /// `rediss://` and `rediss+cluster://` are the same over TLS (rustls).
    ///
    /// - `prefix=P` puts every key and channel of the store under `P` (default `idem`), so that
    ///   several stores share one Redis;
    /// - `batch_size`: the most operations one script call carries (default 64,
    ///   [`batch_size`](Self::batch_size)); `queue_size`: the most operations waiting for one
    ///   (default 1024, [`queue_size`](Self::queue_size)). Each a whole number, at least 1.
    ///   `queue_size` was once `queue`: that spelling is still read, with a warning, and a URL
    ///   that gives both is refused;
    /// - `lanes`: how many script calls may be on their way at once on a single server (default
    ///   2, [`lanes`](Self::lanes)), a whole number from 1 to 16; a cluster ignores it;
    /// - `cacert=PATH` (TLS only): trust only the CA certificates in this PEM file, instead of
    ///   the Mozilla root certificates built into idem ([`tls_ca_file`](Self::tls_ca_file));
    /// - `cert=PATH&key=PATH` (TLS only): a client certificate and its key, for servers that
    ///   ask for one ([`tls_client_cert`](Self::tls_client_cert)).
    ///
    /// The files are read when the store opens.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_redis::RedisOptions;
    ///
    /// let options = RedisOptions::from_url(
    ///     "rediss+cluster://:pw@10.0.0.1:7000,10.0.0.2:7000?prefix=pay&cacert=/etc/redis/ca.pem",
    /// )?;
    /// assert!(options.is_cluster());
    /// assert_eq!(options.key_prefix().as_str(), "pay");
    /// assert_eq!(options.url(), Some(
    ///     "rediss+cluster://:***@10.0.0.1:7000,10.0.0.2:7000?prefix=pay&cacert=/etc/redis/ca.pem"
    /// ));
    /// # Ok::<(), idem_core::store_url::InvalidStoreUrl>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, InvalidStoreUrl> {
        let mut parts = UrlParts::split(url)?;
        let (tls, cluster) = match parts.scheme() {
            "redis" => (false, false),
            "redis+cluster" => (false, true),
            "rediss" => (true, false),
            "rediss+cluster" => (true, true),
            _ => {
                return Err(parts.error(
                    "expected redis://…, rediss://…, redis+cluster://… or rediss+cluster://…",
                ));
            }
        };
        let prefix = parts.take("prefix", KeyPrefix::from_str)?;
        let batch_size = parts.take("batch_size", count::<usize>)?;
        let queue_size = parts.take_renamed("queue_size", "queue", count::<usize>)?;
        let lanes = parts.take("lanes", count::<usize>)?;
        if lanes.is_some_and(|lanes| lanes > 16) {
            return Err(parts.error("lanes is at most 16"));
        }
        let ca = parts.take("cacert", PathBuf::from_str)?;
        let cert = parts.take("cert", PathBuf::from_str)?;
        let key = parts.take("key", PathBuf::from_str)?;
        parts.refuse_unknown(|_| false, KNOWN)?;
        if !tls && (ca.is_some() || cert.is_some() || key.is_some()) {
            return Err(parts.error(
                "cacert, cert and key are TLS settings: use rediss:// or rediss+cluster://",
            ));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        let options = if cluster {
            if !matches!(parts.path(), "" | "/") {
                return Err(parts.error(
                    "a Redis Cluster has only database 0: nothing goes after the nodes but \
                     `?parameters`",
                ));
            }
            let nodes: Vec<&str> = parts.hosts().split(',').collect();
            if nodes.iter().any(|node| node.is_empty()) {
                return Err(parts.error(
                    "expected redis+cluster://HOST:PORT[,HOST:PORT…], without empty nodes",
                ));
            }
            Self::cluster(
                nodes
                    .into_iter()
                    .map(|node| format!("{scheme}://{}{node}", parts.credentials())),
            )
        } else {
            if parts.hosts().is_empty() {
                return Err(parts.error("no host after redis://"));
            }
            if parts.hosts().contains(',') {
                return Err(parts.error(
                    "one host after redis://; for a Redis Cluster, use \
                     redis+cluster://HOST:PORT[,HOST:PORT…]",
                ));
            }
            let db = parts.path().trim_start_matches('/');
            if !db.bytes().all(|b| b.is_ascii_digit()) {
                return Err(parts.error(
                    "the path of a redis:// URL is a database number, e.g. redis://HOST:6379/0",
                ));
            }
            Self::new(format!(
                "{scheme}://{}{}{}",
                parts.credentials(),
                parts.hosts(),
                parts.path()
            ))
        };
        let mut options = options.prefix(prefix.unwrap_or_default());
        if let Some(operations) = batch_size {
            options = options.batch_size(operations);
        }
        if let Some(operations) = queue_size {
            options = options.queue_size(operations);
        }
        if let Some(lanes) = lanes {
            options = options.lanes(lanes);
        }
        if let Some(ca) = ca {
            options = options.tls_ca_file(ca);
        }
        options = match (cert, key) {
            (Some(cert), Some(key)) => options.tls_client_cert(cert, key),
            (None, None) => options,
            _ => return Err(parts.error("cert and key go together: give both or neither")),
        };
        options.url = Some(parts.shown().to_owned());
        Ok(options)
    }
}

impl FromStr for RedisOptions {
    type Err = InvalidStoreUrl;

    /// [`RedisOptions::from_url`].
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::from_url(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Target;

    fn parse(url: &str) -> RedisOptions {
        RedisOptions::from_url(url).unwrap()
    }

    fn error(url: &str) -> String {
        RedisOptions::from_url(url).unwrap_err().to_string()
    }

    fn nodes(options: &RedisOptions) -> Vec<String> {
        match &options.target {
            Target::Single(url) => vec![url.clone()],
            Target::Cluster(nodes) => nodes.clone(),
        }
    }

    #[test]
    fn one_server_or_a_cluster() {
        let one = parse("redis://:pw@cache:6380/2?prefix=pay:v1");
        assert!(!one.is_cluster());
        assert_eq!(nodes(&one), ["redis://:pw@cache:6380/2"]);
        assert_eq!(one.key_prefix().as_str(), "pay:v1");
        assert_eq!(one.url(), Some("redis://:***@cache:6380/2?prefix=pay:v1"));
        assert_eq!((one.batch_size, one.queue_size), (64, 1024));

        let cluster = parse("redis+cluster://app:pw@a:7000,b:7001/");
        assert!(cluster.is_cluster());
        assert_eq!(
            nodes(&cluster),
            ["redis://app:pw@a:7000", "redis://app:pw@b:7001"]
        );
        assert_eq!(cluster.key_prefix().as_str(), "idem");
        let shown = format!("{cluster:?}");
        assert!(!shown.contains("pw@"), "{shown}");
    }

    #[test]
    fn batches_and_the_queue_are_set_by_the_url() {
        let one = parse("redis://cache?batch_size=16&queue_size=256&prefix=p");
        assert_eq!((one.batch_size, one.queue_size), (16, 256));
        assert_eq!(one.lanes, RedisOptions::DEFAULT_LANES);
        assert_eq!(parse("redis://cache?lanes=4").lanes, 4);
        assert_eq!(parse("redis://cache?lanes=16").lanes, 16);
        for refused in ["redis://cache?lanes=0", "redis://cache?lanes=x"] {
            assert!(RedisOptions::from_url(refused).is_err(), "{refused}");
        }
        assert_eq!(nodes(&one), ["redis://cache"]);
        let cluster = parse("rediss+cluster://a:7000?queue_size=4096");
        assert_eq!((cluster.batch_size, cluster.queue_size), (64, 4096));
    }

    #[test]
    fn the_old_spelling_of_queue_size_is_still_read() {
        let new = parse("redis://cache?queue_size=256");
        let old = parse("redis://cache?queue=256");
        assert_eq!((new.queue_size, old.queue_size), (256, 256));
        assert_eq!(old.url(), Some("redis://cache?queue=256"));
        assert_eq!(
            error("redis://cache?queue=8&queue_size=16"),
            "invalid store URL `redis://cache?queue=8&queue_size=16`: `queue_size` and its old \
             spelling `queue` are both given: keep `queue_size`"
        );
        assert_eq!(
            error("redis://h?queue=lots"),
            "invalid store URL `redis://h?queue=lots`: `queue=lots`: expected a whole number"
        );
    }

    #[test]
    fn tls_urls_keep_their_scheme_and_name_their_files() {
        let one = parse("rediss://cache:6380?cacert=/etc/ca.pem&cert=/etc/c.pem&key=/etc/k.pem");
        assert_eq!(nodes(&one), ["rediss://cache:6380"]);
        assert_eq!(one.tls_ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            one.tls_client,
            Some((PathBuf::from("/etc/c.pem"), PathBuf::from("/etc/k.pem")))
        );
        let cluster = parse("rediss+cluster://:pw@a:7000,b:7001");
        assert_eq!(
            nodes(&cluster),
            ["rediss://:pw@a:7000", "rediss://:pw@b:7001"]
        );
        assert_eq!(cluster.tls_ca_file, None);
    }

    #[test]
    fn a_certificate_file_that_cannot_be_read_is_named() {
        let options = parse("rediss://cache?cacert=/nonexistent/ca.pem");
        let error = options.certificates().unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot read the TLS file /nonexistent/ca.pem"
        );
        let crate::Error::ReadCertificate { source, .. } = error else {
            panic!("expected ReadCertificate");
        };
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
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
             nothing goes after the nodes but `?parameters`"
        );
        assert_eq!(
            error("redis://h?prefix={x}"),
            "invalid store URL `redis://h?prefix={x}`: `prefix={x}`: a key prefix is 1 to 64 \
             ASCII letters, digits, '-', '_', '.' or ':'"
        );
        assert_eq!(
            error("redis://h?protocol=resp3"),
            "invalid store URL `redis://h?protocol=resp3`: unknown parameter `protocol` (idem \
             takes prefix, batch_size, queue_size, lanes, and cacert, cert and key with \
             rediss://)"
        );
        assert_eq!(
            error("redis://h?lanes=17"),
            "invalid store URL `redis://h?lanes=17`: lanes is at most 16"
        );
        assert_eq!(
            error("redis://h?batch_size=0"),
            "invalid store URL `redis://h?batch_size=0`: `batch_size=0`: expected 1 or more"
        );
        assert_eq!(
            error("redis://h?queue_size=lots"),
            "invalid store URL `redis://h?queue_size=lots`: `queue_size=lots`: expected a whole \
             number"
        );
        assert_eq!(
            error("redis://:pw@h?cacert=/ca.pem"),
            "invalid store URL `redis://:***@h?cacert=/ca.pem`: cacert, cert and key are TLS \
             settings: use rediss:// or rediss+cluster://"
        );
        assert_eq!(
            error("rediss://h?cert=/c.pem"),
            "invalid store URL `rediss://h?cert=/c.pem`: cert and key go together: give both or \
             neither"
        );
        assert_eq!(
            error("valkey://h"),
            "invalid store URL `valkey://h`: expected redis://…, rediss://…, redis+cluster://… \
             or rediss+cluster://…"
        );
    }
}
