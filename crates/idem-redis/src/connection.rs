//! The command connection: one server through a `ConnectionManager`, or a Redis Cluster.

use std::time::Duration;

use redis::{
    Client, Cmd, ErrorKind, IntoConnectionInfo, ProtocolVersion, RedisError, RedisResult, Script,
    ServerErrorKind, Value,
    aio::{AsyncPushSender, ConnectionLike as _, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterClientBuilder},
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
    from_redis_value, from_redis_value_ref,
};

use crate::{Error, RedisOptions, options::Target};

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: usize = 1_000;

/// Where commands go. Clones share the connections.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Connects as `options` say.
    pub(crate) async fn open(options: &RedisOptions) -> Result<Self, Error> {
        match &options.target {
            Target::Single(url) => {
                let client = client(url.as_str(), options)?;
                connect_single(client, manager_config(options))
                    .await
                    .map(Self::Single)
            }
            Target::Cluster(nodes) => connect_cluster(cluster_client(nodes, options)?)
                .await
                .map(Self::Cluster),
        }
    }

    /// Sends `command` and returns its reply as it is, errors nested in it included; an error
    /// answered for the whole command is an `Err`. A cluster routes the command by its first key.
    pub(crate) async fn send(&self, command: &Cmd) -> RedisResult<Value> {
        let reply = match self {
            Self::Single(connection) => connection.clone().req_packed_command(command).await,
            Self::Cluster(connection) => connection.clone().req_packed_command(command).await,
        };
        match reply? {
            Value::ServerError(error) => Err(error.into()),
            reply => Ok(reply),
        }
    }

    /// Loads a script on the server, or on every node of a cluster.
    pub(crate) async fn load(&self, script: &Script) -> RedisResult<()> {
        match self {
            Self::Single(connection) => script.load_async(&mut connection.clone()).await,
            Self::Cluster(connection) => script.load_async(&mut connection.clone()).await,
        }
        .map(drop)
    }

    /// Sends a command; a cluster routes it as the command's kind says (`PING` goes to every
    /// master).
    pub(crate) async fn query(&self, command: &Cmd) -> RedisResult<Value> {
        match self {
            Self::Single(connection) => command.query_async(&mut connection.clone()).await,
            Self::Cluster(connection) => command.query_async(&mut connection.clone()).await,
        }
    }

    /// The command that announces a change on a channel: sharded pub/sub on a cluster, so that
    /// the message stays on the shard that holds the key instead of reaching every node.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self {
            Self::Single(_) => "PUBLISH",
            Self::Cluster(_) => "SPUBLISH",
        }
    }

    /// The servers that hold records, in a stable order: the server, or every master of a
    /// cluster by address (`CLUSTER SLOTS`).
    pub(crate) async fn shards(&self) -> RedisResult<Vec<Shard>> {
        match self {
            Self::Single(_) => Ok(vec![Shard::Server]),
            Self::Cluster(connection) => Ok(masters(&mut connection.clone())
                .await?
                .into_iter()
                .map(|(host, port)| Shard::Master { host, port })
                .collect()),
        }
    }

    /// One `SCAN` step on `shard` from `cursor`: the next cursor (0 at the end) and the keys of
    /// type `key_type` (`hash`, `list`) found that match `pattern`.
    pub(crate) async fn scan_step(
        &self,
        shard: &Shard,
        cursor: u64,
        pattern: &str,
        key_type: &str,
    ) -> RedisResult<(u64, Vec<String>)> {
        let reply = self
            .send_to(shard, &scan_command(cursor, pattern, key_type))
            .await?;
        Ok(from_redis_value(reply)?)
    }

    /// Sends `command` to `shard` (a command without keys, or whose keys it holds), and returns
    /// its reply as [`send`](Self::send) does.
    pub(crate) async fn send_to(&self, shard: &Shard, command: &Cmd) -> RedisResult<Value> {
        let reply = match (self, shard) {
            (Self::Cluster(connection), Shard::Master { host, port }) => {
                let node = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                connection
                    .clone()
                    .route_command(command.clone(), RoutingInfo::SingleNode(node))
                    .await?
            }
            _ => return self.send(command).await,
        };
        match reply {
            Value::ServerError(error) => Err(error.into()),
            reply => Ok(reply),
        }
    }

    /// Sends `command`, an `EVALSHA` of `script`, to `shard`, or where its first key lives
    /// (`None`), loading the script first when the server lacks it (after a restart or a
    /// failover).
    pub(crate) async fn run_script(
        &self,
        script: &Script,
        command: &Cmd,
        shard: Option<&Shard>,
    ) -> RedisResult<Value> {
        let send = async || match shard {
            Some(shard) => self.send_to(shard, command).await,
            None => self.send(command).await,
        };
        match send().await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(script).await?;
                send().await
            }
            result => result,
        }
    }
}

