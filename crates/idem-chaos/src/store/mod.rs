//! The store the gateways share: a SQLite file, or a PostgreSQL, MariaDB or Redis server (or a
//! Redis Cluster) that the run starts for itself on free loopback ports, and crashes and
//! restarts (or fails over) on schedule.
//!
//! The run never touches the machine's own servers (5432, 3306, 6379): other tests use them, and
//! a crash is the point here.

mod mysql;
mod postgres;
mod redis;
mod redis_cluster;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

pub use self::{
    mysql::MysqlServer,
    postgres::PostgresServer,
    redis::RedisServer,
    redis_cluster::{NODE_TIMEOUT as CLUSTER_NODE_TIMEOUT, RedisCluster},
};
use crate::{Error, StoreKind, options::RedisPersistence};

/// The store of a run.
#[derive(Debug)]
pub enum StoreServer {
    /// A SQLite file: the store lives inside the gateways, so restarting it means killing
    /// every gateway and starting them again on the file.
    Sqlite(PathBuf),
    /// A PostgreSQL server of the run's own.
    Postgres(PostgresServer),
    /// A MariaDB server of the run's own.
    Mysql(MysqlServer),
    /// A `redis-server` of the run's own.
    Redis(RedisServer),
    /// A Redis Cluster of the run's own.
    RedisCluster(RedisCluster),
}

impl StoreServer {
    /// Creates the store in `dir` and starts its server, if it has one, ready for gateways. A
    /// cluster's failovers pick their master from `seed`.
    pub async fn start(
        kind: StoreKind,
        dir: &Path,
        redis: RedisPersistence,
        seed: u64,
    ) -> Result<Self, Error> {
        Ok(match kind {
            StoreKind::Sqlite => Self::Sqlite(dir.join("idem.db")),
            StoreKind::Postgres => {
                let server = PostgresServer::start(dir).await?;
                idem_gateway::store::migrate::run(&server.url().parse()?).await?;
                Self::Postgres(server)
            }
            StoreKind::Mysql => {
                let server = MysqlServer::start(dir).await?;
                idem_gateway::store::migrate::run(&server.url().parse()?).await?;
                Self::Mysql(server)
            }
            StoreKind::Redis => Self::Redis(RedisServer::start(dir, redis).await?),
            StoreKind::RedisCluster => {
                Self::RedisCluster(RedisCluster::start(dir, redis, seed).await?)
            }
        })
    }

    /// The gateways' `--store`.
    pub fn url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres(server) => server.url(),
            Self::Mysql(server) => server.url(),
            Self::Redis(server) => server.url(),
            Self::RedisCluster(cluster) => cluster.url(),
        }
    }

    /// The files whose size is the store's size on disk: SQLite's database and its write-ahead
    /// log, PostgreSQL's databases (not its write-ahead log, which it recycles), the store's
    /// database on MariaDB (not InnoDB's redo log, of a fixed size, or its system tablespace),
    /// Redis's files.
    pub fn files(&self) -> Vec<PathBuf> {
        match self {
            Self::Sqlite(path) => ["", "-wal"]
                .iter()
                .map(|suffix| PathBuf::from(format!("{}{suffix}", path.display())))
                .collect(),
            Self::Postgres(server) => vec![server.data().join("base")],
            Self::Mysql(server) => vec![server.database_dir()],
            Self::Redis(server) => vec![server.dir().to_owned()],
            Self::RedisCluster(cluster) => cluster.dirs(),
        }
    }

    /// The server's address; `None` for SQLite, which has no network link, and for a Redis
    /// Cluster, whose nodes tell clients each other's addresses: a proxy in front of one would
    /// not stay in the way.
    pub fn addr(&self) -> Option<SocketAddr> {
        match self {
            Self::Sqlite(_) | Self::RedisCluster(_) => None,
            Self::Postgres(server) => Some(server.addr()),
            Self::Mysql(server) => Some(server.addr()),
            Self::Redis(server) => Some(server.addr()),
        }
    }

    /// The gateways' `--store` when they reach the server at `addr` (a proxy in front of it);
    /// SQLite's file as it is.
    pub fn url_at(&self, addr: SocketAddr) -> String {
        match self {
            Self::Sqlite(_) | Self::RedisCluster(_) => self.url(),
            Self::Postgres(_) => PostgresServer::url_at(addr),
            Self::Mysql(_) => MysqlServer::url_at(addr),
            Self::Redis(_) => RedisServer::url_at(addr),
        }
    }

    /// Stops the server, if any.
    pub async fn stop(&mut self) {
        match self {
            Self::Sqlite(_) => {}
            Self::Postgres(server) => server.stop().await,
            Self::Mysql(server) => server.stop().await,
            Self::Redis(server) => server.stop().await,
            Self::RedisCluster(cluster) => cluster.stop().await,
        }
    }
}