/// A server that holds records: the one server, or a master of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shard {
    Server,
    Master { host: String, port: u16 },
}

fn scan_command(cursor: u64, pattern: &str, key_type: &str) -> Cmd {
    let mut command = redis::cmd("SCAN");
    command
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(SCAN_COUNT)
        .arg("TYPE")
        .arg(key_type);
    command
}

/// The address of every master, from `CLUSTER SLOTS`: `[start, end, [host, port, …], replicas…]`.
async fn masters(connection: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(connection)
        .await?;
    let unexpected = || RedisError::from((ErrorKind::UnexpectedReturnType, "CLUSTER SLOTS"));
    let Value::Array(ranges) = reply else {
        return Err(unexpected());
    };
    let mut masters = Vec::new();
    for range in &ranges {
        let Value::Array(range) = range else {
            return Err(unexpected());
        };
        let Some(Value::Array(master)) = range.get(2) else {
            return Err(unexpected());
        };
        let [host, port, ..] = master.as_slice() else {
            return Err(unexpected());
        };
        masters.push((from_redis_value_ref(host)?, from_redis_value_ref(port)?));
    }
    masters.sort();
    masters.dedup();
    Ok(masters)
}

/// The pub/sub connection: RESP3, so that messages arrive as pushes on `on_push` while the
/// connection takes commands, and separate from the command connection.
pub(crate) enum Subscriber {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Subscriber {
    /// Connects as `options` say, handing every push (messages, disconnections) to `on_push`.
    pub(crate) async fn open(
        options: &RedisOptions,
        on_push: impl AsyncPushSender,
    ) -> Result<Self, Error> {
        match &options.target {
            Target::Single(url) => {
                let info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(Error::Settings)?;
                let resp3 = info
                    .redis_settings()
                    .clone()
                    .set_protocol(ProtocolVersion::RESP3);
                let client = client(info.set_redis_settings(resp3), options)?;
                let config = manager_config(options).set_push_sender(on_push);
                connect_single(client, config).await.map(Self::Single)
            }
            Target::Cluster(nodes) => {
                let builder = cluster_client(nodes, options)?
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(on_push);
                connect_cluster(builder).await.map(Self::Cluster)
            }
        }
    }

    /// Subscribes to `channels` and waits for Redis to confirm.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Self::Single(connection) => connection.subscribe(channels).await,
            Self::Cluster(connection) => {
                per_channel(connection, channels, ClusterConnection::ssubscribe).await
            }
        }
    }

    /// Unsubscribes from `channels`.
    pub(crate) async fn unsubscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Self::Single(connection) => connection.unsubscribe(channels).await,
            Self::Cluster(connection) => {
                per_channel(connection, channels, ClusterConnection::sunsubscribe).await
            }
        }
    }
}

/// Runs `call` for each of `channels` at once, each on its own clone of `connection`: a sharded
/// (un)subscription names channels of one slot, so a cluster takes one call per channel.
async fn per_channel(
    connection: &ClusterConnection,
    channels: &[String],
    call: impl AsyncFn(&mut ClusterConnection, String) -> RedisResult<()>,
) -> RedisResult<()> {
    let call = &call;
    let calls = channels.iter().map(|channel| {
        let mut connection = connection.clone();
        async move { call(&mut connection, channel.clone()).await }
    });
    futures_util::future::try_join_all(calls).await.map(drop)
}

/// Connects to one server through a connection manager.
async fn connect_single(
    client: Client,
    config: ConnectionManagerConfig,
) -> Result<ConnectionManager, Error> {
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(Error::Connect)
}

/// Connects to a cluster as `builder` says.
async fn connect_cluster(builder: ClusterClientBuilder) -> Result<ClusterConnection, Error> {
    builder
        .build()
        .map_err(Error::Settings)?
        .get_async_connection()
        .await
        .map_err(Error::Connect)
}

/// A lost connection is retried twice, quickly, before the waiting calls fail: while Redis is
/// down, callers hear so within about the connection timeout instead of queueing; the next
/// call tries again.
fn manager_config(options: &RedisOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connection_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
}

/// A client of one server, with the certificate files of `options` if it has any.
fn client(info: impl IntoConnectionInfo, options: &RedisOptions) -> Result<Client, Error> {
    match options.certificates()? {
        Some(certificates) => Client::build_with_tls(info, certificates),
        None => Client::open(info),
    }
    .map_err(Error::Settings)
}

fn cluster_client(nodes: &[String], options: &RedisOptions) -> Result<ClusterClientBuilder, Error> {
    let builder = ClusterClient::builder(nodes.iter().map(String::as_str))
        .connection_timeout(options.connection_timeout)
        .response_timeout(options.response_timeout);
    Ok(match options.certificates()? {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    })
}
